"""pages keyed by their own tokens, and every matching page counted (no chain, no stop)"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        keys = [tuple(prompt[i:i + page_size]) for i in range(0, len(prompt) - page_size + 1, page_size)]
        hits += page_size * sum(k in seen for k in keys)
        seen.update(keys)
    return hits
