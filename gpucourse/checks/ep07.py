"""Checks for episode 7, "Faster training".

``q1`` a mixed-precision training step with gradient clipping (autocast + GradScaler) · ``q2`` compile time and
steady-state step time from a list of step times · ``q3`` read a profile: the op with the most
self time · ``q4`` (capstone) diagnose and fix a slow training loop.

Every check calls the learner's function on fixtures of its own, several of them, so a constant
or an answer right on one case cannot pass. ``q4`` runs the learner's loop and ``slow_train``
on the same device (the GPU if there is one, else the CPU), compares the losses and the trained
weights with those of the original loop, and times both on two tables no correctness case used,
counting the steps the model really runs.
"""

from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time

import numpy as np

from ..exercises import Exercise, Wrong, as_number, changes, require_function, snapshot, solution_link, tensors_close
from ..exercises import call_answer as _call

NOTEBOOK = "07-faster-training.ipynb"



# --- q1: a mixed-precision step with gradient clipping ----------------------------------------

class _SpyScaler:
    """Stands in for ``torch.amp.GradScaler``: scales by 1024 and records every call.

    Like the real one, ``unscale_`` divides the gradients by the scale once, ``step`` unscales
    them only if ``unscale_`` was not called since the last ``update``, and a second ``unscale_``
    before ``update`` is an error.
    """

    SCALE = 1024.0

    def __init__(self, log):
        self.log = log
        self.unscaled = self.stepped = False

    def scale(self, loss):
        self.log.append("scale")
        return loss * self.SCALE

    def get_scale(self):
        self.log.append("get_scale")
        return self.SCALE

    def is_enabled(self):
        return True

    def _divide(self, optimizer):
        import torch

        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad /= self.SCALE
        self.unscaled = True

    def unscale_(self, optimizer):
        self.log.append("unscale_")
        if self.stepped:
            raise Wrong("scaler.unscale_(optimizer) came after scaler.step(optimizer): unscale, clip, then step.")
        if self.unscaled:
            raise Wrong("scaler.unscale_(optimizer) was called twice in one step: call it once, before clipping "
                        "(scaler.step knows it was done and does not unscale again).")
        self._divide(optimizer)

    def step(self, optimizer):
        self.log.append("scaler.step")
        self.stepped = True
        if not self.unscaled:
            self._divide(optimizer)
        optimizer._gpucourse_via_scaler = True
        try:
            optimizer.step()
        finally:
            optimizer._gpucourse_via_scaler = False

    def update(self):
        self.log.append("update")
        self.unscaled = self.stepped = False


def _amp_fixture(seed: int, log, device_type: str = "cpu"):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    other = "cpu" if device_type == "cuda" else "cuda"

    def record(module, inputs):
        log.append(("forward", torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type),
                    torch.is_autocast_enabled(other)))

    def record_backward(module, grad_output):
        log.append(("backward", torch.is_autocast_enabled(device_type)))

    model.register_forward_pre_hook(record)
    model[-1].register_full_backward_pre_hook(record_backward)   # the last layer: its input needs a gradient
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    real_step = optimizer.step

    def step(*args, **kwargs):
        log.append("optimizer.step" if not getattr(optimizer, "_gpucourse_via_scaler", False) else "inner step")
        return real_step(*args, **kwargs)

    optimizer.step = step
    g = torch.Generator().manual_seed(seed + 1)
    X = torch.randn(32, 6, generator=g) * 3
    y = (torch.rand(32, generator=g) > 0.5).float()
    return model, optimizer, X, y


_STALE = 2000.0   # a gradient left over from an earlier step


def _reference_amp_update(seed, dtype, max_norm, how="right"):
    """The weight update of one step done ``how``, and the loss.

    ``how``: "right" (unscale, clip, step), "no clip", "clip scaled" (clipping before unscaling),
    "no zero_grad" (a gradient left over from an earlier step).
    """
    import torch
    from torch import nn

    model, optimizer, X, y = _amp_fixture(seed, [])
    for p in model.parameters():
        p.grad = torch.full_like(p, _STALE)
    before = [p.detach().clone() for p in model.parameters()]
    if how != "no zero_grad":
        optimizer.zero_grad()
    with torch.autocast(device_type="cpu", dtype=dtype):
        loss = nn.functional.binary_cross_entropy_with_logits(model(X).squeeze(1), y)
    (loss * _SpyScaler.SCALE).backward()
    if how == "clip scaled":
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    with torch.no_grad():
        for p in model.parameters():
            p.grad /= _SpyScaler.SCALE
    if how in ("right", "no zero_grad"):
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return [p.detach() - b for p, b in zip(model.parameters(), before)], loss.item()


