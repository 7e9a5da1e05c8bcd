"""sorts the requests longest first (LPT) instead of arrival order"""
import heapq
import math


def continuous_steps(lengths, batch):
    free_at = [0] * min(batch, len(lengths))
    for length in sorted(lengths, reverse=True):
        heapq.heappush(free_at, heapq.heappop(free_at) + length)
    return max(free_at)
