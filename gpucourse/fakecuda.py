"""A fake CUDA runtime, so that code written for a GPU can run (and be tested) on a CPU.

Only the lowest layer is replaced: the functions PyTorch's C extension provides
(``torch._C._cuda_getDeviceCount``, ``_cuda_init``, the ``_cuda_*`` memory entry points,
device properties, ``cudaMemGetInfo``), the CUDA version of the build, ``nvidia-smi`` on
``PATH`` and TensorFlow's list of physical GPUs. PyTorch's own Python wrappers
(``torch.cuda.set_per_process_memory_fraction``, ``memory_allocated``, ``_get_device_index``,
``get_device_properties`` …) stay real, so a call that would fail on a GPU — an index-less
``torch.device("cuda")`` where an index is required, a device beyond the count — fails here too.

The fake has no kernels: tensors cannot be created on ``"cuda"``. Instead its caching
allocator is driven by hand (``gpu.allocate(nbytes)``, ``gpu.free(nbytes)``), with the real
allocator's segment sizes, the per-process fraction and ``torch.OutOfMemoryError``.

>>> from gpucourse.fakecuda import fake_gpu
>>> with fake_gpu("T4") as gpu:
...     import torch
...     torch.cuda.get_device_name(0)
'Tesla T4'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

MIB, GIB = 2**20, 2**30

# What torch.cuda.get_device_properties reports for each model (names as the driver gives them;
# memory is the usable total torch reports, e.g. Colab's T4: "14.74 GiB total capacity").
MODELS = {
    "T4": dict(name="Tesla T4", total_memory=15_828_320_256, major=7, minor=5, multi_processor_count=40),
    "L4": dict(name="NVIDIA L4", total_memory=23_580_639_232, major=8, minor=9, multi_processor_count=58),
    "A100": dict(name="NVIDIA A100-SXM4-80GB", total_memory=85_100_068_864, major=8, minor=0,
                 multi_processor_count=108),
    "H100": dict(name="NVIDIA H100 80GB HBM3", total_memory=85_031_714_816, major=9, minor=0,
                 multi_processor_count=132),
    "H100 NVL": dict(name="NVIDIA H100 NVL", total_memory=100_485_038_080, major=9, minor=0,
                     multi_processor_count=132),
    "GH200": dict(name="NVIDIA GH200 480GB", total_memory=102_005_473_280, major=9, minor=0,
                  multi_processor_count=132),
}
CONTEXT_BYTES = 300 * MIB   # what a CUDA context takes outside PyTorch's allocator (nvidia-smi sees it)

# The caching allocator's sizes (c10/cuda/CUDACachingAllocator.cpp).
K_SMALL_SIZE, K_SMALL_BUFFER, K_LARGE_BUFFER = 1 * MIB, 2 * MIB, 20 * MIB
K_MIN_LARGE_ALLOC, K_ROUND_LARGE, K_MIN_BLOCK = 10 * MIB, 2 * MIB, 512

STAT_NAMES = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
              "active_bytes", "inactive_split_bytes", "requested_bytes")


def round_size(nbytes: int) -> int:
    """The size a tensor of ``nbytes`` takes in the caching allocator (multiples of 512 bytes)."""
    return max(K_MIN_BLOCK, -(-int(nbytes) // K_MIN_BLOCK) * K_MIN_BLOCK)


def segment_size(nbytes: int) -> int:
    """The segment the allocator reserves from the driver when no cached block fits ``nbytes``."""
    size = round_size(nbytes)
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


class _UUID(str):
    """torch's ``props.uuid`` prints without the ``GPU-`` prefix that nvidia-smi shows."""


@dataclass
class FakeDevice:
    """One physical GPU: its properties and its caching allocator's books."""

    physical_index: int
    model: str
    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int
    uuid: str
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    fraction: float = 1.0
    num_ooms: int = 0
    blocks: list = field(default_factory=list)   # sizes of live allocations

    def properties(self):
        from types import SimpleNamespace

        return SimpleNamespace(name=self.name, total_memory=self.total_memory, major=self.major,
                               minor=self.minor, multi_processor_count=self.multi_processor_count,
                               uuid=_UUID(self.uuid), is_integrated=False, is_multi_gpu_board=False,
                               L2_cache_size=50 * MIB, warp_size=32)

    def stats(self) -> dict:
        """``torch._C._cuda_memoryStats``'s nested dictionary."""
        def one(current, peak):
            entry = {"current": current, "peak": peak, "allocated": peak, "freed": peak - current}
            return {"all": dict(entry), "small_pool": dict(entry, current=0, peak=0, allocated=0, freed=0),
                    "large_pool": dict(entry)}
        values = {"allocated_bytes": (self.allocated, self.peak_allocated),
                  "active_bytes": (self.allocated, self.peak_allocated),
                  "requested_bytes": (self.allocated, self.peak_allocated),
                  "reserved_bytes": (self.reserved, self.peak_reserved),
                  "allocation": (len(self.blocks), len(self.blocks)),
                  "active": (len(self.blocks), len(self.blocks))}
        out = {name: one(*values.get(name, (0, 0))) for name in STAT_NAMES}
        out.update(num_alloc_retries=0, num_ooms=self.num_ooms, num_sync_all_streams=0,
                   num_device_alloc=0, num_device_free=0, max_split_size=-1,
                   oversize_allocations=one(0, 0)["all"], oversize_segments=one(0, 0)["all"])
        return out


