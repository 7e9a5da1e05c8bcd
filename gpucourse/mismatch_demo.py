"""Episode 2's device-mismatch error, caused on purpose and fixed, in a process of its own.

    python -m gpucourse.mismatch_demo cuda:0     # or mps, or meta on a machine without a GPU

It runs apart from the notebook's kernel because one PyTorch build (2.13.0 for CUDA 13, with
TensorFlow loaded in the same process) crashes on the ``meta`` device's error path instead of
raising: a crash here is reported by the notebook, in the kernel it would end it.
"""

from __future__ import annotations

import sys

import torch


def main(other: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    # >>> the mismatch and its fix
    model = model.to(other)                    # the weights on the second device
    cpu_batch = torch.randn(16, 4)             # the batch where a DataLoader puts it: on the CPU
    try:
        model(cpu_batch)
    except RuntimeError as err:
        print("RuntimeError:", err)
    fixed = model(cpu_batch.to(other))         # the fix: move the batch to where the model is
    # <<<
    print("after .to():", fixed.device, "with shape", tuple(fixed.shape))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m gpucourse.mismatch_demo DEVICE   (cuda:0, mps or meta)")
    main(sys.argv[1])
