"""vLLM-style: at most len - 1 prompt tokens can be hits (the last token is recomputed)"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    seen, hits = set(), 0
    for prompt in prompts:
        parent, found, mine = None, 0, []
        for i in range(len(prompt) // page_size):
            parent = page_hash(parent, prompt[i * page_size:(i + 1) * page_size])
            mine.append(parent)
        for h in mine:
            if h not in seen:
                break
            found += 1
        found = min(found, (len(prompt) - 1) // page_size)
        hits += found * page_size
        seen.update(mine)
    return hits
