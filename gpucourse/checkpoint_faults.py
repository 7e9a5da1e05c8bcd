"""What went wrong with a checkpoint file, in words a learner can act on (episode 11).

PyTorch's own messages do not say it: a save on a full disk ends with
``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534``,
a truncated file with ``failed finding central directory``, and a file that is not a
checkpoint with advice to load it again with ``weights_only=False``, which would run
whatever code the file holds. :func:`gpucourse.checkpoint.save` and
:func:`gpucourse.checkpoint.load` raise the errors below instead.
"""

from __future__ import annotations

import errno
import re
import shutil
import time
import traceback
import zipfile
from pathlib import Path

__all__ = ["CheckpointDiskFull", "UnreadableCheckpoint", "CHECKPOINT_KEYS", "size_text",
           "serialized_size", "disk_full", "load_error", "why_unreadable", "not_a_checkpoint"]

# What checkpoint.capture stores: restore needs every one of them.
CHECKPOINT_KEYS = ("model", "optimizer", "scaler", "scheduler", "epoch", "step", "rng")
_ZIP_MAGIC = b"PK"   # a zip archive begins with a local header or, if empty, its end record
_PICKLE_PROTOCOL = 0x80   # the first byte of a pickle of protocol 2 or later


class CheckpointDiskFull(OSError):
    """A checkpoint did not fit on its disk; the previous one, if any, is unchanged."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UnreadableCheckpoint(RuntimeError):
    """A file that :func:`gpucourse.checkpoint.load` cannot use as a checkpoint."""


def size_text(n: int) -> str:
    """``"1.60 MB, 1,600,512 bytes"``: readable, and exact for comparing two files."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}, {n:,} bytes"
    return f"{n:,} bytes"


class _CountingWriter:
    """A file-like object that keeps only the number of bytes written to it."""

    def __init__(self):
        self.n = 0

    def write(self, data) -> int:
        self.n += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def serialized_size(obj) -> int:
    """The number of bytes ``torch.save(obj, file)`` writes (serialized once more, kept nowhere)."""
    import torch

    sink = _CountingWriter()
    torch.save(obj, sink)
    return sink.n


def _existing(path: Path) -> str:
    if not path.exists():
        return f"There was no earlier checkpoint at {path}, and nothing was left there."
    stat = path.stat()
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stat.st_mtime))
    return (f"The previous checkpoint {path} ({size_text(stat.st_size)}, saved {when}) is "
            "intact: a resumed run starts from it. No half-written file was left behind.")


def _release_the_failed_writer(exc: BaseException | None) -> None:
    """Let go of the removed temporary that the failed writer still holds open.

    Until then its blocks stay in use (the disk stays full) for as long as the error is
    kept: in the frames of its traceback and of the errors chained to it (PyTorch raises
    two), and in Jupyter's record of the last error.
    """
    while exc is not None:
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


def disk_full(exc: BaseException, path: Path, obj) -> CheckpointDiskFull | None:
    """The error to raise instead of ``exc`` if a save of ``obj`` failed for lack of space.

    ``exc`` is an ``OSError`` with ``ENOSPC`` or ``EDQUOT`` from Python's writes, or
    PyTorch's ``RuntimeError`` from its own writer (``unexpected pos``, ``file write
    failed``), which carries no errno: then the disk counts as full if the checkpoint is
    larger than the space left. None when the failure was something else.
    """
    folder = path.parent
    if isinstance(exc, OSError) and exc.errno not in (errno.ENOSPC,
                                                      getattr(errno, "EDQUOT", errno.ENOSPC)):
        return None
    if not isinstance(exc, (OSError, RuntimeError)):
        return None
    _release_the_failed_writer(exc)
    free = shutil.disk_usage(folder).free
    need = serialized_size(obj)
    if not isinstance(exc, OSError) and need <= free:
        return None
    quota = (" (or your quota on it is used up)"
             if getattr(exc, "errno", None) == getattr(errno, "EDQUOT", None) else "")
    return CheckpointDiskFull(
        f"Could not save the checkpoint {path}: the disk is full{quota}. The checkpoint "
        f"needs {size_text(need)}; {folder} has {size_text(free)} left. {_existing(path)} "
        "Free some space (delete old checkpoints or outputs you no longer need) or save "
        "to a folder on another disk, e.g. checkpoint.where_to_keep(name, chosen=...).")


