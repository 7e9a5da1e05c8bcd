"""Checked exercises with feedback that teaches.

An exercise notebook fills in a stub such as ``device = ____`` and calls
``q1.check(device)``. The check prints one of

* ``✓ Correct`` and a sentence on why,
* ``✗ Not yet`` and what exactly is wrong with the answer,
* ``○ Not done`` while the stub is still untouched.

It never lets a traceback from the learner's answer escape: an answer that
breaks the checker is reported as wrong, with the error. It never hangs either:
every call of the learner's code has a deadline (``DEADLINE_S``), see
``answer_deadline``. A function whose code still names ``____`` (nested
functions, and functions of the same notebook that it calls, included) is
"not done", whatever it returns. ``q1.hint()`` prints a
hint; the worked answer is in the matching notebook under ``solutions/``.

When ``GPUCOURSE_CHECK_LOG`` names a file, every check appends one JSON line
(exercise, outcome, working directory) to it; the test suite uses this to
prove that each solution passes and each untouched stub is reported not done.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from typing import Callable


class _Blank:
    """The placeholder learners replace: ``answer = ____``."""

    def __repr__(self) -> str:
        return "____"

    def __format__(self, spec: str) -> str:
        return "____"           # f"{answer:.2f}" in an untouched stub prints the blank instead of failing

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


def _code_of(fn):
    """The code objects behind a callable: a function, a method, a partial, an object with __call__."""
    import functools

    for _ in range(5):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif hasattr(fn, "__func__"):
            fn = fn.__func__
        elif hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        else:
            break
    code = getattr(fn, "__code__", None)
    if code is None and not isinstance(fn, type) and callable(fn):
        code = getattr(getattr(type(fn), "__call__", None), "__code__", None)
        fn = getattr(type(fn), "__call__", fn)
    return fn, code


def uses_blank(fn) -> bool:
    """True if the code of ``fn`` still names the placeholder ``____`` anywhere.

    Nested functions and lambdas count, and so do the functions of the same module (the same
    notebook) that ``fn`` calls by name: a ``fits`` helper still ``return ____`` makes the
    ``largest_batch`` that calls it not done. Comments and text never count.
    """
    fn, code = _code_of(fn)
    if code is None:
        return False
    module = getattr(fn, "__module__", None)
    namespace = getattr(fn, "__globals__", {}) or {}
    todo, seen = [fn], set()
    while todo and len(seen) < 200:
        item = todo.pop()
        code = getattr(item, "__code__", item)
        if id(code) in seen:
            continue
        seen.add(id(code))
        if "____" in code.co_names or "____" in code.co_freevars or "____" in code.co_varnames:
            return True
        todo.extend(c for c in code.co_consts if hasattr(c, "co_names"))
        for cell in getattr(item, "__closure__", None) or ():     # helpers it reaches through a closure
            try:
                other = cell.cell_contents
            except ValueError:
                continue
            if callable(other) and hasattr(other, "__code__") and getattr(other, "__module__", None) == module:
                todo.append(other)
        for name in code.co_names:     # helpers of the same notebook, called by name
            other = namespace.get(name)
            if other is not None and getattr(other, "__module__", None) == module and \
                    hasattr(other, "__code__") and not isinstance(other, type):
                todo.append(other)
    return False


def _unfinished(value, depth: int = 0) -> bool:
    """A placeholder, or a function that still uses one, possibly inside a list or tuple of answers."""
    if _contains_blank(value):
        return True
    if callable(value) and not isinstance(value, type) and uses_blank(value):
        return True
    if depth < 2 and isinstance(value, (list, tuple)):
        return any(_unfinished(v, depth + 1) for v in value)
    return False


# --- deadlines ---------------------------------------------------------------------------------
#
# A learner's answer may loop for ever (a search that never stops, a `while` whose condition never
# changes). On Linux and macOS, in the main thread (where a Jupyter kernel runs a cell), a SIGALRM
# timer raises ``DeadlineExceeded`` inside the running Python code: it stops pure-Python loops and
# waits in time.sleep, locks and I/O. It is a BaseException, so `except Exception:` in the answer
# cannot swallow it, and it is raised again every 0.25 s until the call has ended, so a bare
# `except:` inside a loop cannot either. Elsewhere (Windows, a call from another thread) a watchdog
# thread raises it asynchronously, which stops Python loops but not a wait inside C.
#
# What no deadline can stop: a single long call into C that never returns to Python (an endless
# loop in a compiled extension, one enormous NumPy or PyTorch operation, a C library waiting
# without a timeout) runs until that call returns; the deadline fires right after it.

#: Seconds a learner's function may run before the check stops it. Measured: the longest single
#: call of a right answer in the whole check suite takes about 1 s on a 2-core CPU machine (the
#: capstone of episode 7); a machine busy with other work slows that several times. 60 s leaves a
#: wide margin and still tells a learner quickly that their loop never ends.
DEADLINE_S = 60.0

#: The deadline of a check whose every case is small (a closed formula, a few requests or pages):
#: its right answers take microseconds, so a loop that never ends is named in seconds.
SMALL_CASE_DEADLINE_S = 5.0

#: How often the deadline fires again after it has passed, until the call has ended.
_REFIRE_S = 0.25


class DeadlineExceeded(BaseException):
    """Raised inside a learner's code that runs past its deadline (a BaseException on purpose)."""

    token = None


