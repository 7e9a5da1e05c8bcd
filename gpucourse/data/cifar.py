"""CIFAR-10 for episode 4: the real data through Keras, or an offline stand-in.

``load_cifar10()`` returns the arrays of ``keras.datasets.cifar10.load_data()``
(``uint8`` images of shape ``(N, 32, 32, 3)``, ``uint8`` labels of shape
``(N, 1)``) together with the class names and where the data came from.

* Online, the archive is downloaded into the course cache (``gpucourse.data.cache``:
  locked, verified against its size and SHA-256, written atomically), handed to
  Keras' own cache (``~/.keras/datasets``, or ``$KERAS_HOME/datasets``) as a hard
  link or copy, and loaded with ``keras.datasets.cifar10.load_data()``, which
  finds it there and checks it again.
* Offline (``GPUCOURSE_OFFLINE=1``) or when the download fails, a generated
  stand-in with the same shapes, dtypes and ten learnable classes is returned,
  and a message says so.

What Keras already does about a bad cache (Keras 3.x, as in Colab): the archive
``cifar-10-batches-py-target_archive`` is checked against its SHA-256 on every
load and fetched again if it does not match; a fresh download that does not
match raises ``ValueError``; the archive is extracted again on every load. What
it does not do: explain the problem, retry once after cleaning up, or fall back
to something that runs. Older ``tf.keras`` (Keras 2) did not check the archive at
all. ``check_keras_cache()`` verifies the archive itself and removes a corrupt
or partial copy with a message, so that Keras fetches it again.
"""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import settings
from . import cache
from .download import fetch

CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer",
               "dog", "frog", "horse", "ship", "truck")
N_TRAIN, N_TEST = 50_000, 10_000
IMAGE_SHAPE = (32, 32, 3)

#: The archive Keras downloads (https://www.cs.toronto.edu/~kriz/cifar.html).
ORIGIN = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
ARCHIVE_BYTES = 170_498_071
#: File names Keras 3 uses inside its cache's ``datasets`` folder.
KERAS_ARCHIVE = "cifar-10-batches-py-target_archive"
KERAS_EXTRACTED = "cifar-10-batches-py-target"

STAND_IN_NOTE = ("STAND-IN DATA: generated images (coloured shapes and textures), not CIFAR-10. "
                 "Same shapes, dtypes and class names; accuracies say nothing about real CIFAR-10.")


@dataclass
class CIFAR10:
    """CIFAR-10 arrays as Keras returns them, plus what they are."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple
    source: str  # "keras" (the real data) or "stand-in"

    @property
    def is_stand_in(self) -> bool:
        return self.source == "stand-in"

    def __repr__(self) -> str:
        return (f"CIFAR10(source={self.source!r}, train={self.x_train.shape} {self.x_train.dtype}, "
                f"test={self.x_test.shape} {self.x_test.dtype})")


# --------------------------------------------------------------------------- cache

def keras_cache_dir() -> Path:
    """The ``datasets`` folder Keras downloads into (``$KERAS_HOME`` or ``~/.keras``)."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    if os.path.isdir(home) and not os.access(home, os.W_OK):
        home = os.path.join("/tmp", ".keras")  # what Keras does with a read-only home
    return Path(home) / "datasets"


def archive_problem(path: Path, size: int = ARCHIVE_BYTES, checksum: str = ARCHIVE_SHA256) -> str | None:
    """None if ``path`` is a complete, intact CIFAR-10 archive, else what is wrong."""
    path = Path(path)
    if not path.is_file():
        return f"{path} does not exist"
    actual = path.stat().st_size
    if actual != size:
        return f"{path.name} has {actual:,} bytes, expected {size:,} (partial or corrupt download)"
    if cache.sha256(path) != checksum:
        return f"{path.name} has the wrong SHA-256 checksum (corrupt download)"
    return None


def clear_keras_cache(cache: Path | None = None) -> None:
    """Remove the CIFAR-10 archive and its extracted folder from the Keras cache."""
    cache = Path(cache) if cache is not None else keras_cache_dir()
    (cache / KERAS_ARCHIVE).unlink(missing_ok=True)
    shutil.rmtree(cache / KERAS_EXTRACTED, ignore_errors=True)


