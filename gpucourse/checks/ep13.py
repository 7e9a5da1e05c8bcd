"""Checks for episode 13, "When the model does not fit one GPU".

``q1`` what each rank holds of a parameter, and what it allocates (padding) · ``q2`` which strategy lets
a model train on given GPUs (the ZeRO paper's stages at the step's peak, TP inside a node) · ``q3`` HSDP:
the bytes a GPU sends inside its node and across nodes per step ·
``q4`` reshard a checkpoint: a new rank's piece, and the old ranks' files it reads.

Every check calls the learner's function on cases of its own, chosen so that every pair of rules the
prompt tells apart gives different answers on at least one case (a world size that divides the rows
and one that does not; torch.chunk's split and an as-even-as-possible one; a model that only tensor
parallelism inside a node fits, one that fits exactly). ``q1`` and ``q4`` get their right answers from ``torch.chunk`` itself, the split
FSDP2 uses (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``, ``_chunk_with_empty``); ``q2`` and
``q3`` recompute the episode's formulas. A wrong answer is named only when one known mistake gives
the learner's answer on every case, the ones it got right included; otherwise the message says which
case is wrong, what the function returned and what was expected, and names no cause.

The learner's functions are closed formulas that answer in microseconds, so each call runs under a
deadline of ``DEADLINE_S`` seconds (not the course's 60 s default): a loop that never ends is named in
seconds.
"""

from __future__ import annotations

import math

from ..exercises import (SMALL_CASE_DEADLINE_S, Exercise, NotDone, Wrong, as_number, call_answer, describe,
                         require_answer, require_function, solution_link)

NOTEBOOK = "13-sharding.ipynb"

#: Seconds one call of the learner's function may take: the right answers take microseconds.
DEADLINE_S = SMALL_CASE_DEADLINE_S