class _Deadline:
    def __init__(self, seconds: float, caller=None):
        self.seconds = seconds
        self.expires = time.monotonic() + seconds
        self.caller = caller          # the frame that set the deadline: the learner's code runs below it
        self.previous_trace = None
        self.tracing = False
        # a subclass per deadline, so that nested deadlines know whose time is up (the class is all
        # an asynchronous exception can carry)
        self.exception = type("DeadlineExceeded", (DeadlineExceeded,), {"token": self})


_active: list[_Deadline] = []          # deadlines armed through SIGALRM, outermost first
_previous_handler = None


def _our_frame(frame) -> bool:
    """True while the interpreter is in this module or in contextlib (arming, disarming, reporting):
    never raise there, or a deadline could escape its own clean-up."""
    return frame is not None and frame.f_code.co_filename in (__file__, contextlib.__file__)


def _drop_deadlines(keep: int) -> None:
    """Forget all but the first ``keep`` deadlines (a check has ended, however it ended)."""
    import sys

    if len(_active) <= keep or not hasattr(signal, "setitimer"):
        return
    if any(d.tracing for d in _active[keep:]):
        sys.settrace(next(d.previous_trace for d in _active[keep:] if d.tracing))
    del _active[keep:]
    if threading.current_thread() is threading.main_thread():
        _arm()
        if not _active:
            signal.signal(signal.SIGALRM, _previous_handler or signal.SIG_DFL)


def _tracer(deadline):
    """A trace function that raises at every line of the learner's code once ``deadline`` is past.

    Raised inside an `except:` block, the exception escapes it: a loop that catches everything
    still ends within a few lines."""
    def trace(frame, event, arg):
        if deadline not in _active or _our_frame(frame):
            return None
        if event == "line":
            raise deadline.exception()
        return trace
    return trace


def _start_tracing(deadline, frame) -> None:
    import sys

    if deadline.tracing:
        return
    deadline.tracing, deadline.previous_trace = True, sys.gettrace()
    trace = _tracer(deadline)
    sys.settrace(trace)
    while frame is not None and frame is not deadline.caller:    # the frames the answer runs in now
        if not _our_frame(frame):
            frame.f_trace, frame.f_trace_lines = trace, True
        frame = frame.f_back


def _on_alarm(signum, frame):
    now = time.monotonic()
    due = [d for d in _active if d.expires <= now + 1e-3]
    if not due:
        _arm()
        return
    _start_tracing(due[0], frame)
    if _our_frame(frame):
        return                           # fires again in _REFIRE_S, once back in the learner's code
    raise due[0].exception()


def _arm() -> None:
    if _active:
        delay = max(min(d.expires for d in _active) - time.monotonic(), 1e-3)
        signal.setitimer(signal.ITIMER_REAL, delay, _REFIRE_S)
    else:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _alarm_usable() -> bool:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    if _active:
        return True
    # someone else's timer is running: leave it alone
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None) or \
        signal.getitimer(signal.ITIMER_REAL)[0] == 0


