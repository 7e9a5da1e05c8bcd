"""Checks for episode 9, "More than one GPU".

``q1`` the scaled learning rate with warm-up · ``q2`` shard a data set by rank · ``q3`` ring
all-reduce time per step · ``q4`` fix a training loop that deadlocks on uneven shards.

Every check calls the learner's function on fixtures of its own, several of them, and
recomputes the right result. ``q2`` also computes the shards in two fresh Python processes, as
torchrun's ranks are, so that a shuffle seeded by per-process state cannot pass. ``q4`` runs the
learner's loop on simulated ranks (threads) whose ``all_reduce`` knows which ranks are still
computing: a rank that is only late is waited for, a deadlock (no rank can move on) becomes a
message at once, and a loop that never ends is stopped at the shared deadline.
"""

from __future__ import annotations

import copy
import math
import numbers
import threading
import time

import numpy as np

from .. import exercises as _exercises
from ..exercises import error_message
from ..exercises import (Exercise, NotDone, Wrong, as_number, changes, deadline_message,
                         interrupt_thread, require_answer, require_function, snapshot, solution_link)
from ..exercises import call_answer as _call

NOTEBOOK = "09-more-than-one-gpu.ipynb"



# --- q1: global batch, learning rate and warm-up ----------------------------------------------

# (per_replica, replicas, base_lr, base_batch, warmup_steps)
_Q1_CASES = [(64, 8, 0.1, 256, 100), (32, 2, 0.05, 32, 10), (128, 4, 0.2, 64, 40), (100, 3, 0.01, 100, 6),
             (256, 1, 0.1, 256, 8),
             # global batches that base_batch does not divide, and an odd warm-up: integer division shows
             (96, 4, 0.1, 256, 10), (100, 3, 0.03, 128, 7)]


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def _check_scaling(fn):
    require_function(fn, "lr_at")
    for per_replica, replicas, base_lr, base_batch, warmup in _Q1_CASES:
        peak = base_lr * per_replica * replicas / base_batch

        def want(step):
            return base_lr + (peak - base_lr) * min(step, warmup) / warmup

        def got(step):
            what = f"lr_at({step}, {warmup}, {per_replica}, {replicas}, {base_lr}, {base_batch})"
            return what, as_number(what, _call(fn, step, warmup, per_replica, replicas, base_lr, base_batch,
                                                what=what))

        what, lr = got(2 * warmup)                      # after the warm-up: the scaled rate
        if not _close(lr, peak):
            _diagnose_peak(what, lr, peak, per_replica, replicas, base_lr, base_batch)
        what, lr = got(0)
        if not _close(lr, base_lr):
            if _close(lr, 0.0):
                raise Wrong(f"{what} is 0: your warm-up starts at 0. Goyal et al.'s starts at base_lr, the "
                            "rate known to work for one GPU, and rises from there to the scaled rate (§2.2).")
            if _close(lr, peak):
                raise Wrong(f"{what} is {lr:g}, already the scaled rate: there is no warm-up. At step 0 the "
                            "rate is base_lr; it reaches the scaled rate at warmup_steps.")
            raise Wrong(f"{what} is {lr:.4g}; at step 0 the rate should be base_lr = {base_lr:g}.")
        what, lr = got(warmup)
        if not _close(lr, peak):
            raise Wrong(f"{what} is {lr:.4g}; at the end of the warm-up the rate should have reached the "
                        f"scaled rate, {peak:.4g}.")
        for step in (warmup // 2, warmup // 2 + 1):
            what, lr = got(step)
            if _close(lr, want(step)):
                continue
            if _close(lr, base_lr) and peak != base_lr:
                raise Wrong(f"{what} is still base_lr {base_lr:g} halfway through the warm-up: the rate "
                            "should rise in a straight line from base_lr to the scaled rate, step by step, "
                            "not jump at the end (step // warmup_steps is 0 until the end: use /).")
            if _close(lr, base_lr + (peak - base_lr) * (step * 2 // warmup) / 2) and warmup % 2:
                raise Wrong(f"{what} is {lr:.4g}, expected {want(step):.4g}: integer division (//) somewhere in "
                            f"the warm-up, visible when warmup_steps = {warmup} is odd. Use /.")
            if _close(lr, peak * min(step, warmup) / warmup):
                raise Wrong(f"{what} is {lr:.4g}: a ramp from 0. The warm-up ramps from base_lr, not from 0.")
            raise Wrong(f"{what} is {lr:.4g}, expected {want(step):.4g}: a straight line from base_lr at "
                        f"step 0 to the scaled rate at step {warmup}.")
        what, lr = got(warmup + 1)
        if not _close(lr, peak):
            raise Wrong(f"{what} is {lr:.4g}: after the warm-up the rate stays at the scaled rate "
                        f"{peak:.4g}.")
    return ("global batch = per-replica batch × replicas; the linear scaling rule keeps the update per "
            "sample the same, and the warm-up lets the model settle before the rate is that large "
            "(Goyal et al. 2017, §2.2).")


def _diagnose_peak(what, lr, peak, per_replica, replicas, base_lr, base_batch):
    """Name the mistake behind a wrong learning rate after the warm-up."""
    global_batch = per_replica * replicas
    floored = [v for v in (base_lr * (global_batch // base_batch), (base_lr * global_batch) // base_batch)
               if not _close(v, peak)]
    if any(_close(lr, v) for v in floored):
        raise Wrong(f"{what} is {lr:g}: integer division. {global_batch} // {base_batch} rounds the ratio "
                    f"{global_batch}/{base_batch} = {global_batch / base_batch:g} down; use / for the scaled rate, "
                    f"base_lr × global_batch / base_batch = {peak:.4g}.")
    if _close(lr, base_lr):
        raise Wrong(f"{what} is {lr:g}, the base learning rate: after the warm-up the rate should have "
                    "ramped to the scaled rate, base_lr × global_batch / base_batch, not to base_lr.")
    if _close(lr, base_lr * replicas):
        raise Wrong(f"{what} is {lr:g} = base_lr × replicas, which is right only when the per-replica batch "
                    "equals base_batch. Scale by global_batch / base_batch.")
    if _close(lr, base_lr * math.sqrt(global_batch / base_batch)):
        raise Wrong(f"{what} is {lr:g}: square-root scaling (a rule some use with Adam); this exercise asks "
                    "for the linear scaling rule of Goyal et al. for SGD.")
    if _close(lr, base_lr * base_batch / global_batch):
        raise Wrong(f"{what} is {lr:g}: the ratio is upside down. A larger batch gets a larger learning "
                    "rate: base_lr × global_batch / base_batch.")
    if _close(lr, base_lr * per_replica / base_batch):
        raise Wrong(f"{what} is {lr:g}: it scales with one replica's batch. One optimiser step uses "
                    f"{per_replica} × {replicas} samples: scale with the global batch.")
    if _close(lr, base_lr * per_replica / replicas / base_batch):
        raise Wrong(f"{what} is {lr:g}: you divided by the number of replicas; the per-replica batch is "
                    "already a share, the global batch is their total.")
    if lr > peak * (1 + 1e-6) and _close(lr, base_lr + (peak - base_lr) * 2):
        raise Wrong(f"{what} is {lr:.4g}: the rate kept rising after the warm-up. After warmup_steps it "
                    "stays at the scaled rate.")
    raise Wrong(f"{what} is {lr:.4g}; after the warm-up it should be base_lr × global_batch / base_batch = "
                f"{peak:.4g}.")


q1 = Exercise("ep09.q1", _check_scaling,
              hint=("How many samples does one optimiser step use across all replicas, and how many times "
                    "base_batch is that? What rate does the warm-up start from, and where does it end?",
                    "The scaled rate is base_lr times that ratio. Before warmup_steps, move from base_lr towards "
                    "the scaled rate in proportion to the fraction of the warm-up done; from warmup_steps on, "
                    "stay at the scaled rate."),
              solution=solution_link(NOTEBOOK))


# --- q2: shard by rank ----------------------------------------------------------------------

_Q2_CASES = [(10, 3), (1000, 4), (7, 2), (8, 8), (5, 1), (97, 5)]


def _indices(result, what: str, n: int) -> list:
    if isinstance(result, (str, bytes, dict, set)) or not hasattr(result, "__len__"):
        raise Wrong(f"{what} should return a list or array of sample indices; got {type(result).__name__}.")
    try:
        values = [v.item() if hasattr(v, "item") else v for v in result]
    except Exception:
        raise Wrong(f"{what} should return a flat list of sample indices.") from None
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise Wrong(f"{what} returned {v!r} among the indices; indices are whole numbers.")
        if not 0 <= v < n:
            raise Wrong(f"{what} returned index {v}, outside 0 … {n - 1}.")
    return [int(v) for v in values]


def _check_shard(fn):
    require_function(fn, "shard")
    for n, world in _Q2_CASES:
        orders = []
        for epoch in (0, 1):
            shards = [_indices(_call(fn, n, rank, world, epoch, what=f"shard({n}, {rank}, {world}, {epoch})"),
                               f"shard({n}, {rank}, {world}, {epoch})", n) for rank in range(world)]
            again = [_indices(_call(fn, n, rank, world, epoch, what="shard"), "shard", n) for rank in range(world)]
            case = f"{n} samples, {world} ranks, epoch {epoch}"
            if again != shards:
                raise Wrong(f"{case}: two calls with the same arguments gave different shards. Each rank is a "
                            "separate process: they agree only if the shuffle is seeded by (seed, epoch), the "
                            "same on every rank.")
            sizes = [len(s) for s in shards]
            for rank, s in enumerate(shards):
                if len(set(s)) != len(s):
                    raise Wrong(f"{case}: rank {rank} has the same sample twice in its shard.")
            seen = [i for s in shards for i in s]
            if len(set(seen)) != len(seen):
                dup = next(i for i in seen if seen.count(i) > 1)
                owners = [r for r, s in enumerate(shards) if dup in s]
                raise Wrong(f"{case}: sample {dup} is in the shards of ranks {owners}: a sample is seen twice "
                            "per epoch. Did each rank shuffle with its own seed, or is rank 0-based?")
            if len(set(sizes)) != 1:
                raise Wrong(f"{case}: the shards have sizes {sizes}. Every rank must take the same number of "
                            "steps, or the ranks with more batches wait forever in the all-reduce: drop the "
                            "remainder (n // world_size per rank).")
            if n - len(seen) > world - 1:
                raise Wrong(f"{case}: only {len(seen)} of {n} samples are used; at most world_size - 1 = "
                            f"{world - 1} may be dropped to make the shards equal.")
            orders.append(shards)
        if n >= 8 and world < n:
            if all(s == sorted(s) and (len(s) < 2 or s[1] - s[0] in (1, world)) for s in orders[0]):
                raise Wrong(f"{n} samples, {world} ranks: the shards are not shuffled: each epoch should draw a "
                            "new random order, the same on every rank.")
            if orders[0] == orders[1]:
                raise Wrong(f"{n} samples, {world} ranks: epochs 0 and 1 give the same shards. Shuffle with "
                            "the epoch in the seed, as DistributedSampler.set_epoch does.")
            if n >= 50 and _kept_neighbours(orders[0], orders[1]) > 0.5:
                raise Wrong(f"{n} samples, {world} ranks: epoch 1's order is epoch 0's order shifted (rotated): "
                            "the same samples follow one another every epoch, so the batches barely change. Draw "
                            "a new random permutation each epoch, seeded by (seed, epoch).")
        if n >= 100 and world > 1:
            per_rank = [[set(s) for s in ep] for ep in orders]
            if all(per_rank[0][r] == per_rank[1][r] for r in range(world)):
                raise Wrong(f"{n} samples, {world} ranks: each rank trains on the same samples in every epoch, "
                            "only reordered. Shuffle ALL samples with one permutation per epoch and deal it "
                            "out, so that samples move between ranks.")
        if n % world and n >= 50:             # (97, 5): a chance repeat is about 1 in 4,600
            dropped = [set(range(n)) - {i for s in ep for i in s} for ep in orders]
            if dropped[0] == dropped[1]:
                raise Wrong(f"{n} samples, {world} ranks: the same samples {sorted(dropped[0])} are left out in "
                            "every epoch, so they are never trained on. Drop the tail of the shuffled order, "
                            "not of range(n).")
        if n >= 8 and world < n:
            other_seed = [_indices(_call(fn, n, r, world, 0, 1, what=f"shard({n}, {r}, {world}, 0, seed=1)"),
                                   f"shard({n}, {r}, {world}, 0, seed=1)", n) for r in range(world)]
            if other_seed == orders[0]:
                raise Wrong(f"{n} samples, {world} ranks: seed=1 gives the same shards as seed=0. Seed the "
                            "shuffle with both the seed and the epoch.")
    _check_shard_elsewhere(fn)
    return ("every rank draws the same permutation from (seed, epoch) and takes its own slice: "
            "no sample twice, equal shard sizes, a new order each epoch, and the same shards whichever process "
            "computes them. That is DistributedSampler.")


def _kept_neighbours(epoch0, epoch1) -> float:
    """The share of samples that follow the same sample in both epochs (about 1/n for two random orders;
    nearly all when the second order is the first one rotated)."""
    follows = {a: b for shard in epoch0 for a, b in zip(shard, shard[1:])}
    pairs = [(a, b) for shard in epoch1 for a, b in zip(shard, shard[1:])]
    return sum(follows.get(a) == b for a, b in pairs) / max(len(pairs), 1)


#: (n, world, epoch): computed for every rank in two fresh processes and compared with this one's results.
_Q2_ELSEWHERE = [(10, 3, 0), (97, 5, 1)]


def _check_shard_elsewhere(fn):
    """Each rank is its own process: the shards must not depend on which process computes them."""
    from ..exercises import results_in_fresh_processes

    calls = [(n, rank, world, epoch) for n, world, epoch in _Q2_ELSEWHERE for rank in range(world)]
    here = [_indices(_call(fn, *args, what=f"shard{args}"), f"shard{args}", args[0]) for args in calls]
    elsewhere = results_in_fresh_processes(fn, calls)
    if elsewhere is None:
        return
    for results in elsewhere:
        for args, mine, theirs in zip(calls, here, results):
            if list(theirs) != mine:
                raise Wrong(f"shard{args} gives {_short(theirs)} in a fresh Python process and {_short(mine)} in "
                            "this one. torchrun starts every rank as its own process, so the ranks would not "
                            "agree on the permutation: the shuffle depends on something per process (hash() of "
                            "a string changes with PYTHONHASHSEED, os.getpid(), id(), the time, an unseeded "
                            "generator). Seed it with (seed, epoch) only.")


def _short(values) -> str:
    values = list(values)
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:6]))}, …]"


