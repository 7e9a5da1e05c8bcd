"""Key figures: record them, compare them with the expected band, show the GPU reference.

An episode reports each of its key figures (matmul TFLOP/s, bandwidth, the
crossover, a speed-up, an accuracy ...) with one call::

    reference.key_figure("ep01.matmul_fp16_tflops", tflops, unit="TFLOP/s", device=gpu_name)

which

* prints the figure and, for a GPU model with a known band, whether it is
  inside the band expected for that model, and if not the likely reasons;
* on a machine without a GPU, prints the figure measured on a GPU by
  ``make gpu-check`` (device and date), or says that none was measured yet;
* when ``make gpu-check`` runs the notebook (``GPUCOURSE_FIGURES`` names a
  file), appends the figure to that file for the reference record.

Bands live in ``gpucourse/references/bands.json`` (derived from datasheets,
with sources); reference records, one per device, in
``gpucourse/references/<device>.json``, written only by ``tools/gpu_check.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

REFERENCE_DIR = Path(__file__).with_name("references")
SCHEMA_VERSION = 1


def reference_dir() -> Path:
    """Where reference records are read from (``GPUCOURSE_REFERENCE_DIR`` overrides, for tests)."""
    return Path(os.environ.get("GPUCOURSE_REFERENCE_DIR") or REFERENCE_DIR)


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
        return f"{self.low:.3g}–{self.high:.3g} {unit} for {self.model} ({self.kind}: {self.source})"


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
        if gpu_model(record["hardware"].get("gpu_name"))[0] == model:
            value = (gpu_figure(record, name) or {}).get("value")
            if isinstance(value, (int, float)) and math.isfinite(value) and value != 0:
                low, high = sorted((0.85 * value, 1.15 * value))
                return Band(low, high, model, "measured",
                            f"make gpu-check on {record['hardware']['gpu_name']}, {record['date']}, ±15 %")
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
    for path in sorted(reference_dir().glob("*.json")):
        if path.name == "bands.json":
            continue
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
    and are never a GPU reference.
    """
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


def validate(record: dict) -> dict:
    """Raise ValueError unless ``record`` has the reference record's fields and types."""
    if not isinstance(record, dict):
        raise ValueError("a record is a JSON object")
    for key, kind in REQUIRED.items():
        if not isinstance(record.get(key), kind):
            raise ValueError(f"field {key!r} missing or not a {kind.__name__}")
    if record["schema"] != SCHEMA_VERSION:
        raise ValueError(f"schema {record['schema']} is not {SCHEMA_VERSION}")
    for nb in record["notebooks"]:
        if not {"notebook", "outcome", "seconds"} <= set(nb):
            raise ValueError(f"notebook entry {nb} lacks notebook/outcome/seconds")
        if nb["outcome"] not in ("ok", "incomplete", "failed", "skipped", "timeout"):
            raise ValueError(f"outcome {nb['outcome']!r} of {nb['notebook']} is not ok/incomplete/failed/skipped/timeout")
    for name, figure in record["figures"].items():
        if not {"value", "unit", "notebook"} <= set(figure):
            raise ValueError(f"figure {name} lacks value/unit/notebook")
    return record


# --------------------------------------------------------------------------- the call episodes make

def _format(value, unit: str) -> str:
    if isinstance(value, float):
        return f"{value:.3g} {unit}".strip()
    if isinstance(value, dict):
        return f"a curve ({', '.join(value)})"
    if isinstance(value, list):
        return f"{len(value)} values"
    return f"{value} {unit}".strip()


def show(name: str, unit: str = "") -> None:
    """Print the GPU reference of key figure ``name``, or that none was measured yet."""
    ref = gpu_reference(name)
    if ref is None:
        print(f"  GPU reference for {name}: none measured yet (`make gpu-check` on a GPU machine records one).")
    else:
        record, value = ref
        print(f"  GPU reference for {name}: {_format(value, unit)} on {record['hardware']['gpu_name']}, "
              f"measured {record['date']} by make gpu-check.")


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
        Print the band verdict (GPU) or the GPU reference (CPU). False for a
        figure that is a CPU figure by nature, such as the CPU side of a comparison.
    """
    if not re.fullmatch(r"ep\d\d\.[a-z0-9_]+", name):
        raise ValueError(f"key figure names look like 'ep01.matmul_fp16_tflops', got {name!r}")
    value = value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value
    print(f"{name}: {_format(value, unit)} on {device or 'the CPU'}")
    if compare and device and isinstance(value, (int, float)):
        print(verdict(name, float(value), unit, device))
    elif compare and not device:
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
