"""Which of the helper package's GPU-only branches do the tests run?

    python tools/gpu_coverage.py                 # runs the unit tests under coverage, then reports
    python tools/gpu_coverage.py --data .coverage  # reports on coverage data already collected

A GPU-only branch is found in the source, not listed by hand:

* the body of an ``if`` whose test asks about CUDA (``device.type == "cuda"``,
  ``torch.cuda.is_available()``, ``on_gpu``, ...), the ``else`` of one that asks the opposite
  (``!= "cuda"``, ``not torch.cuda.is_available()``), or the code after ``if not ...: return``;
* the same for a *flag* set from such a test: ``self.gpu = kind == "cuda" and ...`` makes
  ``if self.gpu:`` a GPU-only branch, and ``use_cpu = not torch.cuda.is_available()`` makes
  ``if use_cpu: ... else:`` one in its ``else``;
* every method of a class named ``Cuda...``.

One-line GPU choices are reported beside them: conditional expressions
(``"cuda" if on_gpu else "cpu"``) and keyword arguments whose value tests CUDA
(``GradScaler(enabled=device.type == "cuda")``). Coverage records lines, not sides of an
expression, so for these the report can only say whether their line ran.

Notebook cells that run only on a GPU (code under ``if on_gpu:`` and the like in
``episodes/`` and ``solutions/``) are listed separately: CI has no GPU, so they run only when a
GPU is lent (``tools/gpu_check.py``).

On a machine without a GPU, the package's branches run only under the fake CUDA runtime
(``gpucourse.fakes.fakecuda``). The report gives each branch as ``file:line`` with run/not run, and
the package's overall branch coverage.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpucourse"
NOTEBOOK_FOLDERS = ("episodes", "solutions")
# The leaves of a CUDA test: a call that asks, or a comparison with "cuda".
ASKS_CUDA = re.compile(r'cuda\.is_available\(\)|cuda\.device_count\(\)|startswith\("cuda"\)|[!=]=\s*"cuda"|"cuda"\s*[!=]=')
# Names that mean "on a GPU" wherever they come from (a function's parameter, an earlier cell).
#: A line with its end, split where ``ast`` splits (``\r\n``, ``\n``, ``\r``; not at a form feed).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\n|\r)|[^\r\n]+\Z")
KNOWN_FLAGS = {"on_gpu": True, "use_cuda": True}
# Tests whose answer a course helper computed from the GPU, which the scan cannot see through:
# the text of the test, and whether it is true only on a GPU (True) or false on every GPU that
# runs the branch (False: its else is GPU-only). Episode 12's Numba mode is "compiled" only on
# an NVIDIA GPU where numba-cuda works.
HELPER_TESTS = [(re.compile(r'\.numba\s*==\s*"compiled"'), True),
                (re.compile(r'\.numba\s*==\s*"simulated"'), False),
                (re.compile(r'\.numba\s*!=\s*"compiled"'), False)]
# Helpers that return None only where the GPU path can run (else the reason it cannot): a name
# assigned from one of them guards a GPU-only block with `is None` (episode 14's int4, QLoRA).
NONE_ON_GPU = re.compile(r"\b(why_no_int4|bitsandbytes_status)\(")
# Unit tests only: the notebook runs (nbval) and the site build add nothing here and take minutes.
DEFAULT_TESTS = [str(p) for p in sorted((ROOT / "tests").glob("test_*.py")) if p.name != "test_book.py"]


@dataclass(frozen=True)
class Branch:
    """A piece of code that runs only with a GPU: its first line and what guards it."""

    line: int
    what: str
    one_line: bool = False   # a conditional expression or keyword argument: its side is not recorded


def _flag_name(node: ast.expr) -> str | None:
    """``use_gpu`` or ``self.gpu`` as text; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def _falsy_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and not node.value


