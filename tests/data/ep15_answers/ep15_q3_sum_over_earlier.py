"""adds the pages matched against EACH earlier prompt (a page shared by three counted twice)"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    total = 0
    for n, p in enumerate(prompts):
        for q in prompts[:n]:
            k = 0
            while k < min(len(p), len(q)) and p[k] == q[k]:
                k += 1
            total += k // page_size * page_size
    return total
