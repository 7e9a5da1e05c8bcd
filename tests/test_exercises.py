"""The exercise framework itself: outcomes, messages, logging."""
import json
import signal
import sys
import threading
import time

import pytest

from gpucourse.exercises import Exercise, NotDone, Wrong, ____, expect_close, require_answer


def _checker(x):
    if x != 42:
        raise Wrong(f"got {x}, expected 42")
    return "well done"


EX = Exercise("demo.q1", _checker, hint="think of 6×7", solution="see solutions/demo")


def test_outcomes():
    assert EX.outcome(42) == ("correct", "well done")
    assert EX.outcome(41) == ("wrong", "got 41, expected 42")
    assert EX.outcome(____)[0] == "not-done"
    assert EX.outcome([1, ____])[0] == "not-done"
    assert EX.outcome()[0] == "not-done"


def test_answer_that_breaks_checker_is_wrong_not_traceback():
    ex = Exercise("demo.q2", lambda x: x.shape, hint="", solution="")
    outcome, message = ex.outcome(3)
    assert outcome == "wrong" and "AttributeError" in message


def test_check_prints_and_logs(tmp_path, monkeypatch, capsys):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("GPUCOURSE_CHECK_LOG", str(log))
    EX.check(42)
    EX.check(____)
    out = capsys.readouterr().out
    assert "✓ Correct (demo.q1)" in out and "○ Not done (demo.q1)" in out
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["correct", "not-done"]


def test_hint_and_solution(capsys):
    EX.hint()
    EX.solution()
    out = capsys.readouterr().out
    assert "6×7" in out and "solutions/demo" in out


def test_hints_come_in_steps(capsys):
    ex = Exercise("demo.q3", lambda x: None, hint=("What is asked?", "Work it out in two lines."), solution="")
    ex.hint()
    first = capsys.readouterr().out
    assert "What is asked?" in first and "Work it out" not in first and "q3.hint(2)" in first
    ex.hint(2)
    second = capsys.readouterr().out
    assert "Work it out in two lines." in second and "What is asked?" not in second and "more:" not in second
    ex.hint(3)
    assert "2 hint step(s): hint(1) or hint(2)" in capsys.readouterr().out


def test_a_formatted_blank_prints_as_a_blank():
    assert f"{____:.2f} TFLOP/s" == "____ TFLOP/s" and f"{____}" == "____"


def test_blank_placeholder_misuse_is_not_done():
    for misuse in (lambda: ____(), lambda: ____.shape):
        try:
            misuse()
        except NotDone:
            pass
        else:
            raise AssertionError("using ____ must raise NotDone")


def test_require_answer():
    assert require_answer(3, "f()") == 3
    for value in (None, ____):
        try:
            require_answer(value, "f()")
        except NotDone as exc:
            assert "f()" in str(exc)
        else:
            raise AssertionError


def test_expect_close():
    expect_close("x", 1.02, 1.0, rel=0.05)
    for bad in (2.0, "abc"):
        try:
            expect_close("x", bad, 1.0)
        except Wrong as exc:
            assert "x" in str(exc)
        else:
            raise AssertionError


def test_call_answer_turns_errors_into_feedback():
    from gpucourse.exercises import call_answer

    assert call_answer(lambda x: x + 1, 1, what="f(1)") == 2
    for fn, kind in ((lambda x: 1 / 0, Wrong), (lambda x: None, NotDone), (lambda x: ____, NotDone)):
        try:
            call_answer(fn, 1, what="f(1)")
        except kind as exc:
            assert "f(1)" in str(exc)
        else:
            raise AssertionError(f"expected {kind.__name__}")


def test_call_answer_options():
    from gpucourse.exercises import call_answer

    assert call_answer(lambda: None, what="f()", none_ok=True) is None
    with pytest.raises(NotDone):
        call_answer(lambda: None, what="f()")
    # parts: a tuple is handed back with its blank items, for the check to judge item by item
    got = call_answer(lambda: (1.0, ____), what="f()", parts=("a", "b"))
    assert got[0] == 1.0 and got[1] is ____
    with pytest.raises(NotDone):
        call_answer(lambda: ____, what="f()", parts=("a", "b"))
    with pytest.raises(NotDone):
        call_answer(lambda: (1.0, ____, 2.0), what="f()", parts=("a", "b"))   # not the promised shape


