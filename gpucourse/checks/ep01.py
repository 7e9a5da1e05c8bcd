"""Checks for episode 1, *What is a GPU?*.

* ``q1`` — ``linear_step(batch, d_in, d_out, seconds)``: the FLOPs of a Linear layer's training step
  (forward and backward) and the TFLOP/s a measured step time means.
* ``q2`` — ``linear_roofline(batch, d_in, d_out, dtype_bytes, peak_tflops, bandwidth_gbs)``: the
  roofline applied to a Linear layer (from a matrix–vector product to a large batch): arithmetic
  intensity, compute- or memory-bound, and the shortest time it can take, on GPUs of the episode's table.
* ``q3`` — ``time_once(fn, sync)``: a timer that is right for asynchronous devices, measured
  against a simulated GPU whose queue the check fills itself.
* ``q4`` — which claims about GPUs are true.

Every check that takes a function calls it on several cases, so that a constant, or an answer
that is right for one case only, cannot pass, and names the usual mistakes (a forgotten backward
pass, a multiply-add counted as one FLOP, bytes vs numbers, 10¹² vs 2⁴⁰, GB vs GiB). The GPU figures
are those of the episode's GPU table (NVIDIA datasheets).
"""

from __future__ import annotations

import random
import time

from gpucourse.exercises import (
    Exercise,
    NotDone,
    Wrong,
    as_number,
    describe,
    is_blank,
    require_function,
    solution_link,
)
from gpucourse.exercises import call_answer as _call

NOTEBOOK = "01-what-is-a-gpu.ipynb"



def _close(got: float, expected: float, rel: float = 0.02) -> bool:
    if expected == 0:
        return abs(got) <= 1e-12
    return abs(got - expected) <= rel * abs(expected)




# --------------------------------------------------------------------------- q1
#: (batch, d_in, d_out, seconds) cases: square and rectangular layers, small and large batches, rates
#: below 1 TFLOP/s and above. d_in ≥ 256 everywhere, so a bias counted or not changes the FLOPs by at
#: most 1/(3·256) ≈ 0.13 %, inside the tolerance: both answers pass.
Q1_CASES = [(64, 1024, 1024, 2e-4), (512, 4096, 1024, 3e-3), (128, 256, 8192, 1e-4), (4096, 2048, 2048, 0.05)]
Q1_REL = 0.01


def _step_flops(batch: int, d_in: int, d_out: int) -> int:
    """Forward (one product) and backward (two products of the same size) of a Linear layer."""
    return 3 * 2 * batch * d_in * d_out


def _flops_mistake(got: float, batch: int, d_in: int, d_out: int) -> str:
    """What a wrong FLOP count of a Linear layer's training step says about the mistake."""
    forward = 2 * batch * d_in * d_out
    expected = 3 * forward
    ratio = got / expected
    named = [
        (1 / 3, "That is the forward pass alone: a training step also runs backward, which computes TWO "
                "products as big as the forward one (the gradient for the layer's input, passed back to the "
                "layer before, and the gradient for its weights): about twice the forward's FLOPs."),
        (2 / 3, "Backward counted as ONE product: it computes two, the gradient for the input (grad_out × Wᵀ) "
                "and the gradient for the weights (Xᵀ × grad_out), each as big as the forward product."),
        (1 / 2, "Did you count multiply-adds? Each multiply-add is a multiply AND an add: 2 FLOPs."),
        (1 / 6, "That is the multiply-adds of the forward pass alone: count 2 FLOPs per multiply-add, and add "
                "the backward pass (two more products of the same size)."),
        (2.0, "Twice too many: a multiply-add is 2 FLOPs, not 4, and backward is two products, not four."),
        (4 / 3, "Backward counted as three products: it is two (gradients for the input and for the weights)."),
    ]
    for factor, message in named:
        if _close(ratio, factor, rel=Q1_REL):
            return message
    if _close(got, expected / batch, rel=Q1_REL) or _close(got, forward / batch, rel=Q1_REL):
        return ("The FLOPs grow with the batch: every one of the batch's rows goes through the layer, "
                "forward and backward.")
    if _close(got, 6 * batch * (d_in + d_out), rel=Q1_REL) or _close(got, 2 * batch * (d_in + d_out), rel=Q1_REL):
        return ("Each output number is a dot product of length d_in, computed for each of d_out outputs and "
                "each row of the batch: multiply the three sizes, do not add them.")
    return ("Count the multiply-adds of the forward product (batch × d_in) @ (d_in × d_out), 2 FLOPs each, "
            "then the two products backward computes.")


