"""Episode 2's taught lines and its answers to build questions, run as the learner runs them.

The backend probe is written in a cell and kept equal to ``course_device.build_backend``; the
device cells pick Apple's and Intel's GPUs (faked at torch's C layer); the cuDNN, wheel-kernel
and ROCm cells give the right answer on this build, on a faked GPU and on a faked build.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gpucourse import device as course_device
from gpucourse.fakes import fakecuda
from taught import assert_same_function, code_cell, run_printed

EPISODE_2 = "episodes/02-finding-your-gpu.ipynb"


def cell_with(text: str) -> str:
    return code_cell(EPISODE_2, text)


def run(*sources: str) -> tuple[dict, str]:
    """Execute cells in one namespace (torch and the course helper imported); return it and
    what they printed."""
    return run_printed(EPISODE_2, sources, {"torch": torch, "course_device": course_device})


# --------------------------------------------------------------------------- the backend probe
def test_the_backend_probe_in_the_cell_is_the_helper():
    assert_same_function(EPISODE_2, "build_backend", course_device.build_backend)


@pytest.mark.parametrize("cuda, hip, xpu, words", [
    (None, None, None, "a CPU-only build"), ("12.8", None, None, "CUDA 12.8 (NVIDIA GPUs)"),
    (None, "7.2.26015", None, "ROCm/HIP 7.2.26015"), (None, None, "20250101", "Intel XPU"),
])
def test_the_cell_and_backend_name_the_same_build(monkeypatch, cuda, hip, xpu, words):
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.version, "xpu", xpu, raising=False)
    namespace, printed = run(cell_with("def build_backend"))
    assert words in printed and printed.strip().endswith(namespace["build_backend"]())
    assert course_device.build_backend() == namespace["build_backend"]()
    assert f"built for {namespace['build_backend']()}; usable" in course_device.backend()


# --------------------------------------------------------------------------- every device
IMPORTS = cell_with("HAS_TF = has_tensorflow()")
MODE = cell_with("settings.run_mode(")
PICK = cell_with("def pick_device")
CHOOSE = cell_with("device = pick_device()")


@pytest.mark.parametrize("kind, line", [
    ("mps", "device: mps (Apple's GPU)"), ("xpu", "device: xpu (Intel's GPU)"),
])
def test_the_import_mode_and_device_cells_pick_apple_and_intel_gpus(kind, line):
    with fakecuda.fake_backend(kind):
        namespace, printed = run(IMPORTS, MODE, PICK, CHOOSE)
    assert namespace["device"].type == kind
    assert line in printed and f"asking for a 9th GPU gives: {kind}" in printed


def test_the_device_cells_pick_the_cpu_without_a_gpu():
    namespace, printed = run(PICK, CHOOSE)
    assert namespace["device"] == torch.device("cpu") and "device: cpu (no GPU" in printed


# --------------------------------------------------------------------------- which cuDNN
CUDNN = cell_with("getCompileVersion")


def test_the_cudnn_cell_on_this_build():
    _, printed = run(cell_with("def build_backend"), CUDNN)
    if getattr(torch._C, "_cudnn", None) is None:      # the CPU build: nothing to compare
        assert ("No cuDNN to compare: this PyTorch is built for no CUDA or ROCm (a CPU-only build)"
                in printed.splitlines())
    else:                                              # PyPI's CUDA build: its own cuDNN
        assert "| fits: True" in printed and "libcudnn.so" in printed


@pytest.mark.parametrize("loaded, built, fits", [
    ((9, 20, 0), (9, 10, 2), True),     # a newer minor version than built with: accepted
    ((9, 1, 0), (9, 10, 2), False),     # an older one, e.g. from LD_LIBRARY_PATH
    ((8, 9, 7), (9, 10, 2), False),     # another major version
])
def test_the_cudnn_cell_applies_pytorchs_rule(monkeypatch, loaded, built, fits):
    fake = SimpleNamespace(getRuntimeVersion=lambda: loaded, getCompileVersion=lambda: built)
    monkeypatch.setattr(torch._C, "_cudnn", fake, raising=False)
    monkeypatch.setattr(torch.version, "hip", None)
    _, printed = run(CUDNN)
    assert f"cuDNN loaded {loaded} | built against {built} | fits: {fits}" in printed


def test_loaded_libraries_names_files_this_process_mapped():
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("/proc/self/maps is Linux's")
    found = course_device.loaded_libraries("libtorch")
    assert found and all(path.startswith("/") and "libtorch" in path for path in found)
    assert course_device.loaded_libraries("libno-such-library") == []


# --------------------------------------------------------------------------- kernels for a GPU
ARCH_LIST = cell_with("arch_list = torch.cuda.get_arch_list()")
ARCH_CHECK = cell_with("course_device.kernel_for(capability, nvidia_archs)")


@pytest.mark.parametrize("capability, expected", [
    ((6, 0), None),            # Kaggle's P100: Pascal left the CUDA 12.8 and 13.0 wheels
    ((7, 0), None),            # Volta too
    ((7, 5), "sm_75"), ((8, 9), "sm_86"), ((9, 0), "sm_90"), ((10, 3), "sm_100"),
    ((12, 1), "sm_120"),
    ((13, 0), None),           # a newer major version needs PTX
])
def test_kernel_for_on_the_pypi_cuda_wheel(capability, expected):
    assert course_device.kernel_for(capability, course_device.PYPI_CUDA_ARCHS) == expected
    assert course_device.arch_supported(capability, course_device.PYPI_CUDA_ARCHS) == bool(expected)


def test_ptx_runs_on_newer_gpus_and_arch_specific_code_on_its_own_only():
    archs = ["sm_80", "sm_90a", "compute_90"]
    assert course_device.kernel_for((8, 6), archs) == "sm_80"       # a binary before PTX
    assert course_device.kernel_for((9, 0), archs) == "sm_90a"
    assert course_device.kernel_for((12, 0), archs) == "compute_90"  # compiled by the driver
    assert course_device.kernel_for((7, 5), archs) is None            # PTX never runs older


def test_amd_targets_must_be_in_the_list_by_name():
    assert course_device.kernel_for("gfx90a:sramecc+:xnack-", ["gfx90a", "gfx942"]) == "gfx90a"
    assert not course_device.arch_supported("gfx1031", course_device.ROCM_62_ARCHS)
    assert course_device.arch_supported("gfx1030", course_device.ROCM_62_ARCHS)
    assert course_device.kernel_for((9, 0), course_device.ROCM_62_ARCHS) is None


@pytest.mark.parametrize("bad", ["7.5", 75, (7,), "sm_75"])
def test_a_capability_in_another_form_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="get_device_capability"):
        course_device.kernel_for(bad, ["sm_75"])


def test_the_measured_pypi_list_is_pytorchs_own_table_for_cuda_13():
    """torch 2.13 keeps the arch lists of its CUDA wheels (PYTORCH_RELEASES_CODE_CC, in sync with
    its build script); the list measured from PyPI's 2.13.0+cu130 must be that table's."""
    table = getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", None)
    if table is None:
        pytest.skip(f"torch {torch.__version__} has no PYTORCH_RELEASES_CODE_CC")
    measured = {int(a.split("_")[1]) for a in course_device.PYPI_CUDA_ARCHS}
    assert measured == table["13.0"]["x86_64"]
    if torch.version.cuda == "13.0" and torch.__version__.startswith("2.13"):
        assert tuple(torch.cuda.get_arch_list()) == course_device.PYPI_CUDA_ARCHS


def test_kernel_for_agrees_with_pytorchs_own_rule():
    """torch.cuda._code_compatible_with_device (torch 2.13) for discrete GPUs' capabilities."""
    compatible = getattr(torch.cuda, "_code_compatible_with_device", None)
    if compatible is None:
        pytest.skip(f"torch {torch.__version__} has no _code_compatible_with_device")
    codes = [50, 60, 70, 75, 80, 86, 89, 90, 100, 120]
    for device_cc in [50, 52, 60, 61, 70, 75, 80, 86, 89, 90, 100, 103, 120]:
        for code in codes:
            capability = (device_cc // 10, device_cc % 10)
            ours = course_device.arch_supported(capability, [f"sm_{code}"])
            assert ours == compatible(device_cc, code), (capability, code)


def test_without_a_gpu_the_cells_check_colabs_and_kaggles_gpus():
    _, printed = run(ARCH_LIST, ARCH_CHECK)
    lines = printed.splitlines()
    assert any(line.startswith("Tesla T4 (Colab, Kaggle)     7.5  runs the sm_75 code")
               for line in lines)
    assert "Tesla P100 (Kaggle)          6.0  NO code for it in this build" in lines
    assert "(yours)" not in printed


@pytest.mark.parametrize("model, verdict", [
    ("T4", "7.5  runs the sm_75 code"), ("H100", "9.0  runs the sm_90 code"),
    ("P100", "6.0  NO code for it in this build"),
])
def test_on_a_gpu_the_cell_checks_the_learners_own(model, verdict):
    with fakecuda.fake_gpu(model, nvidia_smi=False, children=False):
        available = torch.cuda.is_available()        # True on the P100 as well
        _, printed = run(ARCH_LIST, ARCH_CHECK)
    assert available
    name = fakecuda.MODELS[model]["name"]
    assert f"{name + ' (yours)':<28} {verdict}" in printed.splitlines()


# --------------------------------------------------------------------------- AMD's ROCm
ROCM = cell_with("gcnArchName")


def test_without_an_amd_gpu_the_cell_checks_two_radeon_cards():
    _, printed = run(ROCM)
    assert printed.splitlines() == ["RX 6800 XT (gfx1030): in a ROCm 6.2 wheel's list",
                                    "RX 6700 XT (gfx1031): NOT in a ROCm 6.2 wheel's list"]


@pytest.mark.parametrize("gfx, verdict", [
    ("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack- runs gfx90a"),
    ("gfx1031", "gfx1031 runs NOTHING of ['gfx90a', 'gfx942', 'gfx1030']"),
])
def test_on_a_rocm_build_the_cell_checks_the_gpus_target(monkeypatch, gfx, verdict):
    monkeypatch.setattr(torch.version, "hip", "7.2.26015")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: SimpleNamespace(gcnArchName=gfx))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["gfx90a", "gfx942", "gfx1030"])
    _, printed = run(ROCM)
    assert printed.strip() == verdict
