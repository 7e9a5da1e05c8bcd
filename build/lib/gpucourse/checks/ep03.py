"""Checks for episode 3, "A PyTorch classifier on the GPU".

``q1`` standardise with training-set statistics · ``q2`` model and batch on the
device · ``q3`` bring ``prob`` and ``loss`` back for scikit-learn · ``q4`` time
one epoch correctly · ``q5`` predict, then measure, the crossover width.
"""

from __future__ import annotations

import numpy as np

from ..exercises import Exercise, Wrong, solution_link

NOTEBOOK = "03-pytorch-classifier.ipynb"


def selected_device():
    """The device the course selects: the first CUDA GPU if there is one, else the CPU."""
    import torch

    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def _same_device(a, b) -> bool:
    import torch

    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def _describe(value) -> str:
    """Type, and shape/device where it has them, for messages."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"a torch.Tensor of shape {tuple(value.shape)} on {value.device}"
    if isinstance(value, np.ndarray):
        return f"a NumPy array of shape {value.shape}"
    return f"{type(value).__name__} {value!r}"[:120]


def _as_numpy(name: str, value) -> np.ndarray:
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise Wrong(f"{name} should be an array of numbers, got {_describe(value)}.") from None


def _cpu_note() -> str:
    import torch

    if torch.cuda.is_available():
        return ""
    return (" (There is no GPU here, so the selected device is the CPU; on a GPU runtime the same "
            "code puts everything on cuda:0.)")


# --- q1: standardise with training-set statistics --------------------------------

def _check_standardise(mean, std, X_train, X_test):
    X_train = np.asarray(X_train, dtype=np.float64)
    X_test = np.asarray(X_test, dtype=np.float64)
    n_features = X_train.shape[1]
    stats = {}
    for name, value in (("mean", mean), ("std", std)):
        arr = _as_numpy(name, value)
        if arr.shape != (n_features,):
            hint = (" That is a single number for the whole table: pass axis=0 to get one per column."
                    if arr.ndim == 0 else
                    " Did you take it along the wrong axis? axis=0 goes down the columns (over events)."
                    if arr.shape == (X_train.shape[0],) else "")
            raise Wrong(f"{name} has shape {arr.shape}; expected ({n_features},): one value per "
                        f"feature.{hint}")
        stats[name] = arr
    both = np.concatenate([X_train, X_test])
    if np.allclose(stats["mean"], X_test.mean(axis=0), rtol=1e-4, atol=1e-6) or (
            np.allclose(stats["mean"], both.mean(axis=0), rtol=1e-4, atol=1e-6)
            and not np.allclose(stats["mean"], X_train.mean(axis=0), rtol=1e-4, atol=1e-6)):
        raise Wrong("your mean uses test events. Compute mean and std from X_train_raw only, then apply "
                    "them to every split: otherwise information about the test set leaks into training.")
    if not np.allclose(stats["mean"], X_train.mean(axis=0), rtol=1e-4, atol=1e-5):
        worst = int(np.argmax(np.abs(stats["mean"] - X_train.mean(axis=0))))
        raise Wrong(f"mean[{worst}] is {stats['mean'][worst]:.4g} but the training-set mean of that "
                    f"feature is {X_train.mean(axis=0)[worst]:.4g}.")
    ok0 = np.allclose(stats["std"], X_train.std(axis=0), rtol=1e-3, atol=1e-6)
    ok1 = np.allclose(stats["std"], X_train.std(axis=0, ddof=1), rtol=1e-3, atol=1e-6)
    if not (ok0 or ok1):
        if np.allclose(stats["std"], X_train.var(axis=0), rtol=1e-3):
            raise Wrong("std is the variance; take its square root (or use .std(axis=0)).")
        raise Wrong("std does not match the per-feature standard deviation of X_train_raw.")
    return ("training-set statistics, one per feature; the same mean and std are applied to the "
            "validation and test sets, which stay unseen.")


q1 = Exercise("ep03.q1", _check_standardise,
              hint="X_train_raw.mean(axis=0) and X_train_raw.std(axis=0): axis=0 runs over events, "
                   "giving one number per feature.",
              solution=solution_link(NOTEBOOK))


# --- q2: model and batch on the device --------------------------------------------

def _check_device(device, model, xb):
    import torch
    from torch import nn

    expected = selected_device()
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise Wrong(f"{device!r} is not a device name; use torch.device(...).") from None
    if not isinstance(device, torch.device):
        raise Wrong(f"device should be a torch.device, got {_describe(device)}.")
    if not _same_device(device, expected):
        raise Wrong(f"device is {device}, but this machine's choice is {expected}: "
                    "torch.device('cuda' if torch.cuda.is_available() else 'cpu').")
    if not isinstance(model, nn.Module):
        raise Wrong(f"model should be the nn.Module (model.to(device) returns it), got {_describe(model)}.")
    params = list(model.parameters())
    if not params:
        raise Wrong("model has no parameters; pass the MLP itself.")
    wrong = {str(p.device) for p in params if not _same_device(p.device, expected)}
    if wrong:
        raise Wrong(f"your model's parameters are on {', '.join(sorted(wrong))}; the selected device "
                    f"is {expected}. Call model = model.to(device).")
    if not isinstance(xb, torch.Tensor):
        raise Wrong(f"xb should be a torch.Tensor, got {_describe(xb)}.")
    n_in = params[0].shape[1] if params[0].ndim == 2 else None
    if xb.ndim != 2 or (n_in is not None and xb.shape[1] != n_in):
        raise Wrong(f"xb has shape {tuple(xb.shape)}; expected (batch_size, {n_in}): one row per event, "
                    "one column per feature.")
    if not _same_device(xb.device, expected):
        raise Wrong(f"your tensor is on {xb.device}; the selected device is {expected}. Moving the model "
                    "does not move the data: also call xb = xb.to(device).")
    with torch.no_grad():
        out = model(xb)
    return f"model and batch both live on {expected}; model(xb) has shape {tuple(out.shape)}.{_cpu_note()}"


q2 = Exercise("ep03.q2", _check_device,
              hint="Three lines: device = torch.device(...); model = model.to(device); xb = xb.to(device). "
                   "The model and every tensor it meets must be on the same device.",
              solution=solution_link(NOTEBOOK))


# --- q3: prob and loss back on the CPU --------------------------------------------

def _check_back_to_cpu(prob, loss, prob_device, loss_device, prob_np, loss_value):
    import torch

    for name, answer, tensor in (("prob_device", prob_device, prob), ("loss_device", loss_device, loss)):
        try:
            same = _same_device(answer, tensor.device)
        except (RuntimeError, TypeError):
            raise Wrong(f"{name} should be a device such as {tensor.device}, got {_describe(answer)}.") from None
        if not same:
            raise Wrong(f"{name} is {answer}, but {name.split('_')[0]} lives on {tensor.device}. "
                        f"Every tensor knows: ask it with .device.")
    if isinstance(prob_np, torch.Tensor):
        raise Wrong(f"prob_np is still {_describe(prob_np)} (requires_grad={prob_np.requires_grad}); "
                    "scikit-learn needs a NumPy array on the CPU: prob.detach().cpu().numpy().")
    if not isinstance(prob_np, np.ndarray):
        raise Wrong(f"prob_np should be a NumPy array, got {_describe(prob_np)}.")
    expected = prob.detach().cpu().numpy().astype(np.float64).ravel()
    if prob_np.shape != expected.shape:
        raise Wrong(f"prob_np has shape {prob_np.shape}; expected ({expected.size},): one probability per "
                    "event, a 1-D array as scikit-learn's metrics want (use .ravel() or .squeeze(1)).")
    if not np.allclose(prob_np.astype(np.float64), expected, atol=1e-6):
        raise Wrong("prob_np has the right shape but different values from prob; convert prob itself.")
    if isinstance(loss_value, torch.Tensor):
        raise Wrong(f"loss_value is {_describe(loss_value)}; use loss.item() to get a plain Python float "
                    "(it copies the number to the CPU, waiting for the GPU if needed).")
    try:
        value = float(loss_value)
    except (TypeError, ValueError):
        raise Wrong(f"loss_value should be a number, got {_describe(loss_value)}.") from None
    if not np.isclose(value, loss.item(), rtol=1e-5, atol=1e-7):
        raise Wrong(f"loss_value is {value:.6g}, but loss holds {loss.item():.6g}.")
    return (f"prob and loss were on {prob.device}; .detach().cpu().numpy() and .item() bring them back "
            "for NumPy and scikit-learn.")


q3 = Exercise("ep03.q3", _check_back_to_cpu,
              hint="prob.device tells where a tensor lives. prob.detach() drops the gradient history, "
                   ".cpu() copies to host memory, .numpy() gives the array; loss.item() gives a float.",
              solution=solution_link(NOTEBOOK))


# --- q4: time one epoch correctly -----------------------------------------------------

def _check_timing(timing, epoch_fn, device):
    from ..timing import Timing, benchmark

    if isinstance(timing, (int, float)):
        raise Wrong(f"timing is the number {timing!r}; pass the Timing object that benchmark(...) "
                    "returns (it holds every repeat).")
    if not isinstance(timing, Timing):
        raise Wrong(f"timing should be the Timing returned by benchmark(...), got {_describe(timing)}.")
    if len(timing.times) < 3:
        raise Wrong(f"timing has {len(timing.times)} timed repeat(s); use repeats=3 or more, so that the "
                    "median ignores an unlucky run.")
    if not callable(epoch_fn):
        raise Wrong(f"epoch_fn should be the function you timed (one epoch, no arguments), "
                    f"got {_describe(epoch_fn)}.")
    reference = benchmark(epoch_fn, device, warmup=1, repeats=3).best
    if timing.median < 0.1 * reference:  # lenient: timings on a busy machine vary a lot
        raise Wrong(f"your median is {timing.median * 1e3:.3g} ms, but one epoch of epoch_fn takes about "
                    f"{reference * 1e3:.3g} ms when the clock waits for the device. Did you time the "
                    "same function, on the same device? On a GPU, reading the clock before "
                    "synchronising measures only the launch.")
    return (f"median {timing.median * 1e3:.3g} ms per epoch over {len(timing.times)} repeats, after a warm-up, "
            "waiting for the device before each clock reading.")


q4 = Exercise("ep03.q4", _check_timing,
              hint="timing = benchmark(epoch_fn, device, warmup=1, repeats=3): it warms up, "
                   "synchronises before reading the clock and keeps every repeat.",
              solution=solution_link(NOTEBOOK))


# --- q5: the crossover width --------------------------------------------------------------

def crossover_width(widths, cpu_times, gpu_times):
    """Smallest width from which the GPU epoch is faster for every wider network (None if never)."""
    if gpu_times is None:
        return None
    for i, width in enumerate(widths):
        if all(g < c for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return width
    return None


def _check_crossover(my_prediction, crossover, widths, cpu_times, gpu_times):
    if isinstance(my_prediction, bool) or not isinstance(my_prediction, (int, np.integer)) or my_prediction < 1:
        raise Wrong(f"my_prediction should be a width, a positive whole number such as 100 "
                    f"(make your guess before you look at the plot), got {_describe(my_prediction)}.")
    widths, cpu_times = list(widths), list(cpu_times)
    if len(cpu_times) != len(widths) or (gpu_times is not None and len(gpu_times) != len(widths)):
        n_gpu = "no" if gpu_times is None else len(gpu_times)
        raise Wrong(f"expected one time per width: {len(widths)} widths, {len(cpu_times)} CPU times, "
                    f"{n_gpu} GPU times.")
    expected = crossover_width(widths, cpu_times, gpu_times)
    if gpu_times is None:
        if crossover is not None:
            raise Wrong(f"there is no GPU here (gpu_times is None), so there is no crossover: set "
                        f"crossover = None, not {crossover!r}.")
        return (f"no GPU, no crossover. You predicted width {my_prediction}; run this notebook on a GPU "
                "runtime to test your prediction.")
    first_faster = next((w for w, c, g in zip(widths, cpu_times, gpu_times) if g < c), None)
    if crossover == expected or (crossover == first_faster and crossover is not None):
        if expected is None:
            return "the GPU never wins in this sweep, so crossover is None. Try wider networks or bigger batches."
        ratio = max(my_prediction, expected) / min(my_prediction, expected)
        verdict = "within a factor of 3: a good prediction" if ratio <= 3 else "more than 3× off: worth asking why"
        return f"the GPU wins from width {expected}. You predicted {my_prediction}, {verdict}."
    if expected is None:
        raise Wrong(f"the GPU is not faster at the widest networks here, so crossover should be None, "
                    f"not {crossover!r}.")
    raise Wrong(f"crossover is {crossover!r}, but the first width from which the GPU stays faster is "
                f"{expected} (compare gpu_times[i] < cpu_times[i] width by width).")


q5 = Exercise("ep03.q5", _check_crossover,
              hint="Walk through the widths in order; the crossover is the first width where gpu_times < "
                   "cpu_times and stays so for all wider networks. With no GPU it is None.",
              solution=solution_link(NOTEBOOK))

__all__ = ["q1", "q2", "q3", "q4", "q5", "selected_device", "crossover_width"]
