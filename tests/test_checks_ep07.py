"""Episode 7's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

q1 (a mixed-precision step with clipping), q2 (compile time, steady state and the break-even step from
measured step times) and q3 (the op with the most self time in a recorded profile). Episode 8's
capstone is tested in test_checks_ep08.py.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch
from torch import nn

from gpucourse.checks import ep07
from gpucourse.exercises import ____

from checking import assert_wrong

loss_fn = nn.BCEWithLogitsLoss()


# --- q1: amp_step, with gradient clipping -------------------------------------------------------

def amp_step(model, optimizer, scaler, X, y, device_type, dtype, max_norm):
    optimizer.zero_grad()
    with torch.autocast(device_type=device_type, dtype=dtype):
        loss = loss_fn(model(X).squeeze(1), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def amp_step_set_to_none(model, optimizer, scaler, X, y, device_type, dtype, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        logits = model(X).squeeze(1)
        loss = loss_fn(logits, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=max_norm, norm_type=2.0)
    scaler.step(optimizer)
    scaler.update()
    return float(loss.detach())


def _amp_variant(autocast=True, dtype=None, device_type=None, scale=True, via_scaler=True, update=True,
                 update_first=False, zero_grad=True, ret="item", backward_inside=False, unscale="before",
                 clip=True, norm=None, dtype_for=None):
    def step(model, optimizer, scaler, X, y, dev, dt, max_norm):
        if zero_grad:
            optimizer.zero_grad()
        dt = dtype_for(dev, dt) if dtype_for else dt
        ctx = (torch.autocast(device_type=device_type or dev, dtype=dtype or dt) if autocast
               else torch.autocast(device_type="cpu", enabled=False))
        with ctx:
            loss = loss_fn(model(X).squeeze(1), y)
            if backward_inside:
                scaler.scale(loss).backward()
        if not backward_inside:
            (scaler.scale(loss) if scale else loss).backward()
        if unscale in ("before", "twice"):
            scaler.unscale_(optimizer)
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), norm or max_norm)
        if unscale in ("after clip", "twice"):
            scaler.unscale_(optimizer)
        if update_first:
            scaler.update()
        if via_scaler:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if unscale == "after step":
            scaler.unscale_(optimizer)
        if update and not update_first:
            scaler.update()
        if ret == "tensor":
            return loss
        if ret == "scaled":
            return scaler.scale(loss).item()
        return loss.item()
    return step


def test_q1_right_answers_pass_and_stub_is_not_done():
    assert ep07.q1.outcome(amp_step) == ("correct", ep07.q1.outcome(amp_step)[1])
    assert ep07.q1.outcome(amp_step_set_to_none)[0] == "correct"
    assert ep07.q1.outcome(_amp_variant())[0] == "correct"
    assert ep07.q1.outcome(____)[0] == "not-done"
    assert ep07.q1.outcome(lambda *a: ____)[0] == "not-done"


def test_q1_right_answer_passes_with_the_real_grad_scaler_too():
    """The spy scaler behaves like torch.amp.GradScaler for this step (enabled on the CPU)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    X, y = torch.randn(32, 6) * 3, (torch.rand(32) > 0.5).float()
    loss = amp_step(model, optimizer, torch.amp.GradScaler("cpu"), X, y, "cpu", torch.bfloat16, 0.05)
    assert isinstance(loss, float)


def _divides_by_hand(model, optimizer, scaler, X, y, device_type, dtype, max_norm):
    optimizer.zero_grad()
    with torch.autocast(device_type=device_type, dtype=dtype):
        loss = loss_fn(model(X).squeeze(1), y)
    scaler.scale(loss).backward()
    for p in model.parameters():
        p.grad /= scaler.get_scale()          # scaler.step does not know, and unscales again
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def _own_scaler(model, optimizer, scaler, X, y, device_type, dtype, max_norm):
    """Right steps, on a GradScaler made here instead of the one passed in."""
    return amp_step(model, optimizer, torch.amp.GradScaler(device_type), X, y, device_type, dtype, max_norm)


