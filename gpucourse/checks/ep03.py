"""Checks for episode 3, "A PyTorch classifier on the GPU".

``q1`` standardise with training-set statistics · ``q2`` a training step that follows the
model's device · ``q3`` bring results back for NumPy and scikit-learn · ``q4`` time one epoch
correctly · ``q5`` predict, then measure, the crossover width.

Every check calls the learner's function on fixtures of its own, several of them, so that a
constant or an answer right for one case only cannot pass; it recomputes what the right result
is rather than trusting numbers it is handed.

Two stand-ins make the GPU lessons checkable on any machine:

* ``_SimulatedGPUs`` pretends that CUDA GPUs exist. A tensor "on cuda:1" is a CPU tensor tagged
  with that device; ``.device`` reports the tag, ``.to()``/``.cuda()``/``.cpu()`` and factory
  functions with ``device=`` move the tag, and any operation that mixes devices raises the
  error PyTorch raises on a GPU ("Expected all tensors to be on the same device ...").
  It never runs anything on the ``meta`` device (a meta-device matmul crashes one PyTorch build
  when TensorFlow is loaded).
* ``_QueuedDevice`` is a pretend GPU for timing: its ``epoch_fn()`` only queues work and returns
  at once; the work is done when ``sync()`` has waited for it. The check records every call, so
  it sees whether, when and how often a timer synchronises.
"""

from __future__ import annotations

import contextlib
import copy
import math
import numbers
import statistics
import time
from unittest import mock

import numpy as np

from ..exercises import Exercise, answer_deadline, NotDone, Wrong, as_number, is_blank, require_function, solution_link
from ..exercises import call_answer as _call
from ..exercises import mentions_blank as _mentions_blank

NOTEBOOK = "03-pytorch-classifier.ipynb"


# --- helpers ---------------------------------------------------------------------------

def _describe(value) -> str:
    """Type, and shape/device where it has them, for messages."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"a torch.Tensor of shape {tuple(value.shape)} on {value.device}"
    if isinstance(value, np.ndarray):
        return f"a NumPy array of shape {value.shape}"
    return f"{type(value).__name__} {value!r}"[:120]



def _code_names(fn) -> set[str]:
    """Every global and attribute name that ``fn``'s code (nested functions too) refers to."""
    names: set[str] = set()
    todo = [getattr(fn, "__code__", None)]
    while todo:
        code = todo.pop()
        if code is None:
            continue
        names.update(code.co_names)
        todo.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return names


# --- a simulated GPU for PyTorch ---------------------------------------------------------

_TAG = "_gpucourse_simulated_device"


class DeviceMismatch(RuntimeError):
    """What PyTorch raises when an operation meets tensors on two devices (simulated)."""

    def __init__(self, op: str, devices):
        self.op, self.devices = op, list(devices)
        super().__init__(f"Expected all tensors to be on the same device, but found at least two devices, "
                         f"{self.devices[0]} and {self.devices[1]}! (in {op})")


def _device_of(t):
    return getattr(t, _TAG, None) or t.device


def _tag(t, device):
    """Mark the CPU tensor ``t`` as living on ``device`` (only CUDA devices are tagged)."""
    import torch

    if isinstance(t, torch.Tensor) and device is not None and device.type == "cuda":
        setattr(t, _TAG, device)
    return t


def _simulated_mode_base():
    from torch.overrides import TorchFunctionMode

    return TorchFunctionMode


