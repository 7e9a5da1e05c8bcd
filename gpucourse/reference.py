"""Key figures: record them, compare them with the expected band, show the GPU reference.

An episode reports each of its key figures (matmul TFLOP/s, bandwidth, the
crossover, a speed-up, an accuracy ...) with one call::

    reference.key_figure("ep01.matmul_fp16_tflops", tflops, unit="TFLOP/s", device=gpu_name)

which

* prints the figure and, for a GPU model with a known band, whether it is
  inside the band expected for that model, and if not the likely reasons;
* on a machine without a GPU, prints the figure measured on a GPU by
  ``make gpu-check`` (device and date); where no GPU has recorded it, one line
  per episode says so and points to the status page (how records are made is
  the maintainers' business, described there, not the learner's);
* when ``make gpu-check`` runs the notebook (``GPUCOURSE_FIGURES`` names a
  file), appends the figure to that file for the reference record.

Bands live in ``gpucourse/references/bands.json`` (derived from datasheets,
with sources); reference records, one per device, in
``gpucourse/references/<device>.json``, written only by ``tools/gpu_check.py``.
A record's figure is a GPU reference only if it was measured on a GPU at full
size: figures recorded with no device, and records of a ``--quick`` smoke run
(``"mode": "quick"``), are never shown or used as a band.
Curves (a dict of lists) are drawn beside the learner's own with
:func:`plot_recorded`.

Provenance. Every figure of a record names the run that measured it: the record's
``runs`` log holds, per run, the commit it ran at, the date, and per notebook the git
blob hash of the notebook as it ran, its outcome, the paths it took (the Keras backend,
a fallback, compiled or simulated, skipped and why: :func:`path_taken`) and every figure
it reported. :func:`provenance_problems` holds each figure against that log and against
git's history of the notebook; a figure no run logged, or measured by a version of the
notebook that was never one of today's notebook's versions, is refused. A record made
under ``tools/gpu_check.py --envelope t4`` (a big GPU limited to what a T4 has) is
labelled "T4 envelope on <GPU>": it is never a reference for its own GPU, never a band,
and never shown as a T4; :func:`t4_reveal` sets it (or, where none exists, the
feasibility model's T4 prediction, labelled as such) beside the figure of the GPU that ran.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .numbers import readable

REFERENCE_DIR = Path(__file__).with_name("references")
#: The checkout the helper lives in (git reads the notebooks' history from it).
CHECKOUT = REFERENCE_DIR.parents[1]
#: 2: figures carry their provenance and the record holds the runs' log. 1: neither (read only).
SCHEMA_VERSION = 2
SCHEMAS = (1, 2)
#: A record's "envelope" when a big GPU ran limited to what a T4 has (tools/gpu_check.py --envelope t4).
ENVELOPES = {"t4": "T4"}
QUICK_MODE = "quick"   # a record's "mode" when tools/gpu_check.py ran a smoke pass at test size
STATUS_PAGE = "the course's status page (Reference → Execution status)"


#: Files in the references folder that are the course's data, not reference records.
DATA_FILES = ("bands.json", "capabilities.json")


def reference_dir() -> Path:
    """Where reference records are read from (``GPUCOURSE_REFERENCE_DIR`` overrides, for tests)."""
    return Path(os.environ.get("GPUCOURSE_REFERENCE_DIR") or REFERENCE_DIR)


def record_paths(folder: Path | None = None) -> list[Path]:
    """The reference record files in ``folder`` (default :func:`reference_dir`), by name."""
    folder = reference_dir() if folder is None else folder
    return [path for path in sorted(folder.glob("*.json")) if path.name not in DATA_FILES]


# --------------------------------------------------------------------------- bands

def bands() -> dict:
    return json.loads((REFERENCE_DIR / "bands.json").read_text())


def gpu_model(device_name: str | None) -> tuple[str, dict] | tuple[None, None]:
    """The GPU model in the bands file that ``device_name`` (as the driver reports it) is."""
    if not device_name:
        return None, None
    for model, spec in bands()["models"].items():
        if re.search(spec["match"], device_name, flags=re.IGNORECASE):
            return model, spec
    return None, None


@dataclass(frozen=True)
class Band:
    low: float
    high: float
    model: str
    kind: str  # "derived" (datasheet) or "measured" (a reference record)
    source: str
    reasons: tuple = ()  # likely reasons for a value outside the band, when they are the band's own

    def describe(self, unit: str) -> str:
        return f"{readable(self.low)}–{readable(self.high)} {unit} for {self.model} ({self.kind}: {self.source})"


def band(name: str, device_name: str | None) -> Band | None:
    """The expected band of key figure ``name`` (``"ep01.matmul_fp16_tflops"``) on ``device_name``.

    A figure that is the same on every GPU (``absolute`` in the bands file, e.g. bytes per
    parameter or an estimate's error) has one band everywhere. Otherwise a measured reference of
    the same model wins over the datasheet-derived band (±15 % around the measurement, so only for
    figures clearly away from zero); None when neither exists or the datasheet has no figure for it.
    """
    model, spec = gpu_model(device_name)
    short = name.split(".", 1)[-1]
    absolute = bands().get("absolute", {}).get(short)
    if absolute is not None:
        if not device_name:
            return None
        return Band(absolute["low"], absolute["high"], model or device_name, "derived", absolute["why"],
                    tuple(absolute.get("reasons", ())))
    if model is None:
        return None
    for record in records():
        if record.get("envelope"):
            continue  # a GPU limited to another's envelope measures neither
        if gpu_model(record["hardware"].get("gpu_name"))[0] == model:
            value = (gpu_figure(record, name) or {}).get("value")
            if isinstance(value, (int, float)) and math.isfinite(value) and value != 0:
                source = f"make gpu-check on {record['hardware']['gpu_name']}, {record['date']}"
                steps = _grid_neighbours(short, record, value)
                if steps is not None:
                    return Band(*steps, model, "measured", f"{source}, one step of its grid either way")
                low, high = sorted((0.85 * value, 1.15 * value))
                return Band(low, high, model, "measured", f"{source}, ±15 %")
    rule = bands()["fractions"].get(short)
    if rule is None:
        return None
    rule = {**rule, **spec.get("overrides", {}).get(short, {})}
    peak = spec.get(rule["of"])
    if peak is None:   # e.g. no PCIe link to the host on a GH200
        return None
    return Band(rule["low"] * peak, rule["high"] * peak, model, "derived",
                f"{rule['low']:.0%}–{rule['high']:.0%} of the datasheet's {peak:g} ({rule['of']}); "
                f"{rule['why']}; {spec['source']}")


def _grid_neighbours(short: str, record: dict, value: float) -> tuple[float, float] | None:
    """For a figure that can only take the values of a grid (a crossover found by a sweep), the
    grid values one step either side of the recorded one: ±15 % of 200 on a grid ..., 100, 200,
    500, ... would admit only 200 and call a noisy neighbour a broken measurement."""
    grid_rule = bands().get("grids", {}).get(short)
    if grid_rule is None:
        return None
    curve = (gpu_figure(record, grid_rule["curve"]) or {}).get("value")
    grid = sorted(curve.get(grid_rule["key"], [])) if isinstance(curve, dict) else []
    if value not in grid:
        return None
    i = grid.index(value)
    return grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]


def verdict(name: str, value: float, unit: str, device_name: str | None) -> str:
    """One or more lines saying whether ``value`` is inside the expected band."""
    expected = band(name, device_name)
    if expected is None:
        return f"  (no expected band for {device_name or 'this device'})"
    if expected.low <= value <= expected.high:
        return f"  ✓ inside the expected band: {expected.describe(unit)}"
    side = "below" if value < expected.low else "above"
    lines = [f"  ✗ {side} the expected band: {expected.describe(unit)}."]
    if expected.reasons:
        lines.append("  Likely reasons:")
        lines += [f"  - {reason}" for reason in expected.reasons]
    elif side == "below":
        lines.append("  Likely reasons:")
        lines += [f"  - {reason}" for reason in bands()["reasons"]]
    else:
        lines.append("  Above the band: check the units and that the work really was done "
                     "(a missing synchronisation makes GPU work look instant).")
    return "\n".join(lines)


# --------------------------------------------------------------------------- records

def records() -> list[dict]:
    """Every reference record (newest first); invalid files are skipped with a message."""
    found = []
    for path in record_paths():
        try:
            record = json.loads(path.read_text())
            validate(record)
        except (OSError, ValueError) as exc:
            print(f"(reference record {path.name} is not usable: {exc})")
            continue
        found.append(record)
    return sorted(found, key=lambda r: r["date"], reverse=True)


def gpu_figure(record: dict, name: str) -> dict | None:
    """Figure ``name`` of ``record`` if it was measured on a GPU, else None.

    A GPU machine's record can hold figures its notebooks measured on the CPU (episode 9
    on a single-GPU machine runs CPU processes); those were recorded with ``device`` None
    and are never a GPU reference. Nor is anything in a quick smoke run's record
    (``"mode": "quick"``): its figures come from test-size inputs.
    """
    if record.get("mode") == QUICK_MODE or record.get("envelope"):
        return None  # test-size figures; or a GPU made to look like another (see envelope_figure)
    figure = record.get("figures", {}).get(name)
    if record["hardware"].get("gpu_name") and isinstance(figure, dict) and figure.get("device"):
        return figure
    return None


def gpu_reference(name: str) -> tuple[dict, object] | None:
    """(record, value) of the newest GPU record that has figure ``name`` measured on a GPU."""
    for record in records():
        figure = gpu_figure(record, name)
        if figure is not None:
            return record, figure["value"]
    return None


REQUIRED = {"schema": int, "date": str, "device": str, "hardware": dict, "software": dict,
            "notebooks": list, "figures": dict}
#: What every figure of a schema-2 record carries besides value, unit and notebook.
PROVENANCE = ("run", "commit", "blob", "date", "path")


def validate(record: dict) -> dict:
    """Raise ValueError unless ``record`` has the reference record's fields and types."""
    if not isinstance(record, dict):
        raise ValueError("a record is a JSON object")
    for key, kind in REQUIRED.items():
        if not isinstance(record.get(key), kind):
            raise ValueError(f"field {key!r} missing or not a {kind.__name__}")
    if record["schema"] not in SCHEMAS:
        raise ValueError(f"schema {record['schema']} is not one of {SCHEMAS}")
    if record["schema"] >= 2 and not isinstance(record.get("runs"), list):
        raise ValueError("field 'runs' (the log of the runs that made the record) missing or not a list")
    if record.get("envelope") not in (None, *ENVELOPES):
        raise ValueError(f"envelope {record['envelope']!r} is not one of {sorted(ENVELOPES)}")
    for nb in record["notebooks"]:
        if not {"notebook", "outcome", "seconds"} <= set(nb):
            raise ValueError(f"notebook entry {nb} lacks notebook/outcome/seconds")
        if nb["outcome"] not in ("ok", "incomplete", "failed", "skipped", "timeout"):
            raise ValueError(f"outcome {nb['outcome']!r} of {nb['notebook']} is not ok/incomplete/failed/skipped/timeout")
    for name, figure in record["figures"].items():
        if not {"value", "unit", "notebook"} <= set(figure):
            raise ValueError(f"figure {name} lacks value/unit/notebook")
        missing = [k for k in PROVENANCE if k not in figure] if record["schema"] >= 2 else []
        if missing:
            raise ValueError(f"figure {name} lacks its provenance: {', '.join(missing)}")
    return record


