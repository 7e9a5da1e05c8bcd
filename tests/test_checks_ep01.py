"""The checks of episode 1 accept right answers and explain wrong ones precisely.

For each exercise: the solution passes, the untouched stub is "not done", and a set of
plausible wrong answers (the mistake the exercise is about, wrong types and units, hard-coded
constants, answers right on one case only) is rejected with a message that names the mistake.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from gpucourse.checks import ep01
from gpucourse.exercises import ____

from checking import assert_wrong, outcome




# ------------------------------------------------------------------ q1: TFLOP/s
def right_tflops(n, seconds):
    return 2 * n**3 / seconds / 1e12


def test_q1_right_answer():
    result, message = outcome(ep01.q1, right_tflops)
    assert result == "correct", message
    assert outcome(ep01.q1, lambda n, s: np.float32(2 * n**3 / s / 1e12))[0] == "correct"


Q1_WRONG = [
    pytest.param(lambda n, s: n**3 / s / 1e12, "n³ FLOPs", id="n-cubed-not-2n-cubed"),
    pytest.param(lambda n, s: (2 * n ^ 3) / s / 1e12, "XOR", id="xor-power"),
    pytest.param(lambda n, s: 2 * n**2 / s / 1e12, "matrix–VECTOR", id="n-squared"),
    pytest.param(lambda n, s: 2 * n**3 / s / 1e9, "GFLOP/s", id="gflops"),
    pytest.param(lambda n, s: 2 * n**3 / s, "FLOP/s; divide by 1e12", id="flops"),
    pytest.param(lambda n, s: 2 * n**3 / (s * 1e3) / 1e12, "milliseconds", id="seconds-as-ms"),
    pytest.param(lambda n, s: 2 * n**3 / s / 1e15, "1000× too small", id="peta"),
    pytest.param(lambda n, s: s / (2 * n**3) * 1e12, "upside down", id="upside-down"),
    pytest.param(lambda n, s: 2 * n**3 / 1e12, "divide by seconds", id="no-seconds"),
    pytest.param(lambda n, s: 2 * n**3 // s // 10**12, "integer division", id="floor-division"),
    pytest.param(lambda n, s: round(2 * n**3 / s / 1e12, 2), "round", id="rounded"),
    pytest.param(lambda n, s: 2.749, ["for each of 4", "do not type it in"], id="constant-right-for-one-case"),
    pytest.param(lambda n, s: 2 * 4096**3 / s / 1e12, "type in n = 4096", id="hard-coded-n"),
    pytest.param(lambda n, s: str(2 * n**3 / s / 1e12), "text in quotes", id="string"),
    pytest.param(lambda n, s: [2 * n**3 / s / 1e12], "should be a number, got list", id="list"),
    pytest.param(lambda n, s: True, "should be a number, got bool", id="bool"),
    pytest.param(lambda n, s: float("nan"), "finite", id="nan"),
    pytest.param(lambda n: 1.0, "raised TypeError", id="wrong-signature"),
    pytest.param(3.5, "function itself", id="number-not-function"),
    pytest.param("matmul_tflops", "function itself", id="name-in-quotes"),
]


@pytest.mark.parametrize("fn, words", Q1_WRONG)
def test_q1_wrong_answers_name_the_mistake(fn, words):
    assert_wrong(ep01.q1, (fn,), words)


def test_q1_wrong_number_messages_give_expected_and_got():
    message = assert_wrong(ep01.q1, (lambda n, s: n**3 / s / 1e12,), "n³ FLOPs")
    assert "returned" in message and "expected" in message and "TFLOP/s" in message


def test_q1_stub_is_not_done():
    assert outcome(ep01.q1, ____)[0] == "not-done"
    assert outcome(ep01.q1, lambda n, s: ____)[0] == "not-done"
    result, message = outcome(ep01.q1, lambda n, s: None)
    assert result == "not-done" and "forget `return`" in message


# ------------------------------------------------------------------ q2: roofline
def right_roofline(n, peak_tflops, bandwidth_gbs):
    ridge = peak_tflops * 1e12 / (bandwidth_gbs * 1e9)
    intensity = 2 * n**3 / (3 * n * n * 4)
    return ridge, intensity, "compute" if intensity > ridge else "memory"


def with_bound(rule):
    """A roofline whose ridge and intensity are right, and whose bound follows ``rule``."""
    def roofline(n, peak, bw):
        ridge, intensity, _ = right_roofline(n, peak, bw)
        return ridge, intensity, rule(n, ridge, intensity)
    return roofline


def with_ridge(ridge_fn):
    def roofline(n, peak, bw):
        _, intensity, bound = right_roofline(n, peak, bw)
        return ridge_fn(peak, bw), intensity, bound
    return roofline


def with_intensity(intensity_fn):
    def roofline(n, peak, bw):
        ridge, _, bound = right_roofline(n, peak, bw)
        return ridge, intensity_fn(n), bound
    return roofline


def test_q2_right_answer():
    result, message = outcome(ep01.q2, right_roofline)
    assert result == "correct", message
    assert "memory-bound" in message


@pytest.mark.parametrize("bound", ["Memory", " memory ", "memory-bound", "Memory bound"])
def test_q2_bound_spelling_is_forgiven(bound):
    def roofline(n, peak, bw):
        ridge, intensity, word = right_roofline(n, peak, bw)
        return ridge, intensity, bound if word == "memory" else word
    assert outcome(ep01.q2, roofline)[0] == "correct"


Q2_WRONG = [
    # the ridge point
    pytest.param(with_ridge(lambda p, b: b * 1e9 / (p * 1e12)), "Upside down", id="ridge-upside-down"),
    pytest.param(with_ridge(lambda p, b: p / b), ["0.001×", "mind the units"], id="ridge-no-units"),
    pytest.param(with_ridge(lambda p, b: p * 1e12 / b), ["mind the units", "e9 bytes/s"], id="ridge-only-flops-converted"),
    pytest.param(with_ridge(lambda p, b: p * 1e12 / (b * 2**30)), "2³⁰", id="ridge-gib"),
    pytest.param(with_ridge(lambda p, b: 8.1e12 / 320e9), ["T4's ridge", "A100"], id="ridge-t4-constant"),
    # the arithmetic intensity
    pytest.param(with_intensity(lambda n: n**3 / (3 * n * n * 4)), "n³ FLOPs", id="intensity-n-cubed"),
    pytest.param(with_intensity(lambda n: 2 * n**3 / (3 * n * n * 8)), "8 bytes", id="intensity-float64"),
    pytest.param(with_intensity(lambda n: 2 * n**3 / (3 * n * n)), "not bytes", id="intensity-elements"),
    pytest.param(with_intensity(lambda n: 2 * n**3 / (n * n * 4)), "all three matrices", id="intensity-one-matrix"),
    pytest.param(with_intensity(lambda n: 3 * n * n * 4 / (2 * n**3)), "Upside down", id="intensity-upside-down"),
    pytest.param(with_intensity(lambda n: 64 / 6), ["n = 64", "argument n"], id="intensity-n64-constant"),
    # the verdict
    pytest.param(with_bound(lambda n, r, i: "memory"), ["expected 'compute'", "above the ridge", "for all 6 cases"],
                 id="always-memory"),
    pytest.param(with_bound(lambda n, r, i: "compute"), ["expected 'memory'", "below the ridge", "for all 6 cases"],
                 id="always-compute"),
    pytest.param(with_bound(lambda n, r, i: "memory" if i > r else "compute"), "wrong way round", id="bound-reversed"),
    pytest.param(with_bound(lambda n, r, i: "compute" if i >= 25.3 else "memory"), "memory-bound",
                 id="t4-ridge-for-every-gpu"),
    pytest.param(with_bound(lambda n, r, i: "compute" if n > r else "memory"), "compare n itself", id="n-vs-ridge"),
    pytest.param(with_bound(lambda n, r, i: "fast"), "'compute' or 'memory'", id="bound-other-word"),
    pytest.param(with_bound(lambda n, r, i: i > r), "got bool", id="bound-bool"),
    # types and shapes
    pytest.param(lambda n, p, b: (str(p * 1e3 / b), n / 6, "memory"), "text in quotes", id="ridge-string"),
    pytest.param(lambda n, p, b: (p * 1e3 / b, [n / 6], "memory"), "got list", id="intensity-list"),
    pytest.param(lambda n, p, b: (p * 1e3 / b, n / 6), "three values", id="two-values"),
    pytest.param(lambda n, p, b: "memory", "three values", id="only-the-verdict"),
    pytest.param(lambda n, p, b: (25.3125, 10.67, "memory"), "type in n = 64", id="t4-n64-constants"),
    pytest.param(lambda n, p, b: (float("nan"), n / 6, "memory"), "finite", id="nan"),
    pytest.param((25.3125, 10.67, "memory"), "function itself", id="numbers-not-function"),
]


@pytest.mark.parametrize("fn, words", Q2_WRONG)
def test_q2_wrong_answers_name_the_mistake(fn, words):
    assert_wrong(ep01.q2, (fn,), words)


def test_q2_stub_is_not_done():
    def stub(n, peak_tflops, bandwidth_gbs):
        ridge = ____
        intensity = ____
        bound = ____
        return ridge, intensity, bound

    assert outcome(ep01.q2, stub)[0] == "not-done"
    assert outcome(ep01.q2, ____)[0] == "not-done"
    result, message = outcome(ep01.q2, lambda n, p, b: (p * 1e3 / b, ____, ____))
    assert result == "not-done" and "intensity" in message
    # a function with ____ left is not done, but a wrong part is named even while later parts are blank
    result, message = outcome(ep01.q2, lambda n, p, b: (p / b, ____, ____))
    assert result == "not-done" and "still uses ____" in message and "found so far" in message


# ------------------------------------------------------------------ q3: timer
def right_timer(fn, sync):
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def naive_timer(fn, sync):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def sync_after_only(fn, sync):
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def start_before_first_sync(fn, sync):
    start = time.perf_counter()
    sync()
    fn()
    sync()
    return time.perf_counter() - start


def end_before_last_sync(fn, sync):
    sync()
    start = time.perf_counter()
    fn()
    end = time.perf_counter()
    sync()
    return end - start


def sync_not_called(fn, sync):
    sync  # noqa: B018 - the mistake: the function is named, not called
    start = time.perf_counter()
    fn()
    sync  # noqa: B018
    return time.perf_counter() - start


def cpu_clock(fn, sync):
    sync()
    start = time.process_time()
    fn()
    sync()
    return time.process_time() - start


def milliseconds(fn, sync):
    return right_timer(fn, sync) * 1e3


def nanoseconds(fn, sync):
    sync()
    start = time.perf_counter_ns()
    fn()
    sync()
    return time.perf_counter_ns() - start


def reversed_difference(fn, sync):
    return -right_timer(fn, sync)


def clock_reading(fn, sync):
    sync()
    fn()
    sync()
    return time.perf_counter() + 1e6


def twice(fn, sync):
    sync()
    start = time.perf_counter()
    fn()
    fn()
    sync()
    return time.perf_counter() - start


def constant_after_right_calls(fn, sync):
    right_timer(fn, sync)
    return 0.06


def test_q3_right_answer():
    result, message = outcome(ep01.q3, right_timer)
    assert result == "correct", message

    def with_time_time(fn, sync):
        sync()
        start = time.time()
        fn()
        sync()
        return time.time() - start

    assert outcome(ep01.q3, with_time_time)[0] == "correct"


Q3_WRONG = [
    pytest.param(naive_timer, "only QUEUES the work", id="naive"),
    pytest.param(sync_not_called, "with brackets", id="sync-without-brackets"),
    pytest.param(sync_after_only, "BEFORE", id="sync-after-only"),
    pytest.param(start_before_first_sync, "read the start time before that sync", id="start-before-sync"),
    pytest.param(end_before_last_sync, "read the clock before that sync", id="end-before-sync"),
    pytest.param(cpu_clock, "process_time", id="process-time"),
    pytest.param(milliseconds, "milliseconds", id="ms"),
    pytest.param(nanoseconds, "nanoseconds", id="ns"),
    pytest.param(reversed_difference, "negative", id="start-minus-end"),
    pytest.param(clock_reading, "clock reading", id="clock-reading"),
    pytest.param(twice, "exactly once", id="fn-twice"),
    pytest.param(lambda fn, sync: 0.06, "never called fn", id="hard-coded-0.06"),
    pytest.param(constant_after_right_calls, "typed in", id="hard-coded-after-timing"),
    pytest.param(lambda fn, sync: "0.06", "text in quotes", id="string"),
    pytest.param(lambda fn, sync: [right_timer(fn, sync)], "got list", id="list"),
    pytest.param(lambda fn, sync: True, "got bool", id="bool"),
    pytest.param(lambda fn: 0.06, "raised TypeError", id="wrong-signature"),
    pytest.param("time_once", "function itself", id="name-in-quotes"),
]


@pytest.mark.parametrize("timer, words", Q3_WRONG)
def test_q3_wrong_timers(timer, words):
    assert_wrong(ep01.q3, (timer,), words)


def test_q3_no_constant_passes():
    """The two cases' accepted windows do not overlap, so no fixed number can pass both."""
    (_, high1), (low2, _) = ep01.WORK_RANGES_S
    assert high1 + ep01.PENDING_S / 2 < 0.9 * low2


