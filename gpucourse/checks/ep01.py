"""Checks for episode 1, *What is a GPU?*.

* ``q1`` — ``matmul_tflops(n, seconds)``: FLOPs of a matrix multiply and the TFLOP/s a time means.
* ``q2`` — ``roofline(n, peak_tflops, bandwidth_gbs)``: ridge point, arithmetic intensity, and
  whether a float32 matmul is compute- or memory-bound, on several GPUs of the episode's table.
* ``q3`` — ``time_once(fn, sync)``: a timer that is right for asynchronous devices, measured
  against a simulated GPU whose queue the check fills itself.
* ``q4`` — which claims about GPUs are true.

Every check that takes a function calls it on several cases, so that a constant, or an answer
that is right for one case only, cannot pass. The numbers of the T4 are those of the episode's
GPU table (NVIDIA T4 datasheet).
"""

from __future__ import annotations

import random
import time

from gpucourse.exercises import (
    Exercise,
    NotDone,
    Wrong,
    as_number,
    is_blank,
    require_function,
    solution_link,
)
from gpucourse.exercises import call_answer as _call

NOTEBOOK = "01-what-is-a-gpu.ipynb"

#: NVIDIA T4 peak FP32 rate (FLOP/s) and memory bandwidth (bytes/s), from its datasheet.
T4_FP32_FLOPS = 8.1e12
T4_BANDWIDTH = 320e9
#: The matrix size of the T4 case of exercise 2 (the one the notebook prints).
Q2_N = 64
BYTES_FP32 = 4


def _close(got: float, expected: float, rel: float = 0.02) -> bool:
    if expected == 0:
        return abs(got) <= 1e-12
    return abs(got - expected) <= rel * abs(expected)




# --------------------------------------------------------------------------- q1
#: (n, seconds) cases: small and large rates, results below 1 TFLOP/s and above.
Q1_CASES = [(512, 1.0), (4096, 0.05), (256, 2e-4), (8192, 0.125)]


def _tflops_mistake(got: float, n: int, seconds: float) -> str:
    """What a wrong ``matmul_tflops`` result says about the mistake."""
    flops = 2 * n**3
    expected = flops / seconds / 1e12
    if got == 0 or any(got == round(expected, k) != expected for k in range(4)) or got == float(int(expected)):
        return ("Did you round, or use // (integer division) or int()? Small matmuls run at well below "
                "1 TFLOP/s: return the unrounded value.")
    if _close(got, expected / 2):
        return ("Did you count n³ FLOPs? Each of the n³ multiply-adds is a multiply AND an add, so an "
                "n×n by n×n matmul is 2·n³ FLOPs.")
    if _close(got, ((2 * n) ^ 3) / seconds / 1e12) or _close(got, (n ^ 3) / seconds / 1e12):
        return "Did you write n^3? In Python ^ is bitwise XOR; the power is n**3."
    if _close(got, 2 * n**2 / seconds / 1e12):
        return ("Did you use 2·n²? That is the work of a matrix–VECTOR product; a matrix–matrix "
                "product of two n×n matrices is 2·n³ FLOPs.")
    if _close(got, flops / 1e12):
        return "Did you forget to divide by seconds? A rate is work / time."
    if _close(got, expected * 1e3):
        return "That is 1000× too big: it looks like GFLOP/s. Divide FLOP/s by 1e12 for TFLOP/s."
    if _close(got, expected * 1e12):
        return "That is FLOP/s; divide by 1e12 to get TFLOP/s."
    if _close(got, expected * 1e6):
        return "That is 10⁶× too big: it looks like MFLOP/s. Divide FLOP/s by 1e12 (tera = 10¹²)."
    if _close(got, expected / 1e3):
        return ("That is 1000× too small. Did you turn seconds into milliseconds, or divide by 1e15? "
                "`seconds` is already in seconds, and tera = 10¹².")
    if _close(got, expected / 1e6) or _close(got, expected / 1e9):
        return "Too small by a power of 1000: TFLOP/s is FLOPs / seconds / 1e12 (tera = 10¹²)."
    if _close(got, seconds / flops * 1e12) or _close(got, seconds * 1e12 / flops) or _close(got, 1 / expected):
        return "The fraction is upside down: a rate is work / time, FLOPs / seconds."
    return "FLOPs = 2·n³; TFLOP/s = FLOPs / seconds / 1e12."


