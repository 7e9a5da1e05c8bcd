"""Fragmentation of PyTorch's CUDA caching allocator, in a fresh process (episode 6, *Going further*).

``PYTORCH_CUDA_ALLOC_CONF`` is read when CUDA starts, so each setting needs a new process::

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python -m gpucourse.fragmentation_child

With a budget of 1.5 GiB, a 1 GiB tensor is freed (its segment stays cached), sixteen 64 MiB tensors
are cut from it, every other one is freed, and a 640 MiB tensor is requested: less than the free part
of the budget, but larger than any hole. It prints one line of JSON: allocated and reserved MiB before
the request, whether it fitted, and whether the setting took effect. It needs a GPU.
"""

from __future__ import annotations

import json
import os
import sys


def _oom_figures(message: str) -> str:
    """The figures of PyTorch's out-of-memory message (request, capacity, allowed, reserved), not its advice."""
    return message.removeprefix("CUDA out of memory. ").split(" If reserved")[0].split(" See documentation")[0].strip()


def main() -> dict:
    import torch

    assert torch.cuda.is_available(), "this script shows the CUDA allocator: it needs a GPU"
    dev, MiB = torch.device("cuda", 0), 2**20        # set_per_process_memory_fraction needs the index
    torch.cuda.set_per_process_memory_fraction(1536 * MiB / torch.cuda.get_device_properties(dev).total_memory, dev)
    block = torch.empty(1024 * MiB, dtype=torch.uint8, device=dev)
    del block                                                       # 1 GiB, now cached
    tensors = [torch.empty(64 * MiB, dtype=torch.uint8, device=dev) for _ in range(16)]
    kept = tensors[::2]                                             # eight stay; eight 64 MiB holes between them
    del tensors
    report = {"allocated_mib": torch.cuda.memory_allocated(dev) / MiB,
              "reserved_mib": torch.cuda.memory_reserved(dev) / MiB}
    try:
        big = torch.empty(640 * MiB, dtype=torch.uint8, device=dev)
        report["640 MiB"] = "fits"
        del big
    except torch.OutOfMemoryError as exc:
        report["640 MiB"] = "out of memory: " + _oom_figures(str(exc))
    try:                                                            # did the setting take effect?
        report["expandable_segments"] = torch.cuda.memory._snapshot()["allocator_settings"]["expandable_segments"]
    except (KeyError, TypeError, AttributeError, RuntimeError):
        report["expandable_segments"] = "unknown (not in this version's snapshot)"
    del kept
    print(json.dumps(report))
    return report


def run(setting="", timeout=300):
    """Run this module in a fresh process with ``PYTORCH_CUDA_ALLOC_CONF=setting`` ('' for the default)."""
    from gpucourse.memory import run_child

    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}
    if setting:   # the older name, which every PyTorch 2 reads (some newer ones warn)
        env["PYTORCH_CUDA_ALLOC_CONF"] = setting
    return run_child([sys.executable, "-m", "gpucourse.fragmentation_child"], env=env, timeout=timeout)


if __name__ == "__main__":
    main()
