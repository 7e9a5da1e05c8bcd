"""Episode 3's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

Each exercise has a parametrized list of plausible wrong answers: the mistake the exercise is
about, wrong types and units, hard-coded constants, and answers right on one fixture only. Every
one must be rejected with a message that names its mistake.
"""

from __future__ import annotations

import statistics
import time
from time import perf_counter

import numpy as np
import pytest
import torch
from sklearn.preprocessing import StandardScaler
from torch import nn

from gpucourse.checks import ep03
from gpucourse.exercises import ____

from checking import assert_wrong, outcome

loss_fn = nn.BCEWithLogitsLoss()




# --- q1: standardise -------------------------------------------------------------------------

def standardise(X_train, X_test):
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    return (X_train - mean) / std, (X_test - mean) / std


def standardise_ddof1(X_train, X_test):
    mean, std = X_train.mean(axis=0, keepdims=True), X_train.std(axis=0, ddof=1, keepdims=True)
    return (X_train - mean) / std, (X_test - mean) / std


def standardise_sklearn(X_train, X_test):
    scaler = StandardScaler().fit(X_train)
    return scaler.transform(X_train), scaler.transform(X_test)


def test_q1_right_answers_pass_and_stub_is_not_done():
    for fn in (standardise, standardise_ddof1, standardise_sklearn):
        assert outcome(ep03.q1, fn)[0] == "correct", fn.__name__
    assert outcome(ep03.q1, ____)[0] == "not-done"
    assert outcome(ep03.q1, lambda a, b: ____)[0] == "not-done"
    assert outcome(ep03.q1, lambda a, b: (____, ____))[0] == "not-done"


def _in_place(X_train, X_test):
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    X_train -= mean
    X_train /= std
    X_test -= mean
    X_test /= std
    return X_train, X_test


def _fifteen_features(X_train, X_test):   # right on the notebook's 15 features only
    mean = np.array([X_train[:, j].mean() for j in range(15)])
    std = np.array([X_train[:, j].std() for j in range(15)])
    return (X_train - mean) / std, (X_test - mean) / std


def _leaky(X_train, X_test):
    both = np.concatenate([X_train, X_test])
    mean, std = both.mean(axis=0), both.std(axis=0)
    return (X_train - mean) / std, (X_test - mean) / std


def _scaler_per_split(X_train, X_test):
    return StandardScaler().fit_transform(X_train), StandardScaler().fit_transform(X_test)


Q1_WRONG = {
    "leak: stats of train and test together": (_leaky, ["leak", "X_train only"]),
    "test with its own stats": (lambda a, b: ((a - a.mean(0)) / a.std(0), (b - b.mean(0)) / b.std(0)),
                                ["X_test", "its own mean and std", "TRAINING"]),
    "scaler fitted on each split": (_scaler_per_split, ["X_test", "own", "training"]),
    "test centred with its own mean": (lambda a, b: ((a - a.mean(0)) / a.std(0), (b - b.mean(0)) / a.std(0)),
                                       ["own mean", "TRAINING mean"]),
    "no axis: one number for the table": (lambda a, b: ((a - a.mean()) / a.std(), (b - a.mean()) / a.std()),
                                          ["axis=0", "per feature"]),
    "axis=1": (lambda a, b: ((a - a.mean(1, keepdims=True)) / a.std(1, keepdims=True),
                             (b - b.mean(1, keepdims=True)) / b.std(1, keepdims=True)), ["axis=0", "per event"]),
    "variance": (lambda a, b: ((a - a.mean(0)) / a.var(0), (b - a.mean(0)) / a.var(0)), ["variance"]),
    "no division": (lambda a, b: (a - a.mean(0), b - a.mean(0)), ["did not divide"]),
    "no centring": (lambda a, b: (a / a.std(0), b / a.std(0)), ["did not subtract the mean"]),
    "min-max scaling": (lambda a, b: ((a - a.min(0)) / (a.max(0) - a.min(0)), (b - a.min(0)) / (a.max(0) - a.min(0))),
                        ["min-max"]),
    "swapped results": (lambda a, b: standardise(a, b)[::-1], ["X_test's result first", "order"]),
    "hard-coded constants": (lambda a, b: ((a - 5.0) / 2.0, (b - 5.0) / 2.0), ["expected", "mean and std of X_train"]),
    "only the training set returned": (lambda a, b: standardise(a, b)[0], ["one array", "two arrays"]),
    "changes the inputs in place": (_in_place, ["in place"]),
    "torch tensors returned": (lambda a, b: tuple(torch.from_numpy(x) for x in standardise(a, b)),
                               ["torch.Tensor", "NumPy"]),
    "text returned": (lambda a, b: ("X_train_std", "X_test_std"), ["NumPy array", "str"]),
    "hard-coded 15 features": (_fifteen_features, ["5 features", "IndexError"]),
    "transposed": (lambda a, b: tuple(x.T for x in standardise(a, b)), ["shape", "keeps the shape"]),
    "not a function": ((np.zeros(5), np.ones(5)), ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q1_WRONG))
