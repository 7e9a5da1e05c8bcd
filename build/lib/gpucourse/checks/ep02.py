"""Checks for the exercises of episode 2, "Finding and choosing your GPU"."""

from __future__ import annotations

import contextlib
from unittest import mock

from ..exercises import Exercise, Wrong, require_answer, solution_link

SOLUTION = solution_link("02-finding-your-gpu.ipynb")


# --- q1: pick_device ---------------------------------------------------------

@contextlib.contextmanager
def _simulated_gpus(count: int):
    """Make torch report ``count`` CUDA GPUs (and no Apple GPU) for a moment."""
    import torch

    with mock.patch.object(torch.cuda, "is_available", return_value=count > 0), \
            mock.patch.object(torch.cuda, "device_count", return_value=count), \
            mock.patch.object(torch.backends.mps, "is_available", return_value=False):
        yield


def _as_device(value, call: str):
    import torch

    require_answer(value, call)
    if isinstance(value, str):
        raise Wrong(f"{call} returned the string {value!r}; return a torch.device, "
                    f"e.g. torch.device({value!r}).")
    if not isinstance(value, torch.device):
        raise Wrong(f"{call} returned {type(value).__name__} {value!r}; return a torch.device.")
    if value.type == "cuda" and value.index is None:
        raise Wrong(f"{call} returned torch.device('cuda') without an index; return "
                    "torch.device(f'cuda:{index}') so that the caller's choice of GPU is honoured.")
    return value


def _check_pick_device(pick_device):
    if not callable(pick_device):
        raise Wrong(f"pass the function itself, pick_device, not {type(pick_device).__name__}.")
    cases = [(0, 0, "cpu"), (2, 0, "cuda:0"), (2, 1, "cuda:1"), (2, 2, "cpu"), (1, 5, "cpu")]
    for gpus, index, expected in cases:
        call = f"On a machine with {gpus} GPU(s), pick_device({index})"
        with _simulated_gpus(gpus):
            got = _as_device(pick_device(index), call)
        if str(got) != expected:
            why = (f" cuda:{index} does not exist there: fall back to the CPU when "
                   "index >= torch.cuda.device_count()." if expected == "cpu" and got.type == "cuda"
                   else " Ask torch.cuda.is_available() and torch.cuda.device_count() inside the function.")
            raise Wrong(f"{call} returned {got}; expected {expected}.{why}")
    return "it picks cuda:N when that GPU exists and the CPU otherwise (tested on simulated 0-, 1- and 2-GPU machines)."


q1 = Exercise(
    "ep02.q1", _check_pick_device,
    hint="torch.cuda.device_count() tells how many GPUs exist; valid indices are 0 … count-1. "
         "Build the result with torch.device(f'cuda:{index}') or torch.device('cpu').",
    solution=SOLUTION,
)


# --- q2: to_device -----------------------------------------------------------

def _check_to_device(to_device):
    import torch

    if not callable(to_device):
        raise Wrong(f"pass the function itself, to_device, not {type(to_device).__name__}.")
    target = torch.device("meta")  # exists on every machine, so the check runs anywhere
    x, y = torch.randn(4, 3), torch.arange(4)

    def on_target(t, where):
        if not isinstance(t, torch.Tensor):
            raise Wrong(f"{where} is {type(t).__name__}, expected a tensor.")
        if t.device != target:
            raise Wrong(f"{where} is on {t.device}; the target device is {target}. "
                        "Call .to(device) on every tensor in the batch.")
        return t

    single = require_answer(to_device(x, target), "to_device(tensor, device)")
    on_target(single, "to_device(tensor, device)")

    pair = to_device((x, y), target)
    if not isinstance(pair, tuple) or len(pair) != 2:
        raise Wrong(f"to_device((x, y), device) returned {type(pair).__name__}; keep the container: "
                    "a tuple of 2 tensors in, a tuple of 2 tensors out.")
    for i, t in enumerate(pair):
        on_target(t, f"element {i} of the tuple")
    if pair[0].shape != x.shape or pair[1].dtype != y.dtype:
        raise Wrong("moving must not change shapes or dtypes; use .to(device) only.")

    named = to_device({"features": x, "labels": [y, y]}, target)
    if not isinstance(named, dict) or set(named) != {"features", "labels"}:
        raise Wrong("to_device(dict, device) must return a dict with the same keys.")
    on_target(named["features"], "batch['features']")
    if not isinstance(named["labels"], list) or len(named["labels"]) != 2:
        raise Wrong("batch['labels'] was a list of 2 tensors and must stay one: handle lists (recursively).")
    for i, t in enumerate(named["labels"]):
        on_target(t, f"batch['labels'][{i}]")
    return "tensors, tuples, lists and dicts (nested too) all arrive on the device."


