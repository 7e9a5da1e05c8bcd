"""Key figures: expected bands, the reference display, the recorder and `make gpu-check` on a CPU."""

from __future__ import annotations

import json
import os
import sys

import nbformat
import pytest

from conftest import ROOT
from gpucourse import reference


@pytest.fixture
def no_records(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_REFERENCE_DIR", str(tmp_path / "refs"))
    monkeypatch.setattr(reference, "_episodes_told", set())   # as in a fresh kernel
    (tmp_path / "refs").mkdir()
    return tmp_path / "refs"


NONE_RECORDED = "No GPU has run this episode's figures yet"


def a_record(gpu_name="NVIDIA H100 80GB HBM3", **figures):
    return {"schema": 1, "date": "2026-11-20", "device": "test", "hardware": {"gpu_name": gpu_name, "cpu_model": "x"},
            "software": {}, "notebooks": [{"notebook": "episodes/01.ipynb", "outcome": "ok", "seconds": 1.0}],
            "figures": {k: {"value": v, "unit": "TFLOP/s", "device": gpu_name, "notebook": "episodes/01.ipynb"}
                        for k, v in figures.items()}}


@pytest.mark.parametrize("name, model", [
    ("Tesla T4", "Tesla T4"), ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"), ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB"),
    ("NVIDIA L4", "NVIDIA L4"), ("NVIDIA H200", "NVIDIA H200"), ("NVIDIA GeForce GTX 1080", None), (None, None),
])
def test_gpu_names_map_to_datasheet_models(name, model):
    assert reference.gpu_model(name)[0] == model


def test_derived_bands_come_from_the_datasheet(no_records):
    t4 = reference.band("ep01.matmul_fp16_tflops", "Tesla T4")
    assert (t4.low, t4.high, t4.kind) == (pytest.approx(0.3 * 65), pytest.approx(0.85 * 65), "derived")
    h100 = reference.band("ep01.bandwidth_gbs", "NVIDIA H100 80GB HBM3")
    assert (h100.low, h100.high) == (pytest.approx(0.7 * 3350), pytest.approx(0.92 * 3350))
    assert "datasheet" in h100.source and "nvidia" in h100.source
    assert reference.band("ep04.test_accuracy", "Tesla T4") is None  # no datasheet band for an accuracy
    assert reference.band("ep01.matmul_fp16_tflops", "NVIDIA GeForce GTX 1080") is None


def test_a_measured_reference_replaces_the_derived_band(no_records):
    (no_records / "h100.json").write_text(json.dumps(a_record(**{"ep01.matmul_fp16_tflops": 700.0})))
    measured = reference.band("ep01.matmul_fp16_tflops", "NVIDIA H100 80GB HBM3")
    assert measured.kind == "measured" and measured.low == pytest.approx(595) and measured.high == pytest.approx(805)
    assert reference.band("ep01.matmul_fp16_tflops", "NVIDIA H100 PCIe").kind == "derived"  # another model


@pytest.mark.parametrize("value, words", [(40.0, "✓ inside"), (10.0, "below"), (90.0, "above")])
def test_verdict_inside_below_above(no_records, value, words):
    text = reference.verdict("ep01.matmul_fp16_tflops", value, "TFLOP/s", "Tesla T4")
    assert words in text
    if words == "below":
        assert "Likely reasons" in text and "warm-up" in text and "shared" in text


def test_without_a_gpu_the_reference_is_shown_or_its_absence_said(no_records, capsys):
    reference.key_figure("ep01.matmul_fp32_tflops", 0.15, unit="TFLOP/s")
    out = capsys.readouterr().out
    assert NONE_RECORDED in out and "status page" in out and "make gpu-check" not in out
    (no_records / "h100.json").write_text(json.dumps(a_record(**{"ep01.matmul_fp32_tflops": 51.2})))
    reference.key_figure("ep01.matmul_fp32_tflops", 0.15, unit="TFLOP/s")
    out = capsys.readouterr().out
    assert "51.2 TFLOP/s on NVIDIA H100 80GB HBM3, measured 2026-11-20" in out
    reference.key_figure("ep04.epoch_seconds_cpu", 30.0, unit="s", compare=False)
    assert "reference" not in capsys.readouterr().out


