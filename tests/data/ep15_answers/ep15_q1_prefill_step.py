"""one extra (prefill) step per request"""
import heapq
import math


def continuous_steps(lengths, batch):
    free_at = [0] * min(batch, len(lengths))
    for length in lengths:
        heapq.heappush(free_at, heapq.heappop(free_at) + length + 1)
    return max(free_at)
