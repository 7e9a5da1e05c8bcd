"""Episode 7 teaches its lines in cells: the bfloat16-or-float16 capability test (kept equal to
``features.amp_dtype_for``), PyTorch's own profiler table before the course's, and the lines that
make the host wait for the GPU every step, counted by the profiler. Its device is chosen as
episode 2 teaches, Apple's and Intel's GPUs included, and its sizes come from its sizes file."""

from __future__ import annotations

import ast
import json
import re

import pytest
import torch

from gpucourse import features, profiling, reference, settings
from gpucourse.fakes.fakecuda import fake_backend, fake_gpu
from taught import (assert_same_function, cell_function, code_cell, code_cells, markdown_cells,
                    prediction, run_marked)

EP07 = "episodes/07-faster-training.ipynb"


def cell_with(text: str) -> str:
    return code_cell(EP07, text)


def run_cells(texts, namespace=None) -> tuple[dict, str]:
    return run_marked(EP07, texts, namespace)


SETUP = ("import copy", "from gpucourse import device as course_device",
         "course_device.pick_device()", "gpu_name = ")


# --------------------------------------------------------------------------- the capability test

def test_the_capability_cell_is_the_helper():
    assert_same_function(EP07, "amp_dtype_for", features.amp_dtype_for)


@pytest.mark.parametrize("model, dtype", [("T4", torch.float16), ("G4", torch.bfloat16),
                                          ("L4", torch.bfloat16), ("A100", torch.bfloat16),
                                          ("H100", torch.bfloat16)])
def test_the_cells_capability_test_picks_bfloat16_from_ampere_on(model, dtype):
    namespace = {"torch": torch}
    exec(compile(ast.Module([cell_function(EP07, "amp_dtype_for")], []), EP07, "exec"), namespace)
    with fake_gpu(model):
        chosen, why = namespace["amp_dtype_for"](torch.device("cuda"))
        assert (chosen, why) == features.amp_dtype_for("cuda")
    assert chosen == dtype and "GradScaler" in why
    assert ("float16 + GradScaler" in why) == (dtype == torch.float16)


@pytest.mark.parametrize("kind", ["cpu", "mps", "xpu"])
def test_off_cuda_autocast_runs_in_bfloat16_and_says_where(kind):
    chosen, why = features.amp_dtype_for(kind)
    assert chosen == torch.bfloat16 and why.startswith(f"{kind}:") and "no GradScaler" in why


def test_the_amp_cells_follow_the_device_type():
    train = cell_with("def train(")
    assert "torch.autocast(device.type" in train and "GradScaler(device.type" in train
    assert "amp_dtype_for(device)" in cell_with("amp_dtype, why = ")


# --------------------------------------------------------------------------- the profiler's table

def test_pytorchs_own_table_comes_before_any_course_table():
    sources = code_cells(EP07)
    own = [i for i, s in enumerate(sources) if "prof.key_averages().table(" in s]
    course = [i for i, s in enumerate(sources) if "self_time_table(" in s and "import" not in s]
    assert own and course and own[0] < course[0], (own, course)
    call = next(n for n in ast.walk(ast.parse(sources[own[0]]))
                if isinstance(n, ast.Call) and ast.unparse(n.func) == "prof.key_averages().table")
    assert {k.arg for k in call.keywords} == {"sort_by", "row_limit"}


def test_quiet_profiler_log_leaves_a_level_the_user_chose(monkeypatch):
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    profiling.quiet_profiler_log()
    import os

    assert os.environ["KINETO_LOG_LEVEL"] == profiling.KINETO_SILENT
    monkeypatch.setenv("KINETO_LOG_LEVEL", "2")
    profiling.quiet_profiler_log()
    assert os.environ["KINETO_LOG_LEVEL"] == "2"


# --------------------------------------------------------------------------- a sync every step

def test_the_sync_question_names_what_synchronises():
    text = next(m for m in markdown_cells(EP07)
                if "single-number" in m or "_local_scalar_dense" in m)
    for line in (".item()", "print(loss)", ".cpu()", "torch.cuda.synchronize()"):
        assert line in text, f"the sync section does not name {line}"


def test_the_profiler_counts_one_host_read_per_step_only_when_read_every_step(monkeypatch):
    monkeypatch.setenv("KINETO_LOG_LEVEL", profiling.KINETO_SILENT)
    namespace, _ = run_cells(SETUP + ("X_dev, y_dev = ", "def make_model():", "def batches(",
                                      "def train(", "def host_reads("))
    steps = namespace["SIZES"]["steps"]
    assert namespace["host_reads"](True) == steps
    assert namespace["host_reads"](False) == 0


# --------------------------------------------------------------------------- every device

@pytest.mark.parametrize("kind", ["mps", "xpu"])
def test_apple_and_intel_gpus_are_picked_and_named(kind):
    with fake_backend(kind):
        namespace, out = run_cells(SETUP)
        assert namespace["device"].type == kind
        assert out.splitlines()[0] == namespace["course_device"].describe_choice(kind)
        assert namespace["gpu_name"] == f"{kind} GPU" and namespace["on_gpu"]
    assert out.splitlines()[1] == namespace["SIZES"].describe()


def test_a_cpu_is_named_as_none():
    namespace, out = run_cells(SETUP)
    assert namespace["device"] == torch.device("cpu") and namespace["gpu_name"] is None
    assert out.startswith("device: cpu")


def test_cuda_only_calls_are_guarded():
    for source in code_cells(EP07)[1:]:
        for line in source.splitlines():
            if re.search(r"torch\.cuda\.(?!is_available)|ProfilerActivity\.CUDA", line):
                assert re.search(r'device\.type [!=]= "cuda"', source), line


# --------------------------------------------------------------------------- sizes

def test_the_sizes_come_from_the_sizes_file():
    table = json.loads((settings.SIZES_DIR / "ep07.json").read_text())
    assert set(table) == set(settings.MODES)
    assert len({tuple(row) for row in table.values()}) == 1, "the three rows need the same keys"
    assert 'settings.sizes("ep07", gpu_available=course_device.cuda_usable())' in cell_with(
        "SIZES = ")
    assert not any(re.search(r"\}\[MODE\]", s) for s in code_cells(EP07))


# --------------------------------------------------------------------------- predict, then reveal

def test_the_answer_quotes_the_recorded_figures():
    _, answer = prediction(EP07)
    record, amp = reference.gpu_reference("ep07.amp_speedup")
    assert "NVIDIA H100 80GB HBM3 (course record, 2026-11-26)" in answer
    assert record["date"] == "2026-11-26" and f"{amp:.3g}×" in answer
    if amp < 1:
        assert "slower" in answer.lower()
    _, compiled = reference.gpu_reference("ep07.compile_speedup")
    compile_text = next(m for m in markdown_cells(EP07) if "ep07.compile_speedup" in m)
    assert f"{compiled:.3g}×" in compile_text
    if compiled < 1:
        assert "slower" in compile_text.lower()