Q1_WRONG = {
    "a GradScaler made inside the function": (_own_scaler, ["GradScaler", "the scaler passed in"]),
    "no autocast": (_amp_variant(autocast=False), ["without autocast"]),
    "cuda device_type on a CPU machine": (_amp_variant(device_type="cuda"), ["device_type", "not 'cuda'"]),
    "hard-coded float16": (_amp_variant(dtype=torch.float16), ["dtype=dtype", "hard-coding"]),
    "hard-coded bfloat16": (_amp_variant(dtype=torch.bfloat16), ["dtype=dtype"]),
    "backward without scaling": (_amp_variant(scale=False), ["scaler.scale(loss).backward()"]),
    "optimizer.step directly": (_amp_variant(via_scaler=False), ["scaler.step(optimizer)", "yourself"]),
    "no update": (_amp_variant(update=False), ["scaler.update()"]),
    "update before step": (_amp_variant(update_first=True), ["before", "step first"]),
    "no zero_grad": (_amp_variant(zero_grad=False), ["zero_grad"]),
    "returns the loss tensor": (_amp_variant(ret="tensor"), ["python float", "loss.item()"]),
    "returns the scaled loss": (_amp_variant(ret="scaled"), ["unscaled loss"]),
    "backward inside autocast": (_amp_variant(backward_inside=True), ["inside the autocast block"]),
    "clips without unscaling": (_amp_variant(unscale="never"), ["clipped the scaled gradients", "unscale_"]),
    "unscales after clipping": (_amp_variant(unscale="after clip"), ["clipped the scaled gradients"]),
    "unscales twice": (_amp_variant(unscale="twice"), ["twice"]),
    "unscales after the step": (_amp_variant(unscale="after step", clip=False), ["after scaler.step"]),
    "no clipping": (_amp_variant(clip=False), ["not clipped", "clip_grad_norm_"]),
    "hard-coded max_norm": (_amp_variant(norm=0.1), ["clipped to 0.1", "max_norm="]),
    "not a function": (3.0, ["pass the function itself"]),
    "divides by get_scale() by hand": (_divides_by_hand, ["get_scale()", "divides them again", "unscale_"]),
}


@pytest.mark.parametrize("name", list(Q1_WRONG))
def test_q1_wrong_answers_name_the_mistake(name):
    answer, words = Q1_WRONG[name]
    assert_wrong(ep07.q1, [answer], words)


# --- q2: compile_report, with the break-even step ------------------------------------------------

def compile_report(compiled_times, eager_times, warmup):
    steady = statistics.median(compiled_times[warmup:])
    compile_seconds = sum(compiled_times[:warmup]) - warmup * steady
    saved = statistics.median(eager_times) - steady
    return compile_seconds, steady, math.ceil(compile_seconds / saved) if saved > 0 else math.inf


def _with_break_even(first_two):
    """An answer whose compile and steady times come from `first_two(compiled_times, warmup)`, break-even right."""
    def report(c, e, w):
        compile_seconds, steady = first_two(c, w)
        saved = statistics.median(e) - steady
        return compile_seconds, steady, math.ceil(compile_seconds / saved) if saved > 0 else math.inf
    return report


def _break_even(rule):
    """An answer with right compile and steady times and a break-even from `rule(compile_s, steady, eager_times, c, w)`."""
    def report(c, e, w):
        compile_seconds, steady, _ = compile_report(c, e, w)
        return compile_seconds, steady, rule(compile_seconds, steady, e, c, w)
    return report


def _saved(steady, e):
    return statistics.median(e) - steady


def test_q2_right_answers_pass_and_stub_is_not_done():
    assert ep07.q2.outcome(compile_report)[0] == "correct"

    def with_numpy(c, e, w):
        steady = float(np.median(c[w:]))
        compile_seconds = float(np.sum(c[:w]) - w * steady)
        saved = float(np.median(e)) - steady
        return compile_seconds, steady, float("inf") if saved <= 0 else int(np.ceil(compile_seconds / saved))
    assert ep07.q2.outcome(with_numpy)[0] == "correct"
    assert ep07.q2.outcome(____)[0] == "not-done"
    assert ep07.q2.outcome(lambda c, e, w: (____, ____, ____))[0] == "not-done"


