"""The first screen episodes 10 and 14 share (episode 14 loads the same model the same way): the
device chosen as episode 2 teaches, 16-bit weights on Apple's and Intel's GPUs (faked with
``fakecuda.fake_backend``), bfloat16 only on NVIDIA GPUs that run it natively (under the fake
CUDA runtime), and float32 with the reduced sizes on a CPU."""

from __future__ import annotations

import re

import pytest
import torch

from gpucourse import llm
from gpucourse.fakes import fakecuda
from taught import cells_calling, code_cells, run_marked

FIRST_SCREENS = {
    "episodes/10-language-model.ipynb": [
        "import torch.nn.functional as F", "print(llm.import_libraries())",
        "course_device.pick_device()", 'settings.sizes("ep10"', "def weight_dtype("],
    "episodes/14-cheaper-language-model.ipynb": [
        "print(llm.import_libraries())", "course_device.pick_device()", 'settings.sizes("ep14"',
        "dtype = llm.weight_dtype(device)"],
}
EPISODES = list(FIRST_SCREENS)


@pytest.fixture(autouse=True, scope="module")
def libraries_imported_first():
    """transformers and torchao imported before any test fakes a GPU, as the notebooks' imports
    cells do: imported under the fake CUDA runtime, torch._dynamo looks for CUDA streams
    that this CPU build lacks and the import fails."""
    llm.import_libraries()


@pytest.fixture
def full_size(monkeypatch):
    """Sizes as a learner gets them: not the test suite's quick mode."""
    monkeypatch.delenv("GPUCOURSE_QUICK", raising=False)


def run(episode: str) -> tuple[dict, str]:
    return run_marked(episode, FIRST_SCREENS[episode])


@pytest.mark.parametrize("episode", EPISODES)
def test_the_device_is_chosen_as_episode_2_teaches(episode):
    chosen = cells_calling(episode, "course_device.pick_device")
    assert len(chosen) == 1 and "print(course_device.describe_choice(device))" in chosen[0]
    assert not re.search(r"torch\.device\(\s*[\"']cuda[\"']\s*if", "\n".join(code_cells(episode)))


@pytest.mark.parametrize("episode", EPISODES)
@pytest.mark.parametrize("kind, name", [("mps", "Apple GPU (MPS)"), ("xpu", "Intel(R) Arc(TM) A770")])
def test_apple_and_intel_gpus_are_chosen_with_16_bit_weights(episode, kind, name, full_size,
                                                              monkeypatch):
    monkeypatch.setattr(torch.xpu, "get_device_name", lambda device=None: "Intel(R) Arc(TM) A770")
    with fakecuda.fake_backend(kind):
        ns, out = run(episode)
    assert ns["device"].type == kind and ns["gpu_name"] == name
    assert f"device: {kind} (" in out and ns["SIZES"].describe() in out
    assert ns["dtype"] == torch.float16


@pytest.mark.parametrize("episode", EPISODES)
@pytest.mark.parametrize("gpu, dtype", [("T4", torch.float16), ("H100", torch.bfloat16)])
def test_nvidia_gpus_get_bfloat16_only_where_they_run_it_natively(episode, gpu, dtype, full_size):
    with fakecuda.fake_gpu(gpu, nvidia_smi=False, children=False):
        ns, out = run(episode)
        assert ns["device"] == torch.device("cuda:0") and ns["dtype"] == dtype
    assert ns["SIZES"].mode == "full" and ns["SIZES"]["layers"] is None
    assert out.count("device: cuda:0 (") == 1


@pytest.mark.parametrize("episode", EPISODES)
def test_the_cpu_keeps_float32_and_the_reduced_sizes(episode, full_size):
    ns, out = run(episode)
    assert ns["device"] == torch.device("cpu") and ns["gpu_name"] is None
    assert ns["dtype"] == torch.float32 and ns["SIZES"].mode == "reduced"
    assert "device: cpu" in out
