"""Episode 6's cells: the lessons of its child processes written in cells and kept equal to the
modules that run them, the halving searches, the device choice on every backend, the sizes file,
and the answer to its prediction beside the course's GPU record.

The cells are executed here as a learner runs them, in one namespace, on this CPU-only machine;
Apple's and Intel's GPUs are faked at torch's C layer (``fakecuda.fake_backend``), which chooses
devices but runs no kernels.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
from types import SimpleNamespace

import pytest
import torch

from gpucourse import memory, settings
from gpucourse.children import fragmentation_child, tf_memory_child
from gpucourse.fakes import fakecuda
from gpucourse.memory import MIB
import taught
from taught import ROOT, assert_same_function, cells, cells_calling, code_cells, prediction

EPISODE = "episodes/06-out-of-memory.ipynb"
RECORD = ROOT / "gpucourse" / "references" / "nvidia-h100-80gb-hbm3.json"


def code_cell(marker: str) -> str:
    return taught.code_cell(EPISODE, marker)


def run(sources: list[str], namespace: dict | None = None) -> dict:
    return taught.run_cells(EPISODE, sources, namespace)


# --------------------------------------------------------------------------- the taught lines

@pytest.mark.parametrize("name, helper", [
    ("use_memory_growth", tf_memory_child.use_memory_growth),
    ("halve_until_it_trains", tf_memory_child.halve_until_it_trains),
    ("fragment_then_ask", fragmentation_child.fragment_then_ask),
])
def test_the_child_processes_run_the_functions_the_cells_teach(name, helper):
    assert_same_function(EPISODE, name, helper)


def test_no_lesson_is_left_in_a_markdown_fence():
    fences = [c for c in cells(EPISODE) if c["cell_type"] == "markdown" and "```" in "".join(c["source"])]
    assert not fences, "episode 6's code is in runnable cells; a fence here needs a reason"


class ResourceExhaustedError(Exception):
    """What TensorFlow raises when its allocator cannot serve a request."""


FAKE_TF = SimpleNamespace(errors=SimpleNamespace(ResourceExhaustedError=ResourceExhaustedError))


def test_the_tensorflow_search_halves_after_each_out_of_memory_error():
    halve = tf_memory_child.halve_until_it_trains
    tried = []

    def step(batch):
        tried.append(batch)
        if batch > 100:
            raise ResourceExhaustedError(f"OOM when allocating tensor with shape[{batch},1024]")

    assert halve(FAKE_TF, step, 1024) == 64
    assert tried == [1024, 512, 256, 128, 64]
    assert halve(FAKE_TF, lambda batch: step(10**9), 8) == 0      # nothing fits: 0, not a loop
    with pytest.raises(ValueError):                                # other errors are the learner's
        halve(FAKE_TF, lambda batch: int("not a batch"), 8)


def test_memory_growth_is_set_on_the_one_gpu_tensorflow_may_see():
    calls = []
    config = SimpleNamespace(
        set_visible_devices=lambda devices, kind: calls.append(("visible", devices, kind)),
        experimental=SimpleNamespace(
            set_memory_growth=lambda gpu, growth: calls.append(("growth", gpu, growth))))
    tf_memory_child.use_memory_growth(SimpleNamespace(config=config), "GPU:0", True)
    assert calls == [("visible", ["GPU:0"], "GPU"), ("growth", "GPU:0", True)]


def test_the_pytorch_search_recovers_outside_the_except_block_and_halves():
    """The cell's function, run against a TensorMeter budget of 1 MiB: each try needs 2 KiB a
    sample, so 1024 samples do not fit and 512 do, once the failed tries' tensors are gone."""
    namespace = run([code_cell("def halve_until_it_fits")], {"torch": torch, "gc": gc})
    meter = memory.TensorMeter()

    def step(batch):
        activations = torch.zeros(batch, 256)       # 1 KiB a sample, alive while the try runs
        return activations + 1                      # and as much again

    with meter.budget(1 * MIB):
        assert namespace["halve_until_it_fits"](step, 4096) == 512
    assert meter.allocated() == 0


def test_fragmenting_a_budget_without_segments_leaves_room_for_640_mib():
    """On a CPU the TensorMeter has no segments: after the holes, 640 MiB fits in 1.5 GiB but
    not in 1.1 GiB (512 MiB of the tensors stay)."""
    meter = memory.TensorMeter()
    with meter.budget(1536 * MIB):
        report = fragmentation_child.fragment_then_ask(torch.device("cpu"), meter)
    assert report == {"allocated": 512 * MIB, "reserved": 512 * MIB, "640 MiB": "fits"}
    with meter.budget(1100 * MIB):
        report = fragmentation_child.fragment_then_ask(torch.device("cpu"), meter)
    assert report["640 MiB"].startswith("out of memory: ")
    line = fragmentation_child.describe(report)
    assert line == "512.00 MiB allocated, 512.00 MiB reserved; 640 MiB: out of memory"


