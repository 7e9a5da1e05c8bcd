"""Gradient-boosted trees on the CPU and on the GPU with XGBoost (episode 3).

XGBoost is preinstalled on Colab and Kaggle; a local install may lack it, so it is imported only
when a function here runs, and a missing package raises ``ImportError`` with a sentence that says
what to do. ``device="cuda"`` needs a CUDA build of XGBoost (the PyPI wheels for Linux are) and a GPU.
"""

from __future__ import annotations

import time
import warnings

__all__ = ["GPU_DOCS", "MISSING", "NoGPU", "boosted_trees", "fit_and_score"]

#: XGBoost's own page on its GPU algorithms (``device="cuda"`` with ``tree_method="hist"``).
GPU_DOCS = "https://xgboost.readthedocs.io/en/stable/gpu/index.html"

MISSING = ("xgboost is not installed in this Python (Colab and Kaggle have it). Install it with "
           "`pip install xgboost` and run this cell again; the rest of the notebook does not need it.")


class NoGPU(RuntimeError):
    """``device="cuda"`` asked for, but XGBoost cannot train there (no CUDA build, or no GPU it can use)."""


def _xgboost():
    try:
        import xgboost
    except ImportError as exc:
        raise ImportError(MISSING) from exc
    return xgboost


def boosted_trees(device, rounds, seed=0):
    """XGBoost's classifier of ``rounds`` trees, built on ``device``.

    Episode 3 writes this function out in a cell (the line it teaches is XGBoost's ``device``
    argument, since XGBoost 2.0); :func:`fit_and_score` calls it from here, and
    tests/test_taught_ep03.py keeps the two equal.

    Parameters
    ----------
    device : str
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    rounds : int
        Boosting rounds (trees).
    seed : int
        The classifier's random seed.
    """
    from xgboost import XGBClassifier

    return XGBClassifier(tree_method="hist", device=device, n_estimators=rounds,
                         max_depth=6, learning_rate=0.1, random_state=seed)


def fit_and_score(X_train, y_train, X_test, device: str = "cpu", rounds: int = 200, seed: int = 0,
                  make=boosted_trees):
    """Train ``make(device, rounds, seed)`` (XGBoost's classifier) and predict ``X_test``.

    Parameters
    ----------
    X_train, y_train, X_test : NumPy arrays (host memory: the same input for both devices)
    device : "cpu", "cuda" or "cuda:N"
    rounds : boosting rounds (trees), the same for every device
    seed : random seed of the classifier
    make : callable
        ``make(device, rounds, seed)`` returns the unfitted classifier: :func:`boosted_trees`,
        or the same function as an episode's cell defines it.

    Returns
    -------
    (seconds, prob) : wall-clock seconds of ``fit`` and the signal probability of each test event.
    ``fit`` returns only when training has finished, on either device, so a clock around it is
    right. A short untimed fit first pays the one-off costs (on a GPU, CUDA start-up), as a
    warm-up does in episode 1.

    Raises
    ------
    ImportError
        XGBoost is not installed (the message says what to do).
    NoGPU
        ``device`` is a GPU, but this XGBoost has no CUDA or finds no GPU: XGBoost itself would only warn
        and train on the CPU.
    """
    xgboost = _xgboost()
    on_gpu = str(device).startswith("cuda")
    if on_gpu and not xgboost.build_info().get("USE_CUDA"):
        raise NoGPU(f"this XGBoost {xgboost.__version__} was built without CUDA (pip's xgboost-cpu, or macOS), so "
                    "it cannot train on a GPU; Colab's and Kaggle's XGBoost can.")
    with warnings.catch_warnings(record=True) as caught:                  # warm-up, not timed
        warnings.simplefilter("always")
        make(device, 2, seed).fit(X_train[:1000], y_train[:1000])
    if on_gpu and any("Device is changed from GPU to CPU" in str(w.message) for w in caught):
        # XGBoost would quietly train on the CPU instead: a "GPU" time that is not one
        raise NoGPU("XGBoost found no GPU it can use (it would fall back to the CPU), so there is no GPU fit to time.")
    model = make(device, rounds, seed)
    start = time.perf_counter()
    model.fit(X_train, y_train)
    seconds = time.perf_counter() - start
    with warnings.catch_warnings():
        # a GPU model predicting NumPy data in host memory warns that it falls back to a copy: fine here
        warnings.filterwarnings("ignore", message=".*mismatched devices.*")
        prob = model.predict_proba(X_test)[:, 1]
    return seconds, prob
