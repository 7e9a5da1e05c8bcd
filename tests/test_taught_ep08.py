"""Episode 8 as a learner reads it: PyTorch's own profiler table before the course's, profiles
that keep their events (no cycle warning), sizes from gpucourse/sizes/ep08.json, the device
chosen as episode 2 teaches (Apple's and Intel's GPUs included), CUDA-only cells that say why
they skip, and a predict-then-reveal answer that quotes the course's H100 record."""

from __future__ import annotations

import ast
import json
import re
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from gpucourse import device as course_device, feasibility, reference, settings
from gpucourse.fakes import fakecuda
from taught import ROOT, cells_calling, code_cell, code_cells, prediction, run_cells

EPISODE = "episodes/08-feeding-the-gpu.ipynb"
RECORD = ROOT / "gpucourse" / "references" / "nvidia-h100-80gb-hbm3.json"


def _first_calling(dotted: str) -> int:
    """Index, among the code cells, of the first cell that calls ``dotted``."""
    sources = code_cells(EPISODE)
    first = cells_calling(EPISODE, dotted)
    assert first, f"{EPISODE} has no cell calling {dotted}"
    return sources.index(first[0])


# --- the taught line: PyTorch's own profile table ------------------------------------------------

def test_pytorchs_own_table_comes_before_the_course_table():
    own = _first_calling("prof.key_averages().table")
    course = _first_calling("self_time_table")
    assert own < course, "show prof.key_averages().table(...) before the course's self_time_table"
    call = next(n for n in ast.walk(ast.parse(code_cells(EPISODE)[own]))
                if isinstance(n, ast.Call) and ast.unparse(n.func) == "prof.key_averages().table")
    assert {k.arg for k in call.keywords} >= {"sort_by", "row_limit"}


def test_a_profile_with_acc_events_runs_here_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with profile(activities=[ProfilerActivity.CPU], acc_events=True) as prof:
            torch.ones(8) @ torch.ones(8)
    names = {e.key for e in prof.key_averages()}
    assert any("dot" in name or "matmul" in name for name in names), names


# --- sizes off the first screen --------------------------------------------------------------------

def test_the_sizes_come_from_the_episodes_file_with_three_like_rows():
    table = json.loads((settings.SIZES_DIR / "ep08.json").read_text())
    assert set(table) == set(settings.MODES)
    keys = {mode: set(row) for mode, row in table.items()}
    assert keys["full"] == keys["reduced"] == keys["quick"], keys
    source = "\n".join(code_cells(EPISODE))
    assert 'settings.sizes("ep08", gpu_available=course_device.cuda_usable())' in source
    assert "print(SIZES.describe())" in source
    assert not re.search(r"\}\[MODE\]", source), "a three-mode table is still in the notebook"
    assert feasibility.full_sizes(ROOT / EPISODE)["SIZES"] == table["full"]


# --- every device -------------------------------------------------------------------------------------

def _run_setup(namespace: dict) -> None:
    """The import cell, the sizes-and-device cell and the cell that derives from the device."""
    markers = ("from gpucourse import device as course_device",
               "device = course_device.pick_device()", "sync = synchronizer(device)")
    run_cells(EPISODE, [code_cell(EPISODE, marker) for marker in markers], namespace)


@pytest.mark.parametrize("kind, words", [("mps", "device: mps (Apple's GPU)"),
                                         ("xpu", "device: xpu (Intel's GPU)")])
def test_an_apple_or_intel_gpu_is_chosen_and_named(kind, words, capsys):
    namespace: dict = {}
    with fakecuda.fake_backend(kind):
        _run_setup(namespace)
    out = capsys.readouterr().out
    assert namespace["device"].type == kind and not namespace["on_cuda"]
    assert words in out
    assert namespace["SIZES"].mode in ("reduced", "quick")   # no CUDA: not the full sizes
    assert namespace["gpu_name"] == str(namespace["device"])
    assert namespace["activities"] == [ProfilerActivity.CPU]


def test_a_cuda_gpu_is_chosen_and_its_name_files_the_key_figures(capsys):
    namespace: dict = {}
    with fakecuda.fake_gpu("T4", nvidia_smi=False, children=False):
        _run_setup(namespace)
    out = capsys.readouterr().out
    assert namespace["device"] == torch.device("cuda:0") and namespace["on_cuda"]
    assert f"device: cuda:0 ({fakecuda.MODELS['T4']['name']}, NVIDIA)" in out
    assert namespace["gpu_name"] == fakecuda.MODELS["T4"]["name"]
    assert ProfilerActivity.CUDA in namespace["activities"]


def test_the_cpu_files_its_figures_under_no_gpu(capsys):
    namespace: dict = {}
    _run_setup(namespace)
    assert namespace["device"] == torch.device("cpu") and namespace["gpu_name"] is None
    assert "device: cpu (no GPU" in capsys.readouterr().out


def test_no_cell_chooses_cuda_by_hand():
    source = "\n".join(code_cells(EPISODE))
    assert 'torch.device("cuda" if' not in source
    assert len(cells_calling(EPISODE, "course_device.pick_device")) == 1


def _cuda_only_cells():
    """The cells that run only on CUDA: an ``if on_cuda:`` around the whole cell."""
    return [s for s in code_cells(EPISODE)
            if s.startswith("if on_cuda") and "gpu_name =" not in s]


def test_the_cuda_only_cells_are_the_transfers_of_section_1():
    assert len(_cuda_only_cells()) == 8


@pytest.mark.parametrize("source", _cuda_only_cells(), ids=lambda s: s.splitlines()[1].strip()[:30])
def test_each_cuda_only_cell_says_in_one_line_why_it_skips_on_mps(source, capsys):
    exec(source, {"on_cuda": False, "device": torch.device("mps"), "reference": reference})
    lines = capsys.readouterr().out.splitlines()
    if "reference.show" in source:       # the pinned copy: the recorded GPU figures instead
        _, pinned = reference.gpu_reference("ep08.h2d_gbs")
        assert any(f"{pinned:.3g} GB/s" in line and "H100" in line for line in lines), lines
    else:
        assert len(lines) == 1 and lines[0].startswith("Skipped on mps: "), lines


# --- predict, then reveal ------------------------------------------------------------------------------

def test_the_reveal_follows_a_measurement_and_quotes_the_record_as_printed():
    _, text = prediction(EPISODE)         # a measurement between the question and its answer
    record = json.loads(RECORD.read_text())
    figures = record["figures"]
    h2d = figures["ep08.h2d_gbs"]["value"]
    speedup = figures["ep08.pinned_copy_speedup"]["value"]
    assert f"{h2d:.3g} GB/s" in text and f"{speedup:.3g}×" in text
    assert (f"recorded on an {record['hardware']['gpu_name']} (course record, {record['date']})"
            in text)
    pcie = reference.bands()["models"]["NVIDIA H100 SXM"]["pcie_x16_gbs"]
    assert re.search(rf"{h2d / pcie:.0%}".replace("%", " %"), text)
    assert f"{pcie} GB/s" in text


def test_the_record_quoted_in_the_text_is_the_one_the_notebook_prints(capsys):
    reference.show("ep08.h2d_gbs", unit="GB/s")
    reference.show("ep08.pinned_copy_speedup", unit="× (pageable / pinned copy time)")
    out = capsys.readouterr().out
    _, answer = prediction(EPISODE)
    for printed in re.findall(r": ([\d.]+) (?:GB/s|×)", out):
        assert printed in answer, (printed, out)
