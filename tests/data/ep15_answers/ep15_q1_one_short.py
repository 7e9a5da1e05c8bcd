"""off by one: the simulation stops one step early (counts steps from 0)"""
import heapq
import math


def continuous_steps(lengths, batch):
    waiting = list(lengths)
    running = [waiting.pop(0) for _ in range(min(batch, len(waiting)))]
    step = 0
    while True:
        running = [r - 1 for r in running]
        running = [r for r in running if r > 0]
        while waiting and len(running) < batch:
            running.append(waiting.pop(0))
        if not running:
            return step
        step += 1
