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
``GPUCOURSE_REQUIRE_REAL_DATA=1``
    Fail instead of falling back to a generated stand-in data set (for
    whoever builds the website to publish it).
"""

from __future__ import annotations

import json
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


def require_real_data() -> bool:
    """True when ``GPUCOURSE_REQUIRE_REAL_DATA`` forbids stand-in data."""
    return _flag("GPUCOURSE_REQUIRE_REAL_DATA")


class StandInRefused(RuntimeError):
    """A stand-in data set was about to be used while real data are required."""


def allow_stand_in(dataset: str, reason: str) -> None:
    """Raise :class:`StandInRefused` if real data are required; otherwise do nothing.

    Data loaders call this just before they fall back to a generated stand-in.

    Parameters
    ----------
    dataset : str
        The real data set that could not be used, e.g. ``"ATLAS Open Data"``.
    reason : str
        Why, in a few words (offline mode, the download error).
    """
    if require_real_data():
        raise StandInRefused(
            f"GPUCOURSE_REQUIRE_REAL_DATA=1, but {dataset} could not be used ({reason}), and the "
            "generated stand-in must not be published. Build where the download works, with "
            "GPUCOURSE_OFFLINE unset; or unset GPUCOURSE_REQUIRE_REAL_DATA for a stand-in build.")


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
        "quick": "smallest sizes: every cell runs, on sizes too small for the figures printed "
        "to say anything about speed.",
        "reduced": "reduced mode: no GPU was found, so sizes are cut down to finish on a laptop CPU "
        "in a few minutes.",
        "full": "full mode: a GPU was found, so the episode runs at full size.",
    }
    if mode not in texts:
        raise ValueError(f"Unknown run mode {mode!r}; expected one of {MODES}.")
    return texts[mode]


#: One JSON file per episode (``ep01.json``): ``{"full": {...}, "reduced": {...}, "quick": {...}}``.
SIZES_DIR = Path(__file__).parent / "sizes"

_SHORT = {"quick": "smallest sizes (every cell runs; no speed figures)",
          "reduced": "reduced mode (no CUDA GPU: laptop sizes)",
          "full": "full mode (a GPU: full sizes)"}


class Sizes(dict):
    """An episode's sizes for this run; ``mode`` says which of the three they are."""

    def __init__(self, episode: str, mode: str, values: dict):
        super().__init__(values)
        self.episode, self.mode = episode, mode

    def describe(self, limit: int = 88) -> str:
        """One line: the mode, then as many ``name=value`` pairs as fit in ``limit`` characters."""
        line = _SHORT[self.mode]
        for name, value in self.items():
            part = f"{' · ' if line == _SHORT[self.mode] else ', '}{name}={value}"
            if len(line) + len(part) > limit:
                return line + " …"
            line += part
        return line


def sizes(episode: str, gpu_available: bool) -> Sizes:
    """The sizes ``episode`` runs at here: its table in ``gpucourse/sizes/<episode>.json``, row
    :func:`run_mode`. The three rows are the course's, kept out of the notebook's first screen.

    Parameters
    ----------
    episode : str
        ``"ep01"`` … as the file is named.
    gpu_available : bool
        Whether the episode's framework sees a GPU (``torch.cuda.is_available()``).
    """
    path = SIZES_DIR / f"{episode}.json"
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = sorted(p.stem for p in SIZES_DIR.glob("*.json"))
        raise ValueError(f"no sizes for {episode!r}: expected {path} (known: {', '.join(known)})") from None
    mode = run_mode(gpu_available)
    missing = [m for m in MODES if m not in table]
    if missing:
        raise ValueError(f"{path} has no row for {', '.join(missing)}: each of {MODES} needs one")
    return Sizes(episode, mode, table[mode])


def data_dir() -> Path:
    """The configured directory for downloads and caches (not created here).

    ``GPUCOURSE_DATA`` wins, with ``~`` and ``$VARIABLES`` expanded; otherwise
    ``$XDG_CACHE_HOME/gpucourse`` or ``~/.cache/gpucourse``. Use
    ``gpucourse.data.cache.root()`` to get a folder that is known to work.

    Raises
    ------
    ValueError
        If ``GPUCOURSE_DATA`` is relative (each notebook would read it against
        its own folder) or names a variable that is not set.
    """
    configured = os.environ.get("GPUCOURSE_DATA", "").strip()
    if configured:
        expanded = os.path.expandvars(os.path.expanduser(configured))
        if "$" in expanded:
            raise ValueError(f"GPUCOURSE_DATA={configured!r} names an environment variable that is not set.")
        path = Path(expanded)
        if not path.is_absolute():
            raise ValueError(f"GPUCOURSE_DATA={configured!r} is a relative path, which would mean a different "
                             "folder for every notebook's working directory. Use an absolute path, "
                             "e.g. GPUCOURSE_DATA=~/gpucourse-data.")
        return path
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser().absolute() / "gpucourse"
