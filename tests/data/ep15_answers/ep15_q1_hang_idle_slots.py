"""decrements idle slots below zero, so `while any(slots)` never ends"""
import heapq
import math


def continuous_steps(lengths, batch):
    waiting = list(lengths)
    slots = [0] * batch
    steps = 0
    while any(slots) or waiting:
        for i in range(batch):
            if slots[i] == 0 and waiting:
                slots[i] = waiting.pop(0)
        slots = [s - 1 for s in slots]
        steps += 1
    return steps
