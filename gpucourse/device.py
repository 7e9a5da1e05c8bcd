"""What hardware do PyTorch and TensorFlow see?

``report()`` gathers the facts a learner needs before training on a GPU and
``print_report()`` shows them, with a banner explaining how to get a GPU when
there is none. Neither framework is imported unless it is installed, and
TensorFlow is only *listed*, never initialised, so that memory growth can
still be switched on afterwards.
"""

from __future__ import annotations

import contextlib

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

GIB = 1024**3

COLAB_GPU_STEPS = (
    "In Google Colab: Runtime → Change runtime type → Hardware accelerator: "
    "a GPU (for example T4) → Save, then Runtime → Run all."
)


@dataclass
class GPUInfo:
    """One GPU as a framework sees it."""

    index: int
    name: str
    memory_gib: float | None = None
    compute_capability: str | None = None


@dataclass
class FrameworkReport:
    """What one framework (PyTorch or TensorFlow) sees."""

    framework: str
    version: str | None
    installed: bool
    gpus: list[GPUInfo] = field(default_factory=list)
    cuda: str | None = None
    cudnn: str | None = None
    note: str | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


def in_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def torch_report() -> FrameworkReport:
    """GPUs, CUDA and cuDNN as PyTorch sees them (empty if torch is missing)."""
    if not _installed("torch"):
        return FrameworkReport("PyTorch", None, installed=False, note="torch is not installed")
    import torch

    rep = FrameworkReport("PyTorch", torch.__version__, installed=True)
    rep.cuda = torch.version.cuda or (f"ROCm/HIP {torch.version.hip}" if torch.version.hip else None)
    if torch.backends.cudnn.is_available():
        rep.cudnn = str(torch.backends.cudnn.version())
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            rep.gpus.append(
                GPUInfo(i, props.name, props.total_memory / GIB, f"{props.major}.{props.minor}")
            )
    elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        rep.note = "Apple-silicon GPU available as device 'mps' (not CUDA)"
    elif hasattr(torch, "xpu") and torch.xpu.is_available():
        rep.note = f"Intel GPU available as device 'xpu' (not CUDA): {torch.xpu.get_device_name(0)}"
    elif rep.cuda is None and not getattr(torch.version, "xpu", None):
        rep.note = "this is a CPU-only build of PyTorch"
    return rep


def tensorflow_report() -> FrameworkReport:
    """GPUs, CUDA and cuDNN as TensorFlow sees them (empty if TF is missing).

    Only lists devices: the GPU runtime is not initialised, so
    ``tf.config.experimental.set_memory_growth`` can still be called later.
    """
    if not _installed("tensorflow"):
        return FrameworkReport("TensorFlow", None, installed=False, note="tensorflow is not installed")
    from .frameworks import import_tensorflow

    tf = import_tensorflow()

    rep = FrameworkReport("TensorFlow", tf.__version__, installed=True)
    build = tf.sysconfig.get_build_info()
    rep.cuda = build.get("cuda_version")
    rep.cudnn = build.get("cudnn_version")
    for i, dev in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(dev)
        cc = details.get("compute_capability")
        rep.gpus.append(
            GPUInfo(i, details.get("device_name", dev.name), None,
                    f"{cc[0]}.{cc[1]}" if cc else None)
        )
    if not build.get("is_cuda_build"):
        rep.note = "this TensorFlow build has no CUDA support"
    return rep


def nvidia_smi(timeout: float = 20) -> str | None:
    """Output of ``nvidia-smi``, or None when the tool is not on this machine.

    When ``nvidia-smi`` fails, the text says so, with its exit code and
    everything it printed: it writes its reasons (for example "NVIDIA-SMI has
    failed because it couldn't communicate with the NVIDIA driver") to stdout,
    not only to stderr.
    """
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"nvidia-smi failed: no answer within {timeout:g} s (the driver may be hung)."
    except OSError as exc:
        return f"nvidia-smi failed: {exc}"
    if done.returncode == 0:
        return done.stdout
    said = "\n".join(text.strip() for text in (done.stdout, done.stderr) if text.strip())
    return f"nvidia-smi failed (exit code {done.returncode}):\n{said or '(it printed nothing)'}"


def report(frameworks=("torch", "tensorflow")) -> list[FrameworkReport]:
    """Reports for the requested frameworks, in order."""
    makers = {"torch": torch_report, "tensorflow": tensorflow_report}
    unknown = [f for f in frameworks if f not in makers]
    if unknown:
        raise ValueError(f"Unknown framework(s) {unknown}; choose from {sorted(makers)}.")
    return [makers[f]() for f in frameworks]