q2 = Exercise("ep09.q2", _check_shard,
              hint=("Every rank must build the same permutation without talking to the others: which numbers "
                    "do all ranks know, and which of them changes from one epoch to the next?",
                    "Seed one generator from the seed and the epoch together and permute all indices. Cut the "
                    "permutation to the largest multiple of world_size, then deal it out like cards: each rank "
                    "takes every world_size-th index, starting at its own rank."),
              solution=solution_link(NOTEBOOK))


# --- q3: ring all-reduce time ---------------------------------------------------------------

def _q3_models():
    import torch
    from torch import nn

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(15, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 1))
    frozen = nn.Sequential(nn.Linear(300, 200), nn.ReLU(), nn.Linear(200, 10))
    for p in frozen[0].parameters():
        p.requires_grad_(False)
    half = nn.Sequential(nn.Linear(64, 512), nn.Linear(512, 64)).half()
    # layers in different dtypes: the sizes are summed parameter by parameter
    mixed = nn.Sequential(nn.Linear(32, 256).half(), nn.Linear(256, 256), nn.Linear(256, 8).to(torch.bfloat16))
    return [("the episode-3 MLP", mlp, 2, 16.0), ("an MLP with a frozen first layer", frozen, 4, 25.0),
            ("a float16 model", half, 8, 300.0), ("a model whose layers are float16, float32 and bfloat16",
                                                  mixed, 4, 25.0),
            ("the episode-3 MLP", mlp, 1, 16.0)]


