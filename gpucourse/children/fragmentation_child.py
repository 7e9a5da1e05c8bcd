"""Fragmentation of PyTorch's CUDA caching allocator, in a fresh process (episode 6, *Going further*).

``PYTORCH_CUDA_ALLOC_CONF`` is read when CUDA starts, so each setting needs a new process::

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python -m gpucourse.children.fragmentation_child

With a budget of 1.5 GiB, :func:`fragment_then_ask` frees a 1 GiB tensor (on a GPU its segment
stays cached), cuts sixteen 64 MiB tensors from it, frees every other one, and asks for 640 MiB:
less than the free part of the budget, but larger than any hole. Episode 6 writes that function
out in a cell and runs it in the notebook too (``tests/test_taught_ep06.py`` keeps the two equal).
The child prints one line of JSON: allocated and reserved bytes before the request, whether it
fitted, and whether the setting took effect; ``describe()`` says it in one line. It needs a GPU.
"""

from __future__ import annotations

import json
import os
import re
import sys

from gpucourse.memory import MIB, CudaMeter, format_bytes


def fragment_then_ask(dev, meter):
    """Free 1 GiB, cut sixteen 64 MiB tensors from it, free every other one, then ask for
    640 MiB: less than is free, more than any hole. ``meter`` reads the memory held."""
    import torch

    block = torch.empty(1024 * MIB, dtype=torch.uint8, device=dev)
    del block                                    # 1 GiB, cached by a GPU's allocator
    tensors = [torch.empty(64 * MIB, dtype=torch.uint8, device=dev) for _ in range(16)]
    kept = tensors[::2]                          # eight stay; eight 64 MiB holes between them
    del tensors
    report = {"allocated": meter.allocated(), "reserved": meter.reserved()}
    try:
        torch.empty(640 * MIB, dtype=torch.uint8, device=dev)
        report["640 MiB"] = "fits"
    except torch.OutOfMemoryError as exc:
        report["640 MiB"] = f"out of memory: {exc}"
    return report


def _oom_figures(message: str) -> str:
    """The figures of PyTorch's out-of-memory message (request, capacity, allowed, reserved), not its advice."""
    return message.removeprefix("CUDA out of memory. ").split(" If reserved")[0].split(" See documentation")[0].strip()


def describe(report: dict) -> str:
    """One line: what was held before the request, and whether the 640 MiB fitted (with the
    error's own figure of reserved but unallocated memory when it did not)."""
    line = (f"{format_bytes(report['allocated'])} allocated, {format_bytes(report['reserved'])} "
            f"reserved; 640 MiB: ")
    outcome = report["640 MiB"]
    if outcome == "fits":
        line += "fits"
    else:
        unused = re.search(r"[\d.]+ [KMG]?i?B is reserved by PyTorch but unallocated", outcome)
        line += "out of memory" + (f" ({unused.group(0).strip()})" if unused else "")
    if "expandable_segments" in report:
        line += f"; expandable_segments: {report['expandable_segments']}"
    return line


def main() -> dict:
    import torch

    assert torch.cuda.is_available(), "this script shows the CUDA allocator: it needs a GPU"
    dev = torch.device("cuda", 0)                    # set_per_process_memory_fraction needs the index
    torch.cuda.set_per_process_memory_fraction(1536 * MIB / torch.cuda.get_device_properties(dev).total_memory, dev)
    report = fragment_then_ask(dev, CudaMeter(dev))
    try:                                                            # did the setting take effect?
        report["expandable_segments"] = torch.cuda.memory._snapshot()["allocator_settings"]["expandable_segments"]
    except (KeyError, TypeError, AttributeError, RuntimeError):
        report["expandable_segments"] = "unknown (not in this version's snapshot)"
    print(json.dumps(report))
    return report


def run(setting="", timeout=300):
    """Run this module in a fresh process with ``PYTORCH_CUDA_ALLOC_CONF=setting`` ('' for the default)."""
    from gpucourse.memory import run_child

    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}
    if setting:   # the older name, which every PyTorch 2 reads (some newer ones warn)
        env["PYTORCH_CUDA_ALLOC_CONF"] = setting
    return run_child([sys.executable, "-m", "gpucourse.children.fragmentation_child"], env=env, timeout=timeout)


if __name__ == "__main__":
    main()