Q2_WRONG = {
    "mean steady time": (_with_break_even(lambda t, w: (sum(t[:w]) - w * statistics.mean(t[w:]),
                                                        statistics.mean(t[w:]))), ["mean", "median"]),
    "min steady time": (_with_break_even(lambda t, w: (sum(t[:w]) - w * min(t[w:]), min(t[w:]))),
                        ["fastest step", "median"]),
    "median includes warm-up": (_with_break_even(lambda t, w: (sum(t[:w]) - w * statistics.median(t),
                                                               statistics.median(t))), ["includes the warm-up"]),
    "ignores warmup, first step only": (_with_break_even(lambda t, w: (t[0] - statistics.median(t[1:]),
                                                                       statistics.median(t[1:]))),
                                        ["warmup", "argument"]),
    "does not take out ordinary work": (_with_break_even(lambda t, w: (sum(t[:w]), statistics.median(t[w:]))),
                                        ["ordinary work"]),
    "first step as compile time": (_with_break_even(lambda t, w: (t[0], statistics.median(t[w:]))),
                                   ["first step alone"]),
    "swapped": (lambda c, e, w: (compile_report(c, e, w)[1], compile_report(c, e, w)[0], compile_report(c, e, w)[2]),
                ["comes first"]),
    "milliseconds": (lambda c, e, w: (1e3 * compile_report(c, e, w)[0], 1e3 * compile_report(c, e, w)[1],
                                      compile_report(c, e, w)[2]), ["milliseconds"]),
    "constant": (lambda c, e, w: (30.0, 0.011, 5000), ["expected"]),
    "two numbers, no break-even": (lambda c, e, w: compile_report(c, e, w)[:2], ["three numbers"]),
    "median_high": (_with_break_even(lambda t, w: (sum(t[:w]) - w * statistics.median_high(t[w:]),
                                                   statistics.median_high(t[w:]))),
                    ["upper of the two middle", "statistics.median"]),
    "median_low": (_with_break_even(lambda t, w: (sum(t[:w]) - w * statistics.median_low(t[w:]),
                                                  statistics.median_low(t[w:]))), ["lower of the two middle"]),
    "one steady step taken out": (_with_break_even(lambda t, w: (sum(t[:w]) - statistics.median(t[w:]),
                                                                 statistics.median(t[w:]))),
                                  ["warmup × steady_seconds"]),
    "warm-up one step too long": (_with_break_even(lambda t, w: (sum(t[:w + 1]) - (w + 1) * statistics.median(t[w + 1:]),
                                                                 statistics.median(t[w + 1:]))), ["warmup + 1"]),
    "steady steps start one late": (_with_break_even(lambda t, w: (sum(t[:w]) - w * statistics.median(t[w + 1:]),
                                                                   statistics.median(t[w + 1:]))),
                                    ["one late", "compiled_times[warmup:]"]),
    "text": (lambda c, e, w: ("30 s", "0.01 s", "5000"), ["number", "drop the quotes"]),
    # the break-even
    "break-even not rounded": (_break_even(lambda cs, st, e, c, w: cs / _saved(st, e) if _saved(st, e) > 0
                                           else math.inf), ["whole number"]),
    "break-even rounded down": (_break_even(lambda cs, st, e, c, w: math.floor(cs / _saved(st, e))
                                            if _saved(st, e) > 0 else math.inf), ["rounded the break-even down"]),
    "break-even rounded to nearest": (_break_even(lambda cs, st, e, c, w: round(cs / _saved(st, e))
                                                  if _saved(st, e) > 0 else math.inf), ["nearest", "round up"]),
    "break-even over a compiled step": (_break_even(lambda cs, st, e, c, w: math.ceil(cs / st)),
                                        ["compiled step's time", "saves"]),
    "break-even over an eager step": (_break_even(lambda cs, st, e, c, w: math.ceil(cs / statistics.median(e))),
                                      ["eager step's time", "saves"]),
    "pays back the whole warm-up": (_break_even(lambda cs, st, e, c, w: math.ceil(sum(c[:w]) / _saved(st, e))
                                                if _saved(st, e) > 0 else math.inf), ["whole warm-up"]),
    "warm-up steps added again": (_break_even(lambda cs, st, e, c, w: math.ceil(cs / _saved(st, e)) + w
                                              if _saved(st, e) > 0 else math.inf),
                                  ["added the warm-up steps", "warm-up included"]),
    "mean eager step": (_break_even(lambda cs, st, e, c, w: math.ceil(cs / (statistics.mean(e) - st))
                                    if statistics.mean(e) > st else math.inf), ["eager step time is a mean"]),
    "fastest eager step": (_break_even(lambda cs, st, e, c, w: math.ceil(cs / (min(e) - st))
                                       if min(e) > st else math.inf), ["fastest eager step"]),
    "negative when compiling never pays": (_break_even(lambda cs, st, e, c, w: math.ceil(cs / _saved(st, e))),
                                           ["never pays back", "math.inf"]),
    "None when compiling never pays": (_break_even(lambda cs, st, e, c, w: math.ceil(cs / _saved(st, e))
                                                   if _saved(st, e) > 0 else None), ["None", "math.inf"]),
}


