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
    "TP over all the GPUs": (q2_variant(tp=lambda g: g), ["inside one server"]),
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
    "old shard returned": (lambda s, n, r: (s[r] if r < len(s) else s[0][:0], reshard(s, n, r)[1]), ["old rank"]),
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


# --- answers written by a reviewer who had not read these tests -------------------------------------------
# Each is one mistake, written as a learner would. Before the checks required a mistake to explain every
# case, 18 of these were named by a mistake they did not make (the one that fitted one wrong case), 17 got
# a message naming no cause, and two were judged right (q4_w14_end_inclusive: no case had an old shard
# starting exactly where the new piece ends; q4_w19_sources_set: a set of ranks below 8 iterates sorted).


def q1_w09_alloc_last_share(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = math.ceil(rows / world_size)
    held = [max(0, min(size, rows - r * size)) * row for r in range(world_size)]
    return held, held[-1]

def q1_w16_round_nearest(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = round(rows / world_size)
    held = [max(0, min(size, rows - r * size)) * row for r in range(world_size)]
    return held, size * row

def q1_w20_alloc_bytes(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = math.ceil(rows / world_size)
    return [max(0, min(size, rows - r * size)) * row for r in range(world_size)], 4 * size * row

def q1_w22_alloc_plus_one_row(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = math.ceil(rows / world_size)
    held = [max(0, min(size, rows - r * size)) * row for r in range(world_size)]
    return held, held[0] + row

def q1_w13_row_is_shape1(shape, world_size):
    rows = shape[0]
    row = shape[1] if len(shape) > 1 else 1
    size = math.ceil(rows / world_size)
    return [max(0, min(size, rows - r * size)) * row for r in range(world_size)], size * row

def q1_w14_remainder_last(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = rows // world_size
    held = [size * row] * (world_size - 1) + [(rows - size * (world_size - 1)) * row]
    return held, max(held)

def q1_w15_no_clamp_negative(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = math.ceil(rows / world_size)
    return [min(size, rows - r * size) * row for r in range(world_size)], size * row

def q1_w18_hardcoded(shape, world_size):
    return [4096, 4096, 4096, 4096], 4096

def q1_w01_even_split(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    held = [(rows // world_size + (1 if r < rows % world_size else 0)) * row for r in range(world_size)]
    return held, math.ceil(rows / world_size) * row

def q1_w04_floor_plus_one(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = rows // world_size + 1
    held = [max(0, min(size, rows - r * size)) * row for r in range(world_size)]
    return held, size * row

def q1_w08_alloc_flat(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = math.ceil(rows / world_size)
    held = [max(0, min(size, rows - r * size)) * row for r in range(world_size)]
    return held, math.ceil(math.prod(shape) / world_size)

def q1_w11_alloc_floor(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = math.ceil(rows / world_size)
    held = [max(0, min(size, rows - r * size)) * row for r in range(world_size)]
    return held, rows // world_size * row

def q1_w23_floor_loop_hang(shape, world_size):
    rows, row = shape[0], math.prod(shape[1:])
    size = rows // world_size
    held, left = [], rows
    while left > 0:
        take = min(size, left)
        held.append(take * row)
        left -= take
    held = (held + [0] * world_size)[:world_size]
    return held, size * row

def q2_w14_zero1_forgets_grads(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 2 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w16_least_memory(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in reversed(ep13.ORDER):
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w18_tp_divides_state(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, (16 * p / n + 4 * u) / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w19_gathered_1B(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + u, 16 * p / n + u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w20_zero3_no_shard(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / max(n - 1, 1) + 4 * u, 16 * p / max(n - 1, 1) + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w23_none_capital(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return None

def q2_w15_gb_units(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need / 1e9 <= m:
            return name
    return "none"

def q2_w17_tp_only_full_node(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / (8 if n >= 8 else 1)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w21_zero2_12_over_n(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 4 * p + 12 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w24_skips_zero1(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n = n_params, largest_unit, n_gpus
    for name, need in (("DDP", 16 * p), ("ZeRO-2", 2 * p + 14 * p / n), ("ZeRO-3", 16 * p / n + 4 * u),
                       ("ZeRO-3+TP", 16 * p / n + 4 * u / min(8, n))):
        if need <= gpu_bytes:
            return name
    return "none"

def q2_w01_no_gathered(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n, 16 * p / n]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w07_strict_less(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need < m:
            return name
    return "none"

def q2_w09_zero1_shards_grads(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 2 * p + 14 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w10_zero2_shards_weights(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 16 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "none"

def q2_w12_never_none(n_params, largest_unit, n_gpus, gpu_bytes):
    p, u, n, m = n_params, largest_unit, n_gpus, gpu_bytes
    per_gpu = dict(zip(ep13.ORDER, [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n + 4 * u, 16 * p / n + 4 * u / min(8, n)]))
    for name in ep13.ORDER:
        need = per_gpu[name]
        if need <= m:
            return name
    return "ZeRO-3+TP"

def q3_w12_across_shard_of_all(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model
    across = 2 * (m - 1) / m * model / (g * m)
    return inside, across

def q3_w13_across_ring_g(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model
    across = 2 * (g - 1) / g * model / g
    return inside, across

def q3_w15_across_no_over_m(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model
    across = 2 * (m - 1) * model / g
    return inside, across

def q3_w18_across_no_ring_only(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model
    across = 2 * model / g
    return inside, across

def q3_w19_bpv_inside_only(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model
    across = 2 * (m - 1) / m * n_params / g
    return inside, across

def q3_w14_integer_division(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) // g * model
    across = 2 * (m - 1) // m * model / g
    return inside, across

def q3_w16_inside_ddp_plus_gather(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 4 * (g - 1) / g * model
    across = 2 * (m - 1) / m * model / g
    return inside, across

def q3_w17_inside_shard(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model / g
    across = 2 * (m - 1) / m * model / g
    return inside, across

def q3_w20_across_fp32_grads(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model
    across = 2 * (m - 1) / m * n_params * 4 / g
    return inside, across

def q3_w21_inside_over_m(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model / m
    across = 2 * (m - 1) / m * model / g
    return inside, across

def q3_w23_across_ring_all_gpus(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    big = g * m
    return 3 * (g - 1) / g * model, 2 * (big - 1) / big * model / g

def q3_w01_across_whole(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model
    across = 2 * (m - 1) / m * model
    return inside, across

def q3_w02_inside_2_passes(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 2 * (g - 1) / g * model
    across = 2 * (m - 1) / m * model / g
    return inside, across

def q3_w05_inside_all_gpus_ring(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g * m - 1) / (g * m) * model
    across = 2 * (m - 1) / m * model / g
    return inside, across

def q3_w07_swapped(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params * bytes_per_value
    inside = 3 * (g - 1) / g * model
    across = 2 * (m - 1) / m * model / g
    return across, inside

def q3_w11_no_bytes_per_value(n_params, gpus_per_node, nodes, bytes_per_value):
    g, m = gpus_per_node, nodes
    model = n_params
    inside = 3 * (g - 1) / g * model
    across = 2 * (m - 1) / m * model / g
    return inside, across

def q4_w14_end_inclusive(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first <= stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
    return piece, sources

def q4_w19_sources_set(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    owner = [r for r, s in enumerate(saved) for _ in range(len(s))]
    return torch.cat(saved)[start:stop], {owner[i] for i in range(start, stop)}

def q4_w09_floor_size(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = rows // new_world
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first < stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
    return piece, sources

def q4_w17_sources_new_bounds(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    sources = [r for r in range(len(saved)) if min(r * size, rows) < stop and min((r + 1) * size, rows) > start]
    return torch.cat(saved)[start:stop], sources

def q4_w18_empty_piece_lists_neighbour(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first < stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
    return piece, sources if start < stop else [len([s for s in saved if len(s)]) - 1]

def q4_w10_floor_plus_one(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = rows // new_world + 1
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first < stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
    return piece, sources

def q4_w12_chunk_index_error(saved, new_world, new_rank):
    whole = torch.cat(saved)
    piece = whole.chunk(new_world)[new_rank]
    size = len(whole.chunk(new_world)[0])
    start, stop = new_rank * size, new_rank * size + len(piece)
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first < stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
    return piece, sources

def q4_w13_one_indexed(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first < stop and first + len(shard) > start:
            sources.append(rank + 1)
        first += len(shard)
    return piece, sources

def q4_w02_touching(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first <= stop and first + len(shard) >= start:
            sources.append(rank)
        first += len(shard)
    return piece, sources

def q4_w04_same_rank_only(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first < stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
    return piece, [new_rank] if new_rank < len(saved) else []

def q4_w05_includes_empty(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if (len(shard) == 0 and start < stop and start <= first <= stop) or (len(shard) and first < stop and first + len(shard) > start):
            sources.append(rank)
        first += len(shard)
    return piece, sources

def q4_w08_unsorted(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = torch.cat(saved)[start:stop]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first < stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
    return piece, sources[::-1]

def q4_w20_while_loop_hang(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    sources, first, rank = [], 0, 0
    while rank < len(saved):
        shard = saved[rank]
        if len(shard) == 0:
            continue                      # forgot rank += 1: spins on an empty shard
        if first < stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
        rank += 1
    return torch.cat(saved)[start:stop], sources

def q4_w07_old_shard(saved, new_world, new_rank):
    rows = sum(len(s) for s in saved)
    size = math.ceil(rows / new_world)
    start, stop = min(new_rank * size, rows), min((new_rank + 1) * size, rows)
    piece = saved[new_rank] if new_rank < len(saved) else saved[0][:0]
    sources, first = [], 0
    for rank, shard in enumerate(saved):
        if len(shard) and first < stop and first + len(shard) > start:
            sources.append(rank)
        first += len(shard)
    return piece, sources


REVIEWED_WRONG = {
    "q1_w09_alloc_last_share": (ep13.q1, q1_w09_alloc_last_share, ["last rank's own share"]),
    "q1_w16_round_nearest": (ep13.q1, q1_w16_round_nearest, ['nearest', 'rounds up']),
    "q1_w20_alloc_bytes": (ep13.q1, q1_w20_alloc_bytes, ['second number is in bytes']),
    "q1_w22_alloc_plus_one_row": (ep13.q1, q1_w22_alloc_plus_one_row, ['row of padding', "rank 0's share"]),
    "q1_w13_row_is_shape1": (ep13.q1, q1_w13_row_is_shape1, ['shape[1]', 'product']),
    "q1_w14_remainder_last": (ep13.q1, q1_w14_remainder_last, ['the last rank the remainder']),
    "q1_w15_no_clamp_negative": (ep13.q1, q1_w15_no_clamp_negative, ['negative']),
    "q1_w18_hardcoded": (ep13.q1, q1_w18_hardcoded, ['for every case']),
    "q1_w01_even_split": (ep13.q1, q1_w01_even_split, ['as evenly as possible']),
    "q1_w04_floor_plus_one": (ep13.q1, q1_w04_floor_plus_one, ['rows // world + 1']),
    "q1_w08_alloc_flat": (ep13.q1, q1_w08_alloc_flat, ['FSDP1']),
    "q1_w11_alloc_floor": (ep13.q1, q1_w11_alloc_floor, ['drops the remainder']),
    "q1_w23_floor_loop_hang": (ep13.q1, q1_w23_floor_loop_hang, ['did not return within 5 s', 'loop that never ends']),
    "q2_w14_zero1_forgets_grads": (ep13.q2, q2_w14_zero1_forgets_grads, ['leaves out the 16-bit gradients']),
    "q2_w16_least_memory": (ep13.q2, q2_w16_least_memory, ['most sharded']),
    "q2_w18_tp_divides_state": (ep13.q2, q2_w18_tp_divides_state, ["return 'none'", '16 bytes / N']),
    "q2_w19_gathered_1B": (ep13.q2, q2_w19_gathered_1B, ['1 byte per parameter']),
    "q2_w20_zero3_no_shard": (ep13.q2, q2_w20_zero3_no_shard, ['n_gpus − 1']),
    "q2_w23_none_capital": (ep13.q2, q2_w23_none_capital, ['returned None where nothing fits', "'none'"]),
    "q2_w15_gb_units": (ep13.q2, q2_w15_gb_units, ['1e9', 'bytes with bytes']),
    "q2_w17_tp_only_full_node": (ep13.q2, q2_w17_tp_only_full_node, ['only on 8 GPUs or more']),
    "q2_w21_zero2_12_over_n": (ep13.q2, q2_w21_zero2_12_over_n, ['like ZeRO-1']),
    "q2_w24_skips_zero1": (ep13.q2, q2_w24_skips_zero1, ['left out ZeRO-1']),
    "q2_w01_no_gathered": (ep13.q2, q2_w01_no_gathered, ['gathers while it computes']),
    "q2_w07_strict_less": (ep13.q2, q2_w07_strict_less, ['at most']),
    "q2_w09_zero1_shards_grads": (ep13.q2, q2_w09_zero1_shards_grads, ['that is ZeRO-2']),
    "q2_w10_zero2_shards_weights": (ep13.q2, q2_w10_zero2_shards_weights, ['SHARD_GRAD_OP']),
    "q2_w12_never_none": (ep13.q2, q2_w12_never_none, ["return 'none'"]),
    "q3_w12_across_shard_of_all": (ep13.q3, q3_w12_across_shard_of_all, ['1/(G × M)']),
    "q3_w13_across_ring_g": (ep13.q3, q3_w13_across_ring_g, ["node's ring share"]),
    "q3_w15_across_no_over_m": (ep13.q3, q3_w15_across_no_over_m, ['without dividing by M']),
    "q3_w18_across_no_ring_only": (ep13.q3, q3_w18_across_no_ring_only, ["across nodes the ring's share"]),
    "q3_w19_bpv_inside_only": (ep13.q3, q3_w19_bpv_inside_only, ['across nodes you left out the bytes per value']),
    "q3_w14_integer_division": (ep13.q3, q3_w14_integer_division, ['integer division']),
    "q3_w16_inside_ddp_plus_gather": (ep13.q3, q3_w16_inside_ddp_plus_gather, ['4 passes']),
    "q3_w17_inside_shard": (ep13.q3, q3_w17_inside_shard, ['on the shard']),
    "q3_w20_across_fp32_grads": (ep13.q3, q3_w20_across_fp32_grads, ['4 bytes per value']),
    "q3_w21_inside_over_m": (ep13.q3, q3_w21_inside_over_m, ['divided by the nodes']),
    "q3_w23_across_ring_all_gpus": (ep13.q3, q3_w23_across_ring_all_gpus, ['(N − 1)/N', 'M nodes']),
    "q3_w01_across_whole": (ep13.q3, q3_w01_across_whole, ['whole gradients']),
    "q3_w02_inside_2_passes": (ep13.q3, q3_w02_inside_2_passes, ['2 passes']),
    "q3_w05_inside_all_gpus_ring": (ep13.q3, q3_w05_inside_all_gpus_ring, ['(G − 1)/G']),
    "q3_w07_swapped": (ep13.q3, q3_w07_swapped, ['wrong way round']),
    "q3_w11_no_bytes_per_value": (ep13.q3, q3_w11_no_bytes_per_value, ['bytes per value are missing']),
    "q4_w14_end_inclusive": (ep13.q4, q4_w14_end_inclusive, ["piece's end", 'excluded']),
    "q4_w19_sources_set": (ep13.q4, q4_w19_sources_set, ['set', 'sorted list']),
    "q4_w09_floor_size": (ep13.q4, q4_w09_floor_size, ['rows // new world rows']),
    "q4_w17_sources_new_bounds": (ep13.q4, q4_w17_sources_new_bounds, ["this rank's number", 'old world size']),
    "q4_w18_empty_piece_lists_neighbour": (ep13.q4, q4_w18_empty_piece_lists_neighbour, ['empty piece', '[]']),
    "q4_w10_floor_plus_one": (ep13.q4, q4_w10_floor_plus_one, ['+ 1']),
    "q4_w12_chunk_index_error": (ep13.q4, q4_w12_chunk_index_error, ['only 3 pieces', 'empty piece']),
    "q4_w13_one_indexed": (ep13.q4, q4_w13_one_indexed, ['from 1']),
    "q4_w02_touching": (ep13.q4, q4_w02_touching, ['only touch']),
    "q4_w04_same_rank_only": (ep13.q4, q4_w04_same_rank_only, ["this rank's number"]),
    "q4_w05_includes_empty": (ep13.q4, q4_w05_includes_empty, ['saved no rows']),
    "q4_w08_unsorted": (ep13.q4, q4_w08_unsorted, ['out of order']),
    "q4_w20_while_loop_hang": (ep13.q4, q4_w20_while_loop_hang, ['did not return within 5 s']),
    "q4_w07_old_shard": (ep13.q4, q4_w07_old_shard, ["old rank's own shard"]),
}

@pytest.mark.parametrize("name", REVIEWED_WRONG)
def test_reviewed_wrong_answers_name_their_own_mistake(name):
    exercise, fn, words = REVIEWED_WRONG[name]
    assert_wrong(exercise, (fn,), words)


def test_q4_end_of_the_piece_is_excluded():
    """Failed on the old cases (judged right): no old shard started exactly at a new piece's end."""
    saved = ep13._q4_saved((8, 3), 4)
    assert reshard(saved, 2, 0)[1] == [0, 1]
    assert q4_w14_end_inclusive(saved, 2, 0)[1] == [0, 1, 2]
    assert outcome(ep13.q4, q4_w14_end_inclusive)[0] == "wrong"


def test_q4_sources_must_be_a_list():
    """Failed on the old check (judged right): any iterable was turned into a list, and a set of ranks
    below 8 iterates sorted in CPython; with 16 old ranks it does not."""
    saved = ep13._q4_saved((32,), 16)
    assert list(q4_w19_sources_set(saved, 6, 2)[1]) != [6, 7, 8]
    result, message = outcome(ep13.q4, lambda s, n, r: (reshard(s, n, r)[0], set(reshard(s, n, r)[1])))
    assert result == "wrong" and "sorted list" in message, message
    result, message = outcome(ep13.q4, lambda s, n, r: (reshard(s, n, r)[0], tuple(reshard(s, n, r)[1])))
    assert result == "wrong" and "list" in message, message


def test_a_mistake_that_explains_only_some_wrong_cases_is_not_named():
    """Failed on the old _name_mistake, which named a candidate explaining one wrong case of six: an
    answer right on the inside bytes and off by an unknown factor across nodes names no cause."""
    def odd(n, g, m, b):
        inside, across = hsdp_bytes_sent(n, g, m, b)
        return inside, across * (1.5 if m % 2 else 0.5)
    result, message = outcome(ep13.q3, odd)
    assert result == "wrong"
    assert "expected" in message and "you " not in message, message


def test_q2_none_for_nothing_fits_is_wrong_not_unfinished():
    """Failed on the old check, which called it not done ("did you forget `return`?")."""
    result, message = outcome(ep13.q2, q2_w23_none_capital)
    assert result == "wrong" and "'none'" in message, message
    assert outcome(ep13.q2, lambda p, l, g, m: None)[0] == "not-done"


def test_endless_loops_are_stopped_in_seconds():
    """The functions answer in microseconds: the checks give each call 5 s, not the course's 60 s."""
    import time

    start = time.monotonic()
    result, message = outcome(ep13.q1, q1_w23_floor_loop_hang)
    assert result == "wrong" and "5 s" in message, message
    assert time.monotonic() - start < 30


def test_q2_tp_dividing_the_state_gives_the_same_answers_as_never_none():
    """Why one message names both: TP dividing the state only ever turns 'none' into 'ZeRO-3+TP'."""
    for c in ep13.Q2_CASES:
        assert ep13._q2_rule(*c, tp_state=True) == ep13._q2_rule(*c, allow_none=False)


# --- hints --------------------------------------------------------------------------------------------

CODE = ("()", " = ", "==", "return ", "import", "[", "]", "**", "//", "torch.", "np.", "math.", "ceil(")


@pytest.mark.parametrize("exercise", [ep13.q1, ep13.q2, ep13.q3, ep13.q4], ids=lambda q: q.name)
def test_hints_come_in_two_steps_without_the_code(exercise, capsys):
    assert_two_step_hints(exercise, capsys, CODE)


@pytest.mark.parametrize("exercise", ["q1 owned", "q1 allocated", "q2", "q3", "q4 piece", "q4 sources"])
def test_every_two_candidate_mistakes_differ_on_some_case(exercise):
    """A mistake is named only when it gives the answer on every case; two candidates that agree on every
    case could not be told apart, and the first would be named for both."""
    cases, candidates, same = {
        "q1 owned": (ep13.Q1_CASES, lambda c: ep13._q1_owned_mistakes(*c), lambda a, b: list(a) == list(b)),
        "q1 allocated": (ep13.Q1_CASES, lambda c: ep13._q1_alloc_mistakes(*c), lambda a, b: a == b),
        "q2": (ep13.Q2_CASES, ep13._q2_mistakes, lambda a, b: a == b),
        "q3": (ep13.Q3_CASES, ep13._q3_mistakes, ep13._close_pair),
        "q4 piece": (ep13.Q4_CASES, ep13._q4_piece_mistakes, ep13._same_piece),
        "q4 sources": (ep13.Q4_CASES, ep13._q4_mistakes, lambda a, b: list(a) == list(b)),
    }[exercise]
    names = list(candidates(cases[0]))
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert any(not same(candidates(c)[a], candidates(c)[b]) for c in cases), (a, b)