def test_require_function_and_describe():
    import numpy as np

    from gpucourse.exercises import describe, require_function

    require_function(len, "f")
    with pytest.raises(NotDone):
        require_function(____, "f")
    with pytest.raises(Wrong, match="pass the function itself, f.*got int 3"):
        require_function(3, "f")
    assert describe(np.zeros((2, 3))).endswith("ndarray of shape (2, 3)")
    assert describe(list(range(100))) == "a list of 100 items"
    assert describe("cuda") == "str 'cuda'"


def test_an_unwritable_check_log_never_hides_feedback(monkeypatch, tmp_path, capsys):
    from gpucourse.exercises import Exercise

    exercise = Exercise("demo.q1", lambda x: "fine.", hint="", solution="")
    monkeypatch.setenv("GPUCOURSE_CHECK_LOG", str(tmp_path))  # a directory, not a file
    exercise.check(1)
    exercise.check(2)
    out = capsys.readouterr().out
    assert out.count("✓ Correct (demo.q1): fine.") == 2
    assert out.count("cannot be written") == 1, "the log problem should be reported once, not per check"


def test_as_number_refuses_text_and_booleans():
    import numpy as np

    from gpucourse.exercises import Wrong, as_number

    assert as_number("t", np.float32(0.5)) == 0.5
    for bad in ("0.06", True, [1.0], float("inf"), None):
        with pytest.raises(Wrong, match="t "):
            as_number("t", bad)


# --- deadlines: an answer that never returns is stopped and reported, never a hung kernel --------

def _deadline_exercise():
    from gpucourse.exercises import call_answer

    return Exercise("demo.loop", lambda fn: call_answer(fn, 3, what="f(3)") and "fine", hint="", solution="")


def _spins(x):
    while True:
        pass


def _swallows_everything(x):            # a bare except inside the loop catches the deadline too
    while True:
        try:
            time.sleep(0.01)
        except:                         # noqa: E722
            pass


def _sleeps(x):
    time.sleep(1000)


@pytest.mark.parametrize("answer", [_spins, _swallows_everything, _sleeps])
def test_an_endless_answer_is_stopped_at_the_deadline(monkeypatch, answer):
    from gpucourse import exercises

    monkeypatch.setattr(exercises, "DEADLINE_S", 0.5)
    trace_before, start = sys.gettrace(), time.monotonic()
    result, message = _deadline_exercise().outcome(answer)
    assert result == "wrong" and "did not return within 0.5 s" in message and "loop that never ends" in message
    assert time.monotonic() - start < 5
    assert exercises._active == [] and signal.getitimer(signal.ITIMER_REAL)[0] == 0, "a timer was left running"
    assert sys.gettrace() is trace_before, "a trace function was left behind"
    time.sleep(0.6)                      # nothing fires later in the caller's code


def test_the_deadline_also_stops_an_answer_run_from_another_thread(monkeypatch):
    from gpucourse import exercises

    monkeypatch.setattr(exercises, "DEADLINE_S", 0.5)
    results = []
    worker = threading.Thread(target=lambda: results.append(_deadline_exercise().outcome(_spins)))
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and results[0][0] == "wrong" and "did not return" in results[0][1]


def test_a_right_answer_is_not_slowed_or_stopped_by_the_deadline():
    from gpucourse import exercises

    assert exercises.DEADLINE_S >= 30, "generous: never stop a right answer on a busy 2-core machine"
    assert _deadline_exercise().outcome(lambda x: x + 1) == ("correct", "fine")
    assert exercises._active == [] and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_nested_deadlines_report_the_one_that_ran_out(monkeypatch):
    from gpucourse.exercises import answer_deadline

    # the other deadline is 60 s: it never runs out, so no delay of a busy machine can let it fire first
    with pytest.raises(Wrong, match="inner: your function did not return within 0.3 s"):
        with answer_deadline("outer", 60):
            with answer_deadline("inner", 0.3):
                _spins(0)
    with pytest.raises(Wrong, match="outer: your function did not return within 0.3 s"):
        with answer_deadline("outer", 0.3):
            with answer_deadline("inner", 60):
                _spins(0)


