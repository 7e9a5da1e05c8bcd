"""Episode 8's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

The capstone (q1) check times the learner's loop against the original on this machine; the wrong
fixes below are the ones a learner is tempted by: cutting steps, skipping the standardisation,
training a new or smaller model, shuffling, another optimizer, fixing one cause only, remembering
results instead of training, or not fixing anything. q2 plans a DataLoader: the time per batch with
a number of workers, and the fewest workers that keep up.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from gpucourse.checks import ep08
from gpucourse.exercises import ____

from checking import assert_wrong
from taught import assert_same_function

ROOT = Path(__file__).resolve().parents[1]
loss_fn = nn.BCEWithLogitsLoss()


# --- q1: the capstone ----------------------------------------------------------------------------

def fast_train(model, X, y, steps, batch_size, lr=0.05):
    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    X_std = torch.from_numpy((X - X.mean(axis=0)) / X.std(axis=0)).float().to(device)
    y_t = torch.from_numpy(y).float().to(device)
    n_batches = len(X) // batch_size
    losses = []
    for step in range(steps):
        first = (step % n_batches) * batch_size
        xb, yb = X_std[first:first + batch_size], y_t[first:first + batch_size]
        optimizer.zero_grad()
        loss = loss_fn(model(xb).squeeze(1), yb)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


def _variant(standardise=True, shuffle=False, steps_cut=0, opt="sgd", lr=0.05, zero_grad=True, new_model=False,
             no_grad=False, width=None, batch_scale=1, every_other=False, per_batch_std=False, mutate=False,
             torch_std=None):
    def train(model, X, y, steps, batch_size):
        if new_model:
            model = copy.deepcopy(model)
        if width is not None:
            model[2] = nn.Linear(model[2].in_features, width)
            model[4] = nn.Linear(width, 1)
        optimizer = (torch.optim.SGD(model.parameters(), lr=lr) if opt == "sgd"
                     else torch.optim.Adam(model.parameters(), lr=lr))
        if mutate:
            X -= X.mean(axis=0)
            X /= X.std(axis=0)
            Xs = X
        else:
            Xs = (X - X.mean(axis=0)) / X.std(axis=0) if standardise else X
        X_std = torch.from_numpy(Xs).float()
        if torch_std is not None:   # standardised in torch, float32, with this correction
            Xt = torch.from_numpy(X).float()
            X_std = (Xt - Xt.mean(0)) / Xt.std(0, correction=torch_std)
        y_t = torch.from_numpy(y).float()
        bs = batch_size // batch_scale
        n_batches = len(X) // bs
        order = torch.randperm(n_batches, generator=torch.Generator().manual_seed(0)) if shuffle else None
        losses = []
        for step in range(steps - steps_cut):
            if every_other and step % 2:
                losses.append(losses[-1])
                continue
            k = step % n_batches
            k = int(order[k]) if shuffle else k
            xb, yb = X_std[k * bs:(k + 1) * bs], y_t[k * bs:(k + 1) * bs]
            if per_batch_std:
                xb = (xb - xb.mean(0)) / xb.std(0)
            if zero_grad:
                optimizer.zero_grad()
            if no_grad:
                with torch.no_grad():
                    loss = loss_fn(model(xb).squeeze(1), yb)
                losses.append(loss)
                continue
            loss = loss_fn(model(xb).squeeze(1), yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        return [float(v) for v in losses]
    return train


def test_one_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    with ep08.one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def fast_train_standardisation_only(model, X, y, steps, batch_size, lr=0.05):
    """One cause fixed (the table is standardised once); events are still copied one by one, .item() every step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    X_std = (X - X.mean(axis=0)) / X.std(axis=0)
    n_batches = len(X) // batch_size
    losses = []
    for step in range(steps):
        rows = range((step % n_batches) * batch_size, (step % n_batches + 1) * batch_size)
        xb = torch.stack([torch.tensor(X_std[i], dtype=torch.float32) for i in rows])
        yb = torch.tensor([float(y[i]) for i in rows], dtype=torch.float32)
        optimizer.zero_grad()
        loss = loss_fn(model(xb).squeeze(1), yb)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def fast_train_batches_only(model, X, y, steps, batch_size, lr=0.05):
    """Batches sliced from one tensor, losses read at the end, but the whole table standardised every step."""
    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    y_t = torch.from_numpy(y).float().to(device)
    n_batches = len(X) // batch_size
    losses = []
    for step in range(steps):
        X_std = torch.from_numpy((X - X.mean(axis=0)) / X.std(axis=0)).float().to(device)
        first = (step % n_batches) * batch_size
        optimizer.zero_grad()
        loss = loss_fn(model(X_std[first:first + batch_size]).squeeze(1), y_t[first:first + batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


def make_memoising():
    """Remembers (losses, trained weights) per data, weights and steps; answers repeats without training."""
    cache = {}

    def train(model, X, y, steps, batch_size):
        key = (X.tobytes(), y.tobytes(), steps, batch_size,
               tuple(p.detach().sum().item() for p in model.parameters()))
        if key not in cache:
            losses = fast_train(model, X, y, steps, batch_size)
            cache[key] = (losses, copy.deepcopy(model.state_dict()))
        losses, state = cache[key]
        model.load_state_dict(state)
        return list(losses)
    return train


def test_q1_solution_passes_and_stub_is_not_done():
    result, message = ep08.q1.outcome(fast_train)
    assert result == "correct", message
    result, message = ep08.q1.outcome(_variant(torch_std=0))   # torch.std with NumPy's divisor, n
    assert result == "correct", message
    assert ep08.q1.outcome(____)[0] == "not-done"
    assert ep08.q1.outcome(lambda model, X, y, steps, batch_size: ____)[0] == "not-done"


def _wraps_by_rows(ceil_batches=False):
    """Batches start at (step * batch_size) % len(X), or n_batches counts a last partial batch."""
    def train(model, X, y, steps, batch_size, lr=0.05):
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        X_std = torch.from_numpy((X - X.mean(axis=0)) / X.std(axis=0)).float()
        y_t = torch.from_numpy(y).float()
        n_batches = -(-len(X) // batch_size)
        losses = []
        for step in range(steps):
            first = (step % n_batches) * batch_size if ceil_batches else (step * batch_size) % len(X)
            optimizer.zero_grad()
            loss = loss_fn(model(X_std[first:first + batch_size]).squeeze(1), y_t[first:first + batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        return torch.stack(losses).tolist()
    return train


def _dtype_mistake(labels_as_int):
    def train(model, X, y, steps, batch_size, lr=0.05):
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        X_std = torch.from_numpy((X - X.mean(axis=0)) / X.std(axis=0))
        y_t = torch.from_numpy(y)
        if labels_as_int:
            X_std = X_std.float()
        else:
            y_t = y_t.double()
        n_batches = len(X) // batch_size
        losses = []
        for step in range(steps):
            first = (step % n_batches) * batch_size
            optimizer.zero_grad()
            loss = loss_fn(model(X_std[first:first + batch_size]).squeeze(1), y_t[first:first + batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses
    return train


def _float32_statistics(model, X, y, steps, batch_size):
    """The right loop, but the table is made float32 before its mean and std are taken (NumPy, float32)."""
    import numpy as np

    Xf = X.astype(np.float32)
    return _on_table(model, torch.from_numpy((Xf - Xf.mean(axis=0)) / Xf.std(axis=0)), y, steps, batch_size)


def _on_table(model, X_std, y, steps, batch_size):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    y_t = torch.from_numpy(y).float()
    n_batches, losses = len(X_std) // batch_size, []
    for step in range(steps):
        first = (step % n_batches) * batch_size
        optimizer.zero_grad()
        loss = loss_fn(model(X_std[first:first + batch_size]).squeeze(1), y_t[first:first + batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


Q1_WRONG = {
    "labels left as integers": (_dtype_mistake(labels_as_int=True), ["labels are integers", ".float()"]),
    "table left in float64": (_dtype_mistake(labels_as_int=False), ["mixed dtypes", "float64", ".float()"]),
    "wraps around by rows, (step * batch_size) % len(X)": (_wraps_by_rows(), ["wraps around", "len(X) // batch_size",
                                                                            "no partial batch"]),
    "counts the last partial batch": (_wraps_by_rows(ceil_batches=True), ["last full batch", "rows left over"]),
    "no fix at all: the original loop": (ep08.slow_train, ["slow_train itself"]),
    "the original, wrapped": (lambda m, X, y, s, b: list(ep08.slow_train(m, X, y, s, b)), ["3×", "profile"]),
    "cut steps": (_variant(steps_cut=10), ["losses for", "cut steps"]),
    "skips the standardisation": (_variant(standardise=False), ["first loss", "whole X"]),
    "standardises each batch on its own": (_variant(per_batch_std=True), ["loss", "whole X"]),
    "shuffled batches": (_variant(shuffle=True), ["same batches"]),
    "Adam instead of SGD": (_variant(opt="adam"), ["same optimizer"]),
    "another learning rate": (_variant(lr=0.1), ["lr=0.05"]),
    "no zero_grad": (_variant(zero_grad=False), ["zero_grad"]),
    "trains a copy, not the model given": (_variant(new_model=True), ["untrained", "not a new one"]),
    "no training under no_grad": (_variant(no_grad=True), ["untrained", "no_grad"]),
    "smaller model": (_variant(width=16), ["changed shape", "may not change the model"]),
    "half batches": (_variant(batch_scale=2), ["first loss"]),
    "skips every other step": (_variant(every_other=True), ["losses part"]),
    "standardises X in place": (_variant(mutate=True), ["in place"]),
    "hard-coded losses": (lambda m, X, y, s, b: [0.69] * s, ["untrained"]),
    "returns one number": (lambda m, X, y, s, b: fast_train(m, X, y, s, b)[-1], ["list of losses"]),
    "not a function": ([0.7, 0.6], ["pass the function itself"]),
    "only the standardisation moved out of the loop": (fast_train_standardisation_only,
                                                       ["every table", "grows with the batch size", "once per event",
                                                        "not only one"]),
    "only the batches fixed, the table standardised every step": (fast_train_batches_only,
                                                                  ["every table", "whole table", "all of X"]),
    "remembers results instead of training": (make_memoising(), ["no cached results"]),
    "torch.std with its default n - 1": (_variant(torch_std=1), ["n - 1", "correction=0"]),
    # the right rule, but the statistics computed from the float32 table: a rounding-level difference
    "mean and std computed in float32": (_float32_statistics, ["float32", "float64", "rounding"]),
    "mixed devices": (lambda m, X, y, s, b: (_ for _ in ()).throw(RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")),
        ["mixed devices", "next(model.parameters()).device"]),
}


@pytest.mark.parametrize("name", list(Q1_WRONG))
def test_q1_wrong_fixes_are_rejected(name):
    answer, words = Q1_WRONG[name]
    assert_wrong(ep08.q1, [answer], words)


def test_q1_hard_coded_cuda_is_explained_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU")

    def on_cuda(model, X, y, steps, batch_size):
        torch.zeros(1).to("cuda")
    assert_wrong(ep08.q1, [on_cuda], ["no GPU here", "next(model.parameters()).device"])


def test_q1_timing_restores_a_changed_thread_count():
    before = torch.get_num_threads()

    def changes_threads():
        torch.set_num_threads(before + 1)
    with ep08.one_thread():
        ep08._time(changes_threads, 2)
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_q1_original_is_deliberately_much_slower():
    """The required factor must be far from noise: the fix is many times faster than REQUIRED_SPEEDUP."""
    X, y = ep08.capstone_data(11)
    model = ep08.capstone_model(11)
    with ep08.one_thread():
        slow = min(_timed(ep08.slow_train, model, X, y) for _ in range(2))
        best = min(_timed(fast_train, model, X, y) for _ in range(3))
    assert slow / best > 2 * ep08.REQUIRED_SPEEDUP, (slow, best)
    X, y = ep08.capstone_data(13, 2_048)   # the small table: building batches event by event is the cost
    model = ep08.capstone_model(13)
    with ep08.one_thread():
        slow = min(_timed(ep08.slow_train, model, X, y, 40, 1_024) for _ in range(2))
        best = min(_timed(fast_train, model, X, y, 40, 1_024) for _ in range(3))
    assert slow / best > 1.5 * ep08.REQUIRED_SPEEDUP, (slow, best)


def test_q1_times_cpu_work_not_the_wall_clock():
    """On the CPU the check counts this process's CPU time: time the machine spends on other
    programs (here: a sleep, which uses none) cannot change a verdict."""
    import time

    busy = lambda: sum(i * i for i in range(200_000))      # noqa: E731
    waiting, _ = ep08._time(lambda: time.sleep(0.3), 1, torch.device("cpu"))
    working, _ = ep08._time(busy, 1, torch.device("cpu"))
    assert waiting < 0.05, waiting
    assert working > 0, working


def _timed(fn, model, X, y, steps=60, batch=256):
    """CPU time of this thread: under one_thread() all of PyTorch's work runs here, and other processes
    on a busy machine cannot add to it (wall-clock ratios ranged 5.5-10.9x under load, these 6.3-7.3x)."""
    import time

    start = time.thread_time()
    fn(copy.deepcopy(model), X, y, steps, batch)
    return time.thread_time() - start


def _float64_model(model, X, y, steps, batch_size):
    model.double()
    X_std = torch.from_numpy((X - X.mean(axis=0)) / X.std(axis=0))
    y_t = torch.from_numpy(y).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    n_batches = len(X) // batch_size
    losses = []
    for step in range(steps):
        first = (step % n_batches) * batch_size
        optimizer.zero_grad()
        loss = loss_fn(model(X_std[first:first + batch_size]).squeeze(1), y_t[first:first + batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


def _no_wrap_around(model, X, y, steps, batch_size):      # slices past the end: a short batch, then NaN losses
    X_std = torch.from_numpy((X - X.mean(axis=0)) / X.std(axis=0)).float()
    y_t = torch.from_numpy(y).float()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        first = step * batch_size
        optimizer.zero_grad()
        loss = loss_fn(model(X_std[first:first + batch_size]).squeeze(1), y_t[first:first + batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


@pytest.mark.parametrize("answer, words", [
    (_float64_model, ["float64", "may not change the model", ".float()"]),
    (_no_wrap_around, ["wraps around", "n_batches"]),
])
def test_q1_float64_and_no_wrap_around_are_named(answer, words):
    message = assert_wrong(ep08.q1, [answer], words)
    assert "did not match" not in message and "is nan" not in message


# --- q2: DataLoader workers ------------------------------------------------------------------------

def ms_per_batch(read_ms, step_ms, workers):
    if workers == 0:
        return read_ms + step_ms
    return max(step_ms, read_ms / workers)


def workers_needed(read_ms, step_ms):
    return math.ceil(read_ms / step_ms)


def test_q2_right_answers_pass_and_stub_is_not_done():
    assert ep08.q2.outcome(ms_per_batch, workers_needed)[0] == "correct"
    assert ep08.q2.outcome(lambda r, s, w: max(s, r / w) if w > 0 else r + s,
                           lambda r, s: -(-r // s))[0] == "correct"   # integer ceiling division
    assert ep08.q2.outcome(____, workers_needed)[0] == "not-done"
    assert ep08.q2.outcome(ms_per_batch, lambda r, s: ____)[0] == "not-done"
    assert ep08.q2.outcome(ms_per_batch)[0] == "wrong"   # one function only: the check names what is missing


Q2_WRONG_RATE = {
    "sum with workers": (lambda r, s, w: r / w + s if w else r + s, ["overlap", "not their sum"]),
    "overlap without workers": (lambda r, s, w: max(s, r / w) if w else max(s, r), ["num_workers=0", "add up"]),
    "step forgotten": (lambda r, s, w: r / w if w else r + s, ["cannot go faster than its step"]),
    "main process counted as a reader": (lambda r, s, w: max(s, r / (w + 1)) if w else r + s, ["main process"]),
    "min instead of max": (lambda r, s, w: min(s, r / w) if w else r + s, ["slower"]),
    "workers do not share the reading": (lambda r, s, w: max(s, r) if w else r + s, ["in parallel"]),
    # step_ms / workers > read_ms in one case: the swapped roles and "every read_ms" differ there
    "reading and stepping swapped": (lambda r, s, w: max(r, s / w) if w else r + s, ["swapped the roles"]),
    "seconds": (lambda r, s, w: ms_per_batch(r, s, w) / 1e3, ["milliseconds"]),
    "a constant": (lambda r, s, w: 10.0, ["should be"]),
    "text": (lambda r, s, w: f"{ms_per_batch(r, s, w)} ms", ["number"]),
}


@pytest.mark.parametrize("name", list(Q2_WRONG_RATE))
def test_q2_wrong_times_per_batch_name_the_mistake(name):
    answer, words = Q2_WRONG_RATE[name]
    assert_wrong(ep08.q2, [answer, workers_needed], words)


Q2_WRONG_NEEDED = {
    "rounded down": (lambda r, s: r // s, ["rounded down"]),
    "rounded to nearest": (lambda r, s: round(r / s), ["nearest", "round up"]),
    "not rounded": (lambda r, s: r / s, ["whole number"]),
    "inverted": (lambda r, s: math.ceil(s / r) if r else 0, ["divided the step time by the read time"]),
    "one too many": (lambda r, s: math.ceil(r / s) + 1, ["one worker too many"]),
    "one too few": (lambda r, s: math.ceil(r / s) - 1 if r else 0, ["one worker too few"]),
    "step counted as reading": (lambda r, s: math.ceil((r + s) / s), ["one worker too many", "only read"]),
    "at least one always": (lambda r, s: max(1, math.ceil(r / s)), ["0 workers"]),
    "a constant": (lambda r, s: 2, ["should be"]),
    "text": (lambda r, s: "3 workers", ["number of workers"]),
}


@pytest.mark.parametrize("name", list(Q2_WRONG_NEEDED))
def test_q2_wrong_worker_counts_name_the_mistake(name):
    answer, words = Q2_WRONG_NEEDED[name]
    assert_wrong(ep08.q2, [ms_per_batch, answer], words)


def test_q2_agrees_with_the_measured_pipeline_shape():
    """The rule the check asks for is what SlowShards shows: 2 workers halve a read-bound epoch's time per batch."""
    assert ms_per_batch(10, 1, 0) / ms_per_batch(10, 1, 2) == pytest.approx(11 / 5)
    assert workers_needed(10, 1) == 10


# --- the loop shown in the episode is the one the check runs ---------------------------------------

@pytest.mark.parametrize("notebook", ["episodes/08-feeding-the-gpu.ipynb",
                                      "solutions/08-feeding-the-gpu.ipynb"])
@pytest.mark.parametrize("name", ["sgd_step", "slow_train"])
def test_the_notebooks_show_the_loop_the_check_runs(notebook, name):
    """The episode shows slow_train (and the step it calls) as ordinary code, no
    inspect.getsource; it must be the check's own loop, docstrings and imports aside."""
    assert_same_function(notebook, name, getattr(ep08, name))


def test_the_capstone_hands_over_no_diagnosis():
    """slow_train's comments, the episode's prose and the stub leave the causes for the profile to show."""
    import inspect

    source = inspect.getsource(ep08.slow_train) + inspect.getsource(ep08.sgd_step)
    assert "#" not in source, ("slow_train or sgd_step carries comments; the profile, not the code, "
                               "should show the causes")
    cells = json.loads((ROOT / "exercises" / "08-feeding-the-gpu.ipynb").read_text())["cells"]
    stub = next("".join(c["source"]) for c in cells if "def fast_train" in "".join(c["source"]))
    for giveaway in ("once", "slice", "per event", "every step", ".item()", "float32 tensor", "X_std"):
        assert giveaway not in stub, f"the stub hands over {giveaway!r}"
    episode = json.loads((ROOT / "episodes" / "08-feeding-the-gpu.ipynb").read_text())["cells"]
    prose = " ".join("".join(c["source"]) for c in episode if c["cell_type"] == "markdown")
    capstone = prose[prose.index("A slow loop to read"):]
    for giveaway in ("every event", "one event at a time", "standardises the whole table", ".item()` makes",
                     "every step; on any machine"):
        assert giveaway not in capstone, giveaway
