"""compares each prompt with the first one only"""
from gpucourse.checks.ep15 import page_hash


def prefix_hits(prompts, page_size):
    def hashes(prompt):
        out, parent = [], None
        for i in range(len(prompt) // page_size):
            parent = page_hash(parent, prompt[i * page_size:(i + 1) * page_size])
            out.append(parent)
        return out
    first = set(hashes(prompts[0]))
    hits = 0
    for prompt in prompts[1:]:
        for h in hashes(prompt):
            if h not in first:
                break
            hits += page_size
    return hits
