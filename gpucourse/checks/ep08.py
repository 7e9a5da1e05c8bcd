"""Checks for episode 8, "Feeding the GPU".

``q1`` (capstone) make a slow training loop at least 3× faster without changing what it computes ·
``q2`` plan a DataLoader: the time per batch with a number of workers, and how many workers keep up.

``q1`` runs the learner's loop and ``slow_train`` on the same device (the GPU if there is one, else
the CPU), compares the losses and the trained weights with those of the original loop, and times
both on two tables no correctness case used, counting the steps the model really runs. A loop too
slow is told which remaining cost it shows, by its effect (time growing with the table, or with
the batch), not what to change.
"""

from __future__ import annotations

import contextlib
import copy
import math
import re
import time

import numpy as np

from ..device import cuda_usable
from ..exercises import NO_GPU_TEXT, Exercise, Wrong, as_number, require_function, solution_link, tensors_close
from ..exercises import call_answer as _call

NOTEBOOK = "08-feeding-the-gpu.ipynb"


# --- q1: the capstone, a slow training loop --------------------------------------------------

def sgd_step(model, optimizer, xb, yb):
    """One SGD step on the batch (xb, yb); returns the loss, on the device."""
    from torch import nn

    optimizer.zero_grad()
    loss = nn.functional.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb)
    loss.backward()
    optimizer.step()
    return loss


