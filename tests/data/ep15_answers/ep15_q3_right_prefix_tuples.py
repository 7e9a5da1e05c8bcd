"""right: a page's key is the tuple of the whole prefix up to its end"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        keys = [tuple(prompt[:end]) for end in range(page_size, len(prompt) + 1, page_size)]
        for key in keys:
            if key not in seen:
                break
            hits += page_size
        seen.update(keys)
    return hits
