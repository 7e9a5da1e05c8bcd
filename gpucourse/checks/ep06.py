"""Checks for episode 6, "Faster training".

``q1`` a mixed-precision training step (autocast + GradScaler) · ``q2`` compile time and
steady-state step time from a list of step times · ``q3`` read a profile: the op with the most
self time · ``q4`` (capstone) diagnose and fix a slow training loop.

Every check calls the learner's function on fixtures of its own, several of them, so a constant
or an answer right on one case cannot pass. ``q4`` times the learner's loop against
``slow_train`` itself, on this machine, and compares the losses and the trained weights with
those of the original loop.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time

import numpy as np

from ..exercises import Exercise, NotDone, Wrong, as_number, is_blank, solution_link
from ..exercises import call_answer as _call

NOTEBOOK = "06-faster-training.ipynb"


def _require_function(fn, name: str) -> None:
    if is_blank(fn):
        raise NotDone(f"replace ____ with your function {name}.")
    if not callable(fn):
        raise Wrong(f"pass the function itself, {name} (no brackets, no arguments); got {type(fn).__name__}.")


# --- q1: a mixed-precision step ------------------------------------------------------------

class _SpyScaler:
    """Stands in for ``torch.amp.GradScaler``: scales by 1024 and records every call."""

    SCALE = 1024.0

    def __init__(self, log):
        self.log = log

    def scale(self, loss):
        self.log.append("scale")
        return loss * self.SCALE

    def step(self, optimizer):
        import torch

        self.log.append("scaler.step")
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad /= self.SCALE
        optimizer._gpucourse_via_scaler = True
        try:
            optimizer.step()
        finally:
            optimizer._gpucourse_via_scaler = False

    def update(self):
        self.log.append("update")

    def unscale_(self, optimizer):  # allowed, e.g. before gradient clipping; step() then must not unscale again
        raise Wrong("this exercise does not clip gradients: call scaler.step(optimizer) without unscale_().")


def _amp_fixture(seed: int, log):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))

    def record(module, inputs):
        log.append(("forward", torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))

    model.register_forward_pre_hook(record)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    real_step = optimizer.step

    def step(*args, **kwargs):
        log.append("optimizer.step" if not getattr(optimizer, "_gpucourse_via_scaler", False) else "inner step")
        return real_step(*args, **kwargs)

    optimizer.step = step
    g = torch.Generator().manual_seed(seed + 1)
    X = torch.randn(32, 6, generator=g)
    y = (torch.rand(32, generator=g) > 0.5).float()
    return model, optimizer, X, y


_STALE = 2000.0   # a gradient left over from an earlier step


def _reference_amp_params(seed, dtype, zero_grad: bool = True):
    """The weights after one right step; with ``zero_grad=False`` those after forgetting zero_grad."""
    import torch
    from torch import nn

    model, optimizer, X, y = _amp_fixture(seed, [])
    for p in model.parameters():
        p.grad = torch.full_like(p, _STALE / _SpyScaler.SCALE)
    if zero_grad:
        optimizer.zero_grad()
    with torch.autocast(device_type="cpu", dtype=dtype):
        loss = nn.functional.binary_cross_entropy_with_logits(model(X).squeeze(1), y)
    loss.backward()
    optimizer.step()
    return [p.detach().clone() for p in model.parameters()], loss.item()


def _check_amp_step(amp_step):
    import torch

    _require_function(amp_step, "amp_step")
    for seed, dtype in ((0, torch.bfloat16), (7, torch.float16)):
        log = []
        model, optimizer, X, y = _amp_fixture(seed, log)
        for p in model.parameters():   # gradients left over from an earlier step
            p.grad = torch.full_like(p, _STALE)
        before = [p.detach().clone() for p in model.parameters()]
        result = _call(amp_step, model, optimizer, _SpyScaler(log), X, y, "cpu", dtype,
                       what=f"amp_step(model, optimizer, scaler, X, y, 'cpu', {dtype})")
        if isinstance(result, torch.Tensor):
            raise Wrong("amp_step returned a tensor; return the loss as a Python float with loss.item().")
        loss_value = as_number("the loss amp_step returned", result)
        forwards = [e for e in log if isinstance(e, tuple)]
        calls = [e for e in log if isinstance(e, str)]
        if not forwards:
            raise Wrong("amp_step never ran the model on X.")
        if not all(enabled for _, enabled, _ in forwards):
            raise Wrong("the forward pass ran without autocast on the CPU: wrap the forward pass and the loss in "
                        "`with torch.autocast(device_type=device_type, dtype=dtype):` and use the device_type you "
                        "were given (not 'cuda', and not the deprecated torch.cuda.amp.autocast).")
        if any(d != dtype for _, _, d in forwards):
            raise Wrong(f"autocast ran in {forwards[0][2]}, but this call asked for {dtype}: pass dtype=dtype "
                        "instead of hard-coding one.")
        if "optimizer.step" in calls:
            raise Wrong("you called optimizer.step() yourself: with a GradScaler call scaler.step(optimizer), which "
                        "unscales the gradients first and skips the step if they contain inf or NaN.")
        if "scale" not in calls:
            raise Wrong("the loss was not scaled: call scaler.scale(loss).backward(), not loss.backward(). Loss "
                        "scaling keeps small float16 gradients from rounding to zero.")
        if "scaler.step" not in calls:
            raise Wrong("the optimizer never stepped: call scaler.step(optimizer).")
        if "update" not in calls:
            raise Wrong("scaler.update() was never called: without it the scale never adapts.")
        if calls.index("update") < calls.index("scaler.step"):
            raise Wrong("scaler.update() came before scaler.step(optimizer): step first, then update.")
        after = [p.detach() for p in model.parameters()]
        if all(torch.equal(a, b) for a, b in zip(before, after)):
            raise Wrong("the weights did not change: did the scaled loss go through .backward()?")
        want, want_loss = _reference_amp_params(seed, dtype)
        stale, _ = _reference_amp_params(seed, dtype, zero_grad=False)
        if not all(torch.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(after, want)):
            if all(torch.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(after, stale)):
                raise Wrong("the weights moved by more than one step's gradient: gradients from an earlier step were "
                            "still there. Call optimizer.zero_grad() at the start of the step.")
            raise Wrong("the weights differ from one autocast step: check the order zero_grad → autocast forward → "
                        "scaler.scale(loss).backward() → scaler.step → scaler.update.")
        if abs(loss_value - want_loss) > 1e-2 * max(1.0, abs(want_loss)):
            raise Wrong(f"amp_step returned {loss_value:.4g}, but the loss of this batch is {want_loss:.4g}: return "
                        "the unscaled loss (loss.item(), not the scaled one).")
    return ("autocast ran the forward pass in the dtype asked for, the scaled loss went backward, and "
            "scaler.step/update did the rest, for bfloat16 and float16 alike.")


q1 = Exercise("ep06.q1", _check_amp_step,
              hint="optimizer.zero_grad(); `with torch.autocast(device_type=device_type, dtype=dtype):` compute "
                   "the loss; then scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update(); "
                   "return loss.item().",
              solution=solution_link(NOTEBOOK))


# --- q2: compile time and steady state -------------------------------------------------------

def compile_report_reference(step_times, warmup):
    steady = statistics.median(step_times[warmup:])
    return sum(step_times[:warmup]) - warmup * steady, steady


_Q2_CASES = [
    ([31.0, 2.4, 0.011, 0.010, 0.012, 0.50, 0.010, 0.011], 2),
    ([1.30, 0.40, 0.41, 0.39, 0.90, 0.40, 0.42], 1),
    ([12.0, 0.8, 0.5, 0.021, 0.020, 0.019, 0.022, 0.020, 0.35], 3),
]

_Q2_DIAGNOSES = [
    (lambda t, w: (sum(t[:w]) - w * statistics.mean(t[w:]), statistics.mean(t[w:])),
     "your steady-state time is a mean: one slow step (the machine was busy) pulls it up. Use the median."),
    (lambda t, w: (sum(t[:w]) - w * min(t[w:]), min(t[w:])),
     "your steady-state time is the fastest step (min); this exercise asks for the median of the steps after warm-up."),
    (lambda t, w: (sum(t[:w]) - w * statistics.median(t), statistics.median(t)),
     "your steady-state median includes the warm-up steps; take the median of step_times[warmup:] only."),
    (lambda t, w: (t[0] - statistics.median(t[1:]), statistics.median(t[1:])),
     "you treated only the first step as warm-up; use the `warmup` argument (later steps can recompile too)."),
    (lambda t, w: (sum(t[:w]), statistics.median(t[w:])),
     "your compile time still contains the ordinary work of the warm-up steps: subtract warmup × the steady time."),
    (lambda t, w: (t[0], statistics.median(t[w:])),
     "your compile time is the first step alone: add up all `warmup` steps and subtract their ordinary work."),
]


def _check_compile_report(compile_report):
    _require_function(compile_report, "compile_report")
    for times, warmup in _Q2_CASES:
        got = _call(compile_report, list(times), warmup, what=f"compile_report({times}, warmup={warmup})")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"compile_report should return two numbers (compile_seconds, steady_seconds); got {got!r}.")
        compile_s = as_number("compile_seconds", got[0])
        steady_s = as_number("steady_seconds", got[1])
        want_c, want_s = compile_report_reference(times, warmup)

        def close(a, b):
            return abs(a - b) <= 1e-6 + 1e-6 * abs(b)

        if close(compile_s, want_c) and close(steady_s, want_s):
            continue
        if close(compile_s, want_s) and close(steady_s, want_c):
            raise Wrong("you returned (steady_seconds, compile_seconds): the compile time comes first.")
        if close(compile_s, 1e3 * want_c) or close(steady_s, 1e3 * want_s):
            raise Wrong("your result looks like milliseconds; return seconds, as step_times are.")
        for rule, message in _Q2_DIAGNOSES:
            rc, rs = rule(times, warmup)
            if close(compile_s, rc) and close(steady_s, rs):
                raise Wrong(message)
        raise Wrong(f"for step_times={times} and warmup={warmup} expected ({want_c:.4g}, {want_s:.4g}) s, got "
                    f"({compile_s:.4g}, {steady_s:.4g}) s.")
    return "right on three sets of step times: compile cost kept out of the steady-state figure."


q2 = Exercise("ep06.q2", _check_compile_report,
              hint="steady = statistics.median(step_times[warmup:]); compile = sum(step_times[:warmup]) "
                   "- warmup * steady.",
              solution=solution_link(NOTEBOOK))


# --- q3: read a profile ----------------------------------------------------------------------

def _workloads():
    import torch

    def matmuls():
        a, b = torch.randn(384, 384), torch.randn(384, 384)
        x = torch.zeros(4)
        for _ in range(60):
            x = x + 1          # many cheap calls: aten::add has the highest count
        for _ in range(4):
            a @ b
        return x

    def sorting():
        v = torch.randn(600_000)
        x = torch.ones(4)
        for _ in range(60):
            x = x * 1.0001
        torch.sort(v)
        return x

    def exps():
        v = torch.randn(1_500_000)
        x = torch.zeros(4)
        for _ in range(60):
            x = x - 1
        for _ in range(3):
            torch.exp(v)
        return x

    return [("matmuls", matmuls, "aten::mm"), ("sorting", sorting, "aten::sort"), ("exps", exps, "aten::exp")]


def _profile(fn):
    from torch.profiler import ProfilerActivity, profile, record_function

    fn()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("workload"):
            fn()
    return prof


def _check_top_op(top_op):
    _require_function(top_op, "top_op")
    with one_thread():
        return _compare_top_op(top_op)


def _compare_top_op(top_op):
    for label, fn, expected in _workloads():
        prof = _profile(fn)
        events = prof.key_averages()
        truth = max(events, key=lambda e: e.self_cpu_time_total).key
        if truth != expected:   # a very busy machine can reorder ops; the profile itself is the truth
            expected = truth
        got = _call(top_op, prof, what=f"top_op(profile of the {label} workload)")
        if not isinstance(got, str):
            if hasattr(got, "key") and hasattr(got, "self_cpu_time_total"):
                raise Wrong("top_op returned a whole profiler event; return its name, event.key (a str).")
            raise Wrong(f"top_op should return an op's name as a str such as 'aten::mm'; got "
                        f"{type(got).__name__} {got!r:.60}.")
        if got == expected:
            continue
        by = {
            "inclusive": max(events, key=lambda e: e.cpu_time_total).key,
            "count": max(events, key=lambda e: e.count).key,
            "least": min(events, key=lambda e: e.self_cpu_time_total).key,
            "first": events[0].key,
        }
        if got == by["inclusive"]:
            raise Wrong(f"you sorted by cpu_time_total, the inclusive time: '{got}' includes every op called inside "
                        "it. Sort by self_cpu_time_total, the time spent in the op itself.")
        if got == by["count"]:
            raise Wrong(f"'{got}' is the op called most often (count), not the one that took the most time. Sort by "
                        "self_cpu_time_total.")
        if got == by["least"]:
            raise Wrong(f"'{got}' took the LEAST self time: take the max, not the min (or sort descending).")
        if label != "matmuls" and got in ("aten::mm", "aten::addmm", "aten::matmul", "aten::linear"):
            raise Wrong(f"top_op said '{got}' for a workload without large matrix products: the answer must come from "
                        "the profile you are given, not a fixed name.")
        if got.startswith("ProfilerStep") or got == "workload":
            raise Wrong(f"'{got}' is a label around the work, not an op; sort by self_cpu_time_total.")
        if got == by["first"]:
            raise Wrong(f"'{got}' is just the first row of key_averages(), which is not sorted by time.")
        raise Wrong(f"for the {label} workload the op with the most self CPU time is '{expected}', your function "
                    f"said '{got}'.")
    return "right on three profiles (a matrix product, a sort, an elementwise exp) you had not seen."


q3 = Exercise("ep06.q3", _check_top_op,
              hint="prof.key_averages() is a list of events; each has .key (the name) and .self_cpu_time_total. "
                   "Return max(events, key=lambda e: e.self_cpu_time_total).key.",
              solution=solution_link(NOTEBOOK))


# --- q4: the capstone, a slow training loop --------------------------------------------------

def slow_train(model, X, y, steps, batch_size, lr=0.05):
    """Train ``model`` for ``steps`` SGD steps on consecutive batches of ``(X, y)``; return the losses.

    Correct, but deliberately slow. ``X`` is a NumPy float64 array (events × features), ``y`` a
    NumPy array of 0/1 labels. Batch ``k`` is rows ``(k mod n_batches) * batch_size`` onwards,
    standardised with the mean and standard deviation of the whole of ``X``.
    """
    import torch
    from torch import nn

    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()
    n_batches = len(X) // batch_size
    losses = []
    for step in range(steps):
        X_std = (X - X.mean(axis=0)) / X.std(axis=0)        # the whole table, again, every step
        first = (step % n_batches) * batch_size
        rows = range(first, first + batch_size)
        xb = torch.stack([torch.tensor(X_std[i], dtype=torch.float32) for i in rows])   # one event at a time
        yb = torch.tensor([float(y[i]) for i in rows], dtype=torch.float32)
        optimizer.zero_grad()
        loss = loss_fn(model(xb).squeeze(1), yb)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())                          # waits for the device, every step
    return losses


def capstone_data(seed: int, n: int = 40_000, features: int = 15):
    """A fixture: features of different scales and a label that depends on them."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, features)) * rng.uniform(0.5, 50.0, size=features) + rng.uniform(-20, 20, size=features)
    logit = ((X - X.mean(0)) / X.std(0)) @ rng.normal(size=features)
    y = (logit + rng.normal(size=n) > 0).astype(np.int64)
    return X, y


