"""Gradient-boosted trees on the CPU and on the GPU with XGBoost (episode 3).

XGBoost is preinstalled on Colab and Kaggle; a local install may lack it, so it is imported only
when a function here runs, and a missing package raises ``ImportError`` with a sentence that says
what to do. ``device="cuda"`` needs a CUDA build of XGBoost (the PyPI wheels for Linux are) and a GPU.
"""

from __future__ import annotations

import time
import warnings

__all__ = ["GPU_DOCS", "MISSING", "fit_and_score"]

#: XGBoost's own page on its GPU algorithms (``device="cuda"`` with ``tree_method="hist"``).
GPU_DOCS = "https://xgboost.readthedocs.io/en/stable/gpu/index.html"

MISSING = ("xgboost is not installed in this Python (Colab and Kaggle have it). Install it with "
           "`pip install xgboost` and run this cell again; the rest of the notebook does not need it.")


def _xgboost():
    try:
        import xgboost
    except ImportError as exc:
        raise ImportError(MISSING) from exc
    return xgboost


def fit_and_score(X_train, y_train, X_test, device: str = "cpu", rounds: int = 200, seed: int = 0):
    """Train ``XGBClassifier(tree_method="hist", device=device)`` and predict ``X_test``.

    Parameters
    ----------
    X_train, y_train, X_test : NumPy arrays (host memory: the same input for both devices)
    device : "cpu", "cuda" or "cuda:N"
    rounds : boosting rounds (trees), the same for every device
    seed : random seed of the classifier

    Returns
    -------
    (seconds, prob) : wall-clock seconds of ``fit`` and the signal probability of each test event.
    ``fit`` returns only when training has finished, on either device, so a clock around it is
    right. A short untimed fit first pays the one-off costs (on a GPU, CUDA start-up), as a
    warm-up does in episode 1.
    """
    xgboost = _xgboost()

    def classifier(n):
        return xgboost.XGBClassifier(tree_method="hist", device=device, n_estimators=n, max_depth=6,
                                     learning_rate=0.1, random_state=seed, n_jobs=None)

    classifier(2).fit(X_train[:1000], y_train[:1000])                       # warm-up, not timed
    model = classifier(rounds)
    start = time.perf_counter()
    model.fit(X_train, y_train)
    seconds = time.perf_counter() - start
    with warnings.catch_warnings():
        # a GPU model predicting NumPy data in host memory warns that it falls back to a copy: fine here
        warnings.filterwarnings("ignore", message=".*mismatched devices.*")
        prob = model.predict_proba(X_test)[:, 1]
    return seconds, prob