def _explain_q3(exc):
    if isinstance(exc, AttributeError) and "NoneType" in str(exc):
        return (f"{type(exc).__name__}: {exc}. Before a backward pass p.grad is None; a gradient has the "
                "shape and dtype of its parameter, so count p.numel() × p.element_size() of the parameters.")
    return None


def _check_allreduce(fn):
    require_function(fn, "allreduce_seconds")
    for name, model, world, bw in _q3_models():
        what = f"allreduce_seconds({name}, world_size={world}, bandwidth_gb_s={bw})"
        # counted before the call, which gets a copy: an answer that changes the model (.float(),
        # requires_grad_()) must not change the expected result
        grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        every = sum(p.numel() * p.element_size() for p in model.parameters())
        numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
        given = copy.deepcopy(model)
        before = snapshot(given)
        raw = _call(fn, given, world, bw, what=what, explain=_explain_q3, none_ok=True)
        if raw is None and world == 1:      # the right idea (nothing to exchange), but not a time
            raise Wrong(f"{what} returned None. With one process there is indeed nothing to exchange, so the "
                        "all-reduce takes no time: return 0.0 seconds, a number the caller can add to a step's "
                        "time, not None.")
        if raw is None:
            raise NotDone(f"{what} returned None: did you forget `return`?")
        got = as_number(what, raw)
        changed = changes(before, given)
        if changed:
            raise Wrong(f"{what} changed the model it was given ({changed}): in the notebook that changes your "
                        "model for good. Count the bytes without changing anything (no .float(), .half() or "
                        "requires_grad_()): p.numel() × p.element_size() of each parameter that requires a gradient.")
        first_size = next(iter(model.parameters())).element_size()
        factor = 2 * (world - 1) / world
        want = factor * grads / (bw * 1e9)
        if math.isclose(got, want, rel_tol=0.005, abs_tol=1e-15):
            continue
        if world == 1:
            raise Wrong(f"{what} is {got:.3g} s; with one process there is nobody to exchange with: 0 s. "
                        "The ring formula has the factor (world_size - 1) / world_size.")
        candidates = [
            (want * 1e3, "milliseconds: return seconds"),
            (want * 1e6, "microseconds: return seconds"),
            (want * 8, "bits: a bandwidth in GB/s is bytes per second, so do not multiply by 8"),
            (want / 8, "a division by 8: the sizes are already in bytes"),
            (want * 1e9 / 2 ** 30, "GiB (2^30 bytes): GB/s here means 10^9 bytes per second"),
            (want / 2, "no factor 2: a ring all-reduce is a reduce-scatter and then an all-gather, each "
                       "sending (world_size - 1) / world_size of the gradients"),
            (2 * grads / (bw * 1e9), "no (world_size - 1) / world_size: each rank sends 2 (N - 1) / N of "
                                     "the gradient bytes, not twice all of them"),
            (grads / (bw * 1e9), "just the gradient bytes over the bandwidth: a ring all-reduce sends "
                                 "2 (N - 1) / N of them per rank"),
            (factor * every / (bw * 1e9), "frozen parameters (requires_grad=False) too: they have no "
                                          "gradient, so nothing of theirs is all-reduced"),
            (factor * numel * first_size / (bw * 1e9), "one parameter's element_size() for every parameter: "
                                                       "each parameter has its own dtype, so use each one's "
                                                       "p.element_size() (this model mixes 2- and 4-byte layers)"),
            (factor * numel * 4 / (bw * 1e9), "4 bytes per parameter: use p.element_size(), a float16 "
                                              "model has 2"),
            (factor * numel / (bw * 1e9), "the number of parameters, not their bytes (numel × element_size)"),
            (want * world, "a multiplication by world_size: that is the traffic of all ranks together; they "
                           "send at the same time, each over its own link"),
            (factor * grads, "bytes, not seconds: divide by the bandwidth in bytes per second"),
        ]
        for value, mistake in candidates:
            if math.isclose(got, value, rel_tol=0.005):
                raise Wrong(f"{what} is {got:.4g}: that counts {mistake}.")
        raise Wrong(f"{what} is {got:.4g} s, expected {want:.4g} s = 2 (N - 1)/N × {grads} gradient bytes / "
                    f"({bw:g} × 10^9 B/s).")
    return ("each step moves 2 (N - 1)/N × the gradient bytes through every rank's link; DDP hides part "
            "of it behind the backward pass by all-reducing bucket by bucket.")