class FakeGPUs:
    """The fake runtime's state: physical devices, what is visible, the current device."""

    def __init__(self, model: str = "T4", count: int = 1, cuda_version: str = "12.8",
                 compute_mode: str = "Default"):
        if model not in MODELS:
            raise ValueError(f"unknown GPU model {model!r}; choose from {sorted(MODELS)}.")
        if count < 0:
            raise ValueError(f"count must be 0 or more, got {count}.")
        self.devices = [FakeDevice(i, model, uuid=self._uuid(model, i), **MODELS[model]) for i in range(count)]
        self.cuda_version = cuda_version
        self.compute_mode = compute_mode
        self.current = 0
        self.state_file: Path | None = None

    @staticmethod
    def _uuid(model: str, index: int) -> str:
        h = hashlib.sha1(f"{model}:{index}".encode()).hexdigest()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    # ---- what the driver shows this process (CUDA_VISIBLE_DEVICES)
    def visible(self) -> list[FakeDevice]:
        """The devices this process sees, in CUDA order; parsing stops at the first invalid entry, as CUDA's does."""
        spec = os.environ.get("CUDA_VISIBLE_DEVICES")
        if spec is None:
            return list(self.devices)
        seen = []
        for item in spec.split(","):
            item = item.strip()
            match = None
            if item.isdigit() and int(item) < len(self.devices):
                match = self.devices[int(item)]
            elif item.startswith("GPU-"):
                match = next((d for d in self.devices if d.uuid.startswith(item[4:]) and len(item) > 4), None)
            if match is None or match in seen:
                break
            seen.append(match)
        return seen

    def device(self, index: int | None = None) -> FakeDevice:
        visible = self.visible()
        index = self.current if index is None or index < 0 else index
        if not 0 <= index < len(visible):
            raise RuntimeError("CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously "
                               "reported at some other API call, so the stacktrace below might be incorrect.")
        return visible[index]

    # ---- the caching allocator, driven by hand
    def allocate(self, nbytes: int, device: int | None = None) -> int:
        """Allocate ``nbytes`` on a visible device as a tensor would; returns the bytes it takes.

        Raises ``torch.OutOfMemoryError`` when the segment would take the reserved memory past
        the per-process fraction or the device's free memory.
        """
        import torch

        torch.cuda._lazy_init()           # as a real tensor on the device would
        index = self.current if device is None else device
        dev = self.device(index)
        size = round_size(nbytes)
        cached_free = dev.reserved - dev.allocated
        if size > cached_free:
            grow = segment_size(nbytes)
            limit = dev.fraction * dev.total_memory
            if dev.reserved + grow > limit or dev.reserved + grow > dev.total_memory - CONTEXT_BYTES:
                dev.num_ooms += 1
                free = max(0, dev.total_memory - CONTEXT_BYTES - dev.reserved)
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {size / MIB:.2f} MiB. GPU {index} has a total capacity "
                    f"of {dev.total_memory / GIB:.2f} GiB of which {free / MIB:.2f} MiB is free. Of the allocated "
                    f"memory {dev.allocated / MIB:.2f} MiB is allocated by PyTorch, and "
                    f"{(dev.reserved - dev.allocated) / MIB:.2f} MiB is reserved by PyTorch but unallocated.")
            dev.reserved += grow
        dev.allocated += size
        dev.blocks.append(size)
        dev.peak_allocated = max(dev.peak_allocated, dev.allocated)
        dev.peak_reserved = max(dev.peak_reserved, dev.reserved)
        self._write_state()
        return size

    def free(self, nbytes: int, device: int | None = None) -> None:
        """Free a block allocated with ``allocate`` (it stays reserved, as in the real cache)."""
        dev = self.device(device)
        size = round_size(nbytes)
        if size not in dev.blocks:
            raise ValueError(f"no live block of {size} bytes on this device")
        dev.blocks.remove(size)
        dev.allocated -= size
        self._write_state()

    def empty_cache(self) -> None:
        for dev in self.devices:
            dev.reserved = sum(segment_size(b) for b in dev.blocks)
        self._write_state()

    def _write_state(self) -> None:
        if self.state_file is not None:
            rows = [dict(index=d.physical_index, name=d.name, uuid=d.uuid, total=d.total_memory, mode=self.compute_mode,
                         used=(CONTEXT_BYTES + d.reserved) if d.reserved else 0) for d in self.devices]
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(rows))
            os.replace(tmp, self.state_file)


