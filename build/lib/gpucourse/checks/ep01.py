"""Checks for episode 1, *What is a GPU?*.

* ``q1`` — FLOPs of a matrix multiply and the TFLOP/s a measured time means.
* ``q2`` — roofline on a T4: ridge point, arithmetic intensity, compute- or memory-bound.
* ``q3`` — a timer that is right for asynchronous devices (synchronise before and after).
* ``q4`` — which claims about GPUs are true.

The numbers of the T4 are those of the episode's GPU table (NVIDIA T4 datasheet).
"""

from __future__ import annotations

import math
import time

from gpucourse.exercises import Exercise, NotDone, Wrong, call_answer, is_blank, solution_link

NOTEBOOK = "01-what-is-a-gpu.ipynb"

#: NVIDIA T4 peak FP32 rate (FLOP/s) and memory bandwidth (bytes/s), from its datasheet.
T4_FP32_FLOPS = 8.1e12
T4_BANDWIDTH = 320e9
#: The matrix size of exercise 2.
Q2_N = 64
BYTES_FP32 = 4


def _number(name: str, value, unit: str = "") -> float:
    """``value`` as a finite float, or ``Wrong`` naming what it was."""
    if is_blank(value):
        raise NotDone(f"{name} is still ____.")
    if isinstance(value, bool):
        raise Wrong(f"{name} should be a number{unit and ' in ' + unit}, got the bool {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise Wrong(f"{name} should be a number{unit and ' in ' + unit}, "
                    f"got {type(value).__name__} {value!r}.") from None
    if not math.isfinite(number):
        raise Wrong(f"{name} is {number}; expected a finite number{unit and ' in ' + unit}.")
    return number


def _close(got: float, expected: float, rel: float = 0.02) -> bool:
    return abs(got - expected) <= rel * abs(expected)


# --------------------------------------------------------------------------- q1
def _check_tflops(fn) -> str:
    if not callable(fn):
        raise Wrong(f"pass the function itself, matmul_tflops (no brackets); got {type(fn).__name__} {fn!r}.")
    cases = [(512, 1.0), (4096, 0.05), (256, 2e-4)]
    for n, seconds in cases:
        got = call_answer(fn, n, seconds, what=f"matmul_tflops({n}, {seconds})")
        got = _number(f"matmul_tflops({n}, {seconds})", got, "TFLOP/s")
        expected = 2 * n**3 / seconds / 1e12
        if _close(got, expected):
            continue
        where = f"matmul_tflops({n}, {seconds}) returned {got:.4g}, expected {expected:.4g} TFLOP/s"
        if _close(got, expected / 2):
            raise Wrong(f"{where}. You counted n³ multiply-adds; each is a multiply AND an add, "
                        "so an n×n by n×n matmul is 2·n³ FLOPs.")
        if _close(got, 2 * n**2 / seconds / 1e12):
            raise Wrong(f"{where}. 2·n² is the work of a matrix–VECTOR product; "
                        "a matrix–matrix product of two n×n matrices is 2·n³ FLOPs.")
        if _close(got, expected * 1e3):
            raise Wrong(f"{where}. That is 1000× too big: it looks like GFLOP/s. "
                        "Divide FLOP/s by 1e12 for TFLOP/s.")
        if _close(got, expected * 1e12):
            raise Wrong(f"{where}. That is FLOP/s; divide by 1e12 to get TFLOP/s.")
        if _close(got, expected / 1e3) or _close(got, expected / 1e6):
            raise Wrong(f"{where}. Too small by a power of 1000: TFLOP/s is FLOPs / seconds / 1e12 "
                        "(tera = 10¹²).")
        flops = 2 * n**3
        if _close(got, seconds / flops * 1e12) or _close(got, seconds * 1e12 / flops):
            raise Wrong(f"{where}. The fraction is upside down: a rate is work / time, FLOPs / seconds.")
        raise Wrong(f"{where}. FLOPs = 2·n³; TFLOP/s = FLOPs / seconds / 1e12.")
    return ("an n×n matmul is 2·n³ FLOPs; divide by the seconds it took and by 1e12 for TFLOP/s. "
            "Compare what you measured with the peak in the GPU table.")


q1 = Exercise(
    "ep01.q1",
    _check_tflops,
    hint="Each of the n² outputs is a dot product of length n: n multiplies and n adds.",
    solution=solution_link(NOTEBOOK),
)


