"""Episode 13's checks, three ways: right answers pass, stubs are "not done", wrong answers are named.

The wrong answers are the mistakes each exercise is about: an as-even-as-possible split where FSDP uses
torch.chunk, the padding counted as held, FSDP1's flat padding, the gathered layer of ZeRO-3 forgotten,
ZeRO-1 confused with ZeRO-2, DDP's all-reduce counted once, ZeRO-3's second all-gather forgotten, the
ring's (N - 1)/N left out, every old file read when resharding; plus constants, wrong types and units.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpucourse.checks import ep13
from gpucourse.exercises import ____

from checking import assert_two_step_hints, assert_wrong, outcome


# --- q1 -----------------------------------------------------------------------------------------------

def shard_numels(shape, world):
    rows, row = shape[0], math.prod(shape[1:])
    size = math.ceil(rows / world)
    return [max(0, min(size, rows - r * size)) * row for r in range(world)], size * row


def with_torch_chunk(shape, world):
    chunks = torch.empty(shape).chunk(world)
    owned = [c.numel() for c in chunks] + [0] * (world - len(chunks))
    return owned, chunks[0].numel()


def q1_variant(owned=None, allocated=None):
    def fn(shape, world):
        right_owned, right_alloc = shard_numels(shape, world)
        return (owned(shape, world) if owned else right_owned), (allocated(shape, world) if allocated else right_alloc)
    return fn


def row(shape):
    return math.prod(shape[1:])


Q1_WRONG = {
    "array_split": (q1_variant(owned=lambda s, w: [len(a) * row(s) for a in np.array_split(np.arange(s[0]), w)]),
                    ["as evenly as possible"]),
    "floor rows": (q1_variant(owned=lambda s, w: [s[0] // w * row(s)] * w), ["remainder"]),
    "padding counted as held": (q1_variant(owned=lambda s, w: [math.ceil(s[0] / w) * row(s)] * w),
                                ["allocates", "padding"]),
    "elements not rows": (q1_variant(owned=lambda s, w: [math.prod(s) / w] * w), ["dimension 0"]),
    "rows not elements": (q1_variant(owned=lambda s, w: [x // row(s) for x in shard_numels(s, w)[0]]),
                          ["counted rows"]),
    "bytes": (q1_variant(owned=lambda s, w: [4 * x for x in shard_numels(s, w)[0]]), ["bytes"]),
    "flat padding (FSDP1)": (q1_variant(allocated=lambda s, w: math.ceil(math.prod(s) / w)), ["FSDP1"]),
    "numel / world allocated": (q1_variant(allocated=lambda s, w: math.prod(s) / w), ["not a whole shard"]),
    "whole tensor allocated": (q1_variant(allocated=lambda s, w: math.prod(s)), ["whole tensor"]),
    "a constant": (lambda s, w: ([1] * w, 1), ["same shares for every case"]),
    "not a pair": (lambda s, w: shard_numels(s, w)[0], ["pair"]),
    "one number too few": (lambda s, w: (shard_numels(s, w)[0][:-1], shard_numels(s, w)[1]), ["one per rank"]),
}


def test_q1_right_answers_pass_and_stubs_are_not_done():
    for fn in (shard_numels, with_torch_chunk):
        result, message = outcome(ep13.q1, fn)
        assert result == "correct", message
    assert outcome(ep13.q1, ____)[0] == "not-done"
    assert outcome(ep13.q1, lambda shape, world: ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q1_WRONG)
def test_q1_wrong_answers_are_named(name):
    fn, words = Q1_WRONG[name]
    assert_wrong(ep13.q1, (fn,), words)


def test_q1_fixtures_separate_the_splits():
    """Some case divides evenly, and on others torch.chunk, array_split and floor all differ."""
    cases = ep13.Q1_CASES
    assert any(shape[0] % world == 0 for shape, world in cases)
    assert any(ep13._rows(s[0], w) != ep13._rows(s[0], w, "even") for s, w in cases)
    assert any(0 in ep13._rows(s[0], w) for s, w in cases)
    assert any(math.ceil(math.prod(s) / w) != math.ceil(s[0] / w) * row(s) for s, w in cases)


def test_q1_expected_is_what_fsdp_would_hold():
    """FSDP2's own split (_chunk_with_empty) gives the check's expected shares."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import _chunk_with_empty

    for shape, world in ep13.Q1_CASES:
        chunks = _chunk_with_empty(torch.empty(shape), world, dim=0)
        assert ep13._q1_expected(shape, world) == ([c.numel() for c in chunks], chunks[0].numel())


