"""Checks for the exercises of episode 2, "Finding and choosing your GPU".

* ``q1`` — ``pick_device(need_gib)``: the first GPU with enough memory, else the CPU; run on
  simulated machines (the check replaces ``torch.cuda``'s queries for a moment).
* ``q2`` — ``to_device(batch, device)``: move every tensor of a nested batch, keep the rest.
* ``q3`` — ``freest_gpu(text)``: the GPU with most free memory, from ``nvidia-smi`` output of
  several servers (mixed sizes, and a listing of some GPUs only).
* ``q4`` — ``physical_gpu(visible, index, gpus_in_machine)``: which physical GPU a program's
  ``cuda:<index>`` is, for several values of ``CUDA_VISIBLE_DEVICES`` (with
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so that CUDA and nvidia-smi number the GPUs alike).

Each check calls the learner's function on several cases, so that a constant, or an answer
right for one case only, cannot pass. None of them needs a GPU.
"""

from __future__ import annotations

import contextlib
import numbers
import types
from unittest import mock

from .diagnosis import best_fit
from ..exercises import Exercise, NotDone, Wrong, is_blank, require_function, solution_link
from ..exercises import call_answer as _call

SOLUTION = solution_link("02-finding-your-gpu.ipynb")
GIB = 2**30




# --- q1: a GPU big enough for the model ----------------------------------------

#: (name, total_memory in bytes) as torch.cuda.get_device_properties reports them.
T4 = ("Tesla T4", 15_828_320_256)                        # "16 GB" on the box: 14.7 GiB
L4 = ("NVIDIA L4", 23_580_639_232)                       # 22.0 GiB
RTX4090 = ("NVIDIA GeForce RTX 4090", 25_393_692_672)    # 25.4 GB, but 23.6 GiB
A100_40 = ("NVIDIA A100-SXM4-40GB", 42_505_273_344)      # 39.6 GiB
A100_80 = ("NVIDIA A100 80GB PCIe", 85_100_249_088)      # 79.3 GiB
EXACT_8 = ("Simulated GPU with exactly 8 GiB", 8 * GIB)
#: An L4 another job is using: 12.0 GiB free of 22.0 (a third item, bytes in use; 0 when absent), so
#: that total memory, which the exercise asks for, and free memory (mem_get_info) differ.
L4_BUSY = ("NVIDIA L4", 23_580_639_232, 10 * GIB)

#: (what the machine is, its GPUs, need_gib, expected device).
Q1_CASES = [
    ("a laptop", [], 2, "cpu"),
    ("Colab", [T4], 4, "cuda:0"),
    ("Colab", [T4], 20, "cpu"),
    ("a workstation", [RTX4090, A100_40], 24, "cuda:1"),
    ("a shared server", [T4, T4, A100_80, L4], 20, "cuda:2"),
    ("a server", [L4_BUSY, A100_80], 16, "cuda:0"),
    ("a test rig", [EXACT_8, T4], 8, "cuda:0"),
    ("a server", [T4, A100_40], 0.5, "cuda:0"),
]


def _gpu_index(device, count: int) -> int:
    """The index torch would use for ``device`` (int, 'cuda:1', torch.device, None)."""
    import torch

    if device is None:
        index = 0
    elif isinstance(device, numbers.Integral) and not isinstance(device, bool):
        index = int(device)
    elif isinstance(device, (str, torch.device)):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        index = 0 if device.index is None else device.index
    else:
        raise TypeError(f"invalid device {device!r}")
    if not 0 <= index < count:
        raise AssertionError("Invalid device id")  # what torch raises for a GPU that is not there
    return index


