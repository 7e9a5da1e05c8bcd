"""Safe downloads into the course cache.

Every file is fetched over HTTPS with a timeout into a temporary file next to
its destination, checked (size and/or SHA-256) and only then renamed into
place, so an interrupted or corrupt download never looks like a good file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from .. import settings

CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A file could not be fetched; the message says why and what to do."""


class OfflineError(DownloadError):
    """Downloads are switched off (GPUCOURSE_OFFLINE=1)."""


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, *, size: int | None = None, checksum: str | None = None) -> str | None:
    """None if ``path`` is a good copy, else the reason it is not."""
    path = Path(path)
    if not path.is_file():
        return f"{path} does not exist"
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"{path} has {actual} bytes, expected {size} (partial or corrupt download)"
    if checksum is not None and sha256(path) != checksum.lower():
        return f"{path} has the wrong SHA-256 checksum (corrupt download)"
    return None


def fetch(url: str, dest: Path, *, size: int | None = None, checksum: str | None = None,
          timeout: float = 30.0, progress: bool = True) -> Path:
    """Download ``url`` to ``dest`` unless a verified copy is already there.

    Parameters
    ----------
    url : str
        An ``https://`` URL.
    dest : Path
        Final location; parent directories are created.
    size, checksum : optional
        Expected byte count and SHA-256. A cached file that does not match is
        fetched again; a download that does not match is discarded.
    timeout : float
        Seconds to wait for the server to answer or send data.
    progress : bool
        Show a tqdm progress bar.

    Raises
    ------
    OfflineError
        If ``GPUCOURSE_OFFLINE`` is set and no good copy is cached.
    DownloadError
        On network failure, timeout, HTTP error or verification failure.
    """
    dest = Path(dest)
    if not url.startswith("https://"):
        raise ValueError(f"Refusing to download {url!r}: only https:// URLs are allowed.")
    problem = verify(dest, size=size, checksum=checksum)
    if problem is None:
        return dest
    if dest.exists():
        print(f"Cached copy is not usable ({problem}); fetching it again.")
    if settings.offline():
        raise OfflineError(f"Offline mode (GPUCOURSE_OFFLINE=1): cannot download {url}.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            request = urllib.request.Request(url, headers={"User-Agent": "gpucourse"})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                total = int(response.headers.get("Content-Length") or 0) or size
                bar = _bar(total, dest.name) if progress else None
                for block in iter(lambda: response.read(CHUNK), b""):
                    out.write(block)
                    if bar is not None:
                        bar.update(len(block))
                if bar is not None:
                    bar.close()
        problem = verify(tmp, size=size, checksum=checksum)
        if problem is not None:
            raise DownloadError(f"Downloaded {url} but it failed verification: {problem}.")
        tmp.replace(dest)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DownloadError(
            f"Could not download {url} ({exc}). Check your internet connection, or set "
            "GPUCOURSE_OFFLINE=1 to use the offline stand-in data."
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _bar(total, name):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc=name, leave=False)


def atomic_write_bytes(dest: Path, data: bytes) -> Path:
    """Write ``data`` to ``dest`` via a temporary file and rename."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp_name, dest)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return dest


def free_space_ok(path: Path, needed_bytes: int) -> bool:
    """True if the disk holding ``path`` has room for ``needed_bytes``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(path).free > needed_bytes