def interrupt_thread(thread: threading.Thread, exception=None) -> bool:
    """Raise ``exception`` (a class; DeadlineExceeded by default) in ``thread`` at its next Python line."""
    import ctypes

    if thread.ident is None or not thread.is_alive():
        return False
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                      ctypes.py_object(exception or DeadlineExceeded))
    return done == 1


@contextlib.contextmanager
def _deadline(seconds: float):
    """Raise ``DeadlineExceeded`` in the calling thread's Python code after ``seconds``."""
    import sys

    global _previous_handler
    caller = sys._getframe(1)
    while caller is not None and _our_frame(caller):     # the check that called answer_deadline
        caller = caller.f_back
    deadline = _Deadline(seconds, caller=caller)
    if _alarm_usable():
        if not _active:
            _previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
        _active.append(deadline)
        _arm()
        try:
            yield deadline
        finally:
            _active.remove(deadline)
            _arm()
            if not _active:
                signal.signal(signal.SIGALRM, _previous_handler or signal.SIG_DFL)
            if deadline.tracing:
                sys.settrace(deadline.previous_trace)
        return
    # no SIGALRM here: a watchdog thread raises in the calling thread, again and again, until the end
    caller, finished = threading.current_thread(), threading.Event()

    def watch():
        if finished.wait(seconds):
            return
        while not finished.is_set():
            interrupt_thread(caller, deadline.exception)
            finished.wait(_REFIRE_S)

    watchdog = threading.Thread(target=watch, daemon=True, name="gpucourse-deadline")
    watchdog.start()
    try:
        yield deadline
    finally:
        finished.set()


def deadline_message(what: str, seconds: float) -> str:
    return (f"{what}: your function did not return within {seconds:g} s: is there a loop that never ends? "
            "(A search must stop when its bounds meet; a `while` loop needs a condition that becomes false.)")


