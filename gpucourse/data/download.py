"""Downloads into the course cache that keep their promises.

``fetch(url, dest, size=..., adler32=... or sha256=...)``:

* HTTPS only; one **deadline** for the whole download (a server that answers
  one byte a second is stopped at the deadline, not after hours);
* the length the server announces (``Content-Length``) and the expected size
  are both checked, so a truncated body is never kept;
* the checksum, when one is known, is checked before the file is stored;
* written through :mod:`gpucourse.data.cache` (temporary file, lock, checksum
  record, atomic rename), so a crash leaves nothing half-written;
* errors say which failure it was and what to do: no network, a timeout, a TLS
  problem, a missing file (HTTP 404) or another HTTP status, a truncated or a
  corrupt download.
"""

from __future__ import annotations

import socket
import time
import zlib
from pathlib import Path

from .. import settings
from . import cache

CHUNK = 1 << 16


class DownloadError(RuntimeError):
    """A file could not be fetched; the message says why and what to do."""


class OfflineError(DownloadError):
    """Downloads are switched off (GPUCOURSE_OFFLINE=1)."""


class NetworkError(DownloadError):
    """No network, a timeout or a failed TLS connection: other addresses on the same host will fail too."""


class NotFoundError(DownloadError):
    """The server says the file is not there (HTTP 404 or 410)."""


file_sha256 = cache.sha256


def file_adler32(path: Path) -> str:
    """Hex Adler-32 of a file, as the CERN Open Data portal lists it (8 hex digits)."""
    value = 1
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(cache.CHUNK), b""):
            value = zlib.adler32(block, value)
    return f"{value & 0xFFFFFFFF:08x}"


def content_problem(path: Path, *, size: int | None = None, sha256: str | None = None,
                    adler32: str | None = None) -> str | None:
    """None if ``path`` has the expected size and checksums, else what is wrong."""
    path = Path(path)
    if not path.is_file():
        return "missing"
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"{actual:,} bytes instead of {size:,} (truncated or a different version of the file)"
    if sha256 is not None and file_sha256(path) != sha256.lower():
        return "its SHA-256 checksum does not match (corrupt or a different version)"
    if adler32 is not None and file_adler32(path) != adler32.lower().removeprefix("adler32:"):
        return "its Adler-32 checksum does not match (corrupt or a different version)"
    return None


def _classify(exc: Exception, url: str, deadline_s: float) -> DownloadError:
    """A DownloadError whose message tells the kind of failure apart and says what to do."""
    import requests

    host = url.split("/")[2]
    chain, seen = [], exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain).lower()
    if "incompleteread" in text or "connection broken" in text:
        return DownloadError(f"truncated download: the connection to {host} broke before the whole "
                             f"file arrived ({exc}). Nothing was kept; try again.")
    if isinstance(exc, requests.exceptions.SSLError) or "ssl" in text or "certificate" in text:
        return NetworkError(f"the secure (TLS) connection to {host} failed ({exc}). A proxy or "
                             "firewall that intercepts HTTPS, or a wrong system clock, causes this; "
                             "the course never falls back to plain HTTP.")
    if isinstance(exc, (requests.exceptions.Timeout, socket.timeout, TimeoutError)):
        return NetworkError(f"timeout: {host} did not deliver the file within {deadline_s:g} s. "
                             "The network may be slow: try again, or raise the timeout.")
    if any(isinstance(e, socket.gaierror) for e in chain) or "name or service not known" in text \
            or "nodename nor servname" in text or "failed to resolve" in text or "temporary failure in name" in text:
        return NetworkError(f"no network: the name {host} could not be looked up. Check the internet "
                             "connection (in Colab: Runtime → Restart session), or set "
                             "GPUCOURSE_OFFLINE=1 to use the offline stand-in data.")
    if isinstance(exc, requests.exceptions.ConnectionError):
        return NetworkError(f"no connection to {host} ({exc}). Check the internet connection, or set "
                             "GPUCOURSE_OFFLINE=1 to use the offline stand-in data.")
    return DownloadError(f"{type(exc).__name__}: {exc}")