def _by_walking(strict):
    """An answer that walks the steps until the compiled run has taken no longer (or, strict, less) in all."""
    def report(c, e, w):
        compile_seconds, steady, _ = compile_report(c, e, w)
        eager = statistics.median(e)
        if eager <= steady:
            return compile_seconds, steady, math.inf
        n, compiled_total = w, sum(c[:w])
        while (compiled_total >= n * eager) if strict else (compiled_total > n * eager):
            n, compiled_total = n + 1, compiled_total + steady
        return compile_seconds, steady, n
    return report


def test_q2_break_even_on_the_boundary():
    """'No longer in all' includes equal: a run whose compile time is a whole number of steps' savings
    separates math.ceil from floor + 1 (which every other run lets pass), and a compiled step exactly as
    fast as an eager one never pays back."""
    assert ep07.q2.outcome(_by_walking(strict=False))[0] == "correct"
    floor_plus_one = _break_even(lambda cs, st, e, c, w: math.floor(cs / _saved(st, e)) + 1
                                 if _saved(st, e) > 0 else math.inf)
    assert_wrong(ep07.q2, [floor_plus_one], ["one step too many", "math.ceil"])
    assert_wrong(ep07.q2, [_by_walking(strict=True)], ["one step too many", "includes equal"])
    only_negative = _break_even(lambda cs, st, e, c, w: math.ceil(cs / _saved(st, e))
                                if _saved(st, e) >= 0 else math.inf)
    assert_wrong(ep07.q2, [only_negative], ["ZeroDivisionError", "exactly as long", "math.inf"])


@pytest.mark.parametrize("name", list(Q2_WRONG))
def test_q2_wrong_answers_name_the_mistake(name):
    answer, words = Q2_WRONG[name]
    assert_wrong(ep07.q2, [answer], words)


def test_q2_sorting_the_callers_list_is_named():
    def sorts_in_place(compiled_times, eager_times, warmup):
        result = compile_report(list(compiled_times), eager_times, warmup)
        compiled_times.sort()
        return result
    assert_wrong(ep07.q2, [sorts_in_place], ["sorted the list compiled_times", "list.sort()"])


def test_q2_the_prompt_states_no_formula():
    """The exercise asks for the break-even from measured times; it does not hand over the formulas."""
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parents[1] / "solutions" / "07-faster-training.ipynb").read_text())
    text = "".join(line for cell in cells["cells"] if cell["cell_type"] == "markdown" for line in cell["source"])
    prompt = text[text.index("## Exercise 2"):text.index("## Exercise 3")]
    for formula in ("sum(step_times", "warmup * steady", "warmup × steady", "median(", "ceil(", "/ saved"):
        assert formula not in prompt, formula


# --- q3: top_op ----------------------------------------------------------------------------------

def top_op(prof):
    return max(prof.key_averages(), key=lambda e: e.self_cpu_time_total).key


def test_q3_right_answers_pass_and_stub_is_not_done():
    assert ep07.q3.outcome(top_op)[0] == "correct"
    assert ep07.q3.outcome(lambda p: sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)[0].key)[0] \
        == "correct"
    assert ep07.q3.outcome(____)[0] == "not-done"
    assert ep07.q3.outcome(lambda p: ____)[0] == "not-done"