def test_a_cpu_figure_in_a_gpu_record_is_never_a_gpu_reference(no_records, capsys):
    """A GPU machine's record may hold a figure its notebook measured on CPU processes (device None)."""
    record = a_record(gpu_name="Tesla T4", **{"ep09.ddp_speedup": 0.2, "ep01.matmul_fp16_tflops": 20.0})
    record["figures"]["ep09.ddp_speedup"]["device"] = None
    record["figures"]["ep01.matmul_fp16_tflops"].pop("device")
    (no_records / "t4.json").write_text(json.dumps(record))
    assert reference.gpu_reference("ep09.ddp_speedup") is None
    assert reference.gpu_reference("ep01.matmul_fp16_tflops") is None      # no device recorded: not a GPU figure
    reference.show("ep09.ddp_speedup", unit="×")
    out = capsys.readouterr().out
    assert NONE_RECORDED in out and "Tesla T4" not in out
    assert reference.band("ep01.matmul_fp16_tflops", "Tesla T4").kind == "derived"   # not a measured band
    record["figures"]["ep09.ddp_speedup"]["device"] = "Tesla T4"
    (no_records / "t4.json").write_text(json.dumps(record))
    assert reference.gpu_reference("ep09.ddp_speedup")[1] == 0.2


def test_with_a_gpu_the_band_verdict_is_printed(no_records, capsys):
    reference.key_figure("ep01.matmul_fp16_tflops", 12.0, unit="TFLOP/s", device="Tesla T4")
    out = capsys.readouterr().out
    assert "12 TFLOP/s on Tesla T4" in out and "below the expected band" in out


def test_figures_are_recorded_only_when_asked(no_records, tmp_path, monkeypatch):
    target = tmp_path / "figures.jsonl"
    reference.key_figure("ep03.crossover_width", 256, device=None)
    assert not target.exists()
    monkeypatch.setenv("GPUCOURSE_FIGURES", str(target))
    monkeypatch.setenv("GPUCOURSE_NOTEBOOK", "episodes/03.ipynb")
    reference.key_figure("ep03.crossover_width", 256, device="Tesla T4")
    item = json.loads(target.read_text())
    assert item == {"name": "ep03.crossover_width", "value": 256, "unit": "", "device": "Tesla T4",
                    "notebook": "episodes/03.ipynb"}


@pytest.mark.parametrize("bad", ["matmul", "ep1.x", "ep01.Matmul TFLOPs"])
def test_figure_names_are_checked(bad):
    with pytest.raises(ValueError, match="look like"):
        reference.key_figure(bad, 1.0)


@pytest.mark.parametrize("change", [
    lambda r: r.pop("figures"), lambda r: r.update(schema=2), lambda r: r["notebooks"][0].update(outcome="fine"),
    lambda r: r["figures"]["ep01.x"].pop("unit"),
])
def test_invalid_records_are_refused_and_skipped(no_records, capsys, change):
    record = a_record(**{"ep01.x": 1.0})
    change(record)
    with pytest.raises(ValueError):
        reference.validate(record)
    (no_records / "bad.json").write_text(json.dumps(record))
    assert reference.records() == [] and "not usable" in capsys.readouterr().out


def test_committed_records_are_valid():
    """Every file in the references folder is a valid record, or one of the course's data files."""
    paths = reference.record_paths(reference.REFERENCE_DIR)
    assert {p.name for p in reference.REFERENCE_DIR.glob("*.json")} - {p.name for p in paths} == {
        name for name in reference.DATA_FILES if (reference.REFERENCE_DIR / name).exists()}
    for path in paths:
        reference.validate(json.loads(path.read_text()))


def test_data_files_are_not_read_as_records(no_records, capsys):
    (no_records / "capabilities.json").write_text(json.dumps({"about": "not a record"}))
    (no_records / "bands.json").write_text("{}")
    assert reference.records() == [] and capsys.readouterr().out == ""