q3 = Exercise("ep09.q3", _check_allreduce,
              hint=("Which parameters get gradients, and how many bytes does each of their numbers take? How "
                    "many times the gradient bytes does each rank send in a ring all-reduce?",
                    "Add up elements times bytes per element over the parameters that require gradients. A ring "
                    "all-reduce sends 2 (N − 1)/N times that through every rank's link; divide by the link's "
                    "bytes per second (gigabytes are 10⁹ bytes)."),
              solution=solution_link(NOTEBOOK))


# --- q4: uneven shards, every rank in every collective ---------------------------------------

class _Deadlock(BaseException):
    """Raised in a simulated rank that waits for a collective no other rank will ever make
    (a BaseException: `except Exception` in the answer cannot hide it)."""


class _World:
    """Simulated ranks (threads) and an all_reduce that waits for all of them.

    A rank that is only late (still computing) is waited for; a deadlock is declared only when no
    rank can move on: every rank has finished or waits in a collective that not all ranks have
    joined. So a slow machine never turns a right answer into a "deadlock", and a real deadlock is
    named at once, without a timeout.
    """

    def __init__(self, size: int):
        self.size = size
        self.cond = threading.Condition()
        self.slots: dict = {}
        self.calls = [0] * size
        self.where: list = ["running"] * size     # "running", ("waiting", k) or "done"
        self.deadlock = False
        self.stopped = False
        self.mismatch = None
        self.first = None                          # (op, {rank: value}) of the first collective

    def _stuck(self) -> bool:
        waiting = [w for w in self.where if w != "done"]
        return all(isinstance(w, tuple) and len(self.slots[w[1]]) < self.size for w in waiting) and bool(waiting)

    def finished(self, rank: int) -> None:
        with self.cond:
            self.where[rank] = "done"
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def all_reduce_for(self, rank: int):
        def all_reduce(value, op="sum"):
            if op not in ("sum", "min", "max"):
                raise ValueError(f"all_reduce: op must be 'sum', 'min' or 'max', got {op!r}")
            integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
            if getattr(value, "ndim", 0) or isinstance(value, (list, tuple, str, bytes)):
                raise TypeError(f"all_reduce here takes one number, got {type(value).__name__} "
                                f"{value!r:.60}: call it once per number")
            integral = integral or (getattr(value, "dtype", None) is not None and "int" in str(value.dtype))
            value = float(value)
            with self.cond:
                k = self.calls[rank]
                self.calls[rank] += 1
                entries = self.slots.setdefault(k, {})
                entries[rank] = (op, value, integral)
                self.where[rank] = ("waiting", k)
                self.cond.notify_all()
                while len(entries) < self.size:
                    if self.stopped:
                        raise _Deadlock()
                    if self.deadlock or self._stuck():
                        self.deadlock = True
                        self.cond.notify_all()
                        raise _Deadlock()
                    self.cond.wait(0.5)
                self.where[rank] = "running"
            ops = {o for o, _, _ in entries.values()}
            if len(ops) > 1 and self.mismatch is None:
                self.mismatch = (k, {r: o for r, (o, _, _) in sorted(entries.items())})
            if k == 0 and len(ops) == 1:
                self.first = (op, {r: v for r, (_, v, _) in entries.items()})
            values = [v for _, v, _ in entries.values()]
            result = {"sum": sum, "min": min, "max": max}[op](values)
            # like an all_reduce of an integer tensor: whole numbers in, a whole number out
            return int(result) if all(i for _, _, i in entries.values()) else result
        return all_reduce


