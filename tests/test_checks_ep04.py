"""Episode 4's checks: right answers pass, plausible mistakes get a message that names them, stubs are 'not done'."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import ROOT
from gpucourse.checks import ep04
from gpucourse.exercises import ____

from checking import assert_wrong, outcome
from gpucourse.frameworks import import_tensorflow

tf = import_tensorflow()




# ---------------------------------------------------------------- q1

def conv2d_facts(input_shape, filters, kernel_size, padding):
    h, w, c = input_shape
    shape = (h - kernel_size + 1, w - kernel_size + 1, filters) if padding == "valid" else (h, w, filters)
    return shape, kernel_size * kernel_size * c * filters + filters


def test_q1_right_answer_and_keras_agree():
    assert outcome(ep04.q1, conv2d_facts)[0] == "correct"
    for input_shape, filters, kernel, padding in ep04.Q1_LAYERS:
        layer = tf.keras.layers.Conv2D(filters, kernel, padding=padding)
        layer.build((None, *input_shape))
        shape = tuple(layer.compute_output_shape((None, *input_shape))[1:])
        assert ep04.q1_expected(input_shape, filters, kernel, padding) == (shape, layer.count_params())


def test_q1_answer_by_keras_itself_passes():
    def by_keras(input_shape, filters, kernel_size, padding):
        layer = tf.keras.layers.Conv2D(filters, kernel_size, padding=padding)
        layer.build((None, *input_shape))
        return layer.compute_output_shape((None, *input_shape))[1:], layer.count_params()

    assert outcome(ep04.q1, by_keras)[0] == "correct"


def _q1(shape=None, params=None):
    """conv2d_facts with its shape or params part replaced by a wrong formula."""
    def fn(input_shape, filters, k, padding):
        right_shape, right_params = conv2d_facts(input_shape, filters, k, padding)
        h, w, c = input_shape
        return (shape(h, w, c, filters, k, padding) if shape else right_shape,
                params(h, w, c, filters, k, padding) if params else right_params)
    return fn


Q1_WRONG = {
    # the mistakes the exercise is about
    "always 'same'": (_q1(shape=lambda h, w, c, f, k, p: (h, w, f)), "padding='same' gives"),
    "ignores padding ('valid' always)": (_q1(shape=lambda h, w, c, f, k, p: (h - k + 1, w - k + 1, f)),
                                         ["(batch, 32, 32, 3)", "keeps its height and width", "look at `padding`"]),
    "off by one": (_q1(shape=lambda h, w, c, f, k, p: (h - k, w - k, f) if p == "valid" else (h, w, f)),
                   "in − kernel + 1"),
    "height and width swapped": (_q1(shape=lambda h, w, c, f, k, p: (w - k + 1, h - k + 1, f) if p == "valid" else (w, h, f)),
                                 ["swapped", "(batch, 28, 20, 8)"]),
    "output keeps the input channels": (_q1(shape=lambda h, w, c, f, k, p: (*conv2d_facts((h, w, c), f, k, p)[0][:2], c)),
                                        "one output channel"),
    "batch dimension included": (_q1(shape=lambda h, w, c, f, k, p: (None, *conv2d_facts((h, w, c), f, k, p)[0])),
                                 "batch dimension"),
    "no bias": (_q1(params=lambda h, w, c, f, k, p: k * k * c * f), "bias per filter"),
    "kernel ignores input channels": (_q1(params=lambda h, w, c, f, k, p: k * k * f + f), "all 32 input channels"),
    "bias per input channel": (_q1(params=lambda h, w, c, f, k, p: k * k * c * f + c), "not one per input channel"),
    "weights per output position": (_q1(params=lambda h, w, c, f, k, p: (k * k * c * f + f) * (h - k + 1) * (w - k + 1)),
                                    "every position"),
    "kernel counted once, not k×k": (_q1(params=lambda h, w, c, f, k, p: k * c * f + f), "25 weights per input channel"),
    # hard-coded constants, right on one fixture only
    "hard-coded answer for the prompt's layer": (lambda *a: ((12, 12, 48), 38448),
                                                 ["same as for another layer", "from the arguments"]),
    "hard-coded filters": (_q1(shape=lambda h, w, c, f, k, p: (*conv2d_facts((h, w, c), f, k, p)[0][:2], 48)),
                           "one channel per filter: 16"),
    # wrong types
    "params as text": (_q1(params=lambda h, w, c, f, k, p: str(k * k * c * f + f)), "whole number"),
    "shape as text": (_q1(shape=lambda h, w, c, f, k, p: "12x12x48"), "tuple"),
    "fractional params": (_q1(params=lambda h, w, c, f, k, p: (k * k * c * f + f) / 7), "whole number"),
    "only the shape": (lambda *a: conv2d_facts(*a)[0], "two things"),
    "function raises": (lambda input_shape, f, k, p: input_shape[3], "raised IndexError"),
}


@pytest.mark.parametrize("name", Q1_WRONG)
def test_q1_mistakes_are_explained(name):
    fn, words = Q1_WRONG[name]
    assert_wrong(ep04.q1, (fn,), words)


def test_q1_numbers_instead_of_a_function():
    assert_wrong(ep04.q1, ((12, 12, 48),), "pass the function itself")


def test_q1_stub_is_not_done():
    def stub(input_shape, filters, kernel_size, padding):
        shape = ____
        params = ____
        return shape, params

    assert outcome(ep04.q1, stub)[0] == "not-done"
    assert outcome(ep04.q1, ____)[0] == "not-done"


# ---------------------------------------------------------------- q2

def cpu_reference(x):
    with tf.device(tf.config.list_logical_devices("CPU")[0].name):
        x64 = tf.cast(x, tf.float64)
        return x64 @ tf.transpose(x64)


def device_type(name):
    kind = str(name).rsplit("device:", 1)[-1].split(":")[0].upper()
    return "GPU" if kind == "CUDA" else kind


def test_q2_right_answer():
    result, message = outcome(ep04.q2, cpu_reference, device_type)
    assert result == "correct" and "CPU" in message, message
    assert tf.config.get_soft_device_placement(), "the check must restore soft placement"


def test_q2_other_right_answers():
    def with_literal_cpu(x):
        with tf.device("/CPU:0"):
            return tf.linalg.matmul(tf.cast(x, tf.float64), tf.cast(x, tf.float64), transpose_b=True)

    def by_parsing(name):
        kind = name.rsplit("device:", 1)[-1].split(":")[0].lower()
        return {"cuda": "gpu"}.get(kind, kind)

    assert outcome(ep04.q2, with_literal_cpu, by_parsing)[0] == "correct"

    def through_numpy(x):             # cannot be traced into a graph: judged by its eager runs
        with tf.device("CPU"):
            x64 = tf.constant(np.asarray(x, dtype=np.float64))
            return tf.matmul(x64, x64, transpose_b=True)

    def spec_name(x):
        from tensorflow import DeviceSpec, device

        with device(DeviceSpec(device_type="CPU", device_index=0).to_string()):
            x64 = tf.cast(x, "float64")
            return tf.einsum("ij,kj->ik", x64, x64)

    for fn in (through_numpy, spec_name):
        result, message = outcome(ep04.q2, fn, device_type)
        assert result == "correct", (fn.__name__, message)


def _unpinned(x):
    x64 = tf.cast(x, tf.float64)
    return x64 @ tf.transpose(x64)


def _chosen_device(x):
    """Pins to the GPU if one is listed, else the CPU: right on this machine, wrong on a GPU machine."""
    device = (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name
    with tf.device(device):
        x64 = tf.cast(x, tf.float64)
        return x64 @ tf.transpose(x64)


def _cast_outside(x):
    x64 = tf.cast(x, tf.float64)
    with tf.device("/CPU:0"):
        return x64 @ tf.transpose(x64)


def _float32(x):
    with tf.device("/CPU:0"):
        return x @ tf.transpose(x)


def _cast_after(x):
    with tf.device("/CPU:0"):
        return tf.cast(x @ tf.transpose(x), tf.float64)


def _numpy(x):
    with tf.device("/CPU:0"):
        x64 = tf.cast(x, tf.float64)
        return (x64 @ tf.transpose(x64)).numpy()


def _transposed_first(x):
    with tf.device("/CPU:0"):
        x64 = tf.cast(x, tf.float64)
        return tf.transpose(x64) @ x64


_FIXED = np.ones((6, 6))


def _hard_coded(x):
    with tf.device("/CPU:0"):
        return tf.constant(_FIXED @ _FIXED.T)


def _soft_on(x):
    tf.config.set_soft_device_placement(True)
    x64 = tf.cast(x, tf.float64)
    return x64 @ tf.transpose(x64)


def _second_cpu(x):
    with tf.device("/CPU:1"):
        x64 = tf.cast(x, tf.float64)
        return x64 @ tf.transpose(x64)


def _device_none(x):
    with tf.device(None):             # clears the caller's scope: the CPU only when there is no GPU
        x64 = tf.cast(x, tf.float64)
        return x64 @ tf.transpose(x64)


def _device_empty(x):
    with tf.device(""):
        return tf.linalg.matmul(tf.cast(x, tf.float64), tf.cast(x, tf.float64), transpose_b=True)


Q2_WRONG = {
    # the mistake the exercise is about: work left where the caller put it
    "not pinned at all": (_unpinned, device_type, ["not pinned to the CPU", "soft placement off", "could not place Cast"]),
    "asks for the GPU when one is listed": (_chosen_device, device_type, ["lists a GPU", "asks for it"]),
    "the cast left outside the CPU scope": (_cast_outside, device_type, ["could not place Cast", "the cast too"]),
    "switches soft placement back on": (_soft_on, device_type, "switches soft placement back on"),
    "a CPU that does not exist": (_second_cpu, device_type, ["asks for", "CPU:1", "does not exist"]),
    "tf.device(None), which clears the scope": (_device_none, device_type, ["tf.device(None)", "clears the caller's",
                                                                          "Name the CPU"]),
    "tf.device(''), which names nothing": (_device_empty, device_type, ["not pinned to the CPU"]),
    # wrong result
    "float32, not float64": (_float32, device_type, ["float32", "float64"]),
    "multiplied in float32, cast afterwards": (_cast_after, device_type, "cast to float64 afterwards"),
    "returns NumPy": (_numpy, device_type, "NumPy array"),
    "xᵀ @ x": (_transposed_first, device_type, "xᵀ @ x"),
    "hard-coded result": (_hard_coded, device_type, "compute it from the argument x"),
    # device_type
    "device_type always 'CPU'": (cpu_reference, lambda name: "CPU", ["for every name", "not from this machine"]),
    "device_type from the machine": (cpu_reference,
                                     lambda name: "GPU" if tf.config.list_logical_devices("GPU") else "CPU",
                                     "not from this machine"),
    "device_type returns the whole name": (cpu_reference, lambda name: name, "only the kind of device"),
    "device_type keeps the index": (cpu_reference, lambda name: str(name).rsplit("device:", 1)[-1],
                                    "without job, task or index"),
    "device_type returns a DeviceSpec": (cpu_reference, lambda name: tf.DeviceSpec(device_type=device_type(name)),
                                          ".device_type"),
    "device_type returns a bool": (cpu_reference, lambda name: "GPU" in name, "not True/False"),
    "device_type right for CPU names only": (cpu_reference, lambda name: "CPU" if "CPU" in name else "TPU",
                                             "expected 'GPU'"),
    # wrong types
    "a tensor instead of a function": (cpu_reference(tf.ones((2, 2))), device_type, "pass the function itself"),
}


@pytest.mark.parametrize("name", Q2_WRONG)
def test_q2_mistakes_are_explained(name):
    fn, dt, words = Q2_WRONG[name]
    assert_wrong(ep04.q2, (fn, dt), words)
    assert tf.config.get_soft_device_placement(), "the check must restore soft placement"


def _cast_after_other_blas(x):
    """The cast-afterwards mistake as another BLAS computes it: the float32 product summed in
    another order, a few float32 ulps away from TensorFlow's (and NumPy's) on this machine."""
    with tf.device("/CPU:0"):
        in32 = (x @ tf.transpose(x)).numpy()
        flip = np.arange(in32.size).reshape(in32.shape) % 2 == 0
        moved = np.where(flip, np.nextafter(np.nextafter(in32, np.inf), np.inf),
                         np.nextafter(in32, -np.inf)).astype(np.float32)
        return tf.cast(tf.constant(moved), tf.float64)


def test_q2_cast_afterwards_is_named_whatever_blas_summed_it():
    """Two BLAS libraries do not agree to the bit on a float32 product (an AMD EPYC's did not agree
    with NumPy's at 1e-12): the mistake is recognised from float32's rounding, not from one library's bits."""
    assert_wrong(ep04.q2, (_cast_after_other_blas, device_type), "cast to float64 afterwards")


def _float16_then_cast(x):
    with tf.device("/CPU:0"):
        x16 = tf.cast(x, tf.float16)
        return tf.cast(x16 @ tf.transpose(x16), tf.float64)


def test_q2_a_float16_product_is_not_taken_for_float32():
    result, message = outcome(ep04.q2, _float16_then_cast, device_type)
    assert result == "wrong" and "float32" not in message, message


@pytest.fixture
def simulated_gpu(monkeypatch):
    """A (simulated) machine whose TensorFlow lists a GPU."""
    devices = [tf.config.LogicalDevice("/device:CPU:0", "CPU"), tf.config.LogicalDevice("/device:GPU:0", "GPU")]
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        lambda kind=None: [d for d in devices if kind in (None, d.device_type)])


