"""Episode 5's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

Each exercise has a parametrized list of plausible wrong answers: the mistake the exercise is
about, wrong units (GB vs GiB, bits vs bytes), forgotten gradients or optimizer state, hard-coded
constants, answers right on one case only, and wrong types. Every one must be rejected with a
message that names its mistake.
"""

from __future__ import annotations

import gc
import math
from gc import collect as bound_collect            # bound before any check runs

import pytest
import torch
from torch.cuda import empty_cache as bound_empty_cache

from gpucourse.checks import ep05
from gpucourse.exercises import ____

from checking import assert_wrong, outcome



# --- q1: the bytes of a model's training state ------------------------------------------------

def training_state_bytes(model, copies):
    total = 0
    for p in model.parameters():
        size = p.numel() * p.element_size()
        total += size
        if p.requires_grad:
            total += size * (1 + copies)
    return total


def training_state_bytes_other_spelling(model, copies):
    weights = sum(p.nbytes for p in model.parameters())
    trainable = sum(p.nbytes for p in model.parameters() if p.requires_grad)
    return weights + trainable + copies * trainable


def stub_state_bytes(model, copies):
    return ____


def test_q1_right_answers_pass_and_stub_is_not_done():
    for fn in (training_state_bytes, training_state_bytes_other_spelling):
        result, message = outcome(ep05.q1, fn)
        assert result == "correct", message
    assert outcome(ep05.q1, ____)[0] == "not-done"
    assert outcome(ep05.q1, stub_state_bytes)[0] == "not-done"


def _sizes(model):
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    return params, trainable


def state_formula(weights=True, grads=True, state=True, respect_frozen=True, element=None, scale=1.0,
                  copies_override=None, numbers=False):
    def fn(model, copies):
        params, trainable = _sizes(model)
        if not respect_frozen:
            trainable = params
        copies = copies if copies_override is None else copies_override
        size = (lambda p: p.numel()) if numbers else (lambda p: p.numel() * (element or p.element_size()))
        total = sum(size(p) for p in params) if weights else 0
        total += sum(size(p) for p in trainable) * ((1 if grads else 0) + (copies if state else 0))
        return total * scale
    return fn


Q1_WRONG = {
    "weights only": (state_formula(grads=False, state=False), ["weights only"]),
    "forgot the gradients": (state_formula(grads=False), ["gradients are missing"]),
    "forgot the optimizer state": (state_formula(state=False), ["optimizer state is missing", "exp_avg"]),
    "frozen parameters counted": (state_formula(respect_frozen=False), ["frozen", "requires_grad"]),
    "4 bytes for every dtype": (state_formula(element=4), ["4 bytes for every number", "element_size"]),
    "bits, not bytes": (state_formula(scale=8), ["bits"]),
    "numbers, not bytes": (state_formula(numbers=True), ["numbers, not bytes", "element_size"]),
    "always Adam's two copies": (state_formula(copies_override=2), ["ignored `copies`"]),
    "GiB": (state_formula(scale=1 / 2**30), ["GiB", "bytes"]),
    "MB": (state_formula(scale=1 / 1e6), ["in MB"]),
    "hard-coded 16 bytes per parameter": (lambda m, c: 16 * sum(p.numel() for p in m.parameters()),
                                          ["right for", "of the 7 cases"]),
    "one dtype for all parameters": (lambda m, c: next(m.parameters()).element_size()
                                     * (sum(p.numel() for p in m.parameters())
                                        + sum(p.numel() for p in m.parameters() if p.requires_grad) * (1 + c)),
                                     ["own dtype", "element_size() per parameter"]),
    "hard-coded constant": (lambda m, c: 83_984, ["for every model", "model.parameters()"]),
    "gradients counted twice": (lambda m, c: training_state_bytes(m, c + 1), ["gradients twice"]),
    "text": (lambda m, c: "83984 bytes", ["should be a number", "text in quotes"]),
    "half a byte": (lambda m, c: training_state_bytes(m, c) + 0.25, ["whole number"]),
    "not a function": (83_984, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q1_WRONG))
