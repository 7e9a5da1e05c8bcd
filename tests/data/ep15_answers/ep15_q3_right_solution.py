"""right: the solution"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        parent, matching = None, True
        for i in range(len(prompt) // page_size):
            parent = page_hash(parent, prompt[i * page_size:(i + 1) * page_size])
            if matching and parent in seen:
                hits += page_size
            else:
                matching = False
            seen.add(parent)
    return hits
