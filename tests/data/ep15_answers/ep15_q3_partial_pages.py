"""counts the partial last page too (its tokens)"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        parent, matching = None, True
        for i in range(0, len(prompt), page_size):
            chunk = prompt[i:i + page_size]
            parent = page_hash(parent, chunk)
            if matching and parent in seen:
                hits += len(chunk)
            else:
                matching = False
            seen.add(parent)
    return hits