# --------------------------------------------------------------------------- the call episodes make

def _format(value, unit: str) -> str:
    if isinstance(value, (int, float)):
        return readable(value, unit)
    if isinstance(value, dict):
        return f"a curve ({', '.join(value)})"
    if isinstance(value, list):
        return f"{len(value)} values"
    return f"{value} {unit}".strip()


def show(name: str, unit: str = "") -> None:
    """Print the GPU reference of key figure ``name``, or (once per episode) that none exists."""
    ref = gpu_reference(name)
    if ref is None:
        note_none_recorded(name)
    else:
        record, value = ref
        # The recorded unit wins: it may name the size the GPU run measured at ("samples in
        # 1.00 GiB"), which this run's own unit would misstate.
        unit = record["figures"][name].get("unit") or unit
        print(f"  GPU reference for {name}: {_format(value, unit)} on {record['hardware']['gpu_name']}, "
              f"measured {record['date']} in the course's GPU run.")


#: Episodes ("ep06") whose missing GPU reference this process has mentioned already.
_episodes_told: set[str] = set()


def note_none_recorded(name: str) -> None:
    """Say that key figure ``name`` has no GPU reference, once per episode and process.

    An episode reports up to a dozen key figures; a learner without a GPU, before any
    record exists, needs to read that only once. Later figures of the same episode
    (the ``"epNN"`` before the dot) print nothing about it.
    """
    episode = name.split(".", 1)[0]
    if episode in _episodes_told:
        return
    _episodes_told.add(episode)
    if any(figure.startswith(episode + ".") and gpu_figure(record, figure)
           for record in records() for figure in record["figures"]):
        print(f"  No GPU reference for {name} has been recorded yet (nor for this episode's "
              f"figures below that show none); see {STATUS_PAGE}.")
    else:
        print(f"  No GPU has run this episode's figures yet; see {STATUS_PAGE}.")


