"""counts a matching partial last page as a whole page_size"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        parent, matching = None, True
        for i in range(0, len(prompt), page_size):
            parent = page_hash(parent, prompt[i:i + page_size])
            if matching and parent in seen:
                hits += page_size
            else:
                matching = False
            seen.add(parent)
    return hits
