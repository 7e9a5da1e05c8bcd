"""first batch static, then continuous: waits for the whole first group before refilling"""
import heapq
import math


def continuous_steps(lengths, batch):
    first = lengths[:batch]
    t = max(first)
    free_at = [t] * min(batch, len(lengths))
    for length in lengths[batch:]:
        heapq.heappush(free_at, heapq.heappop(free_at) + length)
    return max(free_at)