# --- q2 -----------------------------------------------------------------------------------------------

def need(params, largest, gpus, *, ddp=16, gathered=True, zero1_grads=False, zero2_params=False):
    return {"DDP": ddp * params,
            "ZeRO-1": 2 * params + 14 * params / gpus if zero1_grads else 4 * params + 12 * params / gpus,
            "ZeRO-2": 16 * params / gpus if zero2_params else 2 * params + 14 * params / gpus,
            "ZeRO-3": 16 * params / gpus + (4 * largest if gathered else 0), "TP": 16 * params / gpus}


def strategy_that_fits(params, largest, gpus, memory):
    return next((s for s, b in need(params, largest, gpus).items() if b <= memory), "none")


def q2_variant(order=None, none="none", per_all=False, **kw):
    def fn(params, largest, gpus, memory):
        bytes_ = need(params, largest, gpus, **kw)
        room = memory * gpus if per_all else memory
        return next((s for s in (order or bytes_) if bytes_[s] <= room), none)
    return fn


Q2_WRONG = {
    "gathered layer forgotten": (q2_variant(gathered=False), ["gathers while it computes"]),
    "DDP weights only": (q2_variant(ddp=4), ["4 bytes per parameter"]),
    "ZeRO-1 shards gradients": (q2_variant(zero1_grads=True), ["that is ZeRO-2"]),
    "ZeRO-2 shards weights": (q2_variant(zero2_params=True), ["that is ZeRO-3"]),
    "TP before ZeRO-3": (q2_variant(order=["DDP", "ZeRO-1", "ZeRO-2", "TP", "ZeRO-3"]), ["order given"]),
    "never none": (q2_variant(none="TP"), ["'none'"]),
    "all GPUs' memory": (q2_variant(per_all=True), ["all the GPUs together"]),
    "always ZeRO-3": (lambda p, l, g, m: "ZeRO-3", ["for every case"]),
    "a number": (lambda p, l, g, m: 3, ["return one of"]),
    "an unknown name": (lambda p, l, g, m: "FSDP", ["return one of"]),
}


def test_q2_right_answers_pass_and_stubs_are_not_done():
    result, message = outcome(ep13.q2, strategy_that_fits)
    assert result == "correct", message
    spelled = lambda *a: strategy_that_fits(*a).lower().replace("-", " ")  # noqa: E731
    assert outcome(ep13.q2, spelled)[0] == "correct"
    assert outcome(ep13.q2, ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q2_WRONG)
def test_q2_wrong_answers_are_named(name):
    fn, words = Q2_WRONG[name]
    assert_wrong(ep13.q2, (fn,), words)


def test_q2_fixtures_need_every_answer():
    assert {ep13._q2_rule(*c) for c in ep13.Q2_CASES} == set(ep13.ORDER) | {"none"}


# --- q3 -----------------------------------------------------------------------------------------------

def comm_bytes_per_step(n, world, strategy, size, passes=None, ring=True, scale=1.0):
    factor = (passes or {"DDP": 2, "ZeRO-2": 2, "ZeRO-3": 3})[strategy]
    return factor * ((world - 1) / world if ring else 1) * n * size * scale


def q3_variant(**kw):
    return lambda n, world, strategy, size: comm_bytes_per_step(n, world, strategy, size, **kw)


Q3_WRONG = {
    "no (N-1)/N": (q3_variant(ring=False), ["(N − 1)/N"]),
    "all-reduce once": (q3_variant(passes={"DDP": 1, "ZeRO-2": 2, "ZeRO-3": 3}), ["twice"]),
    "ZeRO-3 gathers once": (q3_variant(passes={"DDP": 2, "ZeRO-2": 2, "ZeRO-3": 2}), ["3 passes"]),
    "ZeRO-2 gathers twice": (q3_variant(passes={"DDP": 2, "ZeRO-2": 3, "ZeRO-3": 3}), ["2 passes"]),
    "all ranks together": (lambda n, w, s, b: comm_bytes_per_step(n, w, s, b) * w, ["all the ranks"]),
    "bits": (q3_variant(scale=8), ["bits"]),
    "GB": (q3_variant(scale=1e-9), ["in GB"]),
    "no bytes per value": (lambda n, w, s, b: comm_bytes_per_step(n, w, s, 1), ["bytes_per_value"]),
    "a constant": (lambda n, w, s, b: 1e9, ["for every case"]),
    "text": (lambda n, w, s, b: "3 GB", ["should be a number"]),
}


