"""Episode 7's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

The capstone (q4) check times the learner's loop against the original on this machine; the wrong
fixes below are the ones a learner is tempted by: cutting steps, skipping the standardisation,
training a new or smaller model, shuffling, another optimizer, fixing one cause only, remembering
results instead of training, or not fixing anything.
"""

from __future__ import annotations

import copy
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


Q1_WRONG = {
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


# --- q2: compile_report ------------------------------------------------------------------------

def compile_report(step_times, warmup):
    steady = statistics.median(step_times[warmup:])
    return sum(step_times[:warmup]) - warmup * steady, steady


def test_q2_right_answers_pass_and_stub_is_not_done():
    assert ep07.q2.outcome(compile_report)[0] == "correct"
    assert ep07.q2.outcome(lambda t, w: (float(np.sum(t[:w]) - w * np.median(t[w:])), float(np.median(t[w:]))))[0] \
        == "correct"
    assert ep07.q2.outcome(____)[0] == "not-done"
    assert ep07.q2.outcome(lambda t, w: (____, ____))[0] == "not-done"


Q2_WRONG = {
    "mean steady time": (lambda t, w: (sum(t[:w]) - w * statistics.mean(t[w:]), statistics.mean(t[w:])),
                         ["mean", "median"]),
    "min steady time": (lambda t, w: (sum(t[:w]) - w * min(t[w:]), min(t[w:])), ["fastest step", "median"]),
    "median includes warm-up": (lambda t, w: (sum(t[:w]) - w * statistics.median(t), statistics.median(t)),
                                ["includes the warm-up"]),
    "ignores warmup, first step only": (lambda t, w: (t[0] - statistics.median(t[1:]), statistics.median(t[1:])),
                                        ["warmup", "argument"]),
    "does not subtract ordinary work": (lambda t, w: (sum(t[:w]), statistics.median(t[w:])), ["subtract"]),
    "first step as compile time": (lambda t, w: (t[0], statistics.median(t[w:])), ["first step alone"]),
    "swapped": (lambda t, w: compile_report(t, w)[::-1], ["comes first"]),
    "milliseconds": (lambda t, w: tuple(1e3 * v for v in compile_report(t, w)), ["milliseconds"]),
    "constant": (lambda t, w: (30.0, 0.011), ["expected"]),
    "one number": (lambda t, w: compile_report(t, w)[0], ["two numbers"]),
    "median_high": (lambda t, w: (sum(t[:w]) - w * statistics.median_high(t[w:]), statistics.median_high(t[w:])),
                    ["upper of the two middle", "statistics.median"]),
    "upper middle by index": (lambda t, w: (sum(t[:w]) - w * sorted(t[w:])[len(t[w:]) // 2],
                                            sorted(t[w:])[len(t[w:]) // 2]), ["upper of the two middle"]),
    "median_low": (lambda t, w: (sum(t[:w]) - w * statistics.median_low(t[w:]), statistics.median_low(t[w:])),
                   ["lower of the two middle"]),
    "one steady step subtracted": (lambda t, w: (sum(t[:w]) - statistics.median(t[w:]), statistics.median(t[w:])),
                                   ["warmup × steady_seconds"]),
    "warm-up one step too long": (lambda t, w: (sum(t[:w + 1]) - (w + 1) * statistics.median(t[w + 1:]),
                                                statistics.median(t[w + 1:])), ["warmup + 1"]),
    "steady steps start one late": (lambda t, w: (sum(t[:w]) - w * statistics.median(t[w + 1:]),
                                                  statistics.median(t[w + 1:])), ["one late", "step_times[warmup:]"]),
    "text": (lambda t, w: ("30 s", "0.01 s"), ["number", "drop the quotes"]),
}


@pytest.mark.parametrize("name", list(Q2_WRONG))
def test_q2_wrong_answers_name_the_mistake(name):
    answer, words = Q2_WRONG[name]
    assert_wrong(ep07.q2, [answer], words)


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


# --- q4: the capstone ----------------------------------------------------------------------------

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
    with ep07.one_thread():
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


def test_q4_solution_passes_and_stub_is_not_done():
    result, message = ep07.q4.outcome(fast_train)
    assert result == "correct", message
    result, message = ep07.q4.outcome(_variant(torch_std=0))   # torch.std with NumPy's divisor, n
    assert result == "correct", message
    assert ep07.q4.outcome(____)[0] == "not-done"
    assert ep07.q4.outcome(lambda model, X, y, steps, batch_size: ____)[0] == "not-done"


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


Q4_WRONG = {
    "labels left as integers": (_dtype_mistake(labels_as_int=True), ["labels are integers", ".float()"]),
    "table left in float64": (_dtype_mistake(labels_as_int=False), ["mixed dtypes", "float64", ".float()"]),
    "wraps around by rows, (step * batch_size) % len(X)": (_wraps_by_rows(), ["wraps around", "len(X) // batch_size",
                                                                            "no partial batch"]),
    "counts the last partial batch": (_wraps_by_rows(ceil_batches=True), ["last full batch", "rows left over"]),
    "no fix at all: the original loop": (ep07.slow_train, ["slow_train itself"]),
    "the original, wrapped": (lambda m, X, y, s, b: list(ep07.slow_train(m, X, y, s, b)), ["3×", "profile"]),
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
                                                       ["every table", "not only one"]),
    "remembers results instead of training": (make_memoising(), ["no cached results"]),
    "torch.std with its default n - 1": (_variant(torch_std=1), ["n - 1", "correction=0"]),
    "mixed devices": (lambda m, X, y, s, b: (_ for _ in ()).throw(RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")),
        ["mixed devices", "next(model.parameters()).device"]),
}


@pytest.mark.parametrize("name", list(Q4_WRONG))
def test_q4_wrong_fixes_are_rejected(name):
    answer, words = Q4_WRONG[name]
    assert_wrong(ep07.q4, [answer], words)


def test_q4_hard_coded_cuda_is_explained_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU")

    def on_cuda(model, X, y, steps, batch_size):
        torch.zeros(1).to("cuda")
    assert_wrong(ep07.q4, [on_cuda], ["no GPU here", "next(model.parameters()).device"])


def test_q4_timing_restores_a_changed_thread_count():
    before = torch.get_num_threads()

    def changes_threads():
        torch.set_num_threads(before + 1)
    with ep07.one_thread():
        ep07._time(changes_threads, 2)
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_q4_original_is_deliberately_much_slower():
    """The required factor must be far from noise: the fix is many times faster than REQUIRED_SPEEDUP."""
    X, y = ep07.capstone_data(11)
    model = ep07.capstone_model(11)
    with ep07.one_thread():
        slow = min(_timed(ep07.slow_train, model, X, y) for _ in range(2))
        best = min(_timed(fast_train, model, X, y) for _ in range(3))
    assert slow / best > 2 * ep07.REQUIRED_SPEEDUP, (slow, best)
    X, y = ep07.capstone_data(13, 2_048)   # the small table: building batches event by event is the cost
    model = ep07.capstone_model(13)
    with ep07.one_thread():
        slow = min(_timed(ep07.slow_train, model, X, y, 40, 1_024) for _ in range(2))
        best = min(_timed(fast_train, model, X, y, 40, 1_024) for _ in range(3))
    assert slow / best > 1.5 * ep07.REQUIRED_SPEEDUP, (slow, best)


def _timed(fn, model, X, y, steps=60, batch=256):
    import time

    start = time.perf_counter()
    fn(copy.deepcopy(model), X, y, steps, batch)
    return time.perf_counter() - start


# --- the conditions that matter: another device type, inputs left alone, dtypes, fixed profiles ----

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


def test_q2_sorting_the_callers_list_is_named():
    def sorts_in_place(step_times, warmup):
        steady = step_times[warmup:]
        steady_sorted = sorted(steady)
        n = len(steady_sorted)
        median = (steady_sorted[n // 2] + steady_sorted[(n - 1) // 2]) / 2
        compile_s = sum(step_times[:warmup]) - warmup * median
        step_times.sort()
        return compile_s, median
    assert_wrong(ep07.q2, [sorts_in_place], ["sorted the list step_times", "list.sort()"])


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
def test_q4_float64_and_no_wrap_around_are_named(answer, words):
    message = assert_wrong(ep07.q4, [answer], words)
    assert "did not match" not in message and "is nan" not in message
