"""A fake CUDA runtime, so that code written for a GPU can run (and be tested) on a CPU.

Only the lowest layer is replaced: the functions PyTorch's C extension provides
(``torch._C._cuda_getDeviceCount``, ``_cuda_init``, the ``_cuda_*`` memory entry points,
device properties, ``cudaMemGetInfo``), the CUDA version of the build, ``nvidia-smi`` on
``PATH`` and TensorFlow's list of physical GPUs. PyTorch's own Python wrappers
(``torch.cuda.set_per_process_memory_fraction``, ``memory_allocated``, ``_get_device_index``,
``get_device_properties`` …) stay real, so a call that would fail on a GPU — an index-less
``torch.device("cuda")`` where an index is required, a device beyond the count — fails here too.

It reaches as far as a GPU machine's start-up: libraries that import CUDA-only entry points
once ``torch.cuda._is_compiled()`` is True (``torch._dynamo``, transformers, peft) import, the
stream entry points raising a clear error if called; ``torch.cuda.is_bf16_supported`` answers
as each model does; ``nvidia-smi`` (``gpucourse/fakes/fakecuda_smi.py``) samples in a loop; and Python
processes started inside the block see the same machine (``_fakecuda_site/sitecustomize.py``).

The fake has no kernels: tensors cannot be created on ``"cuda"``. Instead its caching
allocator is driven by hand (``gpu.allocate(nbytes)``, ``gpu.free(nbytes)``), with the real
allocator's segment sizes, the per-process fraction and ``torch.OutOfMemoryError``.

>>> from gpucourse.fakes.fakecuda import fake_gpu
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
# Multiprocessor counts are the datasheets' (A100 whitepaper: 108 SMs; H100 PCIe 114, SXM 132;
# B200 148; RTX PRO 6000 Blackwell: 24,064 CUDA cores / 128 per SM = 188). The totals of the
# newer models are torch's own print-outs (``_CudaDeviceProperties(... total_memory=97250MB``),
# which give whole MiB: the bytes here are that count times 2**20, exact to under one MiB.
MODELS = {
    # Kaggle's older GPU. torch: name='Tesla P100-PCIE-16GB', major=6, minor=0,
    # total_memory=16280MB, multi_processor_count=56. ARCH_FLAGS (the CUDA 12.8 wheel; 13.0's
    # starts at 7.5 too) has no code for it, so the course runs on the CPU there; torch's CUDA
    # 12.6 wheels still build for sm_60.
    "P100": dict(name="Tesla P100-PCIE-16GB", total_memory=16_280 * MIB, major=6, minor=0,
                 multi_processor_count=56),
    "T4": dict(name="Tesla T4", total_memory=15_828_320_256, major=7, minor=5, multi_processor_count=40),
    "L4": dict(name="NVIDIA L4", total_memory=23_580_639_232, major=8, minor=9, multi_processor_count=58),
    # deviceQuery on an A100-SXM4-40GB: "40339 MBytes (42298834944 bytes)", (108) Multiprocessors
    # (bottlerocket-os/bottlerocket#3873)
    "A100 40GB": dict(name="NVIDIA A100-SXM4-40GB", total_memory=42_298_834_944, major=8, minor=0,
                      multi_processor_count=108),
    "A100": dict(name="NVIDIA A100-SXM4-80GB", total_memory=85_100_068_864, major=8, minor=0,
                 multi_processor_count=108),
    "H100": dict(name="NVIDIA H100 80GB HBM3", total_memory=85_031_714_816, major=9, minor=0,
                 multi_processor_count=132),
    # torch: _CudaDeviceProperties(name='NVIDIA H100 PCIe', major=9, minor=0, total_memory=81008MB,
    # multi_processor_count=114)
    "H100 PCIe": dict(name="NVIDIA H100 PCIe", total_memory=81_008 * MIB, major=9, minor=0,
                      multi_processor_count=114),
    "H100 NVL": dict(name="NVIDIA H100 NVL", total_memory=100_485_038_080, major=9, minor=0,
                     multi_processor_count=132),
    # torch: name='NVIDIA H200', major=9, minor=0, total_memory=143156MB, multi_processor_count=132
    # (the datasheet's 141 GB of HBM3e)
    "H200": dict(name="NVIDIA H200", total_memory=143_156 * MIB, major=9, minor=0,
                 multi_processor_count=132),
    "GH200": dict(name="NVIDIA GH200 480GB", total_memory=102_005_473_280, major=9, minor=0,
                  multi_processor_count=132),
    # torch: name='NVIDIA B200', major=10, minor=0, total_memory=182642MB, multi_processor_count=148
    # (pytorch/ao#4002 measures "Total Global Memory: 178.35 GB", the same in GiB)
    "B200": dict(name="NVIDIA B200", total_memory=182_642 * MIB, major=10, minor=0,
                 multi_processor_count=148),
    # Colab's "G4" runtime. torch 2.7.1+cu128: name='NVIDIA RTX PRO 6000 Blackwell Server
    # Edition', major=12, minor=0, total_memory=97250MB, multi_processor_count=188
    "G4": dict(name="NVIDIA RTX PRO 6000 Blackwell Server Edition", total_memory=97_250 * MIB,
               major=12, minor=0, multi_processor_count=188),
}
# The architectures torch 2.11's cu128 wheel (Colab's) is built for: "12.8.1 | Turing(7.5),
# Ampere(8.0, 8.6), Hopper(9.0), Blackwell(10.0, 12.0)", with no PTX (pytorch/pytorch#175253,
# the 2.11 release matrix). A device outside them makes torch warn at its first use, as on a
# real machine.
ARCH_FLAGS = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
DRIVER_VERSION = "570.00"    # what the fake nvidia-smi reports
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
            state = dict(driver_version=DRIVER_VERSION, cuda_version=self.cuda_version, gpus=rows)
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
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
        "_cuda_getArchFlags": lambda: ARCH_FLAGS,
    }


# Entry points a CUDA build has and this CPU build lacks, which torch or a library imports as
# soon as torch.cuda._is_compiled() is True (torch/_dynamo/device_interface.py imports
# _cuda_getCurrentRawStream at module level; torch.cuda.current_stream() calls the others).
# The fake has no streams: each stub raises when called, naming itself.
NO_STREAMS = ("_cuda_getCurrentRawStream", "_cuda_getCurrentStream", "_cuda_getDefaultStream",
              "_cuda_setStream")


def _no_streams(name: str):
    def stub(*args, **kwargs):
        raise RuntimeError(f"torch._C.{name}: the fake CUDA runtime (gpucourse.fakes.fakecuda) has no streams "
                           "or kernels; this call needs a real GPU. Test the code around it, or catch "
                           "this error where a real GPU would not raise.")
    stub.__name__ = name
    return stub


def _stream_stubs() -> dict:
    import torch

    # Also where the build has them (PyPI's CUDA build on a machine without a driver): the real
    # ones would ask the driver, which is not there.
    return {name: _no_streams(name) for name in NO_STREAMS}


class _FakeStream:
    """What ``torch.accelerator.current_stream()`` gives under the fake: never capturing a graph
    (optimizers ask before each step); anything else needs a real stream."""

    def is_capturing(self) -> bool:
        return False

    def __getattr__(self, name):
        raise _no_streams(f"Stream.{name}")()


def _accelerator_functions(gpus: FakeGPUs, c_functions: dict) -> dict:
    """torch.accelerator's entry points for the fake GPUs.

    On PyTorch's CUDA build ``torch.accelerator`` is CUDA whether or not a driver is there, and
    ``Optimizer.step`` asks it for the current stream; on the CPU build it is None. Under the fake
    both builds answer as a machine with these GPUs does.
    """
    import torch

    return {
        "_accelerator_getAccelerator": lambda: torch.device("cuda"),
        "_accelerator_getDeviceIndex": c_functions["_cuda_getDevice"],
        "_accelerator_setDeviceIndex": c_functions["_cuda_setDevice"],
        "_accelerator_exchangeDevice": c_functions["_cuda_exchangeDevice"],
        "_accelerator_maybeExchangeDevice": c_functions["_cuda_maybeExchangeDevice"],
        "_accelerator_getStream": lambda index: _FakeStream(),
        "_accelerator_synchronizeDevice": lambda index: None,
    }


def _nvidia_smi_script(folder: Path) -> Path:
    """An ``nvidia-smi`` in ``folder`` that runs ``fakecuda_smi.py`` (no site, no PYTHON* variables)."""
    exe = folder / "nvidia-smi"
    script = Path(__file__).with_name("fakecuda_smi.py")
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S -E "{script}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


# --------------------------------------------------------------------------- child processes

SITE_FOLDER = Path(__file__).with_name("_fakecuda_site")   # holds the sitecustomize.py children run
SPEC_VARIABLE = "GPUCOURSE_FAKE_GPU"


def machine_spec(model: str, count: int = 1, cuda_version: str = "12.8", compute_mode: str = "Default",
                 tensorflow: bool = False) -> str:
    """The text ``GPUCOURSE_FAKE_GPU`` holds for a machine: ``"T4x2"``, ``"H100;cuda=12.6"``, ..."""
    text = model if count == 1 else f"{model}x{count}"
    if cuda_version != "12.8":
        text += f";cuda={cuda_version}"
    if compute_mode != "Default":
        text += f";mode={compute_mode}"
    return text + (";tensorflow" if tensorflow else "")


def parse_machine_spec(text: str) -> dict:
    """``machine_spec``'s text back into ``fake_gpu``'s arguments.

    >>> parse_machine_spec("T4x2;mode=Exclusive_Process")["count"]
    2
    """
    first, *options = [part.strip() for part in text.split(";")]
    model, count = first, 1
    if first not in MODELS and "x" in first:
        model, _, number = first.rpartition("x")
        count = int(number) if number.isdigit() else -1
    if model not in MODELS or count < 0:
        raise ValueError(f"{SPEC_VARIABLE}={text!r} names no fake machine: write MODEL or MODELxCOUNT "
                         f"(e.g. 'T4x2'), with MODEL one of {sorted(MODELS)}.")
    args = dict(model=model, count=count, cuda_version="12.8", compute_mode="Default", tensorflow=False)
    for item in options:
        key, _, value = item.partition("=")
        if key == "cuda":
            args["cuda_version"] = value
        elif key == "mode":
            args["compute_mode"] = value
        elif key == "tensorflow" and not value:
            args["tensorflow"] = True
        else:
            raise ValueError(f"{SPEC_VARIABLE}={text!r}: unknown option {item!r}; the options are "
                             "cuda=VERSION, mode=COMPUTE_MODE and tensorflow.")
    return args


class _AfterImport:
    """A ``sys.meta_path`` finder that runs ``then()`` right after module ``name`` is imported."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)                  # find the real module with the other finders
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            self.then()

        spec.loader.exec_module = exec_module
        return spec


