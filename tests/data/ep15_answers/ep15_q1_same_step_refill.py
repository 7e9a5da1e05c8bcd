"""the freed slot's new request makes its first token in the same step the old one ended"""
import heapq
import math


def continuous_steps(lengths, batch):
    free_at = [0] * min(batch, len(lengths))
    for k, length in enumerate(lengths):
        start = heapq.heappop(free_at)
        if k >= batch:
            start -= 1
        heapq.heappush(free_at, start + length)
    return max(free_at)