def _reference(batches_per_rank, lr, divide=True, loss_after_step=False):
    world = len(batches_per_rank)
    steps = min(len(b) for b in batches_per_rank)
    weight, losses = 0.0, []

    def mean_loss(w, s):
        return sum(float(np.mean((w - np.asarray(b[s])) ** 2) / 2) for b in batches_per_rank) / world

    for s in range(steps):
        grads = [weight - float(np.mean(b[s])) for b in batches_per_rank]
        before = mean_loss(weight, s)
        weight -= lr * sum(grads) / (world if divide else 1)
        losses.append(mean_loss(weight, s) if loss_after_step else before)
    return weight, losses


def _q4_cases():
    rng = np.random.default_rng(7)

    def shard(n):
        return [list(rng.normal(1.0, 1.0, 4).round(3)) for _ in range(n)]

    return [[shard(5), shard(4)], [shard(3), shard(6), shard(4)], [shard(4), shard(4)],
            [shard(2), shard(5), shard(5), shard(3)]]


def _check_train(fn):
    require_function(fn, "train")
    lr = 0.1
    for batches_per_rank in _q4_cases():
        world = len(batches_per_rank)
        counts = [len(b) for b in batches_per_rank]
        case = f"{world} ranks with {counts} batches"
        sim = _World(world)
        results, errors = [None] * world, [None] * world
        given = copy.deepcopy(batches_per_rank)     # each rank's own copy: compared afterwards

        def run(rank):
            try:
                results[rank] = fn(rank, world, given[rank], sim.all_reduce_for(rank), lr)
            except BaseException as exc:  # noqa: BLE001 - reported to the learner
                errors[rank] = exc
            finally:
                sim.finished(rank)

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(world)]
        for t in threads:
            t.start()
        seconds = _exercises.DEADLINE_S
        deadline = time.monotonic() + seconds           # one deadline for all ranks together
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads):
            busy = [r for r, w in enumerate(sim.where) if w == "running"]
            for r, t in enumerate(threads):             # stop the endless loop, not only stop waiting for it
                if t.is_alive() and r in busy:
                    interrupt_thread(t)
            sim.stop()
            for t in threads:
                t.join(timeout=2.0)
            where = f" (rank {busy[0]} was still computing, not waiting in a collective)" if busy else ""
            raise Wrong(deadline_message(f"{case}: train()", seconds) + where)
        if sim.first is not None and sim.first[0] == "max" and len(set(counts)) > 1 and \
                sorted(sim.first[1].values()) == sorted(map(float, counts)):
            raise Wrong(f"{case}: your first collective takes the largest shard's step count (op='max'); this "
                        "exercise asks for the smallest (op='min'), so that no rank runs out of data. (DDP's "
                        "join() handles the other way, with zero contributions from ranks that ran out.)")
        other = [(r, e) for r, e in enumerate(errors) if e is not None and not isinstance(e, _Deadlock)]
        if other:
            rank, exc = other[0]
            if "____" in str(exc) or "_Blank" in str(exc) or isinstance(exc, NotDone):
                raise NotDone("train still uses ____: replace it with your code.")
            if isinstance(exc, IndexError) and len(set(counts)) > 1:
                raise Wrong(f"{case}: rank {rank} raised IndexError: {exc}. It ran out of batches: the step "
                            "count must be the smallest shard's, agreed with all_reduce(..., op='min').")
            raise Wrong(error_message(f"{case}: rank {rank}", exc))
        if given != batches_per_rank:
            rank = next(r for r in range(world) if given[r] != batches_per_rank[r])
            raise Wrong(f"{case}: rank {rank} changed the list of batches it was given (it now has "
                        f"{len(given[rank])} of {counts[rank]}): a loader's batches are not yours to drop or change. "
                        "Agree on the number of steps with all_reduce(..., op='min') and stop there.")
        if sim.mismatch is not None:
            k, ops = sim.mismatch
            raise Wrong(f"{case}: in collective call #{k + 1} the ranks asked for different reductions {ops}. "
                        "Every rank must make the same collective calls in the same order.")
        if any(isinstance(e, _Deadlock) for e in errors):
            stuck = [r for r, e in enumerate(errors) if isinstance(e, _Deadlock)]
            calls = {r: sim.calls[r] for r in range(world)}
            raise Wrong(f"{case}: deadlock. Ranks {stuck} waited in an all_reduce that the other ranks, finished "
                        f"or waiting elsewhere, could never call (collective calls per rank: {calls}). Every "
                        "rank must call every all_reduce: the same number of steps on every rank (agree on "
                        "the smallest shard's count with op='min'), and no collective inside `if rank == 0`.")
        want_w, want_losses = _reference(batches_per_rank, lr)
        for rank, result in enumerate(results):
            result = require_answer(result, f"train(rank={rank}, ...)")
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise Wrong(f"{case}: train should return (weight, losses); rank {rank} returned {result!r:.80}.")
        weights = [as_number("weight", r[0]) for r in results]
        if max(weights) - min(weights) > 1e-9:
            raise Wrong(f"{case}: the ranks ended with different weights {[round(w, 5) for w in weights]}. "
                        "Each rank must step with the gradient averaged over all ranks (all_reduce, then "
                        "divide by world_size), not with its own, and all ranks must call their all_reduces in "
                        "the same order (gradient, then loss), or one rank's gradient is summed with another's loss.")
        if not math.isclose(weights[0], want_w, rel_tol=1e-6, abs_tol=1e-9):
            steps = min(counts)
            if math.isclose(weights[0], _reference(batches_per_rank, lr, divide=False)[0], rel_tol=1e-6):
                raise Wrong(f"{case}: weight {weights[0]:.5f}: the summed gradient was not divided by "
                            "world_size, so the step is world_size times too large.")
            raise Wrong(f"{case}: weight {weights[0]:.5f}, expected {want_w:.5f} after {steps} steps with "
                        "the gradient averaged over the ranks.")
        for rank, result in enumerate(results):
            losses = result[1]
            if isinstance(losses, (str, bytes)) or not hasattr(losses, "__len__"):
                raise Wrong(f"{case}: losses should be a list, one mean loss per step; got {type(losses).__name__}.")
            got = [as_number("loss", v) for v in losses]
            if len(got) != len(want_losses):
                raise Wrong(f"{case}: rank {rank} returned {len(got)} losses for {len(want_losses)} steps.")
            if not np.allclose(got, want_losses, rtol=1e-6, atol=1e-12):
                after = _reference(batches_per_rank, lr, loss_after_step=True)[1]
                if np.allclose(got, after, rtol=1e-6, atol=1e-12):
                    raise Wrong(f"{case}: rank {rank}'s losses are the mean over the ranks, but at the weight "
                                "after each step: log the loss before the step, at the weight the gradient "
                                "was computed with.")
                raise Wrong(f"{case}: rank {rank}'s losses {np.round(got, 4).tolist()} are not the mean over "
                            f"all ranks {np.round(want_losses, 4).tolist()}: all_reduce the local loss on "
                            "every rank and divide by world_size.")
    return ("every rank takes the same number of steps and calls every collective, in the same order: "
            "no deadlock, identical weights. For a map-style dataset DistributedSampler makes the shards "
            "equal (it pads or drops); for streaming data, agree on the step count like this or use DDP's "
            "join() context manager.")


q4 = Exercise("ep09.q4", _check_train,
              hint=("Which all_reduce does only rank 0 call, and what happens to the ranks that never call it? "
                    "How can all ranks agree on one number of steps before the loop starts?",
                    "Before the loop, all-reduce the number of local batches with the minimum and loop that many "
                    "steps. Inside it, every rank all-reduces both the gradient and the loss (computed before the "
                    "step), divides each by world_size, logs the loss, and only then updates its weight."),
              solution=solution_link(NOTEBOOK))