class _SimulatedGPUs:
    """``with _SimulatedGPUs(2) as sim:`` — PyTorch believes there are 2 CUDA GPUs.

    ``sim.place(tensor, "cuda:1")`` puts a fixture tensor "on" a simulated GPU.
    """

    def __init__(self, count: int):
        self.count = count
        self.paused = False
        self._stack = contextlib.ExitStack()

    # which device a request means here
    def target(self, device):
        import torch

        device = torch.device(device)
        if device.type == "mps":
            raise RuntimeError("The MPS backend is not available on this (simulated) machine.")
        if device.type != "cuda":
            return device
        if self.count == 0:
            raise RuntimeError("No CUDA GPUs are available")
        index = 0 if device.index is None else device.index
        if index >= self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal (asked for cuda:{index} on a machine "
                               f"with {self.count} GPU(s))")
        return torch.device("cuda", index)

    def place(self, t, device):
        import torch

        return _tag(t, self.target(device)) if torch.device(device).type == "cuda" else t

    @contextlib.contextmanager
    def pause(self):
        """Run the check's own bookkeeping without device rules."""
        self.paused, before = True, self.paused
        try:
            yield
        finally:
            self.paused = before

    def __enter__(self):
        import torch

        sim = self

        class Mode(_simulated_mode_base()):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return sim._handle(func, args, kwargs or {})

        try:
            self._stack.enter_context(mock.patch.object(torch.cuda, "is_available", return_value=self.count > 0))
            self._stack.enter_context(mock.patch.object(torch.cuda, "device_count", return_value=self.count))
            self._stack.enter_context(mock.patch.object(torch.backends.mps, "is_available", return_value=False))
            self._stack.enter_context(Mode())
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)

    def _handle(self, func, args, kwargs):
        import torch
        from torch.utils._pytree import tree_flatten, tree_map

        if self.paused:
            return func(*args, **kwargs)
        flat, _ = tree_flatten((args, kwargs))
        if any(is_blank(a) for a in flat):
            raise NotDone("your function still uses ____: replace it with your code.")
        name = getattr(func, "__name__", "")
        if name in ("__get__", "__set__"):                       # a property: t.device, t.data, ...
            attr = getattr(getattr(func, "__self__", None), "__name__", "")
            obj = args[0]
            if name == "__set__":
                out = func(*args, **kwargs)
                if attr == "data" and isinstance(args[1], torch.Tensor):   # what module.to() does
                    if hasattr(args[1], _TAG):
                        setattr(obj, _TAG, getattr(args[1], _TAG))
                    elif hasattr(obj, _TAG):
                        delattr(obj, _TAG)
                return out
            where = getattr(obj, _TAG, None)
            if where is not None and attr == "device":
                return where
            if where is not None and attr == "is_cuda":
                return True
            out = func(*args, **kwargs)
            if where is not None and attr in ("data", "T", "mT", "H", "mH"):
                _tag(out, where)
            return out
        if name in ("to", "cuda", "cpu"):
            return self._move(name, args, kwargs)
        if name == "type_as" and len(args) == 2:                  # like .to(other)
            return self._move("to", args, {})
        if name in ("numpy", "__array__") and hasattr(args[0], _TAG):
            raise TypeError(f"can't convert {getattr(args[0], _TAG)} device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        if kwargs.get("device") is not None:                      # torch.zeros(..., device=...)
            where = self.target(kwargs["device"])
            out = func(*args, **{**kwargs, "device": "cpu"})
            return tree_map(lambda o: _tag(o, where), out)
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        devices = []
        for t in tensors:
            where = _device_of(t)
            if where.type == "cpu" and t.dim() == 0 and len(tensors) > 1:
                continue  # PyTorch lets a CPU scalar tensor meet a GPU tensor
            if where not in devices:
                devices.append(where)
        if len(devices) > 1 and not name.startswith("_has_compatible"):
            raise DeviceMismatch(name, devices)
        out = func(*args, **kwargs)
        if devices and devices[0].type == "cuda":
            tree_map(lambda o: _tag(o, devices[0]), out)
        return out

    def _move(self, name, args, kwargs):
        import torch

        t, dtype = args[0], None
        current = _device_of(t)
        if name == "cpu":
            target = torch.device("cpu")
        elif name == "cuda":
            index = args[1] if len(args) > 1 else kwargs.get("device")
            target = self.target(torch.device("cuda", index) if isinstance(index, int) else (index or "cuda"))
        elif len(args) > 1 and isinstance(args[1], torch.Tensor):  # t.to(other)
            target, dtype = _device_of(args[1]), args[1].dtype
        else:
            target, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
            target = None if target is None else self.target(target)
        out = t if dtype is None or dtype == t.dtype else t.to(dtype=dtype)
        if target is None or target == current:
            return out if out is t else _tag(out, current)
        if out is t:
            out = t.clone()  # a copy on the other device; autograd follows it like a real copy
        return _tag(out, target)


def _mlp(n_features: int, width: int, seed: int):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(n_features, width), nn.ReLU(), nn.Linear(width, 1))


# --- q1: standardise with training-set statistics --------------------------------------------

def _q1_fixtures():
    rng = np.random.default_rng(31)
    scales = np.array([1000.0, 1.0, 0.01])
    gev = rng.gamma(2.0, 20.0, size=(160, 15)).astype(np.float32)
    return [
        ("5 features, test events from a shifted distribution",
         rng.normal(5.0, 2.0, size=(200, 5)), rng.normal(9.0, 3.0, size=(80, 5))),
        ("3 features on very different scales, a test set of ONE event",
         rng.normal([50_000.0, 0.0, -3.0], scales, size=(60, 3)), rng.normal([52_000.0, 1.0, -3.0], scales, size=(1, 3))),
        ("15 float32 features in GeV",
         gev[:120], gev[120:] * 1.5),
    ]


def _standardise_alternatives(train, test):
    """What common mistakes return: (message, train_result, test_result)."""
    mu, sd = train.mean(axis=0), train.std(axis=0)
    both = np.concatenate([train, test])
    with np.errstate(all="ignore"):
        return [
            ("your statistics include the test events (mean and std of X_train and X_test together): "
             "information about the test set leaks into training. Compute them from X_train only.",
             (train - both.mean(0)) / both.std(0), (test - both.mean(0)) / both.std(0)),
            ("X_test was standardised with its own mean and std. Use the TRAINING mean and std for every "
             "split: the test set must stay unseen, and the model expects features scaled as in training.",
             (train - mu) / sd, (test - test.mean(0)) / test.std(0)),
            ("X_test was centred with its own mean. Subtract the TRAINING mean (and divide by the "
             "training std) in every split.",
             (train - mu) / sd, (test - test.mean(0)) / sd),
            ("the mean and std are single numbers for the whole table; pass axis=0 for one value per "
             "feature (column).",
             (train - train.mean()) / train.std(), (test - train.mean()) / train.std()),
            ("the statistics are per event (axis=1, along each row); use axis=0: one mean and std per "
             "feature, over the training events.",
             (train - train.mean(1, keepdims=True)) / train.std(1, keepdims=True),
             (test - test.mean(1, keepdims=True)) / test.std(1, keepdims=True)),
            ("you divided by the variance; divide by the standard deviation (its square root, .std(axis=0)).",
             (train - mu) / train.var(0), (test - mu) / train.var(0)),
            ("you subtracted the mean but did not divide by the standard deviation.", train - mu, test - mu),
            ("you divided by the standard deviation but did not subtract the mean.", train / sd, test / sd),
            ("that is min-max scaling to [0, 1]; standardising means (x - mean) / std.",
             (train - train.min(0)) / (train.max(0) - train.min(0)), (test - train.min(0)) / (train.max(0) - train.min(0))),
            ("you returned them in the wrong order: return X_train's result first, then X_test's.",
             (test - mu) / sd, (train - mu) / sd),
        ]


