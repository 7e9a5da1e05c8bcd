"""uses hash() of the page list directly"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        for i in range(len(prompt) // page_size):
            h = hash(prompt[:(i + 1) * page_size])
            if h in seen:
                hits += page_size
            seen.add(h)
    return hits