@contextlib.contextmanager
def _simulated_machine(gpus):
    """Make ``torch.cuda`` report ``gpus`` (name, bytes) for a moment, and no Apple GPU."""
    import torch

    count = len(gpus)

    def properties(device=None):
        name, total = gpus[_gpu_index(device, count)][:2]
        return types.SimpleNamespace(name=name, total_memory=total, major=8, minor=0,
                                     multi_processor_count=80, is_integrated=False)

    def name(device=None):
        return gpus[_gpu_index(device, count)][0]

    def mem_get_info(device=None):
        gpu = gpus[_gpu_index(device, count)]
        return gpu[1] - _in_use(gpu), gpu[1]       # (free, total), as torch returns them

    def no_gpu(*args, **kwargs):
        raise RuntimeError("the check simulates this machine: only torch.cuda.is_available, device_count, "
                           "get_device_properties, get_device_name and mem_get_info are available")

    patches = [
        mock.patch.object(torch.cuda, "is_available", lambda: count > 0),
        mock.patch.object(torch.cuda, "device_count", lambda: count),
        mock.patch.object(torch.cuda, "get_device_properties", properties),
        mock.patch.object(torch.cuda, "get_device_name", name),
        mock.patch.object(torch.cuda, "mem_get_info", mem_get_info),
        mock.patch.object(torch.cuda, "set_device", no_gpu),
        mock.patch.object(torch.backends.mps, "is_available", lambda: False),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield


def _in_use(gpu) -> int:
    """Bytes another job uses on a simulated GPU (name, total[, in use])."""
    return gpu[2] if len(gpu) > 2 else 0


def _describe(gpus) -> str:
    if not gpus:
        return "no GPU"
    return "; ".join(f"cuda:{i} = {gpu[0]}, {gpu[1] / GIB:.1f} GiB"
                     + (f" ({_in_use(gpu) / GIB:.1f} GiB in use by another job)" if _in_use(gpu) else "")
                     for i, gpu in enumerate(gpus))


def _pick(gpus, need, *, size=lambda total: total / GIB, fits=lambda have, need: have >= need,
          order="first", free=False):
    """The device a rule picks: by default the right one, otherwise a plausible mistake's."""
    fitting = [i for i, gpu in enumerate(gpus)
               if fits(size(gpu[1] - (_in_use(gpu) if free else 0)), need)]
    if not fitting:
        return "cpu"
    if order == "biggest":
        return f"cuda:{max(fitting, key=lambda i: gpus[i][1])}"
    return f"cuda:{fitting[-1] if order == 'last' else fitting[0]}"


def _as_device(value, call: str):
    import torch

    if isinstance(value, str):
        raise Wrong(f"{call} returned the string {value!r}; return a torch.device, "
                    f"e.g. torch.device({value!r}).")
    if not isinstance(value, torch.device):
        raise Wrong(f"{call} returned {type(value).__name__} {value!r}; return a torch.device "
                    "such as torch.device('cuda:1') or torch.device('cpu').")
    if value.type == "cuda" and value.index is None:
        raise Wrong(f"{call} returned torch.device('cuda') without an index, which means the current "
                    "GPU, cuda:0; return torch.device(f'cuda:{i}') for the GPU you chose.")
    return value


#: The rules behind wrong picks of a GPU that has enough memory, as arguments of ``_pick``.
PICK_MISTAKES = {
    "gb": dict(size=lambda total: total / 1e9),
    "free": dict(free=True),
    "strict": dict(fits=lambda have, need: have > need),
    "biggest": dict(order="biggest"),
    "last": dict(order="last"),
}


def _free_memory_message(gpus) -> str:
    busy = next(i for i, gpu in enumerate(gpus) if _in_use(gpu))
    return (f"cuda:{busy} has {gpus[busy][1] / GIB:.1f} GiB in total, of which "
            f"{(gpus[busy][1] - _in_use(gpus[busy])) / GIB:.1f} GiB are free now. Did you compare the "
            "free memory (torch.cuda.mem_get_info)? The exercise asks for the GPU's total memory, "
            "get_device_properties(i).total_memory: what fits a model on an empty GPU, not what "
            "another job leaves today.")


def _pick_mistake(gpus, need, got: str, expected: str, prefer: str | None = None) -> str:
    """Why ``got`` is wrong for ``need`` GiB on ``gpus``; ``prefer``, a key of ``PICK_MISTAKES``, is
    the rule that explains most of the answer's wrong picks (two rules can pick alike on one case)."""
    count = len(gpus)
    if got.startswith("cuda:"):
        index = int(got.split(":")[1])
        if index >= count:
            return (f"There is no {got} on this machine: it has {count} GPU(s), cuda:0 … cuda:{count - 1}."
                    if count else f"There is no {got}: this machine has no GPU.")
    if got.startswith("mps"):
        return "This machine has no Apple GPU (torch.backends.mps.is_available() is False)."
    if got == "cpu":
        return (f"{expected} has {gpus[int(expected[5:])][1] / GIB:.1f} GiB, enough for {need} GiB. Did you "
                "ask torch.cuda.device_count() and torch.cuda.get_device_properties(i) inside the function "
                "(written as torch.cuda.…, which is what the check simulates)?")
    index = int(got[5:])
    have = gpus[index][1] / GIB
    if have < need:
        if got == _pick(gpus, need, size=lambda total: total / 1e9):
            return (f"{gpus[index][0]} has {gpus[index][1] / 1e9:.1f} GB but only {have:.1f} GiB. Did you "
                    "divide by 1e9? total_memory is in bytes, and 1 GiB = 2**30 bytes.")
        return (f"{got} has only {have:.1f} GiB, less than the {need} GiB the model needs. Did you check "
                "each GPU's memory, torch.cuda.get_device_properties(i).total_memory? It is in bytes: "
                "divide it by 2**30 before comparing it with need_gib.")
    messages = {
        "free": lambda: _free_memory_message(gpus),
        "strict": lambda: (f"{expected} has exactly {need} GiB, which is enough for a model that needs "
                           f"{need} GiB: use >=, not >."),
        "biggest": lambda: (f"{expected} already has enough memory; return the lowest-numbered GPU that "
                            "fits, not the biggest."),
        "last": lambda: (f"{expected} already has enough memory; return the first GPU that fits (stop "
                         "looking when you find one), not the last."),
    }
    order = ([prefer] if prefer in messages else []) + list(messages)
    for rule in order:
        if got == _pick(gpus, need, **PICK_MISTAKES[rule]) != expected:
            return messages[rule]()
    return f"Return the lowest-numbered GPU with at least {need} GiB."


def _check_pick_device(pick_device):
    require_function(pick_device, "pick_device")
    answers = []
    for machine, gpus, need, expected in Q1_CASES:
        call = f"On {machine} ({_describe(gpus)}), pick_device({need})"
        with _simulated_machine(gpus):
            got = _as_device(_call(pick_device, need, what=call), call)
        if got.type not in ("cuda", "cpu", "mps"):
            raise Wrong(f"{call} returned {got}; expected {expected}. Return a GPU, cuda:<i>, or the CPU.")
        answers.append((call, got, "cpu" if got.type == "cpu" else str(got)))
    wrong = [(case, answer) for case, answer in zip(Q1_CASES, answers) if answer[2] != case[3]]
    if wrong:
        fit = best_fit(wrong, answer_of=lambda item: item[1][2],
                       candidates_of=lambda item: {rule: _pick(item[0][1], item[0][2], **kw)
                                                   for rule, kw in PICK_MISTAKES.items()},
                       same=lambda got, value: got == value)
        prefer = fit[0] if fit and fit[1] == fit[2] else None      # only a rule that explains them all
        # report a case the preferred rule explains, else the first wrong one
        shown = next((w for w in wrong if prefer and w[1][2] == _pick(w[0][1], w[0][2],
                                                                      **PICK_MISTAKES[prefer])), wrong[0])
        (machine, gpus, need, expected), (call, got, picked) = shown
        raise Wrong(f"{call} returned {got}; expected {expected}. "
                    + _pick_mistake(gpus, need, picked, expected, prefer))
    return ("it picks the first GPU with enough memory, and the CPU when none has enough, on "
            f"{len(Q1_CASES)} simulated machines. Note the T4: '16 GB' on the box, 14.7 GiB to PyTorch.")


q1 = Exercise(
    "ep02.q1", _check_pick_device,
    hint=("In which order should the GPUs be tried, and in which unit does PyTorch report a GPU's total memory, "
          "compared with the unit of need_gib?",
          "Go through the GPU numbers from 0 up to the count PyTorch reports; turn each GPU's total memory from "
          "bytes into GiB (2³⁰ bytes each, not 10⁹) and stop at the first that has at least need_gib. If none "
          "has, the answer is the CPU."),
    solution=SOLUTION,
)


# --- q2: to_device -----------------------------------------------------------

def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_to_device(to_device):
    import torch

    require_function(to_device, "to_device")
    # The meta device exists on every machine, so the check runs anywhere. Only moves happen
    # on it here, never a computation.
    target = torch.device("meta")
    x, y = torch.randn(4, 3), torch.arange(4)

    def moved(got, original, where):
        if is_blank(got):
            raise NotDone(f"{where} is still ____.")
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"{where} is {type(got).__name__} {_short(got)}, expected a tensor: move the tensor "
                        "with .to(device).")
        if got.device != target:
            nested = ("" if got.device != original.device or where.count("[") < 2 else
                      " This tensor is nested inside a container inside the batch: call to_device on each "
                      "element of a container (recursion), whatever it is.")
            if got.device.type == "cuda":
                nested = " Did you call .cuda()? Use .to(device), so that the device the caller gives is used."
            raise Wrong(f"{where} is on {got.device}; the target device is {target}. "
                        f"Call .to(device) on every tensor in the batch, with the device you were given.{nested}")
        if got.shape != original.shape or got.dtype != original.dtype:
            raise Wrong(f"{where} changed from {original.dtype} {tuple(original.shape)} to {got.dtype} "
                        f"{tuple(got.shape)}; moving must not change shapes or dtypes: use .to(device) only.")

    def call(batch, what):
        try:
            return _call(to_device, batch, target, what=what)
        except Wrong as exc:
            if any(word in str(exc) for word in ("CUDA", "cuda", "NVIDIA")):
                raise Wrong(f"{exc} Did you call .cuda()? Use .to(device), so that the device the caller "
                            "gives is used.") from None
            if "RecursionError" in str(exc):
                raise Wrong(f"{exc} A string is a sequence of strings, so treating every sequence as a "
                            "container never ends: test for tuple, list and dict explicitly.") from None
            if "has no attribute 'to'" in str(exc):
                raise Wrong(f"{exc} Leave things that are not tensors, containers or dicts as they are.") from None
            raise

    single = call(x, "to_device(tensor, device)")
    moved(single, x, "to_device(tensor, device)")

    pair = call((x, y), "to_device((features, labels), device)")
    if not isinstance(pair, tuple) or len(pair) != 2:
        raise Wrong(f"to_device((features, labels), device) returned {type(pair).__name__}; keep the "
                    "container: a tuple of 2 tensors in, a tuple of 2 tensors out.")
    for i, t in enumerate(pair):
        moved(t, (x, y)[i], f"element {i} of the tuple")

    as_list = call([y, x, y], "to_device([t0, t1, t2], device)")
    if not isinstance(as_list, list) or len(as_list) != 3:
        raise Wrong(f"to_device(list of 3 tensors, device) returned {type(as_list).__name__}; a list of 3 "
                    "tensors in, a list of 3 tensors out.")
    for i, t in enumerate(as_list):
        moved(t, [y, x, y][i], f"element {i} of the list")

    batch = {"features": x, "labels": [y, y], "extra": {"mask": (y > 1,)},
             "paths": ["a.png", "b.png"], "epoch": 3, "note": None}
    named = call(batch, "to_device(dict, device)")
    if not isinstance(named, dict) or set(named) != set(batch):
        keys = sorted(named) if isinstance(named, dict) else type(named).__name__
        raise Wrong(f"to_device(dict, device) returned {keys}; return a dict with the same keys "
                    f"{sorted(batch)}.")
    moved(named["features"], x, "batch['features']")
    if not isinstance(named["labels"], list) or len(named["labels"]) != 2:
        raise Wrong(f"batch['labels'] was a list of 2 tensors and came back as "
                    f"{type(named['labels']).__name__}: handle lists inside dicts too (call to_device "
                    "on each value: recursion).")
    for i, t in enumerate(named["labels"]):
        moved(t, y, f"batch['labels'][{i}]")
    inner = named["extra"]
    if not isinstance(inner, dict) or not isinstance(inner.get("mask"), tuple) or len(inner["mask"]) != 1:
        raise Wrong(f"batch['extra'] was {{'mask': (tensor,)}} and came back as {_short(inner)}: handle "
                    "any nesting by calling to_device on each element (recursion).")
    moved(inner["mask"][0], y > 1, "batch['extra']['mask'][0]")
    for key in ("paths", "epoch", "note"):
        if type(named[key]) is not type(batch[key]) or named[key] != batch[key]:
            raise Wrong(f"batch[{key!r}] was {batch[key]!r} and came back as {_short(named[key])}: leave "
                        "anything that is not a tensor as it is.")
    return "tensors, tuples, lists and dicts (nested too) arrive on the device; everything else is untouched."


