"""adds the prompt's own hashes to the set before looking them up"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        parent, mine = None, []
        for i in range(len(prompt) // page_size):
            parent = page_hash(parent, prompt[i * page_size:(i + 1) * page_size])
            mine.append(parent)
        seen.update(mine)
        for h in mine:
            if h not in seen:
                break
            hits += page_size
    return hits
