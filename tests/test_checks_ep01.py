"""The checks of episode 1 accept right answers and explain wrong ones precisely."""

from __future__ import annotations

import time

import pytest

from gpucourse.checks import ep01
from gpucourse.exercises import ____


def outcome(exercise, *answers):
    return exercise.outcome(*answers)


# ------------------------------------------------------------------ q1: TFLOP/s
def right_tflops(n, seconds):
    return 2 * n**3 / seconds / 1e12


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda n, s: n**3 / s / 1e12, "2·n³"),
        (lambda n, s: 2 * n**3 / s / 1e9, "GFLOP/s"),
        (lambda n, s: 2 * n**3 / s, "FLOP/s; divide by 1e12"),
        (lambda n, s: s / (2 * n**3) * 1e12, "upside down"),
        (lambda n, s: 2 * n**2 / s / 1e12, "matrix–VECTOR"),
        (lambda n, s: 2 * n**3 / s / 1e15, "power of 1000"),
        (lambda n, s: 42.0, "FLOPs = 2·n³"),
    ],
)
def test_q1_wrong_answers_name_the_mistake(fn, words):
    result, message = outcome(ep01.q1, fn)
    assert result == "wrong"
    assert words in message
    assert "expected" in message and "TFLOP/s" in message


def test_q1_right_answer():
    assert outcome(ep01.q1, right_tflops)[0] == "correct"


def test_q1_bad_types():
    result, message = outcome(ep01.q1, 3.5)
    assert result == "wrong" and "function itself" in message
    result, message = outcome(ep01.q1, lambda n, s: "fast")
    assert result == "wrong" and "should be a number" in message
    result, message = outcome(ep01.q1, lambda n: 1.0)
    assert result == "wrong" and "raised TypeError" in message


def test_q1_stub_is_not_done():
    assert outcome(ep01.q1, ____)[0] == "not-done"
    assert outcome(ep01.q1, lambda n, s: ____)[0] == "not-done"


# ------------------------------------------------------------------ q2: roofline
RIDGE = 8.1e12 / 320e9
N = ep01.Q2_N
INTENSITY = 2 * N**3 / (3 * N * N * 4)


def test_q2_right_answer():
    result, message = outcome(ep01.q2, RIDGE, INTENSITY, "memory")
    assert result == "correct", message
    assert outcome(ep01.q2, RIDGE, INTENSITY, " Memory ")[0] == "correct"


@pytest.mark.parametrize(
    "ridge, intensity, bound, words",
    [
        (1 / RIDGE, INTENSITY, "memory", "Upside down"),
        (8.1 / 320, INTENSITY, "memory", "Mind the units"),
        (RIDGE * 1e3, INTENSITY, "memory", "Mind the units"),
        (10.0, INTENSITY, "memory", "T4 row"),
        (RIDGE, INTENSITY / 2, "memory", "2·n³"),
        (RIDGE, INTENSITY * 4, "memory", "4 bytes"),
        (RIDGE, 2 * N**3 / (N * N * 4), "memory", "all three matrices"),
        (RIDGE, 1 / INTENSITY, "memory", "Upside down"),
        (RIDGE, INTENSITY, "compute", "memory-bound"),
        (RIDGE, INTENSITY, "fast", "'compute' or 'memory'"),
        (RIDGE, INTENSITY, 1, "'compute' or 'memory'"),
        ([1, 2], INTENSITY, "memory", "should be a number"),
        (float("nan"), INTENSITY, "memory", "finite"),
        (True, INTENSITY, "memory", "bool"),
    ],
)
def test_q2_messages(ridge, intensity, bound, words):
    result, message = outcome(ep01.q2, ridge, intensity, bound)
    assert result == "wrong"
    assert words in message, message


def test_q2_accepts_numeric_strings_and_numpy_scalars():
    import numpy as np

    assert outcome(ep01.q2, str(RIDGE), np.float32(INTENSITY), "memory")[0] == "correct"


def test_q2_stub_is_not_done():
    assert outcome(ep01.q2, ____, ____, ____)[0] == "not-done"
    assert outcome(ep01.q2, RIDGE, ____, ____)[0] == "not-done"


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


def twice(fn, sync):
    sync()
    start = time.perf_counter()
    fn()
    fn()
    sync()
    return time.perf_counter() - start


def test_q3_right_answer():
    result, message = outcome(ep01.q3, right_timer)
    assert result == "correct", message


@pytest.mark.parametrize(
    "timer, words",
    [
        (naive_timer, "only QUEUES the work"),
        (sync_after_only, "BEFORE"),
        (twice, "exactly once"),
        (lambda fn, sync: "0.06", None),
        (lambda fn: 0.06, "raised TypeError"),
        ("time_once", "function itself"),
    ],
)
def test_q3_wrong_timers(timer, words):
    result, message = outcome(ep01.q3, timer)
    if words is None:  # a string that happens to parse: then the calls are counted
        assert result == "wrong" and "0 times" in message
    else:
        assert result == "wrong"
        assert words in message, message


def test_q3_forgotten_return_is_not_done():
    result, message = outcome(ep01.q3, lambda fn, sync: None)
    assert result == "not-done" and "forget `return`" in message


def test_q3_stub_is_not_done():
    def stub(fn, sync):
        start = time.perf_counter()
        fn()
        return ____

    assert outcome(ep01.q3, stub)[0] == "not-done"
    assert outcome(ep01.q3, ____)[0] == "not-done"


# ------------------------------------------------------------------ q4: claims
@pytest.mark.parametrize("answer", [{"c", "d", "e", "g"}, ["g", "e", "d", "c"], "cdeg", "c, d, e, g", {"C", "D", "E", "G"}])
def test_q4_right_answers_in_any_form(answer):
    assert outcome(ep01.q4, answer)[0] == "correct"


def test_q4_each_mistake_is_explained():
    result, message = outcome(ep01.q4, {"a", "c", "d", "e"})
    assert result == "wrong"
    assert "2 claim(s) misjudged" in message
    assert "a is false" in message and "latency" in message
    assert "g is true" in message and "bandwidth" in message


@pytest.mark.parametrize(
    "answer, words",
    [
        (set(), "empty"),
        ({"c", "z"}, "unknown claim"),
        (42, "set of letters"),
        ({1, 2}, "letters (strings)"),
        ({"b", "c", "d", "e", "g"}, "tensorflow-gpu"),
        ({"c", "d", "e", "f", "g"}, "experimental"),
    ],
)
def test_q4_messages(answer, words):
    result, message = outcome(ep01.q4, answer)
    assert result == "wrong"
    assert words in message, message


def test_q4_stub_is_not_done():
    assert outcome(ep01.q4, ____)[0] == "not-done"


def test_every_exercise_has_hint_and_solution(capsys):
    for q in (ep01.q1, ep01.q2, ep01.q3, ep01.q4):
        q.hint()
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint (ep01.") == 4
    assert out.count("solutions/01-what-is-a-gpu.ipynb") == 4


def test_t4_numbers_match_the_episode_table():
    """The checks use the T4 figures the learner reads in the episode's table."""
    import nbformat

    from conftest import ROOT

    nb = nbformat.read(ROOT / "episodes" / "01-what-is-a-gpu.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    fp32, bandwidth = ep01.T4_FP32_FLOPS / 1e12, ep01.T4_BANDWIDTH / 1e9
    assert f'("T4", {fp32:g}, {bandwidth:g})' in text
    assert f"| 16 GB GDDR6 | {bandwidth:g} ¹ | {fp32:g} |" in text