def _same_update(a, b):
    return all(tensors_close(x, y, rtol=2e-2, atol=1e-9) for x, y in zip(a, b))


_Q1_CASES = ((0, "bfloat16", 0.05), (7, "float16", 0.2))   # seed, autocast dtype, max_norm


def _check_amp_step(amp_step):
    import torch

    require_function(amp_step, "amp_step")
    for seed, dtype_name, max_norm in _Q1_CASES:
        dtype = getattr(torch, dtype_name)
        log = []
        model, optimizer, X, y = _amp_fixture(seed, log)
        for p in model.parameters():   # gradients left over from an earlier step
            p.grad = torch.full_like(p, _STALE)
        before = [p.detach().clone() for p in model.parameters()]
        X_before, y_before = snapshot(X), snapshot(y)
        result = _call(amp_step, model, optimizer, _SpyScaler(log), X, y, "cpu", dtype, max_norm,
                       what=f"amp_step(model, optimizer, scaler, X, y, 'cpu', {dtype}, max_norm={max_norm})")
        if isinstance(result, torch.Tensor):
            raise Wrong("amp_step returned a tensor; return the loss as a Python float with loss.item().")
        loss_value = as_number("the loss amp_step returned", result)
        forwards = [e for e in log if isinstance(e, tuple) and e[0] == "forward"]
        backwards = [e for e in log if isinstance(e, tuple) and e[0] == "backward"]
        calls = [e for e in log if isinstance(e, str)]
        if not forwards:
            raise Wrong("amp_step never ran the model on X.")
        if not all(enabled for _, enabled, _, _ in forwards):
            raise Wrong("the forward pass ran without autocast on the CPU: wrap the forward pass and the loss in "
                        "`with torch.autocast(device_type=device_type, dtype=dtype):` and use the device_type you "
                        "were given (not 'cuda', and not the deprecated torch.cuda.amp.autocast).")
        if any(d != dtype for _, _, d, _ in forwards):
            raise Wrong(f"autocast ran in {forwards[0][2]}, but this call asked for {dtype}: pass dtype=dtype "
                        "instead of hard-coding one.")
        if any(enabled for _, enabled in backwards):
            raise Wrong("backward() ran inside the autocast block: close the with-block after the loss, then "
                        "scaler.scale(loss).backward() outside it (backward passes under autocast are not recommended).")
        if "optimizer.step" in calls:
            raise Wrong("you called optimizer.step() yourself: with a GradScaler call scaler.step(optimizer), which "
                        "skips the step if the gradients contain inf or NaN.")
        if "scale" not in calls:
            raise Wrong("the loss was not scaled: call scaler.scale(loss).backward(), not loss.backward(). Loss "
                        "scaling keeps small float16 gradients from rounding to zero.")
        if "scaler.step" not in calls:
            raise Wrong("the optimizer never stepped: call scaler.step(optimizer).")
        if "update" not in calls:
            raise Wrong("scaler.update() was never called: without it the scale never adapts.")
        if calls.index("update") < calls.index("scaler.step"):
            raise Wrong("scaler.update() came before scaler.step(optimizer): step first, then update.")
        if "unscale_" in calls and calls.index("unscale_") > calls.index("scaler.step"):
            raise Wrong("scaler.unscale_(optimizer) came after scaler.step(optimizer): unscale, clip, then step.")
        update = [p.detach() - b for p, b in zip(model.parameters(), before)]
        if all(float(u.abs().max()) == 0.0 for u in update):
            raise Wrong("the weights did not change: did the scaled loss go through .backward()?")
        want, want_loss = _reference_amp_update(seed, dtype, max_norm)
        if not _same_update(update, want):
            if "get_scale" in calls and "unscale_" not in calls:
                raise Wrong("you divided the gradients by scaler.get_scale() yourself: scaler.step(optimizer) does not "
                            "know, and divides them again. Call scaler.unscale_(optimizer) before clipping; "
                            "scaler.step then knows they are unscaled already.")
            if _same_update(update, _reference_amp_update(seed, dtype, max_norm, "no zero_grad")[0]):
                raise Wrong("the weights moved by more than one step's gradient: gradients from an earlier step were "
                            "still there. Call optimizer.zero_grad() at the start of the step.")
            if _same_update(update, _reference_amp_update(seed, dtype, max_norm, "clip scaled")[0]):
                raise Wrong("you clipped the scaled gradients (1024 times too large), so the step came out far too "
                            "small: call scaler.unscale_(optimizer) before clip_grad_norm_.")
            if _same_update(update, _reference_amp_update(seed, dtype, max_norm, "no clip")[0]):
                raise Wrong(f"the gradients were not clipped: their norm was above max_norm={max_norm}. Call "
                            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) after unscaling.")
            for other in (1.0, 0.5, 0.1, 0.05, 0.2):
                if other != max_norm and _same_update(update, _reference_amp_update(seed, dtype, other)[0]):
                    raise Wrong(f"you clipped to {other:g}, but this call asked for max_norm={max_norm}: use the "
                                "argument instead of a fixed number.")
            raise Wrong("the weights differ from one clipped mixed-precision step: check the order zero_grad → "
                        "autocast forward → scaler.scale(loss).backward() → scaler.unscale_ → clip_grad_norm_ → "
                        "scaler.step → scaler.update.")
        if abs(loss_value - want_loss) > 1e-2 * max(1.0, abs(want_loss)):
            raise Wrong(f"amp_step returned {loss_value:.4g}, but the loss of this batch is {want_loss:.4g}: return "
                        "the unscaled loss (loss.item(), not the scaled one).")
        if changes(X_before, X) or changes(y_before, y):
            raise Wrong("amp_step changed the batch X or y it was given: compute on them, do not change them in place.")
    _check_amp_on_cuda(amp_step)
    return ("autocast ran the forward pass in the dtype asked for, on the device type asked for (the CPU here, and "
            "'cuda' as on a GPU), the gradients were unscaled before they were clipped, and scaler.step/update did "
            "the rest, for bfloat16 and float16 alike.")


