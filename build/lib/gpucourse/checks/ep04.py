"""Checks for episode 4, *A Keras CNN on the GPU*.

* ``q1`` — output shape and parameter count of a ``Conv2D`` layer
* ``q2`` — place a computation on a device and verify where it ran
* ``q3`` — add prefetching to a ``tf.data`` pipeline and measure the effect
* ``q4`` — one class's precision, recall and F1 by hand from a confusion matrix
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..exercises import Exercise, Wrong, expect_close, solution_link

SOLUTIONS = solution_link("04-keras-cnn.ipynb")

# q1: Conv2D(48, kernel_size=5, padding="valid") on feature maps of shape (None, 16, 16, 32)
Q1_INPUT = (16, 16, 32)
Q1_FILTERS, Q1_KERNEL = 48, 5
# q2: the product the learner computes
Q2_SHAPE = (256, 256)
# q4: the class whose F1 is computed by hand
Q4_CLASS, Q4_NAME = 3, "cat"


# --------------------------------------------------------------------------- q1

def _q1_expected():
    h, w, c_in = Q1_INPUT
    out = (h - Q1_KERNEL + 1, w - Q1_KERNEL + 1, Q1_FILTERS)
    params = Q1_KERNEL * Q1_KERNEL * c_in * Q1_FILTERS + Q1_FILTERS
    return out, params


def _as_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise Wrong(f"{name} should be a whole number, got {type(value).__name__} {value!r}.")
    return int(value)


def _check_q1(shape, params):
    expected_shape, expected_params = _q1_expected()
    h, w, c_in = Q1_INPUT
    if not isinstance(shape, (tuple, list)):
        raise Wrong(f"shape should be a tuple such as (height, width, channels), got "
                    f"{type(shape).__name__} {shape!r}.")
    shape = tuple(shape)
    if len(shape) == 4 and shape[0] is None:
        raise Wrong("leave out the batch dimension (None): give (height, width, channels).")
    if len(shape) != 3:
        raise Wrong(f"shape should have 3 numbers (height, width, channels), got {len(shape)}: {shape!r}.")
    shape = tuple(_as_int("each entry of shape", s) for s in shape)
    if shape[:2] == (h, w):
        raise Wrong(f"height and width {h}×{w} are what padding='same' gives. With padding='valid' a "
                    f"{Q1_KERNEL}×{Q1_KERNEL} kernel fits at only {h} − {Q1_KERNEL} + 1 positions per row.")
    if shape[:2] != expected_shape[:2]:
        raise Wrong(f"height and width should be {expected_shape[0]}×{expected_shape[1]}, not "
                    f"{shape[0]}×{shape[1]}: with padding='valid' and stride 1, out = in − kernel + 1.")
    if shape[2] == c_in:
        raise Wrong(f"the channels of the output are not the {c_in} input channels: each of the "
                    f"{Q1_FILTERS} filters makes one output channel.")
    if shape[2] != Q1_FILTERS:
        raise Wrong(f"the output has one channel per filter: {Q1_FILTERS}, not {shape[2]}.")
    params = _as_int("params", params)
    if params == expected_params - Q1_FILTERS:
        raise Wrong(f"{params:,} counts the kernel weights only: add one bias per filter "
                    f"(+{Q1_FILTERS}).")
    if params == Q1_KERNEL * Q1_KERNEL * Q1_FILTERS + Q1_FILTERS:
        raise Wrong(f"each filter spans all {c_in} input channels, so a filter has "
                    f"{Q1_KERNEL}×{Q1_KERNEL}×{c_in} weights, not {Q1_KERNEL}×{Q1_KERNEL}.")
    if params in (expected_params * expected_shape[0] * expected_shape[1],
                  (expected_params - Q1_FILTERS) * expected_shape[0] * expected_shape[1]):
        raise Wrong("the same weights are used at every position: the parameter count does not "
                    "depend on the image size.")
    if params != expected_params:
        raise Wrong(f"params is {params:,}; count kernel_height × kernel_width × input_channels × "
                    f"filters weights, plus one bias per filter.")
    return (f"{Q1_KERNEL}×{Q1_KERNEL}×{c_in}×{Q1_FILTERS} + {Q1_FILTERS} = {expected_params:,} "
            f"parameters, output {expected_shape}. Confirm with layer.count_params() and "
            "layer.compute_output_shape((None, 16, 16, 32)).")


q1 = Exercise(
    "ep04.q1", _check_q1,
    hint="padding='valid' means no padding: the output is (in − kernel + 1) wide. Each filter has a "
         "kernel over all input channels, plus one bias.",
    solution=SOLUTIONS,
)


# --------------------------------------------------------------------------- q2

def _spec(name, what):
    import tensorflow as tf

    if not isinstance(name, str):
        raise Wrong(f"{what} should be a device name string such as '/CPU:0', got "
                    f"{type(name).__name__} {name!r}.")
    try:
        spec = tf.DeviceSpec.from_string(name)
    except (ValueError, TypeError) as exc:
        raise Wrong(f"{what} {name!r} is not a TensorFlow device name ({exc}).") from None
    if spec.device_type is None:
        raise Wrong(f"{what} {name!r} names no device type; use e.g. '/CPU:0' or '/GPU:0'.")
    return spec.device_type.upper(), spec.device_index or 0


def _check_q2(device, result):
    import tensorflow as tf

    kind, index = _spec(device, "device")
    existing = [_spec(d.name, "an existing device") for d in tf.config.list_logical_devices()]
    names = ", ".join(d.name for d in tf.config.list_logical_devices())
    if (kind, index) not in existing:
        raise Wrong(f"{device!r} does not exist on this machine (it has {names}). Choose the name "
                    "from tf.config.list_logical_devices(...) instead of typing it.")
    gpus = tf.config.list_logical_devices("GPU")
    if gpus and kind != "GPU":
        raise Wrong(f"TensorFlow sees a GPU ({gpus[0].name}) but you chose {device!r}: "
                    "the exercise asks for the GPU when there is one.")
    if not gpus and kind != "CPU":
        raise Wrong(f"there is no GPU here, so the device should be the CPU, not {device!r}.")
    if not isinstance(result, tf.Tensor) or not hasattr(result, "device"):
        raise Wrong(f"result should be the tensor a @ b, got {type(result).__name__}.")
    if tuple(result.shape) != Q2_SHAPE:
        raise Wrong(f"result has shape {tuple(result.shape)}, expected {Q2_SHAPE} (a @ b).")
    ran_on = _spec(result.device, "result.device")
    if ran_on != (kind, index):
        raise Wrong(f"result was computed on {result.device}, not on {device}. "
                    "Compute it inside `with tf.device(device):`.")
    return f"result.device is {result.device}: it ran where you asked."


q2 = Exercise(
    "ep04.q2", _check_q2,
    hint="tf.config.list_logical_devices('GPU') is an empty list without a GPU; each entry has a "
         ".name. Compute `a @ b` inside `with tf.device(device):` and look at `result.device`.",
    solution=SOLUTIONS,
)


# --------------------------------------------------------------------------- q3

def _chain(ds):
    """The dataset and the ones it reads from, outermost first."""
    seen = []
    while ds is not None and len(seen) < 50:
        seen.append(ds)
        ds = getattr(ds, "_input_dataset", None)
    return seen


def _is_prefetch(ds) -> bool:
    return "prefetch" in type(ds).__name__.lower()


def _check_q3(slow_ds, fast_ds, t_slow, t_fast):
    import tensorflow as tf

    for name, ds in (("slow_ds", slow_ds), ("fast_ds", fast_ds)):
        if not isinstance(ds, tf.data.Dataset):
            raise Wrong(f"{name} should be a tf.data.Dataset, got {type(ds).__name__}.")
    if fast_ds is slow_ds:
        raise Wrong("fast_ds is slow_ds itself: make a new dataset with slow_ds.prefetch(...).")
    if not _is_prefetch(fast_ds):
        if any(_is_prefetch(d) for d in _chain(fast_ds)):
            raise Wrong("fast_ds prefetches, but not as its last step: put .prefetch(...) at the "
                        "very end, so it overlaps everything before it with the training step.")
        raise Wrong("fast_ds has no prefetch step: add .prefetch(tf.data.AUTOTUNE) at the end of slow_ds.")
    built_from_slow = any(d is slow_ds for d in _chain(fast_ds)[1:])
    if not built_from_slow and fast_ds.element_spec != slow_ds.element_spec:
        raise Wrong(f"fast_ds yields {fast_ds.element_spec}, slow_ds {slow_ds.element_spec}: "
                    "prefetching should not change the elements; build fast_ds from slow_ds.")
    if int(fast_ds.cardinality()) != int(slow_ds.cardinality()):
        raise Wrong(f"fast_ds has {int(fast_ds.cardinality())} batches, slow_ds "
                    f"{int(slow_ds.cardinality())}: only add prefetching, change nothing else.")
    for name, t in (("t_slow", t_slow), ("t_fast", t_fast)):
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t <= 0:
            raise Wrong(f"{name} should be the seconds time_pipeline(...) returned, got {t!r}.")
    if t_fast >= t_slow:
        raise Wrong(f"t_fast ({t_fast:.2f} s) is not shorter than t_slow ({t_slow:.2f} s). Did you time "
                    "slow_ds for t_slow and fast_ds for t_fast? Prefetching should overlap the two waits.")
    if t_fast > 0.85 * t_slow:
        raise Wrong(f"prefetching saved almost nothing ({t_slow:.2f} s → {t_fast:.2f} s). Does slow_ds "
                    "already prefetch (TensorFlow's inject_prefetch option)? Time slow_ds as given, "
                    "and fast_ds = slow_ds.prefetch(...).")
    return (f"{t_slow:.2f} s → {t_fast:.2f} s ({t_slow / t_fast:.1f}× faster): while the loop "
            "'trains', the pipeline already prepares the next batch.")


q3 = Exercise(
    "ep04.q3", _check_q3,
    hint="fast_ds = slow_ds.prefetch(tf.data.AUTOTUNE); then call time_pipeline on each dataset.",
    solution=SOLUTIONS,
)


# --------------------------------------------------------------------------- q4

def _fraction(name, value):
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise Wrong(f"{name} should be a number, got {type(value).__name__} {value!r}.") from None
    if not math.isfinite(x):
        raise Wrong(f"{name} is {x}: did you divide by zero?")
    if 1 < x <= 100:
        raise Wrong(f"{name} is {x:g}: give a fraction between 0 and 1, not a percentage.")
    if not 0 <= x <= 1:
        raise Wrong(f"{name} is {x:g}, but it must lie between 0 and 1.")
    return x


def _check_q4(cm, precision, recall, f1):
    cm = np.asarray(cm)
    if cm.shape != (10, 10):
        raise Wrong(f"cm should be the 10×10 confusion matrix, got shape {cm.shape}.")
    k = Q4_CLASS
    tp = cm[k, k]
    row, col = cm[k, :].sum(), cm[:, k].sum()
    exp_p, exp_r = tp / col, tp / row
    exp_f1 = 2 * exp_p * exp_r / (exp_p + exp_r)
    p, r, f = (_fraction(n, v) for n, v in (("precision", precision), ("recall", recall), ("f1", f1)))

    def close(a, b):
        return abs(a - b) <= 1e-3

    if close(p, exp_r) and close(r, exp_p) and not close(exp_p, exp_r):
        raise Wrong("precision and recall are swapped. Rows of cm are true classes, columns are "
                    f"predictions: precision divides by column {k} (all predicted '{Q4_NAME}'), "
                    f"recall by row {k} (all true '{Q4_NAME}').")
    if not close(p, exp_p):
        if close(p, cm.trace() / cm.sum()):
            raise Wrong("that precision is the overall accuracy; use only column "
                        f"{k}: cm[{k}, {k}] / cm[:, {k}].sum().")
        raise Wrong(f"precision is {p:.4f}, expected {exp_p:.4f}: true positives cm[{k}, {k}] = {tp} "
                    f"divided by everything predicted as '{Q4_NAME}' (column {k}).")
    if not close(r, exp_r):
        raise Wrong(f"recall is {r:.4f}, expected {exp_r:.4f}: true positives cm[{k}, {k}] = {tp} "
                    f"divided by all true '{Q4_NAME}' images (row {k}).")
    if close(f, (p + r) / 2) and not close(exp_f1, (p + r) / 2):
        raise Wrong(f"{f:.4f} is the arithmetic mean of precision and recall; F1 is the harmonic "
                    "mean 2·P·R / (P + R).")
    expect_close("f1", f, exp_f1, rel=1e-3)
    from sklearn.metrics import f1_score

    y_true = np.repeat(np.repeat(np.arange(10), 10), cm.ravel())
    y_pred = np.repeat(np.tile(np.arange(10), 10), cm.ravel())
    sk = f1_score(y_true, y_pred, labels=range(10), average=None, zero_division=0)[k]
    return f"precision {exp_p:.3f}, recall {exp_r:.3f}, F1 {exp_f1:.3f} — scikit-learn's f1_score agrees ({sk:.3f})."


q4 = Exercise(
    "ep04.q4", _check_q4,
    hint=f"Row {Q4_CLASS} of cm holds the true '{Q4_NAME}' images, column {Q4_CLASS} everything "
         f"predicted '{Q4_NAME}'; cm[{Q4_CLASS}, {Q4_CLASS}] are the true positives. F1 = 2PR/(P+R).",
    solution=SOLUTIONS,
)