# --------------------------------------------------------------------------- q2
def _check_roofline(ridge, intensity, bound) -> str:
    ridge = _number("ridge", ridge, "FLOP/byte")
    expected_ridge = T4_FP32_FLOPS / T4_BANDWIDTH
    if not _close(ridge, expected_ridge):
        msg = f"ridge is {ridge:.4g}, expected {expected_ridge:.4g} FLOP/byte"
        if _close(ridge, 1 / expected_ridge):
            raise Wrong(f"{msg}. Upside down: the ridge point is peak FLOP/s ÷ bandwidth (bytes/s).")
        if _close(ridge, 8.1 / 320) or _close(ridge, expected_ridge * 1e3) or _close(ridge, expected_ridge / 1e3):
            raise Wrong(f"{msg}. Mind the units: 8.1 TFLOP/s = 8.1e12 FLOP/s and 320 GB/s = 320e9 bytes/s.")
        raise Wrong(f"{msg}. Use the T4 row of the table: FP32 peak ÷ memory bandwidth.")

    n = Q2_N
    intensity = _number("intensity", intensity, "FLOP/byte")
    flops, nbytes = 2 * n**3, 3 * n * n * BYTES_FP32
    expected_intensity = flops / nbytes
    if not _close(intensity, expected_intensity):
        msg = f"intensity is {intensity:.4g}, expected {expected_intensity:.4g} FLOP/byte for n = {n}"
        if _close(intensity, expected_intensity / 2):
            raise Wrong(f"{msg}. You counted n³ FLOPs; a matmul is 2·n³ FLOPs (multiply and add).")
        if _close(intensity, expected_intensity * BYTES_FP32):
            raise Wrong(f"{msg}. You counted elements, not bytes: each float32 is 4 bytes.")
        if _close(intensity, flops / (n * n * BYTES_FP32)) or _close(intensity, flops / (2 * n * n * BYTES_FP32)):
            raise Wrong(f"{msg}. Count the bytes of all three matrices: read A, read B, write C = 3·n²·4 bytes.")
        if _close(intensity, 1 / expected_intensity):
            raise Wrong(f"{msg}. Upside down: intensity is FLOPs ÷ bytes moved.")
        raise Wrong(f"{msg}. Intensity = FLOPs ÷ bytes = 2·n³ ÷ (3·n²·4).")

    if is_blank(bound):
        raise NotDone("bound is still ____.")
    if not isinstance(bound, str) or bound.strip().lower() not in {"compute", "memory"}:
        raise Wrong(f"bound should be the string 'compute' or 'memory', got {bound!r}.")
    expected_bound = "compute" if expected_intensity > expected_ridge else "memory"
    if bound.strip().lower() != expected_bound:
        raise Wrong(f"bound is {bound!r}, but the intensity ({expected_intensity:.3g} FLOP/byte) is "
                    f"{'above' if expected_bound == 'compute' else 'below'} the ridge point "
                    f"({expected_ridge:.3g} FLOP/byte): the T4 can fetch the data no faster than it "
                    f"could compute on it, so the matmul is {expected_bound}-bound.")
    n_ridge = 6 * expected_ridge
    return (f"at n = {n} a matmul does {expected_intensity:.3g} FLOP per byte, below the T4's ridge of "
            f"{expected_ridge:.3g}: memory-bound. Above n ≈ 6 × {expected_ridge:.3g} ≈ {n_ridge:.0f} it "
            "becomes compute-bound (in this simple model; small matmuls also pay launch latency).")


q2 = Exercise(
    "ep01.q2",
    _check_roofline,
    hint="Ridge = FP32 FLOP/s ÷ bytes/s. A matmul reads A and B and writes C: 3·n² float32 values.",
    solution=solution_link(NOTEBOOK),
)


# --------------------------------------------------------------------------- q3
class _FakeDevice:
    """A pretend GPU: work is queued at once and only finished when ``sync()`` waits for it."""

    def __init__(self):
        self.busy_until = time.perf_counter()
        self.syncs = 0

    def queue(self, seconds: float) -> None:
        self.busy_until = max(self.busy_until, time.perf_counter()) + seconds

    def sync(self) -> None:
        self.syncs += 1
        remaining = self.busy_until - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)


PENDING_S = 0.08   # work already queued before the timer is called
WORK_S = 0.06      # the work being timed