def test_q2_on_a_simulated_gpu_machine(simulated_gpu):
    assert outcome(ep04.q2, cpu_reference, device_type)[0] == "correct"
    for fn in (_unpinned, _chosen_device, _cast_outside):
        result, message = outcome(ep04.q2, fn, device_type)
        assert result == "wrong" and "not pinned to the CPU" in message and "/device:GPU:0" in message, message
    assert_wrong(ep04.q2, (_device_none, device_type), ["tf.device(None)"])


def test_q2_stub_is_not_done():
    assert outcome(ep04.q2, lambda x: ____, lambda name: ____)[0] == "not-done"
    assert outcome(ep04.q2, cpu_reference, lambda name: ____)[0] == "not-done"
    assert outcome(ep04.q2, ____, ____)[0] == "not-done"


# ---------------------------------------------------------------- q3

def epoch_seconds(n_batches, prep_s, step_s, prefetch):
    if not prefetch:
        return n_batches * (prep_s + step_s)
    return prep_s + step_s + (n_batches - 1) * max(prep_s, step_s)


def epoch_seconds_other_spelling(n, prep, step, prefetch):
    # everything overlaps except the part of each batch that cannot: the first preparation, the last step
    return n * max(prep, step) + min(prep, step) if prefetch else n * prep + n * step


