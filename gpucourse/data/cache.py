"""The course's one download and data cache, shared by every data set.

Rules every file in it follows:

* **Atomic.** A file is written to a temporary next to it
  (``<name>.<pid>-<random>.part<suffix>``, named by :mod:`gpucourse.atomic`) and
  renamed into place; a reader never sees half a file.
* **Verified.** A file is stored with a checksum record (``<name>.sha256.json``:
  size and SHA-256). The record is written first and the data second, both while
  the file's lock is held, and readers take the same lock, so nobody sees data
  without its record. A file whose record is missing or does not match is not
  used.
* **Locked.** One cross-process lock per file (``filelock``): two notebooks, or
  two test workers, that want the same file wait for each other instead of
  writing it twice or deleting each other's work.
* **Clean.** Temporary files are only ever written under the lock, so any
  ``.part`` file found while holding it was left by a process that died
  mid-write: it is removed (:func:`gpucourse.atomic.remove_stale_temporaries`).
* **Readable by the group**, like a file made with ``open()`` under the user's
  umask (temporary files start as owner-only).
* **Somewhere usable.** If the configured folder (``GPUCOURSE_DATA``, else
  ``~/.cache/gpucourse``) cannot be written — read-only, a file, a full disk —
  a message says why and a folder in the system's temporary directory is used
  instead.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .. import atomic, settings

CHUNK = 1 << 20
LOCK_TIMEOUT_S = 900.0  # a slow download by another process may hold a lock this long
MIN_FREE_BYTES = 100 * 2**20  # below this, a folder counts as full: stand-ins alone need tens of MB
_fallback_announced: set[str] = set()


class CacheError(OSError):
    """The cache cannot be used for this file; the message says why and what to do."""


# --------------------------------------------------------------------------- where

def _usable(folder: Path) -> str | None:
    """None if files can be created in ``folder`` (made if needed), else why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-", delete=True) as probe:
            probe.write(b"x" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    except FileExistsError:
        return "it is a file, not a folder"
    except NotADirectoryError:
        return "part of the path is a file, not a folder"
    except OSError as exc:
        return _os_reason(exc)
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        return f"its disk is nearly full ({free / 2**20:.1f} MB free, at least {MIN_FREE_BYTES / 2**20:.0f} MB needed)"
    return None


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "the disk is full"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "it is not writable (read-only or no permission)"
    return exc.strerror or str(exc)


def fallback_dir() -> Path:
    """``<system temp>/gpucourse-<user>``: where the cache goes when the configured folder fails."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"gpucourse-{user}"


def root() -> Path:
    """The cache folder to use: the configured one if it works, else :func:`fallback_dir`.

    Raises
    ------
    CacheError
        If neither can be written.
    """
    configured = settings.data_dir()
    problem = _usable(configured)
    if problem is None:
        return configured
    fallback = fallback_dir()
    second = _usable(fallback)
    if second is not None:
        raise CacheError(f"The data cache {configured} cannot be used ({problem}), and neither can "
                         f"{fallback} ({second}). Set GPUCOURSE_DATA to a writable folder.")
    if str(configured) not in _fallback_announced:
        _fallback_announced.add(str(configured))
        print(f"The data cache {configured} cannot be used ({problem}); using {fallback} for this "
              "session. Set GPUCOURSE_DATA to a writable folder with free space to keep downloads.")
    return fallback


def folder(*parts: str) -> Path:
    """A sub-folder of the cache (created), e.g. ``folder("atlas-4lep", "2020e-13tev")``."""
    path = root().joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(f"Cannot create {path} in the data cache ({_os_reason(exc)}).") from exc
    return path


# --------------------------------------------------------------------------- records

def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def record_path(path: Path) -> Path:
    """The checksum record that goes with ``path``."""
    path = Path(path)
    return path.with_name(path.name + ".sha256.json")


def problem(path: Path) -> str | None:
    """None if ``path`` matches its checksum record, else what is wrong. Call it under :func:`lock`."""
    path = Path(path)
    if not path.is_file():
        return "missing"
    try:
        record = json.loads(record_path(path).read_text())
        size, digest = int(record["size"]), str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return "no valid checksum record"
    actual = path.stat().st_size
    if actual != size:
        return f"{actual:,} bytes instead of {size:,} (truncated or corrupt)"
    if sha256(path) != digest:
        return "SHA-256 checksum does not match (corrupt)"
    return None


def remove(path: Path) -> None:
    """Remove a cached file and its record. Call it under :func:`lock`."""
    path = Path(path)
    path.unlink(missing_ok=True)
    record_path(path).unlink(missing_ok=True)


# --------------------------------------------------------------------------- writing

@contextlib.contextmanager
def lock(path: Path, timeout: float = LOCK_TIMEOUT_S):
    """Hold the cross-process lock of one cache file; clean its stale temporary files.

    Raises
    ------
    CacheError
        If another process holds the lock for longer than ``timeout`` seconds.
    """
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    guard = FileLock(str(path) + ".lock", timeout=timeout)
    try:
        guard.acquire()
    except Timeout:
        raise CacheError(f"Another process has been writing {path.name} for over {timeout:.0f} s. "
                         f"If none is running, delete {path}.lock and try again.") from None
    except OSError as exc:
        raise CacheError(f"Cannot lock {path} ({_os_reason(exc)}).") from exc
    try:
        atomic.remove_stale_temporaries(path, locked=True)
        yield path
    finally:
        guard.release()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def temporary(path: Path):
    """A temporary file next to ``path``, open for binary writing; removed unless :func:`commit` took it."""
    path = Path(path)
    try:
        fd, tmp = atomic.create_temporary(path, mode=0o600)
    except OSError as exc:
        raise CacheError(f"Cannot write {path.name} in {path.parent} ({_os_reason(exc)}).") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh, tmp
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CacheError(f"Cannot write {path.name} in {path.parent} ({_os_reason(exc)}).") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def commit(tmp: Path, path: Path) -> Path:
    """Give ``tmp`` normal permissions, write ``path``'s record, then move ``tmp`` to ``path``.

    Call it under :func:`lock`, after the data in ``tmp`` were checked.
    """
    tmp, path = Path(tmp), Path(path)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        record = {"size": tmp.stat().st_size, "sha256": sha256(tmp)}
        write_bytes(record_path(path), json.dumps(record).encode(), with_record=False)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        remove(path)
        raise CacheError(f"Cannot store {path.name} in {path.parent} ({_os_reason(exc)}).") from exc
    return path


def write_bytes(path: Path, data: bytes, *, with_record: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (with its checksum record). Call it under :func:`lock`."""
    path = Path(path)
    with temporary(path) as (fh, tmp):
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if with_record:
        return commit(tmp, path)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CacheError(f"Cannot store {path.name} in {path.parent} ({_os_reason(exc)}).") from exc
    return path