def test_q3_forgotten_return_is_not_done():
    result, message = outcome(ep01.q3, lambda fn, sync: None)
    assert result == "not-done" and "forget `return`" in message


def test_q3_stub_is_not_done():
    def stub(fn, sync):
        start = time.perf_counter()  # noqa: F841 - as in the exercise's stub
        fn()
        return ____

    assert outcome(ep01.q3, stub)[0] == "not-done"
    assert outcome(ep01.q3, ____)[0] == "not-done"


def test_q3_hint_does_not_give_the_code_away(capsys):
    ep01.q3.hint()
    hint = capsys.readouterr().out
    assert "perf_counter" not in hint and "return" not in hint


# ------------------------------------------------------------------ q4: claims
@pytest.mark.parametrize("answer", [{"c", "d", "e", "g"}, ["g", "e", "d", "c"], "cdeg", "c, d, e, g",
                                    {"C", "D", "E", "G"}, ("c", "d", "e", "g")])
def test_q4_right_answers_in_any_form(answer):
    assert outcome(ep01.q4, answer)[0] == "correct"


def test_q4_each_mistake_is_explained():
    message = assert_wrong(ep01.q4, ({"a", "c", "d", "e"},), "2 claim(s) misjudged")
    assert "a is false" in message and "latency" in message
    assert "g is true" in message and "bandwidth" in message


