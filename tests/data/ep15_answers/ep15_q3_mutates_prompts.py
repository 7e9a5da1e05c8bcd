"""pops the tokens it has hashed off the caller's lists"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        parent, matching = None, True
        while len(prompt) >= page_size:
            page = [prompt.pop(0) for _ in range(page_size)]
            parent = page_hash(parent, page)
            if matching and parent in seen:
                hits += page_size
            else:
                matching = False
            seen.add(parent)
    return hits
