"""the longest request alone"""
import heapq
import math


def continuous_steps(lengths, batch):
    return max(lengths)
