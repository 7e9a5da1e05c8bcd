"""Episode 13's checks, three ways: right answers pass, stubs are "not done", wrong answers are named.

The wrong answers are the mistakes each exercise is about: an as-even-as-possible split where FSDP uses
torch.chunk, the padding counted as held, FSDP1's flat padding, the gathered layer of ZeRO-3 forgotten,
ZeRO-1 confused with ZeRO-2, ZeRO-2's weights sharded as FSDP holds them at rest, the gathered unit at
another number of bytes, TP over every GPU, `<` for "at most"; under HSDP the whole gradients
all-reduced across nodes, ZeRO-3's second all-gather forgotten, the ring's share of the wrong group;
every old file read when resharding; plus constants, wrong types and units.
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
    "floor + 1 rows per chunk": (lambda s, w: ([max(0, min(s[0] // w + 1, s[0] - r * (s[0] // w + 1))) * row(s)
                                                for r in range(w)], (s[0] // w + 1) * row(s)), ["+ 1"]),
    "floor + 1 padding": (q1_variant(allocated=lambda s, w: (s[0] // w + 1) * row(s)), ["+ 1", "divide"]),
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

def need(params, largest, gpus, *, ddp=16, gathered=4, zero1_grads=False, zero2_params=False, tp=None):
    tp = min(8, gpus) if tp is None else tp(gpus)
    return {"DDP": ddp * params,
            "ZeRO-1": 2 * params + 14 * params / gpus if zero1_grads else 4 * params + 12 * params / gpus,
            "ZeRO-2": 16 * params / gpus if zero2_params else 2 * params + 14 * params / gpus,
            "ZeRO-3": 16 * params / gpus + gathered * largest,
            "ZeRO-3+TP": 16 * params / gpus + gathered * largest / tp}


def strategy_that_fits(params, largest, gpus, memory):
    return next((s for s, b in need(params, largest, gpus).items() if b <= memory), "none")


def strategy_in_gb(params, largest, gpus, memory):
    """Another way of writing it: in GB, with the TP split spelled out."""
    state = 16 * params / gpus / 1e9
    per_gpu = [("DDP", 16 * params / 1e9), ("ZeRO-1", 4 * params / 1e9 + 12 * params / gpus / 1e9),
               ("ZeRO-2", 2 * params / 1e9 + 14 * params / gpus / 1e9),
               ("ZeRO-3", state + 4 * largest / 1e9),
               ("ZeRO-3+TP", state + 4 * largest / 1e9 / (8 if gpus >= 8 else gpus))]
    for name, gb in per_gpu:
        if gb <= memory / 1e9 + 1e-12:
            return name.lower()
    return "none"


def q2_variant(order=None, none="none", per_all=False, strict=False, **kw):
    def fn(params, largest, gpus, memory):
        bytes_ = need(params, largest, gpus, **kw)
        room = memory * gpus if per_all else memory
        fits = (lambda b: b < room) if strict else (lambda b: b <= room)
        return next((s for s in (order or bytes_) if fits(bytes_[s])), none)
    return fn


Q2_WRONG = {
    "gathered unit forgotten": (q2_variant(gathered=0), ["gathers while it computes"]),
    "gathered weights only (2 bytes)": (q2_variant(gathered=2), ["2 bytes per parameter", "gradients"]),
    "gathered in float32 (8 bytes)": (q2_variant(gathered=8), ["8 bytes per parameter", "16 bits"]),
    "gathered at 6 bytes": (q2_variant(gathered=6), ["6 bytes per parameter"]),
    "gathered with all its state (16 bytes)": (q2_variant(gathered=16), ["16 bytes per parameter", "all its state"]),
    "TP over all the GPUs": (q2_variant(tp=lambda g: g), ["inside one node"]),
    "TP always 8 ways": (q2_variant(tp=lambda g: 8), ["fewer than 8 GPUs"]),
    "strict <": (q2_variant(strict=True), ["at most", "exactly"]),
    "DDP weights only": (q2_variant(ddp=4), ["4 bytes per parameter"]),
    "ZeRO-1 shards gradients": (q2_variant(zero1_grads=True), ["that is ZeRO-2"]),
    "ZeRO-2 shards weights (FSDP at rest)": (q2_variant(zero2_params=True), ["SHARD_GRAD_OP", "whole"]),
    "TP before ZeRO-3": (q2_variant(order=["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3+TP", "ZeRO-3"]), ["order given"]),
    "never none": (q2_variant(none="ZeRO-3+TP"), ["'none'"]),
    "all GPUs' memory": (q2_variant(per_all=True), ["all the GPUs together"]),
    "always ZeRO-3": (lambda p, l, g, m: "ZeRO-3", ["for every case"]),
    "plain TP": (lambda p, l, g, m: "TP" if strategy_that_fits(p, l, g, m) == "ZeRO-3+TP"
                 else strategy_that_fits(p, l, g, m), ["'ZeRO-3+TP'"]),
    "a number": (lambda p, l, g, m: 3, ["return one of"]),
    "an unknown name": (lambda p, l, g, m: "FSDP", ["return one of"]),
}


def test_q2_right_answers_pass_and_stubs_are_not_done():
    for fn in (strategy_that_fits, strategy_in_gb):
        result, message = outcome(ep13.q2, fn)
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


def test_q2_the_gathered_bytes_and_the_limit_decide_a_case():
    """Failed on the old cases: any bytes per parameter for the gathered unit passed, and no case sat
    at the limit, so `<` passed for `<=`."""
    for wrong in (0, 2, 6, 8, 16):
        assert any(ep13._q2_rule(*c, gathered=wrong) != ep13._q2_rule(*c) for c in ep13.Q2_CASES), wrong
    assert any(ep13._q2_rule(*c, strict=True) != ep13._q2_rule(*c) for c in ep13.Q2_CASES)
    assert any(ep13._q2_rule(*c, tp="all") != ep13._q2_rule(*c) for c in ep13.Q2_CASES)


# --- q3 -----------------------------------------------------------------------------------------------

def hsdp_bytes_sent(n, g, m, b, inside_passes=3, across_passes=2, share=True, inside_world=None, ring=True,
                    scale=1.0):
    w = inside_world(g, m) if inside_world else g
    inside = inside_passes * ((w - 1) / w if ring else 1) * n * b
    across = across_passes * ((m - 1) / m if ring else 1) * (n / g if share else n) * b
    return inside * scale, across * scale


def hsdp_other_way(n_params, gpus_per_node, nodes, bytes_per_value):
    model = n_params * bytes_per_value
    inside = sum((gpus_per_node - 1) / gpus_per_node * model for _ in ("gather", "gather again", "scatter"))
    shard = model / gpus_per_node
    return [inside, 2 * shard * (nodes - 1) / nodes]


def q3_variant(**kw):
    return lambda n, g, m, b: hsdp_bytes_sent(n, g, m, b, **kw)


Q3_WRONG = {
    "whole gradients across nodes": (q3_variant(share=False), ["whole gradients", "shard"]),
    "ZeRO-2 inside": (q3_variant(inside_passes=2), ["3 passes"]),
    "all-reduce once": (q3_variant(across_passes=1), ["all-reduce is two"]),
    "3 passes across": (q3_variant(across_passes=3), ["only the gradients cross nodes"]),
    "ring of all the GPUs inside": (q3_variant(inside_world=lambda g, m: g * m), ["(G − 1)/G"]),
    "no ring share": (q3_variant(ring=False), ["ring's share"]),
    "swapped": (lambda n, g, m, b: hsdp_bytes_sent(n, g, m, b)[::-1], ["wrong way round"]),
    "all GPUs together": (lambda n, g, m, b: tuple(v * g * m for v in hsdp_bytes_sent(n, g, m, b)),
                          ["all the GPUs"]),
    "bits": (q3_variant(scale=8), ["bits"]),
    "GB": (q3_variant(scale=1e-9), ["in GB"]),
    "no bytes per value": (lambda n, g, m, b: hsdp_bytes_sent(n, g, m, 1), ["bytes_per_value"]),
    "a constant": (lambda n, g, m, b: (1e9, 1e8), ["for every case"]),
    "one number": (lambda n, g, m, b: sum(hsdp_bytes_sent(n, g, m, b)), ["pair"]),
    "text": (lambda n, g, m, b: ("3 GB", "1 GB"), ["should be a number"]),
}


def test_q3_right_answers_pass_and_stub_is_not_done():
    for fn in (hsdp_bytes_sent, hsdp_other_way):
        result, message = outcome(ep13.q3, fn)
        assert result == "correct", message
    assert outcome(ep13.q3, ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q3_WRONG)
def test_q3_wrong_answers_are_named(name):
    fn, words = Q3_WRONG[name]
    assert_wrong(ep13.q3, (fn,), words)


def test_q3_fixtures_separate_the_collectives():
    """One node (nothing crosses), one GPU per node (nothing stays inside), and several of each."""
    cases = ep13.Q3_CASES
    assert any(c[2] == 1 for c in cases) and any(c[1] == 1 for c in cases)
    assert any(c[1] > 1 and c[2] > 1 and c[1] != c[2] for c in cases)


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
    "sources unsorted": (lambda s, n, r: (reshard(s, n, r)[0], reshard(s, n, r)[1][::-1]
                                          if len(reshard(s, n, r)[1]) > 1 else reshard(s, n, r)[1]), ["sorted"]),
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
