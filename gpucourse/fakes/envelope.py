"""A T4's limits on a bigger GPU: ``tools/gpu_check.py --envelope t4``.

The GPU nodes the course can borrow are H100/H200-class; its learners' GPU is Colab's and
Kaggle's T4. What software can make a big GPU refuse, it refuses as a T4 would:

* **memory**: torch's allocator may hold at most what torch reports on a T4, 15,828,320,256 B
  (14.74 GiB, ``feasibility.gpu_models()["T4"]``; nvidia-smi's 15,360 MiB includes memory the
  driver keeps), set with ``torch.cuda.set_per_process_memory_fraction`` when CUDA starts, and
  reported as the device's total (``get_device_properties``, ``mem_get_info``);
* **attention kernels**: the SDPA backends sm_75 lacks (Flash and cuDNN, [sm80, sm121] in
  ``capabilities.json``) are switched off and cannot be switched back on, so a call that needs
  them fails as on a T4, and the memory-efficient and math kernels remain;
* **compute capability** (7, 5) reported to Python, so every choice the episodes make from it
  is the T4's: float16 instead of bfloat16, int4 skipped, the T4's mixed-precision policy;
* **bfloat16** treated as emulated: ``torch.cuda.is_bf16_supported()`` is False, as the course
  reads it for a T4 (``capabilities.json``'s ``bf16_hardware``: sm80 and newer);
* **TF32** off (a T4 has none), for matmuls and cuDNN.

What stays the big GPU's: its bandwidth, its tensor cores' generation and speed, and its
launch overhead; Triton compiles for the GPU that runs (a cubin for sm_75 cannot run on
sm_90; episode 12 shows the sm_75 code by compiling it without running it). So an envelope
figure says whether a T4 **can** run a cell and in how much memory; its times are not a
T4's. Its record is labelled "T4 envelope on <GPU>" and never shown as a T4.
TensorFlow is not limited (its virtual-device memory limit clashes with the memory growth
the episodes switch on); the check records episode 4 through Keras's PyTorch backend.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "GPUCOURSE_ENVELOPE"
SITE_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_envelope_site")
T4_CAPABILITY = (7, 5)


def t4_limits() -> dict:
    """What the envelope sets, read from the feasibility model's data (never typed in here)."""
    from .. import feasibility

    t4 = feasibility.gpu_models()["T4"]
    capability = tuple(t4["compute_capability"])
    backends = feasibility.capabilities()["sdpa"]["backends"]
    lacking = sorted(name for name, entry in backends.items()
                     if not feasibility._in_range(capability, entry["compute_capability"]))
    bf16 = feasibility.feature_available("bf16_hardware", capability)
    return {"memory_bytes": int(t4["total_memory"]), "compute_capability": capability,
            "sdpa_off": lacking, "bf16_hardware": bf16, "tf32": False}


class _Properties:
    """A device's properties as torch reports them, with a T4's capability and memory."""

    def __init__(self, real, limits):
        self._real, self._limits = real, limits

    major = property(lambda self: self._limits["compute_capability"][0])
    minor = property(lambda self: self._limits["compute_capability"][1])
    total_memory = property(lambda self: min(self._real.total_memory, self._limits["memory_bytes"]))

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self._real.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB, T4 envelope)")