def check_keras_cache(cache: Path | None = None, **expected) -> bool:
    """Verify a cached CIFAR-10 archive; remove it, with a message, if it is bad.

    Returns True if a good archive is cached, False if there is none (now).
    """
    cache = Path(cache) if cache is not None else keras_cache_dir()
    archive = cache / KERAS_ARCHIVE
    if not archive.exists():
        return False
    problem = archive_problem(archive, **expected)
    if problem is None:
        return True
    print(f"The cached CIFAR-10 archive is not usable: {problem}.\n"
          f"Removed it from {cache}; it will be downloaded again.")
    clear_keras_cache(cache)
    return False


def provide_archive(timeout: float = 600.0) -> Path:
    """Put a verified CIFAR-10 archive where Keras looks for it, downloading it into the course cache.

    Raises
    ------
    DownloadError
        If the archive cannot be downloaded; the message says why.
    """
    keras_archive = keras_cache_dir() / KERAS_ARCHIVE
    if keras_archive.exists() and archive_problem(keras_archive) is None:
        return keras_archive
    course_copy = fetch(ORIGIN, cache.folder("cifar-10") / "cifar-10-python.tar.gz",
                        size=ARCHIVE_BYTES, sha256=ARCHIVE_SHA256, timeout=timeout)
    keras_archive.parent.mkdir(parents=True, exist_ok=True)
    with cache.lock(keras_archive):
        with cache.temporary(keras_archive) as (_, tmp):
            pass
        tmp.unlink()
        try:
            os.link(course_copy, tmp)  # no second copy on the same disk
        except OSError:
            shutil.copyfile(course_copy, tmp)
        os.replace(tmp, keras_archive)
    return keras_archive


def _keras_load(timeout: float):
    from ..frameworks import import_tensorflow

    import_tensorflow()  # Keras' backend, imported without TensorFlow's start-up log lines
    import keras

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)  # Keras' own download has no timeout
    try:
        return keras.datasets.cifar10.load_data()
    finally:
        socket.setdefaulttimeout(previous)


# --------------------------------------------------------------------------- loader

def load_cifar10(*, offline: bool | None = None, timeout: float = 600.0,
                 stand_in_sizes: tuple[int, int] = (N_TRAIN, N_TEST), seed: int = 0) -> CIFAR10:
    """CIFAR-10 as ``keras.datasets.cifar10.load_data()`` gives it, or the stand-in.

    Parameters
    ----------
    offline : bool, optional
        Never touch the network and return the stand-in. Default:
        ``gpucourse.settings.offline()`` (``GPUCOURSE_OFFLINE``).
    timeout : float
        Deadline, in seconds, for the whole download (170 MB).
    stand_in_sizes : (int, int)
        Train and test sizes of the stand-in (the real data set is always
        50,000 + 10,000 images; subsample it yourself).
    seed : int
        Seed of the stand-in generator.

    Returns
    -------
    CIFAR10
        ``x_*``: uint8 ``(N, 32, 32, 3)``; ``y_*``: uint8 ``(N, 1)``.
    """
    if offline is None:
        offline = settings.offline()
    if offline:
        settings.allow_stand_in("CIFAR-10", "offline mode")
        print("Offline mode (GPUCOURSE_OFFLINE=1): not downloading CIFAR-10.")
        return stand_in(*stand_in_sizes, seed=seed)
    for attempt in (1, 2):
        check_keras_cache()
        try:
            provide_archive(timeout)
            (x_train, y_train), (x_test, y_test) = _keras_load(timeout)
        except Exception as exc:  # noqa: BLE001 - every failure ends in a clear message
            reason = f"{type(exc).__name__}: {exc}"
            if _looks_corrupt(exc) and attempt == 1:
                print(f"Loading the cached CIFAR-10 failed ({reason}).\n"
                      "The cache looks corrupt: removing it and downloading again.")
                clear_keras_cache()
                continue
            settings.allow_stand_in("CIFAR-10", reason)
            print(f"Could not load CIFAR-10 ({reason}).\n"
                  "Check the internet connection (in Colab: Runtime → Restart session, then run "
                  "again), or set GPUCOURSE_OFFLINE=1. Using the offline stand-in instead.")
            return stand_in(*stand_in_sizes, seed=seed)
        return CIFAR10(x_train, y_train, x_test, y_test, CLASS_NAMES, "keras")
    raise AssertionError("unreachable")


def _looks_corrupt(exc: Exception) -> bool:
    """Errors that mean a broken cache rather than no network."""
    import pickle
    import tarfile
    import zlib

    text = str(exc).lower()
    if isinstance(exc, (pickle.UnpicklingError, EOFError, tarfile.TarError, zlib.error,
                        FileNotFoundError)):
        return True
    return isinstance(exc, ValueError) and ("hash" in text or "corrupt" in text or "reshape" in text)