KAGGLE_GPU_STEPS = (
    "On Kaggle: in the notebook's right panel, Session options → Accelerator: GPU T4 x2 "
    "(a phone-verified account; about 30 GPU hours a week)."
)
NO_GPU_FREE = (
    "If no GPU is free (Colab: \"Cannot connect to GPU backend\", usually a used-up usage limit or busy "
    "GPUs): carry on here on the CPU, where every cell runs at reduced size; try Colab again in a few hours; "
    "or open the notebook on Kaggle (the Open in Kaggle badge at the top)."
)


def in_kaggle() -> bool:
    """True inside a Kaggle notebook."""
    return "KAGGLE_KERNEL_RUN_TYPE" in os.environ


def other_gpu() -> str | None:
    """The device name of a usable GPU that is not a CUDA one ('mps' on Apple silicon, 'xpu' on Intel), or None."""
    if not _installed("torch"):
        return None
    import torch

    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    return None


def no_gpu_banner() -> str:
    """The message shown when no framework sees a GPU: how to get one here, and what to do if none is free."""
    if in_colab():
        where = COLAB_GPU_STEPS
    elif in_kaggle():
        where = KAGGLE_GPU_STEPS
    else:
        where = ("On your own machine: install a GPU build (see the course's Setup page), "
                 "or open this notebook in Google Colab with a GPU runtime.")
    return (
        "⚠ NO GPU FOUND — everything below runs on the CPU, at reduced size.\n"
        f"  To use a GPU: {where}\n"
        f"  {NO_GPU_FREE}"
    )


def format_report(reports: list[FrameworkReport]) -> str:
    """Human-readable text for ``report()``'s result."""
    lines = [f"Python {sys.version.split()[0]} · {'Google Colab' if in_colab() else 'not Colab'}"]
    for rep in reports:
        if not rep.installed:
            lines.append(f"{rep.framework}: not installed")
            continue
        head = f"{rep.framework} {rep.version}: {rep.gpu_count} GPU(s)"
        head += f" · CUDA {rep.cuda or '-'} · cuDNN {rep.cudnn or '-'}"
        lines.append(head)
        for gpu in rep.gpus:
            mem = f"{gpu.memory_gib:.1f} GiB" if gpu.memory_gib is not None else "memory n/a"
            lines.append(
                f"  [{gpu.index}] {gpu.name} · {mem} · compute capability {gpu.compute_capability or '?'}"
            )
        if rep.note:
            lines.append(f"  note: {rep.note}")
    if not any(rep.gpu_count for rep in reports) and not other_gpu():
        lines.append("")
        lines.append(no_gpu_banner())
    return "\n".join(lines)


def print_report(frameworks=("torch", "tensorflow")) -> list[FrameworkReport]:
    """Print the device report (with the no-GPU banner if needed) and return it."""
    reports = report(frameworks)
    print(format_report(reports))
    return reports


# --------------------------------------------------------------------------- which backend, which GPU

def build_backend() -> str:
    """The accelerator this PyTorch build was compiled for: CUDA, ROCm, Intel's XPU or none.

    Episode 2 writes this function out in a cell (tests/test_taught_ep02.py keeps the two
    equal). Apple's MPS is not a build of its own: the Mac wheel has it and no CUDA.
    """
    import torch

    if torch.version.hip:
        return f"ROCm/HIP {torch.version.hip} (AMD GPUs, still called cuda devices)"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda} (NVIDIA GPUs)"
    if getattr(torch.version, "xpu", None):
        return f"Intel XPU {torch.version.xpu} (Intel GPUs, 'xpu' devices)"
    return "no CUDA or ROCm (a CPU-only build)"


def backend() -> str:
    """Which accelerator backend this PyTorch build has and can use: CUDA, ROCm, Apple's MPS, Intel's XPU or none."""
    import torch

    usable = [name for name, ok in (
        ("cuda", cuda_usable()),           # counted, and this build has code for it
        ("mps", getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()),
        ("xpu", hasattr(torch, "xpu") and torch.xpu.is_available()),
    ) if ok]
    return (f"PyTorch {torch.__version__} built for {build_backend()}; "
            f"usable devices: {', '.join(usable) or 'the CPU only'}")


def pick_device(index: int = 0) -> "torch.device":
    """cuda:index if this PyTorch can compute on it, else Apple's mps, else an Intel xpu, else
    the CPU.

    Episode 2 writes this function out in a cell; every later PyTorch episode calls it from
    here (tests/test_device_choice.py keeps the two equal). AMD GPUs under ROCm are "cuda".
    """
    import torch

    from gpucourse import device as course_device     # the name episode 2's cell uses

    if torch.cuda.is_available() and index < torch.cuda.device_count():
        if course_device.cuda_problem(index) is None:   # a P100 under cu128: a problem
            return torch.device(f"cuda:{index}")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return torch.device("xpu", 0)
    return torch.device("cpu")


