"""adds only the pages that were hits to the cache (misses never cached)"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for n, prompt in enumerate(prompts):
        parent = None
        for i in range(len(prompt) // page_size):
            parent = page_hash(parent, prompt[i * page_size:(i + 1) * page_size])
            if parent in seen:
                hits += page_size
            elif n == 0:
                seen.add(parent)
            else:
                break
    return hits
