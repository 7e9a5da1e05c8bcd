"""returns when the last-arriving request ends, not when every request is done"""
import heapq
import math


def continuous_steps(lengths, batch):
    free_at = [0] * min(batch, len(lengths))
    end = 0
    for length in lengths:
        end = heapq.heappop(free_at) + length
        heapq.heappush(free_at, end)
    return end