class _Tests:
    """Decides whether an expression asks about CUDA, directly or through a flag, and which way.

    ``polarity`` is True for a test that is true only with a GPU (its body is GPU-only), False
    for one that is false whenever there is a GPU to ask about (its ``else`` is GPU-only), and
    None for anything that does not split GPU from no GPU.
    """

    def __init__(self, source: str, flags: dict[str, bool] | None = None):
        self.flags = dict(KNOWN_FLAGS, **(flags or {}))
        # Split once: ast.get_source_segment splits the whole source again at every call, which
        # made one pass over the package take 90 s.
        self._lines = _LINE.findall(source)

    def segment(self, node: ast.AST) -> str:
        """``node``'s source text, as ``ast.get_source_segment`` gives it (offsets count UTF-8 bytes)."""
        if getattr(node, "end_lineno", None) is None:
            return ""
        lines = [line.encode() for line in self._lines[node.lineno - 1:node.end_lineno]]
        if len(lines) == 1:
            return lines[0][node.col_offset:node.end_col_offset].decode()
        return b"".join([lines[0][node.col_offset:], *lines[1:-1], lines[-1][:node.end_col_offset]]).decode()

    def polarity(self, node: ast.expr) -> bool | None:
        if isinstance(node, ast.Compare):
            text = self.segment(node)
            for pattern, polarity in HELPER_TESTS:
                if pattern.search(text):
                    return polarity
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None:
            name = _flag_name(node.left)
            if name is not None and self.flags.get(name) == "none-on-gpu":
                return isinstance(node.ops[0], ast.Is)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                isinstance(node.ops[0], (ast.Gt, ast.GtE)) and self.flags.get(_flag_name(node.left)) is True:
            return True                   # n_gpus >= NPROC, where n_gpus is 0 without a GPU
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.polarity(node.operand)
            return None if inner is None else not inner
        if isinstance(node, ast.BoolOp):
            sides = [self.polarity(v) for v in node.values]
            want, other = (True, False) if isinstance(node.op, ast.And) else (False, True)
            if want in sides:             # and: one GPU-only part; or: one part true without a GPU
                return want
            return other if all(side is other for side in sides) else None
        if isinstance(node, ast.IfExp):   # a flag such as `name if on_gpu else None`
            test, body, orelse = self.polarity(node.test), self.polarity(node.body), self.polarity(node.orelse)
            if body is not None and body == orelse:
                return body
            if test is not None and _falsy_constant(node.orelse):
                return test
            if test is not None and _falsy_constant(node.body):
                return not test
            return None
        if isinstance(node, (ast.Compare, ast.Call)):
            text = self.segment(node)
            if not ASKS_CUDA.search(text):
                return None
            if isinstance(node, ast.Call) and not re.search(r"(is_available|device_count|startswith)\s*\($",
                                                              self.segment(node.func) + "("):
                return None               # a call that only passes a CUDA test on: llm.status(on_gpu)
            return not (isinstance(node, ast.Compare) and all(isinstance(op, (ast.NotEq, ast.IsNot))
                                                               for op in node.ops))
        name = _flag_name(node)
        if name is not None and self.flags.get(name) == "none-on-gpu":
            return False                  # `if why_not:` is true only where the GPU path cannot run
        return self.flags.get(name) if name is not None else None

    def text(self, node: ast.expr) -> str:
        return self.segment(node).splitlines()[0][:60]


def cuda_flags(tree: ast.AST, source: str, known: dict[str, bool] | None = None) -> dict[str, bool]:
    """Names assigned from a CUDA test (``self.gpu = kind == "cuda" and ...``), with their polarity.

    ``known`` holds flags set before this source (earlier notebook cells); a flag set from a flag
    is found too, whatever order the assignments come in.
    """
    tests = _Tests(source, known)
    assignments = [node for node in ast.walk(tree)
                   if isinstance(node, ast.Assign) or isinstance(node, ast.AnnAssign) and node.value is not None]
    for _ in range(3):                     # flags of flags: until nothing changes
        before = dict(tests.flags)
        for node in assignments:
            polarity = tests.polarity(node.value)
            if polarity is None and NONE_ON_GPU.search(tests.segment(node.value)):
                polarity = "none-on-gpu"
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in filter(None, map(_flag_name, targets)):
                if polarity is not None:
                    tests.flags[name] = polarity
                elif name in tests.flags and name not in (known or {}) and name not in KNOWN_FLAGS \
                        and tests.flags[name] != "none-on-gpu":   # its later reasons stay reasons
                    del tests.flags[name]  # reassigned from something else: no longer a flag
        if tests.flags == before:
            break
    return tests.flags