# --- half-done answers: ____ anywhere in a function means not done -------------------------------

def _helper_left_blank():
    return ____


def test_a_function_that_still_names_the_placeholder_is_not_done():
    from gpucourse.exercises import uses_blank

    def nested(x):
        def inner():
            return ____
        return 42

    def calls_helper(x):
        return _helper_left_blank() or 42

    def branch(x):
        if x > 1000:
            return ____
        return 42

    for half_done in (nested, calls_helper, branch, lambda x: 42 if x else ____):
        assert uses_blank(half_done)
        result, message = Exercise("demo.fn", lambda f: _checker(f(1)), hint="", solution="").outcome(half_done)
        assert result == "not-done" and "still uses ____" in message, (half_done, message)
    assert not uses_blank(lambda x: 42) and not uses_blank(len)


def test_a_half_done_answer_that_is_wrong_so_far_is_not_done_and_says_what_was_found():
    def wrong_so_far(x):
        if x < 0:
            return ____
        return 41
    result, message = Exercise("demo.fn", lambda f: _checker(f(1)), hint="", solution="").outcome(wrong_so_far)
    assert result == "not-done" and "still uses ____" in message and "got 41, expected 42" in message


# --- comparisons and snapshots ------------------------------------------------------------------

def test_tensors_close_never_raises_on_dtype_device_or_shape():
    import torch

    from gpucourse.exercises import tensors_close

    assert tensors_close(torch.ones(3, dtype=torch.float64), torch.ones(3))
    assert tensors_close(torch.ones(3, dtype=torch.bfloat16), [1.0, 1.0, 1.0])
    assert not tensors_close(torch.ones(3), torch.ones(4))
    assert not tensors_close(torch.ones(3), "text")


def test_snapshot_names_what_an_answer_changed():
    import numpy as np
    import torch
    from torch import nn

    from gpucourse.exercises import changes, snapshot

    loss = nn.BCEWithLogitsLoss()
    before = snapshot(loss)
    assert changes(before, loss) is None
    loss.reduction = "sum"
    assert "reduction" in changes(before, loss) and "'sum'" in changes(before, loss)
    model = nn.Linear(3, 2)
    before = snapshot(model)
    model.half()
    assert "dtype" in changes(before, model)
    times = [3.0, 1.0, 2.0]
    before = snapshot(times)
    times.sort()
    assert changes(before, times)
    array = np.arange(4.0)
    before = snapshot(array)
    array /= 2
    assert "in place" in changes(before, array)
    options = {"a": (1, 2.0, 3)}
    before = snapshot(options)
    options.pop("a")
    assert "removed" in changes(before, options)
    tensor = torch.randn(3)
    before = snapshot(tensor)
    assert changes(before, tensor) is None


# --- errors explained in the learner's words ----------------------------------------------------

def _raises(error):
    def answer(*args):
        raise error
    return answer


def _none_helper():
    pass