def _rows(rows: int, world: int, how: str = "chunk") -> list[int]:
    """Rows per rank: torch.chunk (ceil-sized chunks, the last ones short or empty), or other splits."""
    if how == "chunk":
        size = math.ceil(rows / world) if rows else 0
        return [max(0, min(size, rows - r * size)) for r in range(world)]
    if how == "even":                                   # numpy.array_split: sizes differ by at most one
        return [rows // world + (1 if r < rows % world else 0) for r in range(world)]
    if how == "floor":
        return [rows // world] * world
    if how == "ceil":
        return [math.ceil(rows / world)] * world
    raise ValueError(how)


def _name_mistake(got, wrong_cases, candidates, same, what, where: str):
    """Raise Wrong naming the first candidate mistake that gives the learner's answer on every case the
    check tried (the wrong ones and the right ones); if none does, return and let the caller describe the
    first wrong case without naming a cause."""
    names = list(candidates(wrong_cases[0]))
    for name in names:
        if all(same(got[c], candidates(c)[name]) for c in got):
            case = wrong_cases[0]
            raise Wrong(f"{what(case)} returned {got[case]!r}{where}: {name}")


def _where(n_right: int, n_cases: int) -> str:
    return f" (right for {n_right} of the {n_cases} cases)" if n_right else ""


# --- q1: shard sizes and padding ----------------------------------------------------------------------

Q1_CASES = [((256, 64), 4), ((10, 3), 4), ((5,), 4), ((1, 64), 2), ((6, 4), 4), ((7, 2, 3), 3), ((12,), 3)]


def _q1_answer(shape, world, how="chunk", alloc="chunk"):
    row = math.prod(shape[1:])
    owned = [r * row for r in _rows(shape[0], world, how)]
    numel = math.prod(shape)
    allocated = {"chunk": math.ceil(shape[0] / world) * row, "flat": math.ceil(numel / world),
                 "numel": numel / world, "floor": shape[0] // world * row}[alloc]
    return owned, allocated


def _q1_expected(shape, world):
    """What torch.chunk gives, as FSDP2 shards: each rank's elements, and the padded size of rank 0's."""
    import torch

    chunks = list(torch.empty(shape).chunk(world, dim=0))
    owned = [c.numel() for c in chunks] + [0] * (world - len(chunks))
    return owned, chunks[0].numel()


def _q1_owned_mistakes(shape, world) -> dict:
    rows, row, numel = shape[0], math.prod(shape[1:]), math.prod(shape)
    size = math.ceil(rows / world)
    near = round(rows / world)
    floor = rows // world
    return {
        "you split the rows as evenly as possible (numpy.array_split: sizes differ by one at most); torch.chunk, "
        "which FSDP uses, gives every rank ceil(rows / world) rows until they run out, so the last ranks get "
        "fewer or none.": [r * row for r in _rows(rows, world, "even")],
        "you gave every rank rows // world rows: the remainder rows are lost; torch.chunk gives the first ranks "
        "ceil(rows / world) rows each.": [r * row for r in _rows(rows, world, "floor")],
        "you gave every rank rows // world rows and the last rank the remainder; torch.chunk gives the first "
        "ranks ceil(rows / world) rows each, so the last ranks get fewer or none.":
            [floor * row] * (world - 1) + [(rows - floor * (world - 1)) * row],
        "you took rows // world + 1 rows as the chunk size: that is ceil(rows / world) only when the rows do "
        "not divide; when they do, each chunk is rows / world rows.":
            [max(0, min(floor + 1, rows - r * (floor + 1))) * row for r in range(world)],
        "you rounded rows / world to the nearest whole number; torch.chunk rounds up: ceil(rows / world) rows "
        "per rank.": [max(0, min(near, rows - r * near)) * row for r in range(world)],
        "a rank past the last row got a negative count: rows - rank × chunk goes below 0 there; such a rank "
        "holds 0 elements (max(0, …)).": [min(size, rows - r * size) * row for r in range(world)],
        "you gave every rank ceil(rows / world) rows: that is what each rank allocates (padding included), not "
        "what it holds; the last ranks hold fewer rows or none.": [r * row for r in _rows(rows, world, "ceil")],
        "you divided the elements, not the rows: FSDP splits dimension 0, whole rows at a time.":
            [numel / world] * world,
        "you counted rows, not elements: multiply by the elements of one row (the product of the other "
        "dimensions).": _rows(rows, world),
        "you took shape[1] as the elements of one row; a row is everything after dimension 0, the product of "
        "all the other dimensions (1 for a 1-D tensor).":
            [r * (shape[1] if len(shape) > 1 else 1) for r in _rows(rows, world)],
        "that is in bytes (4 per float32 value); count elements.": [4 * r * row for r in _rows(rows, world)],
    }


def _q1_alloc_mistakes(shape, world) -> dict:
    rows, row, numel = shape[0], math.prod(shape[1:]), math.prod(shape)
    size = math.ceil(rows / world)
    return {
        "you padded the flattened tensor (ceil(elements / world), what FSDP1's flat parameter does); FSDP2 pads "
        "whole rows: ceil(rows / world) rows on every rank.": math.ceil(numel / world),
        "you padded to rows // world + 1 rows: when the rows divide, the padded size is rows / world rows, "
        "ceil(rows / world).": (rows // world + 1) * row,
        "you added a row of padding to rank 0's share; rank 0's share is already the padded size, "
        "ceil(rows / world) rows, and the other ranks pad up to it.": (size + 1) * row,
        "elements / world is not a whole shard: every rank allocates ceil(rows / world) whole rows.": numel / world,
        "rows // world drops the remainder: every rank allocates ceil(rows / world) rows, padding included.":
            rows // world * row,
        "that is the whole tensor: each rank allocates only its padded shard.": numel,
        "the second number is the last rank's own share; every rank allocates the padded size, rank 0's "
        "share, so that the all-gather's pieces are equal.": _rows(rows, world)[-1] * row,
        "the second number is in bytes (4 per float32 value); count elements.": 4 * size * row,
    }


def _check_shards(shard_numels):
    require_function(shard_numels, "shard_numels")
    raw = {}
    for shape, world in Q1_CASES:
        what = f"shard_numels({shape}, {world})"
        raw[(shape, world)] = call_answer(shard_numels, shape, world, what=what, seconds=DEADLINE_S)
    if len({repr(a) for a in raw.values()}) == 1:
        raise Wrong(f"your function returned {next(iter(raw.values()))!r} for every case: compute the shares "
                    "from the shape and the world size.")
    got, wrong_owned, wrong_alloc = {}, [], []
    for (shape, world), answer in raw.items():
        what = f"shard_numels({shape}, {world})"
        if not isinstance(answer, (tuple, list)) or len(answer) != 2 or not isinstance(answer[0], (list, tuple)):
            raise Wrong(f"{what} returned {describe(answer)}; return a pair: (a list of each rank's elements, "
                        "the elements every rank allocates).")
        owned, allocated = answer
        if len(owned) != world:
            raise Wrong(f"{what} gave {len(owned)} numbers for {world} ranks: give one per rank, 0 for a rank "
                        "that holds nothing.")
        owned = [as_number(f"{what}[0]", v) for v in owned]
        allocated = as_number(f"{what}[1]", allocated)
        expected = _q1_expected(shape, world)
        got[(shape, world)] = (owned, allocated)
        if owned != expected[0]:
            wrong_owned.append((shape, world))
        if allocated != expected[1]:
            wrong_alloc.append((shape, world))
    n = len(Q1_CASES)
    what = lambda c: f"shard_numels({c[0]}, {c[1]})"  # noqa: E731
    if wrong_owned:
        owned_of = {c: got[c][0] for c in got}
        if len({v for shares in owned_of.values() for v in shares}) == 1:
            raise Wrong("your function returned the same shares for every case: compute them from the shape and "
                        "the world size.")
        _name_mistake(owned_of, wrong_owned, lambda c: _q1_owned_mistakes(*c), lambda a, b: list(a) == list(b),
                      what, _where(n - len(wrong_owned), n))
        case = wrong_owned[0]
        raise Wrong(f"{what(case)} gave the shares {owned_of[case]}{_where(n - len(wrong_owned), n)}; expected "
                    f"{_q1_expected(*case)[0]} (torch.chunk of dimension 0).")
    if wrong_alloc:
        alloc_of = {c: got[c][1] for c in got}
        _name_mistake(alloc_of, wrong_alloc, lambda c: _q1_alloc_mistakes(*c), lambda a, b: a == b, what,
                      _where(n - len(wrong_alloc), n))
        case = wrong_alloc[0]
        raise Wrong(f"{what(case)} gave {alloc_of[case]} elements allocated per rank"
                    f"{_where(n - len(wrong_alloc), n)}; expected {_q1_expected(*case)[1]} "
                    "(ceil(rows / world) whole rows).")
    return (f"right on {n} shapes and world sizes. A (5,) bias on 4 ranks: shares {_q1_expected((5,), 4)[0]}, "
            "every rank allocates 2: the last rank pads 2 elements and holds none.")


q1 = Exercise("ep13.q1", _check_shards,
              hint=("Along which dimension does FSDP cut a parameter, and how many rows does the first rank get "
                    "when the rows do not divide by the world size?",
                    "Give the first ranks the rounded-up share of rows each until the rows run out (the last "
                    "ranks may get fewer or none), and multiply rows by the elements of one row. Every rank "
                    "allocates the first rank's share, so that the pieces gathered are equal."),
              solution=solution_link(NOTEBOOK))


# --- q2: which strategy fits ----------------------------------------------------------------------------

ORDER = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "ZeRO-3+TP")


def _per_gpu(strategy, params, largest, gpus, *, gathered=4, ddp_bytes=16, zero1="right", zero2="right",
             state_over=None, tp="node", tp_state=False):
    """Bytes per GPU at the step's peak, the ZeRO paper's stages (Rajbhandari et al. 2020, §5)."""
    n = gpus
    shards = n if state_over is None else state_over(n)
    split = {"node": min(8, gpus), "all": gpus, "eight": 8, "none": 1, "full node": 8 if gpus >= 8 else 1}[tp]
    zero1_bytes = {"right": 4 * params + 12 * params / n, "zero2": 2 * params + 14 * params / n,
                   "no grads": 2 * params + 12 * params / n}[zero1]
    zero2_bytes = {"right": 2 * params + 14 * params / n, "weights": 16 * params / n,
                   "like zero1": 4 * params + 12 * params / n}[zero2]
    zero3_tp = (16 * params / shards + gathered * largest) / split if tp_state else \
        16 * params / shards + gathered * largest / split
    return {"DDP": ddp_bytes * params, "ZeRO-1": zero1_bytes, "ZeRO-2": zero2_bytes,
            "ZeRO-3": 16 * params / shards + gathered * largest, "ZeRO-3+TP": zero3_tp}[strategy]


def _q2_rule(params, largest, gpus, memory, *, order=ORDER, allow_none=True, per_all=False, strict=False,
             room_scale=1.0, **kw):
    room = memory * (gpus if per_all else 1) * room_scale
    for strategy in order:
        need = _per_gpu(strategy, params, largest, gpus, **kw)
        if need < room or (need == room and not strict):
            return strategy
    return "none" if allow_none else order[-1]


Q2_CASES = [  # (parameters, largest unit's parameters, GPUs, bytes per GPU), each with another answer
    (1_000_000_000, 100_000_000, 8, 80e9),        # DDP: 16 GB
    (5_000_000_000, 100_000_000, 8, 80e9),        # DDP: exactly 80 GB ("at most")
    (7_000_000_000, 200_000_000, 8, 80e9),        # ZeRO-1: 28 + 10.5 GB
    (7_000_000_000, 200_000_000, 8, 32e9),        # ZeRO-2: 14 + 12.25 GB
    (7_000_000_000, 200_000_000, 8, 24e9),        # ZeRO-3: 14 GB + 0.8 GB gathered
    (70_000_000_000, 8_000_000_000, 128, 16e9),   # ZeRO-3+TP: the unit gathered whole (32 GB) does not fit
    (70_000_000_000, 1_000_000_000, 8, 80e9),     # none: 140 GB per GPU even fully split
    (2_000_000_000, 50_000_000, 2, 17e9),         # ZeRO-3 on two GPUs: 16 GB + 0.2 GB gathered
    (8_000_000_000, 1_000_000_000, 64, 6e9),      # ZeRO-3 exactly: 2 + 4 GB; 8 bytes gathered would not fit
    (8_000_000_000, 1_000_000_000, 64, 5e9),      # ZeRO-3+TP: 2 + 0.5 GB; 2 bytes gathered would pass ZeRO-3
    (70_000_000_000, 8_000_000_000, 128, 12e9),   # none: TP inside a node (8) leaves 8.75 + 4 GB
    (2_000_000_000, 400_000_000, 4, 9e9),         # ZeRO-3+TP over the node's 4 GPUs: 8 + 0.4 GB
    (2_000_000_000, 400_000_000, 4, 8.3e9),       # none: TP cannot split 8 ways on 4 GPUs
    (8_000_000_000, 1_000_000_000, 64, 3.5e9),    # ZeRO-3+TP: 2 + 0.5 GB; 1 byte gathered would pass ZeRO-3
]


def _q2_mistakes(case) -> dict:
    p, l, g, m = case
    return {
        "you left out the unit ZeRO-3 gathers while it computes (its 16-bit weights and gradients, 4 bytes "
        "per parameter of the largest unit).": _q2_rule(p, l, g, m, gathered=0),
        "you counted the gathered unit at 2 bytes per parameter (its 16-bit weights only); while it computes "
        "backward its 16-bit gradients exist too: 2 + 2 = 4 bytes per parameter.": _q2_rule(p, l, g, m, gathered=2),
        "you counted the gathered unit at 8 bytes per parameter (float32 weights and gradients); it is gathered "
        "in 16 bits: 2 + 2 = 4 bytes per parameter.": _q2_rule(p, l, g, m, gathered=8),
        "you counted the gathered unit at 6 bytes per parameter; its weights and its gradients are both 16-bit: "
        "4 bytes per parameter.": _q2_rule(p, l, g, m, gathered=6),
        "you counted the gathered unit at 16 bytes per parameter (all its state); only its 16-bit weights and "
        "gradients are gathered: 4 bytes per parameter.": _q2_rule(p, l, g, m, gathered=16),
        "you split the gathered unit over all the GPUs; tensor parallelism stays inside one server, 8 GPUs on "
        "today's HGX/DGX (its all-reduces sit on every layer's path): divide by min(8, n_gpus).": _q2_rule(p, l, g, m, tp="all"),
        "you split the gathered unit 8 ways on fewer than 8 GPUs; tensor parallelism uses the GPUs there are: "
        "min(8, n_gpus).": _q2_rule(p, l, g, m, tp="eight"),
        "you compared with < where the prompt says 'at most': a strategy that needs exactly the GPU's memory "
        "fits.": _q2_rule(p, l, g, m, strict=True),
        "you counted DDP at 4 bytes per parameter (the weights only); each GPU also holds the gradients and "
        "Adam's state: 16 bytes per parameter.": _q2_rule(p, l, g, m, ddp_bytes=4),
        "your ZeRO-1 shards the gradients too; that is ZeRO-2. ZeRO-1 shards only the optimizer state "
        "(12 bytes per parameter), each GPU keeps 2 + 2 bytes of 16-bit weights and gradients.":
            _q2_rule(p, l, g, m, zero1="zero2"),
        "your ZeRO-2 shards the weights too: FSDP's SHARD_GRAD_OP does so at rest, but from forward to backward "
        "every GPU holds them whole, as the paper's ZeRO-2 does always: 2 bytes per parameter, whole.":
            _q2_rule(p, l, g, m, zero2="weights"),
        "you tried ZeRO-3+TP before ZeRO-3; take the strategies in the order given: ZeRO-3 whenever it fits.":
            _q2_rule(p, l, g, m, order=ORDER[:3] + ("ZeRO-3+TP", "ZeRO-3")),
        "where nothing fits you returned 'ZeRO-3+TP': return 'none' there. (If your ZeRO-3+TP fitted, TP "
        "splits only the gathered unit: the sharded state is already 16 bytes / N per GPU.)":
            _q2_rule(p, l, g, m, allow_none=False),
        "you compared with the memory of all the GPUs together; each GPU must hold its own part in its own "
        "memory.": _q2_rule(p, l, g, m, per_all=True),
        "your ZeRO-1 leaves out the 16-bit gradients: ZeRO-1 shards only the optimizer state (12 bytes per "
        "parameter); each GPU keeps the whole 16-bit weights and gradients, 2 + 2 bytes per parameter.":
            _q2_rule(p, l, g, m, zero1="no grads"),
        "your ZeRO-2 keeps the 16-bit gradients whole, like ZeRO-1; ZeRO-2 shards the gradients too: 2 bytes "
        "of weights whole plus 14 bytes per parameter over the GPUs.": _q2_rule(p, l, g, m, zero2="like zero1"),
        "you left out ZeRO-1: take the strategies in the order given, DDP, ZeRO-1, ZeRO-2, ZeRO-3, ZeRO-3+TP.":
            _q2_rule(p, l, g, m, order=("DDP",) + ORDER[2:]),
        "you returned the most sharded strategy that fits; the prompt asks for the first that fits in the order "
        "given, the least sharded (it communicates least).": _q2_rule(p, l, g, m, order=ORDER[::-1]),
        "you compared bytes divided by 1e9 (GB) with the GPU's memory in bytes; compare bytes with bytes.":
            _q2_rule(p, l, g, m, room_scale=1e9),
        "you split the gathered unit 8 ways only on 8 GPUs or more, and not at all on fewer; tensor "
        "parallelism uses the GPUs there are, up to 8: min(8, n_gpus).": _q2_rule(p, l, g, m, tp="full node"),
        "you counted the gathered unit at 1 byte per parameter; its 16-bit weights and gradients take "
        "2 + 2 = 4 bytes per parameter.": _q2_rule(p, l, g, m, gathered=1),
        "you sharded ZeRO-3's state over n_gpus − 1 GPUs; every GPU holds one of N equal shards: 16 bytes / N.":
            _q2_rule(p, l, g, m, state_over=lambda n: max(n - 1, 1)),
    }


def _normal(answer) -> str:
    text = str(answer).strip().lower().replace(" ", "").replace("-", "").replace("_", "")
    names = {s.lower().replace("-", ""): s for s in ORDER + ("none",)}
    names.update({"zero3tp": "ZeRO-3+TP", "tp": "TP"})
    return names.get(text, text)


def _check_strategy(strategy_that_fits):
    require_function(strategy_that_fits, "strategy_that_fits")
    got, wrong, nones = {}, [], []
    for case in Q2_CASES:
        what = f"strategy_that_fits({case[0]:_}, {case[1]:_}, {case[2]}, {case[3]:.3g})"
        raw = call_answer(strategy_that_fits, *case, what=what, none_ok=True, seconds=DEADLINE_S)
        if raw is None:
            nones.append(case)
            continue
        if not isinstance(raw, str):
            raise Wrong(f"{what} returned {describe(raw)}; return one of {', '.join(map(repr, ORDER))} or 'none'.")
        got[case] = _normal(raw)
        if got[case] == "TP":
            raise Wrong(f"{what} returned {raw!r}: tensor parallelism alone does not shard the rest of the state "
                        "across nodes; the option is 'ZeRO-3+TP' (FSDP across nodes, TP inside one).")
        if got[case] not in ORDER + ("none",):
            raise Wrong(f"{what} returned {raw!r}; return one of {', '.join(map(repr, ORDER))} or 'none'.")
        if got[case] != _q2_rule(*case):
            wrong.append(case)
    if nones:
        what = f"strategy_that_fits({nones[0][0]:_}, {nones[0][1]:_}, {nones[0][2]}, {nones[0][3]:.3g})"
        if len(nones) < len(Q2_CASES) and all(_q2_rule(*c) == "none" for c in nones):
            raise Wrong(f"{what} returned None where nothing fits; return the string 'none' (None is Python's "
                        "'no value', what a function without `return` gives).")
        require_answer(None, what)                     # None on a case where a strategy fits: no return
    if wrong:
        what = lambda c: f"strategy_that_fits({c[0]:_}, {c[1]:_}, {c[2]}, {c[3]:.3g})"  # noqa: E731
        _name_mistake(got, wrong, _q2_mistakes, lambda a, b: a == b, what, _where(len(got) - len(wrong), len(got)))
        if len(set(got.values())) == 1:
            raise Wrong(f"your function returned {next(iter(got.values()))!r} for every case, but the cases "
                        "need different strategies: compute each one's bytes per GPU.")
        case = wrong[0]
        need = ", ".join(f"{s} {_per_gpu(s, *case[:3]) / 1e9:.4g} GB" for s in ORDER)
        raise Wrong(f"{what(case)} returned {got[case]!r}{_where(len(got) - len(wrong), len(got))}; expected "
                    f"{_q2_rule(*case)!r} (per GPU: {need}).")
    return (f"right on {len(Q2_CASES)} models and machines. A 7B model on 8 GPUs of 24 GB needs ZeRO-3: "
            f"{_per_gpu('ZeRO-3', 7e9, 2e8, 8) / 1e9:.1f} GB each; ZeRO-2 would need "
            f"{_per_gpu('ZeRO-2', 7e9, 2e8, 8) / 1e9:.2f} GB, most of it the whole 16-bit weights.")


q2 = Exercise("ep13.q2", _check_strategy,
              hint=("For each strategy, which of the 2 + 2 + 12 bytes per parameter does a GPU hold whole at the "
                    "step's peak, and which only a 1/N share of? What does ZeRO-3 hold whole for a moment?",
                    "Work out the bytes per GPU of each strategy in the order given and pick the first that is "
                    "no more than one GPU's memory (equal fits). ZeRO-2 keeps the 16-bit weights whole; ZeRO-3 "
                    "adds the largest unit's 16-bit weights and gradients; with TP that unit is split over the "
                    "GPUs of one node, at most 8. If none fits, say so."),
              solution=solution_link(NOTEBOOK))


# --- q3: HSDP, sharded inside a node, replicated across nodes --------------------------------------------

Q3_CASES = [(6_738_415_616, 8, 8, 2), (6_738_415_616, 8, 16, 2), (134_000_000, 4, 2, 4),
            (70_553_706_496, 8, 128, 2), (1_000_000, 8, 1, 4), (1_000_000, 1, 4, 4), (134_000_000, 2, 3, 4)]


def _q3_bytes(n, per_node, nodes, size, *, inside_passes=3, across_passes=2, across_share=True,
              inside_world=None, ring=True, swap=False, scale=1.0):
    """(bytes one GPU sends inside its node, bytes it sends to other nodes), per step."""
    g = inside_world or per_node
    inside = inside_passes * ((g - 1) / g if ring else 1) * n * size
    across = across_passes * ((nodes - 1) / nodes if ring else 1) * (n / per_node if across_share else n) * size
    pair = (across, inside) if swap else (inside, across)
    return pair[0] * scale, pair[1] * scale


def _q3_mistakes(case) -> dict:
    n, g, m, b = case
    inside, across = _q3_bytes(*case)
    model = n * b
    return {
        "across nodes you all-reduced the whole gradients (DDP across nodes); after the reduce-scatter inside "
        "the node each GPU holds 1/gpus_per_node of them, and only that shard is all-reduced with the other "
        "nodes.": _q3_bytes(*case, across_share=False),
        "inside the node you counted 2 passes; with ZeRO-3 the weights are gathered in forward and again in "
        "backward, and the gradients reduce-scattered: 3 passes.": _q3_bytes(*case, inside_passes=2),
        "across nodes you counted one pass; an all-reduce is two (a reduce-scatter, then an all-gather).":
            _q3_bytes(*case, across_passes=1),
        "across nodes you counted 3 passes: only the gradients cross nodes (one all-reduce, 2 passes); the "
        "weights are gathered inside the node.": _q3_bytes(*case, across_passes=3),
        "inside the node you used the ring share of all the GPUs, (N − 1)/N; the node's collectives run over "
        "its gpus_per_node GPUs: (G − 1)/G.": _q3_bytes(*case, inside_world=g * m),
        "the ring's share is missing: a GPU already has its own piece and sends (P − 1)/P of each pass, P the "
        "GPUs in that collective.": _q3_bytes(*case, ring=False),
        "the pair is the wrong way round: (inside the node, across nodes).": _q3_bytes(*case, swap=True),
        "that is all the GPUs together; return what one GPU sends.":
            tuple(v * g * m for v in _q3_bytes(*case)),
        "that is in bits: bytes are 8 bits.": _q3_bytes(*case, scale=8),
        "that is in GB; return bytes.": _q3_bytes(*case, scale=1e-9),
        "the bytes per value are missing: multiply the values by bytes_per_value.": _q3_bytes(n, g, m, 1),
        "across nodes you left out the bytes per value: multiply the values by bytes_per_value there too.":
            (inside, across / b),
        "across nodes you counted 4 bytes per value (float32 gradients); the gradients cross in the "
        "training's dtype: bytes_per_value.": (inside, across * 4 / b),
        "across nodes you took the shard as the model over all the GPUs, 1/(G × M); after the reduce-scatter "
        "inside the node each GPU holds 1/G of the gradients, and that shard is all-reduced among the nodes.":
            (inside, across / m),
        "across nodes you used the node's ring share, (G − 1)/G; the all-reduce across nodes runs over the "
        "M nodes: (M − 1)/M.": (inside, 2 * (g - 1) / g * model / g),
        "across nodes you used the ring share of all the GPUs, (N − 1)/N; the all-reduce across nodes runs over "
        "the M nodes (one GPU per node in each ring): (M − 1)/M.": (inside, 2 * (g * m - 1) / (g * m) * model / g),
        "across nodes the ring's share is missing: a GPU sends (M − 1)/M of each pass, M the nodes.":
            (inside, 2 * model / g),
        "across nodes you multiplied by M − 1 (once per other node) without dividing by M; in a ring each GPU "
        "sends (M − 1)/M of its shard per pass, whatever the number of nodes.": (inside, 2 * (m - 1) * model / g),
        "you used integer division (//): 3 × (G − 1) // G rounds the share down to a whole number; use /.":
            (3 * (g - 1) // g * model, 2 * (m - 1) // m * model / g),
        "inside the node you counted 4 passes (DDP's all-reduce plus ZeRO-3's all-gathers); ZeRO-3 inside the "
        "node is 3 passes: all-gather, all-gather, reduce-scatter.": (4 * (g - 1) / g * model, across),
        "inside the node you counted each pass on the shard, 1/G of the model; each all-gather and the "
        "reduce-scatter is about the whole model: (G − 1)/G of it per pass.": (inside / g, across),
        "inside the node you divided by the nodes too; the node's GPUs gather the whole model among "
        "themselves, whatever the number of nodes.": (inside / m, across),
    }


def _close(a, b) -> bool:
    return not math.isnan(b) and abs(a - b) <= 1e-6 * abs(b) + 1e-9


def _close_pair(a, b) -> bool:
    return all(_close(x, y) for x, y in zip(a, b))


def _check_hsdp(hsdp_bytes_sent):
    require_function(hsdp_bytes_sent, "hsdp_bytes_sent")
    got, wrong = {}, []
    for case in Q3_CASES:
        what = f"hsdp_bytes_sent({case[0]:_}, {case[1]}, {case[2]}, {case[3]})"
        answer = call_answer(hsdp_bytes_sent, *case, what=what, seconds=DEADLINE_S)
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise Wrong(f"{what} returned {describe(answer)}; return a pair: (bytes sent inside the node, bytes "
                        "sent to other nodes).")
        got[case] = tuple(as_number(f"{what}[{i}]", v) for i, v in enumerate(answer))
        if not _close_pair(got[case], _q3_bytes(*case)):
            wrong.append(case)
    if wrong:
        if len(set(got.values())) == 1:
            raise Wrong(f"your function returned {next(iter(got.values()))} for every case, but the answers "
                        "differ: compute them from the arguments.")
        what = lambda c: f"hsdp_bytes_sent({c[0]:_}, {c[1]}, {c[2]}, {c[3]})"  # noqa: E731
        _name_mistake(got, wrong, _q3_mistakes, _close_pair, what, _where(len(got) - len(wrong), len(got)))
        lone = [c for c in wrong if (c[1] == 1 and got[c][0] != 0) or (c[2] == 1 and got[c][1] != 0)]
        if lone:
            case = lone[0]
            raise Wrong(f"{what(case)} returned {got[case]}: a collective among one GPU (one GPU per node, or one "
                        "node) has nobody to send to: 0 bytes there.")
        case = wrong[0]
        inside, across = _q3_bytes(*case)
        side = "inside the node" if not _close(got[case][0], inside) else "across nodes"
        raise Wrong(f"{what(case)} returned {got[case]}{_where(len(got) - len(wrong), len(got))}: the bytes "
                    f"{side} are wrong; expected ({inside:,.6g}, {across:,.6g}).")
    inside, across = _q3_bytes(6_738_415_616, 8, 16, 2)
    flat = 3 * 127 / 128 * 6_738_415_616 * 2
    return (f"right on {len(Q3_CASES)} clusters. Llama 2 7B on 16 nodes of 8 GPUs in bfloat16: each GPU sends "
            f"{inside / 1e9:.1f} GB inside its node and {across / 1e9:.2f} GB across nodes per step, in one "
            f"all-reduce among 16 ranks. ZeRO-3 over all 128 GPUs sends {flat / 1e9:.1f} GB per GPU in three "
            f"collectives among 128 ranks; on a ring ordered by node one link in 8 leaves the node, so "
            f"{flat / 8 / 1e9:.1f} GB per GPU crosses nodes: HSDP sends {flat / 8 / across:.1f} times fewer "
            "bytes across nodes, in one collective of 8 times fewer ranks.")


q3 = Exercise("ep13.q3", _check_hsdp,
              hint=("Which collectives stay inside a node under HSDP, which cross nodes, and how much of the "
                    "model is each one about?",
                    "Inside the node it is ZeRO-3 over gpus_per_node GPUs: 3 passes (two all-gathers, one "
                    "reduce-scatter), each sending (G − 1)/G of the model's bytes. Across nodes only each GPU's "
                    "gradient shard, 1/G of the model, is all-reduced among the nodes: 2 passes of (M − 1)/M."),
              solution=solution_link(NOTEBOOK))


# --- q4: resharding a checkpoint ---------------------------------------------------------------------

Q4_CASES = [((8, 3), 4, 2, 1), ((10, 2), 4, 3, 1), ((5,), 4, 2, 1), ((6, 2), 2, 4, 3), ((7, 3), 3, 4, 0),
            ((9,), 3, 3, 2), ((12, 2), 2, 3, 2),
            ((8, 3), 4, 2, 0),       # old rank 2's rows start exactly where the new piece ends: not read
            ((32,), 16, 6, 2),       # 16 old ranks: a set of them does not iterate in order
            ((9,), 3, 4, 2)]         # array_split's rows [5, 7) span two old shards, torch.chunk's [6, 9) one


def _q4_full(shape):
    import torch

    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape) + 0.5


def _q4_saved(shape, old):
    chunks = list(_q4_full(shape).chunk(old))
    return chunks + [_q4_full(shape)[:0]] * (old - len(chunks))


def _bounds(rows_list):
    starts = [sum(rows_list[:r]) for r in range(len(rows_list))]
    return [(s, s + n) for s, n in zip(starts, rows_list)]


def _q4_expected(shape, old, new, rank, *, how="chunk", touching=False, empty=False, end_inclusive=False):
    """The new rank's piece, and the old ranks whose saved rows overlap it (as DCP reads them)."""
    start, stop = _bounds(_rows(shape[0], new, how))[rank]
    sources = []
    old_rows = _rows(shape[0], old)
    for r, (s, e) in enumerate(_bounds(old_rows)):
        if s == e:                                           # an old rank that saved no rows
            if empty and start <= s <= stop and start < stop:
                sources.append(r)
        elif (s <= stop and e >= start) if touching else \
                start < stop and ((s <= stop and e > start) if end_inclusive else (s < stop and e > start)):
            sources.append(r)
    return _q4_full(shape)[start:stop], sources


def _q4_piece_mistakes(case) -> dict:
    shape, old, new, rank = case
    full = _q4_full(shape)
    cut = lambda how, world=new: full[slice(*_bounds(_rows(shape[0], world, how))[rank])] \
        if rank < world else full[:0]  # noqa: E731
    floor_plus = shape[0] // new + 1
    return {
        "you split the rows as evenly as possible (numpy.array_split); the new run shards with torch.chunk: "
        "ceil(rows / new world) rows per rank until they run out.": cut("even"),
        "you took rows // new world rows per rank; torch.chunk takes ceil(rows / new world) rows per rank, "
        "so the last ranks get fewer or none.": cut("floor"),
        "you took rows // new world + 1 rows per rank: that is ceil(rows / new world) only when the rows do not "
        "divide; when they do, each piece is rows / new world rows.":
            full[min(rank * floor_plus, shape[0]):min((rank + 1) * floor_plus, shape[0])],
        "you returned the old rank's own shard (the pieces cut for the old world size); with another number of "
        "ranks the pieces are cut elsewhere: join the old shards in order, then cut the new piece with the new "
        "world size.": cut("chunk", old),
        "you returned the whole tensor; return only this rank's piece of it.": full,
    }


def _q4_mistakes(case) -> dict:
    shape, old, new, rank = case
    expected = _q4_expected(*case)[1]
    start, stop = _bounds(_rows(shape[0], new))[rank]
    holding = [r for r, n in enumerate(_rows(shape[0], old)) if n]
    return {
        "you listed files whose rows only touch the new piece's ends; a file is read only if its rows overlap "
        "the piece (its first row before the piece's end, its end after the piece's first row).":
            _q4_expected(*case, touching=True)[1],
        "you listed an old shard whose first row is the new piece's end; the end is excluded (rows start to "
        "stop − 1), so that shard's rows start after the piece: its first row must be < the piece's end.":
            _q4_expected(*case, end_inclusive=True)[1],
        "you listed every old rank: DCP reads only the files whose rows overlap this rank's new piece.":
            list(range(old)),
        "you listed only the old rank with this rank's number, as if the old ranks had saved the rows the new "
        "ones get; the old shards were cut for the old world size (their lengths tell you), and the new piece "
        "can span several of them.":
            [rank] if rank < old else [],
        "ranks that saved no rows hold nothing to read.": _q4_expected(*case, empty=True)[1],
        "you numbered the old ranks from 1; ranks are numbered from 0 (saved[0] is rank 0's shard).":
            [r + 1 for r in expected],
        "for a rank whose new piece is empty you listed an old rank; an empty piece overlaps no file: [].":
            expected if start < stop else holding[-1:],
        "the new shards split the rows as evenly as possible (numpy.array_split); the new run shards with "
        "torch.chunk too: ceil(rows / new world) rows per rank until they run out.": _q4_expected(*case, how="even")[1],
    }


def _same_piece(a, b) -> bool:
    import torch

    return tuple(a.shape) == tuple(b.shape) and torch.equal(a.float(), b)


def _chunk_index(case):
    """Explain an IndexError from torch.chunk(...)[new_rank]: chunk gives fewer pieces than asked."""
    import torch

    shape, old, new, rank = case
    pieces = len(torch.empty(shape).chunk(new))

    def explain(exc):
        if isinstance(exc, IndexError) and pieces < new and rank >= pieces:
            return (f"reshard(saved, {new}, {rank}) for a {shape} tensor raised IndexError: torch.chunk gives "
                    f"only {pieces} pieces of {math.ceil(shape[0] / new)} rows for {new} ranks here, so rank "
                    f"{rank} has none to index: give it an empty piece (rows [rows:rows]).")
        return None
    return explain


def _check_reshard(reshard):
    import torch

    require_function(reshard, "reshard")
    pieces, got = {}, {}
    for case in Q4_CASES:
        shape, old, new, rank = case
        what = f"reshard(saved, {new}, {rank}) for a {shape} tensor saved by {old} ranks"
        answer = call_answer(reshard, [s.clone() for s in _q4_saved(shape, old)], new, rank, what=what,
                             explain=_chunk_index(case), seconds=DEADLINE_S)
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise Wrong(f"{what} returned {describe(answer)}; return a pair: (the new rank's tensor, the list of "
                        "old ranks whose shards it reads).")
        piece, sources = answer
        if not torch.is_tensor(piece):
            raise Wrong(f"{what} returned {describe(piece)} as the piece; return a tensor (empty if this rank "
                        "gets no rows).")
        if isinstance(sources, (set, frozenset)):
            raise Wrong(f"{what} gave the sources as a {type(sources).__name__}; a set keeps no order (with 16 "
                        "old ranks it does not iterate sorted): return a sorted list.")
        if not isinstance(sources, list):
            raise Wrong(f"{what} gave {describe(sources)} as the sources; give a sorted list of old rank numbers.")
        try:
            got[case] = [int(s) for s in sources]
        except (TypeError, ValueError):
            raise Wrong(f"{what} gave {describe(sources)} as the sources; give a list of old rank numbers.") from None
        pieces[case] = piece
    what = lambda c: f"reshard(saved, {c[2]}, {c[3]}) for a {c[0]} tensor saved by {c[1]} ranks"  # noqa: E731
    n = len(Q4_CASES)
    wrong = [c for c in Q4_CASES if not _same_piece(pieces[c], _q4_expected(*c)[0])]
    if wrong:
        for name in _q4_piece_mistakes(wrong[0]):
            if all(_same_piece(pieces[c], _q4_piece_mistakes(c)[name]) for c in Q4_CASES):
                raise Wrong(f"{what(wrong[0])} returned a piece of shape {tuple(pieces[wrong[0]].shape)}"
                            f"{_where(n - len(wrong), n)}: {name}")
        case = wrong[0]
        expected, start = _q4_expected(*case)[0], _bounds(_rows(case[0][0], case[2]))[case[3]][0]
        raise Wrong(f"{what(case)} returned a piece of shape {tuple(pieces[case].shape)}"
                    f"{_where(n - len(wrong), n)}; expected shape {tuple(expected.shape)}: rows {start} to "
                    f"{start + len(expected)} (end excluded) of the whole tensor, in order.")
    for case in Q4_CASES:
        expected_sources = _q4_expected(*case)[1]
        if got[case] != sorted(got[case]) and sorted(got[case]) == expected_sources:
            raise Wrong(f"{what(case)} listed the right old ranks, {got[case]}, out of order: return them sorted, "
                        f"{expected_sources}.")
    wrong = [c for c in Q4_CASES if got[c] != _q4_expected(*c)[1]]
    if wrong:
        _name_mistake(got, wrong, _q4_mistakes, lambda a, b: list(a) == list(b), what, _where(n - len(wrong), n))
        case = wrong[0]
        raise Wrong(f"{what(case)} listed the old ranks {got[case]}{_where(n - len(wrong), n)}; expected "
                    f"{_q4_expected(*case)[1]} (the old ranks whose saved rows overlap the piece's rows).")
    return (f"right on {n} reshardings, from more ranks to fewer and from fewer to more. This is what DCP's "
            "metadata lets each rank do: read only the stored items its piece overlaps (each one read whole, "
            "then narrowed to the rows it needs).")


q4 = Exercise("ep13.q4", _check_reshard,
              hint=("Which rows of the whole tensor does the new rank own, and which rows did each old rank save?",
                    "Find the new rank's first and last row with the chunk rule FSDP uses, for the new world size, take "
                    "those rows from the old shards joined in order, and list each old rank whose saved rows "
                    "overlap them (an empty shard overlaps nothing)."),
              solution=solution_link(NOTEBOOK))


__all__ = ["q1", "q2", "q3", "q4", "NotDone"]
