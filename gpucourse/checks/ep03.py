"""Checks for episode 3, "A PyTorch classifier on the GPU".

``q1`` standardise features where they live, on the device · ``q2`` a training step that follows the
model's device and dtype · ``q3`` a whole epoch's results brought back to the host once · ``q4`` a
loader that streams from host memory, pinned where it helps · ``q5`` predict, then measure, the
crossover width.

Every check calls the learner's function on fixtures of its own, several of them, so that a
constant or an answer right for one case only cannot pass; it recomputes what the right result
is rather than trusting numbers it is handed.

A stand-in makes the GPU lessons checkable on any machine:

* ``_SimulatedGPUs`` pretends that CUDA GPUs exist. A tensor "on cuda:1" is a CPU tensor tagged
  with that device; ``.device`` reports the tag, ``.to()``/``.cuda()``/``.cpu()`` and factory
  functions with ``device=`` move the tag, and any operation that mixes devices raises the
  error PyTorch raises on a GPU ("Expected all tensors to be on the same device ...").
  It never runs anything on the ``meta`` device (a meta-device matmul crashes one PyTorch build
  when TensorFlow is loaded).
  It also records every copy from a simulated GPU to the host (``.cpu()``, ``.item()``, ``float()``
  ...), the moments a real GPU would make the CPU wait.
"""

from __future__ import annotations

import contextlib
import copy
import math
import numbers
import statistics
from unittest import mock

import numpy as np

from .. import timing
from ..device import cuda_usable
from ..exercises import error_message
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



# --- a simulated GPU for PyTorch ---------------------------------------------------------

_TAG = "_gpucourse_simulated_device"
_TO_HOST = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__")
_CALLED = {"item": ".item()", "tolist": ".tolist()", "__float__": "float(tensor)", "__int__": "int(tensor)",
           "__bool__": "a tensor in an if or and/or", "__index__": "a tensor as an index", "cpu": ".cpu()",
           "to": ".to('cpu')", "cuda": ".cuda()"}


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
        self.to_host: list[str] = []    # every copy from a simulated GPU to the host, by the call that made it
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
        if name in _TO_HOST and args and hasattr(args[0], _TAG):   # a number back to Python: the CPU waits
            self.to_host.append(name)
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
        if target is not None and target.type == "cpu" and current.type == "cuda":
            self.to_host.append(name)
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


# --- q1: standardise on the device, with training-set statistics -----------------------------------

def _q1_fixtures():
    """(description, GPUs of the simulated machine, device of the features, X_train, X_test, constant column)."""
    rng = np.random.default_rng(31)
    gev = rng.gamma(2.0, 20.0, size=(160, 6)).astype(np.float32)
    flag = gev.copy()
    flag[:120, 2] = 1.0                                   # one feature constant in the training set
    scales = np.array([1000.0, 1.0, 0.01])
    return [
        ("5 float32 features on a machine without a GPU", 0, "cpu",
         rng.normal(5.0, 2.0, size=(200, 5)).astype(np.float32), rng.normal(9.0, 3.0, size=(80, 5)).astype(np.float32),
         None),
        ("6 features on cuda:1, feature 2 the same for every training event", 2, "cuda:1",
         flag[:120], flag[120:] * 1.5, 2),
        ("3 float64 features on cuda:0, a test set of ONE event", 1, "cuda:0",
         rng.normal([50_000.0, 0.0, -3.0], scales, size=(60, 3)), rng.normal([52_000.0, 1.0, -3.0], scales, size=(1, 3)),
         None),
    ]


def _standardise_reference(train, test, ddof):
    """What a right answer gives, in float64 NumPy: a feature without spread is only centred."""
    mu, sd = train.mean(axis=0), train.std(axis=0, ddof=ddof)
    sd = np.where(sd == 0, 1.0, sd)
    return (train - mu) / sd, (test - mu) / sd


def _standardise_alternatives(train, test):
    """What common mistakes return, with either std (ddof 0 or 1): (message, train_result, test_result)."""
    return [alt for ddof in (0, 1) for alt in _alternatives_with(train, test, ddof)]


