"""Episode 13's lesson is in its cells: the code that runs in torchrun's processes is written
by the notebook (``%%writefile``), one file per idea, before the cell that launches it, so the
learner reads exactly what runs; the package keeps only the plumbing (the model, the counting),
and no cell prints source code."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from gpucourse.fakes import fakecuda
from taught import ROOT, cells, code_cell, code_cells, first_screen, markdown_cells, run_cells
from test_sharding import WRITEFILE, scripts, write_scripts

EPISODE = "episodes/13-sharding.ipynb"
LAUNCHED = re.compile(r'WORK / "(\w+\.py)"')
# The calls the episode teaches, each written in a cell, none of them in the package.
TAUGHT = ["init_device_mesh(", "fully_shard(", "ZeroRedundancyOptimizer(", "dcp.save(",
          "parallelize_module(", "ColwiseParallel(", "RowwiseParallel(", "dcp.load(",
          "set_state_dict(", 'init_process_group("fake"', "FakeTensorMode("]


def _code() -> list[tuple[int, str]]:
    return [(i, "".join(c["source"])) for i, c in enumerate(cells(EPISODE))
            if c["cell_type"] == "code"]


def test_every_script_a_cell_launches_is_written_by_a_cell_before_it():
    written = {}
    for i, source in _code():
        match = WRITEFILE.match(source)
        if match:
            written[match["name"]] = i
        for name in LAUNCHED.findall(source) if "launch(" in source else []:
            assert name in written and written[name] < i, (
                f"cell {i} launches {name}, which no earlier %%writefile cell writes")
    assert {"fsdp_train.py", "tp_train.py", "two_d.py", "resume.py"} <= set(written)


def test_every_module_a_script_imports_from_its_folder_is_one_the_episode_writes():
    texts = scripts()
    for name, text in texts.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                top = node.module.split(".")[0]
                if top not in ("torch", "gpucourse", "json"):
                    assert f"{top}.py" in texts, f"{name} imports {top}, which no cell writes"


def test_every_writefile_cell_writes_into_the_episodes_folder_and_fits_the_page():
    for i, source in _code():
        if source.startswith("%%writefile"):
            assert WRITEFILE.match(source), f"cell {i}: write into {{WORK}}/name.py: {source[:60]!r}"


@pytest.mark.parametrize("call", TAUGHT)
def test_each_taught_call_is_in_a_cell_and_not_hidden_in_the_package(call):
    assert any(call in source for _, source in _code()), f"no cell calls {call}"
    package = ROOT / "gpucourse" / "distributed"
    hidden = [p.name for p in package.glob("*.py") if call in p.read_text()]
    assert not hidden, f"{call} is called in {hidden}: the lesson belongs in the episode's cells"


def test_no_lesson_in_python_fences():
    fences = [t for t in markdown_cells(EPISODE) if "```python" in t]
    assert not fences, "the lesson's code is a cell that runs, not a markdown fence"


def test_no_cell_prints_source_code():
    prints_source = re.compile(r"\bkey_lines\b|\blisting\(|getsource|\.py['\"]\)?\s*\)?"
                               r"\.read_text|open\([^)]*\.py['\"]|\bcat\b")
    for source in code_cells(EPISODE):
        assert not prints_source.search(source), (
            f"a code cell shows source as printed output: {source[:80]!r}")


def test_the_2d_mesh_run_matches_one_process_without_torchs_redistribution_notice(tmp_path):
    """The 2 × 2 mesh runs only in reduced and full mode; here it runs the episode's script at a
    small size. Gathering its 2-D weights for the comparison made torch log a 300-character
    "suboptimal" line on each of the 4 ranks; sharded.full_weights quiets that logger for it."""
    from gpucourse.distributed import launch, torchrun

    work = write_scripts(tmp_path / "work")
    run = launch(torchrun("--standalone", "--nproc-per-node=4", work / "two_d.py",
                          "--out", tmp_path, "--width", 64, "--hidden", 256, "--steps", 2,
                          "--device", "cpu"),
                 timeout=240, show=False, env={"CUDA_VISIBLE_DEVICES": ""})
    assert run.ok, run.output[-2000:]
    assert "sequential all_gather" not in run.output and "suboptimal" not in run.output
    reports = [json.loads((tmp_path / f"2d-rank{r}.json").read_text()) for r in range(4)]
    assert reports[0]["max_weight_difference"] < 1e-5
    from gpucourse.distributed.sharded import make_model

    full = 4 * sum(p.numel() for p in make_model(64, 256).parameters())
    unsplit = 4 * (16 * 64 + 64 + 64 + 1 + 2 * 64)   # input, output, down biases: not split by TP
    # TP's halves are held once over the 4 ranks, FSDP's split of the rest twice (once per pair)
    assert sum(r["bytes"]["params"] for r in reports) == full + unsplit


def test_the_process_count_is_set_in_one_place_and_every_run_gets_env():
    """Two T4s need no edit: NPROC is chosen once, and no cell repeats the 4 of the runs (it was in
    the launch, the result files read, the byte count and the chunk rule). Every launch passes ENV,
    so CPU ranks see no GPU (dcp.save otherwise opens it from each of them)."""
    sources = code_cells(EPISODE)
    setting = [s for s in sources if re.search(r"^NPROC = \d+", s, re.M)]
    assert len(setting) == 1, "NPROC should be set in exactly one cell"
    for source in sources:
        if "launch(torchrun(" in source:
            assert source.count("launch(") == source.count("env=ENV"), source[:120]
        for literal in ("range(4)", ".chunk(4)", "N = 4", "/ 4", "ranks[3]"):
            if "--nproc-per-node=4" not in source:
                assert literal not in source, f"{literal!r} repeats the process count: use NPROC"
    fixed = [s for s in sources if "--nproc-per-node=4" in s]
    assert all("NPROC >= 4" in s for s in fixed), "a run of exactly 4 processes must be skipped below 4"
    assert any('f"--nproc-per-node={NPROC}"' in s for s in sources)


@pytest.mark.parametrize("count, nproc, device, env", [
    (2, 2, "auto", {}),                                   # Kaggle's two T4s: one each, NCCL
    (1, 4, "cpu", {"CUDA_VISIBLE_DEVICES": ""}),          # Colab's one T4: CPU processes
    (4, 4, "auto", {})])
def test_two_gpus_run_two_processes_on_them_and_one_gpu_keeps_them_on_the_cpu(count, nproc,
                                                                             device, env):
    with fakecuda.fake_gpu("T4", count, nvidia_smi=False, children=False):
        ns = run_cells(EPISODE, [*first_screen(EPISODE), code_cell(EPISODE, "NPROC = ")])
    assert (ns["NPROC"], ns["DEVICE"], ns["ENV"]) == (nproc, device, env)
    assert Path(ns["WORK"]).is_dir()
