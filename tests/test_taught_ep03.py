"""Episode 3 as a lesson: XGBoost's device argument written in a cell, the sizes off the first
screen, the device chosen as episode 2 teaches, and a predict-then-reveal answer that quotes
the course's GPU record as the notebook prints it."""

from __future__ import annotations

import ast
import contextlib
import json
import re
import sys

import numpy as np
import pytest
import torch
from sklearn import metrics

from gpucourse import device as course_device, reference, settings, xgb
from gpucourse.fakes.fakecuda import fake_backend, fake_gpu
from gpucourse.timing import crossover
import taught
from taught import ROOT, assert_same_function, cells_calling, code_cells, prediction

EPISODE = "episodes/03-pytorch-classifier.ipynb"
RECORD = ROOT / "gpucourse" / "references" / "nvidia-h100-80gb-hbm3.json"


def _cell(marker: str) -> str:
    return taught.code_cell(EPISODE, marker)


def _run(markers, namespace) -> list[str]:
    """Execute the cells holding ``markers`` in ``namespace``; the lines they printed."""
    return taught.run_marked(EPISODE, markers, namespace)[1].splitlines()


def _record() -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the taught line

def test_the_cells_boosted_trees_is_the_helper_fit_and_score_calls():
    assert_same_function(EPISODE, "boosted_trees", xgb.boosted_trees)


def test_the_timed_fit_trains_the_lessons_own_function():
    (cell,) = cells_calling(EPISODE, "xgb.fit_and_score")
    (call,) = [n for n in ast.walk(ast.parse(cell))
               if isinstance(n, ast.Call) and ast.unparse(n.func) == "xgb.fit_and_score"]
    passed = {k.arg: ast.unparse(k.value) for k in call.keywords}
    assert passed.get("make") == "boosted_trees", (
        "the cell that times XGBoost passes make=boosted_trees, the function the episode wrote")


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0"])
def test_cell_and_helper_build_the_same_classifier(device):
    pytest.importorskip("xgboost")
    namespace: dict = {}
    _run(["def boosted_trees("], namespace)
    from_cell = namespace["boosted_trees"](device, 7, seed=3).get_params()
    assert from_cell == xgb.boosted_trees(device, 7, seed=3).get_params()
    assert (from_cell["device"], from_cell["n_estimators"], from_cell["tree_method"]) == (
        device, 7, "hist")


def _xgboost_cells(device, prints_auc=True):
    """The XGBoost section's three cells on a small table, with ``device`` as chosen."""
    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.5).astype(np.float32)
    X = rng.normal(size=(400, 3)).astype(np.float32)
    X[:, 0] += 2 * y
    namespace = {"X_train": X[:300], "y_train": y[:300], "X_test": X[300:], "y_test": y[300:],
                 "scores": {"ROC AUC": 0.5}, "SIZES": {"xgb_rounds": 3}, "device": device,
                 "metrics": metrics, "xgb": xgb}
    cells = ["def boosted_trees(", "xgb.fit_and_score(", '"ROC AUC on the test set']
    return _run(cells, namespace), namespace