def _alternatives_with(train, test, ddof):
    mu, sd = train.mean(axis=0), train.std(axis=0, ddof=ddof)
    both = np.concatenate([train, test])
    with np.errstate(all="ignore"):
        return [
            ("your statistics include the test events (mean and std of X_train and X_test together): "
             "information about the test set leaks into training. Compute them from X_train only.",
             (train - both.mean(0)) / both.std(0, ddof=ddof), (test - both.mean(0)) / both.std(0, ddof=ddof)),
            ("X_test was standardised with its own mean and std. Use the TRAINING mean and std for every "
             "split: the test set must stay unseen, and the model expects features scaled as in training.",
             (train - mu) / sd, (test - test.mean(0)) / test.std(0, ddof=ddof)),
            ("the mean and std are single numbers for the whole table; take them along the events "
             "(dim=0), one value per feature (column).",
             (train - train.mean()) / train.std(ddof=ddof), (test - train.mean()) / train.std(ddof=ddof)),
            ("the statistics are per event (dim=1, along each row); take them along dim=0: one mean and "
             "std per feature, over the training events.",
             (train - train.mean(1, keepdims=True)) / train.std(1, ddof=ddof, keepdims=True),
             (test - test.mean(1, keepdims=True)) / test.std(1, ddof=ddof, keepdims=True)),
            ("you divided by the variance; divide by the standard deviation (its square root).",
             (train - mu) / train.var(0, ddof=ddof), (test - mu) / train.var(0, ddof=ddof)),
            ("you subtracted the mean but did not divide by the standard deviation.", train - mu, test - mu),
            ("you divided by the standard deviation but did not subtract the mean.", train / sd, test / sd),
        ]


def _close(a, b) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-4, atol=1e-4))


def _explain_standardise_error(case: str, where: str):
    def explain(exc):
        text = str(exc)
        if "can't convert" in text and "numpy" in text:
            return (f"with {case}: {text} The features live on {where}: compute the statistics with torch "
                    "operations on the tensors themselves, where they are. A trip through NumPy would copy "
                    "the whole table to the host and back.")
        if isinstance(exc, DeviceMismatch):
            return (f"with {case}: an operation met tensors on {exc.devices[0]} and {exc.devices[1]}. "
                    f"Everything you make (the statistics, any constant tensor) must be on {where}, "
                    "like the features: a tensor made without device= is on the CPU.")
        if "No CUDA GPUs are available" in text or "invalid device ordinal" in text:
            return (f"with {case}, your function asked for a device that is not there ({text}). Don't name "
                    "a device: the results belong where the features already are.")
        return None
    return explain


