"""Safe downloads: verification, offline mode, no half-written files."""
import hashlib

import pytest

from gpucourse.data import download


def test_verify_detects_size_and_checksum(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"hello")
    good = hashlib.sha256(b"hello").hexdigest()
    assert download.verify(f, size=5, checksum=good) is None
    assert "expected 6" in download.verify(f, size=6)
    assert "checksum" in download.verify(f, checksum="0" * 64)
    assert "does not exist" in download.verify(tmp_path / "missing")


def test_offline_refuses_with_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    with pytest.raises(download.OfflineError, match="GPUCOURSE_OFFLINE=1"):
        download.fetch("https://example.invalid/x.root", tmp_path / "x.root")
    assert list(tmp_path.iterdir()) == []


def test_good_cached_file_is_used_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    f = tmp_path / "x.bin"
    f.write_bytes(b"data")
    assert download.fetch("https://example.invalid/x.bin", f, size=4) == f


def test_only_https(tmp_path):
    with pytest.raises(ValueError, match="https"):
        download.fetch("http://example.org/x", tmp_path / "x")


def test_network_failure_leaves_no_partial_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")

    def refuse(*args, **kwargs):
        raise download.urllib.error.URLError("no route to host")

    monkeypatch.setattr(download.urllib.request, "urlopen", refuse)
    with pytest.raises(download.DownloadError, match="GPUCOURSE_OFFLINE=1"):
        download.fetch("https://example.org/x.bin", tmp_path / "x.bin", timeout=1)
    assert list(tmp_path.iterdir()) == []


class _FakeResponse:
    def __init__(self, payload):
        self._payload, self.headers = payload, {"Content-Length": str(len(payload))}

    def read(self, n=-1):
        chunk, self._payload = self._payload[:n], self._payload[n:]
        return chunk

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_corrupt_download_is_discarded_and_cache_refetched(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")
    payload = b"the real file"
    checksum = hashlib.sha256(payload).hexdigest()
    dest = tmp_path / "f.bin"
    dest.write_bytes(b"the real f")  # truncated earlier download
    served = [b"garbage!", payload]
    monkeypatch.setattr(download.urllib.request, "urlopen", lambda *a, **k: _FakeResponse(served.pop(0)))
    with pytest.raises(download.DownloadError, match="failed verification"):
        download.fetch("https://example.org/f.bin", dest, checksum=checksum, progress=False)
    assert "fetching it again" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]  # no .part left behind
    download.fetch("https://example.org/f.bin", dest, checksum=checksum, progress=False)
    assert dest.read_bytes() == payload


def test_atomic_write(tmp_path):
    target = tmp_path / "sub" / "t.bin"
    download.atomic_write_bytes(target, b"xyz")
    assert target.read_bytes() == b"xyz" and len(list(target.parent.iterdir())) == 1