def test_q1_wrong_answers_name_the_mistake(name):
    answer, words = Q1_WRONG[name]
    assert_wrong(ep03.q1, [answer], words)


# --- q2: a training step that follows the model's device -------------------------------------

def train_step(model, optimizer, X, y):
    device = next(model.parameters()).device
    xb = torch.from_numpy(X).to(device)
    yb = torch.from_numpy(y).to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(xb).squeeze(1), yb)
    loss.backward()
    optimizer.step()
    return loss.item()


def train_step_other_spelling(model, optimizer, X, y):
    device = next(iter(model.parameters())).device
    xb = torch.as_tensor(X, device=device)
    yb = torch.tensor(y, device=device, dtype=torch.float32)
    model.zero_grad()
    loss = nn.functional.binary_cross_entropy_with_logits(model(xb).view(-1), yb)
    loss.backward()
    optimizer.step()
    return float(loss.detach().cpu())


def stub_step(model, optimizer, X, y):
    device = ____
    xb = ____
    yb = ____
    optimizer.zero_grad()
    loss = loss_fn(model(xb).squeeze(1), yb)
    loss.backward()
    optimizer.step()
    return loss.item()


def test_q2_right_answers_pass_and_stub_is_not_done():
    for fn in (train_step, train_step_other_spelling):
        result, message = outcome(ep03.q2, fn)
        assert result == "correct", message
    assert outcome(ep03.q2, stub_step)[0] == "not-done"
    assert outcome(ep03.q2, ____)[0] == "not-done"


def make_step(device_line="model", move_x=True, move_y=True, zero_grad=True, step=True, back=True,
              ret="item", move_model=False, squeeze=True, zero_after=False):
    def fn(model, optimizer, X, y):
        if device_line == "model":
            device = next(model.parameters()).device
        elif device_line == "available":
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        elif device_line == "attribute":
            device = model.device
        else:
            device = torch.device(device_line)
        if move_model:
            model.to(device)
        xb = torch.from_numpy(X)
        yb = torch.from_numpy(y)
        if move_x:
            xb = xb.to(device)
        if move_y:
            yb = yb.to(device)
        if zero_grad:
            optimizer.zero_grad()
        out = model(xb)
        loss = loss_fn(out.squeeze(1) if squeeze else out, yb)
        if back:
            loss.backward()
        if zero_after:
            optimizer.zero_grad()
        if step:
            optimizer.step()
        return {"item": lambda: loss.item(), "tensor": lambda: loss, "constant": lambda: 0.693,
                "text": lambda: f"{loss.item():.4f}"}[ret]()
    return fn


def _numpy_to(model, optimizer, X, y):
    device = next(model.parameters()).device
    xb, yb = X.to(device), y.to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(xb).squeeze(1), yb)
    loss.backward()
    optimizer.step()
    return loss.item()


def _cuda_method(model, optimizer, X, y):
    xb, yb = torch.from_numpy(X).cuda(), torch.from_numpy(y).cuda()
    optimizer.zero_grad()
    loss = loss_fn(model(xb).squeeze(1), yb)
    loss.backward()
    optimizer.step()
    return loss.item()


