"""Split a ``tools/gpu_check.py`` run into chunks that each fit one short slot on a GPU.

A lent GPU may run one command for at most 10 minutes, so the full run is planned in
chunks of at most 9 minutes. Each notebook's time comes from the newest reference record
that has it (``gpucourse/references/*.json``; the record being written is never read, so
the plan stays the same from one chunk to the next), scaled up when that record ran at a
smaller size than the planned run, or from a built-in estimate. Chunks are balanced by
longest-first packing and keep the notebooks in course order inside each chunk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CHUNK_SECONDS = 9 * 60
# A notebook no record has timed yet (a new episode): as long as the longest timed one,
# episode 4 (117 s in cpu-amd-epyc.json, 2026-11-24), rounded up, so a chunk is not overfull.
DEFAULT_SECONDS = 120.0
# A reduced-size (CPU) record's times, planned as a full-size GPU run: the turn-4 review
# extrapolated the 460 s CPU record to 10-15 minutes on an H100, up to 2x; the upper end
# keeps chunks inside their slot.
REDUCED_TO_FULL = 2.0


@dataclass(frozen=True)
class Estimates:
    """Seconds per notebook and where they come from."""

    seconds: dict
    source: str


def estimates(notebooks: list[str], mode: str, folder: Path, exclude: Path | None = None,
              validate=None, data_files=("bands.json",)) -> Estimates:
    """Estimated seconds of each of ``notebooks`` (paths relative to the checkout).

    Parameters
    ----------
    notebooks : list of str
        ``"episodes/01-what-is-a-gpu.ipynb"``, ...
    mode : str
        The planned run's mode: ``"full"``, ``"reduced"`` or ``"quick"``.
    folder : Path
        The reference records' folder.
    exclude : Path, optional
        The record the run writes (never read, so every chunk gets the same plan).
    validate : callable, optional
        Raises ValueError for a record that is not usable.
    data_files : tuple of str
        Files in ``folder`` that are data, not records.
    """
    records = []
    for path in sorted(folder.glob("*.json")):
        if path.name in data_files or (exclude and path.resolve() == exclude.resolve()):
            continue
        try:
            record = json.loads(path.read_text())
            if validate:
                validate(record)
        except (OSError, ValueError):
            continue
        if record.get("mode") == "quick":
            continue  # test-size times say nothing about a full run
        records.append((path, record))
    # Same mode first, then the newest.
    records.sort(key=lambda pr: (pr[1].get("mode") == mode, pr[1]["date"]), reverse=True)
    seconds, used = {}, []
    for path, record in records:
        scale = REDUCED_TO_FULL if (record.get("mode"), mode) == ("reduced", "full") else 1.0
        timed = {n["notebook"]: n["seconds"] for n in record["notebooks"]}
        took = [nb for nb in notebooks if nb not in seconds and nb in timed]
        for nb in took:
            seconds[nb] = timed[nb] * scale
        if took:
            used.append(f"{path.name} ({record.get('mode')} mode, {record['date']}"
                        + (f", times x{scale:g} for full size" if scale != 1 else "") + ")")
    guessed = [nb for nb in notebooks if nb not in seconds]
    for nb in guessed:
        seconds[nb] = DEFAULT_SECONDS
    if guessed:
        used.append(f"{DEFAULT_SECONDS:.0f} s each for {len(guessed)} notebooks no record has")
    return Estimates(seconds, "; ".join(used))


def split(notebooks: list[str], seconds: dict, n_chunks: int) -> list[list[str]]:
    """``notebooks`` in ``n_chunks`` groups of about equal estimated time.

    Longest first, each into the group with the least time so far (ties: the lower group);
    inside a group the notebooks keep their order in ``notebooks``. Deterministic.
    """
    if n_chunks < 1:
        raise ValueError(f"the number of chunks must be 1 or more, not {n_chunks}")
    loads = [0.0] * n_chunks
    members = [[] for _ in range(n_chunks)]
    order = {nb: i for i, nb in enumerate(notebooks)}
    for nb in sorted(notebooks, key=lambda nb: (-seconds[nb], order[nb])):
        k = min(range(n_chunks), key=lambda i: (loads[i], i))
        loads[k] += seconds[nb]
        members[k].append(nb)
    return [sorted(group, key=order.__getitem__) for group in members]


def fewest_chunks(notebooks: list[str], seconds: dict, limit: float = CHUNK_SECONDS,
                  workers: int = 1) -> int:
    """The smallest number of chunks whose every estimate is at most ``limit`` seconds
    (with ``workers`` notebooks at a time); a notebook longer than ``limit`` on its own
    cannot be split and gets a chunk to itself."""
    def fits(chunk):
        return chunk_seconds(chunk, seconds, workers) <= limit or len(chunk) == 1

    for n in range(1, max(1, len(notebooks)) + 1):
        if all(fits(c) for c in split(notebooks, seconds, n)):
            return n
    return max(1, len(notebooks))


def chunk_seconds(chunk: list[str], seconds: dict, workers: int = 1) -> float:
    """Estimated wall time of ``chunk``: its notebooks' seconds, shared by ``workers``, but
    never less than its longest notebook."""
    if not chunk:
        return 0.0
    total = sum(seconds[nb] for nb in chunk)
    return max(total / max(1, workers), max(seconds[nb] for nb in chunk))


def parse_chunk(text: str) -> tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``.

    Raises
    ------
    ValueError
        Unless it is ``K/N`` with 1 <= K <= N.
    """
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--chunk {text!r} is not K/N, e.g. --chunk 1/3") from None
    if not 1 <= k <= n:
        raise ValueError(f"--chunk {text}: K must be between 1 and N ({n})")
    return k, n


def describe(chunks: list[list[str]], est: Estimates, workers: int = 1,
             limit: float = CHUNK_SECONDS) -> str:
    """The plan as printed by ``--plan``."""
    n = len(chunks)
    lines = [f"estimates from {est.source}"]
    for k, chunk in enumerate(chunks, 1):
        minutes = chunk_seconds(chunk, est.seconds, workers) / 60
        flag = "" if minutes * 60 <= limit else f"  (over {limit / 60:.0f} min)"
        lines.append(f"chunk {k}/{n}: {minutes:.1f} min, {len(chunk)} notebooks{flag}")
        lines += [f"    {nb}  ({est.seconds[nb] / 60:.1f} min)" for nb in chunk]
    return "\n".join(lines)
