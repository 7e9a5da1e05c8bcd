"""right: slots as a plain list, earliest-free slot by min()"""
import heapq
import math


def continuous_steps(lengths, batch):
    if not lengths:
        return 0
    slots = [0] * batch
    for n in lengths:
        i = slots.index(min(slots))
        slots[i] += n
    return max(slots)
