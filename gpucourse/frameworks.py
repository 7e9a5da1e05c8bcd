"""Importing the frameworks without start-up noise.

TensorFlow 2.21 writes C++ log lines (oneDNN notices, "All log messages before
absl::InitializeLog() ...") to the process's stderr while it is imported —
before ``TF_CPP_MIN_LOG_LEVEL`` can take effect. They are harmless but make a
learner think something broke. ``import_tensorflow`` sets the log level and
silences file descriptor 2 for the duration of the import only; errors raised
by the import itself still reach you.

It also asks for the list of GPUs inside that quiet window: the GPU build of
TensorFlow (Colab's, or ``tensorflow[and-cuda]``) logs "failed call to cuInit"
as an error the first time it looks for a GPU on a machine that has none. The
list does not start TensorFlow's runtime, so memory growth can still be set
afterwards.

Three more things happen on the way, so that every episode gets them:

* Triton is imported first where it is installed (Linux CUDA builds of PyTorch bring it).
  With TensorFlow 2.21 imported first, a later ``import triton`` kills the process (a
  segmentation fault), and PyTorch imports Triton when it builds its first optimizer
  (``torch._dynamo``). The other order works.
* A GPU this TensorFlow cannot run on (``features.tf_gpu_problem``: TensorFlow before 2.21 on
  Blackwell's sm_120) is hidden from it before its runtime starts, with one printed sentence;
  TensorFlow then runs on the CPU and PyTorch keeps the GPU. ``tensorflow_gpus`` lists what is
  left.
* ``has_tensorflow()`` says False, with one printed sentence, where TensorFlow is not installed
  (a PyTorch-only GPU node or cluster): an episode guards its TensorFlow cells with ``HAS_TF``
  and runs all its PyTorch cells.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys

#: Why TensorFlow's GPUs were hidden from it in this process (None: they were not).
_hidden_because: str | None = None

MISSING_TENSORFLOW = ("TensorFlow is not installed here: this episode's TensorFlow cells are skipped "
                      "(each says so), and every PyTorch cell runs.")


@contextlib.contextmanager
def _stderr_fd_silenced():
    try:
        fd = sys.__stderr__.fileno() if sys.__stderr__ else 2
        saved = os.dup(fd)
    except (OSError, ValueError, AttributeError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)


def import_triton_first() -> bool:
    """Import Triton before TensorFlow, where it is installed and the order is still open.

    Returns
    -------
    bool
        True when Triton is imported now (or already was), False when it is not installed or
        TensorFlow came first (then importing Triton here would end the process).
    """
    if "triton" in sys.modules:
        return True
    if "tensorflow" in sys.modules or importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton  # noqa: F401  (only its import order matters)
    except Exception:        # a broken Triton must not stop TensorFlow; torch reports it where used
        return False
    return True


def _hide_gpus_tensorflow_cannot_use(tf) -> None:
    """Hide the GPUs from TensorFlow where ``features.tf_gpu_problem`` finds one it cannot run on."""
    global _hidden_because
    from .features import tf_gpu_problem

    problem = tf_gpu_problem(tf)
    if problem is None or problem == _hidden_because:
        return
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:     # its runtime has started: the visible devices are fixed until restart
        print(f"{problem}, and it has already started on the GPU in this process: restart the "
              "runtime and import TensorFlow with import_tensorflow() before anything uses it.")
        return
    _hidden_because = problem
    print(f"{problem}, so it runs on the CPU here; PyTorch keeps the GPU.")


def tensorflow_gpus(tf) -> list:
    """The GPUs TensorFlow may use: ``tf.config.list_physical_devices("GPU")``, or none where
    ``import_tensorflow`` hid them because this TensorFlow cannot run on them."""
    return [] if _hidden_because else tf.config.list_physical_devices("GPU")


def import_tensorflow():
    """``import tensorflow as tf``, minus the C++ start-up log lines, in a safe order.

    Returns
    -------
    module
        The ``tensorflow`` module.

    Raises
    ------
    ModuleNotFoundError
        Where TensorFlow is not installed, saying how to install it.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import_triton_first()
    try:
        with _stderr_fd_silenced():
            import tensorflow as tf

            tf.config.list_physical_devices("GPU")
    except ModuleNotFoundError as exc:
        if exc.name != "tensorflow":
            raise
        raise ModuleNotFoundError(f"{exc}: this cell needs TensorFlow (pip install tensorflow, or "
                                  "tensorflow[and-cuda] for an NVIDIA GPU on Linux)",
                                  name="tensorflow") from None
    _hide_gpus_tensorflow_cannot_use(tf)
    return tf


def has_tensorflow() -> bool:
    """True where TensorFlow imports; elsewhere False, after printing ``MISSING_TENSORFLOW``.

    An episode asks once, ``HAS_TF = has_tensorflow()``, then ``tf = import_tensorflow() if
    HAS_TF else None``, and guards its TensorFlow cells with ``if HAS_TF:``.
    """
    try:
        import_tensorflow()
    except ModuleNotFoundError as exc:
        if exc.name != "tensorflow":      # TensorFlow is there but one of its own imports failed
            raise
        print(MISSING_TENSORFLOW)
        return False
    return True


#: Where Keras 3 reads its backend: the environment variable, once, at its first import.
KERAS_BACKEND_VARIABLE = "KERAS_BACKEND"


def _quiet_tensorflow() -> None:
    """Import an installed TensorFlow now, quietly: Keras imports it on any backend where it is
    installed (to seed its random numbers, for ``tf.data``), and its C++ start-up lines would
    land in a later cell's output."""
    try:
        import_tensorflow()
    except ImportError:
        pass


def keras_backend() -> tuple[str, str]:
    """(backend, why): the backend Keras 3 should run on here, to set ``KERAS_BACKEND``.

    * ``KERAS_BACKEND`` already set (by the learner, or the course's GPU check, which
      records episode 4 through PyTorch) wins;
    * where Keras is imported already, its backend is fixed for this process;
    * else TensorFlow where it imports here, and PyTorch where it does not (a PyTorch-only
      GPU node, a Python or a Mac TensorFlow does not support).
    """
    chosen = os.environ.get(KERAS_BACKEND_VARIABLE)
    if sys.modules.get("keras") is not None:
        backend = sys.modules["keras"].backend.backend()
        return backend, "Keras was imported already: restart the kernel to change it"
    if chosen:
        if chosen != "tensorflow" and importlib.util.find_spec("tensorflow") is not None:
            _quiet_tensorflow()
        return chosen, f"{KERAS_BACKEND_VARIABLE} was set to {chosen!r} before this cell"
    try:
        import_tensorflow()
    except ModuleNotFoundError as exc:
        if exc.name != "tensorflow":
            raise
        return "torch", "TensorFlow is not installed here, so Keras runs on PyTorch"
    except ImportError as exc:   # installed, but it cannot load here (a broken plugin)
        return "torch", f"TensorFlow is installed but does not load ({exc}), so Keras runs on PyTorch"
    return "tensorflow", "TensorFlow is installed here"
