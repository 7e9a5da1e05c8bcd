"""Stop `make install` early on a Python the course is not tested with."""

import sys

TESTED = ((3, 11), (3, 12))
version = sys.version_info[:2]
if version not in TESTED:
    names = " and ".join(f"{major}.{minor}" for major, minor in TESTED)
    sys.exit(f"Python {version[0]}.{version[1]} is not one the course is tested with ({names}). "
             f"Run again with one of them, e.g. `make install PYTHON=python{TESTED[-1][0]}.{TESTED[-1][1]}`.")
