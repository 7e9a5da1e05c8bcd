"""pads the heap with batch slots but returns the heap's length-weighted mean"""
import heapq
import math


def continuous_steps(lengths, batch):
    free_at = [0] * batch
    for length in lengths:
        heapq.heappush(free_at, heapq.heappop(free_at) + length)
    return round(sum(free_at) / min(batch, len(lengths)))
