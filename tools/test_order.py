"""The order the test workers take files in: the longest first, so that the run does not end with
one worker busy on a long notebook while the other waits (pytest-xdist's ``--dist loadfile`` hands
out files in collection order, each to whichever worker is about to run out).

``tests/durations.json`` holds seconds per file from an earlier run. It only orders the run: a file
it does not know sits in the middle, a stale figure makes the run longer, never wrong. Refresh it
from the JUnit XML `make test REPORT_DIR=folder` writes:

    python tools/test_order.py _build/ci/test.xml
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"


def durations(path: Path = DURATIONS) -> dict[str, float]:
    """``{file relative to the repository: seconds}``; empty when there is no readable file."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def longest_first(items: list, root: Path = ROOT, seconds: dict[str, float] | None = None) -> list:
    """``items`` grouped by file, files in order of decreasing seconds, each file's own order kept."""
    seconds = durations() if seconds is None else seconds
    default = statistics.median(seconds.values()) if seconds else 0.0
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(_file(item, root), len(first_seen))
    return sorted(items, key=lambda item: (-seconds.get(_file(item, root), default),
                                           first_seen[_file(item, root)]))


def _file(item, root: Path) -> str:
    path = Path(str(item.path))
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def from_junit(*xmls: Path) -> dict[str, float]:
    """Seconds per file, summed over every test case of the given JUnit files."""
    found: dict[str, float] = defaultdict(float)
    for xml in xmls:
        for case in ET.parse(xml).getroot().iter("testcase"):
            file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
            found[file] += float(case.get("time", 0))
    return {file: round(found[file], 1) for file in sorted(found, key=found.get, reverse=True)}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    measured = from_junit(*map(Path, argv))
    tmp = DURATIONS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(measured, indent=1) + "\n")
    tmp.replace(DURATIONS)
    print(f"{DURATIONS.relative_to(ROOT)}: {len(measured)} files, {sum(measured.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