def _check_tflops(fn) -> str:
    require_function(fn, "matmul_tflops")
    answers = []
    for n, seconds in Q1_CASES:
        what = f"matmul_tflops({n}, {seconds})"
        answers.append(as_number(what, _call(fn, n, seconds, what=what)))
    if len(set(answers)) == 1:
        raise Wrong(f"matmul_tflops returned {answers[0]:.4g} for each of {len(answers)} different sizes and "
                    "times: compute the rate from the arguments n and seconds, do not type it in.")
    for (n, seconds), got in zip(Q1_CASES, answers):
        what = f"matmul_tflops({n}, {seconds})"
        expected = 2 * n**3 / seconds / 1e12
        if not _close(got, expected, rel=0.01):
            fixed = [m for m, _ in Q1_CASES if m != n and _close(got, 2 * m**3 / seconds / 1e12)]
            why = (f"Did you type in n = {fixed[0]}? Use the argument n." if fixed
                   else _tflops_mistake(got, n, seconds))
            raise Wrong(f"{what} returned {got:.4g}, expected {expected:.4g} TFLOP/s. {why}")
    return ("an n×n matmul is 2·n³ FLOPs; divide by the seconds it took and by 1e12 for TFLOP/s. "
            "Compare what you measure below with the peak in the GPU table.")


q1 = Exercise(
    "ep01.q1",
    _check_tflops,
    hint="Each of the n² outputs is a dot product of length n: n multiplies and n adds. "
         "Then divide by the time, and express the rate in units of 10¹² per second.",
    solution=solution_link(NOTEBOOK),
)


# --------------------------------------------------------------------------- q2
#: (GPU, FP32 TFLOP/s, GB/s, n) cases from the episode's GPU table, both sides of each ridge.
Q2_CASES = [
    ("T4", 8.1, 320, Q2_N),
    ("T4", 8.1, 320, 4096),
    ("A100 80GB", 19.5, 2039, 1024),
    ("H100 SXM", 67, 3350, 64),
    ("L4", 30.3, 300, 512),
    ("L4", 30.3, 300, 64),
]


def _bound_word(value, what: str) -> str:
    if is_blank(value):
        raise NotDone(f"bound in {what} is still ____.")
    if not isinstance(value, str):
        raise Wrong(f"bound in {what} should be the string 'compute' or 'memory', "
                    f"got {type(value).__name__} {value!r}.")
    word = value.strip().lower().replace("_", "-").replace(" ", "-")
    word = word.removesuffix("-bound")
    if word not in {"compute", "memory"}:
        raise Wrong(f"bound in {what} should be the string 'compute' or 'memory', got {value!r}.")
    return word


def _ridge_mistake(got: float, peak_tflops: float, bandwidth_gbs: float) -> str:
    expected = peak_tflops * 1e12 / (bandwidth_gbs * 1e9)
    if _close(got, 1 / expected):
        return "Upside down: the ridge point is peak FLOP/s ÷ bandwidth in bytes/s."
    if _close(got, peak_tflops * 1e12 / (bandwidth_gbs * 2**30)):
        return ("Did you use 2³⁰ bytes per GB? Datasheet bandwidths are in GB/s, 10⁹ bytes/s "
                "(GiB are for memory sizes).")
    for factor in (1e-3, 1e3, 1e9, 1e-9, 1e12, 1e-12, 1e6, 1e-6):
        if _close(got, expected * factor):
            return (f"That is {factor:g}× the right value: mind the units. Convert both to base units "
                    f"first: {peak_tflops:g} TFLOP/s = {peak_tflops:g}e12 FLOP/s and "
                    f"{bandwidth_gbs:g} GB/s = {bandwidth_gbs:g}e9 bytes/s.")
    if _close(got, T4_FP32_FLOPS / T4_BANDWIDTH):
        return ("That is the T4's ridge point: did you type in the T4's numbers? Use the arguments "
                "peak_tflops and bandwidth_gbs, so that the function works for every GPU.")
    return "Ridge = peak FLOP/s ÷ bandwidth in bytes/s; it does not depend on n."


