"""Execute notebooks top to bottom in fresh kernels and print how long each took.

    python tools/time_notebooks.py                     # every episode, exercise and solution
    GPUCOURSE_QUICK=1 python tools/time_notebooks.py   # quick mode (the goal: each well under 60 s)
    python tools/time_notebooks.py episodes/03-pytorch-classifier.ipynb

Prints figures; asserts nothing (speed goals are read, not tested). Exits 1 if
a notebook raised an error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from coursetools import ROOT, notebooks


def run(path: Path, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    from gpucourse import _kernelstart

    _kernelstart.install()  # kernels over IPC: no TCP port another process could take first
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: all)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.paths] or notebooks()
    mode = "quick" if os.environ.get("GPUCOURSE_QUICK") == "1" else "reduced/full"
    print(f"mode: {mode} · offline: {os.environ.get('GPUCOURSE_OFFLINE', '0')} · {os.cpu_count()} CPUs")
    failed, total = 0, 0.0
    for path in paths:
        try:
            seconds = run(path, args.timeout)
            total += seconds
            print(f"{seconds:7.1f} s  {path.relative_to(ROOT)}", flush=True)
        except CellExecutionError as exc:
            failed += 1
            print(f"  FAILED   {path.relative_to(ROOT)}: {str(exc).splitlines()[0]}", flush=True)
    print(f"{total:7.1f} s  total")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