def _close(a, b) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-4, atol=1e-4))


def _check_standardise(standardise):
    import torch

    require_function(standardise, "standardise")
    for description, train, test in _q1_fixtures():
        train_in, test_in = train.copy(), test.copy()
        what = f"standardise(X_train, X_test) with {description}"
        out = _call(standardise, train_in, test_in, what=what)
        if not (np.array_equal(train_in, train) and np.array_equal(test_in, test)):
            raise Wrong(f"{what} changed its inputs in place (X -= mean does that): the caller's raw "
                        "features are gone. Return new arrays: (X - mean) / std.")
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            kind = "one array" if isinstance(out, (np.ndarray, torch.Tensor)) else _describe(out)
            raise Wrong(f"{what} returned {kind}; return two arrays, the standardised X_train and X_test: "
                        "return train_std, test_std.")
        shapes = [getattr(a, "shape", None) for a in out]
        if shapes == [test.shape, train.shape] and train.shape != test.shape:
            raise Wrong(f"{what} returned X_test's result first; return them in the order they came in: "
                        "the standardised X_train, then X_test.")
        for label, arr, raw in (("X_train", out[0], train), ("X_test", out[1], test)):
            if isinstance(arr, torch.Tensor):
                raise Wrong(f"the standardised {label} is a torch.Tensor; NumPy arrays in, NumPy arrays out.")
            if not isinstance(arr, np.ndarray):
                raise Wrong(f"the standardised {label} should be a NumPy array, got {_describe(arr)}.")
            if arr.shape != raw.shape:
                raise Wrong(f"{what}: the standardised {label} has shape {arr.shape}, but {label} has shape "
                            f"{raw.shape}; standardising keeps the shape.")
            if not np.all(np.isfinite(arr)):
                extra = (" X_test here holds ONE event: its own std is 0. Use the training set's mean and std "
                         "for every split." if label == "X_test" and len(raw) == 1 else "")
                raise Wrong(f"{what}: the standardised {label} contains NaN or inf.{extra}")
        mu = train.mean(axis=0)
        good = [((train - mu) / sd, (test - mu) / sd) for sd in (train.std(0), train.std(0, ddof=1))]
        if any(_close(out[0], a) and _close(out[1], b) for a, b in good):
            continue
        for message, a, b in _standardise_alternatives(train, test):
            if _close(out[0], a) and _close(out[1], b):
                raise Wrong(f"{what}: {message}")
        for label, arr, (ref0, ref1) in (("X_train", out[0], (good[0][0], good[1][0])),
                                         ("X_test", out[1], (good[0][1], good[1][1]))):
            if not (_close(arr, ref0) or _close(arr, ref1)):
                err = np.abs(np.asarray(arr, dtype=np.float64) - ref0)
                row, col = np.unravel_index(int(np.argmax(err)), err.shape)
                raise Wrong(f"{what}: the standardised {label}[{row}, {col}] is {arr[row, col]:.4g}, expected "
                            f"{ref0[row, col]:.4g} = ({label}[{row}, {col}] - mean[{col}]) / std[{col}] with the "
                            "mean and std of X_train's columns.")
    return ("one mean and std per feature, from the training set only, applied to every split (tested on "
            f"{len(_q1_fixtures())} data sets, one with a single test event).")


q1 = Exercise("ep03.q1", _check_standardise,
              hint="mean = X_train.mean(axis=0) and std = X_train.std(axis=0): axis=0 runs over events, "
                   "giving one number per feature. Then return (X_train - mean) / std, (X_test - mean) / std.",
              solution=solution_link(NOTEBOOK))


# --- q2: a training step that follows the model's device ---------------------------------------

class _RecordingSGD:
    """A plain SGD optimizer that records its calls and the gradients it found."""

    def __init__(self, params, lr: float, sim: _SimulatedGPUs):
        self.params, self.lr, self.sim = list(params), lr, sim
        self.param_groups = [{"params": self.params, "lr": lr}]
        self.calls: list[str] = []
        self.grads_at_step = None

    def zero_grad(self, set_to_none: bool = True):
        with self.sim.pause():
            for p in self.params:
                p.grad = None
        self.calls.append("zero_grad")

    def step(self, closure=None):
        import torch

        with self.sim.pause(), torch.no_grad():
            self.calls.append("step")
            self.grads_at_step = [None if p.grad is None else p.grad.clone() for p in self.params]
            for p in self.params:
                if p.grad is not None:
                    p -= self.lr * p.grad


_Q2_CASES = [
    # (what the machine has, how many simulated GPUs, where the model lives, features)
    ("a machine without a GPU, the model on the CPU", 0, "cpu", 6),
    ("a machine with 2 GPUs, the model on cuda:1", 2, "cuda:1", 4),
    ("a machine with a GPU, the model deliberately left on the CPU", 1, "cpu", 5),
]
_STALE_GRAD = 0.25  # what the gradients hold before the step, as if left over from an earlier one