_installed: list = []    # the child's fake stays on until the process ends


def install_on_import(text: str) -> None:
    """Fake the machine ``text`` describes (``machine_spec``) as soon as torch is imported.

    Called by ``_fakecuda_site/sitecustomize.py`` in each child of a ``fake_gpu`` block. The
    child keeps the parent's ``nvidia-smi`` and its state file (both inherited), so that the
    memory it shows is the parent's.
    """
    args = parse_machine_spec(text)
    tensorflow = args.pop("tensorflow")

    def install_torch():
        context = _fake_machine(FakeGPUs(**args), nvidia_smi=False, tensorflow=False)
        context.__enter__()
        _installed.append(context)

    def install_tensorflow():
        context = _fake_tensorflow(FakeGPUs(**args), [])
        context.__enter__()
        _installed.append(context)

    if "torch" in sys.modules:
        install_torch()
    else:
        sys.meta_path.insert(0, _AfterImport("torch", install_torch))
    if tensorflow:
        if "tensorflow" in sys.modules:
            install_tensorflow()
        else:
            sys.meta_path.insert(0, _AfterImport("tensorflow", install_tensorflow))


# --------------------------------------------------------------------------- the context manager

def _undo(restore: list) -> None:
    """Put back what :func:`_patched` changed, the last change first."""
    for obj, name, had, old in reversed(restore):
        if had:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


