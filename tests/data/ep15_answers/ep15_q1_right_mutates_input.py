"""right: pops from the caller's list (mutates the input) and returns a numpy int"""
import heapq
import math


import numpy as np

def continuous_steps(lengths, batch):
    slots = np.zeros(min(batch, len(lengths)), dtype=np.int64)
    while lengths:
        slots[np.argmin(slots)] += lengths.pop(0)
    return slots.max()