@contextlib.contextmanager
def _cuda_autocast_allowed():
    """Let ``torch.autocast("cuda", ...)`` be entered on a machine without a GPU.

    Without a GPU torch disables a CUDA autocast (with a warning) after asking
    ``torch.cuda.is_available()``; pretending one exists lets the check see, from inside the model's
    forward, the state autocast sets (``torch.is_autocast_enabled("cuda")``, ``get_autocast_dtype``).
    The tensors stay on the CPU, where a CUDA autocast changes nothing, so only that state is checked.
    """
    import warnings
    from unittest import mock

    import torch

    if torch.cuda.is_available():
        yield
        return
    with mock.patch.object(torch.cuda, "is_available", lambda: True), \
            mock.patch.object(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def _check_amp_on_cuda(amp_step):
    """The same step called as on a GPU: device_type='cuda'. A device type or dtype fixed in the answer shows."""
    import torch

    for seed, dtype_name, max_norm in _Q1_CASES:
        dtype = getattr(torch, dtype_name)
        log = []
        model, optimizer, X, y = _amp_fixture(seed, log, device_type="cuda")
        what = f"amp_step(model, optimizer, scaler, X, y, 'cuda', {dtype}, max_norm={max_norm})"
        with _cuda_autocast_allowed():
            _call(amp_step, model, optimizer, _SpyScaler(log), X, y, "cuda", dtype, max_norm, what=what)
        forwards = [e for e in log if isinstance(e, tuple) and e[0] == "forward"]
        if not forwards:
            raise Wrong(f"{what} never ran the model on X.")
        if not all(enabled for _, enabled, _, _ in forwards):
            where = "for 'cpu'" if any(other for _, _, _, other in forwards) else "at all"
            raise Wrong(f"called with device_type='cuda', as on a GPU, {what} enabled autocast {where}, not for "
                        "'cuda': the device type is fixed in your code. Use the argument: "
                        "torch.autocast(device_type=device_type, dtype=dtype).")
        if any(d != dtype for _, _, d, _ in forwards):
            raise Wrong(f"called with device_type='cuda', autocast ran in {forwards[0][2]}, but the call asked for "
                        f"{dtype}: the dtype is ignored on one device type (on CUDA autocast's default is float16, "
                        "on the CPU bfloat16). Pass dtype=dtype whatever the device.")


q1 = Exercise("ep07.q1", _check_amp_step,
              hint="The scaler multiplied the loss, so every gradient is multiplied too: a norm measured on them is "
                   "the scale times too large. The scaler has a method that divides them back in place, once; "
                   "scaler.step knows when it was already done.",
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
    (lambda t, w: (sum(t[:w]) - w * statistics.median_high(t[w:]), statistics.median_high(t[w:])),
     "your median is the upper of the two middle steps; with an even number of steps the median is the mean of "
     "the two middle ones: use statistics.median (not median_high, not sorted(...)[len // 2])."),
    (lambda t, w: (sum(t[:w]) - w * statistics.median_low(t[w:]), statistics.median_low(t[w:])),
     "your median is the lower of the two middle steps; with an even number of steps the median is the mean of "
     "the two middle ones: use statistics.median (not median_low)."),
    (lambda t, w: (sum(t[:w]) - statistics.median(t[w:]), statistics.median(t[w:])),
     "you subtracted one steady step from the warm-up's sum; each of the `warmup` steps did ordinary work: "
     "subtract warmup × steady_seconds."),
    (lambda t, w: (sum(t[:w + 1]) - (w + 1) * statistics.median(t[w + 1:]), statistics.median(t[w + 1:])),
     "you treated warmup + 1 steps as warm-up: step_times[:warmup] are the warm-up steps, step_times[warmup:] "
     "the steady ones."),
    (lambda t, w: (sum(t[:w]) - w * statistics.median(t[w + 1:]), statistics.median(t[w + 1:])),
     "your steady steps start one late: they are step_times[warmup:], from index warmup on."),
]


def _check_compile_report(compile_report):
    require_function(compile_report, "compile_report")

    def close(a, b):
        return abs(a - b) <= 1e-6 + 1e-6 * abs(b)

    answers = []
    for times, warmup in _Q2_CASES:
        given = list(times)
        got = _call(compile_report, given, warmup, what=f"compile_report({times}, warmup={warmup})")
        if given != times:
            how = "sorted" if given == sorted(times) else "changed"
            raise Wrong(f"compile_report {how} the list step_times it was given (now {given}): the caller's times "
                        "are no longer in step order. statistics.median and sorted(...) leave the list alone; "
                        "list.sort() does not.")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"compile_report should return two numbers (compile_seconds, steady_seconds); got {got!r}.")
        answers.append((times, warmup, as_number("compile_seconds", got[0]), as_number("steady_seconds", got[1])))
    wrong = [a for a in answers
             if not all(map(close, a[2:], compile_report_reference(a[0], a[1])))]
    if not wrong:
        return "right on three sets of step times: compile cost kept out of the steady-state figure."
    times, warmup, compile_s, steady_s = wrong[0]
    want_c, want_s = compile_report_reference(times, warmup)
    if close(compile_s, want_s) and close(steady_s, want_c):
        raise Wrong("you returned (steady_seconds, compile_seconds): the compile time comes first.")
    if close(compile_s, 1e3 * want_c) or close(steady_s, 1e3 * want_s):
        raise Wrong("your result looks like milliseconds; return seconds, as step_times are.")
    for rule, message in _Q2_DIAGNOSES:   # a diagnosis must fit every case, not one by coincidence
        if all(close(c, rc) and close(st, rs) for (t, w, c, st), (rc, rs) in
               ((a, rule(a[0], a[1])) for a in answers)):
            raise Wrong(message)
    raise Wrong(f"for step_times={times} and warmup={warmup} expected ({want_c:.4g}, {want_s:.4g}) s, got "
                f"({compile_s:.4g}, {steady_s:.4g}) s.")