def _intensity_mistake(got: float, n: int) -> str:
    flops, nbytes = 2 * n**3, 3 * n * n * BYTES_FP32
    expected = flops / nbytes
    if _close(got, expected / 2):
        return ("Did you count n³ FLOPs, or 8 bytes per number? A matmul is 2·n³ FLOPs, and a float32 "
                "is 4 bytes.")
    if _close(got, expected * BYTES_FP32):
        return "You counted numbers, not bytes: each float32 is 4 bytes."
    if _close(got, flops / (n * n * BYTES_FP32)) or _close(got, flops / (2 * n * n * BYTES_FP32)):
        return "Count the bytes of all three matrices: read A, read B, write C = 3·n²·4 bytes."
    if _close(got, 1 / expected):
        return "Upside down: intensity is FLOPs ÷ bytes moved."
    if _close(got, 2 * n**2 / nbytes) or _close(got, n**2 / nbytes):
        return "The FLOPs of an n×n matmul grow as n³ (2·n³), not n²."
    if _close(got, Q2_N / 6):
        return (f"That is the intensity for n = {Q2_N}: did you type in n = {Q2_N}? Use the argument n, "
                "so that the function works for every size.")
    return "Intensity = FLOPs ÷ bytes = 2·n³ ÷ (3·n²·4); it does not depend on the GPU."


def _check_roofline(fn) -> str:
    require_function(fn, "roofline")
    verdicts = []
    for gpu, peak, bandwidth, n in Q2_CASES:
        what = f"roofline({n}, {peak:g}, {bandwidth:g})"
        context = f"for an n = {n} matmul on the {gpu} ({peak:g} TFLOP/s, {bandwidth:g} GB/s)"
        result = _call(fn, n, peak, bandwidth, what=what, parts=("ridge", "intensity", "bound"))
        if isinstance(result, (str, bytes)) or not isinstance(result, (tuple, list)) or len(result) != 3:
            raise Wrong(f"{what} returned {type(result).__name__} {result!r}; return three values: "
                        "ridge, intensity, bound.")
        ridge, intensity, bound = result

        if is_blank(ridge):
            raise NotDone("ridge is still ____.")
        got = as_number(f"ridge from {what}", ridge)
        expected_ridge = peak * 1e12 / (bandwidth * 1e9)
        if not _close(got, expected_ridge):
            raise Wrong(f"ridge is {got:.4g} {context}, expected {expected_ridge:.4g} FLOP/byte. "
                        + _ridge_mistake(got, peak, bandwidth))

        if is_blank(intensity):
            raise NotDone("intensity is still ____.")
        got = as_number(f"intensity from {what}", intensity)
        expected_intensity = 2 * n**3 / (3 * n * n * BYTES_FP32)
        if not _close(got, expected_intensity):
            raise Wrong(f"intensity is {got:.4g} {context}, expected {expected_intensity:.4g} FLOP/byte. "
                        + _intensity_mistake(got, n))

        verdicts.append((bound, _bound_word(bound, what), expected_ridge, expected_intensity, n, context))

    words = [v[1] for v in verdicts]
    right = ["compute" if i > r else "memory" for _, _, r, i, _, _ in verdicts]
    if words != right:
        if len(set(words)) == 1:
            tip = (f" You answered {words[0]!r} for all {len(words)} cases: decide from the numbers, by "
                   "comparing the intensity with the ridge point.")
        elif all(w != e for w, e in zip(words, right)):
            tip = (" Every verdict is the wrong way round: intensity above the ridge means enough work per "
                   "byte to keep the arithmetic busy, so compute-bound.")
        elif words == ["compute" if n > r else "memory" for _, _, r, _, n, _ in verdicts]:
            tip = " Did you compare n itself with the ridge point? Compare the intensity."
        else:
            tip = ""
        for (bound, word, ridge_, intensity_, n, context), expected in zip(verdicts, right):
            if word != expected:
                side = "above" if expected == "compute" else "below"
                raise Wrong(f"bound is {bound!r} {context}, expected {expected!r}: the intensity "
                            f"({intensity_:.3g} FLOP/byte) is {side} the ridge point "
                            f"({ridge_:.3g} FLOP/byte), so the matmul is {expected}-bound.{tip}")
    ridge = T4_FP32_FLOPS / T4_BANDWIDTH
    return (f"at n = {Q2_N} a matmul does {Q2_N / 6:.3g} FLOP per byte, below the T4's ridge of "
            f"{ridge:.3g}: memory-bound. Above n ≈ 6 × {ridge:.3g} ≈ {6 * ridge:.0f} it becomes "
            "compute-bound (in this simple model; small matmuls also pay launch latency).")