def _statement_lists(tree):
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                yield stmts


def _first_statement(body: list[ast.stmt]) -> int:
    """The line of a body's first statement that runs: a docstring is not recorded by coverage."""
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body[0].lineno


def _block_branches(stmts: list[ast.stmt], tests: _Tests) -> list[Branch]:
    found = []
    for i, node in enumerate(stmts):
        if not isinstance(node, ast.If):
            continue
        polarity = tests.polarity(node.test)
        if polarity is None:
            continue
        what = tests.text(node.test)
        if polarity:
            found.append(Branch(node.body[0].lineno, f"if {what}"))
        elif node.orelse:
            found.append(Branch(node.orelse[0].lineno, f"else of if {what}"))
        elif isinstance(node.body[-1], (ast.Return, ast.Raise)) and i + 1 < len(stmts):
            found.append(Branch(stmts[i + 1].lineno, f"after if {what}: return"))
    return found


def _expression_branches(tree: ast.AST, tests: _Tests) -> list[Branch]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.IfExp):
            polarity = tests.polarity(node.test)
            if polarity is not None:
                side = node.body if polarity else node.orelse
                found.append(Branch(side.lineno, f"{'' if polarity else 'else of '}… if {tests.text(node.test)}",
                                    one_line=side.lineno == node.test.lineno))
        elif isinstance(node, ast.keyword) and node.arg is not None:
            if isinstance(node.value, (ast.Compare, ast.Call, ast.BoolOp, ast.UnaryOp, ast.Name, ast.Attribute)) \
                    and tests.polarity(node.value) is not None:
                found.append(Branch(node.value.lineno, f"{node.arg}={tests.text(node.value)}", one_line=True))
    return found


