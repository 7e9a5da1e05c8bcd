"""ceil(total / batch), the lower bound"""
import heapq
import math


def continuous_steps(lengths, batch):
    return math.ceil(sum(lengths) / batch)
