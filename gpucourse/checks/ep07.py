"""Checks for episode 7, "Faster training: profile first, then mixed precision and compilation".

``q1`` a mixed-precision training step with gradient clipping (autocast + GradScaler) · ``q2`` compile time,
steady-state step time and the break-even step from measured step times · ``q3`` read a profile: the op
with the most self time. Episode 8 has the capstone (``gpucourse.checks.ep08``).

Every check calls the learner's function on fixtures of its own, several of them, so a constant
or an answer right on one case cannot pass; wrong answers are named by their mistake.
"""

from __future__ import annotations

import contextlib
import math
import statistics

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


@contextlib.contextmanager
def _new_scalers_counted():
    """Yield a list that gets one entry per ``torch.amp.GradScaler`` made inside the block."""
    import torch

    made, cls = [], torch.amp.GradScaler
    original = cls.__init__

    def counting_init(self, *args, **kwargs):
        made.append(f"{type(self).__module__}.{type(self).__name__}")
        original(self, *args, **kwargs)

    cls.__init__ = counting_init
    try:
        yield made
    finally:
        cls.__init__ = original


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
        with _new_scalers_counted() as made:
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
        spy_calls = {"scale", "unscale_", "scaler.step", "update", "get_scale"} & set(calls)
        if made and not spy_calls:
            raise Wrong(f"amp_step made a GradScaler of its own ({made[0]} made during the call) and never used the "
                        "scaler passed in: a new scaler starts from its initial scale every step and forgets what "
                        "it learned about overflows. Use the scaler passed in (scaler.scale, scaler.step, "
                        "scaler.update); the training loop makes it once.")
        if "optimizer.step" in calls and not spy_calls:
            raise Wrong("the scaler passed in was never used and you called optimizer.step() yourself: call "
                        "scaler.scale(loss).backward(), scaler.step(optimizer) and scaler.update() on it.")
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

    from ..device import cuda_usable

    if cuda_usable():                  # a GPU this build runs on: nothing to pretend
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
              hint=("After scaler.scale(loss).backward(), how large are the gradients compared with the real ones, "
                    "and what would clipping their norm at max_norm do to them?",
                    "The scaler multiplied the loss, so every gradient is multiplied by the scale too. The scaler "
                    "has a method that divides them back in place, once: call it before you measure or clip, then "
                    "clip, then let the scaler step and update as usual (its step knows the division was done)."),
              solution=solution_link(NOTEBOOK))


# --- q2: compile time, steady state and break-even ---------------------------------------------

def compile_report_reference(compiled_times, eager_times, warmup):
    steady = statistics.median(compiled_times[warmup:])
    compile_seconds = sum(compiled_times[:warmup]) - warmup * steady
    saved = statistics.median(eager_times) - steady
    return compile_seconds, steady, (math.ceil(compile_seconds / saved) if saved > 0 else math.inf)