q2 = Exercise(
    "ep02.q2", _check_to_device,
    hint=("Which kinds of thing can a batch hold, and what should happen to each? And what is an element of a "
          "tuple, if not a smaller batch?",
          "Decide by type. A tensor is moved to the device. A tuple or a list is rebuilt as the same type from "
          "its moved elements, and a dict with the same keys and moved values, where moving an element is the "
          "same problem again (your function calls itself). Anything else comes back unchanged."),
    solution=SOLUTION,
)


# --- q3: choose the GPU with most free memory --------------------------------

SHARED_SERVER = """\
0, NVIDIA A100-SXM4-40GB, 38012, 40960
1, NVIDIA A100-SXM4-40GB, 1204, 40960
2, NVIDIA A100-SXM4-40GB, 20480, 40960
3, NVIDIA A100-SXM4-40GB, 40101, 40960
"""

#: A big GPU in use beside small idle ones: least used (1) and least fraction used (2) are not
#: most free (0).
MIXED_SERVER = """\
0, NVIDIA A100 80GB PCIe, 20000, 81920
1, Tesla T4, 1000, 15360
2, NVIDIA L4, 1200, 23034
"""

#: ``nvidia-smi -i 3,7,12 ...``: only some GPUs, so line numbers are not indices, and the
#: freest has a two-digit index.
SOME_GPUS = """\
3, NVIDIA H100 80GB HBM3, 60000, 81559
7, NVIDIA H100 80GB HBM3, 70000, 81559
12, NVIDIA H100 80GB HBM3, 5000, 81559
"""

