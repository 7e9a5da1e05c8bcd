"""Reading device memory the same way on a GPU and on a CPU.

Episode 5 measures what training keeps in memory. On a GPU, PyTorch's CUDA
caching allocator keeps the books: ``torch.cuda.memory_allocated`` (bytes held
by tensors), ``memory_reserved`` (bytes the allocator holds, cached blocks
included), ``max_memory_allocated`` with ``reset_peak_memory_stats``, and
``set_per_process_memory_fraction`` to make the allocator raise
``torch.OutOfMemoryError`` beyond a limit. ``CudaMeter`` is exactly those calls,
so it counts every tensor on the device, those made before ``with meter:``
included (and the cuBLAS workspace that PyTorch allocates at the first matrix
product): subtract ``meter.allocated()`` taken when a measurement begins.

A CPU has no such allocator to ask, so ``TensorMeter`` counts for itself: while
it is active (``with meter:``) it sees every tensor PyTorch creates (through a
``TorchDispatchMode``), adds up the bytes of their storages, notices when a
storage is freed, keeps the peak, and can enforce a budget by raising the
same ``torch.OutOfMemoryError`` a GPU raises. It counts what
``memory_allocated`` counts — tensor storages — without the CUDA allocator's
rounding, its cache or library workspaces. Tensors created before the meter
was entered are not counted, even when they are used inside it.

``meter_for(device)`` returns the right one; both have the same methods:
``allocated()``, ``reserved()``, ``peak()``, ``reset_peak()``,
``budget(nbytes)`` (a context manager), ``free_cache()`` and ``summary()``.
"""

from __future__ import annotations

import contextlib
import gc
import weakref

from gpucourse import tracebacks

KIB, MIB, GIB = 2**10, 2**20, 2**30


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in binary units: ``format_bytes(3 * 2**20) == '3.00 MiB'``."""
    value = float(nbytes)
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


# --------------------------------------------------------------------------- on a GPU

class CudaMeter:
    """PyTorch's own CUDA allocator statistics for one device (no counting of our own).

    Parameters
    ----------
    device : torch.device, str or int
        A CUDA device: ``torch.device("cuda")`` (the current one), ``"cuda:1"`` or ``1``.
    """

    kind = "cuda"

    def __init__(self, device):
        import torch

        self.device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"CudaMeter needs a CUDA device, got {self.device}; use TensorMeter on a CPU.")
        if self.device.index is None:
            # Some torch.cuda calls (set_per_process_memory_fraction) reject a device without an index.
            self.device = torch.device("cuda", torch.cuda.current_device())

    def __enter__(self):
        return self  # the CUDA allocator counts everything anyway

    def __exit__(self, *exc):
        return False

    def allocated(self) -> int:
        """Bytes held by tensors now: ``torch.cuda.memory_allocated``."""
        import torch

        return torch.cuda.memory_allocated(self.device)

    def reserved(self) -> int:
        """Bytes the caching allocator holds, cached free blocks included: ``torch.cuda.memory_reserved``."""
        import torch

        return torch.cuda.memory_reserved(self.device)

    def peak(self) -> int:
        """Most bytes held by tensors since the last ``reset_peak()``: ``torch.cuda.max_memory_allocated``."""
        import torch

        return torch.cuda.max_memory_allocated(self.device)

    def reset_peak(self) -> None:
        """Start a new peak from what is allocated now: ``torch.cuda.reset_peak_memory_stats``."""
        import torch

        torch.cuda.reset_peak_memory_stats(self.device)

    def free_cache(self) -> None:
        """Collect unreachable Python objects, then return cached blocks to the driver."""
        import torch

        gc.collect()
        torch.cuda.empty_cache()

    def total(self) -> int:
        """The device's memory in bytes, as the driver reports it to PyTorch."""
        import torch

        return torch.cuda.get_device_properties(self.device).total_memory

    @contextlib.contextmanager
    def budget(self, nbytes: int):
        """Inside the block, the allocator may reserve ``nbytes`` more than it holds now; beyond that it raises
        ``torch.OutOfMemoryError``.

        Uses ``torch.cuda.set_per_process_memory_fraction``, which limits all the memory the caching
        allocator reserves on the device (cached blocks count too). What it still holds after
        ``free_cache()`` (live tensors, the cuBLAS workspace) is added to ``nbytes``, so that the budget is
        for what the block creates, as a ``TensorMeter``'s is. The fraction is set back to 1 afterwards.
        The allocator reserves in segments: requests up to 1 MiB share 2 MiB segments, requests of 1–10 MiB
        share 20 MiB segments, and larger ones, when no cached free block fits, a new segment of their own rounded up to a multiple of 2 MiB
        (``CUDACachingAllocator.cpp``), so a GPU runs out somewhat earlier than the same budget on a CPU.
        """
        import torch

        if nbytes <= 0:
            raise ValueError(f"a budget must be a positive number of bytes, got {nbytes}.")
        self.free_cache()
        held = torch.cuda.memory_reserved(self.device)     # already reserved: live tensors, cuBLAS workspace
        fraction = (held + float(nbytes)) / self.total()
        if not 0 < fraction <= 1:
            raise ValueError(f"a budget of {format_bytes(nbytes)} on top of the {format_bytes(held)} already "
                             f"reserved is more than the device's {format_bytes(self.total())}.")
        torch.cuda.set_per_process_memory_fraction(fraction, self.device)
        try:
            yield self
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)

    def summary(self) -> str:
        """``torch.cuda.memory_summary`` (abbreviated)."""
        import torch

        return torch.cuda.memory_summary(self.device, abbreviated=True)


