"""Write a file all or nothing, and clean up after writers that died half-way.

A file is written to a temporary next to it, flushed to disk, and renamed into
place: a reader sees the old file or the new one, never half of one, even if the
writer is killed or the machine loses power. A writer killed mid-write (SIGKILL,
out of memory, a stopped kernel) cannot remove its temporary, so the next save of
the same file removes the temporaries of writers that are no longer running.

Temporaries are named ``<name>.<pid>-<random>.part<suffix>`` (e.g.
``checkpoint.pt.4711-9f2c.part.pt``): the process id says whose it is, and the
file keeps its suffix because some writers add one otherwise (``np.savez``).
The data cache (:mod:`gpucourse.data.cache`) uses the same names and the same
clean-up.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Callable

__all__ = ["save_atomic", "create_temporary", "remove_stale_temporaries", "fsync_folder", "writable_folder"]


def _temporary_name(path: Path) -> str:
    return f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.part{path.suffix}"


def create_temporary(path: Path, mode: int = 0o666) -> tuple[int, Path]:
    """Create a new, empty temporary file next to ``path``; return its open descriptor and path.

    ``mode`` is filtered by the umask, as with ``open()``. The caller writes, closes and
    renames it (or removes it on failure).
    """
    path = Path(path)
    while True:
        tmp = path.parent / _temporary_name(path)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode), tmp
        except FileExistsError:  # same pid and random token: vanishingly rare, draw again
            continue


def _writer_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:  # cannot tell (e.g. Windows quirks): assume alive, keep the file
        return True
    return True


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def remove_stale_temporaries(path: Path, *, locked: bool = False) -> list[Path]:
    """Remove the temporaries of ``path`` left by writers that died; return what was removed.

    Parameters
    ----------
    path : Path
        The file whose temporaries (``<name>.*.part*`` in the same folder) are looked at.
    locked : bool
        False (default): remove a temporary only if the process named in it is no longer
        running on this machine; a living writer's temporary is kept. True: the caller holds
        the file's lock, under which every temporary of it is written, so any temporary found
        is stale and is removed.
    """
    path = Path(path)
    ours = re.compile(rf"{re.escape(path.name)}\.(\d+)-[0-9a-f]+\.part{re.escape(path.suffix)}")
    # before this module: ".<stem>.<pid>.tmp<suffix>" (episode 9's checkpoints)
    legacy = re.compile(rf"\.{re.escape(path.stem)}\.(\d+)\.tmp{re.escape(path.suffix)}")
    removed = []

    def unlink(tmp: Path) -> None:
        try:
            tmp.unlink()
            removed.append(tmp)
        except FileNotFoundError:  # another process cleaned it first
            pass

    for tmp in path.parent.glob(f"{_glob_escape(path.name)}.*.part*"):
        match = ours.fullmatch(tmp.name)
        if locked or (match and not _writer_alive(int(match.group(1)))):
            unlink(tmp)
    for tmp in path.parent.glob(f".{_glob_escape(path.stem)}.*.tmp{_glob_escape(path.suffix)}"):
        match = legacy.fullmatch(tmp.name)
        if match and not _writer_alive(int(match.group(1))):
            unlink(tmp)
    return removed


def fsync_folder(folder: Path) -> None:
    """Flush a folder's entries (a rename in it) to disk; a no-op where folders cannot be opened."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_atomic(save: Callable[[Path], None], path: Path) -> None:
    """Write ``path`` all or nothing: ``save`` writes a temporary, which then replaces ``path``.

    Before writing, the temporaries of ``path`` left by writers that died (killed mid-save)
    are removed; those of writers still running are kept. After ``save`` returns, the
    temporary is flushed to disk (``fsync``), renamed over ``path`` (``os.replace``, atomic on
    one file system) and the folder is flushed, so that the rename survives a power cut.

    Parameters
    ----------
    save : Callable[[Path], None]
        Writes the whole file to the path it is given, e.g.
        ``lambda f: torch.save(state, f)``. The path is in the same folder as ``path`` and
        ends with the same suffix.
    path : Path
        The file to write. Its folder must exist.

    Raises
    ------
    BaseException
        Whatever ``save`` raises (including ``KeyboardInterrupt``), or the ``OSError`` of a
        failed flush or rename. The temporary is then removed and ``path`` is unchanged.

    Examples
    --------
    >>> save_atomic(lambda f: torch.save(model.state_dict(), f), Path("runs/checkpoint.pt"))  # doctest: +SKIP
    """
    path = Path(path)
    remove_stale_temporaries(path)
    fd, tmp = create_temporary(path)
    os.close(fd)
    try:
        save(tmp)
        # read-write: on Windows fsync is FlushFileBuffers, which needs write access
        fd = os.open(tmp, os.O_RDWR | getattr(os, "O_BINARY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def writable_folder(folder: Path) -> Path:
    """Create ``folder`` and check that files can be written there, before any training starts."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SystemExit(f"error: --out {folder} is not a folder this process can write to "
                         f"({exc.strerror}): choose another --out.") from None
    return folder