def _explain_step_error(case: str, model_device):
    def explain(exc):
        text = str(exc)
        if isinstance(exc, DeviceMismatch):
            first, second = exc.devices[:2]
            if exc.op == "linear":
                if first.type == "cpu":
                    return (f"on {case}, model(xb) met a batch on cpu and the model on {second}: "
                            "the batch was not moved. Read the model's device, device = "
                            "next(model.parameters()).device, and move xb there with .to(device).")
                return (f"on {case}, your batch went to {first} but the model is on {second}. Don't choose "
                        "the device yourself (torch.cuda.is_available() says what exists, not where this "
                        "model is): read it from the model, next(model.parameters()).device.")
            if "entropy" in exc.op or "loss" in exc.op:
                return (f"on {case}, the loss met the model's output on {first} and the labels on {second}: "
                        "the labels were left behind. Move yb to the model's device too.")
            return (f"on {case}, {exc.op}(...) met tensors on {first} and {second}: every tensor the model "
                    "and the loss meet must be on the model's device.")
        if "No CUDA GPUs are available" in text or "invalid device ordinal" in text:
            return (f"on {case}, your function asked for a GPU that is not there ({text}). Don't name a "
                    "device: use the model's, next(model.parameters()).device.")
        if isinstance(exc, AttributeError) and "'device'" in text:
            return ("an nn.Module has no .device attribute (its parameters have one, and they could even be "
                    "on different devices); ask a parameter: next(model.parameters()).device.")
        if isinstance(exc, AttributeError) and "numpy.ndarray" in text:
            return (f"X and y are NumPy arrays ({text}); make tensors first, torch.from_numpy(X), then "
                    "move them with .to(device).")
        if isinstance(exc, ValueError) and "size" in text:
            return (f"{text}. model(xb) has shape (batch, 1) and yb shape (batch,): compare "
                    "model(xb).squeeze(1) with yb.")
        return None
    return explain


def _check_train_step(train_step):
    import torch
    from torch import nn

    require_function(train_step, "train_step")
    reference_loss = nn.BCEWithLogitsLoss()
    for i, (case, gpus, where, n_features) in enumerate(_Q2_CASES):
        rng = np.random.default_rng(100 + i)
        X = rng.normal(size=(24, n_features)).astype(np.float32)
        y = (rng.random(24) < 0.5).astype(np.float32)
        X_in, y_in = X.copy(), y.copy()
        model = _mlp(n_features, 8, seed=i)

        reference = copy.deepcopy(model)                     # the right step, on the real CPU
        expected_loss = reference_loss(reference(torch.from_numpy(X)).squeeze(1), torch.from_numpy(y))
        expected_loss.backward()
        expected_grads = [p.grad.clone() for p in reference.parameters()]

        with _SimulatedGPUs(gpus) as sim:
            with sim.pause():
                for p in model.parameters():
                    p.grad = torch.full_like(p, _STALE_GRAD)
            model_device = torch.device(where)
            for p in model.parameters():
                sim.place(p, model_device)
            optimizer = _RecordingSGD(model.parameters(), 0.1, sim)
            what = f"train_step(model, optimizer, X, y) on {case}"
            result = _call(train_step, model, optimizer, X_in, y_in, what=what,
                           explain=_explain_step_error(case, model_device))
            moved_to = {str(_device_of(p)) for p in model.parameters()}

        if not (np.array_equal(X_in, X) and np.array_equal(y_in, y)):
            raise Wrong(f"{what} changed X or y in place; leave the caller's arrays alone.")
        if moved_to != {str(model_device)}:
            raise Wrong(f"on {case}, your function moved the model to {', '.join(sorted(moved_to))}. The caller "
                        "chose where the model lives; a training step moves the DATA to the model's device, "
                        "next(model.parameters()).device, not the model.")
        steps = optimizer.calls.count("step")
        if steps != 1:
            raise Wrong(f"{what} called optimizer.step() {steps} times; one training step is one "
                        "optimizer.step(), after loss.backward().")
        grads = optimizer.grads_at_step
        if any(g is None for g in grads):
            raise Wrong("when optimizer.step() ran, the parameters had no gradients. The order is "
                        "optimizer.zero_grad(), loss = ..., loss.backward(), optimizer.step().")
        if all(torch.allclose(g, e + _STALE_GRAD, atol=1e-5) for g, e in zip(grads, expected_grads)):
            raise Wrong("the gradients of an earlier step were still there when optimizer.step() ran "
                        "(backward() adds to .grad): call optimizer.zero_grad() before loss.backward().")
        if not all(torch.allclose(g, e, rtol=1e-4, atol=1e-6) for g, e in zip(grads, expected_grads)):
            raise Wrong(f"on {case}, the gradients at optimizer.step() are not those of this batch's loss, "
                        "BCEWithLogitsLoss of model(xb).squeeze(1) against yb.")
        if isinstance(result, torch.Tensor):
            raise Wrong(f"train_step returned {_describe(result)}; return loss.item(), a Python float "
                        "(it also waits for the GPU, so the step is really done).")
        value = as_number("the value train_step returned", result)
        if not math.isclose(value, expected_loss.item(), rel_tol=1e-4, abs_tol=1e-6):
            raise Wrong(f"on {case}, train_step returned {value:.6g}, but the loss of this batch is "
                        f"{expected_loss.item():.6g}: return loss.item() of the loss you called backward() on.")
    extra = ""
    if torch.cuda.is_available():                            # and once for real, on this machine's GPU
        device = torch.device("cuda", 0)
        model = _mlp(4, 8, seed=7).to(device)
        X = np.random.default_rng(7).normal(size=(16, 4)).astype(np.float32)
        y = np.ones(16, dtype=np.float32)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        _call(train_step, model, optimizer, X, y, what="train_step(...) with the model on this machine's GPU",
              explain=_explain_step_error("this machine's GPU", device))
        extra = " It also ran on this machine's real GPU."
    return ("the batch and the labels go to the model's device, wherever that is (tested on simulated "
            f"machines with 0, 1 and 2 GPUs).{extra}")


q2 = Exercise("ep03.q2", _check_train_step,
              hint="device = next(model.parameters()).device; xb = torch.from_numpy(X).to(device); "
                   "yb = torch.from_numpy(y).to(device). Never torch.cuda.is_available() here: the model "
                   "may be on the CPU, or on another GPU, even when a GPU exists.",
              solution=solution_link(NOTEBOOK))