def test_gpu_check_records_a_cpu_run(tmp_path, monkeypatch):
    """`tools/gpu_check.py` end to end on this machine, with a two-cell notebook."""
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from gpucourse import reference"),
                nbformat.v4.new_code_cell('reference.key_figure("ep99.answer", 42, unit="units")')]
    good = tmp_path / "good.ipynb"
    nbformat.write(nb, good)
    nb.cells.append(nbformat.v4.new_code_cell("raise RuntimeError('broken on purpose')"))
    broken = tmp_path / "broken.ipynb"
    nbformat.write(nb, broken)
    # A notebook that reports a figure and then needs TensorFlow, on a machine without it (D8: it used to be
    # skipped whole, losing episodes 1 and 5 on PyTorch-only GPU machines).
    keras_nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from gpucourse import reference"),
        nbformat.v4.new_code_cell('reference.key_figure("ep98.before_keras", 7, unit="units")'),
        nbformat.v4.new_code_cell("raise ModuleNotFoundError(\"No module named 'tensorflow'\")  # import keras")])
    nbformat.write(keras_nb, tmp_path / "keras.ipynb")
    monkeypatch.setattr(gpu_check, "OUT", tmp_path / "executed")
    monkeypatch.setattr(gpu_check, "has_module", lambda name: name != "tensorflow")  # as on the GPU machine
    status = gpu_check.main(["--only", str(good), str(broken), str(tmp_path / "keras.ipynb"),
                             "--out", str(tmp_path / "refs"), "--timeout", "120"])
    (path,) = (tmp_path / "refs").glob("*.json")
    record = reference.validate(json.loads(path.read_text()))
    assert status == 1  # one notebook failed
    assert [n["outcome"] for n in record["notebooks"]] == ["ok", "failed", "incomplete"]
    assert "tensorflow, which is not installed" in record["notebooks"][2]["reason"]
    assert record["figures"]["ep98.before_keras"]["value"] == 7   # what ran before the import is kept
    assert "broken on purpose" in record["notebooks"][1]["reason"]
    assert record["figures"]["ep99.answer"]["value"] == 42
    assert record["hardware"]["cpu_cores"] >= 1 and record["software"]["python"]
    assert path.name.startswith("cpu-") and record["mode"] == "reduced"


