"""Run every episode and solution notebook at this machine's size and write a reference record.

    make gpu-check                                   # everything, one notebook at a time
    python3 tools/gpu_check.py --plan                # the chunks of <= 9 minutes a slot fits
    python3 tools/gpu_check.py --chunk 1/2           # one chunk, merged into the record
    python3 tools/gpu_check.py --quick               # smoke pass: test size, in parallel
    python3 tools/gpu_check.py --only episodes/01-what-is-a-gpu.ipynb --merge

Each notebook runs top to bottom in a fresh kernel (full size with a GPU, reduced
without, test size with ``--quick``; real data where it can be downloaded unless
GPUCOURSE_OFFLINE=1), with a time limit per cell. The record — hardware, software
versions, per-notebook time and outcome, and every key figure the notebooks reported
through ``gpucourse.reference.key_figure`` — is written to
``gpucourse/references/<device>.json`` after every notebook (so a run stopped by a time
limit keeps what finished); ``--merge`` (and ``--chunk``) update that record instead of
replacing it. The executed notebooks go to ``_build/gpu-check/`` (not committed).

Every notebook runs, even on a machine without TensorFlow (many clusters have PyTorch
only): one that stops where it imports a module this machine lacks (tensorflow, keras,
torchao, uproot, xgboost, ...) is recorded as "incomplete: needs X", with the figures it
reported before that cell, and does not count as a failure.

On a GPU node with a Python and torch and nothing else (no pip, no Jupyter, no network),
the notebook runner comes from ``gpu-bundle/`` (``make gpu-bundle`` on a machine with
internet; see ``tools/gpu_bundle.py``).

A ``--quick`` record is a smoke test, written as ``<device>-quick.json`` under
``_build/gpu-check/`` and marked ``"mode": "quick"``: its figures are test-size and never
a reference. This is the only program that writes reference records. Nothing in them is
typed in or estimated.

Provenance: the record keeps a log of its runs (``"runs"``): the commit each ran at, the
date, and per notebook the git blob hash of the notebook as it ran (and whether it differed
from the commit), its outcome, the paths it took (``reference.path_taken``: the Keras
backend, a fallback, compiled or simulated; skipped and why) and every figure it reported.
Each figure carries its run, commit, blob, date and path; merging a run into a record keeps
every other figure's own provenance. ``tests/test_reference_provenance.py`` refuses a
figure no run logged. ``--adopt FILE COMMIT...`` turns a record written before runs were
logged into one with a log, from git alone (see :func:`adopt`).

Before it runs, the check says which notebooks each package this Python lacks costs (from
the notebooks' own imports), so a GPU slot is not spent learning it. Episode 4 runs on
Keras's PyTorch backend (``KERAS_BACKEND=torch``) unless ``KERAS_BACKEND`` is set: GPU nodes
rarely have TensorFlow.

``--envelope t4`` runs the notebooks with the GPU limited to what a T4 has, where software
can (``gpucourse/fakes/envelope.py``: memory, attention kernels, compute capability, bf16, TF32),
writes ``<device>-t4-envelope.json`` labelled "T4 envelope on <GPU>" (never a T4, never a
reference for its own GPU), and holds the feasibility model's T4 rows against each notebook:
a notebook that stopped out of memory where the model says every row fits is a failure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_bundle  # noqa: E402
import gpu_plan  # noqa: E402
from gpucourse import reference  # noqa: E402

OUT = ROOT / "_build" / "gpu-check"
MISSING_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]+)'")
# How the course's own helpers say it (kernels.KernelSetupError: "triton is not installed: ...").
NOT_INSTALLED = re.compile(r"\b([A-Za-z0-9_]+) is not installed")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A lent GPU runs one command for at most 600 s; no cell of the course needs 300 s at full size.
DEFAULT_TIMEOUT = 300.0
# The mode of a smoke pass's record; gpucourse.reference never takes its figures as references.
QUICK = getattr(reference, "QUICK_MODE", "quick")
VERSIONS = (("torch", ("torch",)), ("triton", ("triton", "pytorch-triton")),
            ("tensorflow", ("tensorflow", "tensorflow-cpu")), ("keras", ("keras",)),
            ("transformers", ("transformers",)), ("peft", ("peft",)), ("torchao", ("torchao",)),
            ("accelerate", ("accelerate",)), ("numpy", ("numpy",)), ("pandas", ("pandas",)),
            ("scikit-learn", ("scikit-learn",)), ("xgboost", ("xgboost", "xgboost-cpu")),
            ("uproot", ("uproot",)), ("awkward", ("awkward",)), ("nbclient", ("nbclient",)),
            ("ipykernel", ("ipykernel",)), ("matplotlib", ("matplotlib",)),
            ("numba", ("numba",)), ("numba-cuda", ("numba-cuda",)),
            ("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")),
            ("bitsandbytes", ("bitsandbytes",)), ("cuda-python", ("cuda-python", "cuda-bindings")),
            ("safetensors", ("safetensors",)), ("tokenizers", ("tokenizers",)),
            ("huggingface-hub", ("huggingface-hub",)), ("scipy", ("scipy",)))
#: Modules the notebooks import whose distribution has another name.
DISTRIBUTIONS = {"sklearn": ("scikit-learn",), "PIL": ("pillow",), "yaml": ("pyyaml",),
                 "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"),
                 "tensorflow": ("tensorflow", "tensorflow-cpu"), "xgboost": ("xgboost", "xgboost-cpu"),
                 "huggingface_hub": ("huggingface-hub",)}
#: What some course helpers import on the notebooks' behalf (the notebooks' own lines do not show it).
HELPER_IMPORTS = {"12-gpu-kernels": ("triton", "numba"), "10-language-model": ("transformers",),
                  "14-cheaper-language-model": ("transformers", "peft", "torchao")}
#: The GPU run trains episode 4 on Keras's PyTorch backend unless KERAS_BACKEND says otherwise.
KERAS_BACKEND = "torch"


def notebooks(only: list[str] | None) -> list[Path]:
    if only:
        return [(ROOT / p).resolve() for p in only]
    return sorted((ROOT / "episodes").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))


def relative(path: Path) -> str:
    """The notebook's name in the record: its path in the checkout, else its file name."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


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


