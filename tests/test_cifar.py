"""The CIFAR-10 loader and its offline stand-in (gpucourse.data.cifar)."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest

from gpucourse.data import cifar


@pytest.fixture(scope="module")
def small():
    return cifar.stand_in(600, 200, seed=0)


def test_stand_in_has_keras_shapes_and_dtypes(small):
    assert small.x_train.shape == (600, 32, 32, 3) and small.x_train.dtype == np.uint8
    assert small.y_train.shape == (600, 1) and small.y_train.dtype == np.uint8
    assert small.x_test.shape == (200, 32, 32, 3) and small.x_test.dtype == np.uint8
    assert small.y_test.shape == (200, 1) and small.y_test.dtype == np.uint8
    assert small.class_names == cifar.CLASS_NAMES and len(small.class_names) == 10
    assert small.is_stand_in and small.source == "stand-in"


def test_stand_in_default_sizes_match_cifar10():
    assert (cifar.N_TRAIN, cifar.N_TEST) == (50_000, 10_000)
    assert cifar.IMAGE_SHAPE == (32, 32, 3)


def test_stand_in_is_balanced_and_uses_full_pixel_range(small):
    counts = np.bincount(small.y_train[:, 0], minlength=10)
    assert counts.min() == counts.max() == 60
    assert small.x_train.min() < 20 and small.x_train.max() > 235


def test_stand_in_is_deterministic_and_seeded():
    a, b, c = (cifar.stand_in(50, 10, seed=s) for s in (1, 1, 2))
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)


def test_stand_in_announces_itself(capsys):
    cifar.stand_in(10, 10)
    assert "STAND-IN" in capsys.readouterr().out


def test_stand_in_rejects_negative_sizes():
    with pytest.raises(ValueError, match="n_train=-1"):
        cifar.stand_in(-1, 10)


def test_stand_in_classes_are_learnable_from_shape_not_colour():
    """A linear classifier on the (translation-invariant) spectrum of the grey image beats chance
    by far; on the mean colour it does no better than chance: the classes are shapes, not colours."""
    from sklearn.linear_model import RidgeClassifier

    data = cifar.stand_in(2000, 500, seed=3)

    def spectrum(x):
        g = x.astype(np.float32).mean(-1)
        g -= g.mean((1, 2), keepdims=True)
        return np.log1p(np.abs(np.fft.fft2(g))[:, :16, :16]).reshape(len(x), -1)

    def colour(x):
        return x.reshape(len(x), -1, 3).mean(1)

    def accuracy(features):
        clf = RidgeClassifier(alpha=10).fit(features(data.x_train), data.y_train[:, 0])
        return clf.score(features(data.x_test), data.y_test[:, 0])

    assert accuracy(colour) < 0.2
    assert accuracy(spectrum) > 0.3


def test_offline_returns_stand_in_with_message(monkeypatch, capsys):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")

    def no_network(timeout):
        raise AssertionError("the network must not be touched offline")

    monkeypatch.setattr(cifar, "_keras_load", no_network)
    data = cifar.load_cifar10(stand_in_sizes=(20, 10))
    out = capsys.readouterr().out
    assert data.is_stand_in and data.x_train.shape == (20, 32, 32, 3)
    assert "Offline mode" in out and "STAND-IN" in out


def _fake_keras_arrays():
    x = np.zeros((4, 32, 32, 3), np.uint8)
    y = np.zeros((4, 1), np.uint8)
    return (x, y), (x[:2], y[:2])


@pytest.fixture
def keras_home(tmp_path, monkeypatch):
    """Keras' cache in a temporary folder; the archive download (tested in test_faults.py) skipped."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")
    monkeypatch.setattr(cifar, "provide_archive", lambda timeout: None)
    (tmp_path / "datasets").mkdir()
    return tmp_path / "datasets"


def test_online_uses_keras_and_reports_source(keras_home, monkeypatch):
    monkeypatch.setattr(cifar, "_keras_load", lambda timeout: _fake_keras_arrays())
    data = cifar.load_cifar10()
    assert data.source == "keras" and not data.is_stand_in
    assert data.x_train.shape == (4, 32, 32, 3)


