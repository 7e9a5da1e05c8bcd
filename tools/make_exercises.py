"""Generate exercises/NN-slug.ipynb from solutions/NN-slug.ipynb.

    python tools/make_exercises.py          # write exercises/
    python tools/make_exercises.py --check  # exit 1 if exercises/ is out of date
"""

from __future__ import annotations

import argparse
import sys

from coursetools import ROOT, dumps, has_solution_markers, make_exercise, read, repository


def expected_exercises() -> dict:
    repo, branch = repository()
    out = {}
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = read(sol)
        if not has_solution_markers(nb):
            raise SystemExit(f"{sol.relative_to(ROOT)} has no '### BEGIN SOLUTION' block: nothing to hide.")
        rel = f"exercises/{sol.name}"
        out[ROOT / rel] = dumps(make_exercise(nb, rel, repo, branch))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    expected = expected_exercises()
    stale = [p for p, text in expected.items() if not p.exists() or p.read_text() != text]
    extra = sorted(set((ROOT / "exercises").glob("*.ipynb")) - set(expected))
    if args.check:
        for p in stale:
            print(f"out of date: {p.relative_to(ROOT)}")
        for p in extra:
            print(f"no matching solution: {p.relative_to(ROOT)}")
        if stale or extra:
            print("Run `make exercises` and commit the result.")
            return 1
        print(f"exercises/ is up to date ({len(expected)} notebooks).")
        return 0
    (ROOT / "exercises").mkdir(exist_ok=True)
    for p in stale:
        tmp = p.with_suffix(".ipynb.tmp")
        tmp.write_text(expected[p])
        tmp.replace(p)
        print(f"wrote {p.relative_to(ROOT)}")
    for p in extra:
        print(f"warning: {p.relative_to(ROOT)} has no solution notebook")
    return 0


if __name__ == "__main__":
    sys.exit(main())
