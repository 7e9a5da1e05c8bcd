"""Keeping a line an episode teaches in a cell equal to the helper later cells call.

An episode writes the line it teaches in a cell (``def pick_device(...)``); later cells and
episodes call the course's helper instead. These helpers compare the two as syntax trees,
without docstrings, comments, type hints' spelling of imports, or the imports a module
function makes inside its body (a notebook has made them already).

The episodes' tests also read and run cells through the helpers here: the one code cell that
holds a marker, the first screen a learner runs, cells executed in one namespace, and the
predict-then-reveal pair every episode asks. Each takes the notebook's path first (relative
to the repository's root, or absolute).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


ANSWER = "<details><summary>Answer"
PREDICT = re.compile(r"^\*\*Predict:\*\* \S", re.M)


def cells(notebook: str | Path) -> list[dict]:
    """The notebook's cells, as its JSON holds them."""
    path = ROOT / notebook if not Path(notebook).is_absolute() else Path(notebook)
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def code_cells(notebook: str | Path) -> list[str]:
    return ["".join(c["source"]) for c in cells(notebook) if c["cell_type"] == "code"]


def markdown_cells(notebook: str | Path) -> list[str]:
    return ["".join(c["source"]) for c in cells(notebook) if c["cell_type"] == "markdown"]


def code_cell(notebook: str | Path, marker: str) -> str:
    """The one code cell of the notebook whose source contains ``marker``."""
    found = [source for source in code_cells(notebook) if marker in source]
    assert len(found) == 1, (
        f"{notebook}: {len(found)} code cells contain {marker!r}, expected one")
    return found[0]


def first_screen(notebook: str | Path) -> list[str]:
    """The code cells from the imports to the one that reads the sizes
    (``settings.sizes(``), as a learner runs them first; the ``colab-setup`` cell is left
    out (it installs packages)."""
    sources = ["".join(c["source"]) for c in cells(notebook) if c["cell_type"] == "code"
               and "colab-setup" not in c["metadata"].get("tags", [])]
    last = next(i for i, source in enumerate(sources) if "settings.sizes(" in source)
    return sources[: last + 1]


def run_cells(notebook: str | Path, sources, namespace: dict | None = None) -> dict:
    """Execute ``sources`` (cells' code), in order, in one namespace and return it; what they
    print goes to stdout (``capsys`` reads it)."""
    namespace = {} if namespace is None else namespace
    for source in sources:
        exec(compile(source, str(notebook), "exec"), namespace)
    return namespace


def run_printed(notebook: str | Path, sources,
                namespace: dict | None = None) -> tuple[dict, str]:
    """``run_cells``, returning the namespace and what the cells printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        namespace = run_cells(notebook, sources, namespace)
    return namespace, out.getvalue()


def run_marked(notebook: str | Path, markers,
               namespace: dict | None = None) -> tuple[dict, str]:
    """Execute the code cells holding ``markers`` (see ``code_cell``), in order, in one
    namespace; return it and what they printed."""
    namespace = {} if namespace is None else namespace
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for marker in markers:
            exec(compile(code_cell(notebook, marker), f"{notebook}:{marker}", "exec"),
                 namespace)
    return namespace, out.getvalue()


def prediction(notebook: str | Path, only_code_between: bool = True) -> tuple[list[str], str]:
    """The notebook's predict-then-reveal: the code cells between the question and its answer,
    and the answer's text.

    The question is the one markdown cell with a line starting ``**Predict:** `` and some
    text; the answer is the one markdown cell starting ``<details><summary>Answer``, after
    the question, ending with ``</details>``. Unless ``only_code_between`` is false, only
    code cells (at least one) stand between them: the measurement the learner predicts.
    """
    kinds = [(c["cell_type"], "".join(c["source"])) for c in cells(notebook)]
    asks = [i for i, (kind, text) in enumerate(kinds)
            if kind == "markdown" and PREDICT.search(text)]
    answers = [i for i, (kind, text) in enumerate(kinds)
               if kind == "markdown" and text.startswith(ANSWER)]
    assert len(asks) == 1 and len(answers) == 1, (
        f"{notebook}: {len(asks)} questions and {len(answers)} answers, expected one each")
    assert asks[0] < answers[0], f"{notebook}: the answer comes before its question"
    between = kinds[asks[0] + 1: answers[0]]
    if only_code_between:
        assert between and all(kind == "code" for kind, _ in between), (
            f"{notebook}: only code cells (the measurement) go between question and answer")
    answer = kinds[answers[0]][1]
    assert answer.rstrip().endswith("</details>"), f"{notebook}: the answer is not folded"
    return [text for kind, text in between if kind == "code"], answer


def _normal(node: ast.AST) -> str:
    """ast.dump of a function or statement list without docstrings and in-body imports."""
    for sub in ast.walk(node):
        body = getattr(sub, "body", None)
        if isinstance(body, list):
            body[:] = [s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))]
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                body.pop(0)
        if isinstance(sub, ast.FunctionDef):
            sub.returns = None
            for arg in sub.args.args:
                arg.annotation = None
    return ast.dump(node, include_attributes=False)


def cell_function(notebook: str | Path, name: str) -> ast.FunctionDef:
    """The ``def name`` of the notebook's code cells (exactly one must define it)."""
    found = []
    for source in code_cells(notebook):
        try:
            tree = ast.parse(source)
        except SyntaxError:          # a cell with IPython magics
            continue
        found += [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{notebook}: {len(found)} cells define {name}(), expected one"
    return found[0]


def assert_same_function(notebook: str | Path, name: str, helper) -> None:
    """The cell's ``def name`` and ``helper`` are the same code (docstrings, annotations and
    in-body imports aside)."""
    cell = _normal(cell_function(notebook, name))
    tree = ast.parse(textwrap.dedent(inspect.getsource(helper)))
    function = tree.body[0]
    function.name = name
    assert cell == _normal(function), (
        f"{notebook}'s {name}() and {helper.__module__}.{helper.__qualname__} differ: "
        "change both, the lesson and the helper later cells call")


def cells_calling(notebook: str | Path, dotted: str) -> list[str]:
    """The code cells that call ``dotted`` (e.g. ``"course_device.pick_device"``)."""
    out = []
    for source in code_cells(notebook):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        if any(isinstance(n, ast.Call) and ast.unparse(n.func) == dotted for n in ast.walk(tree)):
            out.append(source)
    return out
