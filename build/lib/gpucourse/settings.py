"""Run modes and paths shared by every episode.

The course runs one notebook source at three sizes (see ``run_mode``) and can be
told never to touch the network. Both are read from environment variables so
that tests and CI can set them without editing a notebook:

``GPUCOURSE_QUICK=1``
    Smallest sizes that still run every code path (tests, CI).
``GPUCOURSE_OFFLINE=1``
    Never download; use the generated stand-in data sets.
``GPUCOURSE_DATA=/some/dir``
    Where downloads and caches go (default: a per-user cache directory).
"""

from __future__ import annotations

import os
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}

MODES = ("quick", "reduced", "full")


def _flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"{name}={os.environ[name]!r} is not understood; use 1 (on) or 0 (off)."
    )


def quick() -> bool:
    """True when ``GPUCOURSE_QUICK`` asks for the smallest, test-sized run."""
    return _flag("GPUCOURSE_QUICK")


def offline() -> bool:
    """True when ``GPUCOURSE_OFFLINE`` forbids any network access."""
    return _flag("GPUCOURSE_OFFLINE")


def run_mode(gpu_available: bool) -> str:
    """Pick the size an episode runs at.

    Parameters
    ----------
    gpu_available : bool
        Whether the framework the episode uses sees a GPU, for example
        ``torch.cuda.is_available()``.

    Returns
    -------
    str
        ``"quick"`` if ``GPUCOURSE_QUICK`` is set, otherwise ``"full"`` with a
        GPU and ``"reduced"`` without one.
    """
    if quick():
        return "quick"
    return "full" if gpu_available else "reduced"


def describe_mode(mode: str) -> str:
    """One sentence telling the learner what ``mode`` means for this run."""
    texts = {
        "quick": "quick mode (GPUCOURSE_QUICK=1): tiny sizes that only check that every cell runs; "
        "numbers printed here say nothing about speed.",
        "reduced": "reduced mode: no GPU was found, so sizes are cut down to finish on a laptop CPU "
        "in a few minutes.",
        "full": "full mode: a GPU was found, so the episode runs at full size.",
    }
    if mode not in texts:
        raise ValueError(f"Unknown run mode {mode!r}; expected one of {MODES}.")
    return texts[mode]


def data_dir() -> Path:
    """Directory for downloads and caches, created if needed.

    ``GPUCOURSE_DATA`` wins; otherwise ``$XDG_CACHE_HOME/gpucourse`` or
    ``~/.cache/gpucourse``.
    """
    configured = os.environ.get("GPUCOURSE_DATA")
    if configured:
        path = Path(configured).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        path = Path(base) / "gpucourse"
    path.mkdir(parents=True, exist_ok=True)
    return path