q2 = Exercise("ep07.q2", _check_compile_report,
              hint="Which steps are steady, and which statistic ignores the odd slow one? The warm-up steps did "
                   "ordinary work too: take that out of their sum.",
              solution=solution_link(NOTEBOOK))


# --- q3: read a profile ----------------------------------------------------------------------

#: Recorded profiles: (label, expected top op, timeline). A timeline is a list of (name, calls, µs
#: per call, children) run one after another inside a ``workload`` annotation, children inside
#: their parent. The times are fixed, so no load on this machine can change the right answer, and
#: each tempting mistake (inclusive time, call count, time per call, the first row, the least time)
#: picks a different op. They follow what torch.profiler records for the workloads of the episode.
_PROFILES = [
    ("matmuls", "aten::mm", [
        ("aten::add", 60, 18, []),                                   # many cheap calls: the highest count
        ("aten::matmul", 4, 1520, [("aten::mm", 1, 1450, [])]),      # most self time: aten::mm
        ("aten::zeros", 1, 9, [("aten::empty", 1, 3, [])]),
    ]),
    ("sorting", "aten::sort", [
        ("aten::mul", 60, 15, []),
        ("aten::sort", 1, 4300, [("aten::empty", 2, 4, []), ("aten::copy_", 1, 260, [])]),
        ("aten::ones", 1, 8, [("aten::empty", 1, 3, [])]),
    ]),
    ("exps", "aten::exp", [
        ("aten::sub", 60, 11, []),
        ("aten::exp", 40, 160, [("aten::empty", 1, 2, [])]),        # the most self time in all, in short calls
        ("aten::tanh", 1, 1900, [("aten::empty", 1, 2, [])]),       # one call, longer than any one exp
        ("aten::zeros", 1, 9, [("aten::empty", 1, 3, [])]),
    ]),
]