#: A T4 server whose freest GPU is the last one.
T4_SERVER = """\
0, Tesla T4, 9000, 15360
1, Tesla T4, 12000, 15360
2, Tesla T4, 14500, 15360
3, Tesla T4, 300, 15360
"""

Q3_SERVERS = [
    ("the 4-GPU server shown above", SHARED_SERVER),
    ("a server with mixed GPUs", MIXED_SERVER),
    ("`nvidia-smi -i 3,7,12` on a 16-GPU server", SOME_GPUS),
    ("a server of T4s", T4_SERVER),
]


def _rows(text):
    rows = []
    for line in text.strip().splitlines():
        index, name, used, total = (part.strip() for part in line.split(","))
        rows.append({"index": int(index), "raw_index": index, "name": name, "used": int(used),
                     "total": int(total), "free": int(total) - int(used)})
    return rows


def _freest_mistake(rows, got: int, best) -> str:
    by = {r["index"]: r for r in rows}
    positions = {i: r for i, r in enumerate(rows)}
    if any(got in (r["free"], r["used"], r["total"]) for r in rows) and got not in by:
        return (f"{got} is an amount of memory in MiB, not a GPU: return the index written at the start "
                "of the line with the most free memory.")
    if got in by:
        chosen = by[got]
        compare = f"GPU {got} has {chosen['free']} MiB free, GPU {best['index']} has {best['free']} MiB"
        if got == min(rows, key=lambda r: r["used"] / r["total"])["index"]:
            return (f"GPU {got} has the smallest *fraction* of its memory used "
                    f"({chosen['used'] / chosen['total']:.0%}), but a fraction ignores how big a GPU is: "
                    f"{compare}. Did you divide used by total? The question is the most memory free: "
                    "total − used.")
        if got == min(rows, key=lambda r: r["used"])["index"]:
            return (f"GPU {got} has the least memory *used*, but it is smaller: {compare}. "
                    "Did you compare memory.used? The question is the most memory free: total − used.")
        if got == min(rows, key=lambda r: r["free"])["index"] or got == max(rows, key=lambda r: r["used"])["index"]:
            return f"{compare}: you chose the busiest GPU. Did you take min instead of max, or sort the wrong way?"
        if got == max(rows, key=lambda r: r["total"])["index"] and got != best["index"]:
            return f"{compare}. Did you compare memory.total only? Free memory is total − used."
    if got in positions and positions[got]["index"] != got and positions[got] is best:
        return (f"GPU {best['index']} is on line {got} of the output (counting from 0): return the GPU's "
                "index, the first field of its line, not its position. `nvidia-smi -i` lists only the "
                "GPUs asked for.")
    if any(r["raw_index"].startswith(str(got)) and r["raw_index"] != str(got) for r in rows):
        return (f"there is no GPU {got}; did you read only the first character of the index "
                f"'{best['raw_index']}'? Split the line at the commas.")
    if got not in by:
        return (f"there is no GPU {got} in this output; its GPUs are "
                f"{', '.join(str(r['index']) for r in rows)}.")
    return f"the GPU with most free memory (total − used) is GPU {best['index']}, with {best['free']} MiB."


