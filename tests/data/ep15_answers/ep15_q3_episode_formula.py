"""the episode's (n - 1)·⌊P/S⌋·S with P the prefix common to all prompts"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    k = 0
    while all(len(p) > k for p in prompts) and len({p[k] for p in prompts}) == 1:
        k += 1
    return (len(prompts) - 1) * (k // page_size) * page_size
