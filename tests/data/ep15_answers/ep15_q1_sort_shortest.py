"""sorts the requests shortest first instead of arrival order"""
import heapq
import math


def continuous_steps(lengths, batch):
    free_at = [0] * min(batch, len(lengths))
    for length in sorted(lengths):
        heapq.heappush(free_at, heapq.heappop(free_at) + length)
    return max(free_at)