q2 = Exercise(
    "ep02.q2", _check_to_device,
    hint="Handle four cases with isinstance: torch.Tensor → t.to(device); tuple/list → the same type "
         "of the moved elements; dict → {key: moved value}. Call to_device on the elements (recursion).",
    solution=SOLUTION,
)


# --- q3: choose the GPU with most free memory --------------------------------

SHARED_SERVER = """\
0, NVIDIA A100-SXM4-40GB, 38012, 40960
1, NVIDIA A100-SXM4-40GB, 1204, 40960
2, NVIDIA A100-SXM4-40GB, 20480, 40960
3, NVIDIA A100-SXM4-40GB, 40101, 40960
"""

MIXED_SERVER = """\
0, Tesla T4, 900, 15360
1, NVIDIA A100 80GB PCIe, 4000, 81920
2, Tesla T4, 15000, 15360
"""


def _check_freest_gpu(freest_gpu):
    if not callable(freest_gpu):
        raise Wrong(f"pass the function itself, freest_gpu, not {type(freest_gpu).__name__}.")
    for text, expected, least_used in ((SHARED_SERVER, 1, 1), (MIXED_SERVER, 1, 0)):
        got = require_answer(freest_gpu(text), "freest_gpu(text)")
        if isinstance(got, str):
            raise Wrong(f"freest_gpu returned the string {got!r}; convert it with int(...).")
        if not isinstance(got, int):
            raise Wrong(f"freest_gpu returned {type(got).__name__} {got!r}; return the GPU index as an int.")
        if got != expected:
            if got == least_used:
                raise Wrong(f"on the server with mixed GPUs you chose GPU {got}, which has the least memory "
                            "*used*. The question is the most memory *free*: total − used.")
            raise Wrong(f"you chose GPU {got}; the one with most free memory (total − used) is GPU {expected}.")
    return "GPU 1 has the most free memory on both servers (on the mixed one, the big A100 beats an idle T4)."


q3 = Exercise(
    "ep02.q3", _check_freest_gpu,
    hint="For each line: index, name, used, total = [part.strip() for part in line.split(',')]; "
         "free = int(total) - int(used). Keep the index with the largest free memory.",
    solution=SOLUTION,
)


# --- q4: CUDA_VISIBLE_DEVICES -------------------------------------------------

def _check_visible(visible_count, physical_of_cuda0):
    for name, value in (("visible_count", visible_count), ("physical_of_cuda0", physical_of_cuda0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise Wrong(f"{name} should be an int, got {type(value).__name__} {value!r}.")
    if visible_count != 2:
        raise Wrong(f"visible_count is {visible_count}: CUDA_VISIBLE_DEVICES=2,3 lists two GPUs, "
                    "and the program sees only those.")
    if physical_of_cuda0 != 2:
        raise Wrong(f"physical_of_cuda0 is {physical_of_cuda0}: the visible GPUs are renumbered from 0 "
                    "in the order listed, so cuda:0 is the first one listed — physical GPU 2.")
    return "the program sees 2 GPUs, and its cuda:0 is physical GPU 2 (nvidia-smi's numbering)."


q4 = Exercise(
    "ep02.q4", _check_visible,
    hint="The variable is a list of physical GPU indices. The program sees only those, "
         "numbered 0, 1, … in the order given.",
    solution=SOLUTION,
)
