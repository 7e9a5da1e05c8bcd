"""returns the count as text"""
import heapq
import math


def continuous_steps(lengths, batch):
    free_at = [0] * min(batch, len(lengths))
    for length in lengths:
        heapq.heappush(free_at, heapq.heappop(free_at) + length)
    return f"{max(free_at)} steps"