def slow_train(model, X, y, steps, batch_size, lr=0.05):
    """`steps` SGD steps on batches of the NumPy arrays X (standardised) and y."""
    import torch

    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        X_std = (X - X.mean(axis=0)) / X.std(axis=0)
        first = (step % (len(X) // batch_size)) * batch_size
        rows = range(first, first + batch_size)
        xb = torch.stack([torch.tensor(X_std[i], dtype=torch.float32, device=device)
                          for i in rows])
        yb = torch.tensor([float(y[i]) for i in rows], dtype=torch.float32,
                          device=device)
        losses.append(sgd_step(model, optimizer, xb, yb).item())
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
    """Where the check runs both loops: the GPU if there is one this PyTorch can use, else the CPU."""
    import torch

    return torch.device("cuda" if cuda_usable() else "cpu")


REQUIRED_SPEEDUP = 3.0
_Q1_CASES = [  # seed, events, batch size, steps: the losses and weights are compared on these
    (11, 40_000, 256, 60),
    (12, 9_050, 100, 95),    # steps wrap around: 90 full batches per pass, the 50 rows left over never used
]
_Q1_TIMED = [  # timed on data no correctness case used, so no answer can be remembered
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
                    f"{device}: put the data on the model's device, found with "
                    "device = next(model.parameters()).device and .to(device).")
        if "must have the same dtype" in text or "expected scalar type" in text.lower():
            return (f"your loop mixed dtypes ({text.splitlines()[0][:100]}): the model is float32, and NumPy's "
                    "table is float64. Convert it to float32 (.float()), as slow_train's tensors are.")
        if "can't be cast" in text and "Long" in text:
            return (f"the labels are integers ({text.splitlines()[0][:100]}): BCEWithLogitsLoss needs float "
                    "targets. Convert y once with torch.from_numpy(y).float().")
        if device.type == "cpu" and ("cuda" in text.lower() or re.search(NO_GPU_TEXT, text)):
            return (f"your loop asked for CUDA, but there is no GPU here ({text.splitlines()[0][:100]}). Use the "
                    "model's device, next(model.parameters()).device, instead of 'cuda'.")
        return None
    return explain


def _reference_losses(original, X, y, steps, batch, device, ddof, *, statistics=np.float64, model_out=None):
    """The right losses computed quickly, with the standard deviation divided by n - ``ddof``.

    ``statistics``: the dtype of the table the mean and std are taken from (slow_train's is float64).
    ``model_out``: a list that receives the trained model.
    """
    import torch
    from torch import nn

    model = copy.deepcopy(original).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    table = X.astype(statistics)
    X_std = torch.from_numpy((table - table.mean(axis=0)) / table.std(axis=0, ddof=ddof)).float().to(device)
    if model_out is not None:
        model_out.append(model)
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


_FLOAT32_STATISTICS = (
    "your loop matches slow_train up to rounding: it takes the mean and std of a float32 copy of X, and "
    "slow_train takes them of the float64 table and converts the standardised table to float32 after. "
    "Over the steps that rounding moves the weights by more than the check allows: standardise in NumPy "
    "(float64) first, then .float(), as slow_train does.")


def _float32_statistics(original, X, y, steps, batch, device, got, params, tol) -> bool:
    """True if the answer's losses and weights are those of a table standardised from float32 statistics."""
    trained = []
    losses = _reference_losses(original, X, y, steps, batch, device, ddof=0, statistics=np.float32,
                               model_out=trained)
    return _same_losses(got, losses, tol) and all(
        tensors_close(p, q.detach().cpu(), rtol=1e-4, atol=1e-5) for p, q in zip(params, trained[0].parameters()))


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
                    "float32 and convert the data to float32 (.float()), as slow_train's tensors are.")
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
            if _float32_statistics(original, X, y, steps, batch, device, got, params, tol):
                raise Wrong(_FLOAT32_STATISTICS)
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
            if _float32_statistics(original, X, y, steps, batch, device, got, params, tol):
                raise Wrong(_FLOAT32_STATISTICS)
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

    On the CPU the time is this process's CPU time, not the wall clock: the check runs under
    ``one_thread()``, so the work is all here, and other programs on a busy machine cannot make
    a loop look faster or slower than it is (wall-clock ratios of a 1.1x loop reached 2.6x on a
    loaded 2-core machine). On a GPU the wall clock, read after a synchronize, is the time.
    The thread count is put back after each run, so a loop that changes it cannot slow or speed
    up the runs timed after it.
    """
    import torch

    on_gpu = device is not None and device.type != "cpu"
    clock = time.perf_counter if on_gpu else time.process_time
    best, result = float("inf"), None
    for _ in range(reps):
        threads = torch.get_num_threads()
        try:
            start = clock()
            result = fn()
            if device is not None and device.type == "cuda":
                torch.cuda.synchronize(device)
            best = min(best, clock() - start)
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
    for seed, n, batch, steps in _Q1_CASES:
        _run_case(fast_train, seed, n, batch, steps, device)
    report = []
    for k, (seed, n, batch, steps) in enumerate(_Q1_TIMED):
        slow_s, fast_s = _time_case(fast_train, seed, n, batch, steps, device)
        speedup = slow_s / fast_s
        if speedup < REQUIRED_SPEEDUP:
            took = "took" if device.type != "cpu" else "used the CPU for"
            where = (f"on a table of {n:,} events, batch {batch}, your loop {took} {fast_s:.3f} s against the "
                     f"original's {slow_s:.3f} s for {steps} steps: {speedup:.1f}×, and the goal is at least "
                     f"{REQUIRED_SPEEDUP:g}× on every table.")
            advice = (" On this table the time of a step grows with the number of events in the whole table, "
                      "not in the batch: something is still done to all of X every step. Profile your loop."
                      if k == 0 else
                      " On this small table with large batches the time of a step grows with the batch size: "
                      "something is still done once per event instead of once per batch (and, on a GPU, the host "
                      "may still wait for the device every step). Profile your loop: fix every cause, not only one.")
            raise Wrong("same losses and weights, but " + where + advice)
        report.append(f"{speedup:.0f}× on {n:,} events ({fast_s * 1e3:.0f} ms against {slow_s * 1e3:.0f} ms)")
    where = "both on one CPU thread" if device.type == "cpu" else f"both on {device}"
    return (f"same losses and the same trained weights as the original, and faster on this machine, {where}: "
            + "; ".join(report) + ".")


q1 = Exercise("ep08.q1", _check_fast_train,
              hint=("Which lines of slow_train does the profile point at, and what is the rest of the wall-clock "
                    "time, which the op table does not show? For each line inside the loop: does its result change "
                    "from step to step, or from event to event?",
                    "Sort the loop's work by what it depends on: only X and y, the step, or each event. Work that "
                    "depends only on X and y can be done once, before the loop, on the model's device; work done "
                    "event by event can be done for a whole batch at once; and a value read back as a Python "
                    "number makes the host wait for the device, so read the losses once, at the end."),
              solution=solution_link(NOTEBOOK))


# --- q2: how many DataLoader workers ----------------------------------------------------------

def ms_per_batch_reference(read_ms, step_ms, workers):
    return read_ms + step_ms if workers == 0 else max(step_ms, read_ms / workers)


def workers_needed_reference(read_ms, step_ms):
    return math.ceil(read_ms / step_ms)


#: (read_ms, step_ms, workers). (5, 20, 2) has step_ms / workers above read_ms: there, swapping the two
#: roles (max(read_ms, step_ms / workers)) differs from reading a batch every read_ms (max(step_ms, read_ms)).
_Q2_RATES = [(30, 10, 0), (30, 10, 2), (30, 10, 3), (30, 10, 5), (5, 20, 1), (25, 10, 2), (90, 12, 4), (8, 8, 0),
             (5, 20, 2)]
_Q2_NEEDED = [(30, 10), (25, 10), (27, 10), (5, 20), (0, 8), (100, 7), (40, 40), (12, 4)]

#: Tempting times per batch, each with what it gets wrong: (rule, message).
_RATE_DIAGNOSES = [
    (lambda r, s, w: r / w + s if w else r + s,
     "with workers the reading and the step overlap (workers read while the main process trains), so the "
     "slower of the two sets the pace, not their sum."),
    (lambda r, s, w: max(s, r / w) if w else max(s, r),
     "with num_workers=0 the main process reads each batch itself, then trains on it: nothing overlaps, so "
     "the two times add up."),
    (lambda r, s, w: r / w if w else r + s,
     "however many workers read, the main process still needs step_ms for each step: it cannot go faster "
     "than its step."),
    (lambda r, s, w: max(s, r / (w + 1)) if w else r + s,
     "you counted the main process as one more reader; with num_workers > 0 only the workers read."),
    (lambda r, s, w: min(s, r / w) if w else r + s,
     "the pace is set by the SLOWER of reading and stepping (the larger time), not the faster."),
    (lambda r, s, w: max(r, s / w) if w else r + s,
     "you swapped the roles: the workers share the READING (w batches read at once, one every read_ms / w), "
     "while every step runs in the main process and takes step_ms, whatever the number of workers."),
    (lambda r, s, w: max(s, r) if w else r + s,
     "the workers read in parallel, each its own batch: with w workers a batch arrives every read_ms / w on "
     "average, not every read_ms."),
]

_NEEDED_DIAGNOSES = [
    (lambda r, s: r // s, "you rounded down: with that many workers a batch still arrives more slowly than a step "
                          "takes. Round up."),
    (lambda r, s: round(r / s), "you rounded to the nearest whole number; with fewer workers than read_ms / step_ms "
                                "the GPU still waits. Round up."),
    (lambda r, s: r / s, "a number of workers is a whole number: round up to the fewest that keep up."),
    (lambda r, s: math.ceil(s / r) if r else 0, "you divided the step time by the read time; which of the two "
                                                 "must the workers together make short enough?"),
    (lambda r, s: math.ceil(r / s) + 1, "one worker too many: with read_ms / step_ms workers (rounded up) a batch "
                                        "is ready every step already. (The step runs in the main process: the "
                                        "workers only read, so the step is not work they must share.)"),
    (lambda r, s: math.ceil(r / s) - 1 if r else 0, "one worker too few: the main process does not read when "
                                                   "num_workers > 0."),
    (lambda r, s: max(1, math.ceil(r / s)), "when reading takes no time at all there is nothing to overlap: "
                                            "0 workers keep up."),
]


def _close(a, b):
    return abs(a - b) <= 1e-9 + 1e-9 * abs(b)


def _check_loader_plan(ms_per_batch, workers_needed):
    require_function(ms_per_batch, "ms_per_batch")
    require_function(workers_needed, "workers_needed")
    rates = []
    for read, step, workers in _Q2_RATES:
        what = f"ms_per_batch(read_ms={read}, step_ms={step}, workers={workers})"
        rates.append((read, step, workers, as_number(what, _call(ms_per_batch, read, step, workers, what=what))))
    for read, step, workers, got in rates:
        want = ms_per_batch_reference(read, step, workers)
        if _close(got, want):
            continue
        if _close(got, want / 1e3) or _close(got, want * 1e3):
            raise Wrong("your time per batch looks converted to or from seconds: keep milliseconds, as the "
                        "arguments are.")
        for rule, message in _RATE_DIAGNOSES:   # a diagnosis must fit every case, not one by coincidence
            if all(_close(g, rule(r, s, w)) for r, s, w, g in rates):
                raise Wrong(message)
        raise Wrong(f"ms_per_batch(read_ms={read}, step_ms={step}, workers={workers}) should be {want:g} ms a "
                    f"batch, got {got:g}.")
    needs = []
    for read, step in _Q2_NEEDED:
        what = f"workers_needed(read_ms={read}, step_ms={step})"
        got = _call(workers_needed, read, step, what=what)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise Wrong(f"{what} should return a number of workers, an int; got {type(got).__name__} {got!r:.40}.")
        needs.append((read, step, got))
    for read, step, got in needs:
        want = workers_needed_reference(read, step)
        if got == want:
            continue
        for rule, message in _NEEDED_DIAGNOSES:
            if all(_close(g, rule(r, s)) for r, s, g in needs):
                raise Wrong(message)
        raise Wrong(f"workers_needed(read_ms={read}, step_ms={step}) should be {want}: the fewest workers with "
                    f"which a batch is ready every step; got {got!r}.")
    return ("right on nine loaders and eight plans: without workers, reading and stepping add up; with them, the "
            "slower of the two sets the pace, and the fewest workers that keep up make reading no slower than "
            "stepping.")


q2 = Exercise("ep08.q2", _check_loader_plan,
              hint=("While the main process trains on one batch, what are the workers doing, and how often does "
                    "each of them finish a batch? And what happens when there are no workers?",
                    "With no workers nothing overlaps: each batch costs its read and its step. With workers, reading "
                    "and stepping overlap, and w workers together deliver a batch every read time / w on average; "
                    "the slower of delivering and stepping sets the pace. The fewest workers that keep up make "
                    "delivering no slower than stepping: solve for w and round to a whole worker in the safe "
                    "direction."),
              solution=solution_link(NOTEBOOK))

__all__ = ["q1", "q2", "slow_train", "capstone_data", "capstone_model", "capstone_device", "REQUIRED_SPEEDUP",
           "one_thread", "ms_per_batch_reference", "workers_needed_reference"]