PREDICTED = epoch_seconds(12, 0.03, 0.05, True)


def test_q3_right_answers_pass_and_stubs_are_not_done():
    timed = ep04.q3_slow_pipeline().prefetch(1)          # the pipeline timed, handed over: it decides
    for fn in (epoch_seconds, epoch_seconds_other_spelling):
        result, message = outcome(ep04.q3, fn, PREDICTED, 0.66, timed)
        assert result == "correct" and "within 20 %" in message, message
    result, message = outcome(ep04.q3, epoch_seconds, PREDICTED, 2.0, timed)
    assert result == "correct" and "busy machine" in message       # a measurement never decides the verdict
    result, message = outcome(ep04.q3, epoch_seconds, PREDICTED, 20.0, timed)   # a very busy machine
    assert result == "correct" and "busy machine" in message, message
    result, message = outcome(ep04.q3, epoch_seconds, PREDICTED, 0.96, ep04.q3_slow_pipeline())
    assert result == "wrong" and "prepares nothing ahead" in message, message
    for measured in (0.66, 0.97):      # no pipeline: no time can say whether it prefetched
        result, message = outcome(ep04.q3, epoch_seconds, PREDICTED, measured)
        assert result == "wrong" and "give the pipeline you timed" in message, message
    result, message = outcome(ep04.q3, epoch_seconds, PREDICTED, PREDICTED)
    assert result == "wrong" and "to the last digit" in message, message
    assert outcome(ep04.q3, epoch_seconds, PREDICTED, 0.66, ____)[0] == "not-done"
    assert outcome(ep04.q3, lambda n, p, s, pf: ____, PREDICTED, 0.66)[0] == "not-done"
    assert outcome(ep04.q3, epoch_seconds, ____, ____)[0] == "not-done"
    assert outcome(ep04.q3, ____, ____, ____)[0] == "not-done"


