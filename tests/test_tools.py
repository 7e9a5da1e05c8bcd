"""The exercise generator and the repository-URL sync."""
import os
import subprocess
import sys

import nbformat
import pytest

import coursetools
from conftest import ROOT


def _nb(*cells):
    return nbformat.v4.new_notebook(cells=list(cells))


def test_code_block_becomes_stub():
    src = "x = 1\n### BEGIN SOLUTION\n### STUB: y = ____  # your answer\ny = x + 1\n### END SOLUTION\nq.check(y)"
    nb = coursetools.make_exercise(_nb(nbformat.v4.new_code_cell(src)), "exercises/01-x.ipynb", "o/r", "main")
    assert nb.cells[0].source == "x = 1\ny = ____  # your answer\nq.check(y)"


def test_indented_block_and_default_stub():
    src = "def f():\n    ### BEGIN SOLUTION\n    return 3\n    ### END SOLUTION"
    nb = coursetools.make_exercise(_nb(nbformat.v4.new_code_cell(src)), "exercises/01-x.ipynb", "o/r", "main")
    assert nb.cells[0].source == "def f():\n    ____  # your code here"


def test_markdown_answer_hidden_and_title_renamed():
    title = nbformat.v4.new_markdown_cell("# 1. Topic — Solutions\n\n" + coursetools.badge("o/r", "main", "solutions/01-x.ipynb"))
    answer = nbformat.v4.new_markdown_cell("Why?\n<!-- BEGIN SOLUTION -->Because.<!-- END SOLUTION -->")
    nb = coursetools.make_exercise(_nb(title, answer), "exercises/01-x.ipynb", "o/r", "main")
    assert nb.cells[0].source.startswith("# 1. Topic — Exercises")
    assert "blob/main/exercises/01-x.ipynb" in nb.cells[0].source
    assert nb.cells[1].source == "Why?\n*Write your answer here.*"


@pytest.mark.parametrize("src", ["### BEGIN SOLUTION\nx = 1", "x = 1\n### END SOLUTION"])
def test_unbalanced_markers_fail_loudly(src):
    with pytest.raises(ValueError, match="cell 0"):
        coursetools.make_exercise(_nb(nbformat.v4.new_code_cell(src)), "exercises/01-x.ipynb", "o/r", "main")


COLAB_ONLY_BADGE = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
                    "(https://colab.research.google.com/github/old/repo/blob/dev/episodes/01-x.ipynb)")
OLD_SETUP = ('# In Colab, install the course helper package.\nimport sys\nif "google.colab" in sys.modules:\n'
             '    %pip install --quiet "gpucourse @ git+https://github.com/old/repo@dev"')


@pytest.mark.parametrize("first", [COLAB_ONLY_BADGE, coursetools.badge("old/repo", "dev", "episodes/01-x.ipynb")],
                         ids=["colab badge only", "colab and kaggle badges"])
def test_sync_rewrites_badges_and_setup_cell(first):
    setup = nbformat.v4.new_code_cell(OLD_SETUP, metadata={"tags": [coursetools.SETUP_TAG]})
    other = nbformat.v4.new_code_cell('print("git+https://github.com/old/repo@dev")')
    nb = _nb(nbformat.v4.new_markdown_cell(f"# 1. X\n\n{first}\n\ntext"), setup, other)
    assert coursetools.sync_notebook(nb, "episodes/01-x.ipynb", "new/fork", "main")
    assert nb.cells[0].source == "# 1. X\n\n" + coursetools.badge("new/fork", "main", "episodes/01-x.ipynb") + "\n\ntext"
    assert "](https://www.kaggle.com/kernels/welcome?src=https://github.com/new/fork/blob/main/episodes/01-x.ipynb)" in (
        nb.cells[0].source)
    assert nb.cells[1].source == coursetools.setup_cell("new/fork", "main")
    assert '"gpucourse @ git+https://github.com/new/fork@main"' in nb.cells[1].source
    assert nb.cells[2].source == other.source, "only the tagged setup cell is rewritten"
    assert not coursetools.sync_notebook(nb, "episodes/01-x.ipynb", "new/fork", "main")


def _run_setup_cell(before: str, spec_to: str):
    """Run the setup cell in a fresh kernel after ``before``, installing from ``spec_to``."""
    from nbclient import NotebookClient

    source = coursetools.setup_cell("o/r", "main").replace("git+https://github.com/o/r@main", spec_to)
    nb = _nb(nbformat.v4.new_code_cell(before), nbformat.v4.new_code_cell(source),
             nbformat.v4.new_code_cell('print("installed" if "pip" in dir() else "skipped")'))
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    return nb.cells[1].outputs, "".join(o.get("text", "") for o in nb.cells[2].outputs)


