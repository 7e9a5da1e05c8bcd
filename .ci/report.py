"""The benchmark table at the end of `.ci/run`: seconds per leg, the ten slowest notebooks and
the ten slowest tests, read from the legs' log and the JUnit XML every pytest run wrote.

    python .ci/report.py _build/ci

A printout, not a gate: it never fails a run (a missing or broken file is said and skipped).
Standard library only, so any Python runs it.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

#: The JUnit file each leg's pytest runs write (Makefile: $(call junit,NAME)), by leg.
FILES = {"make test": ("test", "test-book"), "make test-cuda-build": ("test-cuda-build",),
         "make test-colab": ("test-colab-current",), "make test-colab RUNTIME=kaggle": ("test-colab-kaggle",)}


def legs(folder: Path) -> list[tuple[str, int, int]]:
    """``(leg, seconds, exit status)`` in the order they ran (lines "seconds status name")."""
    rows = []
    path = folder / "legs.txt"
    for line in (path.read_text().splitlines() if path.exists() else []):
        seconds, status, name = line.split(" ", 2)
        rows.append((name, int(seconds), int(status)))
    return rows


def cases(xml: Path) -> tuple[float, list[tuple[str, str, float]]]:
    """The run's pytest seconds and ``(file, test name, seconds)`` of every test case."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = sum(float(s.get("time", 0)) for s in suites)
    found = []
    for case in root.iter("testcase"):
        file = case.get("file") or case.get("classname", "").replace(".", "/")
        found.append((file, case.get("name", ""), float(case.get("time", 0))))
    return total, found


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if str(c).replace(".", "").isdigit() else str(c).ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def main(folder: Path) -> int:
    runs = legs(folder)
    notebooks, tests, rows = [], [], []
    for name, seconds, status in runs:
        pytest_seconds = 0.0
        for stem in FILES.get(name, ()):
            xml = folder / f"{stem}.xml"
            if not xml.exists():
                continue
            try:
                total, found = cases(xml)
            except ET.ParseError as error:
                print(f"({xml}: {error})")
                continue
            pytest_seconds += total
            per_notebook = defaultdict(float)
            for file, test, time in found:
                if file.endswith(".ipynb"):
                    per_notebook[file] += time
                else:
                    tests.append((time, name, f"{file}::{test}"))
            notebooks += [(time, name, file) for file, time in per_notebook.items()]
        rows.append([name, str(seconds), f"{pytest_seconds:.0f}", str(max(0, seconds - round(pytest_seconds))),
                     "passed" if status == 0 else f"FAILED ({status})"])
    total = sum(s for _, s, _ in runs)
    rows.append(["all legs", str(total), "", "", f"{total / 60:.1f} min"])
    print("Seconds per leg (pytest: inside pytest; other: installs, browser set-up, make):")
    print(table(rows, ["leg", "seconds", "pytest", "other", "result"]))
    for title, items in (("notebooks (all cells, kernel start included)", notebooks), ("tests", tests)):
        print(f"\nThe ten slowest {title}:")
        top = sorted(items, reverse=True)[:10]
        print(table([[f"{t:.1f}", leg, what] for t, leg, what in top], ["seconds", "leg", "what"])
              if top else "  (no timings were written)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "_build/ci")))