def _real_errors():
    """(answer, words): answers that fail the way learners' answers do, with the error Python or
    PyTorch really raises, and the words the message must use to explain it."""
    import numpy as np
    import torch

    def undefined_name(x):
        return x * batch_size        # noqa: F821 - the name is what the test is about

    def unbound(x):
        if x > 100:
            total = x
        return total                 # noqa: F821

    return [
        pytest.param(lambda x: _none_helper() * x, ["raised TypeError", "None", "missing `return`"],
                     id="none-from-helper"),
        pytest.param(lambda x: _none_helper().shape, ["raised AttributeError", "None"], id="none-attribute"),
        pytest.param(lambda x, y: x, ["raised TypeError", "parameters do not match"], id="signature"),
        pytest.param(lambda x: torch.ones(2, 3) @ torch.ones(4, 5), ["shapes do not fit", ".shape"],
                     id="matmul-shapes"),
        pytest.param(lambda x: torch.ones(3) + torch.ones(4), ["shapes do not fit"], id="elementwise-shapes"),
        pytest.param(lambda x: np.ones(3) + np.ones(4), ["shapes do not fit"], id="numpy-broadcast"),
        pytest.param(_raises(RuntimeError("Expected all tensors to be on the same device, but found at "
                                          "least two devices, cuda:0 and cpu!")),
                     ["different devices", ".to(device)"], id="device-mismatch"),
        pytest.param(lambda x: torch.nn.Linear(3, 2)(torch.ones(2, 3, dtype=torch.float64)),
                     ["number formats", ".float()"], id="dtype-mismatch"),
        pytest.param(lambda x: x / 0, ["raised ZeroDivisionError", "divides by zero"], id="zero-division"),
        pytest.param(undefined_name, ["raised NameError", "batch_size", "not defined", "spelling"],
                     id="undefined-name"),
        pytest.param(unbound, ["raised UnboundLocalError", "before giving it a value"], id="unbound-local"),
        pytest.param(lambda x: [1, 2][x], ["raised IndexError", "past the end"], id="index"),
        pytest.param(lambda x: {"a": 1}["b"], ["raised KeyError", "d.keys()"], id="key"),
        pytest.param(lambda x: x.shape, ["raised AttributeError", ".shape on a int"], id="attribute"),
        pytest.param(lambda x: float(torch.ones(3)), ["several numbers into one"], id="tensor-to-float"),
        pytest.param(lambda x: list(range(x / 2)), ["whole number", "int()"], id="float-range"),
        pytest.param(lambda x: "batch " + x, ["types that do not go together"], id="str-plus-int"),
        pytest.param(lambda x: x(3), ["not a function", "`*` for a product"], id="call-a-number"),
    ]


@pytest.mark.parametrize("answer, words", _real_errors())
def test_a_common_error_is_explained_in_the_learners_words(answer, words):
    from checking import assert_wrong
    from gpucourse.exercises import call_answer

    exercise = Exercise("demo.err", lambda fn: call_answer(fn, 3, what="f(3)") and "fine", hint="",
                        solution="")
    message = assert_wrong(exercise, (answer,), ["f(3)"] + words)
    assert "That means" in message, message


def test_an_error_breaking_the_checker_is_explained_too():
    from checking import assert_wrong

    exercise = Exercise("demo.err", lambda value: value * 2 + 1, hint="", solution="")
    assert_wrong(exercise, (None,), ["checking your answer raised TypeError", "None", "what you passed"])
    assert_wrong(exercise, ([1.0],), ["checking your answer raised TypeError", "types that do not go"])


def test_an_unknown_error_keeps_its_own_text_and_a_long_one_is_cut():
    from gpucourse.exercises import Wrong, call_answer, explain_error

    class Odd(Exception):
        pass

    assert explain_error(Odd("strange")) is None
    with pytest.raises(Wrong) as raised:
        call_answer(_raises(Odd("strange")), what="f()")
    assert str(raised.value) == "f() raised Odd: strange."
    with pytest.raises(Wrong) as raised:
        call_answer(_raises(NotImplementedError("x" * 5000)), what="f()")
    assert len(str(raised.value)) < 400
    # a check's own explanation still wins over the general one
    with pytest.raises(Wrong, match="^the check's own words$"):
        call_answer(lambda: 1 / 0, what="f()", explain=lambda exc: "the check's own words")


@pytest.mark.parametrize("text", [
    "Torch not compiled with CUDA enabled",                                   # the CPU build
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU",  # CUDA build
    "CUDA error: CUDA driver version is insufficient for CUDA runtime version",
])
def test_asking_for_cuda_without_a_gpu_is_explained_on_every_build(text):
    from gpucourse.exercises import explain_error

    meaning = explain_error(RuntimeError(text))
    assert meaning and "there is none here" in meaning and "hard-coded" in meaning
