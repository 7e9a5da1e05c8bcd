"""How long is each episode for a new learner? (DESIGN §15: one sitting)

    python tools/episode_length.py            # a table of every episode
    python tools/episode_length.py --check    # exit 1 if an episode is over the limits

The pace is the teaching review's: prose read at 150 words a minute, and a code cell takes
max(1, non-blank lines / 8) minutes to read and run. Limits: about 60 minutes (66 allowed), at most
4 objectives, no code cell over about 20 lines (25 allowed), and no printed helper source
(``inspect.getsource``): the notebook shows the lesson, the helper package holds the plumbing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MINUTES, MAX_OBJECTIVES, MAX_CELL_LINES = 66, 4, 25


@dataclass
class Length:
    notebook: str
    words: int
    code_lines: int
    longest_cell: int
    objectives: int
    minutes: float
    prints_source: bool

    def problems(self) -> list[str]:
        found = []
        if self.minutes > MAX_MINUTES:
            found.append(f"~{self.minutes:.0f} min of teaching (at most about 60)")
        if self.objectives > MAX_OBJECTIVES:
            found.append(f"{self.objectives} objectives (at most {MAX_OBJECTIVES})")
        if self.longest_cell > MAX_CELL_LINES:
            found.append(f"a code cell of {self.longest_cell} lines (at most about 20)")
        if self.prints_source:
            found.append("prints helper source with inspect.getsource")
        return found


def measure(path: Path) -> Length:
    cells = json.loads(path.read_text())["cells"]
    words = code_lines = longest = objectives = 0
    minutes, prints_source = 0.0, False
    for cell in cells:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            words += len(re.sub(r"\]\([^)]*\)", "]", src).split())     # link targets are not read
            found = re.search(r"## Objectives\s*\n(.*?)(\n## |\Z)", src, re.S)
            objectives = len(re.findall(r"^\s*[-*] ", found.group(1), re.M)) if found else objectives
        elif cell["cell_type"] == "code" and "pip install" not in src:
            lines = [line for line in src.splitlines() if line.strip()]
            code_lines += len(lines)
            longest = max(longest, len(lines))
            minutes += max(1.0, len(lines) / 8)
            # printing a helper's source, not reading a cell's own code to write it to a file
            prints_source = prints_source or bool(re.search(r"print\([^\n]*getsource", src))
    return Length(path.relative_to(ROOT).as_posix(), words, code_lines, longest, objectives,
                  minutes + words / 150, prints_source)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if an episode is over the limits")
    args = parser.parse_args(argv)
    lengths = [measure(p) for p in sorted((ROOT / "episodes").glob("*.ipynb"))]
    print(f"{'episode':<38} {'words':>6} {'code lines':>10} {'longest':>8} {'objectives':>10} {'minutes':>8}")
    for n in lengths:
        flag = "  ← " + "; ".join(n.problems()) if n.problems() else ""
        print(f"{n.notebook[9:]:<38} {n.words:>6} {n.code_lines:>10} {n.longest_cell:>8} {n.objectives:>10} "
              f"{n.minutes:>8.0f}{flag}")
    return 1 if args.check and any(n.problems() for n in lengths) else 0


if __name__ == "__main__":
    sys.exit(main())
