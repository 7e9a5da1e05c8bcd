"""Checked exercises with feedback that teaches.

An exercise notebook fills in a stub such as ``device = ____`` and calls
``q1.check(device)``. The check prints one of

* ``✓ Correct`` and a sentence on why,
* ``✗ Not yet`` and what exactly is wrong with the answer,
* ``○ Not done`` while the stub is still untouched.

It never lets a traceback from the learner's answer escape: an answer that
breaks the checker is reported as wrong, with the error. ``q1.hint()`` prints a
hint; the worked answer is in the matching notebook under ``solutions/``.

When ``GPUCOURSE_CHECK_LOG`` names a file, every check appends one JSON line
(exercise, outcome, working directory) to it; the test suite uses this to
prove that each solution passes and each untouched stub is reported not done.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable


class _Blank:
    """The placeholder learners replace: ``answer = ____``."""

    def __repr__(self) -> str:
        return "____"

    def __bool__(self) -> bool:
        return False

    def __call__(self, *args, **kwargs):
        raise NotDone("you are calling the placeholder ____; replace it with your code.")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotDone(f"you used ____.{name}; replace ____ with your code first.")


____ = _Blank()


class Wrong(Exception):
    """Raised by a checker: the answer is wrong; the message says how."""


class NotDone(Exception):
    """Raised by a checker: the learner has not answered yet."""


def is_blank(value) -> bool:
    """True if ``value`` is the placeholder ``____`` (the learner has not answered)."""
    return isinstance(value, _Blank)


def _contains_blank(value, depth: int = 0) -> bool:
    if is_blank(value):
        return True
    if depth < 3 and isinstance(value, (list, tuple, set)):
        return any(_contains_blank(v, depth + 1) for v in value)
    if depth < 3 and isinstance(value, dict):
        return any(_contains_blank(v, depth + 1) for v in value.values())
    return False


_log_warned: set[str] = set()


def _log(exercise: str, outcome: str) -> None:
    """Append the outcome to ``GPUCOURSE_CHECK_LOG``; a log that cannot be written never hides feedback."""
    path = os.environ.get("GPUCOURSE_CHECK_LOG")
    if not path:
        return
    record = {"exercise": exercise, "outcome": outcome, "cwd": os.getcwd(), "time": time.time()}
    try:
        with open(os.path.expanduser(path), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    except OSError as exc:
        if path not in _log_warned:
            _log_warned.add(path)
            print(f"(GPUCOURSE_CHECK_LOG={path} cannot be written: {exc.strerror or exc}; "
                  "check results are not logged. Unset it, or point it at a writable file.)")


class Exercise:
    """One checked exercise.

    Parameters
    ----------
    name : str
        Identifier such as ``"ep01.q1"``; shown in messages and logs.
    checker : callable
        ``checker(*answers)`` raises ``Wrong`` or ``NotDone`` with a message,
        or returns a short sentence to show with the ✓.
    hint : str
        Printed by ``hint()``.
    solution : str
        Where the full answer is; printed by ``solution()``.
    """

    def __init__(self, name: str, checker: Callable[..., str | None], hint: str, solution: str):
        self.name = name
        self._checker = checker
        self._hint = hint
        self._solution = solution

    def outcome(self, *answers) -> tuple[str, str]:
        """Check without printing: ``(outcome, message)``.

        ``outcome`` is ``"correct"``, ``"wrong"`` or ``"not-done"``.
        """
        if not answers or any(_contains_blank(a) for a in answers):
            return "not-done", "replace every ____ with your answer, run the cell, then check again."
        try:
            message = self._checker(*answers)
        except NotDone as exc:
            return "not-done", str(exc)
        except Wrong as exc:
            return "wrong", str(exc)
        except Exception as exc:  # the learner's answer broke the checker
            return "wrong", (f"checking your answer raised {type(exc).__name__}: {exc}. "
                             "Look at the type and shape of what you passed to check().")
        return "correct", message or ""

    def check(self, *answers) -> None:
        """Check the answer(s) and print feedback (✓ correct, ✗ not yet, ○ not done)."""
        outcome, message = self.outcome(*answers)
        symbol = {"correct": "✓ Correct", "wrong": "✗ Not yet", "not-done": "○ Not done"}[outcome]
        print(f"{symbol} ({self.name})" + (f": {message}" if message else ""))
        _log(self.name, outcome)

    def hint(self) -> None:
        """Print a hint."""
        print(f"Hint ({self.name}): {self._hint}")

    def solution(self) -> None:
        """Say where the worked solution is."""
        print(f"Solution ({self.name}): {self._solution}")

    def __repr__(self) -> str:
        return f"Exercise({self.name!r})"


def require_answer(value, what: str, parts: tuple[str, ...] = ()):
    """Return ``value``; raise ``NotDone`` if it is still the placeholder or None.

    Use it on what a learner's function returned: ``require_answer(f(x), "f(x)")``.
    ``parts`` names the items of a returned tuple that the caller checks one by one, in order:
    a tuple of that length is returned even while some items are ``____``, so that a wrong
    first item is reported before a later blank one.
    """
    if value is None:
        raise NotDone(f"{what} returned None: did you forget `return`?")
    if parts and isinstance(value, (tuple, list)) and len(value) == len(parts) and not is_blank(value):
        return value
    if _contains_blank(value):
        raise NotDone(f"{what} still returns ____: replace it with your code.")
    return value


def mentions_blank(exc: BaseException) -> bool:
    """True if ``exc`` comes from the placeholder ``____`` still in the learner's code."""
    text = str(exc)
    return "_Blank" in text or "____" in text