#: What to do when PyTorch lacks an operation on Apple's GPU (its NotImplementedError says so).
MPS_FALLBACK = ("PyTorch has no kernel for this operation on Apple's GPU (MPS) yet. Set "
                "PYTORCH_ENABLE_MPS_FALLBACK=1 before `import torch` (restart the kernel, then "
                "`%env PYTORCH_ENABLE_MPS_FALLBACK=1` in the first cell) to run such operations "
                "on the CPU, or run this cell with device = torch.device('cpu').")


def describe_choice(device) -> str:
    """One line on the device :func:`pick_device` chose and what it means for this episode."""
    import torch

    if torch.device(device).type == "cpu" and torch.cuda.is_available():
        problem = cuda_problem(0)
        if problem:
            return f"device: cpu, because {problem}"

    device = torch.device(device)
    if device.type == "cuda":
        index = device.index or 0
        maker = "AMD, through ROCm" if torch.version.hip else "NVIDIA"
        return f"device: {device} ({torch.cuda.get_device_name(index)}, {maker})"
    if device.type == "mps":
        return ("device: mps (Apple's GPU). CUDA-only parts (memory statistics, nvidia-smi, "
                "CUDA timings) say so and are skipped; an operation PyTorch lacks on MPS is "
                "named, with PYTORCH_ENABLE_MPS_FALLBACK=1 as the way round.")
    if device.type == "xpu":
        return ("device: xpu (Intel's GPU). CUDA-only parts (memory statistics, nvidia-smi, "
                "CUDA timings) say so and are skipped.")
    return "device: cpu (no GPU that PyTorch can use was found)"


def missing_operation(exc: BaseException, device) -> str | None:
    """The sentence to print when ``exc`` is PyTorch lacking an operation on ``device``
    (MPS's NotImplementedError), else None: any other error is the learner's to read."""
    import torch

    if (isinstance(exc, NotImplementedError) and torch.device(device).type == "mps"
            and "MPS" in str(exc)):
        return f"{str(exc).splitlines()[0]}\n{MPS_FALLBACK}"
    return None


@contextlib.contextmanager
def says_if_unsupported(device):
    """Run a block; if PyTorch lacks one of its operations on ``device`` (Apple's MPS), print
    what to do instead of stopping the notebook. Every other error propagates."""
    try:
        yield
    except NotImplementedError as exc:
        message = missing_operation(exc, device)
        if message is None:
            raise
        print(message)


def datasheet_table(gpu_name: str | None = None) -> str:
    """The datasheet figures of the GPU models the course knows (``references/bands.json``), one per row,
    with the row of ``gpu_name`` (as the driver reports it) marked; a line says so if the model is not there."""
    from .reference import bands, gpu_model

    mine, _ = gpu_model(gpu_name)
    rows = [f"   {'model':<22} {'FP32 TFLOP/s':>12} {'FP16 tensor':>11} {'memory GB/s':>11} {'host link GB/s':>14}"]
    for model, spec in bands()["models"].items():
        cells = [spec.get(k) for k in ("fp32_tflops", "fp16_tensor_dense_tflops", "memory_gbs", "pcie_x16_gbs")]
        text = [f"{v:g}" if v is not None else "—" for v in cells]
        rows.append(f"{'→' if model == mine else ' '}  {model:<22} {text[0]:>12} {text[1]:>11} {text[2]:>11} "
                    f"{text[3]:>14}")
    if gpu_name and mine is None:
        rows.append(f"(your {gpu_name} is not in the table: look up its datasheet)")
    return "\n".join(rows)


# --------------------------------------------------------------------------- kernels for which GPUs

#: ``torch.cuda.get_arch_list()`` of PyPI's torch 2.13.0+cu130 for Linux x86_64, measured on a
#: machine without a GPU (the list is compiled into the wheel). PyTorch's support matrix gives
#: the same architectures, 7.5 to 12.0, for the CUDA 12.8 wheels of torch 2.11, Colab's
#: (https://github.com/pytorch/pytorch/blob/main/RELEASE.md#pytorch-cuda-support-matrix).
PYPI_CUDA_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")

#: The GPU targets in libtorch_hip.so of a ROCm 6.2 wheel of torch, listed with roc-obj-ls in
#: pytorch/pytorch#132570 (2024): gfx1010 and gfx1031, for example, are not among them.
ROCM_62_ARCHS = ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100")