Q4_WRONG = [
    pytest.param({"a", "c", "d", "e", "g"}, "latency", id="gpu-lower-latency"),
    pytest.param({"b", "c", "d", "e", "g"}, "tensorflow-gpu", id="tensorflow-gpu"),
    pytest.param({"c", "d", "e", "f", "g"}, "experimental", id="sklearn-everything"),
    pytest.param({"c", "e", "g"}, "sparsity", id="missed-sparsity"),
    pytest.param({"c", "d", "g"}, "XGBoost", id="missed-xgboost"),
    pytest.param({"c", "d", "e"}, "ridge point", id="missed-bandwidth"),
    pytest.param(set("abcdefg"), "every claim", id="all-true"),
    pytest.param(set(), "empty", id="empty"),
    pytest.param({"c", "z"}, "unknown claim", id="unknown-letter"),
    pytest.param("true", "unknown claim", id="word"),
    pytest.param(42, "set of letters", id="int"),
    pytest.param(None, "set of letters", id="none"),
    pytest.param(True, "set of letters", id="bool"),
    pytest.param({"c": True, "d": True}, "set of letters", id="dict"),
    pytest.param({1, 2}, "letters (strings", id="numbers"),
]


@pytest.mark.parametrize("answer, words", Q4_WRONG)
def test_q4_wrong_answers_name_the_mistake(answer, words):
    assert_wrong(ep01.q4, (answer,), words)


def test_q4_stub_is_not_done():
    assert outcome(ep01.q4, ____)[0] == "not-done"
    assert outcome(ep01.q4, {"c", ____})[0] == "not-done"


# ------------------------------------------------------------------ all
def test_every_exercise_has_hint_and_solution(capsys):
    for q in (ep01.q1, ep01.q2, ep01.q3, ep01.q4):
        q.hint()
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint 1 (ep01.") == 4
    assert out.count("solutions/01-what-is-a-gpu.ipynb") == 4


def test_t4_numbers_match_the_episode_table():
    """The checks use the GPU figures the learner reads in the episode's table."""
    import nbformat

    from conftest import ROOT

    nb = nbformat.read(ROOT / "episodes" / "01-what-is-a-gpu.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    fp32, bandwidth = ep01.T4_FP32_FLOPS / 1e12, ep01.T4_BANDWIDTH / 1e9
    assert f'("T4", {fp32:g}, {bandwidth:g})' in text
    assert f"| 16 GB GDDR6 | {bandwidth:g} ¹ | {fp32:g} |" in text
    for gpu, peak, bw, _n in ep01.Q2_CASES:
        assert f'("{gpu}", {peak:g}, {bw:g})' in text