# --- q3: back to NumPy and Python for scikit-learn -------------------------------------------------

def _q3_outputs(n: int, squeeze: bool, seed: int):
    import torch
    from torch import nn

    model = _mlp(5, 8, seed)
    rng = np.random.default_rng(seed)
    xb = torch.from_numpy(rng.normal(size=(n, 5)).astype(np.float32))
    yb = torch.from_numpy((rng.random(n) < 0.5).astype(np.float32))
    logits = model(xb)
    prob = torch.sigmoid(logits)
    loss = nn.functional.binary_cross_entropy_with_logits(logits.squeeze(1), yb)
    return (prob.squeeze(1) if squeeze else prob), loss


def _explain_back_error(case: str):
    def explain(exc):
        text = str(exc)
        if "can't convert" in text and "numpy" in text:
            return (f"with {case}: {text} The GPU's memory is not the host's: copy to the CPU before "
                    "NumPy, prob.detach().cpu().numpy().")
        if "requires grad" in text:
            return (f"with {case}: {text} prob is part of the autograd graph: prob.detach() first "
                    "(then .cpu().numpy()).")
        return None
    return explain


def _check_back(for_sklearn):
    import torch

    require_function(for_sklearn, "for_sklearn")
    cases = [("prob of shape (40,) and loss on the CPU", 40, True, None, 0),
             ("prob of shape (25, 1) and loss on a simulated GPU, cuda:0", 25, False, "cuda:0", 1)]
    if torch.cuda.is_available():
        cases.append(("prob and loss on this machine's GPU", 30, True, "real", 2))
    for case, n, squeeze, where, seed in cases:
        prob, loss = _q3_outputs(n, squeeze, seed)
        expected_prob = prob.detach().numpy().astype(np.float64).ravel()
        expected_loss = loss.item()
        what = f"for_sklearn(prob, loss) with {case}"
        if where == "real":
            prob, loss = prob.to("cuda"), loss.to("cuda")
            out = _call(for_sklearn, prob, loss, what=what, explain=_explain_back_error(case))
        else:
            with _SimulatedGPUs(1) as sim:
                if where:
                    with sim.pause():
                        prob, loss = prob.clone(), loss.clone()   # still in the autograd graph
                    sim.place(prob, where)
                    sim.place(loss, where)
                out = _call(for_sklearn, prob, loss, what=what, explain=_explain_back_error(case))
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise Wrong(f"{what} returned {_describe(out)}; return two things: prob_np, loss_value.")
        prob_np, loss_value = out
        if isinstance(prob_np, numbers.Number) and isinstance(loss_value, (np.ndarray, torch.Tensor, list)):
            raise Wrong(f"{what}: you returned (loss_value, prob_np); return prob_np first, then loss_value.")
        if isinstance(prob_np, torch.Tensor):
            raise Wrong(f"{what}: prob_np is still {_describe(prob_np)} (requires_grad={prob_np.requires_grad}); "
                        "scikit-learn needs a NumPy array in host memory: prob.detach().cpu().numpy().")
        if isinstance(prob_np, (list, tuple)):
            raise Wrong(f"{what}: prob_np is a Python {type(prob_np).__name__}; return a NumPy array "
                        "(.numpy(), not .tolist()).")
        if not isinstance(prob_np, np.ndarray):
            raise Wrong(f"{what}: prob_np should be a NumPy array, got {_describe(prob_np)}.")
        if prob_np.shape != expected_prob.shape:
            raise Wrong(f"{what}: prob_np has shape {prob_np.shape}; expected ({n},), a 1-D array with one "
                        "probability per event, as scikit-learn's metrics want, whatever shape prob has: "
                        "add .ravel() (or .reshape(-1)).")
        if not np.allclose(prob_np.astype(np.float64), expected_prob, atol=1e-6):
            raise Wrong(f"{what}: prob_np has the right shape but not prob's values; convert prob itself "
                        "(no sigmoid, rounding or thresholding on the way).")
        if isinstance(loss_value, torch.Tensor):
            raise Wrong(f"{what}: loss_value is {_describe(loss_value)}; use loss.item() for a plain Python "
                        "float (on a GPU it copies the number to the CPU, waiting for the GPU).")
        if isinstance(loss_value, (np.ndarray, np.generic)) and not isinstance(loss_value, float):
            raise Wrong(f"{what}: loss_value is a NumPy {type(loss_value).__name__} "
                        f"{getattr(loss_value, 'dtype', '')}; loss.item() gives a plain Python float.")
        value = as_number("loss_value", loss_value)
        if not isinstance(loss_value, float):
            raise Wrong(f"{what}: loss_value is the {type(loss_value).__name__} {loss_value!r}; return the "
                        "loss itself as a Python float, loss.item().")
        if not math.isclose(value, expected_loss, rel_tol=1e-6, abs_tol=1e-7):
            raise Wrong(f"{what}: loss_value is {value:.6g}, but loss holds {expected_loss:.6g}; "
                        "return loss.item() unchanged.")
    return ("prob.detach().cpu().numpy().ravel() and loss.item() work wherever the tensors live (tested on "
            "the CPU and on a simulated GPU, where .numpy() alone fails).")


q3 = Exercise("ep03.q3", _check_back,
              hint="prob.detach() drops the gradient history, .cpu() copies to host memory, .numpy() gives "
                   "the array, .ravel() makes it 1-D; loss.item() gives a Python float.",
              solution=solution_link(NOTEBOOK))


# --- q4: time one epoch correctly ----------------------------------------------------------------

