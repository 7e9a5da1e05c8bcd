"""Test-suite set-up shared by every test (unit tests and nbval runs alike).

* Quick + offline mode unless the caller chose otherwise, a non-interactive
  matplotlib backend, and a data cache inside ``_build/`` (never the user's).
* For each notebook in ``exercises/`` and ``solutions/`` that nbval runs, the
  kernel logs every ``check()`` (``GPUCOURSE_CHECK_LOG``), and an extra test
  item after the notebook's last cell asserts the outcomes: every solution
  passes, every untouched stub is reported "not done". A check that cannot
  fail, or that crashes on a stub, is caught here.
* Every kernel a test starts (nbval's, nbclient's) talks over IPC in a folder of its own
  (:mod:`gpucourse._kernelstart`): no TCP port is chosen, so two test workers starting
  kernels at the same moment cannot take each other's ports.
* Notebook kernels draw figures with Jupyter's inline backend, as a learner's do (the
  test process itself keeps Agg).
* ``--book-cache DIR``: every notebook nbval runs without a failure is stored, with the
  outputs it printed, in the jupyter-cache at DIR, which the website's build
  (``tests/test_book.py``, ``make book``) reads instead of executing the notebook again.
* ``--runtime-stops FILE`` (``colab/<runtime>/stops.txt``): notebooks that stop on that
  platform runtime at a cell saying in one sentence what they need (``path: words of
  that sentence``). Such a stop passes and the notebook's later cells are skipped; a stop
  anywhere else fails as usual, and a listed notebook that runs through fails too.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
LOG_DIR = ROOT / "_build" / "test-logs"
sys.path.insert(0, str(ROOT / "tools"))

os.environ.setdefault("GPUCOURSE_QUICK", "1")
os.environ.setdefault("GPUCOURSE_OFFLINE", "1")
os.environ.setdefault("GPUCOURSE_DATA", str(ROOT / "_build" / "test-data"))
# Made absolute once, here, so that every notebook kernel (each in its own folder) means the same one.
os.environ["GPUCOURSE_DATA"] = str(Path(os.path.expanduser(os.environ["GPUCOURSE_DATA"])).absolute())
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import test_order  # noqa: E402 - from tools/, on sys.path above
from gpucourse import _kernelstart  # noqa: E402 - after sys.path and the environment above

_kernelstart.install()

# Tests import TensorFlow (and Keras) in many places; with PyPI's CUDA build of PyTorch, Triton
# imported after TensorFlow 2.21 ends the process. Triton first, once, for every test process.
from gpucourse.frameworks import import_triton_first  # noqa: E402

import_triton_first()

EXPECTED_OUTCOME = {"solutions": "correct", "exercises": "not-done"}


def checks_module(notebook: Path):
    """``gpucourse.checks.epNN`` for a notebook named ``NN-slug.ipynb``."""
    return importlib.import_module(f"gpucourse.checks.ep{notebook.name[:2]}")


def declared_exercises(module) -> set[str]:
    from gpucourse.exercises import Exercise

    return {v.name for v in vars(module).values() if isinstance(v, Exercise)}


def _log_path(notebook: Path) -> Path:
    return LOG_DIR / f"{notebook.parent.name}-{notebook.stem}.jsonl"


def _checked_kind(path) -> str | None:
    path = Path(str(path))
    if path.suffix == ".ipynb" and path.parent.name in EXPECTED_OUTCOME and path.parent.parent == ROOT:
        return path.parent.name
    return None


class CheckOutcomes(pytest.Item):
    """Asserts what the checks reported while nbval ran one notebook."""

    def __init__(self, *, notebook: Path, expected: str, **kwargs):
        super().__init__(**kwargs)
        self.notebook = notebook
        self.expected = expected

    def runtest(self):
        log = _log_path(self.notebook)
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        outcomes = {r["exercise"]: r["outcome"] for r in records}  # last check of each wins
        declared = declared_exercises(checks_module(self.notebook))
        problems = [f"{name}: never checked" for name in sorted(declared - set(outcomes))]
        problems += [f"{name}: checked but not declared in the checks module"
                     for name in sorted(set(outcomes) - declared)]
        problems += [f"{name}: {got!r}, expected {self.expected!r}"
                     for name, got in sorted(outcomes.items()) if got != self.expected]
        if problems:
            raise AssertionError(f"{self.notebook.relative_to(ROOT)}:\n  " + "\n  ".join(problems))

    def repr_failure(self, excinfo):
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, f"{self.notebook.name}::check-outcomes"


def pytest_addoption(parser):
    parser.addoption("--book-cache", metavar="DIR", default=None,
                     help="store each notebook nbval ran without a failure, with its outputs, in the "
                          "jupyter-cache at DIR, where the website's build finds it (tests/test_book.py)")
    parser.addoption("--runtime-stops", metavar="FILE", default=None,
                     help="notebooks that stop on this runtime saying what they need (colab/<runtime>/stops.txt)")


def runtime_stops(config) -> dict[Path, str]:
    """``{notebook: words its stopping cell's error says}`` from ``--runtime-stops``."""
    given = config.getoption("--runtime-stops")
    if not given:
        return {}
    stops = {}
    for line in Path(given).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            path, _, words = line.partition(":")
            stops[(ROOT / path.strip()).resolve()] = words.strip()
    return stops


_stopped: dict = {}            # notebook path -> the words it stopped with, on this runtime
_broke: set = set()            # listed notebooks that failed before the expected stop


def _is_notebook_cell(item) -> bool:
    return Path(str(item.path)).suffix == ".ipynb" and hasattr(item, "cell") and item.parent is not None


_last_cell: dict = {}          # notebook path -> the nodeid of its last cell nbval runs


def pytest_collection_modifyitems(session, config, items):
    last_index = {}
    for i, item in enumerate(items):
        if _is_notebook_cell(item):
            _last_cell[item.path] = item.nodeid
        if _checked_kind(item.path) and item.parent is not None and item.parent.path == item.path:
            last_index[item.path] = i
    for path, i in sorted(last_index.items(), key=lambda kv: -kv[1]):
        parent = items[i].parent
        extra = CheckOutcomes.from_parent(parent, name="check-outcomes", notebook=Path(str(path)),
                                          expected=EXPECTED_OUTCOME[_checked_kind(path)])
        items.insert(i + 1, extra)
    # The longest files first (tests/durations.json): the two workers then end together.
    items[:] = test_order.longest_first(items, ROOT)


_started: set = set()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    """Before nbval starts a notebook's kernel: a fresh check log for a checked notebook, and
    no MPLBACKEND in the kernel's environment (ipykernel then chooses the inline backend)."""
    path = Path(str(item.path))
    starting = _is_notebook_cell(item) and path not in _started
    saved = os.environ.pop("MPLBACKEND", None) if starting else None
    if starting:
        _started.add(path)
        _executions[path] = {"start": time.monotonic(), "failed": False}
    if _checked_kind(path) and starting:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log = _log_path(path)
        log.unlink(missing_ok=True)
        os.environ["GPUCOURSE_CHECK_LOG"] = str(log)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["MPLBACKEND"] = saved


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    path = Path(str(item.path))
    if path in _stopped and (_is_notebook_cell(item) or isinstance(item, CheckOutcomes)):
        pytest.skip(f"{path.name} stopped, as expected on this runtime: {_stopped[path]}")


# ----------------------------------------------- the book reads nbval's executions --

_executions: dict = {}         # notebook path -> {"start": monotonic time, "failed": bool}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    path = Path(str(item.path))
    words = runtime_stops(item.config).get(path.resolve()) if _is_notebook_cell(item) else None
    if words and call.when == "call" and path not in _stopped and path not in _broke:
        if report.failed and words in re.sub(r"\x1b\[[0-9;]*m", "", str(report.longrepr)):
            _stopped[path] = words
            report.outcome, report.longrepr = "passed", None
        elif report.failed:
            _broke.add(path)                     # failed elsewhere first: an ordinary failure
        elif _last_cell.get(item.path) == item.nodeid:
            report.outcome = "failed"
            report.longrepr = (f"{path.name} ran through, but --runtime-stops expects it to stop with "
                               f"{words!r} on this runtime: remove its line from that file")
    run = _executions.get(path)
    if run is not None and report.failed:
        run["failed"] = True


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    cache = item.config.getoption("--book-cache")
    if not cache or not _is_notebook_cell(item) or _last_cell.get(item.path) != item.nodeid:
        return
    run = _executions.pop(Path(str(item.path)), None)
    if run is not None and not run["failed"]:
        store_execution(Path(cache), item.parent, time.monotonic() - run["start"])


def executed_notebook(notebook_file):
    """nbval's notebook (``IPyNbFile``) with the outputs its cells printed in this run."""
    from ipykernel.ipkernel import IPythonKernel

    nb = copy.deepcopy(notebook_file.nb)
    cells = {id(cell): i for i, cell in enumerate(notebook_file.nb.cells)}
    count = 0
    for item in notebook_file.session.items:
        if item.parent is notebook_file and hasattr(item, "test_outputs") and id(item.cell) in cells:
            count += 1
            cell = nb.cells[cells[id(item.cell)]]
            cell.outputs = copy.deepcopy(item.test_outputs)
            cell.execution_count = count
            for output in cell.outputs:
                if output.get("output_type") == "execute_result":
                    output["execution_count"] = count
    nb.metadata["language_info"] = dict(IPythonKernel.language_info)
    return nb


def store_execution(cache_dir: Path, notebook_file, seconds: float) -> None:
    """Put nbval's execution of one notebook into the jupyter-cache at ``cache_dir``, as
    myst-nb's build would have after executing it (matched by the code cells' source)."""
    from filelock import FileLock
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    nb = executed_notebook(notebook_file)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache_dir) + ".lock"):
        get_cache(str(cache_dir)).cache_notebook_bundle(
            CacheBundleIn(nb, str(Path(str(notebook_file.path)).resolve()),
                          data={"execution_seconds": seconds}),
            check_validity=False, overwrite=True)