def _check_freest_gpu(freest_gpu):
    require_function(freest_gpu, "freest_gpu")
    answers = []
    for where, text in Q3_SERVERS:
        what = f"freest_gpu(text) on {where}"
        try:
            got = _call(freest_gpu, text, what=what)
        except Wrong as exc:
            if "IndexError" in str(exc) or "ValueError" in str(exc):
                raise Wrong(f"{exc} The text ends with a newline, so splitting it at '\\n' gives an empty "
                            "last line: text.strip().splitlines() gives only the GPU lines. Each line has four "
                            "fields, separated by commas.") from None
            raise
        if isinstance(got, str):
            raise Wrong(f"{what} returned the string {got!r}; return the GPU index as an int: "
                        "convert it with int(...).")
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            raise Wrong(f"{what} returned {type(got).__name__} {got!r}; return the GPU index as an int "
                        "(the first field of the line), not the line, its memory or its name.")
        answers.append(int(got))
    expected = [max(_rows(text), key=lambda r: r["free"])["index"] for _, text in Q3_SERVERS]
    if len(set(answers)) == 1 and answers != expected:
        raise Wrong(f"freest_gpu returned {answers[0]} for each of the {len(answers)} servers, whose freest "
                    f"GPUs are {', '.join(map(str, expected))}: compute the answer from the text, "
                    "do not type it in.")
    for (where, text), got in zip(Q3_SERVERS, answers):
        rows = _rows(text)
        best = max(rows, key=lambda r: r["free"])
        if got != best["index"]:
            table = "\n    ".join(text.strip().splitlines())
            why = _freest_mistake(rows, got, best)
            raise Wrong(f"freest_gpu(text) on {where} returned {got}; expected {best['index']}. The output "
                        f"was\n    {table}\n{why[0].upper()}{why[1:]}")
    return ("on each server it finds the most free memory, total − used: on the mixed one the big A100, "
            "though busier, has more room than an idle T4.")