q2 = Exercise(
    "ep01.q2",
    _check_roofline,
    hint="Put everything in base units first (FLOP/s and bytes/s: tera = 10¹², giga = 10⁹). "
         "A matmul reads A and B and writes C, and each float32 number takes 4 bytes.",
    solution=solution_link(NOTEBOOK),
)


# --------------------------------------------------------------------------- q3
class _FakeDevice:
    """A pretend GPU: work is queued at once and only finished when ``sync()`` waits for it.

    It records what the timer did: when ``fn`` was called and when ``sync`` was.
    """

    def __init__(self):
        self.busy_until = time.perf_counter()
        self.events: list[str] = []

    def queue(self, seconds: float) -> None:
        self.busy_until = max(self.busy_until, time.perf_counter()) + seconds

    def sync(self, *args, **kwargs) -> None:
        self.events.append("sync")
        remaining = self.busy_until - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)

    def synced_before_fn(self) -> bool:
        return "fn" in self.events and "sync" in self.events[: self.events.index("fn")]

    def synced_after_fn(self) -> bool:
        return "fn" in self.events and "sync" in self.events[self.events.index("fn") + 1:]


#: Seconds of earlier work already queued when the timer is called.
PENDING_S = 0.4
#: Ranges of seconds of the work being timed: a short and a long case whose accepted windows
#: ([0.9·work, work + pending/2]) do not overlap, so no constant passes both.
WORK_RANGES_S = [(0.03, 0.05), (0.30, 0.35)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _check_timer(time_once) -> str:
    require_function(time_once, "time_once")
    rng = random.Random()
    results = []
    for low, high in WORK_RANGES_S:
        work = round(rng.uniform(low, high), 3)
        device = _FakeDevice()
        device.queue(PENDING_S)

        def fn(*args, _device=device, _work=work, **kwargs):
            _device.events.append("fn")
            _device.queue(_work)

        what = "time_once(fn, sync)"
        got = as_number(what, _call(time_once, fn, device.sync, what=what))
        calls = device.events.count("fn")
        if calls == 0:
            raise Wrong(f"time_once never called fn, so it cannot have timed its work (it returned {got!r}). "
                        "Call fn() exactly once, between the two clock readings.")
        if calls != 1:
            raise Wrong(f"time_once called fn {calls} times; call it exactly once "
                        "(benchmark() does the repeating).")
        says = f"your timer returned {got:.4g} s, but the queued work took {_ms(work)} ({work:g} s)"
        if got < 0:
            raise Wrong(f"{says}. A negative time: subtract the start from the end, "
                        "time.perf_counter() - start.")
        if got < 0.9 * work:
            if device.synced_after_fn():
                raise Wrong(f"{says}. You do call sync() after fn(), but the time misses the wait. Did you "
                            "read the clock before that sync(), use a clock that does not count waiting "
                            "(time.process_time), or return a number you typed in? Return "
                            "time.perf_counter() - start, read after the sync().")
            if got > 0.02:
                raise Wrong(f"{says}. Your timer never waited for the device (no sync() after fn()), so "
                            "it cannot have measured that: did you type in a number? Call sync() after "
                            "fn(), then return the time you measured.")
            raise Wrong(f"{says}. fn() only QUEUES the work and returns at once; call sync() (with "
                        "brackets) after fn() and before reading the clock again.")
        if got > work + PENDING_S / 2:
            if 0.9 * work <= got / 1e3 <= work + PENDING_S:
                raise Wrong(f"{says}. It looks like milliseconds: return seconds "
                            "(time.perf_counter() counts in seconds).")
            if 0.9 * work <= got / 1e9 <= work + PENDING_S:
                raise Wrong(f"{says}. It looks like nanoseconds (perf_counter_ns?): return seconds.")
            if got > 100 * (work + PENDING_S):
                raise Wrong(f"{says}. That looks like a clock reading, not a duration: return "
                            "end − start, both from time.perf_counter().")
            if not device.synced_after_fn():
                raise Wrong(f"{says}. Your timer never waited for the device (no sync() after fn()), so "
                            "it cannot have measured that: did you type in a number? Call sync() before "
                            "and after fn(), then return the time you measured.")
            if device.synced_before_fn():
                raise Wrong(f"{says}: it also counted {_ms(PENDING_S)} of earlier work still in the "
                            "queue. You call sync() before fn(), but did you read the start time "
                            "before that sync()? Wait first, then start the clock.")
            raise Wrong(f"{says}: it also counted {_ms(PENDING_S)} of earlier work still in the queue. "
                        "Call sync() BEFORE reading the start time too.")
        results.append((work, got))
    shown = " and ".join(f"{got * 1e3:.0f} ms for {_ms(work)}" for work, got in results)
    return (f"measured {shown} of queued work: waiting before and after is what "
            "gpucourse.timing.benchmark does for every repeat.")


q3 = Exercise(
    "ep01.q3",
    _check_timer,
    hint="Two kinds of queued work spoil the naive timer: fn's own work, still running when the "
         "clock is read, and work queued before the timer was called. sync() waits for everything "
         "queued so far: at which two moments must the timer wait?",
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
        items = answer.replace(",", " ").split() if (" " in answer or "," in answer) else list(answer)
    elif isinstance(answer, (set, frozenset, list, tuple)):
        items = list(answer)
    else:
        raise Wrong(f"true_claims should be a set of letters such as {{'a', 'b'}}, got "
                    f"{type(answer).__name__} {answer!r}.")
    letters = set()
    for item in items:
        if is_blank(item):
            raise NotDone("true_claims still contains ____.")
        if not isinstance(item, str):
            raise Wrong(f"true_claims should contain letters (strings such as 'a'), found "
                        f"{type(item).__name__} {item!r}.")
        letters.add(item.strip().lower())
    letters.discard("")
    unknown = sorted(letters - set(CLAIMS))
    if unknown:
        raise Wrong(f"unknown claim(s) {unknown}; the claims are the letters {sorted(CLAIMS)}.")
    return letters


def _check_claims(answer) -> str:
    chosen = _letters(answer)
    if not chosen:
        raise Wrong("true_claims is empty; some of the claims are true.")
    true = {k for k, (ok, _) in CLAIMS.items() if ok}
    if chosen == set(CLAIMS):
        raise Wrong("you marked every claim true; some of them are myths. Look again at each one.")
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