@contextlib.contextmanager
def _patched(obj, name, value, restore):
    had = hasattr(obj, name)
    old = getattr(obj, name, None)
    setattr(obj, name, value)
    restore.append((obj, name, had, old))
    yield


_lock = threading.Lock()
_ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "PATH", "GPUCOURSE_FAKE_GPU_STATE", SPEC_VARIABLE, "PYTHONPATH")


@contextlib.contextmanager
def fake_gpu(model: str = "T4", count: int = 1, *, visible: str | None = None, cuda_version: str = "12.8",
             nvidia_smi: bool = True, tensorflow: bool = False, compute_mode: str = "Default",
             children: bool = True):
    """Make this process look like a machine with ``count`` GPUs of one ``model``.

    Parameters
    ----------
    model : str
        One of ``MODELS``: "T4", "L4", "A100 40GB", "A100", "H100", "H100 PCIe", "H100 NVL",
        "H200", "GH200", "B200", "G4".
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
    children : bool
        Python processes started inside the block see the same machine (through
        ``GPUCOURSE_FAKE_GPU`` and a ``sitecustomize`` put first on ``PYTHONPATH``).

    Yields
    ------
    FakeGPUs
        The runtime's state, with ``allocate``/``free`` to drive its allocator.
    """
    gpus = FakeGPUs(model, count, cuda_version, compute_mode)
    environment = {k: os.environ.get(k) for k in _ENVIRONMENT}
    try:
        with _lock:
            if visible is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = visible
            if children:
                os.environ[SPEC_VARIABLE] = machine_spec(model, count, cuda_version, compute_mode, tensorflow)
                os.environ["PYTHONPATH"] = os.pathsep.join(
                    [str(SITE_FOLDER)] + [p for p in [environment["PYTHONPATH"]] if p])
            with _fake_machine(gpus, nvidia_smi=nvidia_smi, tensorflow=tensorflow):
                yield gpus
    finally:
        for key, value in environment.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _fake_machine(gpus: FakeGPUs, *, nvidia_smi: bool, tensorflow: bool):
    """Patch torch's lowest CUDA layer (and nvidia-smi, TensorFlow) for ``gpus``; undo it after."""
    import torch

    restore: list = []
    path_before = os.environ.get("PATH")
    state_before = os.environ.get("GPUCOURSE_FAKE_GPU_STATE")
    tmp = tempfile.TemporaryDirectory(prefix="gpucourse-fakegpu-")
    with contextlib.ExitStack() as stack:
        try:
            c_functions = _c_functions(gpus)
            for name, fn in {**_stream_stubs(), **c_functions,
                             **_accelerator_functions(gpus, c_functions)}.items():
                stack.enter_context(_patched(torch._C, name, fn, restore))
            cuda = torch.cuda
            for name, value in (("_exchange_device", torch._C._cuda_exchangeDevice),
                                ("_maybe_exchange_device", torch._C._cuda_maybeExchangeDevice),
                                ("_cudart", _FakeCudart(gpus)),
                                ("_device_count_nvml", lambda: -1),     # as without libnvidia-ml: ask CUDA
                                ("default_generators", tuple(torch.Generator() for _ in gpus.devices)),
                                # a real GPU makes a bfloat16 tensor on any model (emulated before 8.0)
                                ("_check_bf16_tensor_supported", lambda device: True),
                                ("_initialized", False), ("_cached_device_count", None),
                                ("_queued_calls", [])):
                stack.enter_context(_patched(cuda, name, value, restore))
            # bound at import by torch.cuda.graphs; no capture is ever under way without streams
            stack.enter_context(_patched(cuda.graphs, "_cuda_isCurrentStreamCapturing", lambda: False,
                                         restore))
            stack.enter_context(_patched(torch.version, "cuda", gpus.cuda_version, restore))
            if nvidia_smi:
                gpus.state_file = Path(tmp.name) / "state.json"
                gpus._write_state()
                _nvidia_smi_script(Path(tmp.name))
                os.environ["PATH"] = f"{tmp.name}{os.pathsep}{path_before or ''}"
                os.environ["GPUCOURSE_FAKE_GPU_STATE"] = str(gpus.state_file)
            if tensorflow:
                stack.enter_context(_fake_tensorflow(gpus, restore))
            yield gpus
        finally:
            _undo(restore)
            if hasattr(torch.cuda, "_get_device_properties") and not hasattr(torch._C, "_cuda_init"):
                del torch.cuda._get_device_properties
            for key, value in (("PATH", path_before), ("GPUCOURSE_FAKE_GPU_STATE", state_before)):
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            tmp.cleanup()