@contextlib.contextmanager
def answer_deadline(what: str, seconds: float | None = None):
    """Run a learner's code inside ``with answer_deadline("f(x)"):``; past the deadline it is stopped
    and reported as ``Wrong`` (the learner's loop, not the check, is what ran too long)."""
    seconds = DEADLINE_S if seconds is None else seconds
    with contextlib.ExitStack() as stack:
        deadline = stack.enter_context(_deadline(seconds))
        try:
            yield deadline
        except DeadlineExceeded as exc:
            if getattr(exc, "token", None) is not deadline:
                raise                    # an outer deadline's time is up
            stack.close()
            raise Wrong(deadline_message(what, seconds)) from None


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
    hint : str or (str, str)
        ``hint()`` prints the first step, a question that points the way; ``hint(2)`` the second, the
        method. Neither gives the code. A single string is one step.
    solution : str
        Where the full answer is; printed by ``solution()``.
    """

    def __init__(self, name: str, checker: Callable[..., str | None], hint: str | tuple[str, ...],
                 solution: str):
        self.name = name
        self._checker = checker
        self.hints = (hint,) if isinstance(hint, str) else tuple(hint)
        self._solution = solution

    def outcome(self, *answers) -> tuple[str, str]:
        """Check without printing: ``(outcome, message)``.

        ``outcome`` is ``"correct"``, ``"wrong"`` or ``"not-done"``.
        """
        if not answers or any(_contains_blank(a) for a in answers):
            return "not-done", "replace every ____ with your answer, run the cell, then check again."
        armed = len(_active)
        try:
            outcome, message = self._run(answers)
        finally:
            _drop_deadlines(armed)
        unfinished = [a for a in answers if callable(a) and _unfinished(a)]
        if unfinished and outcome != "not-done":
            # A function that still names ____ is half done, whatever it returned this time.
            name = getattr(unfinished[0], "__name__", "")
            name = "your function" if name in ("", "<lambda>") else name
            found = f" What the check found so far: {message}" if outcome == "wrong" else ""
            return "not-done", (f"{name} still uses ____ (in a line not run yet, a branch, a nested function or a "
                                "helper it calls): replace every ____ with your code, run the cell, then check "
                                "again." + found)
        return outcome, message

    def _run(self, answers) -> tuple[str, str]:
        try:
            message = self._checker(*answers)
        except NotDone as exc:
            return "not-done", str(exc)
        except Wrong as exc:
            return "wrong", str(exc)
        except DeadlineExceeded:
            return "wrong", deadline_message("your function", DEADLINE_S)
        except Exception as exc:  # the learner's answer broke the checker
            meaning = explain_error(exc)
            text = " ".join(str(exc).split())[:300]
            return "wrong", (f"checking your answer raised {type(exc).__name__}: {text}. "
                             + (f"That usually means {meaning} " if meaning else "")
                             + "Look at the type and shape of what you passed to check().")
        return "correct", message or ""

    def check(self, *answers) -> None:
        """Check the answer(s) and print feedback (✓ correct, ✗ not yet, ○ not done)."""
        outcome, message = self.outcome(*answers)
        symbol = {"correct": "✓ Correct", "wrong": "✗ Not yet", "not-done": "○ Not done"}[outcome]
        print(f"{symbol} ({self.name})" + (f": {message}" if message else ""))
        _log(self.name, outcome)

    def hint(self, step: int = 1) -> None:
        """Print hint ``step``: 1 asks the guiding question, 2 gives the method."""
        if not isinstance(step, int) or not 1 <= step <= len(self.hints):
            steps = " or ".join(f"hint({n})" for n in range(1, len(self.hints) + 1))
            print(f"{self.name} has {len(self.hints)} hint step(s): {steps}.")
            return
        more = f" (more: {self.name.split('.')[-1]}.hint({step + 1}))" if step < len(self.hints) else ""
        print(f"Hint {step} ({self.name}): {self.hints[step - 1]}{more}")

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


# --- errors in the learner's words ----------------------------------------------------------------
#
# A raw "TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'" tells a learner where
# Python stopped, not what to change. Each rule below matches the text of a common error (the texts
# of CPython 3.10-3.13 and PyTorch 2.x) and says what usually causes it; the original error follows,
# so nothing is hidden. The first rule that matches wins: the most specific come first.

# What PyTorch says when code asks for CUDA where there is none: the CPU build ("not compiled"),
# the CUDA build without a driver (a laptop, CI), or a driver without a GPU.
NO_GPU_TEXT = (r"(Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are "
               r"available|CUDA driver version is insufficient|not linked with support for cuda)")

_ERROR_WORDS = [
    ((RuntimeError, AssertionError), NO_GPU_TEXT,
     "the code asked for a CUDA GPU and there is none here: take the device from what the check "
     "gives you (e.g. next(model.parameters()).device), never a hard-coded \"cuda\"."),
    (TypeError, r"NoneType",
     "a value in your code is None: a function or helper you call returns nothing (a missing "
     "`return`), or a variable was set to None. Print the values on the line that failed."),
    (AttributeError, r"'NoneType' object has no attribute",
     "a value in your code is None: a function or helper you call returns nothing (a missing "
     "`return`), or a variable was set to None."),
    (TypeError, r"(missing \d+ required|takes \d+ positional argument|takes from \d+ to \d+ "
                r"positional|got an unexpected keyword argument|positional arguments? but \d+)",
     "your function's parameters do not match the call the check makes: keep the parameters of the "
     "stub, in the same order."),
    (TypeError, r"cannot unpack non-iterable",
     "the code unpacks one value into several names (a, b = ...): return, or pass, as many values "
     "as the names."),
    (ValueError, r"(too many|not enough) values to unpack",
     "the number of names on the left of `=` differs from the number of values on the right: "
     "count the values your function returns, or the items you unpack."),
    (TypeError, r"object is not callable",
     "the code calls something that is not a function, often a number or a tensor after `(`: "
     "write `*` for a product, and do not reuse a function's name for a variable."),
    (TypeError, r"(unsupported operand|can only concatenate|can't multiply sequence|"
                r"must be real number, not|not supported between instances)",
     "the code combines values of types that do not go together (text and a number, a list and a "
     "number, a tuple and a tensor): check the type of each value on that line."),
    (RuntimeError, r"(same device|devices, cuda|is on (cpu|cuda|mps)|Input type \(torch\.cuda)",
     "two tensors sit on different devices (one on the GPU, one on the CPU): move the model and "
     "every input to the same device with .to(device) before combining them."),
    (RuntimeError, r"(expected scalar type|same dtype|found dtype|can't be cast|Input type \("
                   r"(double|float|half)\) and)",
     "two tensors have different number formats (float32 and float64, or float and int): convert "
     "one with .float() or .to(other.dtype)."),
    (Exception, r"(shapes cannot be multiplied|must match the size of tensor|must match the "
                r"existing size|size mismatch|is invalid for input of size|Sizes of tensors must "
                r"match|to match target batch_size|could not be broadcast|not aligned|mismatch in "
                r"its core dimension|cannot reshape array)",
     "two shapes do not fit together (a matrix product needs the inner sizes equal, an elementwise "
     "operation equal or broadcastable shapes): print the .shape of each tensor or array on that "
     "line."),
    (Exception, r"(cannot be converted to Scalar|only one element tensors can be converted|"
                r"only length-1 arrays|only size-1 arrays)",
     "the code turns a tensor or array of several numbers into one number (float(), .item()): "
     "reduce it first (.sum(), .mean()) or pick one element."),
    (TypeError, r"(object is not subscriptable|object is not iterable|has no len\(\))",
     "the code indexes, loops over or takes len() of a single value (a number) as if it were a "
     "list: check what that value holds."),
    (TypeError, r"cannot be interpreted as an integer",
     "a float is used where Python needs a whole number (range(), a size, an index): convert it "
     "with int(), after rounding the way the task asks."),
    (ZeroDivisionError, r"",
     "the code divides by zero for one of the check's cases: a count, a size or a time that can be "
     "0 there (an empty list, a batch of 0): find which one and handle it."),
    (UnboundLocalError, r"",
     "the code reads a variable before giving it a value in every branch: set it before the `if`, "
     "or in each branch."),
    (NameError, r"name '(?P<name>[^']+)' is not defined",
     "the code uses the name {name}, which is not defined where it runs: check its spelling, define "
     "it inside the function, or run the cell that defines it first."),
    (IndexError, r"",
     "the code reads an item past the end of a list, tuple, string or tensor (index out of range): "
     "check the lengths for the check's cases, the smallest ones included."),
    (KeyError, r"",
     "the code looks up a key that is not in the dictionary: print its keys (d.keys())."),
    (AttributeError, r"'(?P<kind>\w+)' object has no attribute '(?P<attr>\w+)'",
     "the code uses .{attr} on a {kind}, which has no such attribute: check what that value holds, "
     "and the spelling of .{attr}."),
    (RecursionError, r"",
     "the function calls itself without end: a recursive call needs a case that stops it."),
    (OverflowError, r"",
     "a number grew too large (often an exponent or a loop that multiplies without end): check "
     "the formula."),
]


def explain_error(exc: BaseException) -> str | None:
    """What a common error in a learner's code usually means, in one or two sentences; None if it
    is not one of the errors this module knows (``_ERROR_WORDS``).

    Parameters
    ----------
    exc : BaseException
        The error the learner's code (or the check, working on the learner's answer) raised.
    """
    import re

    text = str(exc)
    for kind, pattern, words in _ERROR_WORDS:
        if isinstance(exc, kind):
            found = re.search(pattern, text)
            if found:
                return words.format(**{k: v for k, v in found.groupdict().items() if v})
    return None


def error_message(what: str, exc: BaseException) -> str:
    """``"<what> raised <Error>: <text>. <what it usually means>"`` for a learner's error."""
    text = " ".join(str(exc).split())[:300]
    meaning = explain_error(exc)
    return f"{what} raised {type(exc).__name__}: {text}." + (f" That means {meaning}" if meaning else "")


