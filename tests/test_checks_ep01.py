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




# ------------------------------------------------------------------ q1: a Linear layer's training step
def right_step(batch, d_in, d_out, seconds):
    flops = 2 * batch * d_in * d_out * 3          # forward, and backward's two products
    return flops, flops / seconds / 1e12


def step_with(flops_fn, rate_fn=None):
    """A linear_step whose FLOPs follow ``flops_fn`` and whose rate follows ``rate_fn`` (default: right)."""
    def linear_step(b, i, o, s):
        flops = flops_fn(b, i, o)
        return flops, (rate_fn or (lambda f, s: f / s / 1e12))(flops, s)
    return linear_step


def test_q1_right_answer():
    result, message = outcome(ep01.q1, right_step)
    assert result == "correct", message
    with_bias = step_with(lambda b, i, o: 6 * b * i * o + 2 * b * o)     # bias forward and its gradient
    assert outcome(ep01.q1, with_bias)[0] == "correct"
    numpy_scalars = lambda b, i, o, s: (np.int64(6 * b * i * o), np.float32(6 * b * i * o / s / 1e12))  # noqa: E731
    assert outcome(ep01.q1, numpy_scalars)[0] == "correct"


Q1_WRONG = [
    # the FLOPs
    pytest.param(step_with(lambda b, i, o: 2 * b * i * o), ["forward pass alone", "backward"], id="forgot-backward"),
    pytest.param(step_with(lambda b, i, o: 4 * b * i * o), ["Backward counted as ONE product", "weights"],
                 id="backward-one-product"),
    pytest.param(step_with(lambda b, i, o: 3 * b * i * o), ["multiply-adds", "2 FLOPs"], id="multiply-add-one-flop"),
    pytest.param(step_with(lambda b, i, o: b * i * o), ["multiply-adds of the forward pass alone"],
                 id="forward-multiply-adds"),
    pytest.param(step_with(lambda b, i, o: 12 * b * i * o), "Twice too many", id="double-counted"),
    pytest.param(step_with(lambda b, i, o: 6 * i * o), "grow with the batch", id="no-batch"),
    pytest.param(step_with(lambda b, i, o: 6 * b * (i + o)), "multiply the three sizes", id="sizes-added"),
    pytest.param(step_with(lambda b, i, o: 6 * 64 * 1024 * 1024), ["type in numbers", "Use the arguments"],
                 id="hard-coded-first-case"),
    # the rate
    pytest.param(step_with(lambda b, i, o: 6 * b * i * o, lambda f, s: f / s / 2**40), ["10¹², not 2⁴⁰"],
                 id="tera-as-2-to-40"),
    pytest.param(step_with(lambda b, i, o: 6 * b * i * o, lambda f, s: f / s / 1e9), "GFLOP/s", id="gflops"),
    pytest.param(step_with(lambda b, i, o: 6 * b * i * o, lambda f, s: f / s), "That is FLOP/s", id="flops-per-s"),
    pytest.param(step_with(lambda b, i, o: 6 * b * i * o, lambda f, s: f / (s * 1e3) / 1e12), "milliseconds",
                 id="seconds-as-ms"),
    pytest.param(step_with(lambda b, i, o: 6 * b * i * o, lambda f, s: f / 1e12), "divide by seconds",
                 id="no-seconds"),
    pytest.param(step_with(lambda b, i, o: 6 * b * i * o, lambda f, s: s / f * 1e12), "upside down",
                 id="rate-upside-down"),
    pytest.param(step_with(lambda b, i, o: 6 * b * i * o, lambda f, s: f // s // 10**12), "integer division",
                 id="floor-division"),
    # types and shapes
    pytest.param(lambda b, i, o, s: 6 * b * i * o / s / 1e12, "return two values", id="only-the-rate"),
    pytest.param(lambda b, i, o, s: (6 * b * i * o, 1.0, 2.0), "return two values", id="three-values"),
    pytest.param(lambda b, i, o, s: (str(6 * b * i * o), 1.0), "text in quotes", id="flops-string"),
    pytest.param(lambda b, i, o, s: (6 * b * i * o, [1.0]), "got list", id="rate-list"),
    pytest.param(lambda b, i, o, s: (float("nan"), 1.0), "finite", id="nan"),
    pytest.param(lambda n, s: (2 * n**3, 1.0), "raised TypeError", id="old-signature"),
    pytest.param(3.5, "function itself", id="number-not-function"),
    pytest.param("linear_step", "function itself", id="name-in-quotes"),
]


@pytest.mark.parametrize("fn, words", Q1_WRONG)
def test_q1_wrong_answers_name_the_mistake(fn, words):
    assert_wrong(ep01.q1, (fn,), words)


def test_q1_wrong_messages_give_expected_and_got():
    message = assert_wrong(ep01.q1, (step_with(lambda b, i, o: 2 * b * i * o),), "backward")
    assert "flops is" in message and "expected" in message


def test_q1_stub_is_not_done():
    def stub(batch, d_in, d_out, seconds):
        flops = ____
        tflops = ____
        return flops, tflops

    assert outcome(ep01.q1, stub)[0] == "not-done"
    assert outcome(ep01.q1, ____)[0] == "not-done"
    result, message = outcome(ep01.q1, lambda b, i, o, s: None)
    assert result == "not-done" and "forget `return`" in message
    # a wrong first part is named even while the second is still blank
    result, message = outcome(ep01.q1, lambda b, i, o, s: (2 * b * i * o, ____))
    assert result == "not-done" and "backward" in message


# ------------------------------------------------------------------ q2: roofline of a Linear layer
def right_roofline(batch, d_in, d_out, dtype_bytes, peak_tflops, bandwidth_gbs):
    flops = 2 * batch * d_in * d_out
    nbytes = dtype_bytes * (batch * d_in + d_in * d_out + batch * d_out)
    peak, bandwidth = peak_tflops * 1e12, bandwidth_gbs * 1e9
    intensity = flops / nbytes
    return intensity, "compute" if intensity > peak / bandwidth else "memory", max(flops / peak, nbytes / bandwidth)


def roofline_with(intensity=None, bound=None, floor=None):
    """A linear_roofline that is right except for the parts given, each a function of the arguments
    and of the right (intensity, bound, floor, flops, bytes, compute_s, memory_s)."""
    def linear_roofline(b, i, o, d, p, bw):
        right = right_roofline(b, i, o, d, p, bw)
        flops, nbytes = 2 * b * i * o, d * (b * i + i * o + b * o)
        facts = dict(args=(b, i, o, d, p, bw), intensity=right[0], bound=right[1], floor=right[2], flops=flops,
                     nbytes=nbytes, compute_s=flops / (p * 1e12), memory_s=nbytes / (bw * 1e9))
        return tuple(part(facts) if part else value for part, value in zip((intensity, bound, floor), right))
    return linear_roofline


def test_q2_right_answer():
    result, message = outcome(ep01.q2, right_roofline)
    assert result == "correct", message
    assert "memory-bound on every GPU" in message


@pytest.mark.parametrize("word", ["Memory", " memory ", "memory-bound", "Memory bound"])
def test_q2_bound_spelling_is_forgiven(word):
    assert outcome(ep01.q2, roofline_with(bound=lambda f: word if f["bound"] == "memory" else "compute"))[0] \
        == "correct"


def test_q2_cases_are_on_both_sides_and_far_from_the_ridge():
    """No constant verdict passes, and no case is close enough to its ridge for rounding to decide it."""
    sides = set()
    for gpu, peak, bw, b, i, o, d in ep01.Q2_CASES:
        intensity, bound, _ = right_roofline(b, i, o, d, peak, bw)
        ridge = peak * 1e3 / bw
        assert max(intensity, ridge) / min(intensity, ridge) > 1.5, gpu
        sides.add(bound)
    assert sides == {"compute", "memory"}


def _float16_as_4_bytes(f):
    b, i, o, d, p, bw = f["args"]
    return 2 * b * i * o / (4 * (b * i + i * o + b * o))


Q2_WRONG = [
    # the intensity
    pytest.param(roofline_with(intensity=lambda f: f["intensity"] / 2), "multiply-adds", id="intensity-no-factor-2"),
    pytest.param(roofline_with(intensity=lambda f: f["intensity"] * f["args"][3]), "numbers, not bytes",
                 id="intensity-elements"),
    pytest.param(roofline_with(intensity=_float16_as_4_bytes), ["4 bytes per number", "dtype_bytes"],
                 id="intensity-always-float32"),
    pytest.param(roofline_with(intensity=lambda f: f["flops"] / (f["args"][3] * f["args"][1] * f["args"][2])),
                 "only the weights", id="intensity-weights-only"),
    # X, W and Y: a square layer has X and Y of one size, the V100 case (1024 -> 4096) tells them apart
    pytest.param(roofline_with(intensity=lambda f: f["flops"] / (f["args"][3] * f["args"][1] * (f["args"][0]
                                                                                            + f["args"][2]))),
                 ["not the output Y"], id="intensity-without-output"),
    pytest.param(roofline_with(intensity=lambda f: f["flops"] / (f["args"][3] * f["args"][2] * (f["args"][0]
                                                                                            + f["args"][1]))),
                 ["not the input X"], id="intensity-without-input"),
    pytest.param(roofline_with(intensity=lambda f: 1 / f["intensity"]), "Upside down", id="intensity-upside-down"),
    pytest.param(roofline_with(intensity=lambda f: f["args"][1] / 6), ["SQUARE", "n/6"], id="square-matmul-formula"),
    pytest.param(roofline_with(intensity=lambda f: 0.4997559785261103), ["type in numbers"],
                 id="intensity-first-case-constant"),
    # the verdict
    pytest.param(roofline_with(bound=lambda f: "memory"), ["expected 'compute'", "above the ridge", "for all 7 cases"],
                 id="always-memory"),
    pytest.param(roofline_with(bound=lambda f: "compute"), ["expected 'memory'", "below the ridge", "for all 7 cases"],
                 id="always-compute"),
    pytest.param(roofline_with(bound=lambda f: "memory" if f["bound"] == "compute" else "compute"),
                 "wrong way round", id="bound-reversed"),
    pytest.param(roofline_with(bound=lambda f: "compute" if f["intensity"] > f["args"][4] / f["args"][5] else "memory"),
                 ["expected 'memory'", "ridge point"], id="ridge-without-units"),
    pytest.param(roofline_with(bound=lambda f: "fast"), "'compute' or 'memory'", id="bound-other-word"),
    pytest.param(roofline_with(bound=lambda f: f["bound"] == "compute"), "got bool", id="bound-bool"),
    # the floor
    pytest.param(roofline_with(floor=lambda f: f["compute_s"] + f["memory_s"]), ["added the two times", "LONGER"],
                 id="floor-sum"),
    pytest.param(roofline_with(floor=lambda f: min(f["compute_s"], f["memory_s"])), ["the shorter of the two", "LONGER"],
                 id="floor-min"),
    pytest.param(roofline_with(floor=lambda f: f["memory_s"]), ["compute-bound", "the compute time"],
                 id="floor-always-memory-time"),
    pytest.param(roofline_with(floor=lambda f: f["compute_s"]), ["memory-bound", "the memory time"],
                 id="floor-always-compute-time"),
    pytest.param(roofline_with(floor=lambda f: f["floor"] * 1e3), "milliseconds", id="floor-ms"),
    pytest.param(roofline_with(floor=lambda f: max(f["compute_s"], f["nbytes"] / (f["args"][5] * 2**30))),
                 "not 2³⁰", id="floor-gib"),
    # types and shapes
    pytest.param(lambda b, i, o, d, p, bw: right_roofline(b, i, o, d, p, bw)[:2], "three values", id="two-values"),
    pytest.param(lambda b, i, o, d, p, bw: "memory", "three values", id="only-the-verdict"),
    pytest.param(lambda b, i, o, d, p, bw: (str(0.5), "memory", 1.0), "text in quotes", id="intensity-string"),
    pytest.param(lambda b, i, o, d, p, bw: (float("nan"), "memory", 1.0), "finite", id="nan"),
    pytest.param(lambda n, p, bw: (1.0, "memory", 1.0), "raised TypeError", id="old-signature"),
    pytest.param((0.5, "memory", 2e-4), "function itself", id="numbers-not-function"),
]


@pytest.mark.parametrize("fn, words", Q2_WRONG)
def test_q2_wrong_answers_name_the_mistake(fn, words):
    assert_wrong(ep01.q2, (fn,), words)


def test_q2_stub_is_not_done():
    def stub(batch, d_in, d_out, dtype_bytes, peak_tflops, bandwidth_gbs):
        intensity = ____
        bound = ____
        floor_s = ____
        return intensity, bound, floor_s

    assert outcome(ep01.q2, stub)[0] == "not-done"
    assert outcome(ep01.q2, ____)[0] == "not-done"
    result, message = outcome(ep01.q2, lambda b, i, o, d, p, bw: (right_roofline(b, i, o, d, p, bw)[0], ____, ____))
    assert result == "not-done" and "bound" in message
    # a wrong first part is named even while later parts are blank
    result, message = outcome(ep01.q2, lambda b, i, o, d, p, bw: (b * i * o, ____, ____))
    assert result == "not-done" and "found so far" in message


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


def _paused_on_call(timer, number, pause):
    """``timer``, with this process paused for ``pause`` s after fn() in its ``number``-th call."""
    calls = []

    def paused(fn, sync):
        calls.append(1)

        def fn_then_pause(*args, **kwargs):
            fn(*args, **kwargs)
            if len(calls) == number:
                time.sleep(pause)     # a busy machine running something else
        return timer(fn_then_pause, sync)

    return paused


def test_q3_a_pause_of_the_machine_does_not_fail_a_right_timer():
    result, message = outcome(ep01.q3, _paused_on_call(right_timer, 1, 0.5))
    assert result == "correct", message


def test_q3_a_pause_does_not_change_what_a_naive_timer_is_told():
    # 22 ms in the short case (30-50 ms of work): more than nothing, less than the work, so it
    # would be taken for a typed-in number; the retry sees the naive timer's own reading
    assert_wrong(ep01.q3, (_paused_on_call(naive_timer, 1, 0.022),), "only QUEUES the work")


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
    pytest.param(set("abcdefgh"), "every claim", id="all-true"),
    pytest.param({"c", "d", "e", "g", "h"}, ["h is false", "DDP", "tf.distribute"], id="several-gpus-by-themselves"),
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
QUESTIONS = (ep01.q1, ep01.q2, ep01.q3, ep01.q4)


def test_every_exercise_has_hint_and_solution(capsys):
    for q in QUESTIONS:
        q.hint()
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint 1 (ep01.") == 4
    assert out.count("solutions/01-what-is-a-gpu.ipynb") == 4


def test_every_hint_has_two_steps_question_first(capsys):
    for q in QUESTIONS:
        assert len(q.hints) == 2, q.name
        assert "?" in q.hints[0], f"{q.name}: the first step should ask the guiding question"
        q.hint(2)
    out = capsys.readouterr().out
    assert out.count("Hint 2 (ep01.") == 4


@pytest.mark.parametrize("q, code", [
    (ep01.q1, ["6 *", "6·", "* 3", "/ 1e12", "1e12", "return"]),
    (ep01.q2, ["max(", "/ (", "1e12", "1e9", "return", "2 *"]),
    (ep01.q3, ["perf_counter", "return", "start =", "sync();"]),
    (ep01.q4, ['"c"', "{"]),
])
def test_hints_do_not_give_the_code(q, code):
    text = " ".join(q.hints)
    assert not [c for c in code if c in text], (q.name, [c for c in code if c in text])


def test_gpu_figures_match_the_episode_table():
    """The checks use the GPU figures the learner reads in the episode's table: FP32 peaks from the
    table the episode computes with, float16 peaks from the dense tensor-core column."""
    import nbformat

    from conftest import ROOT

    nb = nbformat.read(ROOT / "episodes" / "01-what-is-a-gpu.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    for gpu, peak, bw, _b, _i, _o, size in ep01.Q2_CASES:
        if size == 4:
            assert f'("{gpu}", {peak:g}, {bw:g})' in text, gpu
        else:
            row = next(line for line in text.splitlines() if line.startswith(f"| {gpu.split()[0]} "))
            assert f"| {peak:g} " in row and f"{bw:,}" in row, (gpu, row)


@pytest.mark.parametrize("q, args", [(ep01.q1, 4), (ep01.q2, 6)], ids=["q1", "q2"])
def test_an_answer_that_never_returns_is_stopped(monkeypatch, q, args):
    from gpucourse import exercises

    monkeypatch.setattr(exercises, "DEADLINE_S", 0.5)

    def spins(*given):
        assert len(given) == args
        while True:
            time.sleep(0.01)

    start = time.perf_counter()
    assert_wrong(q, (spins,), ["did not return", "loop that never ends"])
    assert time.perf_counter() - start < 10      # stopped at the deadline, not left running
