"""Which of the helper package's GPU-only branches do the tests run?

    python tools/gpu_coverage.py                 # runs the unit tests under coverage, then reports
    python tools/gpu_coverage.py --data .coverage  # reports on coverage data already collected

A GPU-only branch is found in the source, not listed by hand: the body of an ``if`` whose test
asks about CUDA (``device.type == "cuda"``, ``torch.cuda.is_available()``, ``on_gpu``, ...), the
``else`` of one that asks the opposite (``!= "cuda"``, ``not torch.cuda.is_available()``), and
every method of a class named ``Cuda...``. On a machine without a GPU these run only under the
fake CUDA runtime (``gpucourse.fakecuda``). The report gives each branch as ``file:line`` with
run/not run, and the package's overall branch coverage.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpucourse"
ASKS_CUDA = re.compile(r'cuda\.is_available\(\)|cuda\.device_count\(\)|\.type\s*[!=]=\s*"cuda"|\bon_gpu\b|\buse_cuda\b'
                       r'|startswith\("cuda"\)')
# Unit tests only: the notebook runs (nbval) and the site build add nothing here and take minutes.
DEFAULT_TESTS = [str(p) for p in sorted((ROOT / "tests").glob("test_*.py")) if p.name != "test_book.py"]


def _negated(test: ast.expr) -> bool:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    return isinstance(test, ast.Compare) and all(isinstance(op, (ast.NotEq, ast.IsNot)) for op in test.ops)


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


def gpu_branches(path: Path) -> list[tuple[int, str]]:
    """(first line, description) of each GPU-only branch in one source file."""
    source = path.read_text()
    tree = ast.parse(source)
    found = []
    for stmts in _statement_lists(tree):
        for i, node in enumerate(stmts):
            if not (isinstance(node, ast.If) and ASKS_CUDA.search(ast.get_source_segment(source, node.test) or "")):
                continue
            what = ast.get_source_segment(source, node.test).splitlines()[0][:60]
            if not _negated(node.test):
                found.append((node.body[0].lineno, f"if {what}"))
            elif node.orelse:
                found.append((node.orelse[0].lineno, f"else of if {what}"))
            elif isinstance(node.body[-1], (ast.Return, ast.Raise)) and i + 1 < len(stmts):
                found.append((stmts[i + 1].lineno, f"after if {what}: return"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name.startswith("Cuda"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found.append((_first_statement(item.body), f"{node.name}.{item.name}"))
    return sorted(set(found))


def report(data_file: Path) -> int:
    import coverage

    cov = coverage.Coverage(data_file=str(data_file))
    cov.load()
    data = cov.get_data()
    total_run = total = 0
    lines_out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "fakecuda.py":
            continue   # the fake itself is not GPU code
        branches = gpu_branches(path)
        if not branches:
            continue
        executed = set(data.lines(str(path)) or ())
        for line, what in branches:
            ran = line in executed
            total += 1
            total_run += ran
            lines_out.append(f"  {'run    ' if ran else 'NOT RUN'}  {path.relative_to(ROOT)}:{line}  {what}")
    print("GPU-only branches in gpucourse/ (found in the source):")
    print("\n".join(lines_out))
    print(f"\n{total_run} of {total} GPU-only branches run by at least one test ({total_run / max(total, 1):.0%}).")
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