def _check_standardise(standardise):
    import torch

    require_function(standardise, "standardise")
    for description, gpus, where, train, test, constant in _q1_fixtures():
        what = f"standardise(X_train, X_test) with {description}"
        with _SimulatedGPUs(gpus) as sim:
            X_train, X_test = torch.from_numpy(train.copy()), torch.from_numpy(test.copy())
            sim.place(X_train, where)
            sim.place(X_test, where)
            out = _call(standardise, X_train, X_test, what=what,
                        explain=_explain_standardise_error(description, where))
            copies = list(sim.to_host)
        if not (np.array_equal(X_train.numpy(), train) and np.array_equal(X_test.numpy(), test)):
            raise Wrong(f"{what} changed its inputs in place (X -= mean, or sub_ does that): the caller's raw "
                        "features are gone. Return new tensors: (X - mean) / std.")
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            kind = "one tensor" if isinstance(out, (np.ndarray, torch.Tensor)) else _describe(out)
            raise Wrong(f"{what} returned {kind}; return two tensors, the standardised X_train and X_test.")
        shapes = [tuple(getattr(a, "shape", ())) for a in out]
        if shapes == [test.shape, train.shape] and train.shape != test.shape:
            raise Wrong(f"{what} returned X_test's result first; return them in the order they came in: "
                        "the standardised X_train, then X_test.")
        for label, arr, raw in (("X_train", out[0], train), ("X_test", out[1], test)):
            if isinstance(arr, np.ndarray):
                raise Wrong(f"{what}: the standardised {label} is a NumPy array. The features live on "
                            f"{where}; return torch tensors on that device, computed there.")
            if not isinstance(arr, torch.Tensor):
                raise Wrong(f"{what}: the standardised {label} should be a torch.Tensor, got {_describe(arr)}.")
            landed = _device_of(arr)
            if str(landed) != where:
                raise Wrong(f"{what}: the standardised {label} is on {landed}, but the features were on {where}. "
                            "Keep the work where the data live: compute with torch on the tensors as they "
                            "come, with no .cpu() or .to() on the way (a round trip costs two copies of the "
                            "table, and the model on the device wants them there).")
            if arr.dtype != torch.from_numpy(raw).dtype:
                raise Wrong(f"{what}: the standardised {label} is {arr.dtype}, but the features were "
                            f"{torch.from_numpy(raw).dtype}; keep their dtype.")
            if tuple(arr.shape) != raw.shape:
                raise Wrong(f"{what}: the standardised {label} has shape {tuple(arr.shape)}, but {label} has shape "
                            f"{raw.shape}; standardising keeps the shape.")
        if copies:
            raise Wrong(f"{what}: your function copied numbers from the device to the host "
                        f"({', '.join(sorted(set(_CALLED.get(c, c) for c in copies)))}, {len(copies)} time(s)). "
                        "Each copy makes the CPU wait "
                        "for the GPU. Compute every statistic as a tensor on the device, all features at once.")
        got = [a.detach().numpy().astype(np.float64) for a in out]
        train64, test64 = train.astype(np.float64), test.astype(np.float64)
        if constant is not None:
            column = got[1][:, constant]
            if not np.all(np.isfinite(got[0][:, constant])) or not np.all(np.isfinite(column)):
                raise Wrong(f"{what}: feature {constant} has the same value in every training event, so its "
                            "standard deviation is 0 and (x - mean) / std gives NaN or inf. A feature without "
                            "spread should only be centred: divide it by 1 instead of 0 (scikit-learn's "
                            "StandardScaler does the same).")
            expected = test64[:, constant] - train64[:, constant].mean()
            if not _close(column, expected):
                raise Wrong(f"{what}: feature {constant} is constant in the training set; the test values "
                            f"became {column[:3].round(3).tolist()}…, expected {expected[:3].round(3).tolist()}… "
                            "(centred only). Dividing by a tiny number instead of 0 blows them up: divide a "
                            "feature without spread by 1.")
        if any(_close(got[0], a) and _close(got[1], b)
               for a, b in (_standardise_reference(train64, test64, ddof) for ddof in (0, 1))):
            continue
        keep = [j for j in range(train.shape[1]) if j != constant]
        for message, a, b in _standardise_alternatives(train64[:, keep], test64[:, keep]):
            if _close(got[0][:, keep], a) and _close(got[1][:, keep], b):
                raise Wrong(f"{what}: {message}")
        ref_train, ref_test = _standardise_reference(train64, test64, 0)
        for label, arr, ref in (("X_train", got[0], ref_train), ("X_test", got[1], ref_test)):
            if not _close(arr, ref) and not _close(arr, _standardise_reference(train64, test64, 1)[label == "X_test"]):
                err = np.abs(arr - ref)
                row, col = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), err.shape)
                raise Wrong(f"{what}: the standardised {label}[{row}, {col}] is {arr[row, col]:.4g}, expected "
                            f"{ref[row, col]:.4g} = ({label}[{row}, {col}] - mean[{col}]) / std[{col}] with the "
                            "mean and std of X_train's columns.")
    return ("one mean and std per feature, from the training set only, computed on the device where the "
            "features live, and a feature without spread only centred (tested on the CPU and on simulated "
            "GPUs, with a test set of one event).")