def _rate_mistake(got: float, flops: float, seconds: float) -> str:
    """What a wrong TFLOP/s figure (from right FLOPs) says about the mistake."""
    expected = flops / seconds / 1e12
    if got == 0 or any(got == round(expected, k) != expected for k in range(4)) or got == float(int(expected)):
        return "Did you round, or use // (integer division) or int()? Return the unrounded value."
    named = [
        (1e12 / 2**40, "Tera is 10¹², not 2⁴⁰: FLOP/s use decimal prefixes, like GB/s (the binary ones, "
                       "2³⁰ = GiB, are for memory sizes)."),
        (1e3, "That is 1000× too big: it looks like GFLOP/s. Divide FLOP/s by 1e12 for TFLOP/s."),
        (1e6, "That is 10⁶× too big: it looks like MFLOP/s. Divide FLOP/s by 1e12 (tera = 10¹²)."),
        (1e12, "That is FLOP/s; divide by 1e12 to get TFLOP/s."),
        (1e-3, "That is 1000× too small. Did you turn seconds into milliseconds, or divide by 1e15? "
               "`seconds` is already in seconds, and tera = 10¹²."),
    ]
    for factor, message in named:
        if _close(got, expected * factor):
            return message
    if _close(got, flops / 1e12):
        return "Did you forget to divide by seconds? A rate is work / time."
    if _close(got, 1 / expected) or _close(got, seconds * 1e12 / flops):
        return "The fraction is upside down: a rate is work / time, FLOPs / seconds."
    return "TFLOP/s = FLOPs / seconds / 1e12."


def _check_linear_step(fn) -> str:
    require_function(fn, "linear_step")
    results = []
    for batch, d_in, d_out, seconds in Q1_CASES:
        what = f"linear_step({batch}, {d_in}, {d_out}, {seconds:g})"
        result = _call(fn, batch, d_in, d_out, seconds, what=what, parts=("flops", "tflops"))
        if isinstance(result, (str, bytes)) or not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Wrong(f"{what} returned {describe(result)}; return two values: flops, tflops.")
        results.append(result)
    for (batch, d_in, d_out, seconds), (flops, tflops) in zip(Q1_CASES, results):
        what = f"linear_step({batch}, {d_in}, {d_out}, {seconds:g})"
        if is_blank(flops):
            raise NotDone("flops is still ____.")
        got = as_number(f"flops from {what}", flops)
        expected = _step_flops(batch, d_in, d_out)
        if not _close(got, expected, rel=Q1_REL):
            others = [case for case in Q1_CASES if case[:3] != (batch, d_in, d_out)
                      and _close(got, _step_flops(*case[:3]), rel=Q1_REL)]
            why = (f"That is the count for linear_step{others[0][:3]}: did you type in numbers? Use the "
                   "arguments." if others else _flops_mistake(got, batch, d_in, d_out))
            raise Wrong(f"flops is {got:.4g} for {what}, expected {expected:.4g}. {why}")
        if is_blank(tflops):
            raise NotDone("tflops is still ____.")
        rate = as_number(f"tflops from {what}", tflops)
        expected_rate = expected / seconds / 1e12
        if not _close(rate, expected_rate, rel=Q1_REL):
            raise Wrong(f"tflops is {rate:.4g} for {what}, expected {expected_rate:.4g} TFLOP/s. "
                        + _rate_mistake(rate, got, seconds))
    if len({float(r[1]) for r in results}) == 1:      # cannot happen with right answers; a guard
        raise Wrong("tflops is the same for every case: compute it from the arguments.")
    return ("forward is one product, 2·batch·d_in·d_out FLOPs, and backward two more of the same size "
            "(the gradients for the input and for the weights): 3× the forward in all. Below, compare the "
            "rate of a measured step with your GPU's peak.")


