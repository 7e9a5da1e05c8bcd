"""Run every episode and solution notebook at this machine's size and write a reference record.

    make gpu-check                      # what to run on a GPU machine (or any machine)
    python tools/gpu_check.py --only episodes/01-what-is-a-gpu.ipynb --timeout 600

Each notebook runs top to bottom in a fresh kernel (full size with a GPU, reduced
without; real data where it can be downloaded unless GPUCOURSE_OFFLINE=1), with a
time limit. The record — hardware, software versions, per-notebook time and
outcome, and every key figure the notebooks reported through
``gpucourse.reference.key_figure`` — is written to
``gpucourse/references/<device>.json``; the executed notebooks go to
``_build/gpu-check/`` (not committed). Every notebook runs, even on a machine
without TensorFlow (many clusters have PyTorch only): one that stops where it
imports a framework this machine lacks is recorded as "incomplete", with the
figures it reported before that cell, and does not count as a failure.

This is the only program that writes reference records. Nothing in them is typed
in or estimated.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpucourse import reference  # noqa: E402

OUT = ROOT / "_build" / "gpu-check"
MISSING_FRAMEWORK = re.compile(r"No module named '(tensorflow|keras)'")


def notebooks(only: list[str] | None) -> list[Path]:
    if only:
        return [(ROOT / p).resolve() for p in only]
    return sorted((ROOT / "episodes").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _version(*distributions: str) -> str | None:
    """The installed version of the first of ``distributions`` (read from metadata, not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    for name in distributions:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware() -> dict:
    info = {"cpu_model": _cpu_model(), "cpu_cores": os.cpu_count(), "gpu_name": None, "gpu_count": 0}
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info.update(gpu_name=props.name, gpu_count=torch.cuda.device_count(),
                        gpu_memory_gib=round(props.total_memory / 2**30, 1),
                        compute_capability=f"{props.major}.{props.minor}")
    except ImportError:
        pass
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if smi.returncode == 0 and smi.stdout.strip():
            info["driver"] = smi.stdout.strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def software() -> dict:
    info = {"python": platform.python_version()}
    for key, distributions in (("torch", ("torch",)), ("tensorflow", ("tensorflow", "tensorflow-cpu")),
                               ("keras", ("keras",)), ("numpy", ("numpy",)), ("pandas", ("pandas",)),
                               ("scikit-learn", ("scikit-learn",)), ("uproot", ("uproot",))):
        info[key] = _version(*distributions)
    try:
        import torch

        info["cuda"] = torch.version.cuda
    except ImportError:
        pass
    return info


def device_slug(hw: dict) -> str:
    name = hw["gpu_name"] or f"cpu {hw['cpu_model']}"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60]


def run_notebook(path: Path, timeout: float, figures_file: Path) -> dict:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    nb = nbformat.read(path, as_version=4)
    os.environ["GPUCOURSE_FIGURES"] = str(figures_file)
    os.environ["GPUCOURSE_NOTEBOOK"] = rel
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    outcome, reason = "ok", None
    try:
        client.execute()
    except CellTimeoutError as exc:
        outcome, reason = "timeout", str(exc).splitlines()[0][:300]
    except (CellExecutionError, DeadKernelError, RuntimeError) as exc:
        outcome, reason = "failed", str(exc).strip().splitlines()[-1][:300]
        missing = MISSING_FRAMEWORK.search(str(exc))
        if missing and not has_module(missing.group(1)):
            outcome = "incomplete"
            reason = (f"stopped where it imports {missing.group(1)}, which is not installed here; "
                      "the figures reported before that cell are kept")
    seconds = round(time.perf_counter() - start, 1)
    OUT.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, OUT / rel.replace("/", "-"))
    print(f"  {rel}: {outcome} in {seconds:.0f} s" + (f" ({reason})" if reason else ""))
    entry = {"notebook": rel, "outcome": outcome, "seconds": seconds}
    if reason:
        entry["reason"] = reason
    return entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="notebooks to run (default: every episode and solution)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per cell (default 900)")
    parser.add_argument("--out", type=Path, default=None, help="record folder (default gpucourse/references)")
    args = parser.parse_args(argv)

    os.environ.pop("GPUCOURSE_QUICK", None)  # the machine's own size, never the test size
    # Kernels import the helper from this checkout even where it is not installed (a GPU
    # machine without the network cannot make .venv).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    hw, sw = hardware(), software()
    print(f"gpu-check on {hw['gpu_name'] or 'no GPU'} ({hw['cpu_model']}, {hw['cpu_cores']} cores)")
    with tempfile.TemporaryDirectory() as tmp:
        figures_file = Path(tmp) / "figures.jsonl"
        results = [run_notebook(p, args.timeout, figures_file) for p in notebooks(args.only)]
        lines = figures_file.read_text().splitlines() if figures_file.exists() else []
    figures = {}
    for line in lines:
        item = json.loads(line)
        if item["notebook"].startswith("solutions/") and item["name"] in figures:
            continue  # the episode's own figure wins
        figures[item["name"]] = {k: item[k] for k in ("value", "unit", "device", "notebook")}
    slug = device_slug(hw)
    record = reference.validate({
        "schema": reference.SCHEMA_VERSION,
        "date": dt.date.today().isoformat(),
        "device": slug,
        "mode": "full" if hw["gpu_name"] else "reduced",
        "offline": os.environ.get("GPUCOURSE_OFFLINE", "") not in ("", "0"),
        "hardware": hw,
        "software": sw,
        "notebooks": results,
        "total_seconds": round(sum(r["seconds"] for r in results), 1),
        "figures": figures,
    })
    folder = args.out or reference.REFERENCE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{slug}.json"
    tmp_target = target.with_suffix(".json.part")
    tmp_target.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    tmp_target.replace(target)
    failed = [r for r in results if r["outcome"] in ("failed", "timeout")]
    print(f"wrote {target}: "
          f"{len(results)} notebooks ({len(failed)} failed), {len(figures)} key figures, "
          f"{record['total_seconds']:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
