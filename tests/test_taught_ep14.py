"""Episode 14's sizes, its cells on every device, and its predict-then-reveal.

Episode 14 goes on from episode 10 with the same model, loaded by the same first cells
(device, sizes, dtype); they run here with Apple's and Intel's GPUs faked
(``fakecuda.fake_backend``) and under the fake CUDA runtime. The CUDA-only parts (fused
attention probes, the FP8 cache's rounding, QLoRA's bitsandbytes) say so or take another way
elsewhere. The prediction on the math backend's peak is answered with the H100 record's
figure as ``reference.key_figure`` prints it.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from gpucourse import fakecuda, feasibility, llm, reference, settings
from taught import ROOT, cells_calling, code_cell, code_cells, prediction, run_marked

EPISODE = "episodes/14-cheaper-language-model.ipynb"


def cell(marker: str) -> str:
    return code_cell(EPISODE, marker)


def run(markers, namespace: dict | None = None) -> tuple[dict, str]:
    return run_marked(EPISODE, markers, namespace)


FIRST_SCREEN = ["print(llm.import_libraries())", "course_device.pick_device()",
                'settings.sizes("ep14"', "def weight_dtype("]


@pytest.fixture(autouse=True, scope="module")
def libraries_imported_first():
    """transformers and torchao imported before any test fakes a GPU, as the notebook's imports
    cell does: imported under the fake CUDA runtime, torch._dynamo looks for CUDA streams
    that this CPU build lacks and the import fails."""
    llm.import_libraries()


@pytest.fixture
def full_size(monkeypatch):
    """Sizes as a learner gets them: not the test suite's quick mode."""
    monkeypatch.delenv("GPUCOURSE_QUICK", raising=False)


# --------------------------------------------------------------------------- sizes

def test_the_sizes_come_from_the_episodes_file_and_no_mode_table_is_left():
    table = json.loads((settings.SIZES_DIR / "ep14.json").read_text(encoding="utf-8"))
    assert set(table) == set(settings.MODES)
    keys = {mode: set(row) for mode, row in table.items()}
    assert keys["full"] == keys["reduced"] == keys["quick"]
    assert feasibility.full_sizes(ROOT / EPISODE)["SIZES"] == table["full"]
    assert not any(re.search(r"\}\s*\[MODE\]", source) for source in code_cells(EPISODE))


def test_the_model_keeps_episode_10s_layers_in_every_mode():
    """The same model as episode 10, so the same number of layers in each mode."""
    tables = {ep: json.loads((settings.SIZES_DIR / f"{ep}.json").read_text(encoding="utf-8"))
              for ep in ("ep10", "ep14")}
    for mode in settings.MODES:
        assert tables["ep14"][mode]["layers"] == tables["ep10"][mode]["layers"], mode


def test_the_largest_prefill_quoted_is_episode_10s():
    source = cell("full_batch, full_tokens = ")
    table = json.loads((settings.SIZES_DIR / "ep10.json").read_text(encoding="utf-8"))
    quoted = re.search(r"full_batch, full_tokens = (\d+), (\d+)", source)
    assert (int(quoted[1]), int(quoted[2])) == (max(table["full"]["batches"]),
                                                max(table["full"]["contexts"]))


# --------------------------------------------------------------------------- every device

def test_the_device_is_chosen_as_episode_2_teaches():
    chosen = cells_calling(EPISODE, "course_device.pick_device")
    assert len(chosen) == 1 and "print(course_device.describe_choice(device))" in chosen[0]
    assert not re.search(r"torch\.device\(\s*[\"']cuda[\"']\s*if", "\n".join(code_cells(EPISODE)))


@pytest.mark.parametrize("kind, name", [("mps", "Apple GPU (MPS)"),
                                        ("xpu", "Intel(R) Arc(TM) A770")])
def test_apple_and_intel_gpus_are_chosen_with_16_bit_weights(kind, name, full_size, monkeypatch):
    monkeypatch.setattr(torch.xpu, "get_device_name", lambda device=None: "Intel(R) Arc(TM) A770")
    with fakecuda.fake_backend(kind):
        ns, out = run(FIRST_SCREEN)
    assert ns["device"].type == kind and ns["gpu_name"] == name
    assert f"device: {kind} (" in out and ns["SIZES"].describe() in out
    assert ns["dtype"] == torch.float16


@pytest.mark.parametrize("gpu, dtype", [("T4", torch.float16), ("H100", torch.bfloat16)])
def test_nvidia_gpus_get_bfloat16_only_where_they_run_it_natively(gpu, dtype, full_size):
    with fakecuda.fake_gpu(gpu, nvidia_smi=False, children=False):
        ns, out = run(FIRST_SCREEN)
        assert ns["device"] == torch.device("cuda:0") and ns["dtype"] == dtype
    assert ns["SIZES"].mode == "full" and ns["SIZES"]["layers"] is None
    assert out.count("device: cuda:0 (") == 1


def test_the_cpu_keeps_float32_and_the_reduced_sizes(full_size):
    ns, out = run(FIRST_SCREEN)
    assert ns["device"] == torch.device("cpu") and ns["gpu_name"] is None
    assert ns["dtype"] == torch.float32 and ns["SIZES"].mode == "reduced"
    assert "device: cpu" in out


def test_cuda_only_parts_say_so_or_take_another_way_elsewhere():
    assert 'llm.bitsandbytes_status(device.type == "cuda")' in cell("bitsandbytes_status")
    # float8 tensors do not exist on MPS: the FP8 cache is rounded on the CPU there
    assert 'rounding = "cpu" if device.type == "mps" else device' in cell("def next_logits(")
    probes = cell("probed = [SDPBackend.MATH")
    assert 'if device.type not in ("cuda", "cpu"):' in probes
    assert cell("repeated = attention_peak(").startswith("if fused:")


# --------------------------------------------------------------------------- predict, then reveal

def test_the_prediction_comes_before_the_attention_peaks_and_its_answer_after_them():
    between, _ = prediction(EPISODE)
    assert any("attention_peak(call, kernel" in text for text in between)
    assert any('"ep14.sdpa_math_peak_growth"' in text for text in between)
    assert not any("ep10.sdpa_math_peak_growth" in text for text in code_cells(EPISODE))


def test_the_answer_quotes_the_course_record_as_the_notebook_prints_it():
    _, answer = prediction(EPISODE)
    record, growth = reference.gpu_reference("ep14.sdpa_math_peak_growth")
    assert f"**{growth:.3g} ×**" in answer              # as key_figure prints it: 3.95 ×
    gpu = record["hardware"]["gpu_name"]
    assert f"recorded on an {gpu} (course record, {record['date']})" in answer.replace("\n", " ")
    figure = reference.gpu_figure(record, "ep14.sdpa_math_peak_growth")
    assert figure["notebook"] == EPISODE