Q2_WRONG = {
    "batch left in host memory": (make_step(move_x=False), ["cuda:1", "batch was not moved", "next(model.parameters()).device"]),
    "labels left in host memory": (make_step(move_y=False), ["labels", "cuda:1", "yb"]),
    "device chosen from what exists": (make_step(device_line="available"), ["Don't choose the device yourself"]),
    "hard-coded cuda": (make_step(device_line="cuda"), ["without a GPU", "not there"]),
    "hard-coded cuda:0": (make_step(device_line="cuda:0"), ["not there"]),
    "hard-coded cpu": (make_step(device_line="cpu"), ["cuda:1", "not moved"]),
    "model.device": (make_step(device_line="attribute"), [".device attribute", "next(model.parameters()).device"]),
    "moves the model instead": (make_step(device_line="available", move_model=True), ["moved the model", "DATA"]),
    ".cuda() on the batch": (_cuda_method, ["not there"]),
    "X.to on a NumPy array": (_numpy_to, ["NumPy arrays", "torch.from_numpy"]),
    "no zero_grad": (make_step(zero_grad=False), ["zero_grad", "earlier step"]),
    "zero_grad after backward": (make_step(zero_grad=False, zero_after=True), ["no gradients", "order"]),
    "no backward": (make_step(back=False), ["no gradients", "backward"]),
    "no optimizer.step": (make_step(step=False), ["optimizer.step()", "0 times"]),
    "returns the loss tensor": (make_step(ret="tensor"), ["loss.item()", "torch.Tensor"]),
    "returns a constant": (make_step(ret="constant"), ["0.693", "loss of this batch"]),
    "returns text": (make_step(ret="text"), ["text in quotes"]),
    "no squeeze": (make_step(squeeze=False), ["squeeze(1)"]),
    "not a function": (0.69, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q2_WRONG))
def test_q2_wrong_answers_name_the_mistake(name):
    answer, words = Q2_WRONG[name]
    assert_wrong(ep03.q2, [answer], words)


def test_q2_simulated_gpu_is_undone_afterwards():
    is_available, device_count = torch.cuda.is_available, torch.cuda.device_count
    assert outcome(ep03.q2, make_step(move_x=False))[0] == "wrong"
    assert torch.cuda.is_available is is_available and torch.cuda.device_count is device_count
    t = torch.ones(3)
    assert t.device.type == "cpu" and not hasattr(t, "_gpucourse_simulated_device")
    assert (t + torch.ones(3)).sum().item() == 6.0


# --- q3: back to NumPy and Python ----------------------------------------------------------

def for_sklearn(prob, loss):
    return prob.detach().cpu().numpy().ravel(), loss.item()


def for_sklearn_other_spelling(prob, loss):
    return prob.cpu().detach().reshape(-1).numpy().astype(np.float64), float(loss)


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")
def test_q3_right_answers_pass_and_stub_is_not_done():
    for fn in (for_sklearn, for_sklearn_other_spelling):
        result, message = outcome(ep03.q3, fn)
        assert result == "correct", message
    assert outcome(ep03.q3, lambda prob, loss: (____, ____))[0] == "not-done"
    assert outcome(ep03.q3, ____)[0] == "not-done"


Q3_WRONG = {
    "numpy() without detach": (lambda p, l: (p.numpy().ravel(), l.item()), ["requires grad", "detach"]),
    "no .cpu(): fine on the CPU, fails on a GPU": (lambda p, l: (p.detach().numpy().ravel(), l.item()),
                                                   ["simulated GPU", "can't convert cuda:0", ".cpu()"]),
    "cpu() without detach": (lambda p, l: (p.cpu().numpy().ravel(), l.item()), ["detach"]),
    "tensors returned": (lambda p, l: (p, l), ["still", "torch.Tensor", ".detach().cpu().numpy()"]),
    "no ravel": (lambda p, l: (p.detach().cpu().numpy(), l.item()), ["shape (25, 1)", "1-D", "ravel"]),
    "loss as a tensor": (lambda p, l: (p.detach().cpu().numpy().ravel(), l), ["loss.item()", "torch.Tensor"]),
    "loss as a NumPy array": (lambda p, l: (p.detach().cpu().numpy().ravel(), l.detach().cpu().numpy()),
                              ["NumPy ndarray", "Python float"]),
    "loss as text": (lambda p, l: (p.detach().cpu().numpy().ravel(), str(l.item())), ["text in quotes"]),
    "prob as a list": (lambda p, l: (p.detach().cpu().ravel().tolist(), l.item()), ["list", "NumPy array"]),
    "swapped": (lambda p, l: (l.item(), p.detach().cpu().numpy().ravel()), ["prob_np first"]),
    "constant probabilities": (lambda p, l: (np.full(p.shape[0], 0.5), l.item()), ["not prob's values"]),
    "sigmoid applied twice": (lambda p, l: (torch.sigmoid(p).detach().cpu().numpy().ravel(), l.item()),
                              ["not prob's values", "sigmoid"]),
    "thresholded": (lambda p, l: ((p.detach().cpu().numpy().ravel() > 0.5).astype(float), l.item()),
                    ["not prob's values"]),
    "rounded loss": (lambda p, l: (p.detach().cpu().numpy().ravel(), round(l.item(), 2)), ["unchanged"]),
    "hard-coded loss": (lambda p, l: (p.detach().cpu().numpy().ravel(), 0.6931), ["loss holds"]),
    "only prob_np": (lambda p, l: p.detach().cpu().numpy().ravel(), ["two things"]),
    "not a function": ((np.zeros(3), 0.7), ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q3_WRONG))