def _nvidia_smi(*args: str) -> str | None:
    try:
        smi = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return smi.stdout if smi.returncode == 0 and smi.stdout.strip() else None


def driver_cuda_version(smi_output: str | None) -> str | None:
    """The newest CUDA the driver supports, from ``nvidia-smi``'s header ("CUDA Version: 13.0")."""
    match = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", smi_output or "")
    return match.group(1) if match else None


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
    driver = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
    if driver:
        info["driver"] = driver.strip().splitlines()[0]
    cuda = driver_cuda_version(_nvidia_smi())
    if cuda:
        info["driver_cuda"] = cuda
    return info


def software(from_bundle: list[dict] = ()) -> dict:
    """Versions of Python and of every library the episodes' figures depend on.

    ``cuda`` is the CUDA version torch was built with (the driver's is in ``hardware``);
    ``from_bundle`` names the packages that came from ``gpu-bundle/``, not the machine.
    """
    info = {"python": platform.python_version()}
    for key, distributions in VERSIONS:
        info[key] = _version(*distributions)
    for module in sorted(imported_modules(notebooks(None))):
        key = DISTRIBUTIONS.get(module, (module.replace("_", "-"),))[0]
        if key not in info and module not in STDLIB:
            info[key] = _version(*DISTRIBUTIONS.get(module, (module.replace("_", "-"), module)))
    try:
        import torch

        info["cuda"] = torch.version.cuda
    except ImportError:
        pass
    if from_bundle:
        info["from_bundle"] = sorted(f"{w['name']} {w['version']}" for w in from_bundle)
    return info


STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"__future__"}


