"""Every PyTorch episode picks its device as episode 2 teaches: CUDA (or ROCm), Apple's MPS,
Intel's XPU, else the CPU; an operation missing on MPS is named, never a crash. A GPU the
installed PyTorch has no code for (Kaggle's P100 under the CUDA 12.8 wheel) is passed over
with one sentence, and the episode runs at the CPU's size instead of stopping at its first
kernel."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
import torch

from gpucourse import device as course_device
from gpucourse.fakes import fakecuda
from taught import assert_same_function, code_cells, first_screen, run_printed

ROOT = Path(__file__).resolve().parents[1]
PYTORCH_EPISODES = [p for p in sorted((ROOT / "episodes").glob("[0-9][0-9]-*.ipynb"))
                    if "course_device.pick_device()" in p.read_text(encoding="utf-8")]

EPISODE_2 = "episodes/02-finding-your-gpu.ipynb"


def test_episode_2s_cell_is_the_helper_every_later_episode_calls():
    assert_same_function(EPISODE_2, "pick_device", course_device.pick_device)


def test_a_machine_without_a_gpu_gets_the_cpu():
    assert course_device.pick_device() == torch.device("cpu")
    assert course_device.describe_choice("cpu").startswith("device: cpu (no GPU")


@pytest.mark.parametrize("model", ["T4", "H100"])
def test_a_cuda_gpu_comes_first_and_an_index_past_the_count_falls_back(model):
    with fakecuda.fake_gpu(model, count=2, nvidia_smi=False, children=False):
        assert course_device.pick_device() == torch.device("cuda:0")
        assert course_device.pick_device(1) == torch.device("cuda:1")
        assert course_device.pick_device(2) == torch.device("cpu")
        line = course_device.describe_choice(course_device.pick_device())
    assert line == f"device: cuda:0 ({fakecuda.MODELS[model]['name']}, NVIDIA)"


@pytest.mark.parametrize("kind, expected, words", [
    ("mps", torch.device("mps"), "PYTORCH_ENABLE_MPS_FALLBACK"),
    ("xpu", torch.device("xpu", 0), "Intel"),
])
def test_apple_and_intel_gpus_are_chosen_when_there_is_no_cuda(kind, expected, words):
    with fakecuda.fake_backend(kind):
        chosen = course_device.pick_device()
        line = course_device.describe_choice(chosen)
    assert chosen == expected and words in line
    assert course_device.pick_device() == torch.device("cpu")      # the fake is undone


def test_an_operation_missing_on_mps_is_named_and_the_cell_goes_on(capsys):
    missing = NotImplementedError(
        "The operator 'aten::_ctc_loss' is not currently implemented for the MPS device.")
    with course_device.says_if_unsupported(torch.device("mps")):
        raise missing
    out = capsys.readouterr().out
    assert "aten::_ctc_loss" in out and "PYTORCH_ENABLE_MPS_FALLBACK=1" in out


@pytest.mark.parametrize("device, error", [
    ("mps", ValueError("MPS: a shape mismatch of the learner's own")),     # not a missing op
    ("mps", NotImplementedError("abstract method")),                       # not PyTorch's MPS
    ("cpu", NotImplementedError("not currently implemented for the MPS device")),
])
def test_every_other_error_still_stops_the_cell(device, error):
    with pytest.raises(type(error)):
        with course_device.says_if_unsupported(torch.device(device)):
            raise error


# --------------------------------------------------------------------------- a GPU without code

def test_a_gpu_this_build_has_no_code_for_is_passed_over_with_the_reason():
    with fakecuda.fake_gpu("P100", nvidia_smi=False, children=False):
        assert torch.cuda.is_available()                       # it only counts GPUs
        problem = course_device.cuda_problem(0)
        chosen = course_device.pick_device()
        line = course_device.describe_choice(chosen)
        usable = course_device.cuda_usable()
        summary = course_device.backend()
    assert chosen == torch.device("cpu") and not usable
    assert summary.endswith("usable devices: the CPU only")
    assert "Tesla P100-PCIE-16GB" in problem and "compute capability 6.0" in problem
    assert "sm_75" in problem and line == f"device: cpu, because {problem}"


@pytest.mark.parametrize("model", sorted(set(fakecuda.MODELS) - {"P100"}))
def test_every_other_gpu_the_course_names_has_code_in_the_build(model):
    with fakecuda.fake_gpu(model, nvidia_smi=False, children=False):
        assert course_device.cuda_problem(0) is None and course_device.cuda_usable()


def test_an_amd_gpu_is_checked_by_its_gfx_target(monkeypatch):
    class Props:
        gcnArchName = "gfx1031"

    monkeypatch.setattr(torch.version, "hip", "6.2")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(course_device.ROCM_62_ARCHS))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Props())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "AMD Radeon RX 6700 XT")
    assert "gfx1031" in course_device.cuda_problem(0)
    Props.gcnArchName = "gfx1030"
    assert course_device.cuda_problem(0) is None


def test_a_build_that_lists_no_targets_is_trusted(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: [])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (6, 0))
    assert course_device.cuda_problem(0) is None


@pytest.mark.parametrize("path", PYTORCH_EPISODES, ids=lambda p: p.name[:2])
def test_on_a_p100_every_pytorch_episode_runs_on_the_cpu_at_the_cpus_size(path):
    cells = first_screen(path)
    cells += [c for c in code_cells(path)
              if "course_device.pick_device()" in c and c not in cells][:1]
    with mock.patch.dict(os.environ), fakecuda.fake_gpu("P100", nvidia_smi=False, children=False):
        os.environ.pop("GPUCOURSE_QUICK", None)           # the size a learner's run gets
        namespace, printed = run_printed(path, cells)
    assert namespace["device"] == torch.device("cpu"), path.name
    sizes = namespace.get("SIZES")
    assert sizes is None or sizes.mode == "reduced", (path.name, sizes.mode)
    assert "Tesla P100-PCIE-16GB" in printed and "device: cpu, because" in printed
