"""right: counts every chained hash found (no early stop needed: a chain cannot match after a miss)"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        parent, mine = None, []
        for i in range(0, len(prompt) - page_size + 1, page_size):
            parent = page_hash(parent, prompt[i:i + page_size])
            mine.append(parent)
        hits += page_size * sum(h in seen for h in mine)
        seen |= set(mine)
    return hits
