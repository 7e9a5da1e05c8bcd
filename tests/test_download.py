"""Downloads and the cache, without a network (the faults are in test_faults.py)."""
import hashlib
import os
import zlib

import pytest

from gpucourse.data import cache, download


def test_content_problem_names_size_and_checksums(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"hello")
    good_sha = hashlib.sha256(b"hello").hexdigest()
    good_adler = f"{zlib.adler32(b'hello') & 0xFFFFFFFF:08x}"
    assert download.content_problem(f, size=5, sha256=good_sha, adler32=good_adler) is None
    assert download.content_problem(f, adler32="adler32:" + good_adler) is None  # the portal's spelling
    assert "5 bytes instead of 6" in download.content_problem(f, size=6)
    assert "SHA-256" in download.content_problem(f, sha256="0" * 64)
    assert "Adler-32" in download.content_problem(f, adler32="00000000")
    assert download.content_problem(tmp_path / "missing") == "missing"


def test_offline_refuses_with_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    with pytest.raises(download.OfflineError, match="GPUCOURSE_OFFLINE=1"):
        download.fetch("https://example.invalid/x.root", tmp_path / "x.root")
    assert not (tmp_path / "x.root").exists()


def test_good_cached_file_is_used_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    f = tmp_path / "x.bin"
    with cache.lock(f):
        cache.write_bytes(f, b"data")
    assert download.fetch("https://example.invalid/x.bin", f, size=4) == f


def test_cached_file_of_the_wrong_size_is_not_used(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    f = tmp_path / "x.bin"
    with cache.lock(f):
        cache.write_bytes(f, b"data")
    with pytest.raises(download.OfflineError):
        download.fetch("https://example.invalid/x.bin", f, size=5)
    assert "not usable" in capsys.readouterr().out and not f.exists()


def test_only_https(tmp_path):
    with pytest.raises(ValueError, match="https"):
        download.fetch("http://example.org/x", tmp_path / "x")


def test_write_bytes_is_atomic_and_recorded(tmp_path):
    target = tmp_path / "sub" / "t.bin"
    with cache.lock(target):
        cache.write_bytes(target, b"xyz")
        assert cache.problem(target) is None
    target.write_bytes(b"xyZ")
    assert "SHA-256" in cache.problem(target)
    assert not list(tmp_path.rglob("*.part*"))


def test_stale_temporary_files_are_removed_under_the_lock(tmp_path):
    target = tmp_path / "t.bin"
    stale = [tmp_path / "t.bin.abc123.part", tmp_path / f"t.bin.{os.getpid()}-00ff.part.bin"]
    for path in stale:
        path.write_bytes(b"half")
    other = tmp_path / "other.bin.abc123.part"
    other.write_bytes(b"not ours")
    with cache.lock(target):
        pass
    assert not any(path.exists() for path in stale) and other.exists()