_Q2_CASES = [   # compiled step times (warm-up first), eager step times (after their own warm-up), warmup
    ([31.0, 2.4, 0.011, 0.010, 0.012, 0.50, 0.010, 0.011], [0.017, 0.0165, 0.018, 0.016, 0.30, 0.0175], 2),
    ([1.30, 0.40, 0.41, 0.39, 0.90, 0.40, 0.42], [0.45, 0.47, 0.44, 0.46, 0.45], 1),
    ([12.0, 0.8, 0.5, 0.021, 0.020, 0.019, 0.022, 0.020, 0.35], [0.031, 0.029, 0.95, 0.030, 0.032], 3),
    ([12.0, 0.8, 0.5, 0.021, 0.020, 0.019, 0.022, 0.020, 0.35], [0.018, 0.019, 0.018, 0.020], 3),   # never pays
    # on the boundary, in binary-exact seconds: 2.75 s of compiling, 0.25 s saved a step, so after exactly 11
    # steps both runs have taken 5.5 s ("no longer in all": 11, where floor + 1 gives 12) ...
    ([2.0, 1.25, 0.25, 0.25, 0.75, 0.25, 0.25], [0.5, 0.5, 0.5, 1.0, 0.5], 2),
    # ... and a compiled step exactly as fast as an eager one: it never catches up
    ([1.0, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 1),
]

#: Mistakes in the first two numbers: (compile_seconds, steady_seconds) from (compiled_times, warmup).
_Q2_DIAGNOSES = [
    (lambda t, w: (sum(t[:w]) - w * statistics.mean(t[w:]), statistics.mean(t[w:])),
     "your steady-state time is a mean: one slow step (the machine was busy) pulls it up. Use the median."),
    (lambda t, w: (sum(t[:w]) - w * min(t[w:]), min(t[w:])),
     "your steady-state time is the fastest step (min); a typical step is the median of the steps after warm-up."),
    (lambda t, w: (sum(t[:w]) - w * statistics.median(t), statistics.median(t)),
     "your steady-state median includes the warm-up steps; take the median of compiled_times[warmup:] only."),
    (lambda t, w: (t[0] - statistics.median(t[1:]), statistics.median(t[1:])),
     "you treated only the first step as warm-up; use the `warmup` argument (later steps can recompile too)."),
    (lambda t, w: (sum(t[:w]), statistics.median(t[w:])),
     "your compile time still contains the ordinary work of the warm-up steps: they trained too, so take out "
     "what `warmup` ordinary steps cost."),
    (lambda t, w: (t[0], statistics.median(t[w:])),
     "your compile time is the first step alone: add up all `warmup` steps and take out their ordinary work."),
    (lambda t, w: (sum(t[:w]) - w * statistics.median_high(t[w:]), statistics.median_high(t[w:])),
     "your median is the upper of the two middle steps; with an even number of steps the median is the mean of "
     "the two middle ones: use statistics.median (not median_high, not sorted(...)[len // 2])."),
    (lambda t, w: (sum(t[:w]) - w * statistics.median_low(t[w:]), statistics.median_low(t[w:])),
     "your median is the lower of the two middle steps; with an even number of steps the median is the mean of "
     "the two middle ones: use statistics.median (not median_low)."),
    (lambda t, w: (sum(t[:w]) - statistics.median(t[w:]), statistics.median(t[w:])),
     "you took one steady step out of the warm-up's sum; each of the `warmup` steps did ordinary work: take out "
     "warmup × steady_seconds."),
    (lambda t, w: (sum(t[:w + 1]) - (w + 1) * statistics.median(t[w + 1:]), statistics.median(t[w + 1:])),
     "you treated warmup + 1 steps as warm-up: compiled_times[:warmup] are the warm-up steps, "
     "compiled_times[warmup:] the steady ones."),
    (lambda t, w: (sum(t[:w]) - w * statistics.median(t[w + 1:]), statistics.median(t[w + 1:])),
     "your steady steps start one late: they are compiled_times[warmup:], from index warmup on."),
]


def _typical(c, e, w):
    """compile_seconds, the compiled and the eager typical step of one case."""
    compile_s, steady, _ = compile_report_reference(c, e, w)
    return compile_s, steady, statistics.median(e)


def _payback(cost, saved, rounding=math.ceil):
    return rounding(cost / saved) if saved > 0 else math.inf


#: Tempting break-even answers (right first two numbers): (rule(compiled, eager, warmup), what it gets wrong).
_BREAK_EVEN_DIAGNOSES = [
    (lambda c, e, w: _payback(_typical(c, e, w)[0], _typical(c, e, w)[2] - _typical(c, e, w)[1], float),
     "your break-even is not a whole number of steps: round it to the fewest steps after which the compiled "
     "run is no longer behind."),
    (lambda c, e, w: _payback(_typical(c, e, w)[0], _typical(c, e, w)[2] - _typical(c, e, w)[1], math.floor),
     "you rounded the break-even down: after that many steps the compiled run is still behind. Round up."),
    (lambda c, e, w: _payback(_typical(c, e, w)[0], _typical(c, e, w)[2] - _typical(c, e, w)[1], round),
     "you rounded the break-even to the nearest step; after that many steps the compiled run can still be "
     "behind. Round up."),
    (lambda c, e, w: math.ceil(_typical(c, e, w)[0] / _typical(c, e, w)[1]),
     "your break-even divides the compile time by a compiled step's time; what pays it back is the time "
     "each compiled step saves against an eager one."),
    (lambda c, e, w: math.ceil(_typical(c, e, w)[0] / _typical(c, e, w)[2]),
     "your break-even divides the compile time by an eager step's time; what pays it back is the time "
     "each compiled step saves against an eager one."),
    (lambda c, e, w: _payback(_typical(c, e, w)[0], _typical(c, e, w)[2] - _typical(c, e, w)[1]) + w,
     "you added the warm-up steps to the break-even: compile_seconds / (eager − compiled step) already counts "
     "from the first step, warm-up included (the warm-up's ordinary work is in the steady steps' share)."),
    (lambda c, e, w: _payback(sum(c[:w]), _typical(c, e, w)[2] - _typical(c, e, w)[1]),
     "your break-even pays back the whole warm-up, but the warm-up steps trained too: only compile_seconds "
     "must be paid back."),
    (lambda c, e, w: _payback(_typical(c, e, w)[0], statistics.mean(e) - _typical(c, e, w)[1]),
     "your eager step time is a mean: one slow eager step pulls it up. Use the median of eager_times too."),
    (lambda c, e, w: _payback(_typical(c, e, w)[0], min(e) - _typical(c, e, w)[1]),
     "your eager step time is the fastest eager step; compare typical steps: the median of eager_times."),
    (lambda c, e, w: math.ceil(_typical(c, e, w)[0] / (_typical(c, e, w)[2] - _typical(c, e, w)[1])),
     "when a compiled step is slower than an eager one, compiling never pays back: the break-even is math.inf, "
     "not a negative number of steps."),
    (lambda c, e, w: _payback(_typical(c, e, w)[0], _typical(c, e, w)[2] - _typical(c, e, w)[1],
                              lambda x: math.floor(x) + 1),
     "your break-even is one step too many when the compile time is a whole number of steps' savings: after "
     "that many steps the two runs have taken exactly as long, and 'no longer in all' includes equal. Round up "
     "with math.ceil (floor + 1, or a strict < in a loop, overshoots by one there)."),
]


def _rule_gives(rule, case):
    """What a mistaken rule gives on ``case``; None where it cannot be computed (a division by a zero saving)."""
    try:
        return rule(*case)
    except ArithmeticError:
        return None


def _explain_report_error(exc):
    if isinstance(exc, ZeroDivisionError):
        return ("compile_report raised ZeroDivisionError: on a run whose compiled step takes exactly as long as an "
                "eager one, nothing is saved per step, so compiling never pays back: return math.inf whenever the "
                "saving is not above 0.")
    return None


def _steps(value):
    """The break-even as a number; math.inf (never) is a right answer, not an error."""
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return value
    return as_number("break_even_steps", value)


def _check_compile_report(compile_report):
    require_function(compile_report, "compile_report")

    def close(a, b):
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= 1e-6 + 1e-6 * abs(b)

    answers = []
    for compiled, eager, warmup in _Q2_CASES:
        given_c, given_e = list(compiled), list(eager)
        got = _call(compile_report, given_c, given_e, warmup,
                    what=f"compile_report({compiled}, {eager}, warmup={warmup})", explain=_explain_report_error)
        for given, times, name in ((given_c, compiled, "compiled_times"), (given_e, eager, "eager_times")):
            if given != times:
                how = "sorted" if given == sorted(times) else "changed"
                raise Wrong(f"compile_report {how} the list {name} it was given (now {given}): the caller's times "
                            "are no longer in step order. statistics.median and sorted(...) leave the list alone; "
                            "list.sort() does not.")
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Wrong("compile_report should return three numbers (compile_seconds, steady_seconds, "
                        f"break_even_steps); got {got!r:.80}.")
        if got[2] is None:
            raise Wrong(f"compile_report returned None as the break-even for compiled_times={compiled}: when a "
                        "compiled step is not faster than an eager one, compiling never pays back: return math.inf.")
        answers.append((compiled, eager, warmup, as_number("compile_seconds", got[0]),
                        as_number("steady_seconds", got[1]), _steps(got[2])))
    wrong = [a for a in answers if not all(map(close, a[3:5], compile_report_reference(*a[:3])[:2]))]
    if wrong:
        compiled, eager, warmup, compile_s, steady_s, _ = wrong[0]
        want_c, want_s, _ = compile_report_reference(compiled, eager, warmup)
        if close(compile_s, want_s) and close(steady_s, want_c):
            raise Wrong("you returned (steady_seconds, compile_seconds, …): the compile time comes first.")
        if close(compile_s, 1e3 * want_c) or close(steady_s, 1e3 * want_s):
            raise Wrong("your result looks like milliseconds; return seconds, as the step times are.")
        for rule, message in _Q2_DIAGNOSES:   # a diagnosis must fit every case, not one by coincidence
            if all(close(c, rc) and close(st, rs) for (rc, rs), (_, _, _, c, st, _) in
                   ((rule(a[0], a[2]), a) for a in answers)):
                raise Wrong(message)
        raise Wrong(f"for compiled_times={compiled} and warmup={warmup} expected compile_seconds {want_c:.4g} s and "
                    f"steady_seconds {want_s:.4g} s, got {compile_s:.4g} s and {steady_s:.4g} s.")
    for compiled, eager, warmup, _, _, break_even in answers:
        want = compile_report_reference(compiled, eager, warmup)[2]
        if close(break_even, want):
            continue
        for rule, message in _BREAK_EVEN_DIAGNOSES:   # it must fit every case, not one by coincidence
            if all((gives := _rule_gives(rule, a[:3])) is not None and close(a[5], gives) for a in answers):
                raise Wrong(message)
        raise Wrong(f"for compiled_times={compiled}, eager_times={eager} and warmup={warmup} the compiled run "
                    f"catches up after {want} steps (counting its warm-up); your break-even was {break_even:g}.")
    return (f"right on {len(_Q2_CASES)} runs: the compile cost kept out of the steady-state figure, and the step from which "
            "compiling has paid for itself (never, when a compiled step is not faster).")


q2 = Exercise("ep07.q2", _check_compile_report,
              hint=("Which compiled steps show what a step normally costs, and what did the warm-up steps cost "
                    "beyond that? How much does each later compiled step save, and after how many steps has that "
                    "paid back the extra cost?",
                    "For each run take a typical steady step that one slow step cannot move. The compile cost is "
                    "the warm-up's total minus what as many ordinary compiled steps would cost. Each step saves the "
                    "difference between a typical eager step and a typical compiled one; the break-even is the "
                    "compile cost over that saving, rounded to whole steps in the direction that leaves the "
                    "compiled run not behind. A step that saves nothing never pays back."),
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
              hint=("An op can look expensive because of its own work or because of the ops it calls. Which of a "
                    "profile's times counts only its own work, and over how many of its calls?",
                    "key_averages() sums each op's calls into one event per op name. Among those events pick the "
                    "one whose self CPU time is largest, and return its name, not the event or the time."),
              solution=solution_link(NOTEBOOK))


__all__ = ["q1", "q2", "q3", "compile_report_reference", "recorded_profile"]