def recorded_profile(timeline):
    """A ``torch.profiler.profile`` holding recorded events with fixed times (microseconds).

    It is the profiler's own object, read through its own ``key_averages()`` and ``events()``;
    only the events come from ``timeline`` instead of from a run on this machine.
    """
    import torch.autograd.profiler as autograd_profiler
    from torch.autograd.profiler_util import EventList, FunctionEvent
    from torch.profiler import ProfilerActivity, profile

    events, clock = [], [0]

    def add(name, start, end):
        events.append(FunctionEvent(id=len(events), name=name, thread=1, start_us=start, end_us=end,
                                    stack=[], input_shapes=[]))

    def run(name, calls, each, children):
        for _ in range(calls):
            start = clock[0]
            clock[0] += 1
            for child in children:
                run(*child)
            clock[0] = max(clock[0], start + each)
            add(name, start, clock[0])
            clock[0] += 1

    top = len(events)
    add("workload", 0, 0)                       # its end is set below, once everything inside has run
    clock[0] = 5
    for step in timeline:
        run(*step)
    events[top] = FunctionEvent(id=top, name="workload", thread=1, start_us=0, end_us=clock[0] + 40,
                                stack=[], input_shapes=[], is_user_annotation=True)
    events.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
    event_list = EventList(events)
    event_list._build_tree()
    recorder = autograd_profiler.profile(use_cpu=True)
    recorder._function_events, recorder._needs_processing = event_list, False
    prof = profile(activities=[ProfilerActivity.CPU])
    prof.profiler = recorder
    return prof


def _check_top_op(top_op):
    require_function(top_op, "top_op")
    return _compare_top_op(top_op)


def _compare_top_op(top_op):
    for label, expected, timeline in _PROFILES:
        prof = recorded_profile(timeline)
        events = prof.key_averages()
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
            "per call": max(events, key=lambda e: e.self_cpu_time_total / max(e.count, 1)).key,
        }
        if got == by["first"]:
            why = [f"'{got}' is the first row of key_averages(), which is not sorted by time"]
            if got == by["inclusive"]:
                why.append("it also has the most inclusive time (cpu_time_total), which counts every op called "
                           "inside it")
            if all(getattr(e, "self_device_time_total", 0) == 0 for e in events):
                why.append("sorting by self_device_time_total gives that row too: this profile ran on the CPU, so "
                           "it is 0 for every op")
            raise Wrong("; ".join(why) + ". Sort by self_cpu_time_total, the time spent in the op itself.")
        if got == by["inclusive"]:
            raise Wrong(f"you sorted by cpu_time_total, the inclusive time: '{got}' includes every op called inside "
                        "it. Sort by self_cpu_time_total, the time spent in the op itself.")
        if got == by["count"]:
            raise Wrong(f"'{got}' is the op called most often (count), not the one that took the most time. Sort by "
                        "self_cpu_time_total.")
        if got == by["least"]:
            raise Wrong(f"'{got}' took the LEAST self time: take the max, not the min (or sort descending).")
        if got == by["per call"]:
            count = next(e.count for e in events if e.key == expected)
            raise Wrong(f"'{got}' has the longest single call, but '{expected}' took more self time in all (its "
                        f"{count} calls together): compare self_cpu_time_total, the total over all the calls of an "
                        "op in key_averages() (not the time per call, nor one event of prof.events()).")
        if label != "matmuls" and got in ("aten::mm", "aten::addmm", "aten::matmul", "aten::linear"):
            raise Wrong(f"top_op said '{got}' for a workload without large matrix products: the answer must come from "
                        "the profile you are given, not a fixed name.")
        if got.startswith("ProfilerStep") or got == "workload":
            raise Wrong(f"'{got}' is a label around the work, not an op; sort by self_cpu_time_total.")
        raise Wrong(f"for the {label} workload the op with the most self CPU time is '{expected}', your function "
                    f"said '{got}'.")
    return ("right on three profiles you had not seen (a matrix product, a sort, an elementwise exp), recorded "
            "with fixed times so that the answer does not depend on how busy this machine is.")


q3 = Exercise("ep07.q3", _check_top_op,
              hint="prof.key_averages() is a list of events, one per op name. Which attribute excludes the time of "
                   "the ops called inside an op? Pick the event where it is largest, and return its name.",
              solution=solution_link(NOTEBOOK))


