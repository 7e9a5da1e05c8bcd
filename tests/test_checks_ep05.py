"""Episode 5's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

Each exercise has a parametrized list of plausible wrong answers: the mistake the exercise is
about, wrong units (GB vs GiB, bits vs bytes), forgotten gradients or optimizer state, no headroom,
the first or the largest GPU instead of the smallest, hard-coded constants, answers right on one
case only, and wrong types. Every one must be rejected with a message that names its mistake.
"""

from __future__ import annotations

import math

import pytest

from gpucourse.checks import ep05
from gpucourse.exercises import ____

from checking import assert_wrong, outcome


# --- q1: the bytes of a model's training state ------------------------------------------------

def training_state_bytes(model, copies):
    total = 0
    for p in model.parameters():
        size = p.numel() * p.element_size()
        total += size
        if p.requires_grad:
            total += size * (1 + copies)
    return total


def training_state_bytes_other_spelling(model, copies):
    weights = sum(p.nbytes for p in model.parameters())
    trainable = sum(p.nbytes for p in model.parameters() if p.requires_grad)
    return weights + trainable + copies * trainable


def stub_state_bytes(model, copies):
    return ____


def test_q1_right_answers_pass_and_stub_is_not_done():
    for fn in (training_state_bytes, training_state_bytes_other_spelling):
        result, message = outcome(ep05.q1, fn)
        assert result == "correct", message
    assert outcome(ep05.q1, ____)[0] == "not-done"
    assert outcome(ep05.q1, stub_state_bytes)[0] == "not-done"


def _sizes(model):
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    return params, trainable


def state_formula(weights=True, grads=True, state=True, respect_frozen=True, element=None, scale=1.0,
                  copies_override=None, numbers=False):
    def fn(model, copies):
        params, trainable = _sizes(model)
        if not respect_frozen:
            trainable = params
        copies = copies if copies_override is None else copies_override
        size = (lambda p: p.numel()) if numbers else (lambda p: p.numel() * (element or p.element_size()))
        total = sum(size(p) for p in params) if weights else 0
        total += sum(size(p) for p in trainable) * ((1 if grads else 0) + (copies if state else 0))
        return total * scale
    return fn


Q1_WRONG = {
    "weights only": (state_formula(grads=False, state=False), ["weights only"]),
    "forgot the gradients": (state_formula(grads=False), ["gradients are missing"]),
    "forgot the optimizer state": (state_formula(state=False), ["optimizer state is missing", "exp_avg"]),
    "frozen parameters counted": (state_formula(respect_frozen=False), ["frozen", "requires_grad"]),
    "4 bytes for every dtype": (state_formula(element=4), ["4 bytes for every number", "element_size"]),
    "bits, not bytes": (state_formula(scale=8), ["bits"]),
    "numbers, not bytes": (state_formula(numbers=True), ["numbers, not bytes", "element_size"]),
    "always Adam's two copies": (state_formula(copies_override=2), ["ignored `copies`"]),
    "GiB": (state_formula(scale=1 / 2**30), ["GiB", "bytes"]),
    "MB": (state_formula(scale=1 / 1e6), ["in MB"]),
    "hard-coded 16 bytes per parameter": (lambda m, c: 16 * sum(p.numel() for p in m.parameters()),
                                          ["right for", "of the 7 cases"]),
    "one dtype for all parameters": (lambda m, c: next(m.parameters()).element_size()
                                     * (sum(p.numel() for p in m.parameters())
                                        + sum(p.numel() for p in m.parameters() if p.requires_grad) * (1 + c)),
                                     ["own dtype", "element_size() per parameter"]),
    "hard-coded constant": (lambda m, c: 83_984, ["for every model", "model.parameters()"]),
    "gradients counted twice": (lambda m, c: training_state_bytes(m, c + 1), ["gradients twice"]),
    "text": (lambda m, c: "83984 bytes", ["should be a number", "text in quotes"]),
    "half a byte": (lambda m, c: training_state_bytes(m, c) + 0.25, ["whole number"]),
    "not a function": (83_984, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q1_WRONG))
def test_q1_wrong_answers_name_the_mistake(name):
    answer, words = Q1_WRONG[name]
    assert_wrong(ep05.q1, [answer], words)