def test_q1_wrong_answers_name_the_mistake(name):
    answer, words = Q1_WRONG[name]
    assert_wrong(ep05.q1, [answer], words)


# --- q2: the largest batch from two measurements ---------------------------------------------

def max_batch(budget_gib, b1, peak1, b2, peak2):
    per_sample = (peak2 - peak1) / (b2 - b1)
    fixed = peak1 - per_sample * b1
    return max(0, math.floor((budget_gib * 2**30 - fixed) / per_sample))


def max_batch_int_arithmetic(budget_gib, b1, peak1, b2, peak2):
    if b1 > b2:
        b1, peak1, b2, peak2 = b2, peak2, b1, peak1
    from fractions import Fraction
    slope = Fraction(peak2 - peak1, b2 - b1)
    free = Fraction(budget_gib).limit_denominator(10**6) * 2**30 - (peak1 - slope * b1)
    return max(0, int(free // slope))


def test_q2_right_answers_pass_and_stub_is_not_done():
    for fn in (max_batch, max_batch_int_arithmetic):
        result, message = outcome(ep05.q2, fn)
        assert result == "correct", message
    assert outcome(ep05.q2, ____)[0] == "not-done"
    assert outcome(ep05.q2, lambda *a: ____)[0] == "not-done"


def _line(budget_gib, b1, p1, b2, p2):
    s = (p2 - p1) / (b2 - b1)
    return s, p1 - s * b1


Q2_WRONG = {
    "proportional to the batch": (lambda g, b1, p1, b2, p2: math.floor(g * 2**30 / (p2 / b2)),
                                  ["proportional", "fixed"]),
    "GB instead of GiB": (lambda g, b1, p1, b2, p2: max(0, math.floor((g * 1e9 - _line(g, b1, p1, b2, p2)[1])
                                                                      / _line(g, b1, p1, b2, p2)[0])),
                          ["2**30", "GB"]),
    "MiB instead of GiB": (lambda g, b1, p1, b2, p2: max(0, math.floor((g * 2**20 - _line(g, b1, p1, b2, p2)[1])
                                                                       / _line(g, b1, p1, b2, p2)[0])),
                           ["MiB"]),
    "rounded up": (lambda g, b1, p1, b2, p2: max(0, math.ceil((g * 2**30 - _line(g, b1, p1, b2, p2)[1])
                                                              / _line(g, b1, p1, b2, p2)[0])),
                   ["round down"]),
    "peak1 taken as the fixed part": (lambda g, b1, p1, b2, p2: max(0, math.floor((g * 2**30 - p1)
                                                                                  / _line(g, b1, p1, b2, p2)[0])),
                                      ["peak1 already includes"]),
    "negative when nothing fits": (lambda g, b1, p1, b2, p2: math.floor((g * 2**30 - _line(g, b1, p1, b2, p2)[1])
                                                                       / _line(g, b1, p1, b2, p2)[0]),
                                   ["return 0"]),
    "a float batch": (lambda g, b1, p1, b2, p2: (g * 2**30 - _line(g, b1, p1, b2, p2)[1]) / _line(g, b1, p1, b2, p2)[0],
                      ["whole number", "math.floor"]),
    "an integral float": (lambda g, b1, p1, b2, p2: float(max_batch(g, b1, p1, b2, p2)), ["return an int"]),
    "hard-coded constant": (lambda g, b1, p1, b2, p2: 3_500_000, ["for every case", "compute it"]),
    "budget left in GiB": (lambda g, b1, p1, b2, p2: max(0, math.floor((g - _line(g, b1, p1, b2, p2)[1])
                                                                       / _line(g, b1, p1, b2, p2)[0])),
                           ["multiply it by 2**30"]),
    "ceil minus one": (lambda g, b1, p1, b2, p2: max(0, math.ceil((g * 2**30 - _line(g, b1, p1, b2, p2)[1])
                                                                  / _line(g, b1, p1, b2, p2)[0]) - 1),
                       ["one too few", "equals the budget exactly", "math.floor"]),
    "text": (lambda g, b1, p1, b2, p2: "3 million", ["should be a number"]),
    "not a function": (1234, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q2_WRONG))
def test_q2_wrong_answers_name_the_mistake(name):
    answer, words = Q2_WRONG[name]
    assert_wrong(ep05.q2, [answer], words)


# --- q3: an out-of-memory-safe search for the largest batch ----------------------------------

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


def test_q3_accepts_cleanup_functions_bound_by_other_names():
    for collect, empty_cache in ((bound_collect, torch.cuda.empty_cache), (gc.collect, bound_empty_cache),
                                 (gc.collect, torch.cuda.memory.empty_cache)):
        result, message = outcome(ep05.q3, _largest_batch_with(collect, empty_cache))
        assert result == "correct", message


def test_q3_right_answers_pass_and_stub_is_not_done():
    for fn in (largest_batch, largest_batch_returning_in_except, largest_batch_from_one):
        result, message = outcome(ep05.q3, fn)
        assert result == "correct", message
    assert outcome(ep05.q3, ____)[0] == "not-done"
    assert outcome(ep05.q3, lambda step, start=1: ____)[0] == "not-done"

    def uses_blank(step, start=1):
        return ____(start)
    assert outcome(ep05.q3, uses_blank)[0] == "not-done"


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


Q3_WRONG = {
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


@pytest.mark.parametrize("name", list(Q3_WRONG))
def test_q3_wrong_answers_name_the_mistake(name):
    answer, words = Q3_WRONG[name]
    assert_wrong(ep05.q3, [answer], words)


def test_simulated_gpu_notices_memory_still_held():
    sim = ep05.SimulatedGPU(limit=1000, fixed=100, per_sample=100)
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


# --- q4: gradient accumulation ---------------------------------------------------------------

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


def test_q4_right_answers_pass_and_stub_is_not_done():
    for fn in (accumulated_step, accumulated_step_indexing):
        result, message = outcome(ep05.q4, fn)
        assert result == "correct", message
    assert outcome(ep05.q4, ____)[0] == "not-done"

    def stub(model, optimizer, loss_fn, X, y, micro_batch):
        optimizer.zero_grad()
        total = 0.0
        for xb, yb in zip(X.split(micro_batch), y.split(micro_batch)):
            loss = ____
            ____
        optimizer.step()
        return total
    assert outcome(ep05.q4, stub)[0] == "not-done"


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


Q4_WRONG = {
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
                                          ["activations stayed in memory", "loss.item()"]),
    "returns the loss tensor": (make_accumulation(ret="tensor"), ["float", "loss.item()"]),
    "returns the last micro-batch's loss": (make_accumulation(ret="last"), ["mean loss", "not just the last"]),
    "returns nothing": (lambda *args: make_accumulation()(*args) and None, ["returned None"]),
    "X.chunk(micro_batch): micro_batch pieces": (_chunked, ["ran 64 times", "X.chunk(n)", "X.split(micro_batch)"]),
    "integer division for the share": (_integer_share, ["every gradient was zero", "len(xb) // len(X)"]),
    "not a function": (0.69, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q4_WRONG))
def test_q4_wrong_answers_name_the_mistake(name):
    answer, words = Q4_WRONG[name]
    assert_wrong(ep05.q4, [answer], words)


# --- q5: choose how to fit a step in memory -----------------------------------------------------

def choose(options, budget_bytes):
    fitting = {name: samples / seconds for name, (peak, seconds, samples) in options.items() if peak <= budget_bytes}
    return max(fitting, key=fitting.get) if fitting else None


def choose_loop(options, budget_bytes):
    best, best_rate = None, -1.0
    for name, (peak, seconds, samples) in options.items():
        if peak <= budget_bytes and samples / seconds > best_rate:
            best, best_rate = name, samples / seconds
    return best


def test_q5_right_answers_pass_and_stub_is_not_done():
    for fn in (choose, choose_loop):
        result, message = outcome(ep05.q5, fn)
        assert result == "correct", message
    assert outcome(ep05.q5, ____)[0] == "not-done"
    assert outcome(ep05.q5, lambda options, budget: ____)[0] == "not-done"


def rule(key, fits=lambda p, b: p <= b, best=max, scale=1):
    def fn(options, budget_bytes):
        chosen = {n: key(*v) for n, v in options.items() if fits(v[0], budget_bytes * scale)}
        return best(chosen, key=chosen.get) if chosen else None
    return fn


Q5_WRONG = {
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


@pytest.mark.parametrize("name", list(Q5_WRONG))
def test_q5_wrong_answers_name_the_mistake(name):
    answer, words = Q5_WRONG[name]
    assert_wrong(ep05.q5, [answer], words)


@pytest.mark.parametrize("exercise", [ep05.q1, ep05.q2, ep05.q3, ep05.q4, ep05.q5], ids=lambda e: e.name)
def test_hints_point_the_way_without_the_code(exercise):
    hint = " ".join(exercise.hints)
    assert hint and not any(code in hint for code in (" = ", "+=", "return ", "2**30", "len(xb) / len(X)",
                                                      "samples_per_step / seconds_per_step", "failed = True"))


# --- the conditions that matter: inputs left alone, the lesson's rule, units, order, deadlines ----

def _casts_the_model(model, copies):                   # the bfloat16 model becomes float32 for good
    model.float()
    return training_state_bytes(model, copies)


def _unsorted_slope(budget_gib, b1, peak1, b2, peak2):  # a positive peak difference over b2 - b1
    per_sample = (max(peak1, peak2) - min(peak1, peak2)) / (b2 - b1)
    fixed = peak1 - per_sample * b1
    return max(0, math.floor((budget_gib * 2**30 - fixed) / per_sample))


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
    ("q1", _casts_the_model, ["changed the model", "dtype", "for good"]),
    ("q2", _unsorted_slope, ["largest batch first", "either order"]),
    ("q3", lambda try_step, start=1: largest_batch(try_step, start, _fits_cleaning_inside_except),
     ["inside the except block", "free nothing", "outside the except"]),
    ("q4", _changes_reduction, ["changed the loss function", "reduction", "'sum'"]),
    ("q5", _gb_against_gib, ["GB", "GiB", "peak <= budget_bytes"]),
    ("q5", _drops_options, ["changed the options", "removed"]),
])
def test_classes_of_mistakes_are_named(exercise, answer, words):
    message = assert_wrong(getattr(ep05, exercise), (answer,), words)
    assert "2**30" not in message or exercise != "q2", message   # not told to multiply by 2**30
    assert "<=" not in message or exercise != "q5" or "GiB" in message


def test_q3_a_search_that_never_ends_is_stopped(monkeypatch):
    from gpucourse import exercises

    monkeypatch.setattr(exercises, "DEADLINE_S", 1.0)
    assert_wrong(ep05.q3, (_never_stops,), ["did not return within 1 s", "loop that never ends"])


def test_written_otherwise_passes():
    import numpy as np

    def max_batch_numpy(budget_gib, b1, peak1, b2, peak2):
        slope = np.divide(peak2 - peak1, b2 - b1, dtype=np.float64)
        return int(max(0, np.floor((budget_gib * 2**30 - (peak1 - slope * b1)) / slope)))

    def choose_sorted(options, budget_bytes):
        ranked = sorted(((s / t, n) for n, (p, t, s) in options.items() if p <= budget_bytes), reverse=True)
        return ranked[0][1] if ranked else None

    for exercise, fn in (("q2", max_batch_numpy), ("q5", choose_sorted), ("q5", choose_loop)):
        result, message = getattr(ep05, exercise).outcome(fn)
        assert result == "correct", (exercise, message)


def test_q4_half_done_helper_is_not_done():
    def accumulate(model, loss_fn, xb, yb, share):
        return ____

    def step(model, optimizer, loss_fn, X, y, micro_batch):
        optimizer.zero_grad()
        total = 0.0
        for xb, yb in zip(X.split(micro_batch), y.split(micro_batch)):
            total += accumulate(model, loss_fn, xb, yb, len(xb) / len(X)) or 0.0
        optimizer.step()
        return total
    result, message = outcome(ep05.q4, step)
    assert result == "not-done" and "still uses ____" in message
