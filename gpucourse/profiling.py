"""Small helpers for episodes 7 and 8: ``self_time_table`` prints a profile by self time (episode 7
reads a training step's, episode 8 a starved loader's and a slow loop's); ``quiet_profiler_log``
keeps the profiler's own log lines out of a notebook; ``SlowShards`` feeds episode 8's input
pipelines.

``SlowShards`` is a data set whose items are whole batches that take a set time to "read"
(a stand-in for reading and decoding files). It lives in this module, not in the notebook,
because ``DataLoader`` workers started with *spawn* (the default on macOS and Windows) or
*forkserver* (the default on Linux from Python 3.14) import the data set's class by name: a
class defined in a notebook cannot be found there.
"""

from __future__ import annotations

import os
import time

__all__ = ["SlowShards", "quiet_profiler_log", "self_time_table"]

#: libkineto's levels run VERBOSE 0 … ERROR 3, STAGE 4, USDT 5; 6 is past the last of them.
KINETO_SILENT = "6"


def quiet_profiler_log() -> None:
    """Keep libkineto's log lines out of the notebook.

    libkineto, the library under ``torch.profiler``, writes lines of its own to the process's
    stderr, which Jupyter shows under the cell: with PyTorch 2.13, a ``USDT: ...
    profiler_start`` and a ``profiler_stop`` line for every profile. A learner can do nothing
    with them. Only a level past all of libkineto's hides them (errors included), so this sets
    ``KINETO_LOG_LEVEL`` to it unless the environment already names a level (set one to see the
    lines again). libkineto reads the variable when the first profile starts: call this before.
    """
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_SILENT)


class SlowShards:
    """Batches of ``(X, y)``, each taking ``read_seconds`` to produce.

    Parameters
    ----------
    X, y : torch.Tensor
        The whole table in host memory.
    batch_size : int
        Rows per item; item ``i`` is rows ``i * batch_size`` to ``(i + 1) * batch_size``.
    read_seconds : float
        Time each item waits, as if reading it from disk or the network. Waiting uses no CPU,
        so worker processes overlap it even on a machine with few cores.

    Each item is a copy of its rows (``.clone()``), not a view of the table: sent from a
    DataLoader worker, a view would take its whole storage (the table) to shared memory.
    """

    def __init__(self, X, y, batch_size: int, read_seconds: float):
        if batch_size < 1 or read_seconds < 0:
            raise ValueError(f"need batch_size >= 1 and read_seconds >= 0, got {batch_size} and {read_seconds}")
        if len(X) < batch_size:
            raise ValueError(f"X has {len(X)} rows, fewer than one batch of {batch_size}")
        self.X, self.y, self.batch_size, self.read_seconds = X, y, batch_size, read_seconds

    def __len__(self) -> int:
        return len(self.X) // self.batch_size

    def __getitem__(self, i: int):
        if not 0 <= i < len(self):
            raise IndexError(f"batch {i} out of range 0..{len(self) - 1}")
        time.sleep(self.read_seconds)
        rows = slice(i * self.batch_size, (i + 1) * self.batch_size)
        # copies, as a reader from disk returns: a slice is a view of the whole table, and a
        # worker process would move the whole table's storage to shared memory to send it
        return self.X[rows].clone(), self.y[rows].clone()


def _counts_on_device(event) -> bool:
    """True for the rows that hold a GPU's own time: kernels, copies and memsets.

    Under Kineto a CPU op (``aten::addmm``) also carries the time of the kernels it launched, and a
    ``record_function`` label gets a GPU row spanning its whole region; counting either would count
    kernel time twice. PyTorch's own table keeps only CUDA events that are not user annotations
    (``_build_table`` in torch/autograd/profiler_util.py); so does this one.
    """
    import torch

    return event.device_type == torch.autograd.DeviceType.CUDA and not getattr(event, "is_user_annotation", False)


def self_time_table(prof, top: int = 8, device: bool = False) -> str:
    """The ``top`` ops of a ``torch.profiler`` profile by self time, as a short text table.

    ``device=True`` lists what ran on the GPU (kernels, copies) by their time there
    (``self_device_time_total``), with shares of the GPU's busy time; otherwise ops by their
    self time on the CPU.
    """
    key = "self_device_time_total" if device else "self_cpu_time_total"
    rows = [e for e in prof.key_averages() if _counts_on_device(e)] if device else list(prof.key_averages())
    events = sorted(rows, key=lambda e: getattr(e, key), reverse=True)[:top]
    total = sum(getattr(e, key) for e in rows) or 1.0
    lines = [f"{'op' if not device else 'kernel or copy':<44} {'calls':>6} {'self ms':>9} {'share':>6}"]
    for e in events:
        lines.append(f"{e.key[:44]:<44} {e.count:>6} {getattr(e, key) / 1e3:>9.2f} {getattr(e, key) / total:>6.0%}")
    return "\n".join(lines)