# --- q2: the largest batch from two measurements ---------------------------------------------

def max_batch(budget_gib, b1, peak1, b2, peak2):
    per_sample = (peak2 - peak1) / (b2 - b1)
    fixed = peak1 - per_sample * b1
    return max(0, math.floor((budget_gib * 2**30 - fixed) / per_sample))


def max_batch_int_arithmetic(budget_gib, b1, peak1, b2, peak2):
    if b1 > b2:
        b1, peak1, b2, peak2 = b2, peak2, b1, peak1
    from fractions import Fraction
    slope = Fraction(peak2 - peak1, b2 - b1)
    free = Fraction(budget_gib).limit_denominator(10**6) * 2**30 - (peak1 - slope * b1)
    return max(0, int(free // slope))


def test_q2_right_answers_pass_and_stub_is_not_done():
    for fn in (max_batch, max_batch_int_arithmetic):
        result, message = outcome(ep05.q2, fn)
        assert result == "correct", message
    assert outcome(ep05.q2, ____)[0] == "not-done"
    assert outcome(ep05.q2, lambda *a: ____)[0] == "not-done"


def _line(budget_gib, b1, p1, b2, p2):
    s = (p2 - p1) / (b2 - b1)
    return s, p1 - s * b1


Q2_WRONG = {
    "proportional to the batch": (lambda g, b1, p1, b2, p2: math.floor(g * 2**30 / (p2 / b2)),
                                  ["proportional", "fixed"]),
    "GB instead of GiB": (lambda g, b1, p1, b2, p2: max(0, math.floor((g * 1e9 - _line(g, b1, p1, b2, p2)[1])
                                                                      / _line(g, b1, p1, b2, p2)[0])),
                          ["2**30", "GB"]),
    "MiB instead of GiB": (lambda g, b1, p1, b2, p2: max(0, math.floor((g * 2**20 - _line(g, b1, p1, b2, p2)[1])
                                                                       / _line(g, b1, p1, b2, p2)[0])),
                           ["MiB"]),
    "rounded up": (lambda g, b1, p1, b2, p2: max(0, math.ceil((g * 2**30 - _line(g, b1, p1, b2, p2)[1])
                                                              / _line(g, b1, p1, b2, p2)[0])),
                   ["round down"]),
    "peak1 taken as the fixed part": (lambda g, b1, p1, b2, p2: max(0, math.floor((g * 2**30 - p1)
                                                                                  / _line(g, b1, p1, b2, p2)[0])),
                                      ["peak1 already includes"]),
    "negative when nothing fits": (lambda g, b1, p1, b2, p2: math.floor((g * 2**30 - _line(g, b1, p1, b2, p2)[1])
                                                                       / _line(g, b1, p1, b2, p2)[0]),
                                   ["return 0"]),
    "negative when nothing fits, truncated with int()": (
        lambda g, b1, p1, b2, p2: int((g * 2**30 - _line(g, b1, p1, b2, p2)[1]) / _line(g, b1, p1, b2, p2)[0]),
        ["return 0"]),
    "a float batch": (lambda g, b1, p1, b2, p2: (g * 2**30 - _line(g, b1, p1, b2, p2)[1]) / _line(g, b1, p1, b2, p2)[0],
                      ["whole number", "math.floor"]),
    "an integral float": (lambda g, b1, p1, b2, p2: float(max_batch(g, b1, p1, b2, p2)), ["return an int"]),
    "hard-coded constant": (lambda g, b1, p1, b2, p2: 3_500_000, ["for every case", "compute it"]),
    "budget left in GiB": (lambda g, b1, p1, b2, p2: max(0, math.floor((g - _line(g, b1, p1, b2, p2)[1])
                                                                       / _line(g, b1, p1, b2, p2)[0])),
                           ["multiply it by 2**30"]),
    "ceil minus one": (lambda g, b1, p1, b2, p2: max(0, math.ceil((g * 2**30 - _line(g, b1, p1, b2, p2)[1])
                                                                  / _line(g, b1, p1, b2, p2)[0]) - 1),
                       ["one too few", "equals the budget exactly", "math.floor"]),
    "text": (lambda g, b1, p1, b2, p2: "3 million", ["should be a number"]),
    "not a function": (1234, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q2_WRONG))
def test_q2_wrong_answers_name_the_mistake(name):
    answer, words = Q2_WRONG[name]
    assert_wrong(ep05.q2, [answer], words)


# --- q3: the smallest GPU that fits a model -----------------------------------------------------

def smallest_gpu(parameters, activation_bytes, batch, gpus, headroom):
    need = 16 * parameters + activation_bytes * batch
    fitting = {name: gb for name, gb in gpus.items() if need <= (1 - headroom) * gb * 10**9}
    return min(fitting, key=fitting.get) if fitting else None


def smallest_gpu_sorted(parameters, activation_bytes, batch, gpus, headroom):
    need_gb = (16 * parameters + activation_bytes * batch) / 1e9
    for name, gb in sorted(gpus.items(), key=lambda item: item[1]):      # a stable sort keeps the table's order
        if need_gb <= gb * (1 - headroom):
            return name
    return None


def test_q3_right_answers_pass_and_stub_is_not_done():
    for fn in (smallest_gpu, smallest_gpu_sorted):
        result, message = outcome(ep05.q3, fn)
        assert result == "correct", message
    assert outcome(ep05.q3, ____)[0] == "not-done"
    assert outcome(ep05.q3, lambda p, a, b, gpus, h: ____)[0] == "not-done"


def gpu_rule(per_parameter=16, unit=10**9, times_batch=True, keep="memory", strict=False, pick="smallest",
             check_fit=True):
    """A learner's smallest_gpu with one mistake, written as a learner would (floats, a loop)."""
    def fn(parameters, activation_bytes, batch, gpus, headroom):
        need = per_parameter * parameters + activation_bytes * (batch if times_batch else 1)
        free = {"memory": headroom, "none": 0.0, "tenth": 0.1, "need": 0.0}[keep]
        if keep == "need":
            need *= 1 + headroom
        fitting = [(name, gb) for name, gb in gpus.items()
                   if not check_fit or (need < (1 - free) * gb * unit if strict else need <= (1 - free) * gb * unit)]
        if not fitting:
            return None
        if pick == "first":
            return fitting[0][0]
        if pick == "largest":
            return max(fitting, key=lambda item: item[1])[0]
        best = None
        for name, gb in fitting:
            if best is None or gb < best[1] or (pick == "smallest-last" and gb == best[1]):
                best = (name, gb)
        return best[0]
    return fn


Q3_WRONG = {
    "GiB for GB": (gpu_rule(unit=2**30), ["GB", "10**9", "2**30"]),
    "gradients forgotten (12 bytes)": (gpu_rule(per_parameter=12), ["12 bytes", "gradients", "two moments"]),
    "optimizer state forgotten (8 bytes)": (gpu_rule(per_parameter=8), ["8 bytes", "Adam's two moments"]),
    "weights only (4 bytes)": (gpu_rule(per_parameter=4), ["weights only", "16 bytes"]),
    "activations not times the batch": (gpu_rule(times_batch=False), ["per sample", "batch"]),
    "no headroom": (gpu_rule(keep="none"), ["ignored headroom", "1 - headroom"]),
    "headroom added to the need": (gpu_rule(keep="need"), ["share of the GPU's memory", "1 + headroom"]),
    "headroom hard-coded to 10 %": (gpu_rule(keep="tenth"), ["10 %", "headroom argument"]),
    "strict comparison": (gpu_rule(strict=True), ["exactly", "<="]),
    "the largest GPU that fits": (gpu_rule(pick="largest"), ["most memory", "least memory"]),
    "the first GPU that fits": (gpu_rule(pick="first"), ["first GPU in the table", "no particular order"]),
    "the last of two equal GPUs": (gpu_rule(pick="smallest-last"), ["same memory", "first of them"]),
    "the smallest GPU, fit unchecked": (gpu_rule(check_fit=False), ["without checking that the model fits"]),
    "returns the memory": (lambda p, a, b, g, h: g.get(smallest_gpu(p, a, b, g, h)), ["NAME of the GPU"]),
    "returns all that fit": (lambda p, a, b, g, h: [n for n, gb in g.items() if 16 * p + a * b <= (1 - h) * gb * 1e9],
                             ["NAME of the GPU"]),
    "min() of nothing": (lambda p, a, b, g, h: min({n: gb for n, gb in g.items() if 16 * p + a * b <= (1 - h) * gb * 1e9},
                                                   key=g.get), ["return None"]),
    "hard-coded name": (lambda p, a, b, g, h: "L4", ["not one of the GPUs"]),
    "hard-coded name present in one table": (lambda p, a, b, g, h: "L4" if "L4" in g else "RTX 4090",
                                             ["expected", "right on"]),
    "drops GPUs from the table": (lambda p, a, b, g, h: [g.pop(n) for n in list(g)[:1]] and smallest_gpu(p, a, b, g, h),
                                  ["changed the table"]),
    "not a function": ("L4", ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q3_WRONG))
def test_q3_wrong_answers_name_the_mistake(name):
    answer, words = Q3_WRONG[name]
    assert_wrong(ep05.q3, [answer], words)


def test_q3_every_diagnosed_mistake_differs_from_the_right_answer_somewhere():
    """Each named mistake gives a wrong GPU on at least one case, and no two mistakes look the same."""
    seen = {}
    for rule, message in ep05._Q3_DIAGNOSES:
        answers = tuple(ep05._q3_rule(*case[1:], **rule) for case in ep05._Q3_CASES)
        right = tuple(ep05._q3_rule(*case[1:]) for case in ep05._Q3_CASES)
        assert answers != right, message
        assert answers not in seen, (message, seen.get(answers))
        seen[answers] = message


@pytest.mark.parametrize("exercise", [ep05.q1, ep05.q2, ep05.q3], ids=lambda e: e.name)
def test_hints_come_in_two_steps_without_the_code(exercise):
    assert len(exercise.hints) == 2, exercise.hints
    hint = " ".join(exercise.hints)
    assert not any(code in hint for code in (" = ", "+=", "return ", "2**30", "p.numel()", "element_size()",
                                             "(peak2 - peak1)", "<=", "min("))


# --- the conditions that matter: inputs left alone, order -----------------------------------------

def _casts_the_model(model, copies):                   # the bfloat16 model becomes float32 for good
    model.float()
    return training_state_bytes(model, copies)


def _unsorted_slope(budget_gib, b1, peak1, b2, peak2):  # a positive peak difference over b2 - b1
    per_sample = (max(peak1, peak2) - min(peak1, peak2)) / (b2 - b1)
    fixed = peak1 - per_sample * b1
    return max(0, math.floor((budget_gib * 2**30 - fixed) / per_sample))


@pytest.mark.parametrize("exercise, answer, words", [
    ("q1", _casts_the_model, ["changed the model", "dtype", "for good"]),
    ("q2", _unsorted_slope, ["largest batch first", "either order"]),
])
def test_classes_of_mistakes_are_named(exercise, answer, words):
    message = assert_wrong(getattr(ep05, exercise), (answer,), words)
    assert "2**30" not in message or exercise != "q2", message   # not told to multiply by 2**30


def test_written_otherwise_passes():
    import numpy as np

    def max_batch_numpy(budget_gib, b1, peak1, b2, peak2):
        slope = np.divide(peak2 - peak1, b2 - b1, dtype=np.float64)
        return int(max(0, np.floor((budget_gib * 2**30 - (peak1 - slope * b1)) / slope)))

    result, message = ep05.q2.outcome(max_batch_numpy)
    assert result == "correct", message


def test_q3_an_error_in_smallest_gpu_is_explained_in_the_learners_words():
    """A helper without `return` gives None; the message names that, not only the TypeError."""
    def need_of(parameters, activation_bytes, batch):
        16 * parameters + activation_bytes * batch          # the value is computed, never returned

    def smallest_gpu(parameters, activation_bytes, batch, gpus, headroom):
        need = need_of(parameters, activation_bytes, batch)
        fitting = {n: gb for n, gb in gpus.items() if need <= (1 - headroom) * gb * 10**9}
        return min(fitting, key=fitting.get) if fitting else None

    assert_wrong(ep05.q3, [smallest_gpu], ["raised TypeError", "None", "missing `return`"])