def test_download_failure_falls_back_to_stand_in(keras_home, monkeypatch, capsys):
    def fail(timeout):
        raise Exception("URL fetch failure on https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz: "
                        "None -- [Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(cifar, "_keras_load", fail)
    data = cifar.load_cifar10(stand_in_sizes=(20, 10))
    out = capsys.readouterr().out
    assert data.is_stand_in
    assert "Could not load CIFAR-10" in out and "name resolution" in out
    assert "stand-in" in out and "GPUCOURSE_OFFLINE=1" in out


def test_keras_cache_dir_follows_keras_home(keras_home):
    assert cifar.keras_cache_dir() == keras_home


def test_partial_archive_is_detected_and_removed(keras_home, capsys):
    archive = keras_home / cifar.KERAS_ARCHIVE
    archive.write_bytes(b"\x1f\x8b" + b"\0" * 1000)  # the start of a gzip file, cut short
    (keras_home / cifar.KERAS_EXTRACTED).mkdir()
    assert cifar.check_keras_cache() is False
    out = capsys.readouterr().out
    assert "not usable" in out and "partial or corrupt" in out and "downloaded again" in out
    assert not archive.exists() and not (keras_home / cifar.KERAS_EXTRACTED).exists()


def test_corrupt_archive_with_right_size_is_detected(keras_home, capsys):
    payload = b"x" * 64
    archive = keras_home / cifar.KERAS_ARCHIVE
    archive.write_bytes(payload)
    good = hashlib.sha256(payload).hexdigest()
    assert cifar.check_keras_cache(size=64, checksum=good) is True
    assert archive.exists()
    assert cifar.check_keras_cache(size=64, checksum="0" * 64) is False
    assert "wrong SHA-256" in capsys.readouterr().out
    assert not archive.exists()


def test_no_archive_means_nothing_to_check(keras_home):
    assert cifar.check_keras_cache() is False


def test_corrupt_extracted_batch_is_cleared_and_fetched_again(keras_home, monkeypatch, capsys):
    """A broken pickle inside the cache: clean up, retry once, and succeed."""
    calls = []
    (keras_home / cifar.KERAS_EXTRACTED).mkdir()

    def flaky(timeout):
        calls.append(timeout)
        if len(calls) == 1:
            raise pickle.UnpicklingError("pickle data was truncated")
        return _fake_keras_arrays()

    monkeypatch.setattr(cifar, "_keras_load", flaky)
    data = cifar.load_cifar10()
    out = capsys.readouterr().out
    assert len(calls) == 2 and data.source == "keras"
    assert "corrupt" in out and "downloading again" in out
    assert not (keras_home / cifar.KERAS_EXTRACTED).exists()


def test_bad_download_twice_ends_in_stand_in(keras_home, monkeypatch, capsys):
    def bad_hash(timeout):
        raise ValueError("Incomplete or corrupted file detected. The sha256 file hash does not match")

    monkeypatch.setattr(cifar, "_keras_load", bad_hash)
    data = cifar.load_cifar10(stand_in_sizes=(10, 10))
    out = capsys.readouterr().out
    assert data.is_stand_in
    assert out.count("Incomplete or corrupted") == 2 and "Using the offline stand-in" in out


def test_archive_problem_names_the_sizes(tmp_path):
    f = tmp_path / "a"
    f.write_bytes(b"123")
    assert "3 bytes, expected 170,498,071" in cifar.archive_problem(f)
    assert "does not exist" in cifar.archive_problem(tmp_path / "missing")


def test_real_keras_loader_with_corrupt_cache_and_no_network(keras_home, monkeypatch, capsys):
    """Through the real provide_archive: a partial archive in Keras' cache is removed, the
    download into the course cache fails (no network), and the stand-in is returned with both
    messages."""
    from gpucourse.data.download import NetworkError

    def no_network(url, dest, **kwargs):
        raise NetworkError("no network: the name www.cs.toronto.edu could not be looked up.")

    monkeypatch.undo()
    monkeypatch.setenv("KERAS_HOME", str(keras_home.parent))
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")
    monkeypatch.setattr(cifar, "fetch", no_network)
    (keras_home / cifar.KERAS_ARCHIVE).write_bytes(b"\x1f\x8b partial")
    data = cifar.load_cifar10(stand_in_sizes=(10, 10))
    out = capsys.readouterr().out
    assert data.is_stand_in
    assert "not usable" in out and "Could not load CIFAR-10" in out and "no network" in out
    assert not (keras_home / cifar.KERAS_ARCHIVE).exists()
