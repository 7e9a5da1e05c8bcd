"""GPU features a lesson may find missing, how to tell, and what to say when one is.

A cell that needs a feature some GPUs lack (bfloat16 tensor cores, Triton for ``torch.compile``, a
GPU of its own for a child process) catches the specific failure, prints why with one of these
helpers, and the notebook goes on.
"""

from __future__ import annotations

import re
import shutil
import subprocess

__all__ = ["amp_dtype_for", "COMPILE_ERRORS", "compile_failure", "compute_mode", "gpu_is_exclusive",
           "CUPTI_SHARED_NOTE", "TF_SM120_FIXED_IN", "tf_gpu_problem", "tf_gpu_usable"]


def amp_dtype_for(device):
    """The 16-bit type for ``torch.autocast`` on ``device``, and why.

    Episode 7 writes this function out in a cell (tests/test_taught_ep07.py keeps the two
    equal). bfloat16 off CUDA (a CPU, Apple's MPS, Intel's XPU) and on NVIDIA GPUs of compute
    capability 8.0 or newer (A100, L4, H100: the same tensor-core rate as float16, float32's
    range, no loss scaling); float16 with a ``GradScaler`` on older GPUs (T4, V100), which run
    bfloat16 only by emulation.

    Parameters
    ----------
    device : torch.device or str
        Where autocast will run, e.g. ``"cuda:0"`` or ``"cpu"``.

    Returns
    -------
    tuple of (torch.dtype, str)
        The dtype, and a clause saying why (naming the GradScaler on a CUDA GPU).
    """
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return torch.bfloat16, f"{device.type}: float32's range, so no GradScaler"
    major, minor = torch.cuda.get_device_capability(device)
    if major >= 8:   # Ampere and newer: bfloat16 tensor cores
        return torch.bfloat16, f"compute capability {major}.{minor}: no GradScaler"
    # T4, V100: bfloat16 only by emulation, so float16, whose loss must be scaled
    return torch.float16, f"compute capability {major}.{minor}: float16 + GradScaler"


def _compile_errors() -> tuple:
    from torch._dynamo.exc import BackendCompilerFailed

    try:
        from torch._inductor.exc import InductorError
    except ImportError:          # older PyTorch: Inductor's errors arrive as BackendCompilerFailed
        return (BackendCompilerFailed,)
    return BackendCompilerFailed, InductorError


def __getattr__(name):
    if name == "COMPILE_ERRORS":   # imported lazily: torch._dynamo is slow to import
        return _compile_errors()
    raise AttributeError(name)


def compile_failure(exc: BaseException) -> str:
    """What a failed ``torch.compile`` most likely lacked, from the error's own text."""
    text = str(exc)
    if "C compiler" in text or "CC environment variable" in text:
        reason = ("Triton could not find a C compiler: it builds a small launcher with gcc or clang at first use, "
                  "on a GPU too (install gcc, or set CC)")
    elif "Capability" in text or "too old" in text:
        reason = ("this GPU is too old for Triton's code generator: Triton supports compute capability 8.0+ "
                  "(7.x works only partly)")
    elif "triton" in text.lower() and ("install" in text.lower() or "No module" in text):
        reason = "Triton is not installed (pip install triton; it comes with Linux CUDA builds of PyTorch)"
    elif "Cxx" in text or "C++" in text or "cl.exe" in text or "g++" in text:
        reason = ("no working C++ compiler for the CPU code Inductor generates (MSVC on Windows, the Xcode "
                  "command-line tools on macOS, g++ on Linux)")
    else:
        reason = "see the error's first line"
    first = text.strip().splitlines()[0][:200] if text.strip() else type(exc).__name__
    return f"torch.compile failed ({type(exc).__name__}: {first}).\nLikely reason: {reason}."


def compute_mode(index: int = 0, timeout: float = 20) -> str | None:
    """The GPU's compute mode as ``nvidia-smi`` reports it ("Default", "Exclusive_Process", ...), or None."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--query-gpu=compute_mode", "--format=csv,noheader", f"--id={index}"],
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def gpu_is_exclusive(gpu_id) -> bool:
    """True when the GPU admits one process at a time (common on HPC clusters): a child process started
    while this kernel holds the GPU cannot create a CUDA context on it. ``gpu_id`` is an index or ``GPU-<uuid>``."""
    return (compute_mode(gpu_id) or "").startswith("Exclusive")


CUPTI_SHARED_NOTE = ("CUPTI, the library GPU profilers read kernels through, takes one profiler per process. "
                     "PyTorch's profiler has already used it in this kernel, so TensorFlow's trace may have no "
                     "GPU kernels (TensorFlow ignores the error). For a complete Keras trace, profile it in a "
                     "fresh runtime before any PyTorch profile.")


# TensorFlow's pip builds before 2.21 cannot run on Blackwell workstation GPUs (sm_120: Colab's G4,
# RTX PRO 6000, RTX 50-series): ordinary kernels fail with CUDA_ERROR_INVALID_PTX
# (tensorflow/tensorflow#99592, #101746, #103531) and XLA aborts the whole process with "PTX version
# 8.5 does not support target 'sm_120'" (#111958, fixed for 2.21.0).
TF_SM120_FIXED_IN = (2, 21)


def _version_tuple(version: str) -> tuple:
    """``(major, minor)`` of a version such as "2.20.0" or "2.21.0-rc1"."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"cannot read a version number from {version!r}; expected e.g. '2.20.0'.")
    return int(found[1]), int(found[2])


def tf_gpu_problem(tf) -> str | None:
    """Why this TensorFlow cannot run on the GPUs it lists, or None where it can.

    Asked before TensorFlow's runtime starts (once it has started, the GPUs it uses can no longer
    be hidden): ``list_physical_devices`` and ``get_device_details`` read the driver's answers
    without starting it.

    Parameters
    ----------
    tf : module
        The imported ``tensorflow`` module.

    Returns
    -------
    str or None
        A clause naming the TensorFlow version, the GPU and its architecture, or None.
    """
    if _version_tuple(tf.__version__) >= TF_SM120_FIXED_IN:
        return None
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(gpu)
        except ValueError:   # not a device TensorFlow's own list gave (one a test pretends is there)
            continue
        major, minor = details.get("compute_capability") or (0, 0)
        if major >= 12:
            name = details.get("device_name") or gpu.name
            fixed = ".".join(map(str, TF_SM120_FIXED_IN))
            return (f"TensorFlow {tf.__version__} cannot run on this GPU's sm_{major}{minor} "
                    f"({name}; fixed in TensorFlow {fixed})")
    return None


def tf_gpu_usable(tf) -> bool:
    """True unless ``tf_gpu_problem`` finds a GPU this TensorFlow cannot run on."""
    return tf_gpu_problem(tf) is None
