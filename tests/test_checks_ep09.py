"""Episode 9's checks, three ways: right answers pass, stubs are "not done", wrong answers teach."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from torch.utils.data import DistributedSampler

from gpucourse.checks import ep09
from gpucourse.exercises import ____

from checking import assert_wrong



# --- q1 -------------------------------------------------------------------------------------

def lr_at(step, warmup_steps, per_replica, replicas, base_lr, base_batch):
    peak = base_lr * per_replica * replicas / base_batch
    return base_lr + (peak - base_lr) * min(step, warmup_steps) / warmup_steps


def _peak(p, r, lr, b):
    return lr * p * r / b


def _ramp(s, w, start, end):
    return start + (end - start) * min(s, w) / w


def test_q1_right_and_stub():
    assert ep09.q1.outcome(lr_at)[0] == "correct"
    # the same line written another way, and a numpy number
    assert ep09.q1.outcome(lambda s, w, p, r, lr, b: np.float64(
        _peak(p, r, lr, b) if s >= w else lr + s / w * (_peak(p, r, lr, b) - lr)))[0] == "correct"
    assert ep09.q1.outcome(____)[0] == "not-done"
    assert ep09.q1.outcome(lambda s, w, p, r, lr, b: ____)[0] == "not-done"


Q1_WRONG = [
    (lambda s, w, p, r, lr, b: _ramp(s, w, 0.0, _peak(p, r, lr, b)), ["starts at 0"]),
    (lambda s, w, p, r, lr, b: _ramp(s, w, 0.0, lr), ["not to base_lr"]),
    (lambda s, w, p, r, lr, b: lr, ["not to base_lr"]),
    (lambda s, w, p, r, lr, b: _peak(p, r, lr, b), ["no warm-up"]),
    (lambda s, w, p, r, lr, b: lr if s < w else _peak(p, r, lr, b), ["straight line", "not jump"]),
    (lambda s, w, p, r, lr, b: lr + (_peak(p, r, lr, b) - lr) * s / w, ["kept rising"]),
    (lambda s, w, p, r, lr, b: _ramp(s, w, lr, lr * r), ["base_lr × replicas"]),
    (lambda s, w, p, r, lr, b: _ramp(s, w, lr, lr * math.sqrt(p * r / b)), ["square-root"]),
    (lambda s, w, p, r, lr, b: _ramp(s, w, lr, lr * b / (p * r)), ["upside down"]),
    (lambda s, w, p, r, lr, b: _ramp(s, w, lr, lr * p / b), ["one replica's batch"]),
    (lambda s, w, p, r, lr, b: _ramp(s, w, lr, lr * p / r / b), ["divided by the number of replicas"]),
    (lambda s, w, p, r, lr, b: _ramp(s, w - 1, lr, _peak(p, r, lr, b)) if w > 1 else lr, ["expected"]),
    (lambda s, w, p, r, lr, b: 0.4, ["after the warm-up"]),
    (lambda s, w, p, r, lr, b: str(lr), ["number", "quotes"]),
    (lambda s, w, p, r, lr, b: (p * r, lr), ["number"]),
    (42, ["function itself"]),
]


@pytest.mark.parametrize("fn, words", Q1_WRONG)
def test_q1_wrong(fn, words):
    assert_wrong(ep09.q1, (fn,), words)


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
        assert ep09.q2.outcome(fn) == ("correct", ep09.q2.outcome(shard)[1]), fn.__name__
    assert ep09.q2.outcome(____)[0] == "not-done"
    assert ep09.q2.outcome(lambda n, r, w, e, seed=0: ____)[0] == "not-done"


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


def _fixed_blocks(n, rank, world, epoch, seed=0):      # each rank reshuffles only its own block
    per = n // world
    return np.random.default_rng([seed, epoch, rank]).permutation(np.arange(rank * per, (rank + 1) * per))


def _fixed_drop(n, rank, world, epoch, seed=0):        # the same last n % world samples never trained on
    keep = np.arange(n // world * world)
    return np.random.default_rng([seed, epoch]).permutation(keep)[rank::world]


def _seed_ignored(n, rank, world, epoch, seed=0):
    order = np.random.default_rng(epoch).permutation(n)
    return order[: n // world * world][rank::world]


Q2_WRONG = [
    (_fixed_blocks, ["same samples in every epoch"]),
    (_fixed_drop, ["left out in every epoch"]),
    (_seed_ignored, ["seed=1"]),
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
    assert_wrong(ep09.q2, (fn,), words)


# --- q3 -------------------------------------------------------------------------------------

def allreduce_seconds(model, world_size, bandwidth_gb_s):
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return 2 * (world_size - 1) / world_size * grad_bytes / (bandwidth_gb_s * 1e9)


def _bytes(m, frozen_too=False):
    return sum(p.numel() * p.element_size() for p in m.parameters() if p.requires_grad or frozen_too)


def _factor(w):
    return 2 * (w - 1) / w


def test_q3_right_and_stub():
    assert ep09.q3.outcome(allreduce_seconds)[0] == "correct"
    assert ep09.q3.outcome(____)[0] == "not-done"
    assert ep09.q3.outcome(lambda m, w, b: ____)[0] == "not-done"


def _none_for_one_process(model, world_size, bandwidth_gb_s):
    if world_size == 1:
        return None                      # nothing to exchange: the idea is right, the value is not a number
    return allreduce_seconds(model, world_size, bandwidth_gb_s)


def test_q3_none_for_one_process_is_a_wrong_value_not_unfinished():
    result, message = ep09.q3.outcome(_none_for_one_process)
    assert result == "wrong", (result, message)
    assert "0.0" in message and "None" in message and "forget" not in message, message


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
    assert_wrong(ep09.q3, (fn,), words)


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
    assert ep09.q4.outcome(train)[0] == "correct"

    def natural(rank, world_size, batches, all_reduce, lr):   # no int(): the count stays a whole number
        weight, losses = 0.0, []
        steps = all_reduce(len(batches), op="min")
        for step in range(steps):
            grad = all_reduce(local_grad(weight, batches[step])) / world_size
            losses.append(all_reduce(local_loss(weight, batches[step])) / world_size)
            weight -= lr * grad
        return weight, losses
    assert ep09.q4.outcome(natural)[0] == "correct"
    assert ep09.q4.outcome(____)[0] == "not-done"

    def stub(rank, world_size, batches, all_reduce, lr):
        steps = ____
        return ____, []
    assert ep09.q4.outcome(stub)[0] == "not-done"


def _joined(rank, world_size, batches, all_reduce, lr):   # join()-style: zeros from ranks out of data
    weight, losses = 0.0, []
    steps = int(all_reduce(len(batches), op="max"))
    for step in range(steps):
        have = step < len(batches)
        g = local_grad(weight, batches[step]) if have else 0.0
        l = local_loss(weight, batches[step]) if have else 0.0
        grad = all_reduce(g) / world_size
        losses.append(all_reduce(l) / world_size)
        weight -= lr * grad
    return weight, losses


def _loss_after_step(rank, world_size, batches, all_reduce, lr):
    weight, losses = 0.0, []
    steps = int(all_reduce(len(batches), op="min"))
    for batch in batches[:steps]:
        weight -= lr * all_reduce(local_grad(weight, batch)) / world_size
        losses.append(all_reduce(local_loss(weight, batch)) / world_size)
    return weight, losses


Q4_WRONG = [
    (buggy, ["deadlock"]),
    (_variant(steps_fn=lambda b, ar: len(b)), ["deadlock", "op='min'"]),
    (_variant(op="max"), ["largest shard", "op='min'"]),
    (_joined, ["largest shard", "op='min'"]),
    (_loss_after_step, ["log the loss before the step"]),
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
    assert_wrong(ep09.q4, (fn,), words)
    assert time.perf_counter() - start < 15, "a deadlock must be reported within a bounded time"


def test_q4_one_deadline_for_all_ranks(monkeypatch):
    from gpucourse import exercises

    monkeypatch.setattr(exercises, "DEADLINE_S", 1.0)

    def spins(rank, world_size, batches, all_reduce, lr):   # never returns, never calls a collective
        end = time.monotonic() + 5
        while time.monotonic() < end:
            time.sleep(0.01)
        return 0.0, []
    start = time.perf_counter()
    assert_wrong(ep09.q4, (spins,), ["did not return"])
    assert time.perf_counter() - start < 3.5, "each rank got its own deadline, not one for all"


def test_hints_point_the_way_without_the_answer():
    for q in (ep09.q1, ep09.q2, ep09.q3, ep09.q4):
        for answer in ("default_rng([seed, epoch])", "element_size()", "op='min'", "* global_batch / base_batch",
                       "[rank::world_size]", "/ world_size"):
            assert answer not in " ".join(q.hints), (q.name, answer)


@pytest.mark.parametrize("q", [ep09.q1, ep09.q2, ep09.q3, ep09.q4], ids=lambda q: q.name)
def test_hints_come_in_two_steps_a_question_then_the_method_without_code(q, capsys):
    assert len(q.hints) == 2, f"{q.name} has {len(q.hints)} hint step(s), not a question and a method"
    question, method = q.hints
    assert question.rstrip().endswith("?") and not method.rstrip().endswith("?")
    for code in (" = ", "==", "+=", "return", "op=", "min(", "np.", "torch.", "numel", "element_size", "[", "**",
                 "range(", "default_rng", "all_reduce(", "lr_at", "shard("):
        assert code not in question + method, (q.name, code)
    q.hint()
    first = capsys.readouterr().out
    q.hint(2)
    second = capsys.readouterr().out
    assert question in first and method not in first and method in second


def test_q4_broken_answer_is_reported_not_raised():
    def broken(rank, world_size, batches, all_reduce, lr):
        raise KeyError("oops")
    assert_wrong(ep09.q4, (broken,), ["KeyError"])


def _casts_to_float32(m, w, b):        # changes the model it was given: the float16 one becomes float32
    m.float()
    return _factor(w) * _bytes(m) / (b * 1e9)


def _unfreezes(m, w, b):
    for p in m.parameters():
        p.requires_grad_(True)
    return _factor(w) * _bytes(m) / (b * 1e9)


@pytest.mark.parametrize("fn, words", [
    (_casts_to_float32, ["changed the model", "dtype", "for good", "element_size"]),
    (_unfreezes, ["changed the model", "requires_grad"]),
    (lambda m, w, b: _factor(w) * sum(p.grad.numel() for p in m.parameters()) / (b * 1e9), ["p.grad is None"]),
])
def test_q3_answers_that_change_the_model_or_read_grad(fn, words):
    assert_wrong(ep09.q3, (fn,), words)


def test_q3_right_answers_written_otherwise():
    import torch

    for fn in (lambda m, w, b: np.float32(allreduce_seconds(m, w, b)),
               lambda m, w, b: torch.tensor(allreduce_seconds(m, w, b)),
               lambda m, w, b: _factor(w) * sum(p.untyped_storage().nbytes() for p in m.parameters()
                                                if p.requires_grad) / b / 1e9):
        assert ep09.q3.outcome(fn)[0] == "correct"


def _mean_count(rank, world_size, batches, all_reduce, lr):     # the mean shard, not the smallest
    weight, losses = 0.0, []
    for step in range(int(all_reduce(len(batches)) / world_size)):
        grad = all_reduce(local_grad(weight, batches[step])) / world_size
        losses.append(all_reduce(local_loss(weight, batches[step])) / world_size)
        weight -= lr * grad
    return weight, losses


def _orders_differ(rank, world_size, batches, all_reduce, lr):  # rank 0 reduces the loss first
    weight, losses = 0.0, []
    for batch in batches[:int(all_reduce(len(batches), op="min"))]:
        first, second = (local_loss, local_grad) if rank == 0 else (local_grad, local_loss)
        a, b = all_reduce(first(weight, batch)) / world_size, all_reduce(second(weight, batch)) / world_size
        loss, grad = (a, b) if rank == 0 else (b, a)
        losses.append(loss)
        weight -= lr * grad
    return weight, losses


def _reduces_a_pair(rank, world_size, batches, all_reduce, lr):
    weight, losses = 0.0, []
    for batch in batches[:int(all_reduce(len(batches), op="min"))]:
        grad, loss = all_reduce(np.array([local_grad(weight, batch), local_loss(weight, batch)])) / world_size
        losses.append(loss)
        weight -= lr * grad
    return weight, losses


@pytest.mark.parametrize("fn, words", [
    (_mean_count, ["ran out of batches", "op='min'"]),
    (_orders_differ, ["same order"]),
    (_reduces_a_pair, ["one number"]),
])
def test_q4_more_wrong_answers(fn, words):
    assert_wrong(ep09.q4, (fn,), words)


def test_q4_tensor_step_count_is_right():
    import torch

    def tensors(rank, world_size, batches, all_reduce, lr):
        weight, losses = 0.0, []
        for step in range(all_reduce(torch.tensor(len(batches)), op="min")):
            grad = all_reduce(torch.tensor(local_grad(weight, batches[step]))) / world_size
            losses.append(all_reduce(local_loss(weight, batches[step])) / world_size)
            weight -= lr * float(grad)
        return weight, losses
    assert ep09.q4.outcome(tensors)[0] == "correct"


# --- the conditions that matter (issue: classes of answers a check must not let through) ------------

def test_q1_uneven_ratios_and_other_ways_of_writing_it():
    assert ep09.q1.outcome(lambda s, w, p, r, lr, b: float(np.interp(s, [0, w], [lr, lr * p * r / b])))[0] \
        == "correct"
    from fractions import Fraction
    assert ep09.q1.outcome(lambda s, w, p, r, lr, b: float(lr + (lr * Fraction(p * r, b) - lr)
                                                           * Fraction(min(s, w), w)))[0] == "correct"


@pytest.mark.parametrize("fn, words", [
    (lambda s, w, p, r, lr, b: _ramp(s, w, lr, lr * (p * r // b)), ["integer division", "//", "use /"]),
    (lambda s, w, p, r, lr, b: _ramp(s, w, lr, (lr * p * r) // b), ["integer division"]),
    (lambda s, w, p, r, lr, b: lr + (_peak(p, r, lr, b) - lr) * (min(s, w) // w), ["not jump", "use /"]),
])
def test_q1_integer_division_is_named(fn, words):
    assert_wrong(ep09.q1, (fn,), words)


def _hash_seeded(n, rank, world, epoch, seed=0):        # hash() of a string differs between processes
    import random

    order = list(range(n))
    random.Random(hash(f"shuffle-{seed}-{epoch}")).shuffle(order)
    per = n // world
    return order[:per * world][rank::world]


def _pid_seeded(n, rank, world, epoch, seed=0):          # the same in one process, not across ranks
    import os

    order = np.random.default_rng([os.getpid(), seed, epoch]).permutation(n)
    return order[:n // world * world][rank::world]


def _rotated(n, rank, world, epoch, seed=0):             # "a new order each epoch" that is a rotation
    order = np.roll(np.random.default_rng(seed).permutation(n), 7 * epoch)
    return order[:n // world * world][rank::world]


def _rotated_blocks(n, rank, world, epoch, seed=0):
    order = np.roll(np.random.default_rng(seed).permutation(n), epoch * (n // 3))
    per = n // world
    return order[rank * per:(rank + 1) * per]


@pytest.mark.parametrize("fn, words", [
    (_hash_seeded, ["fresh python process", "hash()", "pythonhashseed", "(seed, epoch)"]),
    (_pid_seeded, ["fresh python process", "getpid"]),
    (_rotated, ["rotated", "new random permutation"]),
    (_rotated_blocks, ["rotated"]),
])
def test_q2_per_process_state_and_rotations_are_rejected(fn, words):
    assert_wrong(ep09.q2, (fn,), words)


def test_q2_right_answers_written_otherwise():
    import torch

    def with_torch(n, rank, world, epoch, seed=0):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(1000 * seed + epoch))
        return order[: n // world * world][rank::world].tolist()

    def with_random(n, rank, world, epoch, seed=0):
        import random as rnd

        order = list(range(n))
        rnd.Random(f"{seed}-{epoch}").shuffle(order)    # a str seed goes through SHA-512: no hash()
        return order[rank:n // world * world:world]
    for fn in (with_torch, with_random, shard_blocks):
        result, message = ep09.q2.outcome(fn)
        assert result == "correct", message


def test_q3_one_element_size_for_all_parameters_is_named():
    def first_size(m, w, b):
        params = list(m.parameters())
        n = sum(p.numel() for p in params if p.requires_grad)
        return _factor(w) * n * params[0].element_size() / (b * 1e9)
    assert_wrong(ep09.q3, (first_size,), ["one parameter's element_size()", "its own dtype"])


def _min_by_max(rank, world_size, batches, all_reduce, lr):    # -max(-n) is min(n)
    weight, losses = 0.0, []
    for step in range(-int(all_reduce(-len(batches), op="max"))):
        grad = all_reduce(local_grad(weight, batches[step])) / world_size
        losses.append(all_reduce(local_loss(weight, batches[step])) / world_size)
        weight -= lr * grad
    return weight, losses


def _late(rank, world_size, batches, all_reduce, lr):           # right, but rank 1 is slow to start
    if rank == 1:
        time.sleep(1.5)
    return train(rank, world_size, batches, all_reduce, lr)


def test_q4_an_equivalent_collective_and_a_late_rank_are_right():
    for fn in (_min_by_max, _late):
        result, message = ep09.q4.outcome(fn)
        assert result == "correct", message


def test_q4_a_rank_that_never_ends_is_stopped_not_called_a_deadlock(monkeypatch):
    from gpucourse import exercises

    monkeypatch.setattr(exercises, "DEADLINE_S", 1.0)

    def endless(rank, world_size, batches, all_reduce, lr):
        if rank == 0:
            while True:
                pass
        return train(rank, world_size, batches, all_reduce, lr)
    message = assert_wrong(ep09.q4, (endless,), ["did not return within 1 s", "loop that never ends",
                                                 "rank 0 was still computing"])
    assert "deadlock" not in message


def test_q4_a_deadlock_is_named_at_once():
    start = time.monotonic()
    assert_wrong(ep09.q4, (buggy,), ["deadlock"])
    assert time.monotonic() - start < 5, "a deadlock needs no timeout: no rank can move on"


def test_q4_changing_the_batches_is_named():
    def drops_extra(rank, world_size, batches, all_reduce, lr):
        steps = int(all_reduce(len(batches), op="min"))
        del batches[steps:]                       # the caller's loader loses its batches
        return train(rank, world_size, batches, all_reduce, lr)
    assert_wrong(ep09.q4, (drops_extra,), ["changed the list of batches"])