q1 = Exercise(
    "ep01.q1",
    _check_linear_step,
    hint=("How many multiply-adds does the forward product (batch × d_in) @ (d_in × d_out) do, and how many "
          "FLOPs is one multiply-add? Then: which gradients must backward compute, for the layer before it "
          "and for the layer's own weights?",
          "Forward: one multiply-add for every (row, input, output) triple, 2 FLOPs each. Backward: two "
          "products of the same size as the forward one, one giving the gradient for the input and one for "
          "the weights. Add the three; the rate is those FLOPs divided by the seconds, in units of 10¹² "
          "(tera is decimal, like giga in GB/s)."),
    solution=solution_link(NOTEBOOK),
)


# --------------------------------------------------------------------------- q2
#: (GPU, peak TFLOP/s, GB/s, batch, d_in, d_out, bytes per number): GPUs and precisions of the
#: episode's table (float32 on the FP32 peak, float16 on the dense tensor-core peak), batches on both
#: sides of each ridge, and no case near a ridge (the nearest is 31.5 vs 20 FLOP/byte).
Q2_CASES = [
    ("T4", 8.1, 320, 1, 4096, 4096, 4),
    ("V100", 15.7, 900, 256, 1024, 4096, 4),
    ("T4", 65, 320, 1, 4096, 4096, 2),
    ("A100 80GB", 312, 2039, 4096, 4096, 4096, 2),
    ("L4", 121, 300, 64, 4096, 4096, 2),
    ("H100 SXM", 67, 3350, 64, 8192, 8192, 4),
    ("L4", 30.3, 300, 8, 1024, 1024, 4),
]
Q2_REL = 0.01


def _linear_roofline(batch, d_in, d_out, dtype_bytes, peak_tflops, bandwidth_gbs):
    """The right answer: intensity, bound and floor of Y = X @ W."""
    flops = 2 * batch * d_in * d_out
    nbytes = dtype_bytes * (batch * d_in + d_in * d_out + batch * d_out)
    peak, bandwidth = peak_tflops * 1e12, bandwidth_gbs * 1e9
    intensity = flops / nbytes
    return intensity, ("compute" if intensity > peak / bandwidth else "memory"), max(flops / peak, nbytes / bandwidth)


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


#: Usual mistakes in the intensity, each as what it computes from (batch, d_in, d_out, dtype_bytes).
INTENSITY_MISTAKES = [
    (lambda b, i, o, d: 2 * b * i * o / (4 * (b * i + i * o + b * o)),
     "You used 4 bytes per number for every case; the float16 cases have 2-byte numbers: use the argument "
     "dtype_bytes."),
    (lambda b, i, o, d: b * i * o / (d * (b * i + i * o + b * o)),
     "Did you count multiply-adds? Each is a multiply AND an add: 2 FLOPs."),
    (lambda b, i, o, d: 2 * b * i * o / (b * i + i * o + b * o),
     "You counted numbers, not bytes: multiply by dtype_bytes."),
    (lambda b, i, o, d: 2 * b * i * o / (d * i * o),
     "You counted only the weights' bytes. With a large batch the input X and the output Y are as big as W: "
     "count all three."),
    (lambda b, i, o, d: 2 * b * i * o / (d * (b * i + i * o)),
     "You counted the bytes read (X and W) but not the output Y the product writes: with a large batch "
     "Y is as big as X. Count X, W and Y once each."),
    (lambda b, i, o, d: 2 * b * i * o / (d * (i * o + b * o)),
     "You counted W and Y but not the input X the product reads: count X, W and Y once each."),
    (lambda b, i, o, d: d * (b * i + i * o + b * o) / (2 * b * i * o),
     "Upside down: intensity is FLOPs ÷ bytes moved."),
    (lambda b, i, o, d: i / 6,
     "n/6 is the intensity of a SQUARE n×n matmul in float32 (the episode's case). Here the three matrices "
     "have different shapes: count this product's FLOPs and bytes."),
    (lambda b, i, o, d: 2 * i * o / (d * (b * i + i * o + b * o)),
     "The FLOPs grow with the batch: each row of X is multiplied by all of W."),
]


