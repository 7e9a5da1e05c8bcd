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
"""

from __future__ import annotations

import importlib
import json
import os
import sys
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


def pytest_collection_modifyitems(session, config, items):
    last_index = {}
    for i, item in enumerate(items):
        if _checked_kind(item.path) and item.parent is not None and item.parent.path == item.path:
            last_index[item.path] = i
    for path, i in sorted(last_index.items(), key=lambda kv: -kv[1]):
        parent = items[i].parent
        extra = CheckOutcomes.from_parent(parent, name="check-outcomes", notebook=Path(str(path)),
                                          expected=EXPECTED_OUTCOME[_checked_kind(path)])
        items.insert(i + 1, extra)


_started: set = set()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before nbval starts a checked notebook's kernel, give it a fresh log file."""
    path = Path(str(item.path))
    if _checked_kind(path) and path not in _started:
        _started.add(path)
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log = _log_path(path)
        log.unlink(missing_ok=True)
        os.environ["GPUCOURSE_CHECK_LOG"] = str(log)