# --- q4: the capstone, a slow training loop --------------------------------------------------

def slow_train(model, X, y, steps, batch_size, lr=0.05):
    """Train ``model`` for ``steps`` SGD steps on consecutive batches of ``(X, y)``; return the losses.

    Correct, but deliberately slow. ``X`` is a NumPy float64 array (events × features), ``y`` a
    NumPy array of 0/1 labels, both in host memory. Batch ``k`` is rows ``(k mod n_batches) *
    batch_size`` onwards, standardised with the mean and standard deviation of the whole of ``X``.
    The loop runs on the device the model is on.
    """
    import torch
    from torch import nn

    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()
    n_batches = len(X) // batch_size
    losses = []
    for step in range(steps):
        X_std = (X - X.mean(axis=0)) / X.std(axis=0)        # the whole table, again, every step
        first = (step % n_batches) * batch_size
        rows = range(first, first + batch_size)
        xb = torch.stack([torch.tensor(X_std[i], dtype=torch.float32, device=device)   # one event at a time:
                          for i in rows])                                              # on a GPU, a copy each
        yb = torch.tensor([float(y[i]) for i in rows], dtype=torch.float32, device=device)
        optimizer.zero_grad()
        loss = loss_fn(model(xb).squeeze(1), yb)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())                          # on a GPU the host waits for the device, every step
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