def test_without_xgboost_the_section_prints_one_line_and_goes_on(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", None)      # `import xgboost` now raises ImportError
    with fake_gpu("T4", nvidia_smi=False, children=False):
        lines, namespace = _xgboost_cells(torch.device("cuda:0"))
    assert lines == [xgb.MISSING, "ROC AUC on the test set · MLP: 0.5000"]
    assert namespace["auc"] == {"MLP": 0.5}


def test_on_the_cpu_xgboost_trains_once_and_says_why_there_is_no_gpu_fit():
    pytest.importorskip("xgboost")
    lines, namespace = _xgboost_cells(torch.device("cpu"))
    assert re.fullmatch(r"XGBoost on cpu: fit \d+\.\d\d s, 3 trees", lines[0]), lines
    assert lines[1].startswith("No CUDA GPU here") and len(lines) == 3
    assert set(namespace["auc"]) == {"MLP", "XGBoost, cpu"} and namespace["auc"]["XGBoost, cpu"] > 0.8


def test_a_gpu_xgboost_cannot_reach_is_one_line_not_a_cpu_time_called_gpu():
    pytest.importorskip("xgboost")
    if torch.cuda.is_available():
        pytest.skip("this machine has a real GPU: XGBoost would train there")
    with fake_gpu("T4", nvidia_smi=False, children=False):     # torch sees a GPU, XGBoost does not
        lines, namespace = _xgboost_cells(torch.device("cuda:0"))
    assert lines[0].startswith("XGBoost on cpu: fit")
    assert "no GPU it can use" in lines[1] and lines[2].startswith("ROC AUC on the test set")
    assert len(lines) == 3 and "XGBoost, cuda:0" not in namespace["auc"]


# --------------------------------------------------------------------------- sizes and device

def test_the_sizes_come_from_the_episodes_file_and_every_name_the_cells_use_is_in_it():
    sources = code_cells(EPISODE)
    assert not any("}[MODE]" in source for source in sources), "no three-mode table in a cell"
    assert 'SIZES = settings.sizes("ep03", gpu_available=course_device.cuda_usable())' in _cell(
        "settings.sizes(")
    table = json.loads((settings.SIZES_DIR / "ep03.json").read_text(encoding="utf-8"))
    used = set(re.findall(r"SIZES\[[\"'](\w+)[\"']\]", "\n".join(sources)))
    assert used and all(used <= set(row) for row in table.values()), used


def test_the_recorded_sweep_ran_the_full_rows_widths():
    """The answer quotes the H100 record; it measured the widths the full row sweeps."""
    table = json.loads((settings.SIZES_DIR / "ep03.json").read_text(encoding="utf-8"))
    assert _record()["figures"]["ep03.sweep_seconds"]["value"]["widths"] == table["full"]["widths"]


def _first_cells(backend):
    """Run the episode's imports, sizes and device cells under ``backend`` (a context)."""
    namespace: dict = {}
    with backend:
        lines = _run(["from gpucourse import device as course_device", "settings.sizes(",
                      "course_device.pick_device()"], namespace)
    return lines, namespace


@pytest.mark.parametrize("kind, expected", [("mps", torch.device("mps")),
                                            ("xpu", torch.device("xpu", 0))])
def test_apple_and_intel_gpus_are_the_episodes_device(kind, expected):
    lines, namespace = _first_cells(fake_backend(kind))
    assert namespace["device"] == expected and namespace["on_gpu"] is True
    assert namespace["SIZES"].mode == settings.run_mode(gpu_available=False)
    assert lines[0] == namespace["SIZES"].describe()
    assert lines[1] == course_device.describe_choice(expected)
    assert not any("⚠" in line for line in lines)


def test_a_cuda_gpu_and_no_gpu():
    lines, namespace = _first_cells(fake_gpu("T4", nvidia_smi=False, children=False))
    assert namespace["device"] == torch.device("cuda:0") and "device: cuda:0 (Tesla T4, NVIDIA)" in lines
    lines, namespace = _first_cells(contextlib.nullcontext())
    assert namespace["device"] == torch.device("cpu") and namespace["on_gpu"] is False
    assert any(line.startswith("⚠ Every 'GPU' step below runs on the CPU") for line in lines)


def test_cuda_only_calls_are_asked_for_a_cuda_device():
    for source in code_cells(EPISODE):
        assert 'torch.device("cuda" if' not in source
        cuda_calls = set(re.findall(r"torch\.cuda\.(\w+)", source)) - {"is_available"}
        if cuda_calls:
            assert 'device.type == "cuda"' in source, (cuda_calls, source[:80])


# --------------------------------------------------------------------------- predict, then reveal

def _recorded_curves():
    value = _record()["figures"]["ep03.sweep_seconds"]["value"]
    return value["widths"], {(name, where): value[f"{name}, data {where}"]
                             for name in ("CPU", "GPU") for where in ("resident", "streamed")}


def test_the_crossover_cells_give_the_recorded_figures_from_the_recorded_curves(monkeypatch):
    monkeypatch.delenv("GPUCOURSE_FIGURES", raising=False)
    widths, seconds = _recorded_curves()
    namespace = {"on_gpu": True, "device": torch.device("cuda:0"), "seconds": seconds,
                 "SIZES": {"widths": widths}, "crossover": crossover, "reference": reference,
                 "torch": torch}
    figures = _record()["figures"]
    with fake_gpu("H100", nvidia_smi=False, children=False):
        lines = _run(["the GPU is {verdict}", '"ep03.speedup_widest"'], namespace)
    width = figures["ep03.crossover_width"]["value"]
    assert f"data resident: the GPU is faster from width {width} on" in lines
    assert f"ep03.crossover_width: {width} on NVIDIA H100 80GB HBM3" in lines
    speedup = f"{figures['ep03.speedup_widest']['value']:.3g}"
    assert any(line.startswith(f"ep03.speedup_widest: {speedup} ×") for line in lines), lines


def test_without_a_gpu_the_crossover_cells_show_the_record(monkeypatch):
    monkeypatch.delenv("GPUCOURSE_FIGURES", raising=False)
    namespace = {"on_gpu": False, "reference": reference}
    lines = _run(["the GPU is {verdict}", '"ep03.speedup_widest"'], namespace)
    assert lines[0].startswith("No GPU here")
    width = _record()["figures"]["ep03.crossover_width"]["value"]
    assert any(f"GPU reference for ep03.crossover_width: {width} on NVIDIA H100" in line
               for line in lines), lines


def test_one_prediction_before_the_sweep_and_its_answer_quotes_the_record():
    # the sweep's table and plot are explained in markdown between question and answer
    between, reveal = prediction(EPISODE, only_code_between=False)
    assert any('for width in tqdm(SIZES["widths"]' in t for t in between), "the sweep is measured between"
    record = _record()
    figures, widths_seconds = record["figures"], _recorded_curves()
    widths, seconds = widths_seconds
    assert (f"recorded on an {record['hardware']['gpu_name']} (course record, {record['date']})"
            in reveal)
    assert f"width **{figures['ep03.crossover_width']['value']}**" in reveal
    assert f"**{figures['ep03.speedup_widest']['value']:.3g}×**" in reveal
    gpu, cpu = seconds["GPU", "resident"], seconds["CPU", "resident"]
    for quoted in (f"between {min(gpu) * 1e3:.1f} and {max(gpu) * 1e3:.1f} ms",
                   f"{cpu[0] * 1e3:.1f} ms at width {widths[0]}",
                   f"{cpu[-1] * 1e3:.0f} ms at width {widths[-1]}",
                   f"({record['hardware']['cpu_cores']} cores)"):
        assert quoted in reveal, quoted
    streamed = crossover(widths, seconds["CPU", "streamed"], seconds["GPU", "streamed"])
    also = "also " if streamed == figures["ep03.crossover_width"]["value"] else ""
    assert f"Streamed, that run's crossover was {also}at {streamed}." in reveal
