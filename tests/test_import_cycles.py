"""No import circle among the helper package's modules.

Two modules that import each other work only while the imports happen in one
order: import the other one first (a test, a notebook, a child process) and a
name is missing. So the package's imports form no cycle, counting the imports
inside functions too: a deferred import hides a circle, it does not remove it.
Each data module is also imported first in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "gpucourse"


def module_name(path: Path, top: Path) -> str:
    """``top/gpucourse/data/atlas.py`` -> ``gpucourse.data.atlas`` (a package's ``__init__``: its name)."""
    parts = list(path.relative_to(top).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name."""
    return {module_name(path, root.parent): path for path in sorted(root.rglob("*.py"))
            if "__pycache__" not in path.parts}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file (functions included).

    ``from . import x`` and ``from .x import y`` count as an import of module ``x``; ``from pkg import
    name`` of a name that is not a module counts as an import of ``pkg`` itself.
    """
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                source = ".".join(anchor + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in known else source)
    return {module for module in found if module in known and module != name}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    modules = package_modules(root)
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules that import each other (Tarjan)."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_cycle_finder_finds_a_circle_hidden_in_a_function(tmp_path):
    """The finder itself: the ATLAS modules as they were (one import deferred into a function)."""
    package = tmp_path / "gpucourse" / "data"
    package.mkdir(parents=True)
    for init in (tmp_path / "gpucourse" / "__init__.py", package / "__init__.py"):
        init.write_text("")
    (package / "atlas.py").write_text("from . import sources\n")
    (package / "sources.py").write_text("def real():\n    from .atlas import SAMPLES\n")
    (package / "plain.py").write_text("from .. import data\nimport gpucourse.data.sources\n")
    graph = import_graph(tmp_path / "gpucourse")
    assert graph["gpucourse.data.plain"] == {"gpucourse.data", "gpucourse.data.sources"}
    assert cycles(graph) == [["gpucourse.data.atlas", "gpucourse.data.sources"]]


def test_no_module_of_the_package_is_in_an_import_circle():
    found = cycles(import_graph())
    assert not found, ("these modules import each other (move the names they share to one module "
                       "that each imports): " + "; ".join(" <-> ".join(group) for group in found))


ATLAS_MODULES = ["atlas", "atlas_schema", "atlas_sources", "atlas_standin"]


@pytest.mark.parametrize("module", ATLAS_MODULES)
def test_each_atlas_module_imports_first_in_a_fresh_interpreter(module):
    code = (f"import gpucourse.data.{module} as m, sys; "
            "print(sorted(n for n in sys.modules if n.startswith('gpucourse.data.atlas')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"importing gpucourse.data.{module} first fails:\n{done.stderr[-2000:]}"
    loaded = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printed list
    if module != "atlas":
        assert "gpucourse.data.atlas" not in loaded, f"{module} pulls in atlas: {loaded}"
