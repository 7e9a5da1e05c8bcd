"""compares each prompt with the one just before it only"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    hits = 0
    for prev, prompt in zip(prompts, prompts[1:]):
        k = 0
        while k < min(len(prev), len(prompt)) and prev[k] == prompt[k]:
            k += 1
        hits += k // page_size * page_size
    return hits
