"""Episode 7's checks, three ways: right answers pass, stubs are "not done", wrong answers teach."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from gpucourse.checks import ep07
from gpucourse.exercises import ____


def assert_wrong(exercise, answers, words):
    result, message = exercise.outcome(*answers)
    assert result == "wrong", (result, message)
    missing = [w for w in words if w.lower() not in message.lower()]
    assert not missing, f"message lacks {missing}: {message}"
    assert "Traceback" not in message


# --- q1 -------------------------------------------------------------------------------------

def scaled(per_replica, replicas, base_lr, base_batch):
    global_batch = per_replica * replicas
    return global_batch, base_lr * global_batch / base_batch


def test_q1_right_and_stub():
    assert ep07.q1.outcome(scaled)[0] == "correct"
    assert ep07.q1.outcome(lambda a, b, c, d: [a * b, c * (a * b) / d])[0] == "correct"
    assert ep07.q1.outcome(____)[0] == "not-done"
    assert ep07.q1.outcome(lambda a, b, c, d: (____, ____))[0] == "not-done"
    assert ep07.q1.outcome(lambda a, b, c, d: ____)[0] == "not-done"


Q1_WRONG = [
    (lambda p, r, lr, b: (p, lr * p / b), ["one replica's batch"]),
    (lambda p, r, lr, b: (p / r, lr), ["divided by the number of replicas"]),
    (lambda p, r, lr, b: (p * r, lr), ["unchanged"]),
    (lambda p, r, lr, b: (p * r, lr * r), ["base_lr × replicas"]),
    (lambda p, r, lr, b: (p * r, lr * math.sqrt(p * r / b)), ["square-root"]),
    (lambda p, r, lr, b: (p * r, lr * b / (p * r)), ["upside down"]),
    (lambda p, r, lr, b: (p * r, lr * p / b), ["per-replica batch"]),
    (lambda p, r, lr, b: (lr * p * r / b, p * r), ["swapped"]),
    (lambda p, r, lr, b: (256, 0.4), ["expected"]),
    (lambda p, r, lr, b: (str(p * r), lr * r * p / b), ["number", "quotes"]),
    (lambda p, r, lr, b: p * r, ["two numbers"]),
    (lambda p, r, lr, b: (p * r, lr * (p * r) // b), ["expected"]),
    (42, ["function itself"]),
]


@pytest.mark.parametrize("fn, words", Q1_WRONG)
def test_q1_wrong(fn, words):
    assert_wrong(ep07.q1, (fn,), words)


# --- q2 -------------------------------------------------------------------------------------

def shard(n_samples, rank, world_size, epoch, seed=0):
    order = np.random.default_rng([seed, epoch]).permutation(n_samples)
    per_rank = n_samples // world_size
    return order[: per_rank * world_size][rank::world_size]


def shard_torch(n_samples, rank, world_size, epoch, seed=0):
    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed, drop_last=True)
    sampler.set_epoch(epoch)
    return list(sampler)


def shard_blocks(n_samples, rank, world_size, epoch, seed=0):
    order = np.random.default_rng([seed, epoch]).permutation(n_samples)
    per_rank = n_samples // world_size
    return order[rank * per_rank:(rank + 1) * per_rank].tolist()


def test_q2_right_and_stub():
    for fn in (shard, shard_torch, shard_blocks):
        assert ep07.q2.outcome(fn) == ("correct", ep07.q2.outcome(shard)[1]), fn.__name__
    assert ep07.q2.outcome(____)[0] == "not-done"
    assert ep07.q2.outcome(lambda n, r, w, e, seed=0: ____)[0] == "not-done"


def _own_seed(n, rank, world, epoch, seed=0):
    return np.random.default_rng([seed, epoch, rank]).permutation(n)[: n // world]


def _no_epoch(n, rank, world, epoch, seed=0):
    return np.random.default_rng(seed).permutation(n)[: n // world * world][rank::world]


def _array_split(n, rank, world, epoch, seed=0):
    return np.array_split(np.random.default_rng([seed, epoch]).permutation(n), world)[rank]


def _unseeded(n, rank, world, epoch, seed=0):
    return np.random.default_rng().permutation(n)[: n // world * world][rank::world]


def _one_based(n, rank, world, epoch, seed=0):
    order = np.random.default_rng([seed, epoch]).permutation(n)[: n // world * world]
    return order[rank + 1::world]


def _padded(n, rank, world, epoch, seed=0):
    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


Q2_WRONG = [
    (lambda n, r, w, e, seed=0: list(range(n))[r::w][: n // w], ["not shuffled"]),
    (lambda n, r, w, e, seed=0: list(range(r * (n // w), (r + 1) * (n // w))), ["not shuffled"]),
    (_own_seed, ["seen twice"]),
    (_no_epoch, ["same shards"]),
    (_array_split, ["sizes", "wait forever"]),
    (_unseeded, ["different shards"]),
    (_one_based, ["sizes"]),
    (_padded, ["twice"]),
    (lambda n, r, w, e, seed=0: list(range(n)), ["seen twice"]),
    (lambda n, r, w, e, seed=0: np.random.default_rng([seed, e]).permutation(n)[: n // w - 1 if n // w > 1 else 1]
     [r::w] if False else np.random.default_rng([seed, e]).permutation(n)[: (n // w - 1) * w][r::w]
     if n // w > 1 else np.random.default_rng([seed, e]).permutation(n)[:w][r::w], ["samples are used"]),
    (lambda n, r, w, e, seed=0: [float(i) for i in shard(n, r, w, e)], ["whole numbers"]),
    (lambda n, r, w, e, seed=0: (shard(n, r, w, e) + 1).tolist(), ["outside"]),
    (lambda n, r, w, e, seed=0: len(shard(n, r, w, e)), ["list or array"]),
]


@pytest.mark.parametrize("fn, words", Q2_WRONG)
def test_q2_wrong(fn, words):
    assert_wrong(ep07.q2, (fn,), words)


# --- q3 -------------------------------------------------------------------------------------

def allreduce_seconds(model, world_size, bandwidth_gb_s):
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return 2 * (world_size - 1) / world_size * grad_bytes / (bandwidth_gb_s * 1e9)


def _bytes(m, frozen_too=False):
    return sum(p.numel() * p.element_size() for p in m.parameters() if p.requires_grad or frozen_too)


def _factor(w):
    return 2 * (w - 1) / w


def test_q3_right_and_stub():
    assert ep07.q3.outcome(allreduce_seconds)[0] == "correct"
    assert ep07.q3.outcome(____)[0] == "not-done"
    assert ep07.q3.outcome(lambda m, w, b: ____)[0] == "not-done"


Q3_WRONG = [
    (lambda m, w, b: 2 * _bytes(m) / (b * 1e9), ["(world_size - 1) / world_size"]),
    (lambda m, w, b: _factor(w) / 2 * _bytes(m) / (b * 1e9), ["factor 2"]),
    (lambda m, w, b: _bytes(m) / (b * 1e9), ["2 (N - 1) / N"]),
    (lambda m, w, b: _factor(w) * _bytes(m, True) / (b * 1e9), ["frozen"]),
    (lambda m, w, b: _factor(w) * 4 * sum(p.numel() for p in m.parameters() if p.requires_grad) / (b * 1e9),
     ["element_size"]),
    (lambda m, w, b: _factor(w) * sum(p.numel() for p in m.parameters() if p.requires_grad) / (b * 1e9),
     ["number of parameters"]),
    (lambda m, w, b: 8 * _factor(w) * _bytes(m) / (b * 1e9), ["bits"]),
    (lambda m, w, b: _factor(w) * _bytes(m) / (b * 2 ** 30), ["GiB"]),
    (lambda m, w, b: 1e3 * _factor(w) * _bytes(m) / (b * 1e9), ["milliseconds"]),
    (lambda m, w, b: w * _factor(w) * _bytes(m) / (b * 1e9), ["world_size"]),
    (lambda m, w, b: _factor(w) * _bytes(m), ["bytes, not seconds"]),
    (lambda m, w, b: 2 * _bytes(m) / (b * 1e9) if w > 1 else 1e-6, ["(world_size - 1)"]),
    (lambda m, w, b: 3.2e-6, ["expected"]),
    (lambda m, w, b: "0.001", ["number"]),
]


@pytest.mark.parametrize("fn, words", Q3_WRONG)
def test_q3_wrong(fn, words):
    assert_wrong(ep07.q3, (fn,), words)


# --- q4 -------------------------------------------------------------------------------------

def local_grad(weight, batch):
    return weight - float(np.mean(batch))


def local_loss(weight, batch):
    return float(np.mean((weight - np.asarray(batch)) ** 2) / 2)


def train(rank, world_size, batches, all_reduce, lr):
    weight, losses = 0.0, []
    steps = int(all_reduce(len(batches), op="min"))
    for batch in batches[:steps]:
        grad = all_reduce(local_grad(weight, batch)) / world_size
        losses.append(all_reduce(local_loss(weight, batch)) / world_size)
        weight -= lr * grad
    return weight, losses


def buggy(rank, world_size, batches, all_reduce, lr):
    weight, losses = 0.0, []
    for batch in batches:
        grad = all_reduce(local_grad(weight, batch)) / world_size
        if rank == 0:
            losses.append(all_reduce(local_loss(weight, batch)) / world_size)
        weight -= lr * grad
    return weight, losses


def _variant(steps_fn=None, divide=True, reduce_grad=True, loss_on_all=True, reduce_loss=True, op="min"):
    def fn(rank, world_size, batches, all_reduce, lr):
        weight, losses = 0.0, []
        steps = steps_fn(batches, all_reduce) if steps_fn else int(all_reduce(len(batches), op=op))
        for batch in batches[:steps]:
            g = local_grad(weight, batch)
            grad = (all_reduce(g) if reduce_grad else g) / (world_size if divide else 1)
            if loss_on_all or rank == 0:
                l = local_loss(weight, batch)
                losses.append((all_reduce(l) / world_size) if reduce_loss else l)
            weight -= lr * grad
        return weight, losses
    return fn


def test_q4_right_and_stub():
    assert ep07.q4.outcome(train)[0] == "correct"
    assert ep07.q4.outcome(____)[0] == "not-done"

    def stub(rank, world_size, batches, all_reduce, lr):
        steps = ____
        return ____, []
    assert ep07.q4.outcome(stub)[0] == "not-done"


Q4_WRONG = [
    (buggy, ["deadlock"]),
    (_variant(steps_fn=lambda b, ar: len(b)), ["deadlock", "op='min'"]),
    (_variant(op="max"), ["deadlock"]),
    (_variant(loss_on_all=False), ["deadlock", "if rank == 0"]),
    (_variant(steps_fn=lambda b, ar: 4), ["deadlock"]),
    (_variant(steps_fn=lambda b, ar: int(ar(len(b), op="sum")) // 3), ["expected", "after"]),
    (_variant(divide=False), ["not divided by world_size"]),
    (_variant(reduce_grad=False), ["different weights"]),
    (_variant(reduce_loss=False), ["mean over all ranks"]),
    (_variant(steps_fn=lambda b, ar: int(ar(len(b), op="min" if len(b) % 2 else "max"))), ["different reductions"]),
    (lambda r, w, b, ar, lr: 0.0, ["(weight, losses)"]),
]


@pytest.mark.parametrize("fn, words", Q4_WRONG)
def test_q4_wrong(fn, words):
    start = time.perf_counter()
    assert_wrong(ep07.q4, (fn,), words)
    assert time.perf_counter() - start < 15, "a deadlock must be reported within a bounded time"


def test_q4_broken_answer_is_reported_not_raised():
    def broken(rank, world_size, batches, all_reduce, lr):
        raise KeyError("oops")
    assert_wrong(ep07.q4, (broken,), ["KeyError"])
