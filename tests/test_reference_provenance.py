"""Records only runs make: every figure of a committed record is backed by its run log and git.

The record of 2026-11-27 (commit c312d6e) carried ``ep14.sdpa_math_peak_growth``, attributed by
hand to episode 14, which never ran on a GPU, and episode 10's figures had no run log naming
the notebook version that measured them: the provenance check must refuse both.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from gpucourse import reference

sys.path.insert(0, str(ROOT / "tools"))
import gpu_check  # noqa: E402

H100 = "gpucourse/references/nvidia-h100-80gb-hbm3.json"
HAND_EDITED = "c312d6e"   # ep10.sdpa_math_peak_growth renamed ep14.… by hand


def _git_show(commit: str, path: str) -> dict:
    done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"git cannot show {commit}:{path} here ({done.stderr.strip()}): the provenance "
                    "tests need the repository's history (not a shallow clone)")
    return json.loads(done.stdout)


@pytest.mark.parametrize("path", reference.record_paths(reference.REFERENCE_DIR), ids=lambda p: p.name)
def test_every_committed_figure_comes_from_a_run_in_its_record(path):
    record = reference.validate(json.loads(path.read_text()))
    assert record["schema"] >= 2, f"{path.name} has no run log"
    assert reference.provenance_problems(record) == []


def test_the_hand_edited_record_is_refused_for_episode_14_and_episode_10():
    old = _git_show(HAND_EDITED, H100)
    problems = reference.provenance_problems(old)
    text = "\n".join(problems)
    assert ("ep14.sdpa_math_peak_growth: attributed to episodes/14-cheaper-language-model.ipynb, "
            "which no run of this record ran") in text
    for name in ("ep10.decode_ms_per_token", "ep10.decode_weight_gbs", "ep10.kv_cache_bytes_per_token"):
        assert f"{name}: no run log, so no version of episodes/10-language-model.ipynb" in text
    assert "has no log of the runs that made it" in problems[0]


@pytest.fixture
def h100():
    return json.loads((ROOT / H100).read_text())


def test_a_typed_in_value_is_refused(h100):
    h100["figures"]["ep01.bandwidth_gbs"]["value"] = 3000.0
    assert any(p.startswith("ep01.bandwidth_gbs: the value, unit or device is not what run")
               for p in reference.provenance_problems(h100))


def test_a_figure_moved_to_another_notebook_by_hand_is_refused(h100):
    """What c312d6e did, done to today's record: the figure renamed and given episode 14."""
    figure = h100["figures"].pop("ep10.sdpa_math_peak_growth")
    h100["figures"]["ep14.sdpa_math_peak_growth"] = dict(
        figure, notebook="episodes/14-cheaper-language-model.ipynb")
    assert any(p.startswith("ep14.sdpa_math_peak_growth: attributed to episodes/14")
               for p in reference.provenance_problems(h100))


def test_a_figure_logged_under_another_name_is_refused(h100):
    h100["figures"]["ep10.sdpa_math_growth"] = h100["figures"].pop("ep10.sdpa_math_peak_growth")
    assert any(p.startswith("ep10.sdpa_math_growth: the value, unit or device is not what run")
               for p in reference.provenance_problems(h100))


def test_a_notebook_version_never_committed_is_refused(h100):
    fake = "0123456789abcdef0123456789abcdef01234567"
    for run in h100["runs"]:
        for entry in run["notebooks"]:
            if entry["notebook"] == "episodes/01-what-is-a-gpu.ipynb":
                entry["blob"] = fake
    for figure in h100["figures"].values():
        if figure["notebook"] == "episodes/01-what-is-a-gpu.ipynb":
            figure["blob"] = fake
    problems = reference.provenance_problems(h100)
    assert any("ep01.bandwidth_gbs: measured by a version of episodes/01-what-is-a-gpu.ipynb "
               "(0123456789) that was never one of the versions of today's notebook" in p for p in problems)


def test_a_commit_outside_the_history_is_refused(h100):
    run = h100["runs"][0]
    run["commit"] = "f" * 40
    name = next(n for n, f in h100["figures"].items() if f["run"] == run["id"])
    h100["figures"][name]["commit"] = "f" * 40
    assert any(p.startswith(f"{name}: its run's commit ffffffffff is not an ancestor of HEAD")
               for p in reference.provenance_problems(h100))


def test_an_adopted_run_must_match_the_record_git_holds(h100):
    """Typing a value into both the figure and its log is caught by the adopted run's source."""
    h100["figures"]["ep01.bandwidth_gbs"]["value"] = 3000.0
    for run in h100["runs"]:
        for entry in run["notebooks"]:
            for logged in entry["figures"]:
                if logged["name"] == "ep01.bandwidth_gbs":
                    logged["value"] = 3000.0
    assert any(p.startswith("ep01.bandwidth_gbs: run ") and "does not hold this figure" in p
               for p in reference.provenance_problems(h100))