class _QueuedDevice:
    """A pretend GPU: ``epoch_fn()`` queues work and returns at once; ``sync()`` waits for it.

    ``durations[i]`` is how long the work of the i-th call takes (the first one includes the
    one-off start-up cost). Every call is recorded with the time it happened.
    """

    def __init__(self, durations):
        self.durations = list(durations)
        self.busy_until = time.perf_counter()
        self.events: list[tuple] = []   # ("fn", t) and ("sync", t_enter, t_exit)

    def epoch_fn(self):
        now = time.perf_counter()
        n = sum(1 for e in self.events if e[0] == "fn")
        work = self.durations[n] if n < len(self.durations) else self.durations[-1]
        self.busy_until = max(now, self.busy_until) + work
        self.events.append(("fn", now))

    def sync(self):
        start = time.perf_counter()
        left = self.busy_until - start
        if left > 0:
            time.sleep(left)
        self.events.append(("sync", start, time.perf_counter()))


# (warmup, repeats, seconds of work of each call: warm-up calls first; the first call pays a
# one-off start-up cost). In each case the median differs by 20 ms or more from the mean, min,
# max, total and either middle value, so a loaded machine cannot blur them; the two medians
# (40 and 100 ms) are too far apart for one number to pass both. The second case has an even
# number of repeats, and its counts tell "no warm-up", "warm-up fixed to 1" and "repeats fixed
# to 3" apart.
_Q4_CASES = [
    (1, 3, [0.15, 0.04, 0.12, 0.02]),
    (3, 4, [0.15, 0.03, 0.03, 0.30, 0.08, 0.12, 0.03]),
]
_Q4_TOLERANCE_S = 0.008