# --------------------------------------------------------------------------- torch's lowest layer

class _FakeCudart:
    """The few CUDA runtime calls torch.cuda makes through ``torch.cuda.cudart()``."""

    def __init__(self, gpus: FakeGPUs):
        self.gpus = gpus

    def cudaMemGetInfo(self, device: int):
        dev = self.gpus.device(device)
        used = CONTEXT_BYTES + dev.reserved
        return dev.total_memory - used, dev.total_memory

    def cudaProfilerStart(self):
        return 0

    def cudaProfilerStop(self):
        return 0


def _c_functions(gpus: FakeGPUs) -> dict:
    import torch

    def get_device_count():
        return len(gpus.visible())

    def init():
        if not gpus.visible():
            raise RuntimeError("No CUDA GPUs are available")
        torch.cuda._get_device_properties = lambda index: gpus.device(index).properties()

    def set_device(index):
        gpus.device(index)   # raises for an invalid ordinal
        gpus.current = index

    def exchange(index):
        previous = gpus.current
        if index >= 0:
            set_device(index)
        return previous

    def set_fraction(fraction, index):
        gpus.device(index).fraction = fraction

    def reset_peak(index):
        dev = gpus.device(index)
        dev.peak_allocated, dev.peak_reserved = dev.allocated, dev.reserved

    return {
        "_cuda_getDeviceCount": get_device_count,
        "_cuda_init": init,
        "_cuda_getDevice": lambda: gpus.current,
        "_cuda_setDevice": set_device,
        "_cuda_exchangeDevice": exchange,
        "_cuda_maybeExchangeDevice": exchange,
        "_cuda_synchronize": lambda: None,
        "_cuda_memoryStats": lambda index: gpus.device(index).stats(),
        "_cuda_resetPeakMemoryStats": reset_peak,
        "_cuda_resetAccumulatedMemoryStats": lambda index: None,
        "_cuda_setMemoryFraction": set_fraction,
        "_cuda_getMemoryFraction": lambda index: gpus.device(index).fraction,
        "_cuda_emptyCache": gpus.empty_cache,
        "_cuda_getArchFlags": lambda: "sm_75 sm_80 sm_86 sm_89 sm_90",
    }


_NVIDIA_SMI = r'''#!{python}
"""A fake nvidia-smi: reads the fake runtime's state file; answers --query-gpu and -L."""
import json, os, sys
rows = json.load(open(os.environ["GPUCOURSE_FAKE_GPU_STATE"]))
args = sys.argv[1:]
def opt(name):
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
ids = opt("--id") or opt("-i")
if ids is not None:
    want = ids.split(",")
    rows = [r for r in rows if str(r["index"]) in want or "GPU-" + r["uuid"] in want]
    if not rows:
        print("No devices were found"); sys.exit(6)
if "-L" in args:
    for r in rows:
        print(f"GPU {{r['index']}}: {{r['name']}} (UUID: GPU-{{r['uuid']}})")
    sys.exit(0)
query = opt("--query-gpu")
if query:
    units = "nounits" not in (opt("--format") or "")
    fields = {{"index": lambda r: r["index"], "name": lambda r: r["name"], "uuid": lambda r: "GPU-" + r["uuid"],
              "memory.total": lambda r: f"{{r['total'] >> 20}}" + (" MiB" if units else ""),
              "memory.used": lambda r: f"{{r['used'] >> 20}}" + (" MiB" if units else ""),
              "memory.free": lambda r: f"{{(r['total'] - r['used']) >> 20}}" + (" MiB" if units else ""),
              "compute_mode": lambda r: r["mode"],
              "utilization.gpu": lambda r: "0" + (" %" if units else ""),
              "utilization.memory": lambda r: "0" + (" %" if units else "")}}
    names = [q.strip() for q in query.split(",")]
    bad = [n for n in names if n not in fields]
    if bad:
        print(f'Field "{{bad[0]}}" is not a valid field to query.'); sys.exit(2)
    for r in rows:
        print(", ".join(str(fields[n](r)) for n in names))
    sys.exit(0)
print("+-----------------------------------------------------------------------------+")
print("| NVIDIA-SMI 570.00       Driver Version: 570.00       CUDA Version: 12.8     |")
for r in rows:
    print(f"| {{r['index']}}  {{r['name']:<30}} {{r['used'] >> 20:>6}}MiB / {{r['total'] >> 20:>6}}MiB |")
print("+-----------------------------------------------------------------------------+")
'''


