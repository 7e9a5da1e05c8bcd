"""Every PyTorch episode picks its device as episode 2 teaches: CUDA (or ROCm), Apple's MPS,
Intel's XPU, else the CPU; an operation missing on MPS is named, never a crash."""

from __future__ import annotations

import pytest
import torch

from gpucourse import device as course_device, fakecuda
from taught import assert_same_function

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
