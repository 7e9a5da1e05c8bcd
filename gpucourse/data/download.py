"""Downloads into the course cache that keep their promises.

``fetch(url, dest, size=..., adler32=... or sha256=...)``:

* HTTPS only; one **deadline** for the whole download, from the connect through
  the TLS handshake and the response headers to the last byte (a server that
  answers one byte a second is stopped at the deadline, not after hours), and a
  server that sends nothing for ``READ_TIMEOUT_S`` is given up on sooner;
* the length the server announces (``Content-Length``) and the expected size
  are both checked, so a truncated body is never kept;
* the checksum, when one is known, is checked before the file is stored;
* written through :mod:`gpucourse.data.cache` (temporary file, lock, checksum
  record, atomic rename), so a crash leaves nothing half-written;
* errors say which failure it was, at which stage and after how long, and what
  to do: no network, a timeout (the deadline, or a server that went silent), a TLS
  problem, a missing file (HTTP 404) or another HTTP status, a truncated or a
  corrupt download.
"""

from __future__ import annotations

import contextvars
import socket
import threading
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


READ_TIMEOUT_S = 10.0  # no byte for this long: the server has stalled (each byte restarts it)

_active: contextvars.ContextVar["_Deadline | None"] = contextvars.ContextVar("gpucourse_download", default=None)


class _Deadline:
    """One deadline for one download, from the TCP connect to the last byte.

    A watchdog thread shuts the connection's socket down when the deadline passes, which
    wakes whatever the download is blocked in (the TLS handshake, the response headers, a
    body read), however slowly the server sends. It holds a duplicate of the socket, so it
    never touches a descriptor number that the system may have reused. The name lookup
    before the connect is the resolver's own (a few seconds at most) and cannot be cut short.
    """

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = time.monotonic()
        self.stage = "while connecting"
        self.got = 0
        self.expired = False
        self.expired_stage = ""
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="download-deadline", daemon=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock.dup())  # shutdown() on a duplicate stops the connection itself
            if self.expired:
                self._stop_all()

    def _stop_all(self) -> None:
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed by the other side
                pass

    def _watch(self) -> None:
        if self._done.wait(self.seconds):
            return
        with self._lock:
            self.expired = True
            self.expired_stage = self.stage  # what stopping the socket leads to can look like progress
            self._stop_all()

    def __enter__(self) -> "_Deadline":
        self._token = _active.set(self)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        _active.reset(self._token)
        for sock in self._sockets:
            sock.close()


def _watched_pool():
    """An HTTPS connection pool whose connections show their socket to the current deadline."""
    from urllib3.connection import HTTPSConnection
    from urllib3.connectionpool import HTTPSConnectionPool

    class Connection(HTTPSConnection):
        def _new_conn(self):  # the TCP connect, before TLS: the earliest point with a socket
            sock = super()._new_conn()
            deadline = _active.get()
            if deadline is not None:
                deadline.watch(sock)
                deadline.stage = "during the TLS handshake"
            return sock

        def connect(self):
            super().connect()
            deadline = _active.get()
            if deadline is not None:
                deadline.stage = "while waiting for the response headers"

    class Pool(HTTPSConnectionPool):
        ConnectionCls = Connection

    return HTTPSConnectionPool, Pool


def _session():
    """A requests session (proxies and CA bundle from the environment, as usual) whose HTTPS
    connections are stopped by the current download's deadline."""
    import requests

    plain, watched = _watched_pool()

    def watch(manager):
        if manager.pool_classes_by_scheme.get("https") is plain:  # not a SOCKS proxy's own pools
            manager.pool_classes_by_scheme = {**manager.pool_classes_by_scheme, "https": watched}
        return manager

    class Adapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            super().init_poolmanager(*args, **kwargs)
            watch(self.poolmanager)

        def proxy_manager_for(self, *args, **kwargs):
            return watch(super().proxy_manager_for(*args, **kwargs))

    session = requests.Session()
    session.mount("https://", Adapter())
    return session


