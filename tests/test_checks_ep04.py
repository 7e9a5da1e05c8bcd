"""Episode 4's checks: right answers pass, typical mistakes get a precise message, stubs are 'not done'."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gpucourse.checks import ep04
from gpucourse.exercises import ____
from gpucourse.frameworks import import_tensorflow

tf = import_tensorflow()


def outcome(q, *answers):
    return q.outcome(*answers)


# ---------------------------------------------------------------- q1

def test_q1_right_answer_and_keras_agree():
    layer = tf.keras.layers.Conv2D(48, 5, padding="valid")
    layer.build((None, 16, 16, 32))
    shape = tuple(layer.compute_output_shape((None, 16, 16, 32))[1:])
    assert outcome(ep04.q1, shape, layer.count_params())[0] == "correct"
    assert outcome(ep04.q1, [12, 12, 48], 38448)[0] == "correct"


@pytest.mark.parametrize("shape, params, words", [
    ((16, 16, 48), 38448, "padding='same'"),
    ((None, 12, 12, 48), 38448, "batch dimension"),
    ((12, 12, 32), 38448, "each of the"),
    ((12, 12), 38448, "3 numbers"),
    ((12, 12, 48), 38400, "bias"),
    ((12, 12, 48), 1248, "all 32 input channels"),
    ((12, 12, 48), 38448 * 144, "every position"),
    ((12, 12, 48), 1000, "plus one bias"),
    ((12, 12, 48), "38448", "whole number"),
    ("12x12x48", 38448, "tuple"),
])
def test_q1_mistakes_are_explained(shape, params, words):
    result, message = outcome(ep04.q1, shape, params)
    assert result == "wrong" and words in message, message


def test_q1_stub_is_not_done():
    assert outcome(ep04.q1, ____, ____)[0] == "not-done"


# ---------------------------------------------------------------- q2

def _chosen():
    return (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name


def _product(device):
    a, b = tf.ones((256, 8)), tf.ones((8, 256))
    with tf.device(device):
        return a @ b


def test_q2_right_answer():
    device = _chosen()
    result, message = outcome(ep04.q2, device, _product(device))
    assert result == "correct" and "ran where you asked" in message


def test_q2_device_that_does_not_exist():
    missing = f"/GPU:{len(tf.config.list_logical_devices('GPU'))}"
    result, message = outcome(ep04.q2, missing, _product(_chosen()))
    assert result == "wrong" and "does not exist" in message and "list_logical_devices" in message


def test_q2_result_computed_elsewhere(monkeypatch):
    """On a (simulated) GPU machine, a product left on the CPU is caught."""
    devices = [tf.config.LogicalDevice("/device:CPU:0", "CPU"), tf.config.LogicalDevice("/device:GPU:0", "GPU")]
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        lambda kind=None: [d for d in devices if kind in (None, d.device_type)])
    result, message = outcome(ep04.q2, "/GPU:0", _product("/CPU:0"))
    assert result == "wrong" and "not on /GPU:0" in message and "with tf.device" in message
    result, message = outcome(ep04.q2, "/CPU:0", _product("/CPU:0"))
    assert result == "wrong" and "TensorFlow sees a GPU" in message


@pytest.mark.parametrize("device, words", [(0, "device name string"), ("cpu please", "not a TensorFlow device")])
def test_q2_bad_device_values(device, words):
    result, message = outcome(ep04.q2, device, _product(_chosen()))
    assert result == "wrong" and words in message, message


def test_q2_wrong_result():
    result, message = outcome(ep04.q2, _chosen(), np.ones((256, 256)))
    assert result == "wrong" and "a @ b" in message
    result, message = outcome(ep04.q2, _chosen(), tf.ones((4, 4)))
    assert result == "wrong" and "(256, 256)" in message


def test_q2_stub_is_not_done():
    assert outcome(ep04.q2, ____, ____)[0] == "not-done"


# ---------------------------------------------------------------- q3

def _slow():
    def prep(i):
        time.sleep(0.02)
        return i

    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return tf.data.Dataset.range(6).map(lambda i: tf.py_function(prep, [i], tf.int64)).with_options(options)


def test_q3_right_answer():
    slow = _slow()
    result, message = outcome(ep04.q3, slow, slow.prefetch(tf.data.AUTOTUNE), 0.24, 0.13)
    assert result == "correct" and "faster" in message


@pytest.mark.parametrize("make_fast, t_slow, t_fast, words", [
    (lambda s: s, 0.2, 0.1, "slow_ds itself"),
    (lambda s: s.map(lambda i: i), 0.2, 0.1, "no prefetch"),
    (lambda s: s.prefetch(2).map(lambda i: i), 0.2, 0.1, "not as its last step"),
    (lambda s: s.take(3).prefetch(2), 0.2, 0.1, "change nothing else"),
    (lambda s: s.prefetch(2), 0.1, 0.2, "not shorter"),
    (lambda s: s.prefetch(2), 0.42, 0.41, "saved almost nothing"),
    (lambda s: s.prefetch(2), "fast", 0.2, "seconds"),
    (lambda s: [1, 2], 0.2, 0.1, "tf.data.Dataset"),
])
def test_q3_mistakes_are_explained(make_fast, t_slow, t_fast, words):
    slow = _slow()
    result, message = outcome(ep04.q3, slow, make_fast(slow), t_slow, t_fast)
    assert result == "wrong" and words in message, message


def test_q3_stub_is_not_done():
    assert outcome(ep04.q3, _slow(), ____, ____, ____)[0] == "not-done"


# ---------------------------------------------------------------- q4

@pytest.fixture(scope="module")
def cm():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 6, (10, 10))
    m[np.diag_indices(10)] = rng.integers(20, 40, 10)
    m[3, 5] += 15  # cats taken for dogs: precision and recall of "cat" differ
    return m


def _prf(cm):
    p = cm[3, 3] / cm[:, 3].sum()
    r = cm[3, 3] / cm[3].sum()
    return p, r, 2 * p * r / (p + r)


def test_q4_right_answer_matches_sklearn(cm):
    from sklearn.metrics import f1_score

    p, r, f = _prf(cm)
    result, message = outcome(ep04.q4, cm, p, r, f)
    assert result == "correct" and "scikit-learn" in message
    y_true = np.repeat(np.repeat(np.arange(10), 10), cm.ravel())
    y_pred = np.repeat(np.tile(np.arange(10), 10), cm.ravel())
    assert f == pytest.approx(f1_score(y_true, y_pred, average=None)[3])


def test_q4_mistakes_are_explained(cm):
    p, r, f = _prf(cm)
    cases = [
        ((r, p, f), "swapped"),
        ((p * 100, r, f), "percentage"),
        ((cm.trace() / cm.sum(), r, f), "overall accuracy"),
        ((0.5, r, f), "column 3"),
        ((p, 0.5, f), "row 3"),
        ((p, r, (p + r) / 2), "harmonic"),
        ((p, r, 0.1), "f1 is"),
        ((p, r, float("nan")), "divide by zero"),
    ]
    for answers, words in cases:
        result, message = outcome(ep04.q4, cm, *answers)
        assert result == "wrong" and words in message, (answers, message)
    result, message = outcome(ep04.q4, cm[:5, :5], p, r, f)
    assert result == "wrong" and "10×10" in message


def test_q4_stub_is_not_done(cm):
    assert outcome(ep04.q4, cm, ____, ____, ____)[0] == "not-done"


def test_every_exercise_has_a_hint(capsys):
    for q in (ep04.q1, ep04.q2, ep04.q3, ep04.q4):
        q.hint()
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint (ep04.q") == 4 and "solutions/04-keras-cnn.ipynb" in out