@contextlib.contextmanager
def _fake_tensorflow(gpus: FakeGPUs, restore: list):
    """``tf.config.list_physical_devices`` and ``get_device_details`` as on a machine with these GPUs."""
    from ..frameworks import import_tensorflow

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


__all__ = ["MODELS", "FakeGPUs", "fake_gpu", "install_on_import", "machine_spec", "parse_machine_spec",
           "round_size", "segment_size"]


# --------------------------------------------------------------------------- Apple's MPS and Intel's XPU

@contextlib.contextmanager
def fake_backend(kind: str):
    """Make PyTorch report an Apple GPU (``"mps"``) or an Intel GPU (``"xpu"``) and no CUDA GPU.

    Patched at the same layer as :func:`fake_gpu`: the C functions ``torch.backends.mps`` and
    ``torch.xpu`` ask (``torch._C._mps_is_available``, ``torch._C._has_xpu``,
    ``_xpu_getDeviceCount``), so the choice code above them runs as it is. Like the fake
    CUDA runtime it has no kernels: a tensor on the device still fails.
    """
    import torch

    if kind not in ("mps", "xpu"):
        raise ValueError(f"fake_backend({kind!r}): use 'mps' (Apple) or 'xpu' (Intel)")
    restore: list = []
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(_patched(torch._C, "_cuda_getDeviceCount", lambda: 0, restore))
        if kind == "mps":
            stack.enter_context(_patched(torch._C, "_mps_is_available", lambda: True, restore))
        else:
            stack.enter_context(_patched(torch._C, "_has_xpu", True, restore))
            stack.enter_context(_patched(torch._C, "_xpu_getDeviceCount", lambda: 1, restore))
            stack.enter_context(_patched(torch.xpu, "_device_count_zes", lambda: -1, restore))
        torch.backends.mps.is_available.cache_clear()
        torch.cuda.device_count.cache_clear() if hasattr(torch.cuda.device_count, "cache_clear") else None
        yield
    finally:
        _undo(restore)
        stack.close()
        torch.backends.mps.is_available.cache_clear()