def test_adopting_the_record_as_the_check_wrote_it_drops_only_what_no_run_made(tmp_path, monkeypatch):
    """--adopt reads git, never the file: the hand-edited figure does not come back."""
    record, dropped = gpu_check.adopt(ROOT / H100, ["0d7c038", "d97fa32"])
    assert dropped == []                                   # d97fa32 is the check's own output
    assert "ep14.sdpa_math_peak_growth" not in record["figures"]
    assert record["figures"]["ep10.sdpa_math_peak_growth"]["notebook"] == "episodes/10-language-model.ipynb"
    by_run = {r["id"]: {n["notebook"] for n in r["notebooks"]} for r in record["runs"]}
    first = next(ids for run, ids in by_run.items() if "0d7c038" in run)
    assert first == {"episodes/09-more-than-one-gpu.ipynb", "episodes/12-gpu-kernels.ipynb",
                     "episodes/13-sharding.ipynb"}          # their entries did not change in d97fa32
    assert reference.provenance_problems(record) == []
    hand, dropped = gpu_check.adopt(ROOT / H100, [HAND_EDITED])
    assert dropped == ["ep14.sdpa_math_peak_growth: episodes/14-cheaper-language-model.ipynb is not "
                       "among the notebooks the record's runs ran"]


# --------------------------------------------------------------------------- the check writes it

def _entry(notebook, seconds=1.0, outcome="ok", reason=None):
    entry = {"notebook": notebook, "outcome": outcome, "seconds": seconds, "date": "2026-12-01"}
    return dict(entry, reason=reason) if reason else entry


def _line(name, value, notebook, kind="figure", **extra):
    return {"kind": kind, "name": name, "value": value, "unit": "x", "device": "GPU",
            "notebook": notebook, **extra}


def test_a_merged_run_keeps_every_other_figures_provenance():
    record = gpu_check.fresh_record({"gpu_name": "GPU", "cpu_model": "c", "cpu_cores": 1}, {}, "full")
    first = gpu_check.new_run(record, mode="full", commit="a" * 40)
    book = gpu_check.Record(record, ["episodes/01-a.ipynb", "episodes/02-b.ipynb"], first)
    book.add(_entry("episodes/01-a.ipynb"), [_line("ep01.x", 1.0, "episodes/01-a.ipynb")], "b1", False)
    book.add(_entry("episodes/02-b.ipynb"), [_line("ep02.y", 2.0, "episodes/02-b.ipynb")], "b2", False)
    second = gpu_check.new_run(book.data, mode="full", commit="c" * 40)
    assert second["id"] != first["id"]
    again = gpu_check.Record(book.data, ["episodes/02-b.ipynb"], second)
    again.add(_entry("episodes/02-b.ipynb"),
              [_line("ep02.y", 3.0, "episodes/02-b.ipynb"),
               _line("ep02.backend", "torch", "episodes/02-b.ipynb", kind="path", why="no TensorFlow")],
              "b3", True)
    x, y = again.data["figures"]["ep01.x"], again.data["figures"]["ep02.y"]
    assert (x["run"], x["commit"], x["blob"], x["value"]) == (first["id"], "a" * 40, "b1", 1.0)
    assert (y["run"], y["commit"], y["blob"], y["value"]) == (second["id"], "c" * 40, "b3", 3.0)
    assert y["path"] == {"ep02.backend": {"value": "torch", "why": "no TensorFlow"}}
    log = {n["notebook"]: n for n in second["notebooks"]}["episodes/02-b.ipynb"]
    assert log["dirty"] is True and log["figures"] == [
        {"name": "ep02.y", "value": 3.0, "unit": "x", "device": "GPU"}]
    assert [r["id"] for r in again.data["runs"]] == [first["id"], second["id"]]
    reference.validate(again.data)


def test_a_stopped_notebook_logs_why_it_was_skipped():
    record = gpu_check.fresh_record({"gpu_name": None, "cpu_model": "c", "cpu_cores": 1}, {}, "reduced")
    book = gpu_check.Record(record, ["episodes/04-k.ipynb"])
    book.add(_entry("episodes/04-k.ipynb", outcome="incomplete", reason="needs tensorflow: ..."), [], "b", False)
    log = book.run["notebooks"][0]
    assert log["path"]["skipped"] == {"value": "incomplete", "why": "needs tensorflow: ..."}


def test_path_taken_is_logged_beside_the_figures(tmp_path, monkeypatch):
    log = tmp_path / "figures.jsonl"
    monkeypatch.setenv("GPUCOURSE_FIGURES", str(log))
    monkeypatch.setenv("GPUCOURSE_NOTEBOOK", "episodes/04-keras-cnn.ipynb")
    reference.path_taken("ep04.keras_backend", "torch", why="TensorFlow is not installed")
    line = json.loads(log.read_text())
    assert line == {"kind": "path", "name": "ep04.keras_backend", "value": "torch",
                    "why": "TensorFlow is not installed", "notebook": "episodes/04-keras-cnn.ipynb"}
    with pytest.raises(ValueError, match="path names look like"):
        reference.path_taken("keras backend", "torch")


def test_the_software_block_names_every_package_an_episode_imports():
    software = gpu_check.software()
    for key in ("numba", "numba-cuda", "cupy", "bitsandbytes", "keras", "matplotlib", "tensorflow",
                "triton", "peft", "transformers", "scikit-learn"):
        assert key in software, key


def test_the_status_page_gives_each_figure_its_commit_and_age(h100):
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import reference_table

    figure = h100["figures"]["ep10.decode_ms_per_token"]
    age = reference.commits_since(figure["commit"], figure["notebook"])
    assert age and age > 0                      # episode 10 changed after the H100 run
    assert reference_table._age(figure) == f"episodes/10 at {figure['commit'][:7]}: changed {age} commits since"
    assert reference_table._age({"notebook": "episodes/10-language-model.ipynb", "value": 1}) == \
        "episodes/10: no run log"