q1 = Exercise("ep03.q1", _check_standardise,
              hint=("Where do the features live when your function gets them, and what happens to the "
                    "training loop's speed if the statistics take a detour through the host? And what becomes of "
                    "a feature whose value never changes in the training set when you divide by its spread?",
                    "Reduce over the events, the first dimension, of the training tensor only, with torch's "
                    "own reductions, so the statistics are tensors on the same device; apply them to both "
                    "splits. Where a standard deviation is zero, put one in its place before dividing: an "
                    "element-wise choice between two tensors on the same device."),
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
    # (what the machine has, how many simulated GPUs, where the model lives, its dtype, features)
    ("a machine without a GPU, the model on the CPU in float32", 0, "cpu", "float32", 6),
    ("a machine with 2 GPUs, the model on cuda:1 in float32", 2, "cuda:1", "float32", 4),
    ("a machine with a GPU, the model deliberately left on the CPU, in float64", 1, "cpu", "float64", 5),
    ("a machine with a GPU, the model on cuda:0 in float64", 1, "cuda:0", "float64", 3),
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
        if "must have the same dtype" in text and "got Double and Float" in text:
            return (f"on {case}, model(xb) met float64 features and a float32 model ({text}). NumPy makes "
                    "float64 by default; convert the features to the dtype of the model's parameters, as well "
                    "as to their device.")
        if "must have the same dtype" in text and "got Float and Double" in text:
            return (f"on {case}, model(xb) met float32 features and a float64 model ({text}). Don't fix float32: "
                    "take the dtype from the model's parameters, as you take the device.")
        if "can't be cast to the desired output type Long" in text or ("Long" in text and "entropy" in text):
            return (f"on {case}: {text}. The labels arrive as integers (int64); BCEWithLogitsLoss needs "
                    "floating-point targets: convert them to the model's dtype too.")
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
    for i, (case, gpus, where, dtype, n_features) in enumerate(_Q2_CASES):
        rng = np.random.default_rng(100 + i)
        X = rng.normal(size=(24, n_features))                 # float64, as NumPy makes them
        y = (rng.random(24) < 0.5).astype(np.int64)           # integer labels, as a table holds them
        X_in, y_in = X.copy(), y.copy()
        model = _mlp(n_features, 8, seed=i).to(getattr(torch, dtype))

        reference = copy.deepcopy(model)                     # the right step, on the real CPU
        as_model = dict(dtype=getattr(torch, dtype))
        expected_loss = reference_loss(reference(torch.from_numpy(X).to(**as_model)).squeeze(1),
                                       torch.from_numpy(y).to(**as_model))
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
    if cuda_usable():                                        # and once for real, on this machine's GPU
        device = torch.device("cuda", 0)
        model = _mlp(4, 8, seed=7).to(device)
        X = np.random.default_rng(7).normal(size=(16, 4))
        y = np.ones(16, dtype=np.int64)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        _call(train_step, model, optimizer, X, y, what="train_step(...) with the model on this machine's GPU",
              explain=_explain_step_error("this machine's GPU", device))
        extra = " It also ran on this machine's real GPU."
    return ("the features and the labels go to the model's device and dtype, wherever it is and whatever it "
            f"computes in (tested on simulated machines with 0, 1 and 2 GPUs, float32 and float64 models).{extra}")


q2 = Exercise("ep03.q2", _check_train_step,
              hint=("Who decided where this model lives and what it computes in: you, or the caller? What in "
                    "the model itself can tell you both? And what does a loss for two classes expect its "
                    "targets to be?",
                    "Every parameter of a model is a tensor that knows its device and its dtype: ask one of "
                    "them, and convert the features AND the labels to that device and dtype in one step each. "
                    "Do not ask what the machine has: a GPU may exist while the model stays on the CPU."),
              solution=solution_link(NOTEBOOK))


# --- q3: a whole epoch's results, brought back once ----------------------------------------------------

_Q3_CASES = [
    # (description, simulated GPUs, device of the model and the batches, batch sizes)
    ("3 batches of 16, 16 and 5 events on a machine without a GPU", 0, "cpu", (16, 16, 5)),
    ("4 batches of 8, 8, 8 and 3 events on cuda:0", 1, "cuda:0", (8, 8, 8, 3)),
]


def _q3_batches(sizes, seed, n_features=5):
    import torch

    rng = np.random.default_rng(seed)
    return [(torch.from_numpy(rng.normal(size=(n, n_features)).astype(np.float32)),
             torch.from_numpy((rng.random(n) < 0.5).astype(np.float32))) for n in sizes]


def _explain_collect_error(case: str):
    def explain(exc):
        text = str(exc)
        if "can't convert" in text and "numpy" in text:
            return (f"with {case}: {text} The results are in the GPU's memory: they must come to the host "
                    "before NumPy can read them.")
        if "requires grad" in text:
            return (f"with {case}: {text} Collecting results needs no gradients: run the model without "
                    "autograd (or detach), so no graph is kept and NumPy can read the tensor.")
        if isinstance(exc, DeviceMismatch):
            return (f"with {case}: an operation met tensors on {exc.devices[0]} and {exc.devices[1]}. A "
                    "tensor you make to hold a total must be on the batches' device (or start from a "
                    "Python 0, which meets a tensor anywhere).")
        return None
    return explain


def _check_collect(collect):
    import torch
    from torch import nn

    require_function(collect, "collect")
    for seed, (case, gpus, where, sizes) in enumerate(_Q3_CASES):
        model = _mlp(5, 8, seed)
        batches = _q3_batches(sizes, seed)
        with torch.no_grad():
            logits = torch.cat([model(xb).squeeze(1) for xb, _ in batches])
            labels = torch.cat([yb for _, yb in batches])
            expected_prob = torch.sigmoid(logits).double().numpy()
            expected_loss = nn.functional.binary_cross_entropy_with_logits(logits, labels).item()
            batch_means = [nn.functional.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb).item()
                           for xb, yb in batches]
        what = f"collect(model, batches) with {case}"
        with _SimulatedGPUs(gpus) as sim:
            for p in model.parameters():
                sim.place(p, where)
            for xb, yb in batches:
                sim.place(xb, where)
                sim.place(yb, where)
            out = _call(collect, model, batches, what=what, explain=_explain_collect_error(case))
            copies = list(sim.to_host)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise Wrong(f"{what} returned {_describe(out)}; return two things: the probabilities as a NumPy "
                        "array, then the mean loss as a Python float.")
        prob, loss_value = out
        if isinstance(prob, numbers.Number) and not isinstance(loss_value, numbers.Number):
            raise Wrong(f"{what}: you returned the loss first; return the probabilities first, then the loss.")
        if len(copies) > 2:
            kinds = ", ".join(sorted(set(_CALLED.get(c, c) for c in copies)))
            raise Wrong(f"{what}: your function copied results from the GPU to the host {len(copies)} times "
                        f"({kinds}) for {len(sizes)} batches. Each copy makes the CPU wait until the GPU has "
                        "finished everything queued. Keep the running loss and the probabilities as tensors "
                        "on the device while you loop, and bring them back once, at the end.")
        if isinstance(prob, torch.Tensor):
            raise Wrong(f"{what}: the probabilities are still {_describe(prob)}; scikit-learn wants a NumPy "
                        "array in host memory.")
        if isinstance(prob, (list, tuple)):
            raise Wrong(f"{what}: the probabilities are a Python {type(prob).__name__}; return one NumPy array.")
        if not isinstance(prob, np.ndarray):
            raise Wrong(f"{what}: the probabilities should be a NumPy array, got {_describe(prob)}.")
        n = sum(sizes)
        if prob.size == n and prob.shape != (n,):
            raise Wrong(f"{what}: the probabilities have shape {prob.shape}; return a 1-D array of {n}, one "
                        "per event, as scikit-learn's metrics want.")
        if prob.shape != (n,):
            raise Wrong(f"{what}: the probabilities have shape {prob.shape}, but the batches hold {n} events; "
                        "return one probability for every event of every batch, in order.")
        prob64 = prob.astype(np.float64)
        if np.allclose(prob64, torch.logit(torch.from_numpy(expected_prob)).numpy(), atol=1e-5):
            raise Wrong(f"{what}: these are the model's logits; the probabilities are their sigmoid.")
        if not np.allclose(prob64, expected_prob, atol=1e-5):
            raise Wrong(f"{what}: the probabilities differ from the model's, sigmoid(model(xb)), event by event "
                        "(in the order of the batches).")
        if isinstance(loss_value, torch.Tensor):
            raise Wrong(f"{what}: the loss is {_describe(loss_value)}; return a Python float.")
        value = as_number("the mean loss", loss_value)
        if math.isclose(value, statistics.fmean(batch_means), rel_tol=1e-5) and \
                not math.isclose(value, expected_loss, rel_tol=1e-5):
            raise Wrong(f"{what}: the loss is the mean of the batches' mean losses, {value:.6g}. The last batch "
                        f"has only {sizes[-1]} events, so it counts too much: weight each batch's loss by its "
                        f"number of events and divide by all {n} events; expected {expected_loss:.6g}.")
        if math.isclose(value, sum(batch_means), rel_tol=1e-5):
            raise Wrong(f"{what}: the loss is the sum of the batches' mean losses; return the mean loss per "
                        f"event, {expected_loss:.6g}.")
        if not math.isclose(value, expected_loss, rel_tol=1e-5, abs_tol=1e-7):
            raise Wrong(f"{what}: the mean loss is {value:.6g}, expected {expected_loss:.6g}: the loss of every "
                        f"event of every batch, averaged over all {n} events.")
    return ("one copy to the host for the probabilities and one for the loss, however many batches, and the "
            "loss weighted by batch size (tested on the CPU and on a simulated GPU, with a short last batch).")