def _check_timer(time_once) -> str:
    if not callable(time_once):
        raise Wrong(f"pass the function itself, time_once (no brackets); got {type(time_once).__name__}.")
    device = _FakeDevice()
    device.queue(PENDING_S)
    calls = []

    def fn():
        calls.append(time.perf_counter())
        device.queue(WORK_S)

    got = call_answer(time_once, fn, device.sync, what="time_once(fn, sync)")
    got = _number("time_once(fn, sync)", got, "seconds")
    if len(calls) != 1:
        raise Wrong(f"time_once called fn {len(calls)} times; call it exactly once "
                    "(benchmark() does the repeating).")
    ms = f"{got * 1e3:.1f} ms"
    if got < WORK_S * 0.5:
        raise Wrong(f"your timer says {ms}, but the queued work took {WORK_S * 1e3:.0f} ms. fn() only "
                    "QUEUES the work and returns at once; call sync() after fn() and before reading "
                    "the clock again.")
    if got > WORK_S + PENDING_S * 0.6:
        raise Wrong(f"your timer says {ms}, but the work took {WORK_S * 1e3:.0f} ms: it also counted "
                    f"{PENDING_S * 1e3:.0f} ms of earlier work still in the queue. Call sync() BEFORE "
                    "reading the start time too.")
    return (f"measured {ms} for {WORK_S * 1e3:.0f} ms of queued work: waiting before and after is "
            "what gpucourse.timing.benchmark does for every repeat.")


q3 = Exercise(
    "ep01.q3",
    _check_timer,
    hint="sync(); start = time.perf_counter(); fn(); sync(); return time.perf_counter() - start",
    solution=solution_link(NOTEBOOK),
)


# --------------------------------------------------------------------------- q4
CLAIMS = {
    "a": (False, "a is false: one small operation takes LONGER on a GPU (launch + synchronisation "
                 "cost microseconds); the latency measurement in the episode shows it."),
    "b": (False, "b is false: the tensorflow-gpu package was removed from PyPI (its last release "
                 "says 'please install tensorflow instead'); on Linux use pip install 'tensorflow[and-cuda]'."),
    "c": (True, "c is true: inspect.signature(keras.Model.fit) has no use_gpu; Keras places "
                "operations on a visible GPU by itself."),
    "d": (True, "d is true: NVIDIA's 1,979 TFLOP/s FP16 figure for the H100 SXM is 'with sparsity'; "
                "dense matmuls peak at about half (989)."),
    "e": (True, "e is true: XGBoost ≥ 2.0 trains on a GPU with device='cuda' (tree_method='hist')."),
    "f": (False, "f is false: scikit-learn's array API support is experimental and covers only the "
                 "estimators and functions listed in its documentation."),
    "g": (True, "g is true: a + b does 1 FLOP per 12 bytes moved, far below any GPU's ridge point, so "
                "memory bandwidth sets its speed."),
}


def _letters(answer) -> set[str]:
    if isinstance(answer, str):
        items = [c for c in answer.replace(",", " ").split()] if (" " in answer or "," in answer) else list(answer)
    elif isinstance(answer, (set, frozenset, list, tuple)):
        items = list(answer)
    else:
        raise Wrong(f"true_claims should be a set of letters such as {{'a', 'b'}}, got "
                    f"{type(answer).__name__} {answer!r}.")
    letters = set()
    for item in items:
        if not isinstance(item, str):
            raise Wrong(f"true_claims should contain letters (strings), found {item!r}.")
        letters.add(item.strip().lower())
    letters.discard("")
    unknown = sorted(letters - set(CLAIMS))
    if unknown:
        raise Wrong(f"unknown claim(s) {unknown}; the claims are {sorted(CLAIMS)}.")
    return letters


def _check_claims(answer) -> str:
    chosen = _letters(answer)
    if not chosen:
        raise Wrong("true_claims is empty; some of the claims are true.")
    true = {k for k, (ok, _) in CLAIMS.items() if ok}
    problems = [CLAIMS[k][1] for k in sorted(chosen ^ true)]
    if problems:
        raise Wrong(f"{len(problems)} claim(s) misjudged. " + " ".join(problems))
    return "exactly " + ", ".join(sorted(true)) + " are true."


q4 = Exercise(
    "ep01.q4",
    _check_claims,
    hint="Look back at the latency measurement, the GPU table's footnote, and the library list.",
    solution=solution_link(NOTEBOOK),
)

__all__ = ["q1", "q2", "q3", "q4", "T4_FP32_FLOPS", "T4_BANDWIDTH", "Q2_N"]
