"""Importing the frameworks without start-up noise.

TensorFlow 2.21 writes C++ log lines (oneDNN notices, "All log messages before
absl::InitializeLog() ...") to the process's stderr while it is imported —
before ``TF_CPP_MIN_LOG_LEVEL`` can take effect. They are harmless but make a
learner think something broke. ``import_tensorflow`` sets the log level and
silences file descriptor 2 for the duration of the import only; errors raised
by the import itself still reach you.
"""

from __future__ import annotations

import contextlib
import os
import sys


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


def import_tensorflow():
    """``import tensorflow as tf``, minus the C++ start-up log lines.

    Returns
    -------
    module
        The ``tensorflow`` module.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _stderr_fd_silenced():
        import tensorflow as tf
    return tf