Q3_WRONG = {
    "inclusive time": (lambda p: max(p.key_averages(), key=lambda e: e.cpu_time_total).key,
                       ["cpu_time_total", "inclusive"]),
    "most calls": (lambda p: max(p.key_averages(), key=lambda e: e.count).key, ["called most often"]),
    "least time": (lambda p: min(p.key_averages(), key=lambda e: e.self_cpu_time_total).key, ["least"]),
    "first row": (lambda p: p.key_averages()[0].key, ["sort by self_cpu_time_total"]),
    "device time on a CPU profile": (lambda p: max(p.key_averages(), key=lambda e: e.self_device_time_total).key,
                                     ["self_device_time_total", "0 for every op",
                                                                            "self_cpu_time_total"]),
    "time per call": (lambda p: max(p.key_averages(), key=lambda e: e.self_cpu_time_total / e.count).key,
                      ["longest single call", "in all", "self_cpu_time_total"]),
    "longest single event": (lambda p: max(p.events(), key=lambda e: e.self_cpu_time_total).name,
                             ["longest single call", "prof.events()"]),
    "hard-coded matmul": (lambda p: "aten::mm", ["fixed name"]),
    "hard-coded sort": (lambda p: "aten::sort", ["self CPU time is 'aten::mm'"]),
    "the event, not its name": (lambda p: max(p.key_averages(), key=lambda e: e.self_cpu_time_total),
                                ["event.key"]),
    "the time, not the name": (lambda p: max(e.self_cpu_time_total for e in p.key_averages()), ["str"]),
    "the table text": (lambda p: p.key_averages().table(sort_by="self_cpu_time_total", row_limit=1), ["most self"]),
}


@pytest.mark.parametrize("name", list(Q3_WRONG))
def test_q3_wrong_answers_name_the_mistake(name):
    answer, words = Q3_WRONG[name]
    assert_wrong(ep07.q3, [answer], words)


# --- the conditions that matter: another device type, fixed profiles ----------------------------

def _fixed_cpu(model, optimizer, scaler, X, y, device_type, dtype, max_norm):
    return _amp_variant(device_type="cpu")(model, optimizer, scaler, X, y, device_type, dtype, max_norm)


# the dtype asked for is used on the CPU only
_dtype_only_on_cpu = _amp_variant(dtype_for=lambda dev, dt: dt if dev == "cpu" else torch.float16)


def _amp_written_otherwise(model, optimizer, scaler, X, y, device_type, dtype, max_norm):
    from torch import amp
    from torch.nn.utils import clip_grad_norm_

    optimizer.zero_grad(set_to_none=True)
    with amp.autocast(device_type, dtype):
        loss = nn.functional.binary_cross_entropy_with_logits(model(X).squeeze(1), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return float(loss)


@pytest.mark.parametrize("answer, words", [
    (_fixed_cpu, ["device_type='cuda'", "fixed in your code", "device_type=device_type"]),
    (_dtype_only_on_cpu, ["device_type='cuda'", "ignored on one device type", "dtype=dtype"]),
])
def test_q1_device_dependent_mistakes_are_named(answer, words):
    assert_wrong(ep07.q1, [answer], words)


def test_q1_written_otherwise_passes_and_leaves_no_cuda_pretence():
    result, message = ep07.q1.outcome(_amp_written_otherwise)
    assert result == "correct", message
    real = torch.cuda.is_available
    assert ep07.q1.outcome(_amp_written_otherwise)[0] == "correct"
    assert torch.cuda.is_available is real and not torch.is_autocast_enabled("cuda")


def test_q3_recorded_profiles_fix_the_answer_and_separate_every_mistake():
    """No clock: each recorded profile has one right answer, and each tempting mistake picks another op."""
    for label, expected, timeline in ep07._PROFILES:
        events = ep07.recorded_profile(timeline).key_averages()
        assert max(events, key=lambda e: e.self_cpu_time_total).key == expected
        assert max(events, key=lambda e: e.count).key != expected
        assert max(events, key=lambda e: e.cpu_time_total).key != expected
    exps = ep07.recorded_profile(ep07._PROFILES[2][2])
    assert max(exps.events(), key=lambda e: e.self_cpu_time_total).name == "aten::tanh"   # the longest single event


def test_q3_written_otherwise():
    import operator

    assert ep07.q3.outcome(lambda p: max(p.key_averages(), key=operator.attrgetter("self_cpu_time_total")).key)[0] \
        == "correct"
    assert ep07.q3.outcome(lambda p: sorted(p.key_averages(), key=lambda e: e.self_cpu_time_total,
                                            reverse=True)[0].key)[0] == "correct"