def capstone_model(seed: int, features: int = 15, width: int = 64):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 1))


REQUIRED_SPEEDUP = 3.0
_Q4_CASES = [  # seed, events, batch size, steps
    (11, 40_000, 256, 60),
    (12, 9_000, 100, 95),    # steps wrap around: 90 batches per pass
]


def _losses(result, steps, what):
    import torch

    if isinstance(result, (torch.Tensor, np.ndarray)):
        result = list(result.reshape(-1)) if getattr(result, "ndim", 0) == 1 else result
    if not isinstance(result, (list, tuple)):
        raise Wrong(f"{what} should return the list of losses, one per step; got {type(result).__name__}.")
    if len(result) != steps:
        raise Wrong(f"{what} returned {len(result)} losses for {steps} steps: every step must still run (no cut "
                    "steps, no skipped batches), and each must report its loss.")
    return [as_number(f"loss {i}", v.detach() if isinstance(v, torch.Tensor) else v) for i, v in enumerate(result)]


def _run_case(fast_train, seed, n, batch, steps):
    import torch

    X, y = capstone_data(seed, n)
    original = capstone_model(seed)
    theirs = copy.deepcopy(original)
    want_model = copy.deepcopy(original)
    want = slow_train(want_model, X.copy(), y.copy(), steps, batch)
    X_in, y_in = X.copy(), y.copy()
    what = f"fast_train(model, X, y, steps={steps}, batch_size={batch})"
    got = _losses(_call(fast_train, theirs, X_in, y_in, steps, batch, what=what), steps, what)
    if not (np.array_equal(X_in, X) and np.array_equal(y_in, y)):
        raise Wrong("fast_train changed X or y in place; standardise into a new array.")
    params, ref_params, start = list(theirs.parameters()), list(want_model.parameters()), list(original.parameters())
    if [p.shape for p in params] != [p.shape for p in ref_params]:
        raise Wrong("the model's layers changed shape: a fix may not change the model.")
    if all(torch.equal(p, q) for p, q in zip(params, start)):
        raise Wrong("the model you were given is untrained after fast_train: train that model (not a new one or a "
                    "copy), and do not wrap the training in torch.no_grad().")
    for i, (g, w) in enumerate(zip(got, want)):
        if abs(g - w) > 2e-6 * max(1.0, abs(w)):
            where = "the first loss already differs" if i == 0 else f"the losses part from step {i} on"
            raise Wrong(f"loss {i} is {g:.6g}, the original loop's is {w:.6g}: {where}. Keep what is computed: the "
                        "same model, the same optimizer (SGD, lr=0.05) with zero_grad every step, the same batches "
                        "in the same order (consecutive, wrapping around after the last full batch, no shuffling), "
                        "standardised with the mean and std of the whole X, in float32. A fix changes how fast, "
                        "not what.")
    for p, q in zip(params, ref_params):
        if not torch.allclose(p, q, rtol=1e-4, atol=1e-5):
            raise Wrong("the losses match but the trained weights differ from the original loop's: every step must "
                        "update the model you were given, exactly as slow_train does.")
    return X, y, original