def _intensity_mistake(answers) -> str:
    """Name the mistake that explains the learner's intensities: the one that matches every case
    answered with a number, else the first that matches the case that failed (the last one given)."""
    cases = [(args, got) for args, got in answers if isinstance(got, (int, float)) and not isinstance(got, bool)]
    for rule, message in INTENSITY_MISTAKES:
        if all(_close(got, rule(*args), rel=Q2_REL) for args, got in cases):
            return message
    args, got = cases[-1]
    for rule, message in INTENSITY_MISTAKES:
        if _close(got, rule(*args), rel=Q2_REL):
            return message
    others = [case for case in Q2_CASES if case[3:] != args
              and _close(got, _linear_roofline(*case[3:], case[1], case[2])[0], rel=Q2_REL)]
    if others:
        return "That is the intensity of another case of the check: did you type in numbers? Use the arguments."
    return "Intensity = the product's FLOPs ÷ the bytes of X, W and Y; it does not depend on the GPU."


def _floor_mistake(got: float, batch, d_in, d_out, dtype_bytes, peak_tflops, bandwidth_gbs) -> str:
    flops = 2 * batch * d_in * d_out
    nbytes = dtype_bytes * (batch * d_in + d_in * d_out + batch * d_out)
    compute_s, memory_s = flops / (peak_tflops * 1e12), nbytes / (bandwidth_gbs * 1e9)
    expected = max(compute_s, memory_s)
    longer = "memory" if memory_s > compute_s else "compute"
    named = [
        (compute_s + memory_s, "You added the two times. On the roofline arithmetic and memory traffic "
                               "overlap: the floor is the LONGER of the two, not their sum."),
        (expected * 1e3, "That looks like milliseconds: return seconds."),
        (expected * 1e6, "That looks like microseconds: return seconds."),
        (nbytes / (bandwidth_gbs * 2**30), "GB/s on a datasheet is 10⁹ bytes/s, not 2³⁰ (GiB are for memory "
                                           "sizes)."),
        (flops / (peak_tflops * 2**40), "Tera is 10¹², not 2⁴⁰."),
        (expected / dtype_bytes, "Did you count numbers instead of bytes in the memory time?"),
        (expected * 1e-3, "1000× too small: mind the units (TFLOP/s = 10¹² FLOP/s, GB/s = 10⁹ bytes/s)."),
    ]
    for value, message in named:
        if _close(got, value, rel=Q2_REL):
            return message
    shorter = "compute" if longer == "memory" else "memory"
    if _close(got, min(compute_s, memory_s), rel=Q2_REL):
        return (f"That is the {shorter} time, the shorter of the two: this case is {longer}-bound, so the "
                f"floor is the LONGER time, the {longer} time.")
    return ("The floor is the longer of two times: the FLOPs at the peak rate, and the bytes at the full "
            "bandwidth.")


