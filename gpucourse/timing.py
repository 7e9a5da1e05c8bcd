"""Timing that is right on a GPU.

GPU frameworks queue work and return at once, so ``time.perf_counter()`` around
a call measures how long it took to *launch* the work, not to do it. A correct
measurement (1) warms up first (CUDA context, kernel selection, compilation),
(2) waits for the device to finish before reading the clock, and (3) repeats
and reports the median, which ignores the odd slow run.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of each repeat, with the usual summaries."""

    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def spread(self) -> float:
        """Max minus min: a large spread means a noisy measurement."""
        return max(self.times) - min(self.times)

    def __str__(self) -> str:
        return (f"median {_fmt(self.median)} (best {_fmt(self.best)}, "
                f"{len(self.times)} repeats)")


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def synchronizer(device) -> Callable[[], None]:
    """A function that waits until ``device`` has finished its queued work.

    ``device`` may be a ``torch.device``, a string such as ``"cuda:0"``,
    ``"mps"``, ``"cpu"``, or a TensorFlow name such as ``"/GPU:0"``.
    """
    name = str(device).lower()
    if name.startswith("cuda"):
        import torch

        dev = torch.device(name)
        return lambda: torch.cuda.synchronize(dev)
    if name.startswith("mps"):
        import torch

        return torch.mps.synchronize
    if name.startswith("xpu"):
        import torch

        return torch.xpu.synchronize
    if "gpu" in name:
        from .frameworks import import_tensorflow

        tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

        return tf.test.experimental.sync_devices
    if "cpu" in name:
        return lambda: None
    raise ValueError(
        f"Don't know how to wait for device {device!r}; use e.g. 'cpu', 'cuda:0', 'mps', 'xpu' or '/GPU:0'."
    )


def benchmark(fn: Callable[[], object], device="cpu", *, warmup: int = 1,
              repeats: int = 5) -> Timing:
    """Time ``fn()`` correctly on ``device``.

    Parameters
    ----------
    fn : callable
        Runs the work once; takes no arguments.
    device : str or torch.device
        Where the work runs; decides how to wait for it (see ``synchronizer``).
    warmup : int
        Untimed calls first, to pay one-off costs (CUDA start-up, autotuning).
    repeats : int
        Timed calls; the median is the headline figure.

    Returns
    -------
    Timing
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"Need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}.")
    sync = synchronizer(device)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return Timing(tuple(times))


def crossover(widths, cpu_times, gpu_times):
    """First width from which the GPU is faster for every wider network.

    ``None`` if that never happens, or if there is no GPU (``gpu_times is None``).
    A width where the GPU wins but a wider one where it loses again is not a
    crossover: the answer must hold from there on.
    """
    if gpu_times is None:
        return None
    for i, width in enumerate(widths):
        if all(g < c for c, g in zip(cpu_times[i:], gpu_times[i:])):
            return width
    return None