def gpu_branches_in_source(source: str) -> list[Branch]:
    """Every GPU-only branch and one-line GPU choice in one file's source."""
    tree = ast.parse(source)
    tests = _Tests(source, cuda_flags(tree, source))
    found = [b for stmts in _statement_lists(tree) for b in _block_branches(stmts, tests)]
    found += _expression_branches(tree, tests)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name.startswith("Cuda"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found.append(Branch(_first_statement(item.body), f"{node.name}.{item.name}"))
    return sorted(set(found), key=lambda b: (b.line, b.what))


def gpu_branches(path: Path) -> list[tuple[int, str]]:
    """(first line, description) of each GPU-only branch with lines of its own in one source file."""
    return [(b.line, b.what) for b in gpu_branches_in_source(path.read_text()) if not b.one_line]


# --------------------------------------------------------------------------- notebooks

def _cell_source(cell: dict) -> str:
    """A code cell as Python: IPython's ``%magic`` and ``!shell`` lines become ``pass``."""
    text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    return "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines())


def notebook_gpu_cells(path: Path) -> list[tuple[int, int, int, list[str]]]:
    """(cell index, GPU-only lines, code lines, guards) for each cell of a notebook with GPU-only code.

    Flags are followed from cell to cell, as the kernel does: ``on_gpu = device.type == "cuda"``
    in the setup cell makes ``if on_gpu:`` twenty cells later a GPU-only block.
    """
    cells = json.loads(path.read_text())["cells"]
    flags: dict[str, bool] = {}
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        source = _cell_source(cell)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        flags = cuda_flags(tree, source, flags)
        tests = _Tests(source, flags)
        gpu_lines, guards = set(), []
        for stmts in _statement_lists(tree):
            for node in stmts:
                if not isinstance(node, ast.If) or (polarity := tests.polarity(node.test)) is None:
                    continue
                block = node.body if polarity else node.orelse
                if block:
                    gpu_lines.update(range(block[0].lineno, block[-1].end_lineno + 1))
                    guards.append(("if " if polarity else "else of if ") + tests.text(node.test))
        code_lines = sum(1 for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#"))
        if gpu_lines:
            blank = {n for n, line in enumerate(source.splitlines(), 1)
                     if not line.strip() or line.lstrip().startswith("#")}
            found.append((index, len(gpu_lines - blank), code_lines, guards))
    return found


def notebook_report(root: Path = ROOT) -> list[str]:
    """Lines listing the GPU-only code of every episode and solution notebook."""
    out, blocks, whole = [], 0, 0
    notebooks = [p for folder in NOTEBOOK_FOLDERS for p in sorted((root / folder).glob("*.ipynb"))]
    for path in notebooks:
        for index, gpu_lines, code_lines, guards in notebook_gpu_cells(path):
            blocks += len(guards)
            only_gpu = gpu_lines >= code_lines - len(guards)   # all but the if lines themselves
            whole += only_gpu
            out.append(f"  {path.relative_to(root)} cell {index}: {gpu_lines} of {code_lines} lines GPU-only"
                       f"{' (the whole cell)' if only_gpu else ''}  [{'; '.join(guards)}]")
    cells = len(out)
    out.append(f"\n{blocks} GPU-only blocks in {cells} notebook cells ({whole} of them GPU-only as a whole); "
               "CI has no GPU, so they run only on a lent GPU (tools/gpu_check.py).")
    return out


def report(data_file: Path) -> int:
    import coverage

    cov = coverage.Coverage(data_file=str(data_file))
    cov.load()
    data = cov.get_data()
    counts = {False: [0, 0], True: [0, 0]}   # one_line -> [run, total]
    lines_out = {False: [], True: []}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name.startswith("fakecuda") or "_fakecuda_site" in path.parts:
            continue   # the fake itself is not GPU code
        branches = gpu_branches_in_source(path.read_text())
        executed = set(data.lines(str(path)) or ())
        for branch in branches:
            ran = branch.line in executed
            counts[branch.one_line][0] += ran
            counts[branch.one_line][1] += 1
            mark = ("line ran" if ran else "NOT RUN ") if branch.one_line else ("run    " if ran else "NOT RUN")
            lines_out[branch.one_line].append(f"  {mark}  {path.relative_to(ROOT)}:{branch.line}  {branch.what}")
    print("GPU-only branches in gpucourse/ (found in the source):")
    print("\n".join(lines_out[False]))
    print("\nOne-line GPU choices (conditional expressions, keyword arguments; coverage records the line, "
          "not the side taken):")
    print("\n".join(lines_out[True]))
    print("\nNotebook cells that run only on a GPU:")
    print("\n".join(notebook_report()))
    run, total = counts[False]
    print(f"\n{run} of {total} GPU-only branches run by at least one test ({run / max(total, 1):.0%}).")
    run, total = counts[True]
    print(f"{run} of {total} one-line GPU choices are on lines that ran ({run / max(total, 1):.0%}).")
    percent = cov.report(include=[str(PACKAGE / "*"), str(PACKAGE / "**" / "*")], file=open("/dev/null", "w"))
    print(f"Branch coverage of the whole package: {percent:.0f} %.")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="existing coverage data (default: run the tests now)")
    parser.add_argument("tests", nargs="*", help="test files to run (default: the unit tests)")
    args = parser.parse_args(argv)
    data_file = args.data or ROOT / ".coverage"
    if args.data is None:
        # One process per test file: the checks' deadline machinery installs its own trace function
        # (sys.settrace), after which coverage's tracer records nothing more in that process.
        for stale in data_file.parent.glob(data_file.name + "*"):
            stale.unlink()
        for test_file in args.tests or DEFAULT_TESTS:
            subprocess.run([sys.executable, "-m", "coverage", "run", "--branch", "--parallel-mode",
                            f"--data-file={data_file}", f"--source={PACKAGE}", "-m", "pytest", "-q",
                            "-p", "no:cacheprovider", test_file], cwd=ROOT, check=False)
        subprocess.run([sys.executable, "-m", "coverage", "combine", f"--data-file={data_file}"],
                       cwd=ROOT, check=True)
    return report(data_file)


if __name__ == "__main__":
    sys.exit(main())