def _chain(exc: BaseException) -> list[BaseException]:
    chain, seen = [], exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _classify(exc: Exception | None, url: str, deadline: _Deadline) -> DownloadError:
    """A DownloadError whose message names what happened, at which stage, after how long."""
    import requests
    import urllib3

    host = url.split("/")[2]
    elapsed = deadline.elapsed()
    received = f", {deadline.got:,} bytes of the file received" if deadline.got else ""
    if deadline.expired:  # checked first: stopping the socket also raises connection errors
        return NetworkError(f"timeout: the download from {host} did not finish within its deadline of "
                            f"{deadline.seconds:g} s; it was stopped after {elapsed:.1f} s, "
                            f"{deadline.expired_stage}{received}. The network or the server is slow: try "
                            "again, or raise the timeout.")
    chain = _chain(exc)
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain).lower()
    def timed_out(e: BaseException) -> bool:  # urllib3 files a refused or unresolved connect under timeouts
        if isinstance(e, urllib3.exceptions.NewConnectionError):
            return "timed out" in str(e).lower()
        return isinstance(e, (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError, TimeoutError))

    if any(timed_out(e) for e in chain):                                    # before TLS: a stalled
        if deadline.stage == "while connecting":                              # handshake is a timeout
            what = f"did not accept the connection within {READ_TIMEOUT_S:g} s"
        else:
            what = f"sent nothing for {READ_TIMEOUT_S:g} s {deadline.stage}"
        return NetworkError(f"timeout: {host} {what} (stopped after {elapsed:.1f} s in all{received}). "
                            "The server may be down or overloaded, or the network slow: try again later.")
    if "incompleteread" in text or "connection broken" in text:
        return DownloadError(f"truncated download: the connection to {host} broke before the whole "
                             f"file arrived ({exc}). Nothing was kept; try again.")
    if isinstance(exc, requests.exceptions.SSLError) or "ssl" in text or "certificate" in text:
        return NetworkError(f"the secure (TLS) connection to {host} failed {deadline.stage} "
                            f"({exc}). A proxy or firewall that intercepts HTTPS, or a wrong system "
                            "clock, causes this; the course never falls back to plain HTTP.")
    if any(isinstance(e, socket.gaierror) for e in chain) or "name or service not known" in text \
            or "nodename nor servname" in text or "failed to resolve" in text or "temporary failure in name" in text:
        return NetworkError(f"no network: the name {host} could not be looked up. Check the internet "
                             "connection (in Colab: Runtime → Restart session), or set "
                             "GPUCOURSE_OFFLINE=1 to use the offline stand-in data.")
    if isinstance(exc, requests.exceptions.ConnectionError):
        return NetworkError(f"no connection to {host} ({exc}). Check the internet connection, or set "
                             "GPUCOURSE_OFFLINE=1 to use the offline stand-in data.")
    return DownloadError(f"{type(exc).__name__}: {exc}")


def _stream(url: str, out, *, deadline: _Deadline, progress: bool, name: str) -> tuple[int, int | None]:
    """Write the body of ``url`` to ``out`` before ``deadline``; return (bytes, announced length)."""
    with _session() as session, session.get(
            url, stream=True, timeout=(READ_TIMEOUT_S, READ_TIMEOUT_S),
            headers={"User-Agent": "gpucourse (https://github.com/gpu-ml-course)",
                     "Accept-Encoding": "identity"}) as response:
        deadline.stage = "while receiving the file"
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
        try:
            while not deadline.expired:  # the watchdog also stops the read itself; this is in case
                block = response.raw.read1(CHUNK)  # its socket was never seen (a SOCKS proxy)
                if not block:
                    break
                out.write(block)
                deadline.got += len(block)
                if bar is not None:
                    bar.update(len(block))
        finally:
            if bar is not None:
                bar.close()
    return deadline.got, announced


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
        Deadline, in seconds, for the whole download, from the connect to the last
        byte. A server that sends nothing for ``READ_TIMEOUT_S`` (10 s) is given up
        on sooner.
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
            with _Deadline(timeout) as deadline:
                try:
                    got, announced = _stream(url, out, deadline=deadline, progress=progress, name=dest.name)
                except DownloadError:
                    raise
                except Exception as exc:  # noqa: BLE001 - every failure becomes a clear message
                    raise _classify(exc, url, deadline) from exc
            if deadline.expired and (announced is None or got != announced):  # cut off: the end it saw was ours
                raise _classify(None, url, deadline)
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