def _code_cells(path: Path) -> list[str]:
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return []
    return ["".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"]


def notebook_imports(path: Path) -> set[str]:
    """The top-level modules ``path``'s code cells import unconditionally (at a cell's top
    level: an import inside ``try``, ``if`` or a function is the notebook's own fallback),
    and those its helpers import for it (``HELPER_IMPORTS``); the standard library, the
    course's own package and modules the notebook writes itself left out."""
    import ast

    found, sources = set(), _code_cells(path)
    for source in sources:
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    found.update(HELPER_IMPORTS.get(path.stem, ()))
    written = "\n".join(sources)
    return {m for m in found if m not in STDLIB and m != "gpucourse"
            and not re.search(rf"\b{re.escape(m)}\.py(?![A-Za-z0-9_])", written)}


def imported_modules(paths: list[Path]) -> set[str]:
    return set().union(*(notebook_imports(p) for p in paths)) if paths else set()


#: What a notebook needs only if its framework is there: without it, the notebook runs another way.
OPTIONAL = {"04-keras-cnn": {"tensorflow"},   # Keras runs on PyTorch where TensorFlow is missing
            "12-gpu-kernels": {"numba", "triton"}}  # each part runs without the other's package


def missing_costs(paths: list[Path], present=None) -> dict[str, list[str]]:
    """``{module: [notebooks that stop without it]}`` for the modules this Python lacks."""
    present = present or has_module
    costs: dict[str, list[str]] = {}
    for path in paths:
        optional = OPTIONAL.get(path.stem, set())
        for module in sorted(notebook_imports(path) - optional):
            if not present(module):
                costs.setdefault(module, []).append(relative(path))
    return dict(sorted(costs.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def describe_costs(costs: dict[str, list[str]]) -> str:
    if not costs:
        return "every package the notebooks import is here"
    lines = ["packages this Python lacks, and the notebooks each one costs:"]
    for module, paths in costs.items():
        short = ", ".join(Path(p).parent.name[:3] + " " + Path(p).name[:2] for p in paths)
        lines.append(f"  {module}: {len(paths)} notebook{'s' if len(paths) != 1 else ''} ({short})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- git

def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit() -> str | None:
    """The commit the checkout is at (None outside git, e.g. a copied tree)."""
    return _git("rev-parse", "HEAD")


def notebook_blob(path: Path, commit: str | None) -> tuple[str | None, bool]:
    """(git blob hash of the notebook as it runs, whether it differs from ``commit``'s)."""
    blob = _git("hash-object", "--", str(path))
    if blob is None:
        import hashlib

        data = path.read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # what git would say
    at_commit = _git("rev-parse", f"{commit}:{relative(path)}") if commit else None
    return blob, blob != at_commit


def device_slug(hw: dict) -> str:
    name = hw["gpu_name"] or f"cpu {hw['cpu_model']}"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60]


def classify(error_text: str) -> tuple[str, str, str | None]:
    """(outcome, reason, missing module) of a notebook that stopped with ``error_text``.

    A stop at ``No module named 'X'`` where X is not installed here is "incomplete" (the
    machine lacks a framework; the figures before it are kept); anything else is "failed".
    """
    text = ANSI.sub("", error_text).strip()
    for name in MISSING_MODULE.findall(text) + NOT_INSTALLED.findall(text):
        top = name.split(".")[0]
        if not has_module(top):
            return ("incomplete",
                    f"needs {top}: stopped where it imports {top}, which is not installed "
                    "here; the figures reported before that cell are kept", top)
    last = text.splitlines()[-1] if text else "no error text"
    return "failed", last[:300], None


def run_notebook(path: Path, timeout: float, figures_file: Path, quick: bool = False,
                 envelope: str | None = None) -> dict:
    """Execute ``path`` in a fresh kernel; its entry for the record.

    The kernel gets its own environment (several notebooks may run at once): where to
    append its key figures, its own name, and the run size.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    rel = relative(path)
    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ, GPUCOURSE_FIGURES=str(figures_file), GPUCOURSE_NOTEBOOK=rel)
    env.pop("GPUCOURSE_QUICK", None)  # the machine's own size, never the test size ...
    if quick:
        env["GPUCOURSE_QUICK"] = "1"  # ... unless this is the smoke pass
    env.setdefault("KERAS_BACKEND", KERAS_BACKEND)
    if envelope:
        from gpucourse.fakes import envelope as limits

        env[limits.VARIABLE] = envelope
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [limits.SITE_FOLDER, env.get("PYTHONPATH")]))
    from gpucourse import _kernelstart

    _kernelstart.install()  # kernels over IPC: no TCP port another process could take first
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", startup_timeout=180,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    outcome, reason, needs = "ok", None, None
    try:
        client.execute(env=env)
    except CellTimeoutError as exc:
        outcome, reason = "timeout", str(exc).splitlines()[0][:300]
    except (CellExecutionError, DeadKernelError, RuntimeError) as exc:
        outcome, reason, needs = classify(str(exc))
    seconds = round(time.perf_counter() - start, 1)
    OUT.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, OUT / rel.replace("/", "-"))
    print(f"  {rel}: {outcome} in {seconds:.0f} s" + (f" ({reason})" if reason else ""), flush=True)
    entry = {"notebook": rel, "outcome": outcome, "seconds": seconds,
             "date": dt.date.today().isoformat()}
    if reason:
        entry["reason"] = reason
    if needs:
        entry["needs"] = needs
    return entry


def _run_safely(path: Path, timeout: float, figures_file: Path, quick: bool,
                envelope: str | None = None) -> dict:
    """``run_notebook``, with any other error (a kernel that cannot start) as "failed"."""
    try:
        return run_notebook(path, timeout, figures_file, quick, envelope)
    except Exception as exc:  # one notebook must not end the run
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        print(f"  {relative(path)}: failed ({reason})", flush=True)
        return {"notebook": relative(path), "outcome": "failed", "seconds": 0.0,
                "date": dt.date.today().isoformat(), "reason": reason[:300]}


def read_figures(figures_file: Path) -> list[dict]:
    if not figures_file.exists():
        return []
    return [json.loads(line) for line in figures_file.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- the record

class Record:
    """The record being written: a fresh one, or an existing one updated (``--merge``).

    ``run`` is this run's entry in the record's log (``new_run``); each finished notebook
    is added to it with every line the notebook reported, and its figures replace that
    notebook's earlier ones, each carrying this run's provenance. Figures of notebooks this
    run did not touch keep theirs.
    """

    def __init__(self, base: dict, order: list[str], run: dict | None = None):
        self.data = base
        self.data.setdefault("runs", [])
        self.run = run or new_run(self.data, mode=base.get("mode", "full"), commit=None)
        if self.run not in self.data["runs"]:
            self.data["runs"].append(self.run)
        self.entries = {n["notebook"]: n for n in base["notebooks"]}
        # Existing notebooks keep their place; this run's are added in run order.
        self.order = [n["notebook"] for n in base["notebooks"]]
        self.order += [nb for nb in order if nb not in self.entries]

    def add(self, entry: dict, lines: list[dict], blob: str | None = None, dirty: bool = False) -> None:
        """Put ``entry`` in (replacing this notebook's earlier entry and figures).

        ``lines`` are what the notebook reported: key figures, and the paths it took
        (``"kind": "path"``); ``blob`` the git hash of the notebook as it ran.
        """
        notebook = entry["notebook"]
        figures = [item for item in lines if item.get("kind", "figure") == "figure"]
        paths = {item["name"]: ({"value": item["value"], "why": item["why"]} if item.get("why")
                                else {"value": item["value"]})
                 for item in lines if item.get("kind") == "path"}
        if entry["outcome"] != "ok" and entry.get("reason"):
            paths["skipped"] = {"value": entry["outcome"], "why": entry["reason"]}
        if self.run.get("envelope"):
            paths["envelope"] = {"value": self.run["envelope"]}
        log = {k: v for k, v in entry.items() if k != "date"}
        log.update(blob=blob, dirty=dirty, path=paths,
                   figures=[{k: item.get(k) for k in ("name", "value", "unit", "device")} for item in figures])
        self.run["notebooks"] = [n for n in self.run["notebooks"] if n["notebook"] != notebook] + [log]
        self.entries[notebook] = dict(entry, run=self.run["id"], blob=blob)
        kept = self.data["figures"]
        for name in [n for n, f in kept.items() if f["notebook"] == notebook]:
            del kept[name]
        for item in figures:
            old = kept.get(item["name"])
            if (old and item["notebook"].startswith("solutions/")
                    and not old["notebook"].startswith("solutions/")):
                continue  # the episode's own figure wins
            kept[item["name"]] = {**{k: item[k] for k in ("value", "unit", "device", "notebook")},
                                  "run": self.run["id"], "commit": self.run["commit"], "blob": blob,
                                  "date": self.run["date"], "path": paths}
        self.data["notebooks"] = [self.entries[n] for n in self.order if n in self.entries]
        self.data["total_seconds"] = round(sum(n["seconds"] for n in self.data["notebooks"]), 1)

    def write(self, target: Path) -> None:
        """Write the record atomically (a reader never sees half a file)."""
        self.data["date"] = dt.date.today().isoformat()
        reference.validate(self.data)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        part.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
        part.replace(target)


def new_run(record: dict, *, mode: str, commit: str | None, envelope: str | None = None,
            costs: dict | None = None) -> dict:
    """A new entry of ``record``'s run log: id, date, commit, mode, and what it lacked."""
    date = dt.date.today().isoformat()
    taken = {run.get("id") for run in record.get("runs", [])}
    k = 1
    while f"{date}-{k}" in taken:
        k += 1
    run = {"id": f"{date}-{k}", "date": date, "commit": commit, "mode": mode, "notebooks": []}
    if envelope:
        run["envelope"] = envelope
    if costs is not None:
        run["missing"] = costs
    return run


def fresh_record(hw: dict, sw: dict, mode: str, envelope: str | None = None) -> dict:
    record = {
        "schema": reference.SCHEMA_VERSION,
        "date": dt.date.today().isoformat(),
        "device": device_slug(hw) + (f"-{envelope}-envelope" if envelope else ""),
        "mode": mode,
        "offline": os.environ.get("GPUCOURSE_OFFLINE", "") not in ("", "0"),
        "hardware": hw,
        "software": sw,
        "notebooks": [],
        "total_seconds": 0.0,
        "figures": {},
        "runs": [],
    }
    if envelope:
        record["envelope"] = envelope
        record["label"] = reference.envelope_label(record)
    if mode == QUICK:
        record["note"] = ("a smoke pass at test size (GPUCOURSE_QUICK=1), notebooks in parallel: "
                          "its figures are not references")
    return record


def merge_base(target: Path, record: dict) -> dict:
    """The existing record at ``target`` to update with this run, or ``record`` if none.

    Raises
    ------
    ValueError
        When the existing record is unreadable, has no run log (adopt it first), or was made
        at another size, on another GPU, in another envelope, or with another torch or
        Python: one record holds one configuration.
    """
    if not target.exists():
        return record
    try:
        old = reference.validate(json.loads(target.read_text()))
    except ValueError as exc:
        raise ValueError(f"--merge: {target} is not a usable record ({exc}); move it away "
                         "or run without --merge") from None
    if old["schema"] < 2:
        raise ValueError(f"--merge: {target} has no run log (schema {old['schema']}); give it one "
                         "with `tools/gpu_check.py --adopt` first, or write a new record")
    checks = (("mode", old.get("mode"), record["mode"]),
              ("envelope", old.get("envelope"), record.get("envelope")),
              ("GPU", old["hardware"].get("gpu_name"), record["hardware"].get("gpu_name")),
              ("torch", old["software"].get("torch"), record["software"].get("torch")),
              ("Python", old["software"].get("python"), record["software"].get("python")))
    for what, before, now in checks:
        if before != now:
            raise ValueError(f"--merge: {target} was made with {what} {before}, this run has "
                             f"{now}; write a new record (leave out --merge, or give --out)")
    old.update(date=record["date"], hardware=record["hardware"], software=record["software"],
               offline=record["offline"] or old.get("offline", False))
    return old


# --------------------------------------------------------------------------- adopting an old record

def _record_at(commit: str, rel: str) -> dict:
    text = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    return json.loads(text)


def adopt(record_file: Path, commits: list[str]) -> tuple[dict, list[str]]:
    """A record with a run log, made from git alone out of one written before runs were logged.

    ``commits`` are the commits in which this program's own output was committed, oldest
    first (``git log`` shows them); the record is read as the last of them holds it, never
    from the file as it is now (a later hand edit is not taken over). Each notebook entry
    belongs to the earliest of ``commits`` from which it stayed the same: the run that made
    it committed its record there. That run's commit is not known; the newest it can have
    used is that commit's parent, and the notebook's version is the one there; both are
    marked as inferred. A figure whose notebook no entry names is dropped (no run made it).

    Returns
    -------
    (record, dropped)
        The schema-2 record, and one line per figure left out, with why.
    """
    rel = relative(record_file.resolve())
    versions = [(c, _record_at(c, rel)) for c in commits]
    last_commit, last = versions[-1]
    runs, entries, by_notebook = {}, [], {}
    for entry in last["notebooks"]:
        origin = last_commit
        for commit, older in reversed(versions[:-1]):
            if entry in older["notebooks"]:
                origin = commit
            else:
                break
        parent = _git("rev-parse", f"{origin}^")
        run = runs.get(origin)
        if run is None:
            run = runs[origin] = {
                "id": f"{entry.get('date', last['date'])}-adopted-{origin[:8]}",
                "date": entry.get("date", last["date"]), "commit": parent, "mode": last.get("mode"),
                "notebooks": [],
                "adopted": {"file": rel, "commit": _git("rev-parse", last_commit),
                            "first_committed_in": _git("rev-parse", origin),
                            "why": ("written by tools/gpu_check.py before runs were logged; the run's "
                                    "commit and notebook versions were not recorded, so they are "
                                    "inferred: the parent of the commit that first committed this "
                                    "run's entries, the newest checkout the run can have used")}}
        blob = _git("rev-parse", f"{parent}:{entry['notebook']}")
        by_notebook[entry["notebook"]] = (run, blob)
        run["notebooks"].append({**{k: v for k, v in entry.items() if k != "date"}, "blob": blob,
                                 "dirty": False, "inferred": True,
                                 "path": {"unknown": {"value": "not logged",
                                                      "why": "runs before the run log recorded no paths"}},
                                 "figures": []})
        entries.append(dict(entry, run=run["id"], blob=blob))
    figures, dropped = {}, []
    for name, figure in sorted(last["figures"].items()):
        if figure["notebook"] not in by_notebook:
            dropped.append(f"{name}: {figure['notebook']} is not among the notebooks the record's "
                           "runs ran")
            continue
        run, blob = by_notebook[figure["notebook"]]
        log = next(n for n in run["notebooks"] if n["notebook"] == figure["notebook"])
        log["figures"].append({"name": name, **{k: figure.get(k) for k in ("value", "unit", "device")}})
        figures[name] = {**figure, "run": run["id"], "commit": run["commit"], "blob": blob,
                         "date": run["date"], "path": log["path"]}
    record = {**{k: v for k, v in last.items() if k not in ("notebooks", "figures")},
              "schema": reference.SCHEMA_VERSION, "notebooks": entries, "figures": figures,
              "runs": list(runs.values())}
    reference.validate(record)
    return record, dropped


# --------------------------------------------------------------------------- main

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="notebooks to run (default: every episode and solution)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per cell (default {DEFAULT_TIMEOUT:.0f})")
    parser.add_argument("--out", type=Path, default=None,
                        help="record folder (default gpucourse/references; _build/gpu-check with --quick)")
    parser.add_argument("--merge", action="store_true",
                        help="update the existing record of this device instead of replacing it")
    parser.add_argument("--quick", action="store_true",
                        help="smoke pass: test size (GPUCOURSE_QUICK=1), several notebooks at once")
    parser.add_argument("--workers", type=int, default=None,
                        help="notebooks at once (default 1; with --quick min(8, CPU cores))")
    parser.add_argument("--chunk", default=None, metavar="K/N",
                        help="run the K-th of N chunks of about equal time (implies --merge)")
    parser.add_argument("--plan", action="store_true",
                        help="print the chunks (N from --chunk, else the fewest of <= 9 min) and stop")
    parser.add_argument("--bundle", type=Path, default=None,
                        help="the gpu-bundle folder (default: gpu-bundle/ in or next to the checkout)")
    parser.add_argument("--envelope", choices=["t4"], default=None,
                        help="run with the GPU limited to a T4's envelope (memory, attention kernels, "
                             "capability, bf16, TF32); writes <device>-t4-envelope.json")
    parser.add_argument("--adopt", nargs="+", metavar=("FILE", "COMMIT"), default=None,
                        help="give a record written before runs were logged its run log, from the "
                             "commits (oldest first) that hold this program's output of it; then stop")
    return parser


def _plan(args, rels: list[str], mode: str, target: Path, workers: int):
    est = gpu_plan.estimates(rels, mode, reference.REFERENCE_DIR, exclude=target,
                             validate=reference.validate,
                             data_files=getattr(reference, "DATA_FILES", ("bands.json",)))
    if args.chunk:
        _, n = gpu_plan.parse_chunk(args.chunk)
    else:
        n = gpu_plan.fewest_chunks(rels, est.seconds, workers=workers)
    return est, gpu_plan.split(rels, est.seconds, n)


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.adopt:
        if len(args.adopt) < 2:
            parser.error("--adopt FILE COMMIT [COMMIT ...]")
        path = Path(args.adopt[0])
        record, dropped = adopt(path, args.adopt[1:])
        path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"adopted {path}: {len(record['runs'])} runs, {len(record['figures'])} figures"
              + "".join(f"\n  dropped {line}" for line in dropped))
        return 0
    if args.chunk:
        try:
            gpu_plan.parse_chunk(args.chunk)
        except ValueError as exc:
            parser.error(str(exc))
    workers = args.workers or (min(8, os.cpu_count() or 1) if args.quick else 1)
    folder = (args.out or (OUT if args.quick else reference.REFERENCE_DIR)).resolve()
    if args.quick and folder == reference.REFERENCE_DIR.resolve():
        parser.error("a --quick record is a test-size smoke pass and never a reference: give "
                     "--out another folder than gpucourse/references")

    from_bundle = []
    if not args.plan:
        try:
            from_bundle = gpu_bundle.use(lambda name: has_module(name), args.bundle)
            check_kernel()
        except gpu_bundle.BundleError as exc:
            print(f"gpu-check: {exc}", file=sys.stderr)
            return 2
    # Kernels import the helper from this checkout even where it is not installed (a GPU
    # machine without the network cannot make .venv).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    hw = hardware()
    mode = QUICK if args.quick else ("full" if hw["gpu_name"] else "reduced")
    suffix = (f"-{args.envelope}-envelope" if args.envelope else "") + ("-quick" if args.quick else "")
    target = folder / f"{device_slug(hw)}{suffix}.json"
    selected = notebooks(args.only)
    rels = [relative(p) for p in selected]
    costs = missing_costs(selected)
    print(describe_costs(costs), flush=True)
    if args.plan or args.chunk:
        est, chunks = _plan(args, rels, mode, target, workers)
        if args.plan:
            print(gpu_plan.describe(chunks, est, workers))
            flags = " --quick" if args.quick else ""
            for k in range(1, len(chunks) + 1):
                print(f"  python3 tools/gpu_check.py{flags} --chunk {k}/{len(chunks)}")
            return 0
        k, n = gpu_plan.parse_chunk(args.chunk)
        by_rel = dict(zip(rels, selected))
        selected = [by_rel[r] for r in chunks[k - 1]]
        print(f"chunk {k}/{n}: {len(selected)} notebooks, estimated "
              f"{gpu_plan.chunk_seconds(chunks[k - 1], est.seconds, workers) / 60:.1f} min")

    sw = software(from_bundle)
    record = fresh_record(hw, sw, mode, args.envelope)
    if args.merge or args.chunk:
        try:
            record = merge_base(target, record)
        except ValueError as exc:
            print(f"gpu-check: {exc}", file=sys.stderr)
            return 2
    commit = git_commit()
    run = new_run(record, mode=mode, commit=commit, envelope=args.envelope, costs=costs)
    book = Record(record, [relative(p) for p in selected], run)
    book.blobs = {p: notebook_blob(p, commit) for p in selected}  # as they run, before any edit
    workers = max(1, min(workers, len(selected)))
    print(f"gpu-check ({mode}) on {hw['gpu_name'] or 'no GPU'} ({hw['cpu_model']}, "
          f"{hw['cpu_cores']} cores): {len(selected)} notebooks, {workers} at a time -> {target}",
          flush=True)
    return _run_all(selected, args, workers, book, target)


def _run_all(selected: list[Path], args, workers: int, book: Record, target: Path) -> int:
    """Run ``selected``, writing the record after each notebook."""
    ran = []
    old_handler = None
    if threading.current_thread() is threading.main_thread():
        # `timeout` sends SIGTERM: stop at once; the record already holds what finished.
        old_handler = signal.signal(signal.SIGTERM, _interrupt)
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            envelope = getattr(args, "envelope", None)
            futures = {pool.submit(_run_safely, path, args.timeout, Path(tmp) / f"figures-{i}.jsonl",
                                   args.quick, envelope): (path, Path(tmp) / f"figures-{i}.jsonl")
                       for i, path in enumerate(selected)}
            for future in as_completed(futures):
                entry = future.result()
                path, figures_file = futures[future]
                if envelope:
                    entry = hold_feasibility(entry, path, book.data["software"].get("torch"))
                blob, dirty = getattr(book, "blobs", {}).get(path) or notebook_blob(path, book.run["commit"])
                book.add(entry, read_figures(figures_file), blob, dirty)
                book.write(target)
                ran.append(entry)
    except KeyboardInterrupt:
        print(f"gpu-check: stopped; {target} holds the {len(ran)} notebooks that finished.",
              file=sys.stderr, flush=True)
        os._exit(130)  # the running kernels end with their parent (ipykernel's parent poller)
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
        pool.shutdown(wait=False, cancel_futures=True)
    failed = [r for r in ran if r["outcome"] in ("failed", "timeout")]
    incomplete = [r for r in ran if r["outcome"] == "incomplete"]
    print(f"wrote {target}: {len(ran)} notebooks this run ({len(failed)} failed, "
          f"{len(incomplete)} incomplete), {len(book.data['notebooks'])} in the record, "
          f"{len(book.data['figures'])} key figures, {book.data['total_seconds']:.0f} s")
    return 1 if failed else 0


def hold_feasibility(entry: dict, path: Path, torch_version: str | None) -> dict:
    """``entry`` with the feasibility model's T4 rows held against an envelope run of ``path``.

    Every row the model says fits on a T4 must have fitted: a notebook that stopped out of
    memory while the model says all its rows fit is "failed", naming the rows. Rows the model
    says do not fit are listed; where the notebook catches that, it is the lesson.
    """
    from gpucourse import feasibility

    t4 = feasibility.gpu_models()["T4"]
    try:
        rows = feasibility.episode_rows(path, t4, torch_version or "2.11.0") \
            if path.parent.name == "episodes" else []
    except (LookupError, ValueError, KeyError, OSError) as exc:
        return dict(entry, feasibility_t4={"rows": 0, "error": str(exc)[:200]})
    limit = feasibility.FIT_FRACTION * t4["total_memory"]
    fits = [r for r in rows if r.nbytes < limit]
    over = [f"{r.what}: {r.nbytes / 1e9:.2f} GB" for r in rows if r.nbytes >= limit]
    held = {"rows": len(rows), "fit": len(fits), "over": over}
    stopped_oom = "OutOfMemoryError" in entry.get("reason", "") or "out of memory" in entry.get("reason", "")
    if stopped_oom and fits and not over:
        entry = dict(entry, outcome="failed",
                     reason=(f"out of memory in the T4 envelope, where the feasibility model says all "
                             f"{len(fits)} rows fit (largest {max(r.nbytes for r in fits) / 1e9:.2f} GB "
                             f"of {limit / 1e9:.2f}): {entry.get('reason', '')}")[:300])
        held["contradicted"] = True
    return dict(entry, feasibility_t4=held)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def check_kernel() -> None:
    """Check that a ``python3`` kernel can start with this Python.

    nbclient asks jupyter_client for the ``python3`` kernel; with no kernel installed,
    jupyter_client uses ipykernel's built-in one (``sys.executable -m ipykernel_launcher``),
    which works when ipykernel is importable by this Python with this ``PYTHONPATH``.

    Raises
    ------
    gpu_bundle.BundleError
        When no such kernel is found or ipykernel cannot be imported in a fresh process.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        raise gpu_bundle.BundleError("jupyter_client finds no python3 kernel: install ipykernel "
                                     "for this Python or use gpu-bundle/") from None
    exe = spec.argv[0] if spec.argv else ""
    if exe not in ("python", "python3") and Path(exe).resolve() != Path(sys.executable).resolve():
        print(f"(the python3 kernel installed here runs {exe}, not {sys.executable})")
        return
    done = subprocess.run([sys.executable, "-c", "import ipykernel.kernelapp"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip() or "no output").splitlines()[-1]
        raise gpu_bundle.BundleError(f"a notebook kernel cannot start with {sys.executable} "
                                     f"({last}); rebuild gpu-bundle/ for this Python with "
                                     "`make gpu-bundle BUNDLE_PYTHON=%d.%d`" % sys.version_info[:2])


if __name__ == "__main__":
    sys.exit(main())