def test_q3_constants_match_the_notebook():
    nb = json.loads((ROOT / "solutions" / "04-keras-cnn.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    assert f"PREP_S, STEP_S = {ep04.Q3_PREP_S}, {ep04.Q3_STEP_S}" in text
    assert f"tf.data.Dataset.range({ep04.Q3_BATCHES})" in text


def _sum_always(n, p, s, prefetch):
    return n * (p + s)


Q3_WRONG = {
    "prefetch changes nothing (a sum)": (_sum_always, "no longer simply add up"),
    "n × the slower, nothing left over": (lambda n, p, s, pf: n * max(p, s) if pf else n * (p + s),
                                          ["first batch", "cannot overlap"]),
    "n × the faster": (lambda n, p, s, pf: n * min(p, s) if pf else n * (p + s), "SLOWER"),
    "training always the bottleneck": (lambda n, p, s, pf: p + n * s if pf else n * (p + s),
                                       ["training is always the slower", "waits for the pipeline"]),
    "preparation free once it overlaps": (lambda n, p, s, pf: n * s if pf else n * (p + s), "sets the pace"),
    "the middle only": (lambda n, p, s, pf: (n - 1) * max(p, s) if pf else n * (p + s),
                        ["first batch's preparation", "last batch's step"]),
    "without prefetch: the slower only": (lambda n, p, s, pf: epoch_seconds(n, p, s, True) if pf else n * max(p, s),
                                          ["nothing overlaps", "add up"]),
    "without prefetch: the steps only": (lambda n, p, s, pf: epoch_seconds(n, p, s, True) if pf else n * s,
                                         "waits for every batch's preparation"),
    "the two swapped": (lambda n, p, s, pf: epoch_seconds(n, p, s, not pf), "swapped"),
    "milliseconds": (lambda n, p, s, pf: 1000 * epoch_seconds(n, p, s, pf), "milliseconds"),
    "right for the notebook's numbers only": (lambda n, p, s, pf: 0.63 if pf else 0.96, "expected"),
    "text": (lambda n, p, s, pf: f"{epoch_seconds(n, p, s, pf):.3f}", "text in quotes"),
    "the flag ignored (always prefetching)": (lambda n, p, s, pf: epoch_seconds(n, p, s, True), "WITH prefetching"),
    "an epoch longer than it can be": (lambda n, p, s, pf: 2 * epoch_seconds(n, p, s, pf), "expected"),
    "not a function": (0.63, "pass the function itself"),
}


@pytest.mark.parametrize("name", Q3_WRONG)
def test_q3_mistakes_are_explained(name):
    fn, words = Q3_WRONG[name]
    assert_wrong(ep04.q3, (fn, PREDICTED, 0.66), words)


@pytest.mark.parametrize("predicted, measured, words", [
    (0.96, 0.66, ["predicted_s", "use your function"]),
    ("0.63", 0.66, "text in quotes"),
    (PREDICTED, -1.0, "more than 0"),
    (PREDICTED, float("nan"), "finite"),
    (PREDICTED, 660.0, ["milliseconds", "seconds"]),           # time.perf_counter() * 1000: not a busy machine
    (PREDICTED * 1000, 660.0, ["milliseconds", "seconds"]),
    # faster than time_pipeline can run on any machine (its sleeps never end early): typed in, or part of it
    (PREDICTED, 0.5, ["cannot take less than", "type a number in"]),
    (PREDICTED, 0.05, ["cannot take less than", "part of the epoch"]),
])
def test_q3_the_prediction_must_come_from_the_function(predicted, measured, words):
    assert_wrong(ep04.q3, (epoch_seconds, predicted, measured), words)


# ---------------------------------------------------------------- q4

def precision_recall_f1(cm, k):
    p = cm[k, k] / cm[:, k].sum()
    r = cm[k, k] / cm[k, :].sum()
    return p, r, 2 * p * r / (p + r)


@pytest.fixture(scope="module")
def cm():
    """The notebook's confusion matrix."""
    from sklearn.metrics import confusion_matrix

    rng = np.random.default_rng(4)
    y_true = rng.integers(0, 10, 500)
    confused = np.where(y_true == 3, 5, (y_true + 1) % 10)
    y_pred = np.where(rng.random(500) < 0.75, y_true,
                      np.where(rng.random(500) < 0.5, confused, rng.integers(0, 10, 500)))
    return confusion_matrix(y_true, y_pred, labels=range(10))


def test_q4_right_answer_matches_sklearn(cm):
    from sklearn.metrics import f1_score, precision_score, recall_score

    result, message = outcome(ep04.q4, precision_recall_f1, cm)
    assert result == "correct" and "arithmetic mean would be 0.525" in message, message
    for m, k in ep04._q4_fixtures():
        y_true = np.repeat(np.repeat(np.arange(len(m)), len(m)), m.ravel())
        y_pred = np.repeat(np.tile(np.arange(len(m)), len(m)), m.ravel())
        p, r, f = ep04.q4_expected(m, k)
        assert p == pytest.approx(precision_score(y_true, y_pred, average=None)[k])
        assert r == pytest.approx(recall_score(y_true, y_pred, average=None)[k])
        assert f == pytest.approx(f1_score(y_true, y_pred, average=None)[k])
        assert abs(p - r) > 0.3 and abs(f - (p + r) / 2) > 0.03  # the fixtures tell the means apart


def test_q4_other_right_answers(cm):
    def rounded(cm, k):
        return tuple(round(float(v), 3) for v in precision_recall_f1(cm, k))

    def harmonic_by_reciprocals(cm, k):
        p, r, _ = precision_recall_f1(cm, k)
        return [p, r, 2 / (1 / p + 1 / r)]

    for fn in (rounded, harmonic_by_reciprocals):
        assert outcome(ep04.q4, fn, cm)[0] == "correct"


def _q4(p=None, r=None, f=None):
    """precision_recall_f1 with one part replaced by a wrong formula of (cm, k, P, R)."""
    def fn(cm, k):
        P, R, F = precision_recall_f1(cm, k)
        return (p(cm, k, P, R) if p else P, r(cm, k, P, R) if r else R, f(cm, k, P, R) if f else F)
    return fn


def _ten_classes(cm, k):
    p = cm[k, k] / sum(cm[i, k] for i in range(10))
    r = cm[k, k] / cm[k, :].sum()
    return p, r, 2 * p * r / (p + r)


def _notebook_cm(cm):
    return lambda m, k: precision_recall_f1(cm, k)


Q4_WRONG = {
    # the mistake the exercise is about: F1 as some other mean
    "F1 as the arithmetic mean": (_q4(f=lambda cm, k, P, R: (P + R) / 2), ["arithmetic mean", "harmonic"]),
    "F1 as the geometric mean": (_q4(f=lambda cm, k, P, R: (P * R) ** 0.5), "geometric mean"),
    "F1 without the factor 2": (_q4(f=lambda cm, k, P, R: P * R / (P + R)), "factor 2"),
    # rows and columns
    "precision and recall swapped": (lambda cm, k: precision_recall_f1(cm, k)[1::-1] + precision_recall_f1(cm, k)[2:],
                                     "swapped"),
    "precision by the row": (_q4(p=lambda cm, k, P, R: R), "divides by row"),
    "recall by the column": (_q4(r=lambda cm, k, P, R: P), "divides by column"),
    "precision is the accuracy": (_q4(p=lambda cm, k, P, R: np.trace(cm) / cm.sum()), "overall accuracy"),
    "precision over all images": (_q4(p=lambda cm, k, P, R: cm[k, k] / cm.sum()), "all"),
    "integer division": (_q4(p=lambda cm, k, P, R: cm[k, k] // cm[:, k].sum()), "integer division"),
    # hard-coded, right on one fixture only
    "hard-coded class 3": (lambda cm, k: precision_recall_f1(cm, 3), ["class 3", "argument k"]),
    "the notebook's cm, not the argument": (None, "notebook's cm"),
    "numbers typed in, right for the first matrix": (lambda cm, k: (0.727, 0.323, 0.448), ["class 3", "typed in"]),
    "numbers typed in from the notebook's cm": (None, "compute from the argument cm"),
    # units and types
    "percentages": (lambda cm, k: tuple(100 * v for v in precision_recall_f1(cm, k)), "percentage"),
    "numbers as text": (lambda cm, k: tuple(f"{v:.4f}" for v in precision_recall_f1(cm, k)), "text in quotes"),
    "one array per class": (lambda cm, k: (np.diag(cm) / cm.sum(0), np.diag(cm) / cm.sum(1), 0.5), "class k only"),
    "only two numbers": (lambda cm, k: precision_recall_f1(cm, k)[:2], "three numbers"),
    "NaN": (_q4(f=lambda cm, k, P, R: float("nan")), "divide by zero"),
    "rounded to one decimal": (lambda cm, k: tuple(round(float(v), 1) for v in precision_recall_f1(cm, k)), "expected"),
    "works for 10 classes only": (_ten_classes, ["IndexError", "assume 10 classes"]),
}


@pytest.mark.parametrize("name", Q4_WRONG)
def test_q4_mistakes_are_explained(name, cm):
    fn, words = Q4_WRONG[name]
    if name == "the notebook's cm, not the argument":
        fn = _notebook_cm(cm)
    elif name == "numbers typed in from the notebook's cm":
        typed = tuple(round(float(v), 3) for v in precision_recall_f1(cm, 3))
        def fn(m, k):
            return typed
    assert_wrong(ep04.q4, (fn, cm), words)


def test_q4_bad_cm(cm):
    assert_wrong(ep04.q4, (precision_recall_f1, "cm"), "confusion matrix")
    assert_wrong(ep04.q4, (precision_recall_f1, cm[:5]), "square")


def test_q4_stub_is_not_done(cm):
    def stub(cm, k):
        precision = ____
        recall = ____
        f1 = ____
        return precision, recall, f1

    assert outcome(ep04.q4, stub, cm)[0] == "not-done"


def test_every_exercise_has_two_hint_steps_and_a_solution(capsys):
    for q in (ep04.q1, ep04.q2, ep04.q3, ep04.q4):
        assert len(q.hints) == 2, q.name
        q.hint()
        q.hint(2)
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint 1 (ep04.q") == 4 and out.count("Hint 2 (ep04.q") == 4
    assert "solutions/04-keras-cnn.ipynb" in out


@pytest.mark.parametrize("q", ["q1", "q2", "q3", "q4"])
def test_hints_give_no_code(q):
    """Neither step of a hint spells out the answer: no calls, no indexing, no formulas in code."""
    for text in getattr(ep04, q).hints:
        for code in ("(", "=", "[", "tf.", "np.", "cm", ".sum", "max", "__"):
            assert code not in text, (q, code, text)


# ---------------------------------------------------------------- the conditions that matter

def test_q4_changing_the_callers_matrix_is_named(cm):
    def zeroes_the_diagonal(m, k):      # right numbers, but the caller's matrix loses its diagonal
        tp = m[k, k]
        np.fill_diagonal(m, 0)
        p, r = tp / (tp + m[:, k].sum()), tp / (tp + m[k, :].sum())
        return p, r, 2 * p * r / (p + r)
    assert_wrong(ep04.q4, (zeroes_the_diagonal, cm), ["changed the matrix cm", "in place"])


def test_q4_written_otherwise(cm):
    from statistics import harmonic_mean

    def with_statistics(m, k):
        m = np.asarray(m, dtype=float)
        p, r = m[k, k] / m[:, k].sum(), m[k, k] / m[k].sum()
        return p, r, harmonic_mean([p, r])
    assert outcome(ep04.q4, with_statistics, cm)[0] == "correct"


def test_q1_an_answer_that_never_returns_is_stopped(monkeypatch):
    from gpucourse import exercises

    monkeypatch.setattr(exercises, "DEADLINE_S", 1.0)

    def loops(input_shape, filters, kernel_size, padding):
        height, width, _ = input_shape
        while height > kernel_size:     # never changes height
            width -= 0
        return (height, width, filters), 0
    assert_wrong(ep04.q1, (loops,), ["did not return within 1 s", "loop that never ends"])


# ---------------------------------------------------------------- q2 on Keras's PyTorch backend

Q2_TORCH_SCRIPT = r'''
import json, os, sys
os.environ["KERAS_BACKEND"] = "torch"
import keras, numpy as np, torch
from gpucourse.checks import ep04
from gpucourse.exercises import ____

def kind(name):
    k = str(name).rsplit("device:", 1)[-1].split(":")[0].upper()
    return "GPU" if k == "CUDA" else k

def right(x):
    with keras.device("cpu:0"):
        x64 = keras.ops.convert_to_tensor(x, "float64")
        return x64 @ keras.ops.transpose(x64)

def cast_keeps_x(x):                      # keras.ops.cast changes the dtype only: x64 stays on x's device
    with keras.device("cpu:0"):
        x64 = keras.ops.cast(x, "float64")
        return x64 @ keras.ops.transpose(x64)

def keras_matmul(x):                      # float64 in, float32 out off TensorFlow
    with keras.device("cpu:0"):
        x64 = keras.ops.convert_to_tensor(x, "float64")
        return keras.ops.matmul(x64, keras.ops.transpose(x64))

def gpu_if_any(x):
    with keras.device("cuda:0" if torch.cuda.is_available() else "cpu:0"):
        x64 = keras.ops.convert_to_tensor(x, "float64")
        return x64 @ keras.ops.transpose(x64)

def follows_x(x):
    with torch.device("cpu"):             # places new tensors only
        return x.double() @ x.double().T

def right_torch(x):                       # plain torch, pinned to the CPU
    x64 = x.to("cpu", torch.float64)
    return x64 @ x64.T

def unpinned(x):                          # follows Keras's current device
    x64 = keras.ops.cast(x, "float64")
    return x64 @ keras.ops.transpose(x64)

def unpinned_ops(x):                      # every step through Keras, none pinned
    x64 = keras.ops.convert_to_tensor(x, dtype="float64")
    return keras.ops.matmul(x64, keras.ops.transpose(x64))

def float32_then_cast(x):
    with keras.device("cpu:0"):
        x = keras.ops.convert_to_tensor(x)
        return keras.ops.cast(x @ keras.ops.transpose(x), "float64")

def float32(x):
    with keras.device("cpu:0"):
        x = keras.ops.convert_to_tensor(x)
        return x @ keras.ops.transpose(x)

def transposed_first(x):
    with keras.device("cpu:0"):
        x64 = keras.ops.cast(x, "float64")
        return keras.ops.transpose(x64) @ x64

def as_numpy(x):
    return keras.ops.convert_to_numpy(right(x))

def blank(x):
    return ____

def cuda_kind(name):
    return str(name).rsplit("device:", 1)[-1].split(":")[0].upper()

cases = {"right": (right, kind), "right_torch": (right_torch, kind), "unpinned": (unpinned, kind), "unpinned_ops": (unpinned_ops, kind),
         "float32_then_cast": (float32_then_cast, kind), "float32": (float32, kind),
         "transposed": (transposed_first, kind), "numpy": (as_numpy, kind), "blank": (blank, kind),
         "cuda_kind": (right, cuda_kind), "blank_kind": (right, lambda name: ____),
         "cast_keeps_x": (cast_keeps_x, kind), "keras_matmul": (keras_matmul, kind),
         "gpu_if_any": (gpu_if_any, kind), "follows_x": (follows_x, kind),
         "tf_kind": (right, lambda name: __import__("tensorflow").DeviceSpec.from_string(str(name)).device_type)}
print(json.dumps({k: list(ep04.q2.outcome(*v)) for k, v in cases.items()}))
'''


@pytest.fixture(scope="module")
def q2_on_torch():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", Q2_TORCH_SCRIPT], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_q2_on_pytorch_right_answers_pass(q2_on_torch):
    for name in ("right", "right_torch"):
        assert q2_on_torch[name][0] == "correct", q2_on_torch[name]
    assert "keras.device('meta')" in q2_on_torch["right"][1]


def test_q2_on_pytorch_stubs_are_not_done(q2_on_torch):
    for name in ("blank", "blank_kind"):
        assert q2_on_torch[name][0] == "not-done", q2_on_torch[name]


@pytest.mark.parametrize("name, words", [
    ("unpinned", ["follows the caller's device", "stand-in for a GPU", "the cast included"]),
    ("unpinned_ops", ["computed on meta", "stood PyTorch's 'meta' device", "keras.device"]),
    ("float32_then_cast", ["multiplied in float32 and cast to float64 afterwards"]),
    ("float32", ["is float32", "float64"]),
    ("transposed", ["xᵀ @ x"]),
    ("numpy", ["NumPy array", ".device"]),
    ("cuda_kind", ["torch calls an NVIDIA GPU 'cuda'", "'GPU'"]),
    ("cast_keeps_x", ["came back on meta", "keras.ops.cast", "convert_to_tensor"]),
    ("keras_matmul", ["keras.ops.matmul", "float32", "`@`"]),
    ("gpu_if_any", ["torch.cuda.is_available() say True", "asks for it"]),
    ("follows_x", ["came back on meta", "double", "torch.device(...)"]),
    ("tf_kind", ["'cuda:0'", "DeviceSpec cannot read it"]),
])
def test_q2_on_pytorch_mistakes_are_named(q2_on_torch, name, words):
    result, message = q2_on_torch[name]
    assert result == "wrong", (result, message)
    assert all(w.lower() in message.lower() for w in words), message


# ---------------------------------------------------------------- answers a review ran, on both backends

ANSWERS = ROOT / "tests" / "data" / "ep04_answers"

#: file → {backend: (verdict, words the message must hold)}; "both" stands for either backend.
ANSWER_VERDICTS = {
    "q1_w21_float_division_shape": {"both": ("wrong", ["holds floats", "`/`"])},
    "q2_w19_kind_cuda": {"both": ("wrong", ["torch calls an NVIDIA GPU 'cuda'"])},
    "q2_w20_kind_tf_only": {"both": ("wrong", ["DeviceSpec cannot read it"])},
    "q2_w21_kind_torch_only": {"both": ("wrong", ["cannot be read by torch.device"])},
    "q2_w22_kind_gpu_substring": {"both": ("wrong", ["torch's names carry no 'GPU'"])},
    "q2_w03_torch_follow_x": {"tensorflow": ("wrong", ["no attribute 'double'"]),
                              "torch": ("wrong", ["ran where x is", "double"])},
    "q2_w28_torch_device_context": {"tensorflow": ("wrong", ["no attribute 'double'"]),
                                    "torch": ("wrong", ["ran where x is", "torch.device(...)"])},
    "q2_w04_cast_outside_at": {"tensorflow": ("wrong", ["could not place Cast", "the cast too"]),
                               "torch": ("wrong", ["ran where x is", "keras.ops.cast"])},
    "q2_w11_gpu_if_exists_at": {"tensorflow": ("wrong", ["lists a GPU", "asks for it"]),
                                "torch": ("wrong", ["torch.cuda.is_available() say True", "asks for it"])},
    "q2_w27_keras_ops_matmul_downcasts": {"tensorflow": ("correct", []),
                                          "torch": ("wrong", ["keras.ops.matmul", "float32", "`@`"])},
    # keras.ops.cast keeps x where it is on PyTorch: on a GPU, x64 stays there and `@` meets a CPU copy
    "q2_r01_cpu_no_index_at": {"tensorflow": ("correct", []),
                               "torch": ("wrong", ["ran where x is", "keras.ops.cast"])},
    "q2_r02_backend_native": {"both": ("correct", [])},
    "q2_r03_uppercase_einsum": {"both": ("correct", [])},
    "q2_r06_convert_in_scope": {"both": ("correct", [])},
    "q3_w20_measured_copy_predicted": {"both": ("wrong", ["the prediction to the last digit"])},
    "q3_w21_measured_unprefetched": {"both": ("wrong", ["give the pipeline you timed", "prefetched(slow_ds)"])},
    "q3_w21t_timed_unprefetched": {"both": ("wrong", ["prepares nothing ahead", "prefetched(slow_ds)"])},
    "q3_r01_solution_measured": {"both": ("wrong", ["give the pipeline you timed"])},   # no pipeline
    "q3_r01t_timed_prefetched": {"both": ("correct", [])},
}

ANSWERS_SCRIPT = r'''
import importlib.util, json, os, sys
os.environ["KERAS_BACKEND"] = sys.argv[1]
import keras
assert keras.backend.backend() == sys.argv[1]
from gpucourse.checks import ep04
out = {}
for path in sys.argv[2:]:
    name = os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out[name] = list(getattr(ep04, name.split("_")[0]).outcome(*mod.answers()))
print(json.dumps(out))
'''


@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_the_reviews_answers_on_both_backends(backend):
    """Answers once judged ✓ though wrong, and right ones beside them, on each Keras backend."""
    import subprocess
    import sys

    files = [str(ANSWERS / f"{name}.py") for name in ANSWER_VERDICTS]
    done = subprocess.run([sys.executable, "-c", ANSWERS_SCRIPT, backend, *files], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for name, expected in ANSWER_VERDICTS.items():
        verdict, words = expected.get(backend) or expected["both"]
        result, message = got[name]
        assert result == verdict, (backend, name, message)
        assert all(w in message for w in words), (backend, name, message)