@contextlib.contextmanager
def one_thread():
    """Run PyTorch on one CPU thread for a while.

    On a machine whose cores are busy with other work, PyTorch's threads wait for one another at
    every small op and a loop can run 100× slower, at random. One thread makes the comparison of two
    loops fair and repeatable; both are timed the same way.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _time(fn, reps):
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _check_fast_train(fast_train):
    _require_function(fast_train, "fast_train")
    if fast_train is slow_train:
        raise Wrong("that is slow_train itself; write fast_train.")
    with one_thread():
        return _compare_fast_train(fast_train)


def _compare_fast_train(fast_train):
    for seed, n, batch, steps in _Q4_CASES:
        _run_case(fast_train, seed, n, batch, steps)
    seed, n, batch, steps = _Q4_CASES[0]
    X, y = capstone_data(seed, n)
    original = capstone_model(seed)
    # Interleave the two measurements, best of several, so a machine busy for a while slows both.
    slow_s, fast_s = float("inf"), float("inf")
    for _ in range(3):
        slow_s = min(slow_s, _time(lambda: slow_train(copy.deepcopy(original), X, y, steps, batch), 1))
        fast_s = min(fast_s, _time(lambda: fast_train(copy.deepcopy(original), X, y, steps, batch), 2))
    speedup = slow_s / fast_s
    if speedup < REQUIRED_SPEEDUP:
        raise Wrong(f"same losses and weights, but {steps} steps took {fast_s:.3f} s against the original's "
                    f"{slow_s:.3f} s here: {speedup:.1f}×, and the goal is at least {REQUIRED_SPEEDUP:g}×. Profile "
                    "it: what does slow_train do every step that it could do once?")
    return (f"same losses and the same trained weights as the original, and {speedup:.0f}× faster on this machine "
            f"({fast_s * 1e3:.0f} ms against {slow_s * 1e3:.0f} ms for {steps} steps, both on one CPU thread).")


q4 = Exercise("ep06.q4", _check_fast_train,
              hint="Everything slow_train does with the whole of X every step (standardise it, turn rows into "
                   "tensors one by one) can be done once, before the loop: X_std as one float32 tensor, y as one "
                   "tensor, then slice batches. Keep the losses as tensors and call .item() once at the end.",
              solution=solution_link(NOTEBOOK))

__all__ = ["q1", "q2", "q3", "q4", "slow_train", "capstone_data", "capstone_model", "compile_report_reference",
           "REQUIRED_SPEEDUP", "one_thread"]