def test_a_cpu_run_of_episode_1_shows_the_recorded_gpu_reference(no_records, monkeypatch, tmp_path):
    """The display path learners without a GPU see, with a record as `make gpu-check` would write it.

    The kernel also runs without TensorFlow (a PyTorch-only GPU node): the Keras cells at the end
    say so in one sentence instead of stopping the notebook.
    """
    from nbclient import NotebookClient

    record = a_record(**{"ep01.matmul_fp32_tflops": 48.5, "ep01.crossover_n": 512, "ep01.h2d_gbs": 22.1})
    record["figures"]["ep01.matmul_sweep"] = {
        "value": {"n": [64, 256], "tflops": {"cuda float32": [0.5, 20.0], "cuda float16": [0.7, 90.0]},
                  "seconds": {"cuda float32": [1e-6, 1.7e-6], "cuda float16": [7e-7, 3.7e-7]}},
        "unit": "", "device": "NVIDIA H100 80GB HBM3", "notebook": "episodes/01-what-is-a-gpu.ipynb"}
    record["figures"]["ep01.crossover_n"]["unit"] = ""        # as the episode records it
    (no_records / "h100.json").write_text(json.dumps(record))
    hidden = tmp_path / "no_tensorflow" / "tensorflow"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'tensorflow\'", '
                                        'name="tensorflow")\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hidden.parent),
                                                                    os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("GPUCOURSE_QUICK", "1")
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(ROOT / "episodes" / "01-what-is-a-gpu.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "episodes")}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "48.5 TFLOP/s on NVIDIA H100 80GB HBM3, measured 2026-11-20" in text
    assert "ep01.crossover_n: 512 on NVIDIA H100 80GB HBM3" in text
    # ep01.bandwidth_gbs has no reference in this record: said once, without the maintainers' command
    assert text.count("No GPU reference for ep01.bandwidth_gbs") == 1 and "make gpu-check` on" not in text
    assert "TensorFlow is not installed here" in text and "Model.fit takes" not in text
    sweep_cell = next(c for c in nb.cells if 'plot_recorded(ax, "ep01.matmul_sweep"' in c.source)
    assert any(o.output_type == "display_data" for o in sweep_cell.outputs), "the sweep plot was not drawn"


def test_an_absolute_band_is_the_same_on_every_gpu_model(no_records):
    for gpu in ("Tesla T4", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"):   # the last is in no datasheet table
        expected = reference.band("ep05.adam_step_peak_bytes_per_param", gpu)
        assert (expected.low, expected.high, expected.kind) == (19.5, 22, "derived") and "foreach" in expected.source
    assert reference.band("ep05.adam_step_peak_bytes_per_param", None) is None   # no GPU: nothing to compare
    assert reference.band("ep01.matmul_fp16_tflops", "NVIDIA GeForce RTX 3090") is None
    text = reference.verdict("ep05.adam_step_peak_bytes_per_param", 23.5, "bytes per parameter", "Tesla T4")
    assert "above" in text and "single-tensor" in text and "synchronisation" not in text
    assert "✓ inside" in reference.verdict("ep05.adam_step_peak_bytes_per_param", 20.1, "bytes", "Tesla T4")


def test_no_gpu_figure_is_said_once_per_episode(no_records, capsys):
    """Eleven figures of one episode without a reference print one line, not eleven."""
    for k in range(11):
        reference.key_figure(f"ep06.figure_{k}", 1.0, unit="×")
    out = capsys.readouterr().out
    assert out.count(NONE_RECORDED) == 1 and out.count("ep06.figure_") == 11
    reference.show("ep07.amp_speedup", unit="×")          # another episode is told once too
    reference.show("ep07.compile_speedup", unit="×")
    assert capsys.readouterr().out.count(NONE_RECORDED) == 1
    reference._episodes_told.clear()                      # a fresh kernel tells the episode again
    reference.show("ep06.figure_0")
    assert NONE_RECORDED in capsys.readouterr().out


def test_an_episode_with_some_recorded_figures_names_the_first_missing_one(no_records, capsys):
    (no_records / "h100.json").write_text(json.dumps(a_record(**{"ep01.matmul_fp32_tflops": 51.2})))
    for name in ("ep01.bandwidth_gbs", "ep01.h2d_gbs", "ep01.matmul_fp32_tflops"):
        reference.show(name)
    out = capsys.readouterr().out
    assert NONE_RECORDED not in out      # this episode has run on a GPU
    assert "No GPU reference for ep01.bandwidth_gbs" in out and "ep01.h2d_gbs" not in out
    assert "51.2 TFLOP/s on NVIDIA H100 80GB HBM3" in out   # a recorded figure is still shown


def test_a_quick_smoke_record_is_never_a_reference_nor_a_band(no_records, capsys):
    record = a_record(**{"ep01.matmul_fp32_tflops": 3.0, "ep01.matmul_sweep": {"n": [16], "tflops": [0.1]}})
    record["mode"] = "quick"
    (no_records / "h100-quick.json").write_text(json.dumps(record))
    assert reference.records() != []                       # listed (the status page shows it) ...
    assert reference.gpu_reference("ep01.matmul_fp32_tflops") is None    # ... but never a reference
    assert reference.band("ep01.matmul_fp32_tflops", "NVIDIA H100 80GB HBM3").kind == "derived"
    reference.show("ep01.matmul_fp32_tflops", unit="TFLOP/s")
    out = capsys.readouterr().out
    assert NONE_RECORDED in out and "3 TFLOP/s" not in out
    record["mode"] = "full"
    (no_records / "h100-quick.json").write_text(json.dumps(record))
    assert reference.gpu_reference("ep01.matmul_fp32_tflops")[1] == 3.0
    assert reference.band("ep01.matmul_fp32_tflops", "NVIDIA H100 80GB HBM3").kind == "measured"


def test_on_a_gpu_another_models_recorded_figure_is_shown_beside_the_band(no_records, capsys):
    (no_records / "h100.json").write_text(json.dumps(a_record(**{"ep01.matmul_fp32_tflops": 51.2})))
    reference.key_figure("ep01.matmul_fp32_tflops", 5.0, unit="TFLOP/s", device="Tesla T4")
    out = capsys.readouterr().out
    assert "inside the expected band" in out and "51.2 TFLOP/s on NVIDIA H100 80GB HBM3, measured" in out
    reference.key_figure("ep01.matmul_fp32_tflops", 50.0, unit="TFLOP/s", device="NVIDIA H100 80GB HBM3")
    out = capsys.readouterr().out      # the band is the record itself: cited once, in the verdict
    assert "measured: make gpu-check on NVIDIA H100" in out and "GPU reference for" not in out
    reference.key_figure("ep01.bandwidth_gbs", 300.0, unit="GB/s", device="Tesla T4")
    assert "No GPU" not in capsys.readouterr().out    # a learner with a GPU is not told about records


def _axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([5, 100], [0.2, 0.9], "o-", label="CPU, data resident")   # the learner's own curve
    return fig, ax


def _sweep_record(**value):
    record = a_record()
    record["figures"]["ep03.sweep_seconds"] = {"value": value, "unit": "", "device": record["hardware"]["gpu_name"],
                                               "notebook": "episodes/03-pytorch-classifier.ipynb"}
    return record


def test_plot_recorded_draws_the_gpu_curves_dashed_and_labelled(no_records, capsys):
    import matplotlib.pyplot as plt

    (no_records / "h100.json").write_text(json.dumps(_sweep_record(
        widths=[5, 50, 500], **{"CPU, data resident": [0.1, 0.2, 3.0], "GPU, data resident": [0.3, 0.3, 0.4],
                                "GPU, data streamed": [0.5, None, 0.6]})))
    fig, ax = _axes()
    assert reference.plot_recorded(ax, "ep03.sweep_seconds", "widths", prefix="GPU") is True
    recorded = ax.get_lines()[1:]
    assert [line.get_label() for line in recorded] == [
        "GPU, data resident: NVIDIA H100 80GB HBM3, 2026-11-20 (recorded)",
        "GPU, data streamed: NVIDIA H100 80GB HBM3, 2026-11-20 (recorded)"]   # not the GPU machine's CPU
    assert all(line.get_linestyle() == "--" for line in recorded)
    assert list(recorded[0].get_xdata()) == [5, 50, 500] and list(recorded[0].get_ydata()) == [0.3, 0.3, 0.4]
    assert recorded[0].get_color() != recorded[1].get_color() != ax.get_lines()[0].get_color()
    assert "No GPU" not in capsys.readouterr().out
    plt.close(fig)


def test_plot_recorded_reads_a_dict_of_curves_under_one_key(no_records):
    import matplotlib.pyplot as plt

    record = a_record()
    record["figures"]["ep01.matmul_sweep"] = {
        "value": {"n": [64, 256], "tflops": {"cuda float32": [0.5, 20.0], "cuda float16": [0.7, 90.0]}},
        "unit": "", "device": "NVIDIA H100 80GB HBM3", "notebook": "episodes/01-what-is-a-gpu.ipynb"}
    (no_records / "h100.json").write_text(json.dumps(record))
    fig, ax = _axes()
    assert reference.plot_recorded(ax, "ep01.matmul_sweep", "n", "tflops")
    assert [line.get_label().split(":")[0] for line in ax.get_lines()[1:]] == ["cuda float32", "cuda float16"]
    assert reference.plot_recorded(ax, "ep01.matmul_sweep", "n", "seconds") is False   # an older record
    assert len(ax.get_lines()) == 3
    with pytest.raises(ValueError, match="not a curve with x values under 'size'.*pass one of its keys"):
        reference.plot_recorded(ax, "ep01.matmul_sweep", "size", "tflops")
    plt.close(fig)


@pytest.mark.parametrize("case", ["no record", "quick record", "no GPU device"])
def test_plot_recorded_draws_nothing_without_a_gpu_figure(no_records, capsys, case):
    import matplotlib.pyplot as plt

    record = _sweep_record(widths=[5, 50], **{"GPU, data resident": [0.3, 0.3]})
    if case == "quick record":
        record["mode"] = "quick"
    if case == "no GPU device":
        record["figures"]["ep03.sweep_seconds"]["device"] = None
    if case != "no record":
        (no_records / "t4.json").write_text(json.dumps(record))
    fig, ax = _axes()
    assert reference.plot_recorded(ax, "ep03.sweep_seconds", "widths", prefix="GPU") is False
    assert len(ax.get_lines()) == 1
    assert capsys.readouterr().out.count(NONE_RECORDED) == 1
    plt.close(fig)


def test_a_shown_reference_keeps_the_unit_it_was_recorded_with(no_records, capsys):
    record = a_record(**{"ep06.batch_found_by_halving": 48182})
    record["figures"]["ep06.batch_found_by_halving"]["unit"] = "samples in 1.00 GiB"
    (no_records / "h100.json").write_text(json.dumps(record))
    reference.show("ep06.batch_found_by_halving", unit="samples in 8.00 MiB")   # this run's size
    out = capsys.readouterr().out
    assert "samples in 1.00 GiB" in out and "8.00 MiB" not in out
    assert "in the course's GPU run" in out and "make gpu-check" not in out


def test_a_crossover_band_is_one_step_of_its_sweeps_grid_either_way(no_records):
    """A crossover takes only the sizes its sweep measured: ±15 % around 200 on the widths
    ..., 100, 200, 500, ... would call a run that found 500 (as a second H100 run did) broken."""
    record = a_record(**{"ep03.crossover_width": 200, "ep01.crossover_n": 256})
    widths = [5, 10, 20, 50, 100, 200, 500, 1000, 2000]
    record["figures"]["ep03.sweep_seconds"] = {
        "value": {"widths": widths, "GPU, data resident": [0.01] * 9}, "unit": "",
        "device": "NVIDIA H100 80GB HBM3", "notebook": "episodes/03.ipynb"}
    (no_records / "h100.json").write_text(json.dumps(record))
    width = reference.band("ep03.crossover_width", "NVIDIA H100 80GB HBM3")
    assert (width.low, width.high, width.kind) == (100, 500, "measured")
    assert "one step of its grid" in width.source
    for found, words in [(500, "✓ inside"), (100, "✓ inside"), (1000, "above"), (50, "below")]:
        assert words in reference.verdict("ep03.crossover_width", found, "", "NVIDIA H100 80GB HBM3")
    # Without its sweep in the record (or off the grid) the usual ±15 % band is kept.
    n = reference.band("ep01.crossover_n", "NVIDIA H100 80GB HBM3")
    assert (n.low, n.high) == (pytest.approx(0.85 * 256), pytest.approx(1.15 * 256))


def test_the_committed_h100_crossovers_admit_their_neighbours():
    """On the committed H100 record, both crossovers' bands reach one grid step either way."""
    for name, curve, key in [("ep01.crossover_n", "ep01.matmul_sweep", "n"),
                             ("ep03.crossover_width", "ep03.sweep_seconds", "widths")]:
        record = next(r for r in reference.records()
                      if r["hardware"].get("gpu_name") == "NVIDIA H100 80GB HBM3")
        value = record["figures"][name]["value"]
        grid = sorted(record["figures"][curve]["value"][key])
        i = grid.index(value)
        got = reference.band(name, "NVIDIA H100 80GB HBM3")
        assert (got.low, got.high) == (grid[i - 1], grid[i + 1]), name
