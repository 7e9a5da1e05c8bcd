"""nbval, the runner of every notebook in every leg, with the pytest the course pins.

nbval 0.11.0 (2024-03) is the last release. Under pytest 9.1 its nbdime reporter raises
HookCallError (computationalmodelling/nbval#230: it calls pytest_report_teststatus without
``config``); that reporter is registered only with ``--nbdime``, which nothing here passes.
These tests fail the day nbval stops working with the pinned pytest: a notebook that should
pass, a stored output that differs, a cell that raises. They also hold conftest.py's
``--book-cache``: what nbval ran is what the website shows, figures included.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT


def _notebook(*cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [nbformat.v4.new_markdown_cell("# A notebook")] + list(cells)
    return nb


def _checked(source: str, output: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["nbval-check-output"]})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
    cell.execution_count = 1
    return cell


GOOD = _notebook(
    nbformat.v4.new_code_cell("x = 20\nprint('x is', x)"),
    _checked("print(x + 1)", "21\n"),
    nbformat.v4.new_code_cell("x * 2"),
    nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2, 4])\nplt.show()"),
)


@pytest.fixture
def folder():
    """A folder inside the checkout, so that pytest there reads the course's conftest.py."""
    path = ROOT / "_build" / f"test-nbval-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(folder: Path, nb: nbformat.NotebookNode, *options: str) -> subprocess.CompletedProcess:
    path = folder / "notebook.ipynb"
    nbformat.write(nb, path)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--nbval-lax", *options, str(path.relative_to(ROOT))],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_pinned_versions():
    import importlib.metadata as metadata

    pins = dict(re.findall(r"^(pytest|nbval)==(\S+)", (ROOT / "requirements.txt").read_text(), re.M))
    assert metadata.version("pytest") == pins["pytest"] and metadata.version("nbval") == pins["nbval"]


def test_nbval_passes_a_good_notebook_and_the_book_cache_holds_its_outputs(folder, tmp_path):
    from jupyter_cache import get_cache

    cache = tmp_path / "cache"
    done = _run(folder, GOOD, "--book-cache", str(cache))
    assert done.returncode == 0 and "4 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    stored = get_cache(str(cache))
    _, merged = stored.merge_match_into_notebook(nbformat.read(folder / "notebook.ipynb", as_version=4))
    code = [c for c in merged.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, 3, 4]
    assert code[0].outputs[0]["text"] == "x is 20\n" and code[1].outputs[0]["text"] == "21\n"
    assert code[2].outputs[0]["output_type"] == "execute_result" and code[2].outputs[0]["data"]["text/plain"] == "40"
    # the kernel drew with the inline backend, as a learner's does (the tests' Agg draws nothing)
    assert any("image/png" in o.get("data", {}) for o in code[3].outputs), code[3].outputs
    assert merged.metadata["language_info"]["pygments_lexer"] == "ipython3"
    assert stored.list_cache_records()[0].data["execution_seconds"] > 0


def test_nbval_fails_a_wrong_output_and_a_raising_cell_and_nothing_is_cached(folder, tmp_path):
    nb = nbformat.from_dict(json.loads(json.dumps(GOOD)))
    nb.cells[2].outputs[0]["text"] = "22\n"                      # the stored output: x + 1 is 21
    nb.cells.insert(3, nbformat.v4.new_code_cell("1 / 0"))
    cache = tmp_path / "cache"
    done = _run(folder, nb, "--book-cache", str(cache))
    assert done.returncode == 1 and "2 failed, 3 passed" in done.stdout, done.stdout[-3000:]
    assert "Cell outputs differ" in done.stdout and "ZeroDivisionError" in done.stdout
    from jupyter_cache import get_cache

    assert not cache.exists() or not get_cache(str(cache)).list_cache_records()


def test_a_runtime_stop_passes_where_listed_and_fails_anywhere_else(folder):
    """--runtime-stops (colab/<runtime>/stops.txt): a notebook that stops saying what it needs
    passes and skips the rest; a listed notebook that runs through, or stops elsewhere first, fails."""
    stop = nbformat.v4.new_code_cell("raise RuntimeError('This needs frobnicate 9 or newer: upgrade it')")
    stops = _notebook(nbformat.v4.new_code_cell("x = 1"), stop, nbformat.v4.new_code_cell("print(y)"))
    through = GOOD
    early = _notebook(nbformat.v4.new_code_cell("1 / 0"), stop, nbformat.v4.new_code_cell("x = 1"))
    for name, nb in (("stops", stops), ("through", through), ("early", early)):
        nbformat.write(nb, folder / f"{name}.ipynb")
    listing = folder / "stops.txt"
    rel = folder.relative_to(ROOT)
    listing.write_text("# what stops on this runtime\n" + "".join(
        f"{rel}/{name}.ipynb: needs frobnicate 9 or newer\n" for name in ("stops", "through", "early")))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
                           "--nbval-lax", f"--runtime-stops={listing}", str(rel)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    assert re.search(r"PASSED \S*stops\.ipynb::Cell 1", out), out[-3000:]
    assert "1 skipped" in out and "stops.ipynb stopped, as expected on this runtime: needs frobnicate 9" in out
    assert "through.ipynb ran through, but --runtime-stops expects it to stop" in out
    assert re.search(r"FAILED \S*early\.ipynb::Cell 0", out) and re.search(r"FAILED \S*early\.ipynb::Cell 1", out)
    assert "3 failed, 6 passed, 1 skipped in" in out, out[-1500:]


def test_nothing_the_course_runs_passes_nbdime():
    """The one path of nbval that pytest >= 9.1 breaks is its --nbdime reporter."""
    import nbval.plugin

    plugin = Path(nbval.plugin.__file__).read_text()
    assert "if config.option.nbdime:" in plugin and "NbdimeReporter" in plugin, (
        "nbval registers its nbdime reporter differently now: check computationalmodelling/nbval#230 again")
    for path in ("Makefile", ".ci/run", "pyproject.toml", "conftest.py", "tools/gpu_check.py"):
        assert "--nbdime" not in (ROOT / path).read_text(), f"{path} passes --nbdime (broken under pytest >= 9.1)"