q3 = Exercise(
    "ep02.q3", _check_freest_gpu,
    hint=("What is a GPU's free memory, from the columns nvidia-smi gives? And which GPU number should you "
          "report: the one written on the line, or the line's position in the output?",
          "Split each non-empty line at the commas and strip the spaces; turn the numbers into integers. Free "
          "memory is total minus used. Keep the index written on the line with the most free memory."),
    solution=SOLUTION,
)


# --- q4: CUDA_VISIBLE_DEVICES -------------------------------------------------

#: (CUDA_VISIBLE_DEVICES or None when not set, index in the program, GPUs in the machine, answer).
#: Cases with an int answer come first, so that a function returning None is "not done".
Q4_CASES = [
    ("2,3", 0, 4, 2),
    ("2,3", 1, 4, 3),
    (None, 1, 4, 1),
    ("3,1", 0, 4, 3),
    ("3,1", 1, 4, 1),
    ("1", 0, 2, 1),
    ("0,2,-1,1", 1, 4, 2),
    ("2,3", 2, 4, None),
    ("", 0, 4, None),
    (None, 4, 4, None),
    ("0,2,-1,1", 2, 4, None),
    ("1,4,0", 1, 4, None),
    ("5,0", 0, 4, None),
]


def _listed(visible):
    return [int(item) for item in visible.split(",") if item.strip()] if visible else []