def _check_timer(time_epoch):
    require_function(time_epoch, "time_epoch")
    names = _code_names(time_epoch)
    if "benchmark" in names:
        raise Wrong("time_epoch calls benchmark(...). This exercise is to write what it does yourself: the "
                    "warm-up calls, sync() around each timed call, the repeats and their median.")
    for warmup, repeats, durations in _Q4_CASES:
        device = _QueuedDevice(durations)
        what = f"time_epoch(epoch_fn, sync, warmup={warmup}, repeats={repeats})"
        result = _call(lambda: time_epoch(device.epoch_fn, device.sync, warmup=warmup, repeats=repeats), what=what)
        events = device.events
        calls = [i for i, e in enumerate(events) if e[0] == "fn"]
        expected_calls = warmup + repeats
        if not calls:
            raise Wrong(f"{what} never called epoch_fn(): a timer has to run the work it times.")
        if len(calls) != expected_calls:
            if len(calls) == repeats:
                why = (" None of them was an untimed warm-up: call epoch_fn() `warmup` times first, "
                       "without timing it, to pay the one-off start-up costs.")
            elif len(calls) in (1 + repeats, warmup + 3):
                fixed = "warm-up calls" if len(calls) == 1 + repeats else "repeats"
                why = (f" It looks as if the number of {fixed} is fixed: use the arguments warmup and "
                       "repeats; don't fix their numbers.")
            else:
                why = ""
            raise Wrong(f"{what} called epoch_fn {len(calls)} times; expected warmup + repeats = "
                        f"{expected_calls}.{why}")
        if not any(e[0] == "sync" for e in events):
            raise Wrong(f"{what} never called sync(). epoch_fn() only QUEUES the work on the device and "
                        "returns at once; without sync() the clock measures the launch, not the epoch. "
                        "Call sync() after epoch_fn() and before reading the clock.")
        timed = calls[warmup:]
        ends = calls[1:] + [len(events)]
        for k, (i, end) in enumerate(zip(calls, ends)):
            if k >= warmup and not any(e[0] == "sync" for e in events[i + 1:end]):
                raise Wrong(f"{what}: after timed call {k - warmup + 1} of epoch_fn() there was no sync() before "
                            "the next call. Each repeat must wait for its own work: sync() after every timed "
                            "epoch_fn(), then read the clock.")
        if warmup and not any(e[0] == "sync" for e in events[calls[warmup - 1] + 1:timed[0]]):
            raise Wrong(f"{what}: the warm-up's work was still queued when the first timed call began, so "
                        "the first repeat also timed the warm-up. Call sync() after the warm-up, before "
                        "starting the clock.")
        # What each timed call took, from its launch to the end of the sync() that waited for it.
        observed = []
        for i, end in zip(calls, ends):
            sync_end = next(e[2] for e in events[i + 1:end] if e[0] == "sync") if any(
                e[0] == "sync" for e in events[i + 1:end]) else events[i][1]
            observed.append(sync_end - events[i][1])
        times = observed[warmup:]
        expected = statistics.median(times)
        if isinstance(result, (list, tuple)) or (isinstance(result, np.ndarray) and result.ndim > 0):
            raise Wrong(f"{what} returned {len(result)} numbers; return one: the median of the repeats "
                        "(statistics.median(times)).")
        if hasattr(result, "median") and not isinstance(result, numbers.Number):
            raise Wrong(f"{what} returned {_describe(result)}; return the median itself, a number of seconds.")
        got = as_number(f"the value {what} returned", result)
        if abs(got - expected) <= _Q4_TOLERANCE_S:
            continue
        candidates = [
            (expected * 1e3, "that is in milliseconds; return seconds (time.perf_counter() counts seconds)."),
            (statistics.fmean(times), "that is the mean of the repeats; return the median, which ignores "
                                      "the odd slow run (statistics.median)."),
            (min(times), "that is the fastest repeat; return the median (statistics.median)."),
            (max(times), "that is the slowest repeat; return the median, the middle value once sorted "
                         "(statistics.median sorts for you)."),
            (sum(times), "that is the total of all repeats; return the median of the repeats."),
            (statistics.median(observed), "your median includes the warm-up calls; time only the "
                                          "`repeats` calls that come after the warm-up."),
            (times[-1], "that is the last repeat only; keep every repeat's time and return their median."),
            (times[0], "that is the first repeat only; keep every repeat's time and return their median."),
            (sorted(times)[len(times) // 2], "with an even number of repeats the median is the mean of the "
                                             "two middle values (statistics.median does it)."),
        ]
        if got < 0.3 * min(durations):
            raise Wrong(f"{what} returned {got * 1e3:.3g} ms, but each timed epoch's work takes at least "
                        f"{min(durations[warmup:]) * 1e3:.0f} ms: the clock was read before the work had "
                        "finished. Call sync() AFTER epoch_fn() and BEFORE reading the clock (with "
                        "time.perf_counter(); time.process_time() does not count waiting).")
        matches = [text for value, text in candidates
                   if abs(value - got) <= _Q4_TOLERANCE_S * max(1.0, value / 0.1)]
        if matches:
            raise Wrong(f"{what} returned {got:.4g} s, but the median of the repeats was {expected:.4g} s: "
                        + " Or: ".join(matches[:2]))
        raise Wrong(f"{what} returned {got:.4g} s, but the median of the {repeats} timed repeats was "
                    f"{expected:.4g} s (the repeats took {', '.join(f'{t:.3f}' for t in times)} s).")
    return ("warm-up first, sync() before every clock reading, the median of the repeats: your timer is "
            "right for a device that queues its work (tested with two warm-up/repeat settings).")


q4 = Exercise("ep03.q4", _check_timer,
              hint="for _ in range(warmup): epoch_fn(). Then sync() once, and for each repeat: "
                   "start = time.perf_counter(); epoch_fn(); sync(); times.append(time.perf_counter() - start). "
                   "Return statistics.median(times).",
              solution=solution_link(NOTEBOOK))


# --- q5: the crossover width ---------------------------------------------------------------------

def crossover_width(widths, cpu_times, gpu_times):
    """First width from which the GPU is faster for every wider network (None if never, or no GPU)."""
    if gpu_times is None:
        return None
    for i, width in enumerate(widths):
        if all(g < c for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return width
    return None


_Q5_CASES = [
    ([5, 50, 500, 2000], [0.010, 0.012, 0.050, 0.400], [0.030, 0.030, 0.031, 0.040]),
    ([10, 100, 1000, 3000], [0.01, 0.05, 0.30, 2.0], [0.03, 0.04, 0.35, 0.20]),    # wins, loses, wins
    ([8, 64, 512], [0.01, 0.02, 0.03], [0.05, 0.06, 0.07]),                       # never
    ([16, 256, 4096], [0.5, 0.9, 9.0], [0.1, 0.1, 0.2]),                          # from the start
    ([20, 200, 2000], [0.01, 0.04, 0.50], [0.03, 0.04, 0.06]),                    # a tie at 200
    ([5, 50, 500], [0.01, 0.10, 0.20], [0.05, 0.03, 0.25]),                       # wins, then loses at the end
    ([5, 50], [0.01, 0.02], None),                                                # no GPU
    (np.array([32, 128, 512, 1024]), np.array([0.02, 0.03, 0.09, 0.30]),
     np.array([0.04, 0.04, 0.05, 0.06])),                                         # NumPy arrays
]


def _crossover_where(widths, cpu_times, gpu_times, faster):
    """First width from which ``faster(gpu, cpu)`` holds for every wider network."""
    if gpu_times is None:
        return None
    for i, width in enumerate(widths):
        if all(faster(g, c) for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return int(width)
    return None


def _first_faster(widths, cpu_times, gpu_times):
    if gpu_times is None:
        return None
    return next((int(w) for w, c, g in zip(widths, cpu_times, gpu_times) if g < c), None)


def _index_of_crossover(widths, cpu_times, gpu_times):
    found = crossover_width(widths, cpu_times, gpu_times)
    return None if found is None else [int(w) for w in widths].index(int(found))


def _one_too_early(widths, cpu_times, gpu_times):
    found = crossover_width(widths, cpu_times, gpu_times)
    if found is None:
        return None
    i = [int(w) for w in widths].index(int(found))
    return int(widths[max(i - 1, 0)])


def _show(seq):
    return "None" if seq is None else "[" + ", ".join(f"{v:g}" for v in seq) + "]"


def _what(widths, cpu_times, gpu_times) -> str:
    return f"crossover(widths={_show(widths)}, cpu_times={_show(cpu_times)}, gpu_times={_show(gpu_times)})"


def _slower_again(case, got, expected):
    widths, cpu_times, gpu_times = case
    i = [int(w) for w in widths].index(got)
    later = next(int(w) for w, c, g in zip(widths[i:], cpu_times[i:], gpu_times[i:]) if not g < c)
    stays = f"here {expected}" if expected is not None else "and here it never does, so None"
    return (f"{_what(*case)} returned {got}: the GPU is faster at width {got}, but slower again at {later}. "
            f"The crossover is the width from which it STAYS faster for every wider network, {stays}.")


def _tie(case, got, expected):
    widths, cpu_times, gpu_times = case
    tie = next(int(w) for w, c, g in zip(widths, cpu_times, gpu_times) if g == c)
    return (f"{_what(*case)} returned {got}, but at width {tie} the GPU and the CPU take the same time: the GPU "
            f"is not faster there (use <, not <=). The answer is {expected}.")


def _backwards(case, got, expected):
    return (f"{_what(*case)} returned {got}: that is where the CPU stays faster. Your comparison is the wrong "
            f"way round: the GPU is faster where gpu_times[i] < cpu_times[i]. The answer is {expected}.")


def _an_index(case, got, expected):
    return (f"{_what(*case)} returned {got}, the position of the crossover in widths; return the width "
            f"itself, widths[{got}] = {expected}.")


def _too_early(case, got, expected):
    return (f"{_what(*case)} returned {got}, the last width where the CPU is still faster; return the first "
            f"width where the GPU is faster and stays so, {expected}.")


# (a mistaken rule, and what to say when every answer follows it)
_Q5_DIAGNOSES = [
    (_first_faster, _slower_again),
    (lambda w, c, g: _crossover_where(w, c, g, lambda gpu, cpu: gpu <= cpu), _tie),
    (lambda w, c, g: _crossover_where(w, c, g, lambda gpu, cpu: cpu < gpu), _backwards),
    (_index_of_crossover, _an_index),
    (_one_too_early, _too_early),
]


def _run_crossover(crossover, widths, cpu_times, gpu_times):
    """The learner's answer for one sweep, as an int width or None."""
    what = _what(widths, cpu_times, gpu_times)
    try:
        with answer_deadline(what):
            got = crossover(widths, cpu_times, gpu_times)
    except (NotDone, Wrong):
        raise
    except Exception as exc:
        if _mentions_blank(exc):
            raise NotDone("crossover still uses ____: replace it with your code.") from None
        extra = (" With no GPU, gpu_times is None: return None before looking at it."
                 if gpu_times is None else "")
        raise Wrong(f"{what} raised {type(exc).__name__}: {exc}.{extra}") from None
    if is_blank(got):
        raise NotDone("crossover still returns ____: replace it with your code.")
    if got is None:
        return None
    if isinstance(got, bool) or not isinstance(got, numbers.Real) or (
            isinstance(got, float) and not got.is_integer()):
        raise Wrong(f"{what} returned {_describe(got)}; return a width from widths (a whole number), or None.")
    return int(got)


def _mismatch(case, got, expected) -> str:
    widths, cpu_times, gpu_times = case
    what = _what(*case)
    if expected is None:
        if got in (0, -1):
            return f"{what} returned {got}; when there is no crossover, return None, not a number."
        if gpu_times is None:
            return f"{what} returned {got}; there is no GPU (gpu_times is None), so no crossover: return None."
        return (f"{what} returned {got}; the GPU is not faster at the widest width, so it never STAYS faster: "
                "return None.")
    if got is None:
        return f"{what} returned None, but the GPU is faster from width {expected} on."
    widths = [int(w) for w in widths]
    if got not in widths:
        return f"{what} returned {got}, which is not one of the widths; return a width from widths."
    i = widths.index(got)
    if gpu_times[i] >= cpu_times[i]:
        return (f"{what} returned {got}, where the CPU is faster ({cpu_times[i]:g} s against {gpu_times[i]:g} s "
                f"on the GPU). The answer is {expected}.")
    return f"{what} returned {got}; the first width from which the GPU stays faster is {expected}."


def _check_crossover(my_prediction, crossover, widths, cpu_times, gpu_times):
    if isinstance(my_prediction, bool) or not isinstance(my_prediction, (int, np.integer)) or my_prediction < 1:
        extra = " (text in quotes is not a number: drop the quotes)" if isinstance(my_prediction, str) else ""
        raise Wrong(f"my_prediction should be a width, a positive whole number such as 100 (make your guess "
                    f"before you run the sweep), got {_describe(my_prediction)}{extra}.")
    require_function(crossover, "crossover")
    widths, cpu_times = list(widths), list(cpu_times)
    if len(cpu_times) != len(widths) or (gpu_times is not None and len(gpu_times) != len(widths)):
        n_gpu = "no" if gpu_times is None else len(gpu_times)
        raise Wrong(f"expected one time per width: {len(widths)} widths, {len(cpu_times)} CPU times, "
                    f"{n_gpu} GPU times. Run the sweep cell again.")
    cases = _Q5_CASES + [(widths, cpu_times, None if gpu_times is None else list(gpu_times))]
    answers = [_run_crossover(crossover, *case) for case in cases]
    wrong = [(case, got, crossover_width(*case)) for case, got in zip(cases, answers)
             if got != crossover_width(*case)]
    if wrong:
        for rule, message in _Q5_DIAGNOSES:
            if all(got == rule(*case) for case, got in zip(cases, answers)):
                raise Wrong(message(*wrong[0]))
        raise Wrong(_mismatch(*wrong[0]))
    measured = crossover_width(widths, cpu_times, gpu_times)
    tested = f"your crossover() is right on {len(_Q5_CASES)} test sweeps and on yours."
    if gpu_times is None:
        return (f"{tested} No GPU here, so no crossover to measure. You predicted width {my_prediction}; "
                "run this notebook on a GPU runtime to test your prediction.")
    if measured is None:
        return (f"{tested} The GPU never stays faster in this sweep (you predicted {my_prediction}). "
                "Try wider networks or bigger batches.")
    ratio = max(my_prediction, measured) / min(my_prediction, measured)
    verdict = "within a factor of 3: a good prediction" if ratio <= 3 else "more than 3× off: worth asking why"
    return f"{tested} The GPU wins from width {measured} on. You predicted {my_prediction}, {verdict}."


q5 = Exercise("ep03.q5", _check_crossover,
              hint="Return None at once if gpu_times is None. Otherwise go through the widths in order and "
                   "return the first width i where gpu_times[j] < cpu_times[j] for EVERY j >= i "
                   "(all(...) over the rest of the lists); None if there is none.",
              solution=solution_link(NOTEBOOK))

__all__ = ["q1", "q2", "q3", "q4", "q5", "crossover_width", "DeviceMismatch"]