q3 = Exercise("ep03.q3", _check_collect,
              hint=("When does the CPU have to wait for the GPU, and how often does your loop make it wait? "
                    "And if the last batch is smaller, is the mean of the batch means the mean over events?",
                    "Inside the loop, keep everything as tensors on the device: append each batch's "
                    "probabilities to a list and add each batch's loss times its size to a running total. After "
                    "the loop, join the probabilities into one tensor and bring it and the total to the host "
                    "once each; divide the total by the number of events. No gradients are needed."),
              solution=solution_link(NOTEBOOK))


# --- q4: a loader that streams from host memory, pinned where it helps ---------------------------------

_Q4_CASES = [
    # (description, simulated GPUs, device the batches go to, events, batch size)
    ("a machine without a GPU, batches for the CPU", 0, "cpu", 50, 16),
    ("a machine with 2 GPUs, batches for cuda:1", 2, "cuda:1", 37, 8),
    ("a machine with a GPU, batches for the CPU (the model stays there)", 1, "cpu", 20, 6),
]


def _loader_order(loader):
    """The event indices of one epoch, in order, read from the loader's sampler (no batch is assembled)."""
    return [int(i) for batch in loader.batch_sampler for i in batch] if loader.batch_sampler is not None else None


def _check_loader(host_loader, t_pageable, t_pinned):
    import torch
    from torch.utils.data import DataLoader

    require_function(host_loader, "host_loader")
    for k, (case, gpus, where, n, batch_size) in enumerate(_Q4_CASES):
        rng = np.random.default_rng(40 + k)
        X = rng.normal(size=(n, 4)).astype(np.float32)
        y = (rng.random(n) < 0.5).astype(np.float32)
        device = torch.device(where)
        what = f"host_loader(X, y, batch_size={batch_size}, device={where!r}, seed=...) on {case}"
        with _SimulatedGPUs(gpus):
            loaders = [_call(host_loader, X, y, batch_size, device, seed, what=what) for seed in (1, 1, 2)]
        loader = loaders[0]
        if not isinstance(loader, DataLoader):
            raise Wrong(f"{what} returned {_describe(loader)}; return a torch.utils.data.DataLoader.")
        try:
            with _SimulatedGPUs(gpus):                   # an item of a tensor on a (simulated) GPU is there too
                first = tuple(loader.dataset[0]) + tuple(getattr(loader.dataset, "tensors", ()))
        except Exception as exc:
            raise Wrong(f"{what}: the loader's data set cannot be read ({type(exc).__name__}: {exc}).") from None
        if len(loader.dataset) != n:
            raise Wrong(f"{what}: the loader's data set holds {len(loader.dataset)} events; X has {n}.")
        on_device = [t for t in first if isinstance(t, torch.Tensor) and _device_of(t).type != "cpu"]
        if on_device:
            raise Wrong(f"{what}: the data set's tensors are on {_device_of(on_device[0])}. A loader streams from HOST "
                        "memory: leave the tensors there (pinning works only on host tensors), and let the "
                        "training loop copy each batch.")
        if loader.batch_size != batch_size:
            raise Wrong(f"{what}: the batches hold {loader.batch_size} events; use the batch_size argument.")
        if loader.drop_last:
            raise Wrong(f"{what}: drop_last=True throws the last {n % batch_size} events away every epoch; an "
                        "epoch should see every event.")
        pin_expected = device.type == "cuda"
        if bool(loader.pin_memory) != pin_expected:
            if pin_expected:
                raise Wrong(f"{what}: the batches go to a GPU, but the loader does not pin them. Pinned "
                            "(page-locked) host memory is what the GPU copies from directly, and what makes "
                            "non_blocking copies possible.")
            if gpus:
                raise Wrong(f"{what}: the loader pins its batches, but they go to the CPU. Whether a GPU exists "
                            "does not matter: pin only when the device the batches go to is a CUDA GPU "
                            "(pinning is one more copy, and the CPU reads ordinary memory anyway).")
            raise Wrong(f"{what}: the loader pins its batches on a machine without a GPU. There pinning does "
                        "nothing useful (PyTorch warns and skips it): pin only when the batches go to a CUDA GPU.")
        orders = [_loader_order(loaders[0]), None, _loader_order(loaders[2])]   # loaders[1] is read below
        if orders[0] is None or sorted(orders[0]) != list(range(n)):
            raise Wrong(f"{what}: one epoch does not visit every event exactly once.")
        if orders[0] == list(range(n)):
            raise Wrong(f"{what}: the events come in their stored order. Shuffle them: a new order every epoch.")
        torch.manual_seed(12345)                           # someone else uses the global generator ...
        again = _loader_order(loaders[1])
        if orders[0] != again:
            raise Wrong(f"{what}: two loaders made with the same seed give different orders once other code "
                        "has used PyTorch's global random generator. Give the loader its own generator, "
                        "seeded with seed.")
        if orders[0] == orders[2]:
            raise Wrong(f"{what}: seeds 1 and 2 give the same order; use the seed argument.")
        if _loader_order(loader) == orders[0]:
            raise Wrong(f"{what}: the second epoch has the same order as the first. Seed a generator once, when "
                        "the loader is made, not inside it for every epoch.")
    if is_blank(t_pageable) or is_blank(t_pinned):
        raise NotDone("your host_loader is right; now time one epoch from each loader (replace ____ with the "
                      "seconds).")
    times = {}
    for name, value in (("t_pageable", t_pageable), ("t_pinned", t_pinned)):
        if hasattr(value, "median") and not isinstance(value, numbers.Number):
            raise Wrong(f"{name} is {_describe(value)}; pass its median, a number of seconds.")
        times[name] = as_number(name, value)
        if times[name] <= 0:
            raise Wrong(f"{name} is {times[name]:g}; the seconds of one epoch are more than 0.")
    ratio = times["t_pinned"] / times["t_pageable"]
    if cuda_usable():
        verdict = (f"Here pinned takes ×{ratio:.2f} the time of pageable. Below 1, pinning and non_blocking copies "
                   "saved more than the extra copy into pinned memory cost; above 1, the per-batch pinning in the "
                   "main process cost more than it saved (with num_workers > 0, a background thread in the main process pins batches while the loop trains).")
    else:
        verdict = (f"No GPU here, so both loaders are the same pageable loader: the ×{ratio:.2f} between them is "
                   "noise. Run this notebook on a GPU runtime to see what pinning does.")
    return ("pinned exactly when the batches go to a GPU, host tensors, every event, a reproducible order "
            f"(tested on simulated machines with 0, 1 and 2 GPUs). {verdict}")


