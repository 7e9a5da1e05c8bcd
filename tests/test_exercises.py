"""The exercise framework itself: outcomes, messages, logging."""
import json

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