# --------------------------------------------------------------------------- stand-in

def stand_in(n_train: int = N_TRAIN, n_test: int = N_TEST, *, seed: int = 0) -> CIFAR10:
    """A generated stand-in for CIFAR-10: same shapes, dtypes, class names.

    Each class is a kind of picture — a disc, a square, a ring, a cross, a
    triangle, horizontal, vertical or diagonal stripes, a checkerboard, dots —
    drawn at a random place and size, in random colours on a noisy background,
    so that a CNN must learn shapes rather than colours. Classes are balanced;
    the same seed gives the same arrays.
    """
    if n_train < 0 or n_test < 0:
        raise ValueError(f"Sizes must be >= 0, got n_train={n_train}, n_test={n_test}.")
    print(STAND_IN_NOTE)
    rng = np.random.default_rng(seed)
    x_train, y_train = _draw(n_train, rng)
    x_test, y_test = _draw(n_test, rng)
    return CIFAR10(x_train, y_train, x_test, y_test, CLASS_NAMES, "stand-in")


def _draw(n: int, rng: np.random.Generator, chunk: int = 2048):
    labels = np.arange(n) % len(CLASS_NAMES)
    rng.shuffle(labels)
    images = np.empty((n,) + IMAGE_SHAPE, dtype=np.uint8)
    for start in range(0, n, chunk):
        sl = slice(start, min(start + chunk, n))
        images[sl] = _render(labels[sl], rng)
    return images, labels.astype(np.uint8).reshape(-1, 1)


def _render(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    m = len(labels)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    cx = rng.uniform(11, 21, (m, 1, 1)).astype(np.float32)
    cy = rng.uniform(11, 21, (m, 1, 1)).astype(np.float32)
    r = rng.uniform(6, 11, (m, 1, 1)).astype(np.float32)
    u, v = (xx - cx) / r, (yy - cy) / r           # coordinates in units of the object size
    ang = rng.uniform(-0.35, 0.35, (m, 1, 1)).astype(np.float32)  # small random rotation
    ur, vr = u * np.cos(ang) - v * np.sin(ang), u * np.sin(ang) + v * np.cos(ang)
    rad = np.sqrt(u * u + v * v)
    inside = rad < 1.0
    period = rng.uniform(0.45, 0.65, (m, 1, 1)).astype(np.float32)
    phase = rng.uniform(0, 1, (m, 1, 1)).astype(np.float32)

    def stripes(t):
        return ((t / period + phase) % 1.0) < 0.5

    shapes = [
        rad < 1.0,                                                       # 0 disc
        (np.abs(ur) < 0.8) & (np.abs(vr) < 0.8),                         # 1 square
        (rad < 1.0) & (rad > 0.6),                                       # 2 ring
        ((np.abs(ur) < 0.25) | (np.abs(vr) < 0.25)) & (np.abs(ur) < 1) & (np.abs(vr) < 1),  # 3 cross
        (vr < 0.7) & (vr > -0.9 + 1.6 * np.abs(ur)),                     # 4 triangle
        inside & stripes(vr),                                            # 5 horizontal stripes
        inside & stripes(ur),                                            # 6 vertical stripes
        inside & stripes((ur + vr) * 0.7071),                            # 7 diagonal stripes
        inside & (stripes(ur) ^ stripes(vr)),                            # 8 checkerboard
        inside & (((ur / period + phase) % 1 - 0.5) ** 2
                  + ((vr / period + phase) % 1 - 0.5) ** 2 < 0.06),      # 9 dots
    ]
    mask = np.zeros((m, 32, 32), dtype=bool)
    for k, shape in enumerate(shapes):
        rows = labels == k
        mask[rows] = shape[rows]
    fg = rng.uniform(0, 1, (m, 1, 1, 3)).astype(np.float32)
    bg = rng.uniform(0, 1, (m, 1, 1, 3)).astype(np.float32)
    too_close = np.abs(fg - bg).sum(-1, keepdims=True) < 0.6          # keep the object visible
    fg = np.where(too_close, 1.0 - bg, fg)
    # a smooth background gradient and pixel noise make the task less trivial
    grad = (rng.normal(0, 0.15, (m, 1, 1, 1)) * (xx[None, ..., None] - 16) / 16
            + rng.normal(0, 0.15, (m, 1, 1, 1)) * (yy[None, ..., None] - 16) / 16).astype(np.float32)
    img = np.where(mask[..., None], fg, bg + grad)
    img += rng.normal(0, 0.12, img.shape).astype(np.float32)
    return (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)
