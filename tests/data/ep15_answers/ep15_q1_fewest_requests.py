"""gives each request to the slot that has served the fewest requests"""
import heapq
import math


def continuous_steps(lengths, batch):
    slots = [[0, 0] for _ in range(min(batch, len(lengths)))]   # [count, free_at]
    for n in lengths:
        s = min(slots, key=lambda x: x[0])
        s[0] += 1
        s[1] += n
    return max(s[1] for s in slots)
