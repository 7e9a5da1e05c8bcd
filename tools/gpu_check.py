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
            ("ipykernel", ("ipykernel",)))


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
    try:
        import torch

        info["cuda"] = torch.version.cuda
    except ImportError:
        pass
    if from_bundle:
        info["from_bundle"] = sorted(f"{w['name']} {w['version']}" for w in from_bundle)
    return info


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


def run_notebook(path: Path, timeout: float, figures_file: Path, quick: bool = False) -> dict:
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


def _run_safely(path: Path, timeout: float, figures_file: Path, quick: bool) -> dict:
    """``run_notebook``, with any other error (a kernel that cannot start) as "failed"."""
    try:
        return run_notebook(path, timeout, figures_file, quick)
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
    """The record being written: a fresh one, or an existing one updated (``--merge``)."""

    def __init__(self, base: dict, order: list[str]):
        self.data = base
        self.entries = {n["notebook"]: n for n in base["notebooks"]}
        # Existing notebooks keep their place; this run's are added in run order.
        self.order = [n["notebook"] for n in base["notebooks"]]
        self.order += [nb for nb in order if nb not in self.entries]

    def add(self, entry: dict, figures: list[dict]) -> None:
        """Put ``entry`` in (replacing this notebook's earlier entry and figures)."""
        notebook = entry["notebook"]
        self.entries[notebook] = entry
        kept = self.data["figures"]
        for name in [n for n, f in kept.items() if f["notebook"] == notebook]:
            del kept[name]
        for item in figures:
            old = kept.get(item["name"])
            if (old and item["notebook"].startswith("solutions/")
                    and not old["notebook"].startswith("solutions/")):
                continue  # the episode's own figure wins
            kept[item["name"]] = {k: item[k] for k in ("value", "unit", "device", "notebook")}
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


def fresh_record(hw: dict, sw: dict, mode: str) -> dict:
    record = {
        "schema": reference.SCHEMA_VERSION,
        "date": dt.date.today().isoformat(),
        "device": device_slug(hw),
        "mode": mode,
        "offline": os.environ.get("GPUCOURSE_OFFLINE", "") not in ("", "0"),
        "hardware": hw,
        "software": sw,
        "notebooks": [],
        "total_seconds": 0.0,
        "figures": {},
    }
    if mode == QUICK:
        record["note"] = ("a smoke pass at test size (GPUCOURSE_QUICK=1), notebooks in parallel: "
                          "its figures are not references")
    return record


def merge_base(target: Path, record: dict) -> dict:
    """The existing record at ``target`` to update with this run, or ``record`` if none.

    Raises
    ------
    ValueError
        When the existing record is unreadable or was made at another size, on another GPU,
        or with another torch or Python: one record holds one configuration.
    """
    if not target.exists():
        return record
    try:
        old = reference.validate(json.loads(target.read_text()))
    except ValueError as exc:
        raise ValueError(f"--merge: {target} is not a usable record ({exc}); move it away "
                         "or run without --merge") from None
    checks = (("mode", old.get("mode"), record["mode"]),
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
    target = folder / f"{device_slug(hw)}{'-quick' if args.quick else ''}.json"
    selected = notebooks(args.only)
    rels = [relative(p) for p in selected]
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
    record = fresh_record(hw, sw, mode)
    if args.merge or args.chunk:
        try:
            record = merge_base(target, record)
        except ValueError as exc:
            print(f"gpu-check: {exc}", file=sys.stderr)
            return 2
    book = Record(record, [relative(p) for p in selected])
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
            futures = {pool.submit(_run_safely, path, args.timeout, Path(tmp) / f"figures-{i}.jsonl",
                                   args.quick): Path(tmp) / f"figures-{i}.jsonl"
                       for i, path in enumerate(selected)}
            for future in as_completed(futures):
                entry = future.result()
                book.add(entry, read_figures(futures[future]))
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
