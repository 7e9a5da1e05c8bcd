"""Checks for episode 5, "GPU memory: estimate and measure".

``q1`` the bytes of a model's training state · ``q2`` the largest batch from two measurements ·
``q3`` the smallest GPU on which a model trains, from a table of datasheet memory.

Every check calls the learner's function on cases of its own, several of them, so that a constant
or an answer right for one case only cannot pass, and recomputes or measures the right result:

* ``q1`` trains each model one step with a real optimizer and adds up the bytes of the parameters,
  gradients and optimizer state that exist afterwards;
* ``q2`` puts lines through pairs of measurements in either order, with budgets in GiB;
* ``q3`` gives models and tables of GPUs (memory in datasheet GB, in no particular order) and knows
  the typical mistakes (GiB for GB, forgotten gradients or optimizer state, no headroom, the first
  or the largest GPU that fits) by the answers they give.
"""

from __future__ import annotations

import copy
import math
import numbers
from fractions import Fraction

from ..exercises import error_message
from ..exercises import (Exercise, NotDone, Wrong, answer_deadline, as_number, call_answer, changes, describe,
                         is_blank, mentions_blank, require_function, snapshot, solution_link)

NOTEBOOK = "05-gpu-memory.ipynb"
GIB, MIB = 2**30, 2**20


# --- helpers ---------------------------------------------------------------------------

def _constant(values, expected) -> bool:
    """True when the learner gave one answer for every case, though the right answers differ."""
    return len(values) > 1 and len({repr(v) for v in values}) == 1 and len({repr(e) for e in expected}) > 1


# --- q1: the bytes of a model's training state -------------------------------------------------

