"""Episode 3's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

Each exercise has a parametrized list of plausible wrong answers: the mistake the exercise is
about, wrong types and units, hard-coded constants, and answers right on one fixture only. Every
one must be rejected with a message that names its mistake.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from gpucourse.checks import ep03
from gpucourse.exercises import ____
from gpucourse.timing import Timing

from checking import assert_wrong, outcome

loss_fn = nn.BCEWithLogitsLoss()


# --- q1: standardise where the features live ----------------------------------------------------

def standardise(X_train, X_test):
    mean, std = X_train.mean(dim=0), X_train.std(dim=0)
    std = torch.where(std == 0, torch.ones_like(std), std)
    return (X_train - mean) / std, (X_test - mean) / std


def standardise_population_std(X_train, X_test):
    mean = X_train.mean(0, keepdim=True)
    std = X_train.std(0, correction=0, keepdim=True)
    std[std == 0] = 1                         # a new tensor, changed in place: the inputs stay as they are
    return (X_train - mean) / std, (X_test - mean) / std


def standardise_clamped(X_train, X_test):
    mean, var = torch.var_mean(X_train, dim=0, unbiased=False)[::-1]
    std = var.sqrt().masked_fill(var == 0, 1.0)
    return (X_train - mean) / std, (X_test - mean) / std


def test_q1_right_answers_pass_and_stub_is_not_done():
    for fn in (standardise, standardise_population_std, standardise_clamped):
        result, message = outcome(ep03.q1, fn)
        assert result == "correct", (fn.__name__, message)
    assert outcome(ep03.q1, ____)[0] == "not-done"
    assert outcome(ep03.q1, lambda a, b: ____)[0] == "not-done"
    assert outcome(ep03.q1, lambda a, b: (____, ____))[0] == "not-done"


def _plain(a, b):                                  # NaN for a feature without spread
    mean, std = a.mean(0), a.std(0)
    return (a - mean) / std, (b - mean) / std


def _epsilon(a, b):
    mean, std = a.mean(0), a.std(0) + 1e-8
    return (a - mean) / std, (b - mean) / std


def _through_numpy(a, b):
    a, b = a.numpy(), b.numpy()
    mean, std = a.mean(0), a.std(0)
    std[std == 0] = 1
    return torch.from_numpy((a - mean) / std), torch.from_numpy((b - mean) / std)


def _round_trip(a, b):
    device = a.device
    a, b = a.cpu(), b.cpu()
    return tuple(x.to(device) for x in standardise(a, b))


def _left_on_the_host(a, b):
    return standardise(a.cpu(), b.cpu())


def _per_feature_items(a, b):
    mean = torch.stack([a[:, j].mean() for j in range(a.shape[1])])
    std = torch.tensor([a[:, j].std().item() or 1.0 for j in range(a.shape[1])], dtype=a.dtype, device=a.device)
    return (a - mean) / std, (b - mean) / std


def _ones_on_the_cpu(a, b):
    mean, std = a.mean(0), a.std(0)
    std = torch.where(std == 0, torch.ones(std.shape, dtype=std.dtype), std)
    return (a - mean) / std, (b - mean) / std


def _hard_coded_cuda(a, b):
    return standardise(a.to("cuda"), b.to("cuda"))


def _leaky(a, b):
    both = torch.cat([a, b])
    mean, std = both.mean(0), both.std(0)
    std = torch.where(std == 0, torch.ones_like(std), std)
    return (a - mean) / std, (b - mean) / std


def _own_stats(a, b):
    return standardise(a, b)[0], (b - b.mean(0)) / b.std(0)


def _in_place(a, b):
    mean, std = a.mean(0), a.std(0)
    std = torch.where(std == 0, torch.ones_like(std), std)
    a -= mean
    a /= std
    b -= mean
    b /= std
    return a, b


def _dim1(a, b):
    return ((a - a.mean(1, keepdim=True)) / a.std(1, keepdim=True),
            (b - b.mean(1, keepdim=True)) / b.std(1, keepdim=True))


Q1_WRONG = {
    "NaN for a constant feature": (_plain, ["feature 2", "standard deviation is 0", "divide it by 1"]),
    "a tiny epsilon instead": (_epsilon, ["feature 2", "blows them up"]),
    "a trip through NumPy": (_through_numpy, ["can't convert", "torch operations", "where they are"]),
    "a round trip through the host": (_round_trip, ["copied numbers from the device to the host", ".cpu()"]),
    "results left on the host": (_left_on_the_host, ["is on cpu", "features were on cuda:1"]),
    "one .item() per feature": (_per_feature_items, [".item()", "all features at once"]),
    "a constant tensor made on the CPU": (_ones_on_the_cpu, ["cuda:1 and cpu", "without device="]),
    "hard-coded cuda": (_hard_coded_cuda, ["not there", "Don't name a device"]),
    "leak: stats of train and test together": (_leaky, ["leak", "X_train only"]),
    "test with its own stats": (_own_stats, ["own mean and std", "TRAINING"]),
    "changes the inputs in place": (_in_place, ["in place"]),
    "stats per event": (_dim1, ["per event", "dim=0"]),
    "NumPy arrays returned": (lambda a, b: tuple(x.numpy() for x in standardise(a, b)), ["NumPy array", "torch tensors"]),
    "swapped results": (lambda a, b: standardise(a, b)[::-1], ["X_test's result first"]),
    "only the training set returned": (lambda a, b: standardise(a, b)[0], ["one tensor", "two tensors"]),
    "dtype changed": (lambda a, b: tuple(x.float() for x in standardise(a, b)), ["float32", "keep their dtype"]),
    "text returned": (lambda a, b: ("X_train_std", "X_test_std"), ["torch.Tensor", "str"]),
    "not a function": ((np.zeros(5), np.ones(5)), ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q1_WRONG))
def test_q1_wrong_answers_name_the_mistake(name):
    answer, words = Q1_WRONG[name]
    assert_wrong(ep03.q1, [answer], words)


# --- q2: a training step for a model someone else placed ----------------------------------------

def train_step(model, optimizer, X, y):
    param = next(model.parameters())
    xb = torch.from_numpy(X).to(param.device, param.dtype)
    yb = torch.from_numpy(y).to(param.device, param.dtype)
    optimizer.zero_grad()
    loss = loss_fn(model(xb).squeeze(1), yb)
    loss.backward()
    optimizer.step()
    return loss.item()


def train_step_other_spelling(model, optimizer, X, y):
    like = next(iter(model.parameters()))
    xb = torch.as_tensor(X).to(like)                  # .to(tensor): its device and dtype
    yb = torch.as_tensor(y, dtype=like.dtype, device=like.device)
    model.zero_grad()
    loss = nn.functional.binary_cross_entropy_with_logits(model(xb).view(-1), yb)
    loss.backward()
    optimizer.step()
    return float(loss.detach().cpu())


def stub_step(model, optimizer, X, y):
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


def make_step(device_line="model", dtype_line="model", label_dtype="model", move_x=True, move_y=True,
              zero_grad=True, step=True, back=True, ret="item", move_model=False, squeeze=True, zero_after=False):
    def fn(model, optimizer, X, y):
        param = next(model.parameters())
        if device_line == "model":
            device = param.device
        elif device_line == "available":
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        elif device_line == "attribute":
            device = model.device
        else:
            device = torch.device(device_line)
        dtype = {"model": param.dtype, "float32": torch.float32, "numpy": None}[dtype_line]
        if move_model:
            model.to(device)
        xb = torch.from_numpy(X)
        yb = torch.from_numpy(y)
        if dtype is not None:
            xb = xb.to(dtype)
        if label_dtype != "numpy":
            yb = yb.to({"model": param.dtype, "float32": torch.float32}[label_dtype])
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
    param = next(model.parameters())
    xb, yb = X.to(param), y.to(param)
    optimizer.zero_grad()
    loss = loss_fn(model(xb).squeeze(1), yb)
    loss.backward()
    optimizer.step()
    return loss.item()


Q2_WRONG = {
    "features left in float64": (make_step(dtype_line="numpy"), ["float64 features", "dtype of the model"]),
    "float32 hard-coded": (make_step(dtype_line="float32", label_dtype="float32"), ["float64 model", "Don't fix float32"]),
    "integer labels": (make_step(label_dtype="numpy"), ["integers", "floating-point targets"]),
    "batch left in host memory": (make_step(move_x=False), ["cuda:1", "batch was not moved"]),
    "labels left in host memory": (make_step(move_y=False), ["labels", "cuda:1"]),
    "device chosen from what exists": (make_step(device_line="available"), ["Don't choose the device yourself"]),
    "hard-coded cuda": (make_step(device_line="cuda"), ["not there"]),
    "hard-coded cpu": (make_step(device_line="cpu"), ["cuda:1", "not moved"]),
    "model.device": (make_step(device_line="attribute"), [".device attribute"]),
    "moves the model instead": (make_step(device_line="available", move_model=True), ["moved the model", "DATA"]),
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


def test_simulated_gpu_records_copies_to_the_host():
    with ep03._SimulatedGPUs(1) as sim:
        t = sim.place(torch.ones(3), "cuda:0")
        t.sum().item()
        t.cpu()
        float(t[0])
        torch.ones(2).sum().item()                  # a CPU tensor: no copy
    assert sim.to_host == ["item", "cpu", "__float__"]


# --- q3: a whole epoch's results, brought back once ---------------------------------------------

@torch.no_grad()
def collect(model, batches):
    probs, total, count = [], 0, 0
    for xb, yb in batches:
        logits = model(xb).squeeze(1)
        probs.append(torch.sigmoid(logits))
        total = total + loss_fn(logits, yb) * len(xb)
        count += len(xb)
    return torch.cat(probs).cpu().numpy(), total.item() / count


def collect_other_spelling(model, batches):
    with torch.no_grad():
        logits = torch.cat([model(xb).view(-1) for xb, _ in batches])
        labels = torch.cat([yb for _, yb in batches])
        loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)   # the mean over every event
        return logits.sigmoid().to("cpu").numpy().astype(np.float64), float(loss)


def test_q3_right_answers_pass_and_stub_is_not_done():
    for fn in (collect, collect_other_spelling):
        result, message = outcome(ep03.q3, fn)
        assert result == "correct", message
    assert outcome(ep03.q3, lambda model, batches: (____, ____))[0] == "not-done"
    assert outcome(ep03.q3, ____)[0] == "not-done"


def make_collect(copy_each_batch=False, weight=True, no_grad=True, to_host=True, sigmoid=True, ravel=True,
                 loss_kind="float"):
    def fn(model, batches):
        probs, losses, sizes = [], [], []
        with torch.set_grad_enabled(not no_grad):
            for xb, yb in batches:
                logits = model(xb)
                p = torch.sigmoid(logits) if sigmoid else logits
                p = p.squeeze(1) if ravel else p
                loss = loss_fn(logits.squeeze(1), yb)
                if copy_each_batch:
                    p, loss = p.cpu(), loss.item()
                probs.append(p)
                losses.append(loss)
                sizes.append(len(xb))
            prob = torch.cat(probs)
            if weight:
                total = sum(l * n for l, n in zip(losses, sizes)) / sum(sizes)
            else:
                total = sum(losses) / len(losses)
            prob = prob.cpu().numpy() if to_host else prob.numpy()
            if loss_kind == "tensor":
                return prob, total
            return prob, float(total)
    return fn


Q3_WRONG = {
    "a copy to the host every batch": (make_collect(copy_each_batch=True), ["8 times", "bring them back once"]),
    "mean of the batch means": (make_collect(weight=False), ["mean of the batches' mean losses", "weight each batch"]),
    "gradients kept": (make_collect(no_grad=False), ["requires grad", "without autograd"]),
    "no copy to the host": (make_collect(to_host=False), ["can't convert cuda:0", "host"]),
    "logits, not probabilities": (make_collect(sigmoid=False), ["logits", "sigmoid"]),
    "not 1-D": (make_collect(ravel=False), ["shape (37, 1)", "1-D"]),
    "loss as a tensor": (make_collect(loss_kind="tensor"), ["Python float"]),
    "probabilities as a tensor": (lambda m, b: (torch.from_numpy(collect(m, b)[0]), collect(m, b)[1]),
                                  ["still", "NumPy"]),
    "probabilities as a list": (lambda m, b: (collect(m, b)[0].tolist(), collect(m, b)[1]), ["list", "NumPy array"]),
    "swapped": (lambda m, b: collect(m, b)[::-1], ["loss first"]),
    "sum of the batch means": (lambda m, b: (collect(m, b)[0], sum(loss_fn(m(x).squeeze(1), y).item() for x, y in b)),
                               ["sum of the batches' mean losses"]),
    "the last batch only": (lambda m, b: (collect(m, b)[0][-len(b[-1][0]):], collect(m, b)[1]),
                            ["the batches hold 37 events"]),
    "a constant loss": (lambda m, b: (collect(m, b)[0], 0.6931), ["expected"]),
    "only the probabilities": (lambda m, b: collect(m, b)[0], ["two things"]),
    "not a function": ((np.zeros(3), 0.7), ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q3_WRONG))
def test_q3_wrong_answers_name_the_mistake(name):
    answer, words = Q3_WRONG[name]
    assert_wrong(ep03.q3, [answer], words)


# --- q4: a loader that streams from host memory ---------------------------------------------------

def host_loader(X, y, batch_size, device, seed):
    return DataLoader(TensorDataset(torch.from_numpy(X), torch.from_numpy(y)), batch_size=batch_size,
                      shuffle=True, generator=torch.Generator().manual_seed(seed),
                      pin_memory=device.type == "cuda")


def host_loader_other_spelling(X, y, batch_size, device, seed):
    generator = torch.Generator()
    generator.manual_seed(seed)
    sampler = RandomSampler(range(len(X)), generator=generator)
    return DataLoader(TensorDataset(torch.tensor(X), torch.tensor(y)), batch_size=batch_size, sampler=sampler,
                      pin_memory=str(device).startswith("cuda"))


def test_q4_right_answers_pass_and_stub_is_not_done():
    for fn in (host_loader, host_loader_other_spelling):
        result, message = outcome(ep03.q4, fn, 0.51, 0.47)
        assert result == "correct", message
        assert "No GPU here" in message or "pinned takes" in message
    assert outcome(ep03.q4, host_loader, ____, ____)[0] == "not-done"
    assert outcome(ep03.q4, host_loader, 0.5, ____)[0] == "not-done"
    assert outcome(ep03.q4, ____, ____, ____)[0] == "not-done"
    assert outcome(ep03.q4, lambda X, y, b, d, s: ____, 0.5, 0.4)[0] == "not-done"


def make_loader(pin="device", generator=True, global_seed=False, shuffle=True, drop_last=False, on_device=False,
                batch=None, seed_offset=0, fixed_seed=None):
    def fn(X, y, batch_size, device, seed):
        if global_seed:
            torch.manual_seed(seed)
        Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
        if on_device:
            Xt, yt = Xt.to(device), yt.to(device)
        pinned = {"device": device.type == "cuda", "always": True, "never": False,
                  "available": torch.cuda.is_available()}[pin]
        kwargs = {}
        if generator and shuffle:
            kwargs["generator"] = torch.Generator().manual_seed(fixed_seed if fixed_seed is not None else seed)
        return DataLoader(TensorDataset(Xt, yt), batch_size=batch or batch_size, shuffle=shuffle,
                          drop_last=drop_last, pin_memory=pinned, **kwargs)
    return fn


class _ReseededEachEpoch:
    """A sampler that seeds a generator anew at every epoch: the same order every epoch."""

    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed)).tolist())

    def __len__(self):
        return self.n


def _same_order_every_epoch(X, y, batch_size, device, seed):
    return DataLoader(TensorDataset(torch.from_numpy(X), torch.from_numpy(y)), batch_size=batch_size,
                      sampler=_ReseededEachEpoch(len(X), seed), pin_memory=device.type == "cuda")


Q4_WRONG = {
    "always pinned": (make_loader(pin="always"), ["pins its batches on a machine without a GPU"]),
    "pinned when a GPU exists": (make_loader(pin="available"), ["go to the CPU", "Whether a GPU exists does not matter"]),
    "never pinned": (make_loader(pin="never"), ["go to a GPU", "does not pin", "non_blocking"]),
    "the global generator": (make_loader(generator=False, global_seed=True), ["global random generator", "its own generator"]),
    "data moved to the device first": (make_loader(on_device=True), ["on cuda:1", "HOST memory"]),
    "not shuffled": (make_loader(shuffle=False), ["stored order", "Shuffle"]),
    "drop_last": (make_loader(drop_last=True), ["drop_last=True", "every event"]),
    "batch size hard-coded": (make_loader(batch=16), ["batches hold 16", "batch_size argument"]),
    "seed ignored": (make_loader(fixed_seed=0), ["seeds 1 and 2 give the same order"]),
    "the same order every epoch": (_same_order_every_epoch, ["second epoch has the same order"]),
    "a list of batches, not a loader": (lambda X, y, b, d, s: [(X[i:i + b], y[i:i + b]) for i in range(0, len(X), b)],
                                        ["DataLoader"]),
    "not a function": ((np.zeros(3), 0.7), ["pass the function itself"]),
}


@pytest.mark.parametrize("name", list(Q4_WRONG))
def test_q4_wrong_answers_name_the_mistake(name):
    answer, words = Q4_WRONG[name]
    assert_wrong(ep03.q4, [answer, 0.5, 0.4], words)


@pytest.mark.parametrize("times, words", [
    (("0.5", 0.4), ["text in quotes"]),
    ((0.0, 0.4), ["more than 0"]),
    ((-0.5, 0.4), ["more than 0"]),
    ((Timing((0.5, 0.6)), 0.4), ["pass its median"]),
    ((0.5, float("nan")), ["finite"]),
])
def test_q4_timings_must_be_seconds(times, words):
    assert_wrong(ep03.q4, [host_loader, *times], words)


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


def test_every_exercise_has_two_hint_steps_and_a_solution(capsys):
    exercises = (ep03.q1, ep03.q2, ep03.q3, ep03.q4, ep03.q5)
    for q in exercises:
        assert len(q.hints) == 2, q.name
        q.hint()
        q.hint(2)
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint 1 (ep03.") == 5 and out.count("Hint 2 (ep03.") == 5
    assert out.count("solutions/03-pytorch-classifier.ipynb") == 5


@pytest.mark.parametrize("q", ["q1", "q2", "q3", "q4", "q5"])
def test_hints_give_no_code(q):
    """Neither step of a hint spells out the answer: no calls, no attribute chains, no operators."""
    for text in getattr(ep03, q).hints:
        for code in ("(", "=", ".to", ".cpu", "next", "torch.", "np.", "[", "__"):
            assert code not in text, (q, code, text)
