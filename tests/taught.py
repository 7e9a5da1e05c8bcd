"""Keeping a line an episode teaches in a cell equal to the helper later cells call.

An episode writes the line it teaches in a cell (``def pick_device(...)``); later cells and
episodes call the course's helper instead. These helpers compare the two as syntax trees,
without docstrings, comments, type hints' spelling of imports, or the imports a module
function makes inside its body (a notebook has made them already).
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_cells(notebook: str | Path) -> list[str]:
    path = ROOT / notebook if not Path(notebook).is_absolute() else Path(notebook)
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


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
