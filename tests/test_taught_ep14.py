"""Episode 14's sizes, its cells on every device, and its predict-then-reveal.

Episode 14 goes on from episode 10 with the same model, loaded by the same first cells
(device, sizes, dtype), which tests/test_taught_llm_first_screen.py runs for both episodes on
every device. The CUDA-only parts (fused
attention probes, the FP8 cache's rounding, QLoRA's bitsandbytes) say so or take another way
elsewhere. The prediction on the math backend's peak is answered with the H100 record's
figure as ``reference.key_figure`` prints it.
"""

from __future__ import annotations

import json
import re

from gpucourse import feasibility, reference, settings
from gpucourse.numbers import readable
from taught import ROOT, code_cell, code_cells, prediction

EPISODE = "episodes/14-cheaper-language-model.ipynb"


def cell(marker: str) -> str:
    return code_cell(EPISODE, marker)


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
    # the record's figure, measured when the section was episode 10's, is only shown
    assert not any('key_figure("ep10.' in text for text in code_cells(EPISODE))


def test_the_answer_quotes_the_course_record_as_the_notebook_prints_it():
    """The H100 measured this cell when it was episode 10's: the record keeps it under that
    notebook, the cell shows it where there is no GPU, and the answer says so."""
    between, answer = prediction(EPISODE)
    name = "ep14.sdpa_math_peak_growth"
    if reference.gpu_reference(name) is None:           # no run of episode 14 recorded yet
        name = "ep10.sdpa_math_peak_growth"
        assert any(f'reference.show("{name}", "×")' in text for text in between)
        assert f"(`{name}`)" in answer
    record, growth = reference.gpu_reference(name)
    assert f"**{readable(growth)} ×**" in answer          # as the reference line prints it
    gpu = record["hardware"]["gpu_name"]
    assert f"recorded on an {gpu} (course record, {record['date']})" in answer.replace("\n", " ")
    figure = reference.gpu_figure(record, name)
    assert figure["notebook"] == f"episodes/{name[2:4]}-" + figure["notebook"].split("-", 1)[1]
