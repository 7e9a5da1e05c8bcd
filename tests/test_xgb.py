"""gpucourse.xgb: XGBoost's fit timed on a device, and a clear message without xgboost."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from gpucourse import xgb


def _table(n, seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(np.float32)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    X[:, 0] += 2 * y                      # one informative feature
    return X, y


def test_fit_and_score_on_the_cpu_times_fit_and_predicts_every_test_event():
    pytest.importorskip("xgboost")
    X, y = _table(1200, 0)
    seconds, prob = xgb.fit_and_score(X[:1000], y[:1000], X[1000:], device="cpu", rounds=10)
    assert seconds > 0 and prob.shape == (200,)
    assert np.all((prob >= 0) & (prob <= 1))
    assert roc_auc_score(y[1000:], prob) > 0.8


def test_same_seed_same_trees():
    pytest.importorskip("xgboost")
    X, y = _table(600, 1)
    _, a = xgb.fit_and_score(X[:500], y[:500], X[500:], rounds=5, seed=3)
    _, b = xgb.fit_and_score(X[:500], y[:500], X[500:], rounds=5, seed=3)
    np.testing.assert_array_equal(a, b)


def test_without_xgboost_the_error_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", None)      # `import xgboost` now raises ImportError
    X, y = _table(50, 2)
    with pytest.raises(ImportError, match="pip install xgboost") as info:
        xgb.fit_and_score(X, y, X, rounds=2)
    assert "Colab and Kaggle have it" in str(info.value)


def test_a_gpu_fit_without_a_usable_gpu_is_refused_not_timed_on_the_cpu(monkeypatch):
    xgboost = pytest.importorskip("xgboost")
    X, y = _table(300, 3)
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: XGBoost trains there")
    with pytest.raises(xgb.NoGPU, match="no GPU it can use"):       # XGBoost itself would fall back to the CPU
        xgb.fit_and_score(X, y, X, device="cuda", rounds=2)
    monkeypatch.setattr(xgboost, "build_info", lambda: {"USE_CUDA": False})
    with pytest.raises(xgb.NoGPU, match="built without CUDA"):
        xgb.fit_and_score(X, y, X, device="cuda", rounds=2)


def test_boosted_trees_passes_the_device_to_xgboost():
    pytest.importorskip("xgboost")
    for device in ("cpu", "cuda", "cuda:1"):
        params = xgb.boosted_trees(device, 7, seed=2).get_params()
        assert (params["device"], params["n_estimators"], params["random_state"]) == (device, 7, 2)


def test_fit_and_score_warms_up_and_then_trains_what_make_builds():
    pytest.importorskip("xgboost")
    X, y = _table(400, 4)
    built = []

    def make(device, rounds, seed):
        built.append((device, rounds, seed))
        return xgb.boosted_trees(device, rounds, seed)

    _, prob = xgb.fit_and_score(X[:300], y[:300], X[300:], rounds=6, seed=5, make=make)
    assert built == [("cpu", 2, 5), ("cpu", 6, 5)]          # the untimed warm-up, then the fit
    _, same = xgb.fit_and_score(X[:300], y[:300], X[300:], rounds=6, seed=5)
    np.testing.assert_array_equal(prob, same)