@contextlib.contextmanager
def _patched(obj, name, value, restore):
    had = hasattr(obj, name)
    old = getattr(obj, name, None)
    setattr(obj, name, value)
    restore.append((obj, name, had, old))
    yield


_lock = threading.Lock()


@contextlib.contextmanager
def fake_gpu(model: str = "T4", count: int = 1, *, visible: str | None = None, cuda_version: str = "12.8",
             nvidia_smi: bool = True, tensorflow: bool = False, compute_mode: str = "Default"):
    """Make this process look like a machine with ``count`` GPUs of one ``model``.

    Parameters
    ----------
    model : str
        One of ``MODELS``: "T4", "L4", "A100", "H100", "H100 NVL", "GH200".
    count : int
        Physical GPUs in the machine.
    visible : str, optional
        A value for ``CUDA_VISIBLE_DEVICES`` inside the block (restored after).
    nvidia_smi : bool
        Put a fake ``nvidia-smi`` first on ``PATH`` (child processes see it too).
    tensorflow : bool
        Also make ``tf.config.list_physical_devices("GPU")`` list the visible GPUs.
    compute_mode : str
        What ``nvidia-smi --query-gpu=compute_mode`` reports, e.g. "Exclusive_Process".

    Yields
    ------
    FakeGPUs
        The runtime's state, with ``allocate``/``free`` to drive its allocator.
    """
    import torch

    gpus = FakeGPUs(model, count, cuda_version, compute_mode)
    restore: list = []
    env_before = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "PATH", "GPUCOURSE_FAKE_GPU_STATE")}
    tmp = tempfile.TemporaryDirectory(prefix="gpucourse-fakegpu-")
    with _lock, contextlib.ExitStack() as stack:
        try:
            if visible is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = visible
            for name, fn in _c_functions(gpus).items():
                stack.enter_context(_patched(torch._C, name, fn, restore))
            cuda = torch.cuda
            for name, value in (("_exchange_device", torch._C._cuda_exchangeDevice),
                                ("_maybe_exchange_device", torch._C._cuda_maybeExchangeDevice),
                                ("_cudart", _FakeCudart(gpus)),
                                ("_device_count_nvml", lambda: -1),     # as without libnvidia-ml: ask CUDA
                                ("default_generators", tuple(torch.Generator() for _ in range(count))),
                                ("_initialized", False), ("_cached_device_count", None),
                                ("_queued_calls", [])):
                stack.enter_context(_patched(cuda, name, value, restore))
            stack.enter_context(_patched(torch.version, "cuda", cuda_version, restore))
            if nvidia_smi:
                gpus.state_file = Path(tmp.name) / "state.json"
                gpus._write_state()
                exe = Path(tmp.name) / "nvidia-smi"
                exe.write_text(_NVIDIA_SMI.format(python=sys.executable))
                exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
                os.environ["PATH"] = f"{tmp.name}{os.pathsep}{os.environ.get('PATH', '')}"
                os.environ["GPUCOURSE_FAKE_GPU_STATE"] = str(gpus.state_file)
            if tensorflow:
                stack.enter_context(_fake_tensorflow(gpus, restore))
            yield gpus
        finally:
            for obj, name, had, old in reversed(restore):
                if had:
                    setattr(obj, name, old)
                else:
                    delattr(obj, name)
            if hasattr(torch.cuda, "_get_device_properties") and not hasattr(torch._C, "_cuda_init"):
                del torch.cuda._get_device_properties
            for key, value in env_before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            tmp.cleanup()


@contextlib.contextmanager
def _fake_tensorflow(gpus: FakeGPUs, restore: list):
    """``tf.config.list_physical_devices`` and ``get_device_details`` as on a machine with these GPUs."""
    from .frameworks import import_tensorflow

    tf = import_tensorflow()
    real_list = tf.config.list_physical_devices
    real_details = tf.config.experimental.get_device_details
    fakes = [tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU")
             for i, _ in enumerate(gpus.visible())]

    def list_physical_devices(device_type=None):
        real = [d for d in real_list(device_type) if d.device_type != "GPU"]
        return real + (fakes if device_type in (None, "GPU") else [])

    def get_device_details(device):
        if device in fakes:
            dev = gpus.visible()[fakes.index(device)]
            return {"device_name": dev.name, "compute_capability": (dev.major, dev.minor)}
        return real_details(device)

    with _patched(tf.config, "list_physical_devices", list_physical_devices, restore), \
            _patched(tf.config.experimental, "get_device_details", get_device_details, restore):
        yield


__all__ = ["MODELS", "FakeGPUs", "fake_gpu", "round_size", "segment_size"]