def test_setup_cell_on_kaggle_without_internet_names_the_switch():
    outputs, _ = _run_setup_cell('import os; os.environ["KAGGLE_KERNEL_RUN_TYPE"] = "Interactive"',
                                 "file:///no/such/gpucourse")
    errors = [o for o in outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "SystemExit", outputs
    assert "On Kaggle, turn Internet on (Settings → Internet" in errors[0].evalue
    assert "Traceback" not in "".join(errors[0].traceback), "a pip traceback instead of the switch to turn on"


def test_setup_cell_on_colab_shows_pips_error():
    outputs, _ = _run_setup_cell('import sys, types; sys.modules["google.colab"] = types.ModuleType("google.colab")',
                                 "file:///no/such/gpucourse")
    errors = [o for o in outputs if o.output_type == "error"]
    assert len(errors) == 1 and "/no/such/gpucourse" in errors[0].evalue, outputs
    assert "Internet on" not in errors[0].evalue


def test_setup_cell_does_nothing_locally():
    outputs, after = _run_setup_cell("import os; os.environ.pop('KAGGLE_KERNEL_RUN_TYPE', None)", "file:///no/such")
    assert outputs == [] and after.strip() == "skipped"


def test_exercises_in_sync_with_solutions():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "make_exercises.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_notebooks_point_at_configured_repository():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "sync_repo_url.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_mode_detects_stale_exercise(tmp_path, monkeypatch):
    """--check must fail when an exercise notebook differs from its solution."""
    import make_exercises

    expected = make_exercises.expected_exercises()
    path = next(iter(expected))
    monkeypatch.setattr(make_exercises, "expected_exercises",
                        lambda: {path: expected[path] + " "})
    assert make_exercises.main(["--check"]) == 1


def test_ensure_browser_finds_chromium_on_path_and_refuses_a_missing_one(tmp_path, monkeypatch, capsys):
    import ensure_browser

    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ensure_browser.installed_chromium() == str(fake)
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-such-browser"))
    assert ensure_browser.find_or_install() is None
    assert "does not exist" in capsys.readouterr().out


@pytest.mark.parametrize("version, accepted", [((3, 10), False), ((3, 11), True), ((3, 12), True), ((3, 13), True),
                                               ((3, 14), False), ((3, 15), False)])
def test_check_python_accepts_311_to_313(version, accepted):
    import check_python

    assert (check_python.problem(version) is None) == accepted


def test_check_python_names_tensorflow_for_a_too_new_python():
    import check_python

    message = check_python.problem((3, 14))
    assert "TensorFlow 2.21" in message and "no wheels for Python 3.14" in message
    assert "3.11, 3.12, 3.13" in message and "make install PYTHON=python3.13" in message
    assert "TensorFlow" not in check_python.problem((3, 10))


def test_check_python_runs_on_this_python():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "check_python.py")], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr


def test_make_lab_opens_the_course_in_jupyterlab():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # as if typed
    done = subprocess.run(["make", "--no-print-directory", "-n", "lab", "-o", ".venv/.installed-stamp",
                           "LAB_ARGS=--no-browser"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f'.venv/bin/jupyter-lab --ServerApp.root_dir="{ROOT}" --no-browser '
                                   "episodes/01-what-is-a-gpu.ipynb")
    assert any(line.startswith("jupyterlab==") for line in (ROOT / "requirements.txt").read_text().splitlines())


def test_solution_pages_drop_the_generators_markdown_markers():
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from solution_markers import strip_markdown_markers, strip_markers

    html = ("<!-- BEGIN SOLUTION -->\n<p>the answer</p>\n<!-- STUB: Which of your changes\nmattered most? -->\n"
            "<!-- END SOLUTION -->")
    assert strip_markdown_markers(html) == "<p>the answer</p>\n"
    assert strip_markers("x = 1\n    ### BEGIN SOLUTION\ny = 2\n### STUB: y = ____\n### END SOLUTION") == "x = 1\ny = 2"


def test_the_test_workers_take_the_longest_files_first(tmp_path):
    """tools/test_order.py: files by decreasing seconds, a file's own order kept (a notebook's cells
    run in order), a file it does not know between the known ones; refreshed from JUnit XML."""
    import types

    import test_order

    def item(path, name):
        return types.SimpleNamespace(path=ROOT / path, name=name)

    items = [item("tests/a.py", "a1"), item("episodes/b.ipynb", "b1"), item("tests/a.py", "a2"),
             item("episodes/b.ipynb", "b2"), item("tests/new.py", "n1"), item("tests/c.py", "c1")]
    seconds = {"tests/a.py": 5.0, "episodes/b.ipynb": 40.0, "tests/c.py": 20.0, "tests/gone.py": 1.0}
    ordered = [i.name for i in test_order.longest_first(items, ROOT, seconds)]
    # tests/new.py is unknown: the median of the known figures (12.5 s) puts it between c and a.
    assert ordered == ["b1", "b2", "c1", "n1", "a1", "a2"], ordered
    unordered = [i.name for i in test_order.longest_first(items, ROOT, {})]
    assert unordered == ["a1", "a2", "b1", "b2", "n1", "c1"], f"no figures: files as first collected, {unordered}"

    xml = tmp_path / "run.xml"
    xml.write_text('<testsuites><testsuite time="9"><testcase file="tests/a.py" name="x" time="1.5"/>'
                   '<testcase file="tests/a.py" name="y" time="2"/><testcase file="episodes/b.ipynb" name="Cell 0" '
                   'time="6.04"/></testsuite></testsuites>')
    assert list(test_order.from_junit(xml).items()) == [("episodes/b.ipynb", 6.0), ("tests/a.py", 3.5)]
    assert test_order.durations(tmp_path / "missing.json") == {}
    assert test_order.durations()["episodes/09-more-than-one-gpu.ipynb"] > 0, "tests/durations.json is unreadable"