_CUDA_ARCH = re.compile(r"(sm|compute)_(\d+)([af]?)")


def kernel_for(arch, arch_list) -> str | None:
    """The entry of a build's architecture list whose code runs on a GPU, or None.

    Parameters
    ----------
    arch : tuple of int or str
        An NVIDIA GPU's compute capability as ``torch.cuda.get_device_capability()`` gives
        it, e.g. ``(7, 5)``; or an AMD GPU's ``gcnArchName``, e.g. ``"gfx90a:sramecc+:xnack-"``.
    arch_list : iterable of str
        What the build was compiled for: ``torch.cuda.get_arch_list()``.

    Returns
    -------
    str or None
        For NVIDIA, a binary ``sm_XY`` runs on capabilities X.Y to X.9 (same major) and PTX
        ``compute_XY`` is compiled by the driver for any capability from X.Y up; ``sm_90a``-style
        entries run on X.Y only (CUDA Programming Guide, "Binary Compatibility" and
        "PTX Compatibility"). A binary is preferred to PTX. For AMD, each ``gfx`` target is
        compiled on its own: the name before the first ``:`` must be in the list.
    """
    entries = list(arch_list)
    if isinstance(arch, str) and arch.startswith("gfx"):
        target = arch.split(":")[0]
        return next((a for a in entries if a.split(":")[0] == target), None)
    if not (isinstance(arch, tuple) and len(arch) == 2 and all(isinstance(n, int) for n in arch)):
        raise ValueError(f"arch={arch!r}: give (major, minor) as torch.cuda.get_device_capability() "
                         "returns, or an AMD gcnArchName such as 'gfx90a'")
    binaries, ptx = [], []
    for entry in entries:
        found = _CUDA_ARCH.fullmatch(entry)
        if found is None:
            continue                     # another vendor's target, e.g. gfx90a
        kind, digits, suffix = found.groups()
        code = (int(digits[:-1]), int(digits[-1]))
        if suffix == "a":
            runs = arch == code
        elif kind == "sm":
            runs = arch[0] == code[0] and arch[1] >= code[1]
        else:
            runs = arch >= code
        if runs:
            (binaries if kind == "sm" else ptx).append((code, entry))
    usable = binaries or ptx          # the newest of them: the closest to the GPU
    return max(usable)[1] if usable else None


def arch_supported(arch, arch_list) -> bool:
    """True if a build with ``arch_list`` (``torch.cuda.get_arch_list()``) has code that runs on
    ``arch`` (a compute capability ``(major, minor)`` or an AMD ``gcnArchName``); see :func:`kernel_for`."""
    return kernel_for(arch, arch_list) is not None


def cuda_problem(index: int = 0) -> str | None:
    """Why this PyTorch cannot compute on GPU ``index`` although ``torch.cuda.is_available()``
    says True, or None.

    ``is_available()`` only counts GPUs; a build without code for the GPU's architecture fails at
    the first kernel ("no kernel image is available for execution on the device"). That is
    Kaggle's Tesla P100 (compute capability 6.0) under the CUDA 12.8 and 13.0 wheels, which start
    at 7.5. A build that lists no targets is trusted.
    """
    import torch

    archs = torch.cuda.get_arch_list()
    if torch.version.hip:
        arch = torch.cuda.get_device_properties(index).gcnArchName
        shown = arch.split(":")[0]
    else:
        arch = torch.cuda.get_device_capability(index)
        shown = f"compute capability {arch[0]}.{arch[1]}"
    if not archs or kernel_for(arch, archs) is not None:
        return None
    return (f"this PyTorch has no code for {torch.cuda.get_device_name(index)} ({shown}): it was "
            f"built for {' '.join(archs)}. Episode 2 shows how to find a build that has it.")


def cuda_usable(index: int = 0) -> bool:
    """``torch.cuda.is_available()``, GPU ``index`` exists, and this build has code for it."""
    import torch

    return (torch.cuda.is_available() and index < torch.cuda.device_count()
            and cuda_problem(index) is None)


def loaded_libraries(fragment: str) -> list[str]:
    """Paths of the shared libraries this process has loaded whose file name contains ``fragment``
    (e.g. ``"libcudnn"``), read from /proc/self/maps; an empty list where there is none (macOS,
    Windows)."""
    maps = "/proc/self/maps"
    if not os.path.exists(maps):
        return []
    with open(maps, encoding="utf-8", errors="replace") as lines:
        paths = {line.split()[-1] for line in lines if fragment in line.rsplit("/", 1)[-1]}
    return sorted(p for p in paths if p.startswith("/"))