#: Colours of recorded curves: none of them is one the episodes give their own curves.
RECORDED_COLOURS = ("tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def plot_recorded(ax, name: str, x_key: str, y_key: str | None = None, *, prefix: str = "") -> bool:
    """Draw the GPU curves of key figure ``name`` that ``make gpu-check`` recorded, dashed.

    So a reader without a GPU sees a GPU's curve beside their CPU's. Each line is
    labelled with its series, the GPU and the date, and "(recorded)".

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes to draw on (their scales are left as they are).
    name : str
        A key figure whose value is a curve, e.g. ``"ep01.matmul_sweep"``.
    x_key : str
        The key of the x values in the recorded dict, e.g. ``"n"``.
    y_key : str, optional
        The key of the y values: a list (one curve) or a dict of label → list (several).
        None: every other key of the dict is a curve, its key the label.
    prefix : str
        Only curves whose label starts with it, e.g. ``"GPU"`` to leave out the GPU
        machine's own CPU curves.

    Returns
    -------
    bool
        True when at least one recorded curve was drawn. False when no GPU record has
        ``name`` (said once per episode, see :func:`note_none_recorded`), or the record
        predates ``y_key``.

    Raises
    ------
    ValueError
        If the recorded figure is not a curve with x values under ``x_key``.
    """
    ref = gpu_reference(name)
    if ref is None:
        note_none_recorded(name)
        return False
    record, curve = ref
    if not isinstance(curve, dict) or not isinstance(curve.get(x_key), list):
        keys = list(curve) if isinstance(curve, dict) else type(curve).__name__
        raise ValueError(f"key figure {name} of the {record['date']} record is not a curve with x values "
                         f"under {x_key!r} (it has {keys}); pass one of its keys as x_key")
    if y_key is None:
        series = {label: ys for label, ys in curve.items() if label != x_key}
    elif isinstance(curve.get(y_key), dict):
        series = curve[y_key]
    elif y_key in curve:
        series = {"": curve[y_key]}
    else:
        return False
    xs = curve[x_key]
    where = f"{record['hardware']['gpu_name']}, {record['date']} (recorded)"
    drawn = 0
    for label, ys in series.items():
        if not label.startswith(prefix) or not isinstance(ys, list) or len(ys) != len(xs):
            continue   # another device's curve, or not a series of this x
        ax.plot(xs, [math.nan if y is None else y for y in ys], linestyle="--", marker="x",
                color=RECORDED_COLOURS[drawn % len(RECORDED_COLOURS)],
                label=f"{label}: {where}" if label else where)
        drawn += 1
    return drawn > 0


def key_figure(name: str, value, *, unit: str = "", device: str | None = None, compare: bool = True) -> None:
    """Report key figure ``name`` of this run (see the module docstring).

    Parameters
    ----------
    name : str
        ``"epNN.what"``, e.g. ``"ep01.matmul_fp16_tflops"``.
    value : float, int, list or dict
        The figure (JSON-serialisable; a dict of lists such as a curve is allowed).
    unit : str
        Printed after the value, e.g. ``"TFLOP/s"``.
    device : str, optional
        The GPU's name as the driver reports it (``torch.cuda.get_device_name()``),
        or None when the figure was measured on the CPU.
    compare : bool
        Print the band verdict (GPU) or the GPU reference (CPU); on a GPU, also the
        reference another GPU recorded, if any. False for a figure that is a CPU
        figure by nature, such as the CPU side of a comparison.
    """
    if not re.fullmatch(r"ep\d\d\.[a-z0-9_]+", name):
        raise ValueError(f"key figure names look like 'ep01.matmul_fp16_tflops', got {name!r}")
    value = value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value
    print(f"{name}: {_format(value, unit)} on {device or 'the CPU'}")
    if compare and device:
        if isinstance(value, (int, float)):
            print(verdict(name, float(value), unit, device))
        expected = band(name, device)
        if gpu_reference(name) and not (expected and expected.kind == "measured"):  # else cited above
            show(name, unit)
    elif compare:
        show(name, unit)
    _append(name, value, unit, device)


def _append(name: str, value, unit: str, device: str | None) -> None:
    path = os.environ.get("GPUCOURSE_FIGURES")
    if not path:
        return
    line = json.dumps({"name": name, "value": value, "unit": unit, "device": device,
                       "notebook": os.environ.get("GPUCOURSE_NOTEBOOK", "")})
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as exc:
        print(f"(could not record {name} in {path}: {exc.strerror or exc})")


# --------------------------------------------------------------------------- the path a run took

def path_taken(name: str, value, why: str | None = None) -> None:
    """Record which way a cell went, for the GPU run's log: ``path_taken("ep04.keras_backend",
    "torch", why="TensorFlow is not installed")``.

    A cell that falls back (the simulator instead of compiled Numba, the math attention
    kernel, a skipped int4 step) still ends "ok"; only this line tells a GPU record which of
    its branches ran. Prints nothing: the cell says it to the learner in its own words.
    """
    if not re.fullmatch(r"ep\d\d\.[a-z0-9_]+", name):
        raise ValueError(f"path names look like 'ep04.keras_backend', got {name!r}")
    _write_line({"kind": "path", "name": name, "value": value, "why": why})


def _write_line(item: dict) -> None:
    path = os.environ.get("GPUCOURSE_FIGURES")
    if not path:
        return
    line = json.dumps({**item, "notebook": os.environ.get("GPUCOURSE_NOTEBOOK", "")})
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as exc:
        print(f"(could not record {item['name']} in {path}: {exc.strerror or exc})")


# --------------------------------------------------------------------------- provenance

def _git(*args: str, checkout: Path | None = None) -> str | None:
    """git's output in ``checkout`` (default :data:`CHECKOUT`), or None where git fails."""
    try:
        done = subprocess.run(["git", *args], cwd=checkout or CHECKOUT, capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def notebook_versions(notebook: str, checkout: Path | None = None) -> list[str]:
    """The git blob hashes of every committed version of ``notebook`` (a path in the
    checkout) in the history of HEAD, newest first: "an ancestor version of today's notebook"."""
    out = _git("log", "--format=", "--raw", "--no-abbrev", "--no-renames", "HEAD", "--",
               notebook, checkout=checkout) or ""
    versions = []
    for line in out.splitlines():
        fields = line.split()
        if line.startswith(":") and len(fields) >= 6 and fields[-1] == notebook:
            blob = fields[3]
            if set(blob) != {"0"} and blob not in versions:  # a deletion has no new blob
                versions.append(blob)
    return versions


def commits_since(commit: str, notebook: str, checkout: Path | None = None) -> int | None:
    """How many commits changed ``notebook`` after ``commit``, up to HEAD (None: git cannot say)."""
    out = _git("rev-list", "--count", f"{commit}..HEAD", "--", notebook, checkout=checkout)
    return int(out) if out and out.strip().isdigit() else None


def _run_log(record: dict) -> dict:
    return {run.get("id"): run for run in record.get("runs", []) if isinstance(run, dict)}


def _same_value(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) or isinstance(b, float) and isinstance(a, (int, float)):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def provenance_problems(record: dict, checkout: Path | None = None) -> list[str]:
    """Why each figure of ``record`` is not backed by a run, one line per problem ([] if none).

    A figure is backed when the record's ``runs`` log holds a run with its id that ran its
    notebook at the figure's blob hash and logged the figure with the same value, unit and
    device; when that blob is one of the committed versions of the notebook in HEAD's
    history; when the run's commit is an ancestor of HEAD and, unless the run's notebook
    differed from that commit, holds that blob. A run adopted from a record the check wrote
    before runs were logged (``"adopted"``) must match that record in git figure by figure.
    """
    problems = []
    runs = _run_log(record)
    if not runs:
        problems.append("the record has no log of the runs that made it (\"runs\"): none of its "
                        f"{len(record.get('figures', {}))} figures can be traced to a run")
    ran = {n["notebook"] for n in record.get("notebooks", [])}
    versions, ancestors, adopted_files = {}, {}, {}
    for name, figure in sorted(record.get("figures", {}).items()):
        notebook = figure.get("notebook", "")
        if notebook not in ran:
            problems.append(f"{name}: attributed to {notebook or 'no notebook'}, which no run of this "
                            "record ran (it is not among the record's notebooks)")
            continue
        if not runs:
            problems.append(f"{name}: no run log, so no version of {notebook} or commit it was "
                            "measured at")
            continue
        run = runs.get(figure.get("run"))
        if run is None:
            problems.append(f"{name}: its run {figure.get('run')!r} is not in the record's run log")
            continue
        entry = next((n for n in run.get("notebooks", []) if n.get("notebook") == notebook), None)
        if entry is None:
            problems.append(f"{name}: run {run['id']} did not run {notebook}")
            continue
        logged = [f for f in entry.get("figures", []) if f.get("name") == name]
        if not logged or not (_same_value(logged[-1].get("value"), figure.get("value"))
                              and logged[-1].get("unit") == figure.get("unit")
                              and logged[-1].get("device") == figure.get("device")):
            problems.append(f"{name}: the value, unit or device is not what run {run['id']} logged "
                            f"for {notebook} ({'nothing' if not logged else repr(logged[-1].get('value'))})")
            continue
        for key, own in (("blob", entry.get("blob")), ("commit", run.get("commit")),
                         ("date", run.get("date"))):
            if figure.get(key) != own:
                problems.append(f"{name}: its {key} {figure.get(key)!r} is not its run's {own!r}")
        blob, commit = entry.get("blob"), run.get("commit")
        if notebook not in versions:
            versions[notebook] = notebook_versions(notebook, checkout)
        if not versions[notebook]:
            problems.append(f"{name}: git has no history of {notebook} here (not a checkout, or "
                            "a shallow one): its version cannot be checked")
        elif blob not in versions[notebook]:
            problems.append(f"{name}: measured by a version of {notebook} ({str(blob)[:10]}) that was "
                            "never one of the versions of today's notebook in git's history")
        if commit not in ancestors:
            ancestors[commit] = bool(commit) and _git("merge-base", "--is-ancestor", commit, "HEAD",
                                                      checkout=checkout) is not None
        if not ancestors[commit]:
            problems.append(f"{name}: its run's commit {str(commit)[:10]} is not an ancestor of HEAD")
        elif not entry.get("dirty"):
            at_commit = (_git("rev-parse", f"{commit}:{notebook}", checkout=checkout) or "").strip()
            if at_commit != blob:
                problems.append(f"{name}: {notebook} at {commit[:10]} is not the version the run "
                                f"logged ({str(blob)[:10]}), and the run does not say it differed")
        adopted = run.get("adopted")
        if adopted:
            key = (adopted.get("commit"), adopted.get("file"))
            if key not in adopted_files:
                text = _git("show", f"{key[0]}:{key[1]}", checkout=checkout)
                adopted_files[key] = json.loads(text) if text else None
            old = adopted_files[key]
            was = (old or {}).get("figures", {}).get(name)
            if not was or not _same_value(was.get("value"), figure.get("value")) \
                    or was.get("notebook") != notebook:
                problems.append(f"{name}: run {run['id']} was adopted from {key[1]} as committed in "
                                f"{str(key[0])[:10]}, which does not hold this figure from {notebook}")
    return problems


def figure_age(figure: dict, checkout: Path | None = None) -> str:
    """"current", or how many commits changed the figure's notebook since its run."""
    n = commits_since(figure.get("commit", ""), figure.get("notebook", ""), checkout) \
        if figure.get("commit") else None
    if n is None:
        return "unknown"
    return "current" if n == 0 else f"{n} commit{'s' if n != 1 else ''} since"


# --------------------------------------------------------------------------- a T4's figures

def envelope_label(record: dict) -> str | None:
    """"T4 envelope on NVIDIA H100 80GB HBM3" for a record made under ``--envelope t4``."""
    model = ENVELOPES.get(record.get("envelope") or "")
    if model is None:
        return None
    return f"{model} envelope on {record['hardware'].get('gpu_name') or 'no GPU'}"


def envelope_figure(name: str, envelope: str = "t4") -> tuple[dict, object] | None:
    """(record, value) of the newest ``--envelope`` record holding ``name``, measured on a GPU."""
    for record in records():
        if record.get("envelope") != envelope or record.get("mode") == QUICK_MODE:
            continue
        figure = record.get("figures", {}).get(name)
        if isinstance(figure, dict) and figure.get("device") and record["hardware"].get("gpu_name"):
            return record, figure["value"]
    return None


def _t4_record_figure(name: str) -> tuple[dict, object] | None:
    for record in records():
        figure = gpu_figure(record, name)
        if figure is not None and gpu_model(record["hardware"].get("gpu_name"))[0] == "Tesla T4":
            return record, figure["value"]
    return None


def what_differs(gpu_name: str | None, model: str = "Tesla T4") -> str:
    """What separates ``gpu_name`` from a T4, from the datasheets in bands.json: memory
    bandwidth, tensor-core generation, and the launch overhead neither side of a ratio removes."""
    _, ran = gpu_model(gpu_name)
    t4 = bands()["models"][model]
    if ran is None:
        return (f"no datasheet for {gpu_name} in the course's table: compare its bandwidth and "
                f"tensor cores with the T4's {readable(t4['memory_gbs'])} GB/s and "
                f"{readable(t4['fp16_tensor_dense_tflops'])} TFLOP/s")
    return (f"the T4 has {readable(t4['memory_gbs'])} GB/s of memory bandwidth against "
            f"{readable(ran['memory_gbs'])} GB/s ({ran['memory_gbs'] / t4['memory_gbs']:.0f}× less), "
            f"Turing's tensor cores at {readable(t4['fp16_tensor_dense_tflops'])} dense FP16 TFLOP/s against "
            f"{readable(ran['fp16_tensor_dense_tflops'])} "
            f"({ran['fp16_tensor_dense_tflops'] / t4['fp16_tensor_dense_tflops']:.0f}× less) and no "
            "bfloat16 tensor cores; a kernel launch costs a few microseconds on both, so the "
            "smaller the work, the less the gap")


def t4_reveal(name: str, unit: str = "", *, predicted=None, basis: str = "") -> None:
    """Answer a question that names a T4: the T4's figure, then the GPU that ran beside it.

    In order of what exists: a recorded T4 figure; the ``--envelope t4`` figure ("T4
    envelope on <GPU>": a big GPU limited to a T4's memory, attention kernels, no bf16 and
    no TF32, with its own bandwidth and tensor cores); else ``predicted`` (the feasibility
    model's figure for a T4, with ``basis``), labelled as a prediction. Then the figure
    recorded on the GPU that ran, and what differs from a T4.
    """
    t4 = _t4_record_figure(name)
    envelope = envelope_figure(name)
    if t4 is not None:
        record, value = t4
        print(f"  On a T4: {_format(value, unit)}, measured on {record['hardware']['gpu_name']} "
              f"{record['date']}.")
    elif envelope is not None:
        record, value = envelope
        print(f"  {envelope_label(record)}: {_format(value, unit)}, measured {record['date']}: "
              "not a T4, its memory, attention kernels and number formats limited to a T4's.")
    elif predicted is not None:
        print(f"  Predicted for a T4 (the course's feasibility model, not a measurement): "
              f"{_format(predicted, unit)}" + (f"; {basis}" if basis else "") + ".")
    else:
        print(f"  No T4 figure for {name} has been measured or predicted yet; see {STATUS_PAGE}.")
    ran = gpu_reference(name)
    if ran is not None and t4 is None:
        record, value = ran
        gpu = record["hardware"]["gpu_name"]
        same = bands().get("absolute", {}).get(name.split(".", 1)[-1])
        differs = ("nothing that changes this figure, the same on every GPU ("
                   f"{same['why'].removesuffix('; the same on every GPU')})" if same
                   else what_differs(gpu))
        print(f"  Recorded on {gpu}, {record['date']}: {_format(value, unit)}. What differs: {differs}.")
