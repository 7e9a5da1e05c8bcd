"""Episode 13 shows its scripts' key lines as code, as episode 9 does: each script's marked
blocks listed once in a ```python fence, equal to the script, narrow enough to read, just
before the cell that runs the script, and no cell prints source code."""

from __future__ import annotations

import json
import re

import pytest

from gpucourse.distributed.key_lines import listing
from taught import cells, code_cells, markdown_cells

EPISODE = "episodes/13-sharding.ipynb"
SCRIPTS = ["fsdp_train", "tp_mlp", "dcp_reshard", "memory_plan"]
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
WIDTH = 88


def _fences() -> list[str]:
    """The bodies of the episode's ```python fences."""
    return [body for text in markdown_cells(EPISODE) for body in FENCE.findall(text)]


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_scripts_key_lines_are_listed_once_exactly_as_the_script_has_them(script):
    shown = [body for body in _fences() if body.rstrip("\n") == listing(script)]
    assert len(shown) == 1, (
        f"{EPISODE} should list {script}.py's marked blocks once, as the script has them "
        f"({len(shown)} found): bring the listing in step with listing({script!r})")


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_scripts_marked_lines_fit_the_page(script):
    wide = [line for line in listing(script).splitlines() if len(line) > WIDTH]
    assert not wide, (f"{script}.py has marked lines over {WIDTH} characters: rewrap them "
                      f"in the script, e.g. {wide[0]!r}")


def test_the_listings_are_short_enough_to_read_without_scrolling_sideways():
    wide = [line for body in _fences() for line in body.splitlines() if len(line) > WIDTH]
    assert not wide, f"listed lines over {WIDTH} characters: {wide}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_listing_names_its_script_and_comes_just_before_the_cell_that_runs_it(script):
    notebook = cells(EPISODE)
    sources = ["".join(c["source"]) for c in notebook]
    (where,) = [i for i, (c, text) in enumerate(zip(notebook, sources))
                if c["cell_type"] == "markdown"
                and listing(script) in [b.rstrip("\n") for b in FENCE.findall(text)]]
    assert f"`gpucourse/distributed/{script}.py`" in sources[where], (
        f"the cell listing {script}.py should say where the whole script is")
    runs = next(text for c, text in zip(notebook[where + 1:], sources[where + 1:])
                if c["cell_type"] == "code")
    assert re.search(rf'"-m",\s*"gpucourse\.distributed\.{script}"', runs), (
        f"the first code cell after {script}.py's listing should run it: {runs[:80]!r}")


def test_no_cell_prints_source_code():
    prints_source = re.compile(r"\bkey_lines\b|\blisting\(|getsource|\.py['\"]\)?\s*\)?"
                               r"\.read_text|open\([^)]*\.py['\"]")
    for source in code_cells(EPISODE):
        assert not prints_source.search(source), (
            f"a code cell shows source as printed output: {source[:80]!r}; "
            "list the lines in markdown as listing(script) returns them")


def test_the_2d_mesh_run_matches_one_process_without_torchs_redistribution_notice(tmp_path):
    """The 2 × 2 mesh runs only in reduced and full mode; here it runs at a small size. Gathering
    its 2-D weights for the comparison made torch log a 300-character "suboptimal" line on each
    of the 4 ranks; tp_mlp quiets that logger for that one gather."""
    from gpucourse.distributed import launch, torchrun

    run = launch(torchrun("--standalone", "--nproc-per-node=4", "-m",
                          "gpucourse.distributed.tp_mlp", "--dp", 2, "--out", tmp_path,
                          "--width", 64, "--hidden", 256, "--steps", 2, "--device", "cpu"),
                 timeout=240, show=False)
    assert run.ok, run.output[-2000:]
    assert "sequential all_gather" not in run.output and "suboptimal" not in run.output
    report = json.loads((tmp_path / "tp-rank0.json").read_text())
    assert (report["dp"], report["tp"]) == (2, 2)
    assert report["max_weight_difference"] < 1e-5


def test_the_process_count_is_set_in_one_place_and_every_run_gets_env():
    """Two T4s need one edit (NPROC = 2), not six: no cell repeats the 4 of the runs (it was in the
    launch, the result files read, the byte count and the chunk rule). Every launch passes ENV, so CPU
    ranks see no GPU (dcp.save otherwise opens it from each of them)."""
    sources = code_cells(EPISODE)
    setting = [s for s in sources if re.search(r"^NPROC = \d+", s, re.M)]
    assert len(setting) == 1, "NPROC should be set in exactly one cell"
    for source in sources:
        if "launch(torchrun(" in source:
            assert source.count("launch(") == source.count("env=ENV"), source[:120]
        for literal in ("range(4)", ".chunk(4)", "N = 4", "/ 4", "ranks[3]"):
            assert literal not in source, f"{literal!r} repeats the process count: use NPROC ({source[:80]!r})"
    fixed = [s for s in sources if "--nproc-per-node=4" in s]
    assert all("NPROC >= 4" in s for s in fixed), "a run of exactly 4 processes must be skipped below 4"
    assert any('f"--nproc-per-node={NPROC}"' in s for s in sources)