def call_answer(fn, *args, what: str, explain=None, none_ok: bool = False, parts: tuple[str, ...] = (),
                seconds: float | None = None):
    """Call a learner's function: its errors become ``Wrong``, a stub ``NotDone``.

    ``what`` describes the call in messages, e.g. ``"matmul_tflops(512, 1.0)"``.
    ``explain(exc)`` may return a sentence that names the mistake behind an error.
    An error that comes from the placeholder ``____`` still in the code, and a
    result that is ``None`` (unless ``none_ok``) or ``____``, mean "not done yet".
    A call that runs longer than ``seconds`` (``DEADLINE_S``) is stopped and is ``Wrong``.
    """
    try:
        with answer_deadline(what, seconds):
            result = fn(*args)
    except (NotDone, Wrong):
        raise
    except Exception as exc:
        if mentions_blank(exc):
            raise NotDone(f"{what} still uses ____: replace it with your code.") from None
        reason = explain(exc) if explain else None
        raise Wrong(reason or error_message(what, exc)) from None
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


# --- comparisons that never raise on a learner's dtype or device, and inputs left unchanged ------

def tensors_close(a, b, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """True if two tensors (or arrays) hold close values; False, never an error, when their shapes,
    dtypes or devices differ in a way that cannot be compared (both are compared in float64 on the CPU)."""
    import numpy as np

    def as_array(x):
        if hasattr(x, "detach"):
            return x.detach().to("cpu").double().numpy()
        return np.asarray(x, dtype=np.float64)

    try:
        x, y = as_array(a), as_array(b)
        return x.shape == y.shape and bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=False))
    except Exception:
        return False