def _check_linear_roofline(fn) -> str:
    require_function(fn, "linear_roofline")
    answers = []
    for gpu, peak, bandwidth, batch, d_in, d_out, size in Q2_CASES:
        what = f"linear_roofline({batch}, {d_in}, {d_out}, {size}, {peak:g}, {bandwidth:g})"
        result = _call(fn, batch, d_in, d_out, size, peak, bandwidth, what=what,
                       parts=("intensity", "bound", "floor_s"))
        if isinstance(result, (str, bytes)) or not isinstance(result, (tuple, list)) or len(result) != 3:
            raise Wrong(f"{what} returned {describe(result)}; return three values: intensity, bound, floor_s.")
        answers.append(result)

    verdicts = []
    for (gpu, peak, bandwidth, batch, d_in, d_out, size), (intensity, bound, floor_s) in zip(Q2_CASES, answers):
        what = f"linear_roofline({batch}, {d_in}, {d_out}, {size}, {peak:g}, {bandwidth:g})"
        dtype = {4: "float32", 2: "float16"}[size]
        context = (f"for a batch of {batch} through a {d_in}×{d_out} layer in {dtype} on the {gpu} "
                   f"({peak:g} TFLOP/s, {bandwidth:g} GB/s)")
        args = (batch, d_in, d_out, size)
        right_intensity, right_bound, right_floor = _linear_roofline(*args, peak, bandwidth)
        if is_blank(intensity):
            raise NotDone("intensity is still ____.")
        got = as_number(f"intensity from {what}", intensity)
        if not _close(got, right_intensity, rel=Q2_REL):
            given = [(case[3:], answer[0]) for case, answer in zip(Q2_CASES, answers) if case[3:] != args]
            why = _intensity_mistake(given + [(args, got)])
            raise Wrong(f"intensity is {got:.4g} {context}, expected {right_intensity:.4g} FLOP/byte. " + why)
        verdicts.append((bound, _bound_word(bound, what), right_bound, right_intensity,
                         peak * 1e12 / (bandwidth * 1e9), context))
        if is_blank(floor_s):
            raise NotDone("floor_s is still ____.")
        got = as_number(f"floor_s from {what}", floor_s)
        if not _close(got, right_floor, rel=Q2_REL):
            raise Wrong(f"floor_s is {got:.4g} s {context}, expected {right_floor:.4g} s. "
                        + _floor_mistake(got, batch, d_in, d_out, size, peak, bandwidth))

    words = [v[1] for v in verdicts]
    right = [v[2] for v in verdicts]
    if words != right:
        if len(set(words)) == 1:
            tip = (f" You answered {words[0]!r} for all {len(words)} cases: decide from the numbers, by "
                   "comparing the intensity with this GPU's ridge point.")
        elif all(w != e for w, e in zip(words, right)):
            tip = (" Every verdict is the wrong way round: intensity above the ridge means enough work per "
                   "byte to keep the arithmetic busy, so compute-bound.")
        else:
            tip = ""
        for bound, word, expected, intensity_, ridge_, context in verdicts:
            if word != expected:
                side = "above" if expected == "compute" else "below"
                raise Wrong(f"bound is {bound!r} {context}, expected {expected!r}: the intensity "
                            f"({intensity_:.3g} FLOP/byte) is {side} the ridge point "
                            f"({ridge_:.3g} FLOP/byte), so the layer is {expected}-bound.{tip}")
    return ("with one row (a matrix–vector product, as when a language model generates one token) a layer "
            "reads every weight for 2 FLOPs: memory-bound on every GPU. Its intensity grows with the batch, "
            "and a large batch makes it compute-bound. The floor is the longer of the two times.")


