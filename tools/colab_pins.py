"""Turn Google Colab's ``pip-freeze.gpu.txt`` into the pip constraints of one
Colab runtime that ``make test-colab`` installs.

Colab publishes what its runtimes have preinstalled in
https://github.com/googlecolab/backend-info. When Colab moves, download
``pip-freeze.gpu.txt`` of the new commit (the "Raw" button) and run, e.g.:

    python tools/colab_pins.py pip-freeze.gpu.txt --commit a724079 --date 2026-08-19 \\
        --python 3.13.15 --runtime current

``--python`` is the first "Python 3.x.y" line of ``os-info-gpu.txt`` at the
same commit. The file is written to ``colab/<runtime>/constraints.txt``
(``--output`` elsewhere, ``-`` for stdout). Changed from the freeze:

- local build labels (``+cu128``) dropped: PyPI serves the same release under
  its plain version;
- CUDA library packages (``nvidia-*``, ``cuda-*``) left out: Colab's torch is
  a CUDA 12.8 build, PyPI's torch another CUDA's, and each needs its own;
- packages installed from URLs (``name @ https://...``) left out.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ("current", "previous")

PIN_RE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^+\s]+)(?:\+(?P<label>\S+))?")
URL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\s+@\s+\S+")
CUDA_LIBRARY_RE = re.compile(r"(nvidia|cuda)[-_.]", re.I)
WHEEL_TAG_RE = re.compile(r"-cp(\d)(\d+)-cp\d+-")


class FreezeError(ValueError):
    """The input is not a usable pip-freeze.gpu.txt."""


def constraints(freeze_text: str, python: str) -> tuple[list[str], dict[str, int]]:
    """The pins kept from ``freeze_text`` and how many lines each rule left out."""
    pins, left_out = [], {"cuda": 0, "url": 0}
    torch_label = None
    for number, raw in enumerate(freeze_text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if URL_RE.fullmatch(line):
            tag = WHEEL_TAG_RE.search(line)
            if tag and f"{tag[1]}.{tag[2]}" != ".".join(python.split(".")[:2]):
                raise FreezeError(f"line {number} is a wheel for Python {tag[1]}.{tag[2]}, not {python}: "
                                  f"{line[:100]!r}; is --python the one of os-info-gpu.txt at the same commit?")
            if line.lower().startswith("torch @"):
                torch_label = "url"
            left_out["url"] += 1
            continue
        pin = PIN_RE.fullmatch(line)
        if not pin:
            raise FreezeError(f"line {number} is not a `name==version` line of pip freeze: {line[:100]!r}; "
                              "download the raw pip-freeze.gpu.txt, not the GitHub page")
        if CUDA_LIBRARY_RE.match(pin["name"]):
            left_out["cuda"] += 1
            continue
        if pin["name"].lower() == "torch":
            torch_label = pin["label"] or ""
        pins.append(f"{pin['name']}=={pin['version']}")
    if not pins:
        raise FreezeError("no `name==version` line found: is this a pip freeze?")
    if torch_label is None:
        raise FreezeError("the freeze has no torch: use pip-freeze.gpu.txt (Colab's GPU runtime)")
    if not torch_label.startswith("cu"):
        raise FreezeError(f"torch is {'a URL install' if torch_label == 'url' else 'not a CUDA build'} in this "
                          "freeze: it is the CPU or TPU runtime's; use pip-freeze.gpu.txt")
    return pins, left_out


def header(commit: str, date: str, python: str, runtime: str) -> str:
    which = {"current": "the one Colab gives by default.",
             "previous": "the one before the default\n# (Runtime → Change runtime type → Runtime version)."}[runtime]
    return f"""\
# Google Colab's preinstalled Python packages: GPU runtime, {which}
# Python {python}; googlecolab/backend-info pip-freeze.gpu.txt at commit {commit} ({date}).
# Made by tools/colab_pins.py; used as pip constraints by `make test-colab{'' if runtime == 'current' else ' RUNTIME=' + runtime}`:
# whatever the course's Colab environment installs gets Colab's version. Changed from the freeze:
# - local build labels (+cu128) dropped: PyPI serves the same release under its
#   plain version;
# - CUDA library packages (nvidia-*, cuda-*) left out: Colab's torch is a CUDA 12.8
#   build, PyPI's torch another CUDA's, and each needs its own;
# - packages installed from URLs left out.
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("freeze", type=Path, help="pip-freeze.gpu.txt from googlecolab/backend-info")
    parser.add_argument("--commit", required=True, help="backend-info commit of the file (7 to 40 hex digits)")
    parser.add_argument("--date", required=True, help="the commit's date, YYYY-MM-DD")
    parser.add_argument("--python", required=True, help="Python version of os-info-gpu.txt, e.g. 3.13.15")
    parser.add_argument("--runtime", required=True, choices=RUNTIMES)
    parser.add_argument("--output", help="where to write (default colab/RUNTIME/constraints.txt; - for stdout)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[0-9a-f]{7,40}", args.commit):
        parser.error(f"--commit {args.commit!r} is not a git commit (7 to 40 hex digits)")
    if not re.fullmatch(r"20\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", args.date):
        parser.error(f"--date {args.date!r} is not YYYY-MM-DD")
    if not re.fullmatch(r"3\.\d+\.\d+", args.python):
        parser.error(f"--python {args.python!r} is not a version like 3.13.15")
    if not args.freeze.is_file():
        parser.error(f"{args.freeze} does not exist")
    try:
        pins, left_out = constraints(args.freeze.read_text(), args.python)
    except FreezeError as error:
        print(f"{args.freeze}: {error}", file=sys.stderr)
        return 1
    text = header(args.commit, args.date, args.python, args.runtime) + "".join(p + "\n" for p in pins)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.output) if args.output else ROOT / "colab" / args.runtime / "constraints.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}: {len(pins)} pins; left out {left_out['cuda']} CUDA library packages "
          f"and {left_out['url']} URL installs.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