_SIMPLE = (str, bytes, int, float, bool, complex, type(None))


def _module_state(module):
    state = {"training": module.training}
    for name, value in list(module.named_parameters(recurse=True)) + list(module.named_buffers(recurse=True)):
        state[name] = (str(value.dtype), tuple(value.shape), str(value.device), bool(value.requires_grad),
                       value.detach().to("cpu").clone())
    for sub_name, sub in module.named_modules():
        prefix = f"{sub_name}." if sub_name else ""
        for key, value in vars(sub).items():
            if key in ("forward", "__call__") or (not key.startswith("_") and (isinstance(value, _SIMPLE) or callable(value))):
                state[prefix + key] = value if isinstance(value, _SIMPLE) else ("callable", id(value))
        for hooks in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            state[prefix + hooks] = len(getattr(sub, hooks, {}) or {})
    return state


def snapshot(value):
    """A copy of ``value`` to compare with ``changes(before, value)`` after a learner's call: tensors, NumPy
    arrays, lists, tuples, dicts and torch modules (weights, dtypes, flags such as ``reduction``, hooks)."""
    import copy

    import numpy as np

    module = type(value).__module__
    if module.startswith("torch") and hasattr(value, "detach") and hasattr(value, "dtype"):
        return ("tensor", value.detach().to("cpu").clone(), str(value.dtype), tuple(value.shape))
    if hasattr(value, "named_parameters") and hasattr(value, "training"):
        return ("module", _module_state(value))
    if isinstance(value, np.ndarray):
        return ("array", value.copy())
    if isinstance(value, (list, tuple)):
        return ("seq", type(value), [snapshot(v) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: snapshot(v) for k, v in value.items()})
    try:
        return ("value", copy.deepcopy(value))
    except Exception:
        return ("opaque",)