def test_q3_right_answer_passes_and_stub_is_not_done():
    result, message = outcome(ep13.q3, comm_bytes_per_step)
    assert result == "correct", message
    assert outcome(ep13.q3, ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q3_WRONG)
def test_q3_wrong_answers_are_named(name):
    fn, words = Q3_WRONG[name]
    assert_wrong(ep13.q3, (fn,), words)


def test_q3_a_world_of_one_sends_nothing():
    assert_wrong(ep13.q3, (lambda n, w, s, b: comm_bytes_per_step(n, max(w, 2), s, b),), ["nobody to send to"])


# --- q4 -----------------------------------------------------------------------------------------------

def bounds(rows, world):
    size = math.ceil(rows / world)
    return [(min(r * size, rows), min((r + 1) * size, rows)) for r in range(world)]


def reshard(saved, new_world, new_rank, touching=False, even=False, empty=False):
    full = torch.cat(saved)
    if even:
        parts = np.array_split(np.arange(len(full)), new_world)
        start = int(parts[new_rank][0]) if len(parts[new_rank]) else 0
        stop = start + len(parts[new_rank])
    else:
        start, stop = bounds(len(full), new_world)[new_rank]
    sources, first = [], 0
    for r, s in enumerate(saved):
        last = first + len(s)
        if not len(s):
            hit = empty and start < stop and start <= first <= stop
        elif touching:
            hit = start < stop and first <= stop and last >= start
        else:
            hit = first < stop and last > start
        if hit:
            sources.append(r)
        first = last
    return full[start:stop], sources


Q4_WRONG = {
    "array_split": (lambda s, n, r: reshard(s, n, r, even=True), ["as evenly as possible"]),
    "touching ends": (lambda s, n, r: reshard(s, n, r, touching=True), ["overlap"]),
    "every old rank": (lambda s, n, r: (reshard(s, n, r)[0], list(range(len(s)))), ["every old rank"]),
    "same rank number": (lambda s, n, r: (reshard(s, n, r)[0], [r] if r < len(s) else []), ["this rank's number"]),
    "empty shards read": (lambda s, n, r: reshard(s, n, r, empty=True), ["saved no rows"]),
    "old shard returned": (lambda s, n, r: (s[r] if r < len(s) else s[0], reshard(s, n, r)[1]), ["old rank"]),
    "whole tensor": (lambda s, n, r: (torch.cat(s), reshard(s, n, r)[1]), ["whole tensor"]),
    "not a pair": (lambda s, n, r: reshard(s, n, r)[0], ["pair"]),
    "sources not numbers": (lambda s, n, r: (reshard(s, n, r)[0], "all"), ["old rank numbers"]),
    "a list, not a tensor": (lambda s, n, r: (reshard(s, n, r)[0].tolist(), reshard(s, n, r)[1]), ["tensor"]),
}


def test_q4_right_answer_passes_and_stub_is_not_done():
    result, message = outcome(ep13.q4, reshard)
    assert result == "correct", message
    assert outcome(ep13.q4, ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q4_WRONG)
def test_q4_wrong_answers_are_named(name):
    fn, words = Q4_WRONG[name]
    assert_wrong(ep13.q4, (fn,), words)


# --- hints --------------------------------------------------------------------------------------------

CODE = ("()", " = ", "==", "return ", "import", "[", "]", "**", "//", "torch.", "np.", "math.", "ceil(")


@pytest.mark.parametrize("exercise", [ep13.q1, ep13.q2, ep13.q3, ep13.q4], ids=lambda q: q.name)
def test_hints_come_in_two_steps_without_the_code(exercise, capsys):
    assert_two_step_hints(exercise, capsys, CODE)