# --------------------------------------------------------------------------- on a CPU

class _Storage:
    __slots__ = ("ref", "nbytes", "what")

    def __init__(self, ref, nbytes, what):
        self.ref, self.nbytes, self.what = ref, nbytes, what


_preserved: bool | None = None


def _storages_preserved() -> bool:
    """True if PyTorch keeps one Python object per storage for the storage's whole life.

    Then a ``weakref.finalize`` on it tells the meter the moment the memory is freed. Otherwise the
    meter checks weak references to the storages (slower: it looks at every live storage per operation).
    """
    global _preserved
    if _preserved is None:
        import torch

        t = torch.zeros(1)
        try:
            weakref.ref(t.untyped_storage())
            _preserved = t.untyped_storage() is t.untyped_storage()
        except TypeError:
            _preserved = False
    return _preserved


def _describe(func, dtype, shape) -> str:
    return f"{getattr(func, '__name__', func)} → {dtype} {shape}".replace("torch.", "")


def _tensors(value, depth: int = 0):
    """The tensors in ``value``, looking into tuples, lists and dicts (what operations take and return)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 4 and isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item, depth + 1)
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth + 1)


def _dispatch_mode_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class _CountingMode(TorchDispatchMode):
        def __init__(self, meter):
            super().__init__()
            self.meter = meter

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            self.meter._record(func, args, kwargs, out)
            return out

    return _CountingMode


class TensorMeter:
    """Counts the bytes of every tensor PyTorch creates while the meter is active.

    Parameters
    ----------
    limit : int, optional
        A budget in bytes: creating a tensor that would take the total beyond
        it raises ``torch.OutOfMemoryError``, as a full GPU does. None: no limit.

    Examples
    --------
    >>> import torch
    >>> meter = TensorMeter()
    >>> with meter:
    ...     x = torch.zeros(1024, 256)        # 1 MiB of float32
    >>> meter.allocated()
    1048576
    """

    kind = "cpu"

    def __init__(self, limit: int | None = None):
        import torch

        self.device = torch.device("cpu")
        self.limit = limit
        self._live: dict[int, _Storage] = {}
        self._now = 0
        self._peak = 0
        self._mode = None
        self._depth = 0

    # ---- entering and leaving
    def __enter__(self):
        if self._depth == 0:
            self._mode = _dispatch_mode_class()(self)
            self._mode.__enter__()
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            mode, self._mode = self._mode, None
            mode.__exit__(*exc)
        return False

    @property
    def active(self) -> bool:
        return self._depth > 0

    # ---- the bookkeeping
    def _sweep(self) -> None:
        if _storages_preserved():
            return  # finalizers keep the books
        dead = [key for key, entry in self._live.items() if entry.ref.expired()]
        for key in dead:
            self._now -= self._live.pop(key).nbytes

    def _forget(self, key, entry) -> None:
        """A storage was freed (called by its finalizer)."""
        if self._live.get(key) is entry:
            del self._live[key]
            self._now -= entry.nbytes

    def _watch(self, key, storage, entry) -> None:
        if _storages_preserved():
            entry.ref = weakref.finalize(storage, self._forget, key, entry)
            entry.ref.atexit = False
        else:
            from torch.multiprocessing.reductions import StorageWeakRef

            entry.ref = StorageWeakRef(storage)

    def _record(self, func, args, kwargs, out) -> None:
        self._sweep()
        inputs = {t.untyped_storage()._cdata for t in _tensors((args, kwargs))}
        new: dict[int, tuple] = {}
        for t in _tensors(out):
            storage = t.untyped_storage()
            key = storage._cdata
            if key in inputs or key in self._live or key in new:
                continue  # a view of, or an in-place change to, a tensor that already exists
            new[key] = (storage, _Storage(None, storage.nbytes(), (func, t.dtype, tuple(t.shape))))
        needed = sum(entry.nbytes for _, entry in new.values())
        if self.limit is not None and needed and self._now + needed > self.limit:
            import torch

            free = max(self.limit - self._now, 0)
            raise torch.OutOfMemoryError(
                f"out of memory (TensorMeter budget on the CPU, standing in for a GPU). Tried to allocate "
                f"{format_bytes(needed)}. The budget of {format_bytes(self.limit)} has {format_bytes(free)} free; "
                f"tensors created under the meter take {format_bytes(self._now)}.")
        for key, (storage, entry) in new.items():
            self._live[key] = entry
            self._watch(key, storage, entry)
        self._now += needed
        self._peak = max(self._peak, self._now)

    # ---- the same questions as torch.cuda
    def allocated(self) -> int:
        """Bytes held by tensors created under the meter that are still alive."""
        self._sweep()
        return self._now

    def reserved(self) -> int:
        """Same as ``allocated()``: the meter has no cache (a CUDA allocator does)."""
        return self.allocated()

    def peak(self) -> int:
        """Most bytes held at once since the last ``reset_peak()``."""
        return max(self._peak, self.allocated())

    def reset_peak(self) -> None:
        """Start a new peak from what is allocated now."""
        self._peak = self.allocated()

    def free_cache(self) -> None:
        """Collect unreachable Python objects (their tensors go with them); there is no cache to empty."""
        gc.collect()
        self._sweep()

    @contextlib.contextmanager
    def budget(self, nbytes: int):
        """Inside the block, creating tensors beyond ``nbytes`` in all raises ``torch.OutOfMemoryError``."""
        if nbytes <= 0:
            raise ValueError(f"a budget must be a positive number of bytes, got {nbytes}.")
        before = self.limit
        self.limit = int(nbytes)
        try:
            with self:
                yield self
        finally:
            self.limit = before

    def summary(self, top: int = 8) -> str:
        """The largest live tensors, with the operation that created each."""
        self._sweep()
        entries = sorted(self._live.values(), key=lambda e: -e.nbytes)
        lines = [f"TensorMeter: {len(entries)} live storages, {format_bytes(self._now)} in all; "
                 f"peak {format_bytes(self.peak())}" + (f"; budget {format_bytes(self.limit)}" if self.limit else "")]
        lines += [f"  {format_bytes(e.nbytes):>11}  {_describe(*e.what)}" for e in entries[:top]]
        if len(entries) > top:
            rest = sum(e.nbytes for e in entries[top:])
            lines.append(f"  {format_bytes(rest):>11}  in {len(entries) - top} smaller storages")
        return "\n".join(lines)


def meter_for(device):
    """``CudaMeter(device)`` for a CUDA device, otherwise a new ``TensorMeter()``.

    A ``TensorMeter`` counts the tensors PyTorch creates on any device, so it also stands in on
    Apple's ``mps`` and Intel's ``xpu`` GPUs, whose allocators the course does not read: it counts
    tensor storages there, without their allocator's cache or rounding.
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return CudaMeter(device)
    if device.type in ("cpu", "mps", "xpu"):
        return TensorMeter()
    raise ValueError(f"no memory meter for device type {device.type!r}; use a CUDA, MPS or XPU "
                     "device or the CPU.")


# --------------------------------------------------------------------------- fresh processes

def run_child(command, env=None, timeout=300):
    """Run ``command`` (a fresh Python process); return the JSON it printed last as a dict, or None after
    printing why not in one line (a timeout, a module the machine lacks, or the child's last error).

    Episode 6 runs TensorFlow and the CUDA allocator's settings in fresh processes: memory growth and
    ``PYTORCH_CUDA_ALLOC_CONF`` take effect only before the framework first uses the GPU.
    """
    import json
    import subprocess

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"the child process did not finish within {timeout} s")
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        error = tracebacks.last_exception(done.stderr)
        if error.startswith("ModuleNotFoundError"):
            print(f"Skipped: {error.split(': ', 1)[-1]}")
        else:
            print(f"the child process failed (exit code {done.returncode}): "
                  f"{error or done.stderr[-2000:]}")
        return None
    return json.loads(lines[-1])


__all__ = ["KIB", "MIB", "GIB", "format_bytes", "CudaMeter", "TensorMeter", "meter_for", "run_child"]