def describe(value) -> str:
    """What a learner passed, for messages: type, and shape (and device) where it has them."""
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, (str, bytes)):
        device = getattr(value, "device", None) if type(value).__module__.startswith("torch") else None
        try:
            return f"{article} {kind} of shape {tuple(shape)}" + (f" on {device}" if device is not None else "")
        except TypeError:
            pass
    if isinstance(value, (list, tuple)) and len(repr(value)) > 80:
        return f"{article} {kind} of {len(value)} items"
    return " ".join(f"{kind} {value!r}".split())[:120]


def require_function(fn, name: str) -> None:
    """``NotDone`` while ``fn`` is still ``____``; ``Wrong`` unless it is a function."""
    if is_blank(fn):
        raise NotDone(f"replace ____ with your function {name} and pass it to check().")
    if not callable(fn):
        raise Wrong(f"pass the function itself, {name} (no brackets, no quotes, no arguments); "
                    f"got {describe(fn)}.")


def call_answer(fn, *args, what: str, explain=None, none_ok: bool = False, parts: tuple[str, ...] = ()):
    """Call a learner's function: its errors become ``Wrong``, a stub ``NotDone``.

    ``what`` describes the call in messages, e.g. ``"matmul_tflops(512, 1.0)"``.
    ``explain(exc)`` may return a sentence that names the mistake behind an error.
    An error that comes from the placeholder ``____`` still in the code, and a
    result that is ``None`` (unless ``none_ok``) or ``____``, mean "not done yet".
    """
    try:
        result = fn(*args)
    except (NotDone, Wrong):
        raise
    except Exception as exc:
        if mentions_blank(exc):
            raise NotDone(f"{what} still uses ____: replace it with your code.") from None
        reason = explain(exc) if explain else None
        raise Wrong(reason or f"{what} raised {type(exc).__name__}: {exc}.") from None
    if result is None and none_ok:
        return None
    return require_answer(result, what, parts)


def solution_link(notebook: str) -> str:
    """Text pointing at a notebook in ``solutions/``."""
    return f"see solutions/{notebook} (also in the course website's Solutions section)."


def as_number(name: str, value) -> float:
    """``value`` as a finite float; ``Wrong`` for text, booleans, arrays, NaN and infinities.

    ``float("0.06")`` would accept the text ``"0.06"``; a check asking for a
    number must not.
    """
    import math
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        if getattr(value, "ndim", None) == 0 and not isinstance(value, (str, bytes)):
            value = value.item()  # a NumPy or PyTorch scalar
        else:
            kind = type(value).__name__
            extra = " (text in quotes is not a number: drop the quotes)" if isinstance(value, str) else ""
            raise Wrong(f"{name} should be a number, got {kind} {value!r}{extra}.")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise Wrong(f"{name} should be a number, got {type(value).__name__} {value!r}.")
    got = float(value)
    if not math.isfinite(got):
        raise Wrong(f"{name} is {got}; expected a finite number.")
    return got


def expect_close(name: str, value, expected: float, rel: float = 0.05, unit: str = "") -> None:
    """Raise ``Wrong`` unless the number ``value`` is within ``rel`` of ``expected``."""
    got = as_number(name, value)
    if expected == 0:
        ok = abs(got) <= rel
    else:
        ok = abs(got - expected) <= rel * abs(expected)
    if not ok:
        raise Wrong(f"{name} is {got:.4g}{unit}, expected about {expected:.4g}{unit} "
                    f"(within {rel:.0%}).")