q2 = Exercise(
    "ep01.q2",
    _check_linear_roofline,
    hint=("What does Y = X @ W compute (how many multiply-adds), and which bytes must it move at the very least? "
          "Then: which limit does the layer hit first on this GPU, and how long does that limit alone take?",
          "Intensity is the product's FLOPs (2 per multiply-add) divided by the bytes of X, W and Y "
          "(elements × dtype_bytes). Compare it with the GPU's ridge point, peak FLOP/s ÷ bytes/s, after "
          "converting both to base units (tera = 10¹², giga = 10⁹). The floor is the longer of two times: "
          "the FLOPs at the peak rate, and the bytes at the full bandwidth."),
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


#: Tries of a case whose reading a pause could explain. A busy machine can only add time to a
#: measurement (a process paused, a sleep that wakes late), never take it away, and a real mistake
#: repeats on every try: so such a case passes if one try is right, and the smallest reading is
#: judged. A reading no pause could give (too short, negative, in other units) is judged at once.
TRIES = 3


def _check_timer(time_once) -> str:
    require_function(time_once, "time_once")
    rng = random.Random()
    results = []
    for low, high in WORK_RANGES_S:
        work = round(rng.uniform(low, high), 3)
        failed = []
        for _ in range(TRIES):
            got, device = _time_queued_work(time_once, work)
            mistake = _timer_mistake(got, work, device)
            if mistake is None:
                break
            failed.append((got, mistake))
            if not _a_pause_could_explain(got, work, device):
                break
        if mistake is not None:
            raise Wrong(min(failed)[1])
        results.append((work, got))
    shown = " and ".join(f"{got * 1e3:.0f} ms for {_ms(work)}" for work, got in results)
    return (f"measured {shown} of queued work: waiting before and after is what "
            "gpucourse.timing.benchmark does for every repeat.")


def _time_queued_work(time_once, work: float):
    """Call ``time_once`` on a fake device with PENDING_S of earlier work queued; its reading and the device."""
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
    return got, device


def _a_pause_could_explain(got: float, work: float, device: _FakeDevice) -> bool:
    """Whether a pause of this process could have turned a right reading into ``got``: too long
    for a timer that waited before and after fn, or, for one that never waited after it, long
    enough to be taken for a typed-in number."""
    if device.synced_before_fn() and device.synced_after_fn():
        return work + PENDING_S / 2 < got < 100 * (work + PENDING_S) and not _in_units_of(1e3, got, work)
    return not device.synced_after_fn() and 0.02 < got < 0.9 * work


def _in_units_of(per_second: float, got: float, work: float) -> bool:
    """Whether ``got`` is a plausible reading of ``work`` in units of 1/``per_second`` s (ms, ns)."""
    return 0.9 * work <= got / per_second <= work + PENDING_S


def _timer_mistake(got: float, work: float, device: _FakeDevice) -> str | None:
    """What is wrong with reading ``got`` for ``work`` seconds of queued work (None: nothing)."""
    says = f"your timer returned {got:.4g} s, but the queued work took {_ms(work)} ({work:g} s)"
    if got < 0:
        return (f"{says}. A negative time: subtract the start from the end, "
                "time.perf_counter() - start.")
    if got < 0.9 * work:
        if device.synced_after_fn():
            return (f"{says}. You do call sync() after fn(), but the time misses the wait. Did you "
                    "read the clock before that sync(), use a clock that does not count waiting "
                    "(time.process_time), or return a number you typed in? Return "
                    "time.perf_counter() - start, read after the sync().")
        if got > 0.02:
            return (f"{says}. Your timer never waited for the device (no sync() after fn()), so "
                    "it cannot have measured that: did you type in a number? Call sync() after "
                    "fn(), then return the time you measured.")
        return (f"{says}. fn() only QUEUES the work and returns at once; call sync() (with "
                "brackets) after fn() and before reading the clock again.")
    if got > work + PENDING_S / 2:
        if _in_units_of(1e3, got, work):
            return (f"{says}. It looks like milliseconds: return seconds "
                    "(time.perf_counter() counts in seconds).")
        if _in_units_of(1e9, got, work):
            return f"{says}. It looks like nanoseconds (perf_counter_ns?): return seconds."
        if got > 100 * (work + PENDING_S):
            return (f"{says}. That looks like a clock reading, not a duration: return "
                    "end − start, both from time.perf_counter().")
        if not device.synced_after_fn():
            return (f"{says}. Your timer never waited for the device (no sync() after fn()), so "
                    "it cannot have measured that: did you type in a number? Call sync() before "
                    "and after fn(), then return the time you measured.")
        if device.synced_before_fn():
            return (f"{says}: it also counted {_ms(PENDING_S)} of earlier work still in the "
                    "queue. You call sync() before fn(), but did you read the start time "
                    "before that sync()? Wait first, then start the clock.")
        return (f"{says}: it also counted {_ms(PENDING_S)} of earlier work still in the queue. "
                "Call sync() BEFORE reading the start time too.")
    return None


q3 = Exercise(
    "ep01.q3",
    _check_timer,
    hint=("Two kinds of queued work spoil the naive timer: fn's own work, still running when the clock is "
          "read, and work queued before the timer was called. sync() waits for everything queued so far: at "
          "which two moments must the timer wait?",
          "Wait for the device first, so that earlier work is not counted; only then read the clock. Call fn "
          "once, wait for the device again, and read the clock a second time. The answer is the second "
          "reading minus the first, in seconds."),
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
    "h": (False, "h is false: PyTorch uses one GPU unless you use DDP or FSDP, TensorFlow a tf.distribute "
                 "strategy, XGBoost and cuML a Dask (or Spark) cluster (the library table's last column). Some "
                 "higher-level libraries decide for you: Hugging Face's Trainer wraps the model in "
                 "nn.DataParallel when it sees several GPUs."),
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
    hint=("Which measurement or table of the episode speaks to each claim? A claim with 'every' or 'the way "
          "today' in it needs only one counter-example or one newer fact to be false.",
          "a: the latency section (one tiny addition); b and c: Advice to unlearn; d: the datasheet's footnote "
          "on dense vs sparse; e, f and h: the library table and its last column; g: Compute-bound or "
          "memory-bound?"),
    solution=solution_link(NOTEBOOK),
)

__all__ = ["q1", "q2", "q3", "q4"]
