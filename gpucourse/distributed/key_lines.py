"""The lines of a training script that make it distributed, for the notebook to show.

A script marks each such block between two comments, the first numbered and titled, the
second closing it; what follows the title after three spaces is what a single-process
script does instead:

    # >>> 2. each process its own shard   (single process: DataLoader(shuffle=True))
    sampler = DistributedSampler(...)
    # <<<

``key_lines("ddp_train")`` returns those blocks, in the order of their numbers, dedented and
with their line numbers, so the notebook shows the lesson and never the plumbing around it.
``listing("ddp_train")`` returns them as episode 9 lists them in a ```python fence:
each block under its numbered title, without line numbers. tests/test_distributed.py checks
that every block episode 9 names is still marked; tests/test_taught_ep09.py keeps the
episode's listings equal to ``listing``. (Episode 13 writes its scripts from its cells.)
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

_START = re.compile(r"^\s*# >>> (?P<number>\d+)\. (?P<title>.+?)(?:\s{3,}\((?P<single>.+)\))?\s*$")
_END = re.compile(r"^\s*# <<<\s*$")


@dataclass
class Block:
    number: int
    title: str
    single: str | None       # what a single-process script does instead, if the script says so
    first_line: int          # 1-based line number of the block's first code line
    code: str


def blocks(script: str) -> list[Block]:
    """The marked blocks of ``gpucourse/distributed/<script>.py``, in the order of their numbers."""
    path = Path(__file__).with_name(f"{script}.py")
    if not path.is_file():
        raise FileNotFoundError(f"no script {path.name} in {path.parent}; choose one of "
                                f"{sorted(p.stem for p in path.parent.glob('*.py') if p.stem != '__init__')}")
    found, current, lines = [], None, path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        start, end = _START.match(line), _END.match(line)
        if start and current is None:
            current = (start, number + 1, [])
        elif start or (end and current is None):
            raise ValueError(f"{path.name}, line {number}: a '# >>>' or '# <<<' marker out of order")
        elif end:
            m, first, body = current
            found.append(Block(int(m["number"]), m["title"], m["single"], first, textwrap.dedent("\n".join(body))))
            current = None
        elif current is not None:
            current[2].append(line)
    if current is not None:
        raise ValueError(f"{path.name}: the block '{current[0]['title']}' is never closed with '# <<<'")
    return sorted(found, key=lambda b: b.number)


def key_lines(script: str) -> str:
    """The marked blocks of a script as text to print: a heading per block, then its lines."""
    out = []
    for b in blocks(script):
        head = f"# {b.number}. {b.title}   ({script}.py, line {b.first_line})"
        out.append("\n".join([head] + ([f"#    ({b.single})"] if b.single else []) + [b.code]))
    return "\n\n".join(out)


def listing(script: str) -> str:
    """The marked blocks of a script as an episode lists them in a ```python fence.

    Parameters
    ----------
    script : str
        The script's name in ``gpucourse/distributed``, without ``.py``
        (``"ddp_train"``).

    Returns
    -------
    str
        Each block as ``# <number>. <title>`` then its dedented lines, the blocks in the
        order of their numbers and separated by one blank line; no trailing newline.

    Raises
    ------
    FileNotFoundError
        If there is no such script; the message names the scripts there are.
    ValueError
        If the script's markers are out of order or a block is never closed.
    """
    return "\n\n".join(f"# {b.number}. {b.title}\n{b.code}" for b in blocks(script))
