"""longest common prefix in tokens, not rounded to pages"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    total = 0
    for n, p in enumerate(prompts):
        best = 0
        for q in prompts[:n]:
            k = 0
            while k < min(len(p), len(q)) and p[k] == q[k]:
                k += 1
            best = max(best, k)
        total += best
    return total