def _stream(url: str, out, *, deadline_s: float, progress: bool, name: str) -> tuple[int, int | None]:
    """Write the body of ``url`` to ``out`` within ``deadline_s``; return (bytes, announced length)."""
    import requests

    start = time.monotonic()
    remaining = lambda: deadline_s - (time.monotonic() - start)  # noqa: E731
    with requests.get(url, stream=True, timeout=(min(10.0, deadline_s), min(10.0, deadline_s)),
                      headers={"User-Agent": "gpucourse (https://github.com/gpu-ml-course)",
                               "Accept-Encoding": "identity"}) as response:
        if response.status_code in (404, 410):
            raise NotFoundError(f"not found: {url} answered HTTP {response.status_code}. The file has "
                                "moved or been withdrawn; the course's pinned address is out of date "
                                "(please report it).")
        if response.status_code != 200:
            raise DownloadError(f"{url} answered HTTP {response.status_code} {response.reason}. "
                                "The server may be busy: try again later.")
        announced = response.headers.get("Content-Length")
        announced = int(announced) if announced and announced.isdigit() else None
        bar = _bar(announced, name) if progress else None
        got = 0
        try:
            while True:
                if remaining() <= 0:
                    raise TimeoutError(f"deadline of {deadline_s:g} s reached after {got:,} bytes")
                block = response.raw.read1(CHUNK)  # returns as soon as any bytes arrive
                if not block:
                    break
                out.write(block)
                got += len(block)
                if bar is not None:
                    bar.update(len(block))
        finally:
            if bar is not None:
                bar.close()
    return got, announced


def fetch(url: str, dest: Path, *, size: int | None = None, sha256: str | None = None,
          adler32: str | None = None, timeout: float = 120.0, progress: bool = True) -> Path:
    """Download ``url`` to ``dest`` unless a verified copy is already there.

    Parameters
    ----------
    url : str
        An ``https://`` URL.
    dest : Path
        The file in the course cache (see :func:`gpucourse.data.cache.folder`).
    size, sha256, adler32 : optional
        What the file must be. A cached copy is used only if it matches its
        checksum record and these; a download only if it matches them and the
        length the server announced.
    timeout : float
        Deadline, in seconds, for the whole download.
    progress : bool
        Show a tqdm progress bar.

    Raises
    ------
    OfflineError
        ``GPUCOURSE_OFFLINE`` is set and no good copy is cached.
    NotFoundError
        The server has no such file (HTTP 404).
    DownloadError
        Any other failure; the message says which and what to do.
    """
    dest = Path(dest)
    if not url.startswith("https://"):
        raise ValueError(f"Refusing to download {url!r}: only https:// URLs are allowed.")
    expected = dict(size=size, sha256=sha256, adler32=adler32)
    with cache.lock(dest):
        problem = cache.problem(dest) or content_problem(dest, **expected)
        if problem is None:
            return dest
        if dest.exists():
            print(f"Cached {dest.name} is not usable ({problem}); fetching it again.")
            cache.remove(dest)
        if settings.offline():
            raise OfflineError(f"Offline mode (GPUCOURSE_OFFLINE=1): cannot download {url}.")
        with cache.temporary(dest) as (out, tmp):
            try:
                got, announced = _stream(url, out, deadline_s=timeout, progress=progress, name=dest.name)
            except DownloadError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure becomes a clear message
                raise _classify(exc, url, timeout) from exc
            out.flush()
        try:
            if announced is not None and got != announced:
                raise DownloadError(f"truncated download: {url} announced {announced:,} bytes but sent "
                                    f"{got:,}. The connection broke; try again.")
            problem = content_problem(tmp, **expected)
            if problem is not None:
                raise DownloadError(f"downloaded {url}, but {problem}; nothing was kept.")
        except DownloadError:
            tmp.unlink(missing_ok=True)
            raise
        return cache.commit(tmp, dest)


def _bar(total, name):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc=name, leave=False, mininterval=1.0)


def free_space_ok(path: Path, needed_bytes: int) -> bool:
    """True if the disk holding ``path`` has room for ``needed_bytes``."""
    import shutil

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(path).free > needed_bytes
