"""Stop `make install` early on a Python the course is not tested with."""

from __future__ import annotations

import sys

TESTED = ((3, 11), (3, 12), (3, 13))


def problem(version: tuple[int, int]) -> str | None:
    """Why ``version`` (major, minor) cannot run the course; None when it can."""
    if version in TESTED:
        return None
    names = ", ".join(f"{major}.{minor}" for major, minor in TESTED)
    fix = f"Run again with one of them, e.g. `make install PYTHON=python{TESTED[-1][0]}.{TESTED[-1][1]}`."
    if version > TESTED[-1]:
        return (f"Python {version[0]}.{version[1]} is too new for the course: TensorFlow 2.21, which it uses, "
                f"has no wheels for Python {version[0]}.{version[1]} yet, so pip cannot install it. "
                f"The course works with Python {names}. {fix}")
    return f"Python {version[0]}.{version[1]} is not one the course is tested with ({names}). {fix}"


if __name__ == "__main__":
    message = problem(sys.version_info[:2])
    if message:
        sys.exit(message)
