"""static batching: groups of batch wait for their longest"""
import heapq
import math


def continuous_steps(lengths, batch):
    return sum(max(lengths[i:i + batch]) for i in range(0, len(lengths), batch))
