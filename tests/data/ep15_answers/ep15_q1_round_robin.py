"""assigns request i to slot i % batch (not the slot that frees first)"""
import heapq
import math


def continuous_steps(lengths, batch):
    return max(sum(lengths[s::batch]) for s in range(min(batch, len(lengths))))