q4 = Exercise("ep03.q4", _check_loader,
              hint=("Which memory does a GPU copy from directly, and does that matter when the batches go to "
                    "the CPU? And what makes two runs see the same shuffled order, even when other code draws "
                    "random numbers in between?",
                    "Keep the tensors in host memory and wrap them in a data set; ask the loader to pin its "
                    "batches only when the target device is a CUDA GPU, and give it a random generator of its "
                    "own, seeded once. Then time one epoch over each loader with episode 1's timer and pass "
                    "the medians."),
              solution=solution_link(NOTEBOOK))


# --- q5: the crossover width ---------------------------------------------------------------------

crossover_width = timing.crossover   # the rule the episode states; exercise 5 asks for it


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
        raise Wrong(error_message(what, exc) + extra) from None
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
              hint=("If the GPU is faster at one width and slower again at a wider one, has it crossed over "
                    "yet? And what should the answer be on a machine with no GPU times at all?",
                    "Deal with the missing GPU first. Then walk through the widths in order and, at each one, "
                    "ask whether the GPU is strictly faster at this width and at every wider one; the first "
                    "width where that holds is the answer, and if none does, there is no crossover."),
              solution=solution_link(NOTEBOOK))

__all__ = ["q1", "q2", "q3", "q4", "q5", "crossover_width", "DeviceMismatch"]