def apply(torch=None, limits: dict | None = None) -> dict:
    """Limit this process's GPU to a T4's envelope; what was set (for the run's log).

    Safe to call before CUDA starts: the memory fraction is set when it does.
    """
    if torch is None:
        import torch
    limits = limits or t4_limits()
    cuda = torch.cuda
    if getattr(cuda, "_gpucourse_envelope", None):
        return cuda._gpucourse_envelope
    real_properties, real_capability = cuda.get_device_properties, cuda.get_device_capability
    real_init, real_mem_get_info = cuda._lazy_init, cuda.mem_get_info
    fractions_set = set()

    def set_fraction():
        for index in range(torch._C._cuda_getDeviceCount()):
            if index in fractions_set:
                continue
            fractions_set.add(index)
            total = real_properties(index).total_memory
            cuda.set_per_process_memory_fraction(min(1.0, limits["memory_bytes"] / total), index)

    def lazy_init():
        real_init()
        if not fractions_set:
            set_fraction()

    def get_device_properties(device=None):
        return _Properties(real_properties(device), limits)

    def get_device_capability(device=None):
        real_capability(device)  # the real errors for a wrong device
        return tuple(limits["compute_capability"])

    def mem_get_info(device=None):
        free, total = real_mem_get_info(device)
        cap = min(total, limits["memory_bytes"])
        reserved = cuda.memory_reserved(device)
        return max(0, min(free, cap - reserved)), cap

    undo = [(cuda, name, getattr(cuda, name)) for name in
            ("_lazy_init", "get_device_properties", "get_device_capability", "mem_get_info",
             "is_bf16_supported")]
    undo += [(torch._C, name, getattr(torch._C, name)) for name in
             ("_set_sdp_use_flash", "_set_sdp_use_cudnn", "_set_sdp_use_mem_efficient")]
    undo += [(torch.backends.cuda.matmul, "allow_tf32", torch.backends.cuda.matmul.allow_tf32),
             (torch.backends.cudnn, "allow_tf32", torch.backends.cudnn.allow_tf32)]
    enabled = {"flash": torch.backends.cuda.flash_sdp_enabled(),
               "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
               "efficient": torch.backends.cuda.mem_efficient_sdp_enabled()}
    precision = torch.get_float32_matmul_precision()
    cuda._lazy_init = lazy_init
    cuda.get_device_properties = get_device_properties
    cuda.get_device_capability = get_device_capability
    cuda.mem_get_info = mem_get_info
    if not limits["bf16_hardware"]:
        cuda.is_bf16_supported = lambda including_emulation=True: False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    for backend in limits["sdpa_off"]:
        setter = {"flash": "_set_sdp_use_flash", "cudnn": "_set_sdp_use_cudnn",
                  "efficient": "_set_sdp_use_mem_efficient"}[backend]
        getattr(torch._C, setter)(False)
        # sdpa_kernel(...) switches backends on through these: a T4 has no such kernel
        setattr(torch._C, setter, lambda enabled, _real=getattr(torch._C, setter): _real(False))
    if cuda.is_initialized():
        set_fraction()
    done = {"memory_bytes": limits["memory_bytes"],
            "compute_capability": ".".join(map(str, limits["compute_capability"])),
            "sdpa_off": list(limits["sdpa_off"]), "bf16": "emulated" if not limits["bf16_hardware"]
            else "hardware", "tf32": "off",
            "triton": "compiled for the GPU that ran (an sm_75 cubin cannot run on it)",
            "tensorflow": "not limited"}
    cuda._gpucourse_envelope = done
    cuda._gpucourse_envelope_undo = (undo, enabled, precision)
    return done


def remove(torch=None) -> None:
    """Undo :func:`apply` (the tests use it; a run keeps the envelope until its kernel ends)."""
    if torch is None:
        import torch
    cuda = torch.cuda
    if not getattr(cuda, "_gpucourse_envelope", None):
        return
    undo, enabled, precision = cuda._gpucourse_envelope_undo
    for obj, name, value in reversed(undo):
        setattr(obj, name, value)
    torch._C._set_sdp_use_flash(enabled["flash"])
    torch._C._set_sdp_use_cudnn(enabled["cudnn"])
    torch._C._set_sdp_use_mem_efficient(enabled["efficient"])
    torch.set_float32_matmul_precision(precision)
    del cuda._gpucourse_envelope, cuda._gpucourse_envelope_undo


def install_on_import() -> None:
    """Apply the envelope as soon as torch is imported (``_envelope_site/sitecustomize.py``)."""
    if os.environ.get(VARIABLE, "") != "t4":
        return
    if "torch" in sys.modules:
        apply()
        return
    from .fakecuda import _AfterImport

    sys.meta_path.insert(0, _AfterImport("torch", apply))