def _zip_diagnosis(path: Path, size: int) -> str:
    if not zipfile.is_zipfile(path):
        return (f"ends early: it starts like a PyTorch checkpoint (a zip archive) but its last "
                f"part, the archive's table of contents, is missing after {size:,} bytes. "
                "Likely cause: the file was cut short while it was being written (a writer "
                "killed mid-save that wrote the file in place, a copy or upload that did not "
                "finish, a full disk). checkpoint.save never leaves such a file: it writes "
                "a temporary and renames it. Use an earlier checkpoint, or start afresh")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if not any(n.endswith("data.pkl") for n in names):
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        return (f"is a zip archive that is not a PyTorch file (it holds {shown or 'nothing'}; a "
                "file from torch.save holds data.pkl): not a checkpoint. Check the file name")
    return ""


def load_error(path: Path, exc: BaseException) -> Exception:
    """The error to raise when ``torch.load(path, weights_only=True)`` raised ``exc``."""
    if not path.is_file():
        return FileNotFoundError(
            errno.ENOENT, f"There is no checkpoint file at {path}"
            + (" (that is a folder)" if path.is_dir() else "")
            + ": check the folder and the name, or start afresh.")
    return UnreadableCheckpoint(why_unreadable(path, exc))


def why_unreadable(path: Path, exc: BaseException) -> str:
    """Why ``torch.load(path, weights_only=True)`` raised ``exc``, and what to do.

    Never advises ``weights_only=False``: a file that needs it is not a checkpoint of
    this course, and loading it that way would run code from it.
    """
    size = path.stat().st_size
    head = path.read_bytes()[:16] if size else b""
    where = f"{path} ({size_text(size)})"
    if size == 0:
        return (f"{where} is empty. Likely cause: a writer was killed (or the disk was full) "
                "before anything was written, e.g. a copy or a save that wrote the file in "
                "place; checkpoint.save never leaves an empty file. Use an earlier "
                "checkpoint, or start afresh.")
    if head.startswith(_ZIP_MAGIC):
        problem = _zip_diagnosis(path, size)
        if problem:
            return f"{where} {problem}."
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        what = f" ({found.group(1)})" if found else ""
        return (f"{where} is a PyTorch file, but it holds Python objects{what} that a "
                "checkpoint from checkpoint.save never contains, and reading them would run "
                "code from the file: not a checkpoint of this course. Check the file name.")
    if head[0] == _PICKLE_PROTOCOL:
        return (f"{where} is a Python pickle (or PyTorch's format before version 1.6), not "
                "a checkpoint from checkpoint.save, which writes a zip archive; reading it "
                "could run code from the file. Check the file name.")
    shown = head[:12].decode("utf-8", "replace")
    return (f"{where} is not a checkpoint: it starts with {shown!r}, neither a PyTorch "
            "archive nor a pickle (a text or web page saved under this name, or a "
            "download that failed?). Check the file name.")


def not_a_checkpoint(path: Path, obj) -> str:
    """Why ``obj``, read from ``path``, is not a checkpoint from ``capture``; "" if it is one."""
    size = path.stat().st_size
    where = f"{path} ({size_text(size)})"
    if not isinstance(obj, dict):
        return (f"{where} is a PyTorch file, but it holds a {type(obj).__name__}, not a "
                "checkpoint (the dict checkpoint.capture makes). Check the file name.")
    if any(k in obj for k in CHECKPOINT_KEYS):
        return ""    # all of them, or some (a part saved on its own): restore names what lacks
    keys = ", ".join(map(str, list(obj)[:5])) + (", ..." if len(obj) > 5 else "")
    return (f"{where} is a PyTorch file, but not a checkpoint: it holds a dict of "
            f"{keys or 'nothing'}, none of the parts checkpoint.capture stores "
            f"({', '.join(CHECKPOINT_KEYS)}). A model's weights alone (a state_dict) are "
            "loaded with model.load_state_dict(torch.load(path, weights_only=True)).")