def test_q3_wrong_answers_name_the_mistake(name):
    answer, words = Q3_WRONG[name]
    assert_wrong(ep03.q3, [answer], words)


# --- q4: time one epoch --------------------------------------------------------------------

def time_epoch(epoch_fn, sync, warmup=1, repeats=3):
    for _ in range(warmup):
        epoch_fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        epoch_fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_epoch_other_clock(epoch_fn, sync, warmup=1, repeats=3):
    for _ in range(warmup):
        epoch_fn()
    sync()
    times = []
    for _ in range(repeats):
        start = perf_counter()  # imported by name: the check does not depend on time.perf_counter
        epoch_fn()
        sync()
        times.append(perf_counter() - start)
    return float(np.median(times))


def test_q4_right_answers_pass_and_stub_is_not_done():
    for fn in (time_epoch, time_epoch_other_clock):
        result, message = outcome(ep03.q4, fn)
        assert result == "correct", message
    assert outcome(ep03.q4, lambda epoch_fn, sync, warmup=1, repeats=3: ____)[0] == "not-done"
    assert outcome(ep03.q4, ____)[0] == "not-done"


def make_timer(warmup_calls="arg", sync_before=True, sync_after=True, sync_after_warmup=False, clock_late=False,
               summary=statistics.median, unit=1.0, time_warmup=False, repeats_calls="arg",
               clock=time.perf_counter):
    def timer(epoch_fn, sync, warmup=1, repeats=3):
        n_warm = warmup if warmup_calls == "arg" else warmup_calls
        n_rep = repeats if repeats_calls == "arg" else repeats_calls
        times = []
        for _ in range(n_warm):
            start = clock()
            epoch_fn()
            if time_warmup:
                sync()
                times.append(clock() - start)
        if sync_after_warmup:
            sync()
        for _ in range(n_rep):
            if sync_before:
                sync()
            start = clock()
            epoch_fn()
            if clock_late:
                elapsed = clock() - start
                if sync_after:
                    sync()
            else:
                if sync_after:
                    sync()
                elapsed = clock() - start
            times.append(elapsed)
        result = summary(times)
        return result * unit if unit != 1 else result
    return timer


def _sync_once_at_the_end(epoch_fn, sync, warmup=1, repeats=3):
    for _ in range(warmup):
        epoch_fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        epoch_fn()
        times.append(time.perf_counter() - start)
    sync()
    return statistics.median(times)


def _uses_benchmark(epoch_fn, sync, warmup=1, repeats=3):
    from gpucourse.timing import benchmark

    return benchmark(epoch_fn, "cpu", warmup=warmup, repeats=repeats).median


