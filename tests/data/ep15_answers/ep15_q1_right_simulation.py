"""right: step-by-step simulation of slots and a waiting queue"""
import heapq
import math


from collections import deque

def continuous_steps(lengths, batch):
    waiting = deque(lengths)
    running = []
    steps = 0
    while waiting or running:
        while waiting and len(running) < batch:
            running.append(waiting.popleft())
        steps += 1
        running = [r - 1 for r in running if r - 1 > 0]
    return steps