def _q1_cases():
    """(description, model factory, optimizer factory, copies). Each factory call builds afresh."""
    import torch
    from torch import nn

    def mlp(width=64, dtype=torch.float32, frozen_first=False):
        def make():
            torch.manual_seed(51)
            model = nn.Sequential(nn.Linear(15, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                  nn.Linear(width, 1)).to(dtype)
            if frozen_first:
                model[0].requires_grad_(False)
            return model
        return make

    class Cast(nn.Module):                 # no parameters: passes a layer's output on in the next one's dtype
        def __init__(self, dtype):
            super().__init__()
            self.dtype = dtype

        def forward(self, x):
            return x.to(self.dtype)

    def mixed():
        torch.manual_seed(54)
        return nn.Sequential(nn.Linear(15, 64).to(torch.bfloat16), Cast(torch.float32), nn.ReLU(),
                             nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

    def cnn():
        torch.manual_seed(52)
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    adam = lambda ps: torch.optim.Adam(ps, lr=1e-3)                       # noqa: E731
    adamw = lambda ps: torch.optim.AdamW(ps, lr=1e-3)                     # noqa: E731
    momentum = lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9)      # noqa: E731
    sgd = lambda ps: torch.optim.SGD(ps, lr=1e-2)                          # noqa: E731
    return [
        ("episode 3's MLP (15 → 64 → 64 → 1, float32) with Adam, copies=2", mlp(), adam, 2, (15,)),
        ("the same MLP with SGD and momentum, copies=1", mlp(), momentum, 1, (15,)),
        ("a small CNN (float32) with plain SGD, copies=0", cnn, sgd, 0, (3, 8, 8)),
        ("an MLP 15 → 96 → 96 → 1 in bfloat16 with AdamW, copies=2", mlp(96, torch.bfloat16), adamw, 2, (15,)),
        ("an MLP whose first layer is frozen (requires_grad=False), with Adam, copies=2",
         mlp(frozen_first=True), adam, 2, (15,)),
        ("an MLP 15 → 40 → 40 → 1 in float64 with SGD and momentum, copies=1", mlp(40, torch.float64), momentum, 1, (15,)),
        ("an MLP whose first layer is bfloat16 and the others float32, with Adam, copies=2", mixed, adam, 2, (15,)),
    ]


def _measured_state(make_model, make_optimizer, sample_shape):
    """Train one step, then add up the bytes of parameters, gradients and per-parameter optimizer state."""
    import torch

    model = make_model()
    params = list(model.parameters())
    optimizer = make_optimizer(params)
    dtype = params[0].dtype
    torch.manual_seed(53)
    x = torch.randn(4, *sample_shape, dtype=dtype)
    model(x).float().square().mean().backward()
    optimizer.step()
    weights = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    state = 0
    for p in params:
        for value in optimizer.state.get(p, {}).values():
            if isinstance(value, torch.Tensor) and value.shape == p.shape:   # not Adam's scalar step count
                state += value.numel() * value.element_size()
    return model, {"weights": weights, "gradients": grads, "state": state}


def _q1_alternatives(model, copies):
    """Answers that common mistakes give for ``model``: {message: bytes}."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    size = lambda ps: sum(p.numel() * p.element_size() for p in ps)   # noqa: E731
    count = lambda ps: sum(p.numel() for p in ps)                      # noqa: E731
    right = size(params) + size(trainable) * (1 + copies)
    return {
        "you counted the weights only: training also holds a gradient per trainable parameter and the "
        "optimizer's `copies` state tensors.": size(params),
        "the gradients are missing: backward() stores one gradient per trainable parameter, the size of the "
        "parameter, until zero_grad(set_to_none=True).": size(params) + size(trainable) * copies,
        "the optimizer state is missing: add `copies` tensors the size of each trainable parameter "
        "(Adam keeps two: exp_avg and exp_avg_sq).": size(params) + size(trainable),
        "frozen parameters (requires_grad=False) get no gradient and no optimizer state: count those two "
        "only for parameters with p.requires_grad.": size(params) * (2 + copies),
        "you used 4 bytes for every number; use each parameter's own size, p.element_size() "
        "(2 for bfloat16, 8 for float64).": 4 * (count(params) + count(trainable) * (1 + copies)),
        "each parameter has its own dtype: use p.element_size() per parameter, not the first parameter's size "
        "for all of them (a model can mix bfloat16 and float32 layers).":
            params[0].element_size() * (count(params) + count(trainable) * (1 + copies)),
        "that is in bits: divide by 8 (a float32 number is 4 bytes, 32 bits).": 8 * right,
        "you counted numbers, not bytes: multiply each parameter's numel() by its element_size().":
            count(params) + count(trainable) * (1 + copies),
        "you ignored `copies` and counted Adam's two state tensors for every optimizer; SGD keeps none, "
        "SGD with momentum one.": size(params) + size(trainable) * 3,
        "that is in GiB; return bytes (1 GiB = 2**30 bytes).": right / GIB,
        "that is in MiB; return bytes (1 MiB = 2**20 bytes).": right / MIB,
        "that is in GB; return bytes.": right / 1e9,
        "that is in MB; return bytes.": right / 1e6,
        "you counted the gradients twice.": size(params) + size(trainable) * (2 + copies),
    }


def _same(got: float, value: float) -> bool:
    """Equal as byte counts (within half a byte), or to a millionth for values in larger units."""
    return abs(got - value) <= (0.5 if abs(value) >= 1 else 1e-6 * abs(value))


def _check_state_bytes(training_state_bytes):
    require_function(training_state_bytes, "training_state_bytes")
    results = []
    for description, make_model, make_optimizer, copies, shape in _q1_cases():
        model, parts = _measured_state(make_model, make_optimizer, shape)
        expected = sum(parts.values())
        what = f"training_state_bytes(model, {copies}) for {description}"
        given = make_model()
        before = snapshot(given)
        got_raw = call_answer(training_state_bytes, given, copies, what=what)
        changed = changes(before, given)
        if changed:
            raise Wrong(f"{what} changed the model it was given ({changed}): in the notebook that changes your model "
                        "for good. Count without changing anything: p.numel() * p.element_size() per parameter.")
        got = as_number(what, got_raw)
        results.append((description, model, copies, got, expected, parts, what))
    wrong = [r for r in results if abs(r[3] - r[4]) > 0.5]
    if wrong and _constant([r[3] for r in results], [r[4] for r in results]):
        raise Wrong(f"training_state_bytes returned {results[0][3]:,.6g} for every model and optimizer, but they "
                    f"hold from {min(r[4] for r in results):,} to {max(r[4] for r in results):,} bytes: compute the "
                    "answer from model.parameters() and copies, not a number you worked out once.")
    if not wrong:
        for description, model, copies, got, expected, parts, what in results:
            if not float(got).is_integer():
                raise Wrong(f"{what} returned {got!r}; bytes are a whole number.")
        first = results[0]
        return (f"right on {len(results)} models and optimizers, measured after a real optimizer step. "
                f"Episode 3's MLP with Adam holds {first[4]:,} bytes: 16 per parameter.")
    for message in _q1_alternatives(results[0][1], results[0][2]):
        if all(_same(got, _q1_alternatives(model, copies)[message]) for _, model, copies, got, _, _, _ in results):
            raise Wrong(message)
    description, model, copies, got, expected, parts, what = wrong[0]
    for message, value in _q1_alternatives(model, copies).items():
        if _same(got, value):
            right_on = [r[0] for r in results if abs(r[3] - r[4]) <= 0.5]
            where = f" (right for {len(right_on)} of the {len(results)} cases)" if right_on else ""
            raise Wrong(f"{what} returned {got:,.6g}{where}: {message}")
    right_on = [r[0] for r in results if abs(r[3] - r[4]) <= 0.5]
    hint = (f" It is right for {right_on[0]}, so look at what differs: dtype, frozen parameters, copies."
            if right_on else "")
    raise Wrong(f"{what} returned {got:,.6g}, but after one optimizer step the model holds {expected:,} bytes: "
                f"{parts['weights']:,} of weights, {parts['gradients']:,} of gradients and {parts['state']:,} "
                f"of optimizer state.{hint}")


q1 = Exercise("ep05.q1", _check_state_bytes,
              hint=("What does one parameter cost in bytes, in its own dtype? Which parameters also get a gradient "
                    "and optimizer state, and how many copies of that state?",
                    "Go through the parameters one by one. Each costs its number of elements times its element size "
                    "for the weights; a trainable one (requires_grad) costs that again for its gradient and once more "
                    "for each copy of optimizer state; a frozen one costs its weights only. Add it all up."),
              solution=solution_link(NOTEBOOK))


# --- q2: the largest batch from two measurements ----------------------------------------------

def _q2_case(budget_gib, fixed, per_sample, b1, b2):
    peak1 = fixed + per_sample * b1
    peak2 = fixed + per_sample * b2
    return (budget_gib, b1, int(peak1), b2, int(peak2))


_Q2_CASES = [
    ("a 77M-parameter MLP on a T4 (14.74 GiB)", _q2_case(14.74, 1_234_567_890, 4160.25, 512, 4096)),
    ("a CNN in 2 GiB, measurements given largest batch first", _q2_case(2, 300_000_000, 2_900_000.5, 128, 32)),
    ("a large model in 80 GiB", _q2_case(80, 20_000_000_000, 150_000.75, 64, 1024)),
    ("a budget of 1 GiB given as an int", _q2_case(1, 3_500_000, 1000.5, 1000, 3000)),
    ("a model whose state alone takes more than the budget of 0.5 GiB", _q2_case(0.5, 700_000_000, 3000.0, 8, 64)),
    ("2 GiB, where batch 1,000 fills the budget to the byte", _q2_case(2, 2 * GIB - 1000 * 1024, 1024, 100, 200)),
]


def _q2_expected(budget_gib, b1, p1, b2, p2, *, bytes_per_gib=GIB, rounding=math.floor, fixed_from=None):
    per_sample = Fraction(p2 - p1, b2 - b1)
    fixed = Fraction(p1) - per_sample * b1 if fixed_from is None else Fraction(fixed_from)
    budget = Fraction(budget_gib).limit_denominator(10**6) * bytes_per_gib
    return max(0, rounding((budget - fixed) / per_sample))


def _q2_alternatives(case):
    budget_gib, b1, p1, b2, p2 = case
    budget = Fraction(budget_gib).limit_denominator(10**6) * GIB
    per_sample = Fraction(p2 - p1, b2 - b1)
    clamp = lambda x: max(0, math.floor(x))                                 # noqa: E731
    flipped = -per_sample                     # the slope's sign lost when the larger batch comes first
    return {
        "the measurements of this case come largest batch first (b1 > b2): the per-sample bytes came out negative "
        "or were paired with the wrong batch. (peak2 - peak1) / (b2 - b1) is right in either order; do not sort "
        "the peaks or the batches on their own, or take an abs() of one difference only.":
            ([clamp((budget - (Fraction(p1) - flipped * b1)) / flipped) if flipped > 0 else 0,
              math.floor((budget - (Fraction(p1) - flipped * b1)) / flipped),
              clamp((budget - (Fraction(min(p1, p2)) - abs(per_sample) * max(b1, b2))) / abs(per_sample)),
              clamp((budget - (Fraction(max(p1, p2)) - abs(per_sample) * min(b1, b2))) / abs(per_sample))]
             if b1 > b2 else []),
        "you treated the peak as proportional to the batch (peak / batch per sample, nothing fixed). "
        "Part of the peak does not depend on the batch: weights, gradients, optimizer state. Take the slope "
        "between the two measurements for the per-sample part, and the rest as fixed.":
            [math.floor(budget / Fraction(p2, b2)), math.floor(budget / Fraction(p1, b1))],
        "1 GiB is 2**30 bytes, not 10**9 (that is a GB).": [_q2_expected(*case, bytes_per_gib=10**9)],
        "the budget came out far too small: budget_gib is in GiB; multiply it by 2**30 to compare it with peaks "
        "in bytes (2**20 bytes is a MiB).": [_q2_expected(*case, bytes_per_gib=MIB), _q2_expected(*case, bytes_per_gib=1)],
        "that batch is one too many: its predicted peak is above the budget. Round down (math.floor).":
            [_q2_expected(*case, rounding=math.ceil), _q2_expected(*case, rounding=round)],
        "that batch is one too few: a batch whose predicted peak equals the budget exactly still fits. Round down "
        "with math.floor (ceil(x) - 1, or a strict <, loses a batch when x is whole; so does a line fitted with "
        "rounding errors, such as np.polyfit's: take the slope and the fixed part from the two points directly).":
            [_q2_expected(*case, rounding=lambda x: math.ceil(x) - 1)],
        "you took peak1 as the fixed part, but peak1 already includes the activations of b1 samples: the "
        "fixed part is peak1 - per_sample * b1.": [_q2_expected(*case, fixed_from=p1),
                                                    _q2_expected(*case, fixed_from=p2)],
        "when not even one sample fits, return 0, not a negative batch.":     # rounded by floor, int() or round
            [rounding((budget - (Fraction(p1) - per_sample * b1)) / per_sample)
             for rounding in (math.floor, math.trunc, round, math.ceil)]
            if _q2_expected(*case) == 0 else [],
    }


def _check_max_batch(max_batch):
    require_function(max_batch, "max_batch")
    results, raws = [], []
    for description, case in _Q2_CASES:
        what = f"max_batch{case} ({description})"
        got = call_answer(max_batch, *case, what=what)
        value = as_number(what, got)
        raws.append(got)
        results.append((description, case, value, _q2_expected(*case), what))
    wrong = [r for r in results if r[2] != r[3]]
    if not wrong:
        for (description, case, _, _, what), raw in zip(results, raws):
            if isinstance(raw, bool) or not isinstance(raw, numbers.Integral):
                raise Wrong(f"{what} returned {raw!r}, the right size but a {type(raw).__name__}: return an int "
                            "(math.floor returns one; a / b is always a float), ready for torch.randn(batch, ...).")
        return (f"right on {len(results)} cases, including one whose measurements come largest batch first and "
                "one where nothing fits.")
    description, case, value, expected, what = wrong[0]
    if any(not float(r[2]).is_integer() for r in wrong):
        r = next(r for r in wrong if not float(r[2]).is_integer())
        raise Wrong(f"{r[4]} returned {r[2]!r}; a batch is a whole number of samples: round down with math.floor "
                    "(or int() of a positive number).")
    for message in _q2_alternatives(_Q2_CASES[1][1]):     # the specific mistakes first: order, then units
        if all(r[2] == r[3] or r[2] in _q2_alternatives(r[1])[message] for r in results) and \
                any(r[2] in _q2_alternatives(r[1])[message] for r in wrong):
            r = next(r for r in wrong if r[2] in _q2_alternatives(r[1])[message])
            raise Wrong(f"{r[4]} returned {r[2]:,.0f}, expected {r[3]:,}: {message}")
    if _constant([r[2] for r in results], [r[3] for r in results]):
        raise Wrong(f"max_batch returned {results[0][2]:,.6g} for every case, but the right batches range from "
                    f"{min(r[3] for r in results):,} to {max(r[3] for r in results):,}: compute it from the "
                    "budget and the two measurements.")
    right = sum(1 for r in results if r[2] == r[3])
    raise Wrong(f"{what} returned {value:,.0f}, expected {expected:,} (right on {right} of {len(results)} cases). "
                "The per-sample bytes are the slope (peak2 - peak1) / (b2 - b1); the fixed bytes are "
                "peak1 - slope * b1; the budget is budget_gib * 2**30 bytes.")


q2 = Exercise("ep05.q2", _check_max_batch,
              hint=("The peak is a straight line in the batch size: what do its slope and the point where it meets "
                    "batch 0 mean, and how do two measurements give both?",
                    "The slope is the difference of the peaks over the difference of the batches (bytes per sample); "
                    "the fixed part is a peak minus slope times its batch. Turn the budget into bytes (GiB are binary), "
                    "subtract the fixed part, divide by the slope and round down; never below 0."),
              solution=solution_link(NOTEBOOK))


# --- q3: the smallest GPU that fits a model ---------------------------------------------------

# GPU memory in GB as datasheets state it, counted as 10**9 bytes (a cautious rule: the chips come in GiB): episode 1's table of data-centre GPUs, in no
# particular order, and desktop GPUs (NVIDIA's product pages: RTX 3080 10 GB, RTX 3060 12 GB, RTX 4060 Ti
# 16 GB, RTX 4090 24 GB, RTX A6000 48 GB).
_DATACENTRE = {"A100 80GB": 80, "T4": 16, "H100 SXM": 80, "L4": 24, "V100 32GB": 32, "A100 40GB": 40, "P100": 16}
_DESKTOP = {"RTX 4090": 24, "RTX 3060": 12, "RTX A6000": 48, "RTX 3080": 10, "RTX 4060 Ti 16GB": 16}

_Q3_CASES = [  # description, parameters, activation bytes per sample, batch, gpus, headroom
    ("a 1-billion-parameter model at batch 512", 1_000_000_000, 4_000_000, 512, _DATACENTRE, 0.1),
    ("a model a little too big for an L4 once 10 % is kept free", 1_200_000_000, 5_000_000, 500, _DATACENTRE, 0.1),
    ("a model that needs 15.0 GB (15.0e9 bytes)", 800_000_000, 2_200_000, 1000, _DATACENTRE, 0.1),
    ("a CNN whose activations dominate, on desktop GPUs with 20 % kept free", 10_000_000, 30_000_000, 512,
     _DESKTOP, 0.2),
    ("a 6-billion-parameter model", 6_000_000_000, 1_000_000, 64, _DATACENTRE, 0.1),
    ("a model that needs exactly 75 % of a 16 GB GPU, with 25 % kept free", 500_000_000, 7_812_500, 512,
     _DESKTOP, 0.25),
    ("a model that needs 12 GB, with 30 % kept free", 500_000_000, 7_812_500, 512, _DESKTOP, 0.3),
    ("a model that fits on two 80 GB GPUs and nothing smaller", 3_000_000_000, 24_000_000, 500, _DATACENTRE, 0.1),
]


def _q3_rule(parameters, activations, batch, gpus, headroom, *, per_parameter=16, unit=10**9, times_batch=True,
             keep="memory", strict=False, pick="smallest", check_fit=True):
    """The GPU a rule chooses: the right one by default, or the answer of a named mistake."""
    need = per_parameter * parameters + activations * (batch if times_batch else 1)
    free = {"memory": Fraction(str(headroom)), "none": Fraction(0), "tenth": Fraction(1, 10)}.get(keep, Fraction(0))

    def fits(gb):
        room = gb * unit * (1 - free)
        needed = need * (1 + Fraction(str(headroom))) if keep == "need" else need
        return not check_fit or (needed < room if strict else needed <= room)

    fitting = [(name, gb) for name, gb in gpus.items() if fits(gb)]
    if not fitting:
        return None
    if pick == "first":
        return fitting[0][0]
    if pick == "largest":
        return max(fitting, key=lambda item: item[1])[0]
    least = min(gb for _, gb in fitting)
    same = [name for name, gb in fitting if gb == least]
    return same[-1] if pick == "smallest-last" else same[0]


_Q3_DIAGNOSES = [   # (rule, message), the specific mistakes first
    (dict(unit=GIB), "this exercise counts a datasheet GB as 10**9 bytes, a cautious rule: a 16 GB T4 leaves "
     "14.74 GiB to PyTorch, less than 16 × 2**30. Turn the GPU's GB into bytes with 10**9, and compare bytes "
     "with bytes."),
    (dict(per_parameter=12), "you counted 12 bytes per parameter: with Adam in float32 training holds 16, the weights "
     "(4), their gradients (4) and Adam's two moments (8)."),
    (dict(per_parameter=8), "you counted 8 bytes per parameter, the weights and gradients: Adam's two moments add 8 "
     "more (16 in all, in float32)."),
    (dict(per_parameter=4), "you counted the weights only (4 bytes per parameter): training also holds the gradients "
     "(4) and Adam's two moments (8), 16 bytes per parameter."),
    (dict(per_parameter=20), "you counted 20 bytes per parameter; between steps Adam in float32 holds 16: weights, "
     "gradients and two moments."),
    (dict(times_batch=False), "activation_bytes is per sample: the activations of a step are activation_bytes × batch."),
    (dict(keep="none"), "you ignored headroom: the model fits only if it needs at most (1 - headroom) of the GPU's "
     "memory."),
    (dict(keep="need"), "headroom is a share of the GPU's memory, kept free: compare what training needs with "
     "(1 - headroom) × the GPU's memory, not need × (1 + headroom) with all of it."),
    (dict(keep="tenth"), "you kept 10 % free whatever the headroom argument says: use headroom."),
    (dict(strict=True), "a model that needs exactly (1 - headroom) of a GPU's memory still fits: use <=, not <."),
    (dict(pick="largest"), "you chose the GPU with the most memory that fits; choose the one with the least memory "
     "among those on which the model fits."),
    (dict(pick="first"), "you returned the first GPU in the table on which the model fits, but the table is in no "
     "particular order: among those that fit, choose the one with the least memory."),
    (dict(pick="smallest-last"), "two GPUs with the least memory that fits have the same memory: return the first "
     "of them in gpus, as the prompt says (a strict < when you compare keeps the first)."),
    (dict(check_fit=False), "you returned the GPU with the least memory without checking that the model fits on it."),
]


def _check_smallest_gpu(smallest_gpu):
    require_function(smallest_gpu, "smallest_gpu")
    answers = []
    for description, parameters, activations, batch, gpus, headroom in _Q3_CASES:
        what = f"smallest_gpu({parameters:,}, {activations:,}, {batch}, gpus, {headroom}) for {description}"
        given = copy.deepcopy(gpus)
        try:
            with answer_deadline(what):
                got = smallest_gpu(parameters, activations, batch, given, headroom)
        except (NotDone, Wrong):
            raise
        except Exception as exc:
            if mentions_blank(exc):
                raise NotDone("smallest_gpu still uses ____: replace it with your code.") from None
            if isinstance(exc, ValueError) and "empty" in str(exc):
                raise Wrong(f"{what} raised ValueError ({exc}): when no GPU is big enough, return None (min() of "
                            "nothing raises: check first).") from None
            raise Wrong(error_message(what, exc)) from None
        if is_blank(got):
            raise NotDone("smallest_gpu still returns ____: replace it with your code.")
        if given != gpus:
            raise Wrong(f"{what} changed the table of GPUs it was given: later cells lose GPUs from it. Read it; "
                        "build a list or dict of your own if you need one.")
        if got is not None and not isinstance(got, str):
            raise Wrong(f"{what} returned {describe(got)}; return the NAME of the GPU, a key of gpus such as "
                        f"{next(iter(gpus))!r}, or None if the model fits on none.")
        if got is not None and got not in gpus:
            raise Wrong(f"{what} returned {got!r}, which is not one of the GPUs in the table.")
        expected = _q3_rule(parameters, activations, batch, gpus, headroom)
        answers.append((description, (parameters, activations, batch, gpus, headroom), expected, got, what))
    wrong = [a for a in answers if a[3] != a[2]]
    if not wrong:
        return (f"right on {len(answers)} models and tables, including one where nothing fits, one right at the "
                "edge and two GPUs with the same memory (datasheet GB counted as 10**9 bytes, a cautious rule).")
    for rule, message in _Q3_DIAGNOSES:
        if all(a[3] == _q3_rule(*a[1], **rule) for a in answers):
            raise Wrong(message)
    description, case, expected, got, what = wrong[0]
    parameters, activations, batch, gpus, headroom = case
    need = 16 * parameters + activations * batch
    if expected is None:
        raise Wrong(f"{what} returned {got!r}, but training needs {need / 1e9:,.1f} GB and no GPU has that much with "
                    f"{headroom:.0%} kept free: return None.")
    right = sum(1 for a in answers if a[3] == a[2])
    raise Wrong(f"{what} returned {got!r}, expected {expected!r} (right on {right} of {len(answers)} cases): "
                f"training needs {need / 1e9:,.2f} GB (16 bytes per parameter plus the activations of the batch), "
                f"and {expected} is the GPU with the least memory that holds it with {headroom:.0%} kept free.")


q3 = Exercise("ep05.q3", _check_smallest_gpu,
              hint=("How many bytes does training need: which parts grow with the parameters, and which with the "
                    "batch? And how many bytes does a GPU of 16 GB hold, once the headroom is kept free?",
                    "Add 16 bytes per parameter (weights, gradients, Adam's two moments) to the activations per sample "
                    "times the batch. Turn each GPU's GB into bytes with 10**9 and keep (1 - headroom) of it. Among "
                    "the GPUs where the need fits, take the one with the least memory; with none, None."),
              solution=solution_link(NOTEBOOK))


__all__ = ["q1", "q2", "q3"]