def _unsorted_middle(times):
    return times[len(times) // 2]


Q4_WRONG = {
    "never synchronises": (make_timer(sync_before=False, sync_after=False),
                           ["never called sync()", "QUEUES"]),
    "one sync at the very end": (_sync_once_at_the_end, ["no sync()", "after timed call 1"]),
    "clock read before sync": (make_timer(clock_late=True), ["before the work had finished", "AFTER epoch_fn()"]),
    "no warm-up": (make_timer(warmup_calls=0), ["called epoch_fn 3 times", "warm-up"]),
    "warm-up hard-coded to one call": (make_timer(warmup_calls=1), ["warmup=3", "warm-up calls", "don't fix"]),
    "repeats hard-coded to three": (make_timer(repeats_calls=3), ["repeats=4", "number of repeats", "don't fix"]),
    "warm-up not waited for": (make_timer(sync_before=False), ["warm-up's work was still queued"]),
    "warm-up included in the median": (make_timer(time_warmup=True, sync_after_warmup=True),
                                       ["includes the warm-up"]),
    "mean instead of median": (make_timer(summary=statistics.fmean), ["mean", "median"]),
    "fastest repeat": (make_timer(summary=min), ["fastest"]),
    "middle of the unsorted list": (make_timer(summary=_unsorted_middle), ["slowest", "sorted"]),
    "upper middle of the sorted list": (make_timer(summary=lambda t: sorted(t)[len(t) // 2]),
                                        ["even number of repeats", "two middle values"]),
    "first repeat only": (make_timer(summary=lambda t: t[0]), ["first repeat only", "median"]),
    "last repeat only": (make_timer(summary=lambda t: t[-1]), ["last repeat only", "median"]),
    "total of the repeats": (make_timer(summary=sum), ["total"]),
    "milliseconds": (make_timer(unit=1e3), ["milliseconds", "seconds"]),
    "CPU clock": (make_timer(clock=time.process_time), ["before the work had finished", "process_time"]),
    "all the times": (make_timer(summary=list), ["return one", "median"]),
    "a constant": (lambda epoch_fn, sync, warmup=1, repeats=3: 0.04, ["never called epoch_fn()"]),
    "a constant after timing correctly": (make_timer(summary=lambda t: 0.07), ["0.07", "median"]),  # under load it may read as the mean
    "text": (make_timer(summary=lambda t: f"{statistics.median(t):.3f}"), ["text in quotes"]),
    "benchmark() does it all": (_uses_benchmark, ["benchmark", "yourself"]),
    "not a function": (0.04, ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q4_WRONG))
def test_q4_wrong_answers_name_the_mistake(name):
    answer, words = Q4_WRONG[name]
    assert_wrong(ep03.q4, [answer], words)


def test_q4_fake_device_only_finishes_work_when_synchronised():
    device = ep03._QueuedDevice([0.05])
    start = time.perf_counter()
    device.epoch_fn()
    launched = time.perf_counter() - start
    device.sync()
    done = time.perf_counter() - start
    assert launched < 0.01 and done >= 0.05


# --- q5: the crossover ---------------------------------------------------------------------------

def crossover(widths, cpu_times, gpu_times):
    if gpu_times is None:
        return None
    for i, width in enumerate(widths):
        if all(g < c for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return width
    return None


def crossover_from_the_wide_end(widths, cpu_times, gpu_times):
    if gpu_times is None:
        return None
    answer = None
    for width, c, g in reversed(list(zip(widths, cpu_times, gpu_times))):
        if not g < c:
            break
        answer = width
    return answer


WIDTHS = [5, 50, 500, 2000]
CPU = [0.010, 0.012, 0.050, 0.400]
GPU = [0.030, 0.030, 0.031, 0.040]


def test_q5_right_answers_pass_and_stub_is_not_done():
    assert ep03.crossover_width(WIDTHS, CPU, GPU) == 500
    for fn in (crossover, crossover_from_the_wide_end):
        result, message = outcome(ep03.q5, 200, fn, WIDTHS, CPU, GPU)
        assert result == "correct" and "500" in message and "within a factor of 3" in message, message
    result, message = outcome(ep03.q5, 5, crossover, WIDTHS, CPU, GPU)
    assert result == "correct" and "3× off" in message
    result, message = outcome(ep03.q5, np.int64(100), crossover, WIDTHS, CPU, None)
    assert result == "correct" and "No GPU" in message
    result, message = outcome(ep03.q5, 100, crossover, WIDTHS, CPU, [0.5] * 4)
    assert result == "correct" and "never stays faster" in message
    assert outcome(ep03.q5, ____, ____, WIDTHS, CPU, GPU)[0] == "not-done"
    assert outcome(ep03.q5, 100, ____, WIDTHS, CPU, None)[0] == "not-done"
    assert outcome(ep03.q5, 100, lambda w, c, g: ____, WIDTHS, CPU, None)[0] == "not-done"


def _first_faster(widths, cpu_times, gpu_times):
    if gpu_times is None:
        return None
    return next((w for w, c, g in zip(widths, cpu_times, gpu_times) if g < c), None)


def _ties_count(widths, cpu_times, gpu_times):
    if gpu_times is None:
        return None
    for i, width in enumerate(widths):
        if all(g <= c for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return width
    return None


def _reversed(widths, cpu_times, gpu_times):
    if gpu_times is None:
        return None
    for i, width in enumerate(widths):
        if all(c < g for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return width
    return None


def _index(widths, cpu_times, gpu_times):
    if gpu_times is None:
        return None
    for i in range(len(widths)):
        if all(g < c for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return i
    return None


def _zero_for_never(widths, cpu_times, gpu_times):
    return (crossover(widths, cpu_times, gpu_times) or 0)


def _no_gpu_guard(widths, cpu_times, gpu_times):
    for i, width in enumerate(widths):
        if all(g < c for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return width
    return None


def _one_before(widths, cpu_times, gpu_times):   # the last width where the CPU still wins
    found = crossover(widths, cpu_times, gpu_times)
    if found is None:
        return None
    i = list(widths).index(found)
    return widths[max(i - 1, 0)]


def _hard_coded_widths(widths, cpu_times, gpu_times):   # right for the notebook's sweep only
    return crossover([5, 50, 500, 2000], cpu_times, gpu_times)


def _widest_faster(widths, cpu_times, gpu_times):
    if gpu_times is None:
        return None
    return widths[-1] if gpu_times[-1] < cpu_times[-1] else None


Q5_WRONG = {
    "first width where the GPU is faster": ((100, _first_faster), ["slower again", "STAYS faster"]),
    "ties count as faster": ((100, _ties_count), ["same time", "<"]),
    "comparison the wrong way round": ((100, _reversed), ["wrong way round"]),
    "index instead of width": ((100, _index), ["position", "the width itself"]),
    "0 when never": ((100, _zero_for_never), ["return None, not a number"]),
    "crashes without a GPU": ((100, _no_gpu_guard), ["gpu_times is None", "TypeError"]),
    "one width too early": ((100, _one_before), ["CPU is still faster"]),
    "hard-coded widths": ((100, _hard_coded_widths), ["widths=[10, 100, 1000, 3000]"]),
    "the widest width if faster there": ((100, _widest_faster), ["first width from which the GPU stays faster"]),
    "constant 500": ((100, lambda w, c, g: 500), ["500", "not one of the widths"]),
    "constant None": ((100, lambda w, c, g: None), ["returned None", "faster from width"]),
    "text 'None'": ((100, lambda w, c, g: "None" if crossover(w, c, g) is None else crossover(w, c, g)),
                    ["a width from widths", "or None"]),
    "prediction as text": (("100", crossover), ["positive whole number", "drop the quotes"]),
    "prediction as a bool": ((True, crossover), ["positive whole number"]),
    "prediction zero": ((0, crossover), ["positive whole number"]),
    "prediction as a float": ((150.5, crossover), ["positive whole number"]),
    "crossover not a function": ((100, 500), ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q5_WRONG))
def test_q5_wrong_answers_name_the_mistake(name):
    (prediction, fn), words = Q5_WRONG[name]
    assert_wrong(ep03.q5, [prediction, fn, WIDTHS, CPU, GPU], words)


def test_q5_mismatched_sweep_lengths_are_explained():
    assert_wrong(ep03.q5, [100, crossover, WIDTHS, CPU[:3], GPU], ["one time per width"])


def test_every_exercise_has_hint_and_solution(capsys):
    for q in (ep03.q1, ep03.q2, ep03.q3, ep03.q4, ep03.q5):
        q.hint()
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint 1 (ep03.") == 5 and out.count("solutions/03-pytorch-classifier.ipynb") == 5

