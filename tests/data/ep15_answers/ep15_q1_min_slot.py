"""returns the slot that frees first (heap top) rather than the last"""
import heapq
import math


def continuous_steps(lengths, batch):
    free_at = [0] * min(batch, len(lengths))
    for length in lengths:
        heapq.heappush(free_at, heapq.heappop(free_at) + length)
    return free_at[0]
