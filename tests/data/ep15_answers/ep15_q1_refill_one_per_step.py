"""admits at most one waiting request per step, even when several slots free"""
import heapq
import math


def continuous_steps(lengths, batch):
    waiting = list(lengths)
    running = []
    steps = 0
    while waiting or running:
        if waiting and len(running) < batch:
            running.append(waiting.pop(0))
        if steps == 0:
            while waiting and len(running) < batch:
                running.append(waiting.pop(0))
        steps += 1
        running = [r - 1 for r in running if r > 1]
    return steps
