"""pages keyed by their own tokens (no chain)"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        matching = True
        for i in range(len(prompt) // page_size):
            key = tuple(prompt[i * page_size:(i + 1) * page_size])
            if matching and key in seen:
                hits += page_size
            else:
                matching = False
            seen.add(key)
    return hits