def _visible_mistake(visible, index, gpus, got) -> str:
    env = "CUDA_VISIBLE_DEVICES is not set" if visible is None else f"CUDA_VISIBLE_DEVICES={visible!r}"
    listed = _listed(visible)
    if visible is None:
        if got is None:
            return (f"When {env}, the program sees every GPU, numbered as nvidia-smi numbers them: "
                    f"cuda:{index} is physical GPU {index}.")
        return (f"When {env}, the program sees all {gpus} GPUs, cuda:0 … cuda:{gpus - 1}; there is "
                f"no cuda:{index}: return None.")
    if visible == "":
        return "An empty CUDA_VISIBLE_DEVICES hides every GPU: the program has no cuda:0, so return None."
    invalid = [g for g in listed if not 0 <= g < gpus]
    if invalid:
        cut = listed[: listed.index(invalid[0])]
        seen = ("no GPU at all" if not cut else f"physical GPU {cut[0]} only" if len(cut) == 1
                else f"physical GPUs {', '.join(map(str, cut[:-1]))} and {cut[-1]} only")
        return (f"{invalid[0]} is not a GPU of this {gpus}-GPU machine (nvidia-smi numbers them 0 … {gpus - 1}), "
                f"and CUDA stops reading the list at the first entry that is not a GPU: the program sees "
                f"{seen}.")
    if got is None:
        return (f"With {env} the program sees {len(listed)} GPU(s), so cuda:{index} exists: "
                f"it is the entry at position {index} of the list.")
    if index >= len(listed):
        return (f"With {env} the program sees only {len(listed)} GPU(s), cuda:0 … cuda:{len(listed) - 1}: "
                f"there is no cuda:{index}, so return None.")
    if got == index:
        return (f"cuda:{index} is physical GPU {index} only when CUDA_VISIBLE_DEVICES is not set. The program "
                "sees only the GPUs listed, renumbered from 0 in the order listed.")
    if got == sorted(listed)[index]:
        return (f"The GPUs are numbered in the order they are listed, not sorted: with {visible!r}, cuda:0 is "
                f"physical GPU {listed[0]}.")
    if got in (listed[index - 1] if index > 0 else None, listed[index + 1] if index + 1 < len(listed) else None):
        return f"Off by one: cuda:{index} is entry {index} of the list, counting from 0."
    return "The program sees only the GPUs listed, renumbered from 0 in the order listed."


def _physical_gpu_answer(physical_gpu, visible, index, gpus, expected, what):
    """The learner's answer for one case, an int or None; ``Wrong`` for errors and wrong types."""
    try:
        got = _call(physical_gpu, visible, index, gpus, what=what, none_ok=True)
    except Wrong as exc:
        if expected is None:
            raise Wrong(f"{exc} {_visible_mistake(visible, index, gpus, 0)} Return None "
                        "instead of failing.") from None
        raise
    if got is None:
        return None
    if isinstance(got, str):
        raise Wrong(f"{what} returned the string {got!r}; return nvidia-smi's index as an int: "
                    "convert it with int(...).")
    if isinstance(got, bool) or not isinstance(got, numbers.Integral):
        raise Wrong(f"{what} returned {type(got).__name__} {got!r}; return nvidia-smi's index "
                    "as an int, or None.")
    return int(got)


def _check_physical_gpu(physical_gpu):
    require_function(physical_gpu, "physical_gpu")
    answers = []
    for visible, index, gpus, expected in Q4_CASES:
        what = f"physical_gpu({visible!r}, {index}, {gpus})"
        try:
            answers.append(_physical_gpu_answer(physical_gpu, visible, index, gpus, expected, what))
        except (Wrong, NotDone) as exc:
            answers.append(exc)
    if all(a is None for a in answers):
        raise NotDone("physical_gpu returned None in every case: did you forget `return`?")
    values = {a for a in answers if not isinstance(a, Exception)}
    if len(values) == 1 and not any(isinstance(a, Exception) for a in answers):
        raise Wrong(f"physical_gpu returned {values.pop()} in all {len(answers)} cases, whose answers differ: "
                    "compute it from the arguments, do not type it in.")
    for (visible, index, gpus, expected), got in zip(Q4_CASES, answers):
        if isinstance(got, Exception):
            raise got
        what = f"physical_gpu({visible!r}, {index}, {gpus})"
        if expected is None and got is not None and got < 0:
            raise Wrong(f"{what} returned {got}; when the program has no such GPU, return None, "
                        f"not {got}. " + _visible_mistake(visible, index, gpus, got))
        if got != expected:
            shown = "None" if expected is None else f"physical GPU {expected}"
            raise Wrong(f"{what} returned {got}; expected {shown}. "
                        + _visible_mistake(visible, index, gpus, got))
    return ("the program sees only the GPUs listed, renumbered from 0 in the order listed, up to the "
            "first entry that is not a GPU; nvidia-smi shows the machine's numbers (the same as CUDA's "
            "with CUDA_DEVICE_ORDER=PCI_BUS_ID).")


q4 = Exercise(
    "ep02.q4", _check_physical_gpu,
    hint=("Before you look for cuda:<index>, which physical GPUs does the program see, and in which order?",
          "First make the list of physical GPUs the program sees, in its order: all of them when the variable "
          "is not set, otherwise the numbers listed, up to the first that is not a GPU of the machine. "
          "cuda:<index> is the entry at that position of this list, if there is one."),
    solution=SOLUTION,
)

__all__ = ["q1", "q2", "q3", "q4", "SHARED_SERVER"]