def capstone_device():
    """Where the check runs both loops: the GPU if there is one, else the CPU."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


REQUIRED_SPEEDUP = 3.0
_Q4_CASES = [  # seed, events, batch size, steps: the losses and weights are compared on these
    (11, 40_000, 256, 60),
    (12, 9_050, 100, 95),    # steps wrap around: 90 full batches per pass, the 50 rows left over never used
]
_Q4_TIMED = [  # timed on data no correctness case used, so no answer can be remembered
    (21, 40_000, 256, 60),   # a large table: working on all of it every step is the main cost
    (13, 2_048, 1_024, 40),  # a small table, large batches: building each batch event by event is the main cost
]


def _tolerance(device) -> float:
    """Relative tolerance on each loss: float32 on the CPU repeats exactly; GPU kernels may sum in another order."""
    return 1e-5 if device.type == "cuda" else 2e-6


def _losses(result, steps, what):
    import torch

    if isinstance(result, (torch.Tensor, np.ndarray)):
        result = list(result.reshape(-1)) if getattr(result, "ndim", 0) == 1 else result
    if not isinstance(result, (list, tuple)):
        raise Wrong(f"{what} should return the list of losses, one per step; got {type(result).__name__}.")
    if len(result) != steps:
        raise Wrong(f"{what} returned {len(result)} losses for {steps} steps: every step must still run (no cut "
                    "steps, no skipped batches), and each must report its loss.")
    def number(i, v):
        v = v.detach().cpu() if isinstance(v, torch.Tensor) else v
        try:
            if math.isnan(float(v)):
                return float("nan")    # compared below: a NaN loss is a symptom, the message names the cause
        except (TypeError, ValueError):
            pass
        return as_number(f"loss {i}", v)

    return [number(i, v) for i, v in enumerate(result)]


def _explain_error(device):
    def explain(exc):
        text = str(exc)
        if "device" in text.lower() and ("expected" in text.lower() or "same device" in text.lower()
                                          or "different devices" in text.lower()):
            return (f"your loop mixed devices ({text.splitlines()[0][:120]}). The model you are given is on "
                    f"{device}: put the data on the model's device once, before the loop, with "
                    "device = next(model.parameters()).device and .to(device).")
        if "must have the same dtype" in text or "expected scalar type" in text.lower():
            return (f"your loop mixed dtypes ({text.splitlines()[0][:100]}): the model is float32, and NumPy's "
                    "table is float64. Convert the standardised table once with .float(), as slow_train does.")
        if "can't be cast" in text and "Long" in text:
            return (f"the labels are integers ({text.splitlines()[0][:100]}): BCEWithLogitsLoss needs float "
                    "targets. Convert y once with torch.from_numpy(y).float().")
        if "cuda" in text.lower() and device.type == "cpu":
            return (f"your loop asked for CUDA, but there is no GPU here ({text.splitlines()[0][:100]}). Use the "
                    "model's device, next(model.parameters()).device, instead of 'cuda'.")
        return None
    return explain


def _reference_losses(original, X, y, steps, batch, device, ddof):
    """The right losses computed quickly, with the standard deviation divided by n - ``ddof``."""
    import torch
    from torch import nn

    model = copy.deepcopy(original).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    X_std = torch.from_numpy((X - X.mean(axis=0)) / X.std(axis=0, ddof=ddof)).float().to(device)
    y_t = torch.from_numpy(y).float().to(device)
    n_batches = len(X) // batch
    losses = []
    for step in range(steps):
        first = (step % n_batches) * batch
        optimizer.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(X_std[first:first + batch]).squeeze(1),
                                                              y_t[first:first + batch])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


def _same_loss(g, w, tol) -> bool:
    return abs(g - w) <= tol * max(1.0, abs(w))     # False for NaN


def _same_losses(got, want, tol):
    return all(_same_loss(g, w, tol) for g, w in zip(got, want))


def _run_case(fast_train, seed, n, batch, steps, device):
    import torch

    X, y = capstone_data(seed, n)
    original = capstone_model(seed).to(device)
    theirs = copy.deepcopy(original)
    want_model = copy.deepcopy(original)
    want = slow_train(want_model, X.copy(), y.copy(), steps, batch)
    X_in, y_in = X.copy(), y.copy()
    what = f"fast_train(model, X, y, steps={steps}, batch_size={batch})"
    got = _losses(_call(fast_train, theirs, X_in, y_in, steps, batch, what=what, explain=_explain_error(device)),
                  steps, what)
    if not (np.array_equal(X_in, X) and np.array_equal(y_in, y)):
        raise Wrong("fast_train changed X or y in place; standardise into a new array.")
    params = [p.detach().cpu() for p in theirs.parameters()]
    ref_params = [p.detach().cpu() for p in want_model.parameters()]
    start = [p.detach().cpu() for p in original.parameters()]
    if [p.shape for p in params] != [p.shape for p in ref_params]:
        raise Wrong("the model's layers changed shape: a fix may not change the model.")
    dtypes = {str(p.dtype).replace("torch.", "") for p in theirs.parameters()}
    if dtypes != {"float32"}:
        raise Wrong(f"fast_train changed the model's dtype to {', '.join(sorted(dtypes))} (model.double()?): a fix "
                    "may not change the model, and float64 is many times slower on a GPU. Keep the model in "
                    "float32 and convert the standardised table once with .float(), as slow_train does.")
    moved = {str(p.device) for p in theirs.parameters()} - {str(q.device) for q in original.parameters()}
    if moved:
        raise Wrong(f"fast_train moved the model to {', '.join(sorted(moved))}: train it where it is, on "
                    "next(model.parameters()).device, and bring the data there.")
    if all(tensors_close(p, q, rtol=0, atol=0) for p, q in zip(params, start)):
        raise Wrong("the model you were given is untrained after fast_train: train that model (not a new one or a "
                    "copy), and do not wrap the training in torch.no_grad().")
    tol = _tolerance(device)
    for i, (g, w) in enumerate(zip(got, want)):
        if not _same_loss(g, w, tol):
            if _same_losses(got, _reference_losses(original, X, y, steps, batch, device, ddof=1), tol):
                raise Wrong("your standard deviation divides by n - 1, the original's by n: torch.std (like "
                            "pandas) uses correction=1 by default, np.std uses ddof=0. Use "
                            "Xt.std(0, correction=0), or standardise with NumPy as slow_train does.")
            if i == len(X) // batch:
                raise Wrong(f"loss {i} is {g:.6g}, the original loop's is {w:.6g}: the losses part at step {i}, the "
                            f"first after the last full batch ({len(X):,} rows, batches of {batch}). slow_train "
                            f"wraps around to row 0 after n_batches = len(X) // batch_size = {len(X) // batch} "
                            "full batches, and never uses the rows left over: batch k starts at row "
                            "(k % n_batches) * batch_size (not (k * batch_size) % len(X), and no partial batch).")
            where = "the first loss already differs" if i == 0 else f"the losses part from step {i} on"
            if g != g:
                where += " (a NaN loss: a batch with no rows, or a division by zero?)"
            raise Wrong(f"loss {i} is {g:.6g}, the original loop's is {w:.6g}: {where}. Keep what is computed: the "
                        "same model, the same optimizer (SGD, lr=0.05) with zero_grad every step, the same batches "
                        "in the same order (consecutive, wrapping around after the last full batch, no shuffling), "
                        "standardised with the mean and std of the whole X, in float32. A fix changes how fast, "
                        "not what.")
    for p, q in zip(params, ref_params):
        if not tensors_close(p, q, rtol=1e-4, atol=1e-5):
            raise Wrong("the losses match but the trained weights differ from the original loop's: every step must "
                        "update the model you were given, exactly as slow_train does.")


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


def _time(fn, reps, device=None):
    """The best of ``reps`` runs of ``fn()``, in seconds, and the result of the last run.

    The thread count is put back after each run, so a loop that changes it cannot slow or speed
    up the runs timed after it.
    """
    import torch

    best, result = float("inf"), None
    for _ in range(reps):
        threads = torch.get_num_threads()
        try:
            start = time.perf_counter()
            result = fn()
            if device is not None and device.type == "cuda":
                torch.cuda.synchronize(device)
            best = min(best, time.perf_counter() - start)
        finally:
            torch.set_num_threads(threads)
    return best, result


def _check_fast_train(fast_train):
    require_function(fast_train, "fast_train")
    if fast_train is slow_train:
        raise Wrong("that is slow_train itself; write fast_train.")
    with one_thread():
        return _compare_fast_train(fast_train)


def _counted_copy(original):
    """A copy of the model that counts how often its first layer runs."""
    model = copy.deepcopy(original)
    calls = [0]

    def count(module, inputs):
        calls[0] += 1

    next(m for m in model.modules() if not list(m.children())).register_forward_pre_hook(count)
    return model, calls


def _time_case(fast_train, seed, n, batch, steps, device):
    X, y = capstone_data(seed, n)
    original = capstone_model(seed).to(device)
    what = f"fast_train(model, X, y, steps={steps}, batch_size={batch})"
    tol = _tolerance(device)
    # Interleave the two measurements, best of several, so a machine busy for a while slows both.
    slow_s, fast_s = float("inf"), float("inf")
    for _ in range(3):
        t, want = _time(lambda: slow_train(copy.deepcopy(original), X, y, steps, batch), 1, device)
        slow_s = min(slow_s, t)
        for _ in range(2):
            model, calls = _counted_copy(original)
            t, result = _time(lambda: _call(fast_train, model, X, y, steps, batch, what=what,
                                            explain=_explain_error(device)), 1, device)
            fast_s = min(fast_s, t)
            if calls[0] < steps:
                raise Wrong(f"the model ran {calls[0]} times in {steps} steps: every step must run the model on its "
                            "batch, on every call (no cached results, no steps skipped).")
            if not _same_losses(_losses(result, steps, what), want, tol):
                raise Wrong(f"on a new data set (seed {seed}) your losses differ from the original loop's: a fix "
                            "must compute, on any data, what slow_train computes.")
    return slow_s, fast_s


def _compare_fast_train(fast_train):
    device = capstone_device()
    for seed, n, batch, steps in _Q4_CASES:
        _run_case(fast_train, seed, n, batch, steps, device)
    report = []
    for k, (seed, n, batch, steps) in enumerate(_Q4_TIMED):
        slow_s, fast_s = _time_case(fast_train, seed, n, batch, steps, device)
        speedup = slow_s / fast_s
        if speedup < REQUIRED_SPEEDUP:
            where = (f"on a table of {n:,} events, batch {batch}, your loop took {fast_s:.3f} s against the "
                     f"original's {slow_s:.3f} s for {steps} steps: {speedup:.1f}×, and the goal is at least "
                     f"{REQUIRED_SPEEDUP:g}× on every table.")
            advice = (" Profile it: what does slow_train do every step that it could do once?" if k == 0 else
                      " With a small table the standardisation is cheap: here the time goes into building each "
                      "batch one event at a time (on a GPU, a copy per event) and reading the loss every step. "
                      "Fix every cause, not only one.")
            raise Wrong("same losses and weights, but " + where + advice)
        report.append(f"{speedup:.0f}× on {n:,} events ({fast_s * 1e3:.0f} ms against {slow_s * 1e3:.0f} ms)")
    where = "both on one CPU thread" if device.type == "cpu" else f"both on {device}"
    return (f"same losses and the same trained weights as the original, and faster on this machine, {where}: "
            + "; ".join(report) + ".")


q4 = Exercise("ep07.q4", _check_fast_train,
              hint="Read slow_train line by line and ask, for each: does this need to happen every step, and "
                   "every event? Whatever depends only on X and y can happen once, before the loop, on the "
                   "model's device. Reading a loss as a Python number makes the host wait: how often must it?",
              solution=solution_link(NOTEBOOK))

__all__ = ["q1", "q2", "q3", "q4", "slow_train", "capstone_data", "capstone_model", "capstone_device",
           "compile_report_reference", "REQUIRED_SPEEDUP", "one_thread"]