# --------------------------------------------------------------------------- short outputs

def test_the_tensorflow_search_is_one_line_of_output():
    report = {"tensorflow": "2.20.0", "device": "GPU:0", "memory growth": True,
              "used before (MiB)": 1.0, "used after (MiB)": 517.0,
              "memory info with 4 MiB": {"current": 4 * MIB, "peak": 4 * MIB},
              "memory info at the end": {"current": 5 * MIB, "peak": 900 * MIB},
              "halving search": {"tries": [2**24, 2**23, 2**22], "seconds": 12.3},
              "first error": "ResourceExhaustedError: OOM when allocating tensor with "
                             "shape[16777216,1024] and type float on /job:localhost/...",
              "largest batch found": 2**22}
    lines = tf_memory_child.describe(report).splitlines()
    assert len(lines) == 3
    assert lines[0] == ("TensorFlow 2.20.0 on GPU:0, memory growth: on; nvidia-smi: 1 MiB used "
                        "before, 517 MiB after a 4 MiB tensor")
    assert lines[2] == ("halving search: batch 16,777,216 → 4,194,304 in 3 tries (12 s); "
                        "first: OOM when allocating tensor with shape[16777216,1024]")


def test_the_tensorflow_cell_says_skipped_in_one_line_without_tensorflow(tmp_path, monkeypatch,
                                                                         capsys):
    """Where TensorFlow is missing (the course's H100 record ran without it) the child's
    ModuleNotFoundError reaches the notebook as one line, not a traceback."""
    shadow = tmp_path / "tensorflow"
    shadow.mkdir()
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorflow'\", name='tensorflow')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    namespace = {"meter": memory.TensorMeter(), "on_cuda": False, "sys": sys,
                 "device": torch.device("cpu"), "tf_memory_child": tf_memory_child}
    run([code_cell("tf_memory_child.run(")], namespace)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("Skipped: No module named 'tensorflow'")
    assert "pip install tensorflow" in out and namespace["report"] is None


# --------------------------------------------------------------------------- the device

def test_the_device_is_chosen_as_episode_2_teaches():
    chosen = cells_calling(EPISODE, "course_device.pick_device")
    assert len(chosen) == 1 and "print(course_device.describe_choice(device))" in chosen[0]
    code = "\n".join(code_cells(EPISODE))
    assert not re.search(r"torch\.device\(\s*[\"']cuda[\"']\s*if", code)


@pytest.mark.parametrize("kind, expected", [("mps", torch.device("mps")),
                                            ("xpu", torch.device("xpu", 0))])
def test_apples_and_intels_gpus_are_picked_and_metered_by_counting_tensors(kind, expected, capsys):
    with fakecuda.fake_backend(kind):
        namespace = run(taught.first_screen(EPISODE))
    out = capsys.readouterr().out.splitlines()
    assert namespace["device"] == expected and not namespace["on_cuda"]
    assert out[0].startswith(f"device: {kind} (") and out[1] == namespace["SIZES"].describe()
    assert isinstance(namespace["meter"], memory.TensorMeter)     # no CUDA statistics to read
    assert namespace["SIZES"].mode == "quick" and namespace["gpu_name"] is None


# --------------------------------------------------------------------------- sizes

def test_the_sizes_file_has_the_same_keys_in_each_row_and_the_notebook_reads_it():
    table = json.loads((settings.SIZES_DIR / "ep06.json").read_text())

    def keys(row):
        return {k: keys(v) if isinstance(v, dict) else None for k, v in row.items()}

    assert set(table) == set(settings.MODES)
    assert keys(table["full"]) == keys(table["reduced"]) == keys(table["quick"])
    assert 'SIZES = settings.sizes("ep06", gpu_available=course_device.cuda_usable())' in \
        code_cell("settings.sizes(")
    assert not re.search(r"\}\[MODE\]", "\n".join("".join(c["source"]) for c in cells(EPISODE)))
    # the whole GPU at full size; everywhere else a budget, larger on CUDA (its 20 MiB segments)
    assert table["full"]["check"]["cuda_budget"] is None
    for row in table.values():
        assert row["cuda_budget"] >= row["budget"]


# --------------------------------------------------------------------------- predict, then reveal

def test_the_prediction_is_answered_after_the_measurement_with_the_recorded_h100_figures():
    between, answer = prediction(EPISODE)
    assert any("peak_of(" in text for text in between)
    assert any('key_figure(f"ep06.{how}_time_ratio"' in text for text in between)
    assert "recorded on an NVIDIA H100 80GB HBM3 (course record, 2026-11-26)" in answer.replace(
        "\n", " ").replace("Recorded", "recorded")
    figures = json.loads(RECORD.read_text())["figures"]
    for how in ("checkpoint", "accumulate", "autocast"):
        for what in ("peak", "time"):
            value = figures[f"ep06.{how}_{what}_ratio"]["value"]
            assert f"{value:.3g} × " in answer, f"the answer should quote {how}'s {what} ratio"
