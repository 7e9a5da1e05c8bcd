"""Episode 6's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

Each exercise has a parametrized list of plausible wrong answers: the mistake the exercise is
about (a retry while the failed step's memory is held, a sum instead of a mean, seconds per step
instead of samples per second), wrong units, hard-coded constants, answers right on one case
only, and wrong types. Every one must be rejected with a message that names its mistake.
"""

from __future__ import annotations

import gc
from gc import collect as bound_collect            # bound before any check runs

import pytest
import torch
from torch.cuda import empty_cache as bound_empty_cache

from gpucourse.checks import ep06
from gpucourse.exercises import ____

from checking import assert_wrong, outcome


# --- q1: an out-of-memory-safe search for the largest batch ----------------------------------

def fits_after_except(try_step, batch):
    failed = False
    try:
        try_step(batch)
    except torch.OutOfMemoryError:
        failed = True
    gc.collect()
    torch.cuda.empty_cache()
    return not failed


def largest_batch(try_step, start=1, fits=fits_after_except):
    if fits(try_step, start):
        good = start
        while fits(try_step, 2 * good):
            good *= 2
        bad = 2 * good
    else:
        bad = start
        while bad > 1 and not fits(try_step, bad // 2):
            bad //= 2
        good = bad // 2
        if good == 0:
            return 0
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(try_step, mid):
            good = mid
        else:
            bad = mid
    return good


def largest_batch_returning_in_except(try_step, start=1):
    def attempt(step, batch):
        try:
            step(batch)
            return True
        except torch.OutOfMemoryError:
            return False          # leaving the block by return frees the failed step too

    def fits(step, batch):
        ok = attempt(step, batch)
        gc.collect()
        torch.cuda.empty_cache()
        return ok
    return largest_batch(try_step, start, fits)


def largest_batch_from_one(try_step, start=1):
    """Ignores start: doubles from 1 (more trials, still few)."""
    return largest_batch(try_step, 1)


def _largest_batch_with(collect, empty_cache):
    def fits(step, batch):
        failed = False
        try:
            step(batch)
        except torch.OutOfMemoryError:
            failed = True
        collect()
        empty_cache()
        return not failed
    return lambda try_step, start=1: largest_batch(try_step, start, fits)


def test_q1_accepts_cleanup_functions_bound_by_other_names():
    for collect, empty_cache in ((bound_collect, torch.cuda.empty_cache), (gc.collect, bound_empty_cache),
                                 (gc.collect, torch.cuda.memory.empty_cache)):
        result, message = outcome(ep06.q1, _largest_batch_with(collect, empty_cache))
        assert result == "correct", message


def test_q1_right_answers_pass_and_stub_is_not_done():
    for fn in (largest_batch, largest_batch_returning_in_except, largest_batch_from_one):
        result, message = outcome(ep06.q1, fn)
        assert result == "correct", message
    assert outcome(ep06.q1, ____)[0] == "not-done"
    assert outcome(ep06.q1, lambda step, start=1: ____)[0] == "not-done"

    def uses_blank(step, start=1):
        return ____(start)
    assert outcome(ep06.q1, uses_blank)[0] == "not-done"


def _retry_inside_except(try_step, start=1):
    batch = start
    while batch >= 1:
        try:
            try_step(batch)
            break
        except torch.OutOfMemoryError:
            batch //= 2
            try:                        # retried at once, inside the except block
                try_step(batch)
                break
            except torch.OutOfMemoryError:
                batch //= 2
    return largest_batch(try_step, max(batch, 1))


def _keeps_the_error(try_step, start=1):
    errors = []

    def fits(step, batch):
        try:
            step(batch)
            return True
        except torch.OutOfMemoryError as exc:
            errors.append(exc)          # kept "for the log": it keeps the failed step's memory alive
            return False
    return largest_batch(try_step, start, fits)


def _no_cleanup(try_step, start=1):
    def fits(step, batch):
        try:
            step(batch)
            return True
        except torch.OutOfMemoryError:
            return False          # no gc.collect(), no torch.cuda.empty_cache()
    return largest_batch(try_step, start, fits)


def _collect_only(try_step, start=1):
    def fits(step, batch):
        failed = False
        try:
            step(batch)
        except torch.OutOfMemoryError:
            failed = True
        gc.collect()              # but no torch.cuda.empty_cache()
        return not failed
    return largest_batch(try_step, start, fits)


def _catches_everything(try_step, start=1):
    def fits(step, batch):
        failed = False
        try:
            step(batch)
        except Exception:
            failed = True
        gc.collect()
        torch.cuda.empty_cache()
        return not failed
    return largest_batch(try_step, start, fits)


def _catches_runtime_error(try_step, start=1):
    def fits(step, batch):
        failed = False
        try:
            step(batch)
        except RuntimeError:
            failed = True
        gc.collect()
        torch.cuda.empty_cache()
        return not failed
    return largest_batch(try_step, start, fits)


def _doubling_only(try_step, start=1):
    good = 0
    batch = start
    while fits_after_except(try_step, batch):
        good = batch
        batch *= 2
    return good


def _halving_only(try_step, start=1):
    batch = start
    while batch >= 1:
        if fits_after_except(try_step, batch):
            return batch
        batch //= 2
    return 0


def _linear(try_step, start=1):
    batch = 1
    while fits_after_except(try_step, batch):
        batch += 1
    return batch - 1


def _first_failure(try_step, start=1):
    return largest_batch(try_step, start) + 1


def _float_midpoint(try_step, start=1):
    good, bad = 0, start
    while fits_after_except(try_step, bad):
        good, bad = bad, bad * 2
    while bad - good > 1:
        mid = (good + bad) / 2
        if fits_after_except(try_step, mid):
            good = mid
        else:
            bad = mid
    return good


def _no_catch(try_step, start=1):
    batch = start
    while True:
        try_step(batch)
        batch *= 2


def _one_when_nothing_fits(try_step, start=1):
    return max(1, largest_batch(try_step, start))


def _never_stops_at_one(try_step, start=1):
    batch = start
    while not fits_after_except(try_step, batch):
        batch = max(1, batch // 2)
    return largest_batch(try_step, batch)


Q1_WRONG = {
    "retries inside the except block": (_retry_inside_except, ["still in use", "except block", "failed = True"]),
    "keeps the exceptions": (_keeps_the_error, ["keep the exception in a variable"]),
    "no gc.collect() or empty_cache() after a failure": (_no_cleanup, ["gc.collect()", "torch.cuda.empty_cache()",
                                                                        "before the next try", "never ran"]),
    "no empty_cache() after a failure": (_collect_only, ["torch.cuda.empty_cache() never ran", "before the next try"]),
    "catches every Exception": (_catches_everything, ["not out of memory", "only torch.OutOfMemoryError"]),
    "catches every RuntimeError": (_catches_runtime_error, ["only torch.OutOfMemoryError", "except RuntimeError"]),
    "doubling only": (_doubling_only, ["power-of-two step", "bisect"]),
    "halving only": (_halving_only, ["power-of-two step", "bisect"]),
    "linear search": (_linear, ["more than 400 times", "one by one"]),
    "returns the first size that failed": (_first_failure, ["does not fit", "last size that fitted"]),
    "float midpoint": (_float_midpoint, ["whole number", "//"]),
    "does not catch the error": (_no_catch, ["let torch.OutOfMemoryError escape"]),
    "returns 1 when nothing fits": (_one_when_nothing_fits, ["not even batch 1 fits", "return 0"]),
    "never stops when batch 1 fails": (_never_stops_at_one, ["stop when batch 1 fails"]),
    "hard-coded constant": (lambda step, start=1: 22_399, ["on every simulated GPU", "calling try_step"]),
    "returns None": (lambda step, start=1: None, ["None", "return"]),
    "not a function": (22_400, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q1_WRONG))
def test_q1_wrong_answers_name_the_mistake(name):
    answer, words = Q1_WRONG[name]
    assert_wrong(ep06.q1, [answer], words)


def test_simulated_gpu_notices_memory_still_held():
    sim = ep06.SimulatedGPU(limit=1000, fixed=100, per_sample=100)
    assert sim.largest() == 9
    try:
        sim.try_step(20)
    except torch.OutOfMemoryError:
        assert sim.held() > 0
        with pytest.raises(torch.OutOfMemoryError):
            sim.try_step(9)                  # fits on a free GPU, not while the failed step is held
    assert sim.held() == 0 and sim.retried_while_held == [9]
    sim.try_step(9)
    with pytest.raises(ValueError):
        sim.try_step(0)
    with pytest.raises(TypeError):
        sim.try_step(4.5)


# --- q2: gradient accumulation ---------------------------------------------------------------

def accumulated_step(model, optimizer, loss_fn, X, y, micro_batch):
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(X.split(micro_batch), y.split(micro_batch)):
        loss = loss_fn(model(xb), yb) * (len(xb) / len(X))
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def accumulated_step_indexing(model, optimizer, loss_fn, X, y, micro_batch):
    model.zero_grad(set_to_none=True)
    total = 0.0
    for start in range(0, len(X), micro_batch):
        xb, yb = X[start:start + micro_batch], y[start:start + micro_batch]
        loss = loss_fn(model(xb), yb) * xb.shape[0] / X.shape[0]
        loss.backward()
        total += float(loss.detach())
    optimizer.step()
    return total


def test_q2_right_answers_pass_and_stub_is_not_done():
    for fn in (accumulated_step, accumulated_step_indexing):
        result, message = outcome(ep06.q2, fn)
        assert result == "correct", message
    assert outcome(ep06.q2, ____)[0] == "not-done"

    def stub(model, optimizer, loss_fn, X, y, micro_batch):
        optimizer.zero_grad()
        total = 0.0
        for xb, yb in zip(X.split(micro_batch), y.split(micro_batch)):
            loss = ____
            ____
        optimizer.step()
        return total
    assert outcome(ep06.q2, stub)[0] == "not-done"


def make_accumulation(scale="share", zero="before", step="after", keep="item", chunks="split", ret="total",
                      backward=True):
    def fn(model, optimizer, loss_fn, X, y, micro_batch):
        if zero == "before":
            optimizer.zero_grad()
        if chunks == "split":
            parts = list(zip(X.split(micro_batch), y.split(micro_batch)))
        elif chunks == "drop-last":
            parts = [(X[i:i + micro_batch], y[i:i + micro_batch]) for i in range(0, len(X) // micro_batch * micro_batch,
                                                                                micro_batch)] or [(X, y)]
        else:  # the whole batch
            parts = [(X, y)]
        total, losses = 0.0, []
        for xb, yb in parts:
            if zero == "inside":
                optimizer.zero_grad()
            weight = {"share": len(xb) / len(X), "count": 1 / len(parts), "none": 1.0}[scale]
            loss = loss_fn(model(xb), yb) * weight
            if keep == "item":
                if backward:
                    loss.backward()
                total += loss.item()
            else:
                losses.append(loss)
            if step == "inside":
                optimizer.step()
        if keep != "item":
            summed = sum(losses)
            summed.backward()
            total = summed.item()
        if step == "after":
            optimizer.step()
        return {"total": total, "tensor": loss, "last": loss.item()}[ret]
    return fn


def _chunked(model, optimizer, loss_fn, X, y, micro_batch):
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(X.chunk(micro_batch), y.chunk(micro_batch)):      # micro_batch pieces, not rows
        loss = loss_fn(model(xb), yb) * (len(xb) / len(X))
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def _integer_share(model, optimizer, loss_fn, X, y, micro_batch):
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(X.split(micro_batch), y.split(micro_batch)):
        loss = loss_fn(model(xb), yb) * (len(xb) // len(X))
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def _mean_of_means(model, optimizer, loss_fn, X, y, micro_batch):
    """Right gradients, but the loss returned counts each micro-batch once, whatever its size."""
    optimizer.zero_grad()
    means = []
    for xb, yb in zip(X.split(micro_batch), y.split(micro_batch)):
        loss = loss_fn(model(xb), yb)
        (loss * (len(xb) / len(X))).backward()
        means.append(loss.item())
    optimizer.step()
    return sum(means) / len(means)


Q2_WRONG = {
    "returns the mean of micro-batch means": (_mean_of_means, ["each micro-batch", "len(xb) / len(X)"]),
    "loss not scaled": (make_accumulation(scale="none"), ["sum over the micro-batches", "len(xb) / len(X)"]),
    "divided by the number of micro-batches": (make_accumulation(scale="count"), ["unequal size", "len(xb) / len(X)"]),
    "zero_grad inside the loop": (make_accumulation(zero="inside"), ["only the last micro-batch", "zero_grad"]),
    "no zero_grad": (make_accumulation(zero="never"), ["previous step", "zero_grad", "BEFORE the loop"]),
    "step inside the loop": (make_accumulation(step="inside"), ["optimizer.step()", "times", "after the loop"]),
    "no step": (make_accumulation(step="never"), ["never called optimizer.step()"]),
    "no backward": (make_accumulation(backward=False), ["no gradients", "loss.backward()"]),
    "the whole batch at once": (make_accumulation(chunks="whole"), ["in one forward pass", "no memory is saved"]),
    "last partial micro-batch dropped": (make_accumulation(chunks="drop-last"), ["last, shorter micro-batch is missing"]),
    "one backward on the summed losses": (make_accumulation(keep="tensors"),
                                          ["activations stayed in memory", "loss.detach()"]),
    "returns the loss tensor": (make_accumulation(ret="tensor"), ["float", "float(total)"]),
    "returns the last micro-batch's loss": (make_accumulation(ret="last"), ["mean loss", "only the last"]),
    "returns nothing": (lambda *args: make_accumulation()(*args) and None, ["returned None"]),
    "X.chunk(micro_batch): micro_batch pieces": (_chunked, ["ran 64 times", "X.chunk(n)", "X.split(micro_batch)"]),
    "integer division for the share": (_integer_share, ["every gradient was zero", "len(xb) // len(X)"]),
    "not a function": (0.69, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q2_WRONG))
def test_q2_wrong_answers_name_the_mistake(name):
    answer, words = Q2_WRONG[name]
    assert_wrong(ep06.q2, [answer], words)


# --- q3: choose how to fit a step in memory -----------------------------------------------------

def choose(options, budget_bytes):
    fitting = {name: samples / seconds for name, (peak, seconds, samples) in options.items() if peak <= budget_bytes}
    return max(fitting, key=fitting.get) if fitting else None


def choose_loop(options, budget_bytes):
    best, best_rate = None, -1.0
    for name, (peak, seconds, samples) in options.items():
        if peak <= budget_bytes and samples / seconds > best_rate:
            best, best_rate = name, samples / seconds
    return best


def test_q3_right_answers_pass_and_stub_is_not_done():
    for fn in (choose, choose_loop):
        result, message = outcome(ep06.q3, fn)
        assert result == "correct", message
    assert outcome(ep06.q3, ____)[0] == "not-done"
    assert outcome(ep06.q3, lambda options, budget: ____)[0] == "not-done"


def rule(key, fits=lambda p, b: p <= b, best=max, scale=1):
    def fn(options, budget_bytes):
        chosen = {n: key(*v) for n, v in options.items() if fits(v[0], budget_bytes * scale)}
        return best(chosen, key=chosen.get) if chosen else None
    return fn


Q3_WRONG = {
    "ignores the budget": (rule(lambda p, s, n: n / s, fits=lambda p, b: True), ["without checking that it fits"]),
    "budget multiplied by 2**30": (rule(lambda p, s, n: n / s, scale=2**30), ["already in bytes", "2**30"]),
    "least memory": (rule(lambda p, s, n: -p), ["least memory"]),
    "seconds per step": (rule(lambda p, s, n: -s), ["seconds per step", "samples per second"]),
    "strictly below the budget": (rule(lambda p, s, n: n / s, fits=lambda p, b: p < b), ["equals the budget", "<="]),
    "largest batch that fits": (rule(lambda p, s, n: n), ["largest batch"]),
    "largest batch, then the fastest": (rule(lambda p, s, n: (n, -s)), ["among those, the fastest",
                                                                        "samples_per_step / seconds_per_step"]),
    "most memory": (rule(lambda p, s, n: p), ["most memory"]),
    "slowest": (rule(lambda p, s, n: n / s, best=min), ["slowest", "min instead of max"]),
    "returns the measurements": (lambda o, b: o[choose(o, b)] if choose(o, b) else None, ["NAME of the option"]),
    "max() of nothing": (lambda o, b: max({n: v for n, v in o.items() if v[0] <= b},
                                          key=lambda n: o[n][2] / o[n][1]), ["return None", "default=None"]),
    "empty string when nothing fits": (lambda o, b: choose(o, b) or "", ["empty string", "None"]),
    "hard-coded name": (lambda o, b: "batch 512, checkpointing", ["not one of the options"]),
    "hard-coded name present everywhere": (lambda o, b: "batch 512" if "batch 512" in o else None,
                                           ["above the budget"]),
    "budget turned into GiB": (lambda o, b: choose(o, b / 2**30), ["None for every set", "already in bytes"]),
    "None although an option fits": (lambda o, b: None if "batch 128" in o and b == 15 * 2**30 else choose(o, b),
                                     ["returned None, but", "only when no option fits"]),
    "not a function": ("batch 512", ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q3_WRONG))
def test_q3_wrong_answers_name_the_mistake(name):
    answer, words = Q3_WRONG[name]
    assert_wrong(ep06.q3, [answer], words)



@pytest.mark.parametrize("exercise", [ep06.q1, ep06.q2, ep06.q3], ids=lambda e: e.name)
def test_hints_come_in_two_steps_without_the_code(exercise):
    assert len(exercise.hints) == 2, exercise.hints
    hint = " ".join(exercise.hints)
    assert not any(code in hint for code in (" = ", "+=", "return ", "2**30", "len(xb) / len(X)",
                                             "samples_per_step / seconds_per_step", "failed = True", "except torch"))


# --- the conditions that matter: inputs left alone, the lesson's rule, units, deadlines ----------

def _fits_cleaning_inside_except(try_step, batch):
    failed = False
    try:
        try_step(batch)
    except torch.OutOfMemoryError:
        failed = True
        gc.collect()                 # the traceback still holds the failed step: this frees nothing
        torch.cuda.empty_cache()
    return not failed


def _never_stops(try_step, start=1):
    good = start if fits_after_except(try_step, start) else 0
    while True:                      # forgot the bisection's end
        good = max(good, 1)


def _changes_reduction(model, optimizer, loss_fn, X, y, micro_batch):
    loss_fn.reduction = "sum"        # then divides by len(X): right gradients, a changed loss_fn
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(X.split(micro_batch), y.split(micro_batch)):
        loss = loss_fn(model(xb), yb) / len(X) * (1 if yb.dim() == 1 else yb.shape[1])
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def _gb_against_gib(options, budget_bytes):
    fitting = {n: s / t for n, (p, t, s) in options.items() if p / 1e9 <= budget_bytes / 2**30}
    return max(fitting, key=fitting.get) if fitting else None


def _drops_options(options, budget_bytes):
    for name in [n for n, (p, _, _) in options.items() if p > budget_bytes]:
        del options[name]            # the caller's measurements are gone
    return choose(options, budget_bytes)


@pytest.mark.parametrize("exercise, answer, words", [
    ("q1", lambda try_step, start=1: largest_batch(try_step, start, _fits_cleaning_inside_except),
     ["inside the except block", "free nothing", "outside the except"]),
    ("q2", _changes_reduction, ["changed the loss function", "reduction", "'sum'"]),
    ("q3", _gb_against_gib, ["GB", "GiB", "peak <= budget_bytes"]),
    ("q3", _drops_options, ["changed the options", "removed"]),
])
def test_classes_of_mistakes_are_named(exercise, answer, words):
    message = assert_wrong(getattr(ep06, exercise), (answer,), words)
    assert "<=" not in message or exercise != "q3" or "GiB" in message


def test_q1_a_search_that_never_ends_is_stopped(monkeypatch):
    from gpucourse import exercises

    monkeypatch.setattr(exercises, "DEADLINE_S", 1.0)
    assert_wrong(ep06.q1, (_never_stops,), ["did not return within 1 s", "loop that never ends"])


def test_written_otherwise_passes():
    def choose_sorted(options, budget_bytes):
        ranked = sorted(((s / t, n) for n, (p, t, s) in options.items() if p <= budget_bytes), reverse=True)
        return ranked[0][1] if ranked else None

    for fn in (choose_sorted, choose_loop):
        result, message = ep06.q3.outcome(fn)
        assert result == "correct", message


def test_q2_half_done_helper_is_not_done():
    def accumulate(model, loss_fn, xb, yb, share):
        return ____

    def step(model, optimizer, loss_fn, X, y, micro_batch):
        optimizer.zero_grad()
        total = 0.0
        for xb, yb in zip(X.split(micro_batch), y.split(micro_batch)):
            total += accumulate(model, loss_fn, xb, yb, len(xb) / len(X)) or 0.0
        optimizer.step()
        return total
    result, message = outcome(ep06.q2, step)
    assert result == "not-done" and "still uses ____" in message


def test_q3_an_error_in_choose_is_explained_in_the_learners_words():
    """A raw ZeroDivisionError tells a learner where Python stopped; the message says what it means."""
    assert_wrong(ep06.q3, [lambda options, budget: max(options, key=lambda n: options[n][2] / 0)],
                 ["raised ZeroDivisionError", "divides by zero"])