def changes(before, value) -> str | None:
    """What changed in ``value`` since ``snapshot`` made ``before``, in a few words; None if nothing did."""
    import numpy as np
    import torch

    kind = before[0]
    try:
        if kind == "tensor":
            _, old, dtype, shape = before
            if str(value.dtype) != dtype or tuple(value.shape) != shape:
                return f"it became {value.dtype} of shape {tuple(value.shape)} (was {dtype}, {shape})"
            return None if torch.equal(value.detach().to("cpu"), old) or \
                (old.is_floating_point() and torch.allclose(value.detach().to("cpu"), old, equal_nan=True, rtol=0, atol=0)) \
                else "its values were changed in place"
        if kind == "module":
            now, old = _module_state(value), before[1]
            for key in sorted(set(old) | set(now)):
                if key not in now or key not in old:
                    return f"{key} was {'added' if key not in old else 'removed'}"
                a, b = old[key], now[key]
                if isinstance(a, tuple) and len(a) == 5:
                    for label, x, y in (("dtype", a[0], b[0]), ("shape", a[1], b[1]), ("device", a[2], b[2]),
                                        ("requires_grad", a[3], b[3])):
                        if x != y:
                            return f"the {label} of {key} went from {x} to {y}"
                    if not torch.equal(a[4], b[4]):
                        return f"the values of {key} were changed"
                elif a != b:
                    return f"{key} went from {a!r} to {b!r}"
            return None
        if kind == "array":
            old = before[1]
            if not isinstance(value, np.ndarray) or value.shape != old.shape or value.dtype != old.dtype:
                return "it was replaced by another array"
            return None if np.array_equal(value, old, equal_nan=old.dtype.kind in "fc") else "its values were changed in place"
        if kind == "seq":
            _, cls, items = before
            if type(value) is not cls or len(value) != len(items):
                return f"its length went from {len(items)} to {len(value)}"
            for i, (item_before, item) in enumerate(zip(items, value)):
                what = changes(item_before, item)
                if what:
                    return f"item {i} changed ({what})" if item_before[0] in ("seq", "dict") else "its order or items changed"
            return None
        if kind == "dict":
            old = before[1]
            if set(old) != set(value):
                gone, new = sorted(map(repr, set(old) - set(value))), sorted(map(repr, set(value) - set(old)))
                return "keys " + (f"{', '.join(gone)} were removed" if gone else f"{', '.join(new)} were added")
            for key, item_before in old.items():
                what = changes(item_before, value[key])
                if what:
                    return f"the entry {key!r} changed ({what})"
            return None
        if kind == "value":
            return None if before[1] == value else "its value changed"
    except Exception:
        return None
    return None


# --- answers computed in other processes ---------------------------------------------------------

_ELSEWHERE = r"""
import json, pickle, sys
sys.path[:0] = json.loads(sys.argv[1])
fn, calls = pickle.loads(sys.stdin.buffer.read())
out = []
for args in calls:
    result = fn(*args)
    out.append([int(v) for v in (result.tolist() if hasattr(result, "tolist") else result)])
sys.stdout.write(json.dumps(out))
"""


def results_in_fresh_processes(fn, calls, hash_seeds=(1, 2), seconds: float = 60.0):
    """``[[list(fn(*args)) for args in calls] for each of two fresh Python processes]``, or None.

    Each process starts anew, with its own ``PYTHONHASHSEED``, process id and object addresses, as the
    ranks torchrun starts do: an answer whose result depends on per-process state (``hash()`` of a
    string, ``os.getpid()``, ``id()``) gives different results there. ``fn`` travels by value with
    cloudpickle (a notebook's function, with the helpers and globals it uses). None when this is not
    possible here (no cloudpickle, a function that cannot be pickled, a process that fails to start):
    the caller then skips the test rather than blame the answer.
    """
    import subprocess
    import sys

    try:
        import cloudpickle
    except ImportError:
        return None
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    registered = False
    try:
        if module is not None and module.__name__ != "__main__" and not module.__name__.startswith(("gpucourse", "torch", "numpy")):
            cloudpickle.register_pickle_by_value(module)      # a test module or a learner's own file
            registered = True
        payload = cloudpickle.dumps((fn, list(calls)))
    except Exception:
        return None
    finally:
        if registered:
            cloudpickle.unregister_pickle_by_value(module)
    processes = []
    for seed in hash_seeds:
        env = dict(os.environ, PYTHONHASHSEED=str(seed))
        try:
            processes.append(subprocess.Popen([sys.executable, "-c", _ELSEWHERE, json.dumps(sys.path)],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL, env=env))
        except OSError:
            return None
    results = []
    try:
        for process in processes:
            out, _ = process.communicate(payload, timeout=seconds)
            if process.returncode != 0:
                return None
            results.append(json.loads(out))
    except (subprocess.TimeoutExpired, ValueError):
        return None
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results
