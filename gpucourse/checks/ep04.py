"""Checks for episode 4, *A Keras CNN on the GPU*.

* ``q1`` — ``conv2d_facts(input_shape, filters, kernel_size, padding)``: output shape and parameter
  count of a ``Conv2D`` layer, tried on several layers ('valid' and 'same', square or not).
* ``q2`` — ``cpu_reference(x)`` keeps a float64 computation on the CPU on purpose, whatever device
  the caller chose, and ``device_type(name)`` reads the kind of device from ``tensor.device``.
* ``q3`` — ``with_prefetch(ds)`` adds prefetching to a ``tf.data`` pipeline; the check inspects the
  pipelines it makes and times them itself, then looks at the learner's own timings.
* ``q4`` — ``precision_recall_f1(cm, k)``: one class's precision, recall and F1 from a confusion
  matrix, tried on several matrices and classes where precision and recall differ a lot.

Every check calls the learner's function on fixtures of its own, several of them, so that a
constant, or an answer right for one case only, cannot pass; it recomputes or measures what the
right result is rather than trusting numbers it is handed.

How ``q2`` sees placement on a machine without a GPU: it calls ``cpu_reference`` inside
``with tf.device(<GPU>)`` with soft placement switched off. On a GPU machine an operation that is
not pinned to the CPU runs on the GPU, and ``result.device`` says so; without a GPU the same
operation cannot be placed and TensorFlow raises, instead of silently falling back. A second call
makes ``tf.config.list_*_devices`` report a GPU, so that code which asks for "the GPU if there is
one" asks for it.

How ``q3`` measures: producer (30 ms per batch) and consumer (50 ms per step) both sleep, so the
result hardly depends on CPU load. Without prefetching the loop waits about 30 ms for every batch;
with it, about 0. The check compares the median wait per batch, which is 30 ms against < 1 ms by
design, with a threshold of 15 ms: load cannot flip a right answer, and the same pipeline timed
twice cannot pass.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import re
import statistics
import time
from unittest import mock

import numpy as np

from ..exercises import (
    Exercise,
    NotDone,
    Wrong,
    answer_deadline,
    as_number,
    describe,
    require_answer,
    require_function,
    solution_link,
)
from ..exercises import call_answer as _call
from ..exercises import mentions_blank as _mentions_blank

SOLUTIONS = solution_link("04-keras-cnn.ipynb")


# --- helpers ---------------------------------------------------------------------------



# --------------------------------------------------------------------------- q1

#: (input_shape without batch, filters, kernel_size, padding); the first is the prompt's layer.
Q1_LAYERS = [
    ((16, 16, 32), 48, 5, "valid"),
    ((32, 32, 3), 16, 3, "same"),
    ((28, 20, 8), 10, 3, "valid"),  # not square: height and width must not be swapped
    ((9, 13, 6), 4, 5, "same"),
    ((7, 7, 64), 128, 1, "valid"),  # a 1×1 convolution
]


def q1_expected(input_shape, filters, kernel, padding):
    """What Keras says: (output shape without batch, parameter count). Stride 1, square kernel."""
    h, w, c_in = input_shape
    if padding == "valid":
        out = (h - kernel + 1, w - kernel + 1, filters)
    else:
        out = (h, w, filters)
    return out, kernel * kernel * c_in * filters + filters


def _layer(input_shape, filters, kernel, padding) -> str:
    return f"Conv2D({filters}, kernel_size={kernel}, padding={padding!r}) on inputs of shape (batch, {', '.join(map(str, input_shape))})"


def _whole(name, value) -> int:
    if isinstance(value, (bool, str, bytes)):
        raise Wrong(f"{name} should be a whole number, got {type(value).__name__} {value!r}.")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    raise Wrong(f"{name} should be a whole number, got {describe(value)}.")


def _q1_shape_mistake(shape, layer) -> str | None:
    (h, w, c_in), filters, kernel, padding = layer
    expected, _ = q1_expected(*layer)
    if hasattr(shape, "as_list"):  # a tf.TensorShape
        shape = shape.as_list()
    if isinstance(shape, np.ndarray):
        shape = shape.tolist()
    if not isinstance(shape, (tuple, list)):
        return (f"the shape should be a tuple (height, width, channels), got {describe(shape)}.")
    shape = tuple(shape)
    if len(shape) == 4 and shape[0] is None:
        return "leave out the batch dimension (None): give (height, width, channels)."
    if len(shape) != 3:
        return f"the shape should have 3 numbers (height, width, channels), got {len(shape)}: {shape!r}."
    shape = tuple(_whole("each entry of the shape", s) for s in shape)
    if shape[:2] != expected[:2]:
        if padding == "valid" and shape[:2] == (h, w) and kernel > 1:
            return (f"height and width {h}×{w} are what padding='same' gives. With padding='valid' a "
                    f"{kernel}×{kernel} kernel fits at only {h} − {kernel} + 1 = {h - kernel + 1} positions "
                    f"down and {w} − {kernel} + 1 = {w - kernel + 1} across.")
        if padding == "same" and shape[:2] == (h - kernel + 1, w - kernel + 1):
            return (f"{shape[0]}×{shape[1]} is what padding='valid' gives. padding='same' pads the input "
                    f"so that the output keeps its height and width, {h}×{w}: does your function look at "
                    "`padding`?")
        if shape[:2] == (h - kernel, w - kernel):
            return (f"{shape[0]}×{shape[1]} is one short: a {kernel}×{kernel} kernel fits at "
                    f"in − kernel + 1 positions, {h - kernel + 1}×{w - kernel + 1}.")
        if h != w and shape[:2] == (expected[1], expected[0]):
            return (f"height and width are swapped: the input is {h} high and {w} wide, so the output is "
                    f"{expected[0]}×{expected[1]}, height first.")
        return (f"height and width should be {expected[0]}×{expected[1]}, not {shape[0]}×{shape[1]}: "
                f"with stride 1, padding='valid' gives in − kernel + 1, padding='same' gives in.")
    if shape[2] != filters:
        if shape[2] == c_in:
            return (f"the output does not keep the {c_in} input channels: each of the {filters} filters "
                    "makes one output channel.")
        return f"the output has one channel per filter: {filters}, not {shape[2]}."
    return None


def _q1_params_mistake(params, layer) -> str | None:
    (_, _, c_in), filters, kernel, _ = layer
    (out_h, out_w, _), expected = q1_expected(*layer)
    params = _whole("the parameter count", params)
    if params == expected:
        return None
    weights = kernel * kernel * c_in * filters
    if params == weights:
        return f"{params:,} counts the kernel weights only: add one bias per filter (+{filters})."
    if params == kernel * kernel * filters + filters:
        return (f"each filter spans all {c_in} input channels, so a filter has {kernel}×{kernel}×{c_in} "
                f"weights, not {kernel}×{kernel}.")
    if params == weights + c_in:
        return f"there is one bias per filter (+{filters}), not one per input channel (+{c_in})."
    if params in (expected * out_h * out_w, weights * out_h * out_w):
        return ("the same weights are used at every position of the image: the parameter count does "
                "not depend on the image size.")
    if kernel > 1 and params in (kernel * c_in * filters + filters, kernel * c_in * filters):
        return f"a {kernel}×{kernel} kernel has {kernel}×{kernel} = {kernel * kernel} weights per input channel, not {kernel}."
    return (f"the parameter count is {params:,}, expected {expected:,}: kernel_height × kernel_width × "
            "input_channels × filters weights, plus one bias per filter.")


def _check_q1(conv2d_facts):
    require_function(conv2d_facts, "conv2d_facts")
    answers = []
    for i, layer in enumerate(Q1_LAYERS):
        what = f"conv2d_facts({layer[0]}, {layer[1]}, {layer[2]}, {layer[3]!r})"
        result = _call(conv2d_facts, *layer, what=what)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Wrong(f"{what} should return two things, (shape, params); got {describe(result)}.")
        shape, params = require_answer(result[0], what), require_answer(result[1], what)
        mistake = _q1_shape_mistake(shape, layer) or _q1_params_mistake(params, layer)
        if mistake:
            where = f"For {_layer(*layer)}: "
            if any(_same(answer, (shape, params)) for answer in answers):
                raise Wrong(where + f"your function returns {shape!r}, {params!r}, the same as for another "
                            "layer: compute the answer from the arguments instead of writing it in.")
            raise Wrong(where + mistake)
        answers.append((shape, params))
    ((_, _, c_in), filters, kernel, _), (shape0, params0) = Q1_LAYERS[0], q1_expected(*Q1_LAYERS[0])
    return (f"right for all {len(Q1_LAYERS)} layers the check tried. For the prompt's layer: "
            f"{kernel}×{kernel}×{c_in}×{filters} + {filters} = {params0:,} parameters, output {shape0}; "
            "Keras agrees in the next cell.")


def _same(a, b) -> bool:
    try:
        return tuple(a[0]) == tuple(b[0]) and a[1] == b[1]
    except TypeError:
        return False


q1 = Exercise(
    "ep04.q1", _check_q1,
    hint="padding='valid' means no padding: the output is in − kernel + 1 high and wide; padding='same' "
         "keeps height and width. Each filter has a kernel_size × kernel_size kernel over all input "
         "channels, plus one bias; the output has one channel per filter.",
    solution=SOLUTIONS,
)


# --------------------------------------------------------------------------- q2

#: Device names and the kind of device in each (a few are GPUs, whatever this machine has).
Q2_NAMES = [
    ("/job:localhost/replica:0/task:0/device:GPU:0", "GPU"),
    ("/job:localhost/replica:0/task:0/device:CPU:0", "CPU"),
    ("/job:localhost/replica:0/task:0/device:GPU:1", "GPU"),
    ("/job:worker/replica:0/task:1/device:CPU:0", "CPU"),
    ("/device:GPU:3", "GPU"),
]
#: Shapes of the matrices x the check hands to cpu_reference.
Q2_SHAPES = [(6, 4), (3, 5), (5, 5)]


def _kind(name: str) -> str:
    import tensorflow as tf

    return (tf.DeviceSpec.from_string(name).device_type or "").upper()


@contextlib.contextmanager
def _strict_placement():
    """Soft placement off for the duration; the setting the caller had afterwards."""
    import tensorflow as tf

    before = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        yield
    finally:
        tf.config.set_soft_device_placement(before)


@contextlib.contextmanager
def _pretend_gpu():
    """``tf.config.list_{logical,physical}_devices`` report one GPU more than exists."""
    import tensorflow as tf

    real_logical, real_physical = tf.config.list_logical_devices, tf.config.list_physical_devices
    fake_logical = tf.config.LogicalDevice(name="/device:GPU:0", device_type="GPU")
    fake_physical = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")

    def logical(device_type=None):
        devices = list(real_logical(device_type))
        return devices + ([fake_logical] if device_type in (None, "GPU") else [])

    def physical(device_type=None):
        devices = list(real_physical(device_type))
        return devices + ([fake_physical] if device_type in (None, "GPU") else [])

    with contextlib.ExitStack() as stack:
        for module in {tf.config, tf.config.experimental}:
            if getattr(module, "list_logical_devices", None) is real_logical:
                stack.enter_context(mock.patch.object(module, "list_logical_devices", logical))
            if getattr(module, "list_physical_devices", None) is real_physical:
                stack.enter_context(mock.patch.object(module, "list_physical_devices", physical))
        yield


def _placement_error(exc) -> tuple[str, str] | None:
    """(what TensorFlow could not place, and where), or None if the error is not about placement."""
    text = str(exc)
    match = re.search(r"Could not satisfy device specification '([^']*)'", text)
    if not match:
        return None
    op = re.search(r"\[Op:(\w+)\]", text)
    return f"TensorFlow could not place {op.group(1) if op else 'an operation'} on {match.group(1)}", match.group(1)


def _q2_run(cpu_reference, x, what: str, *, outer: str | None):
    """Call ``cpu_reference(x)`` with soft placement off, inside ``tf.device(outer)`` if given."""
    import tensorflow as tf

    with _strict_placement():
        try:
            with answer_deadline(what):
                if outer is None:
                    result = cpu_reference(x)
                else:
                    with tf.device(outer):
                        result = cpu_reference(x)
        except (NotDone, Wrong):
            raise
        except Exception as exc:
            if _mentions_blank(exc):
                raise NotDone(f"{what} still uses ____: replace it with your code.") from None
            placement = _placement_error(exc)
            if placement:
                return None, placement
            raise Wrong(f"{what} raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}.") from None
        if tf.config.get_soft_device_placement():
            raise Wrong(f"{what} switches soft placement back on: then a request TensorFlow cannot meet falls "
                        "back silently. Leave the setting alone; pin your work with `with tf.device(...)`.")
    return require_answer(result, what), None


def _q2_unpinned_ops(cpu_reference, x: np.ndarray, outer: str) -> list[str]:
    """The operations of ``cpu_reference`` that request no device, read from its graph.

    Without a GPU, work that requests no device lands on the CPU anyway, so the result's device
    cannot tell ``tf.device(None)`` (which clears the caller's scope) from a scope that names the
    CPU. Traced into a graph, each operation keeps the device it requested: '' when none. An answer
    that cannot be traced (it calls .numpy(), say) is judged by its eager runs alone.
    """
    import tensorflow as tf

    try:
        with answer_deadline("cpu_reference(x)"), tf.device(outer):
            graph = tf.function(cpu_reference, autograph=False).get_concrete_function(
                tf.TensorSpec(x.shape, tf.float32)).graph
    except (NotDone, Wrong):
        raise
    except Exception:
        return []
    plumbing = {"Placeholder", "Identity", "NoOp", "IdentityN"}
    ops = [op for op in graph.get_operations() if op.type not in plumbing]
    if not ops or any(_kind(op.device) not in ("", "CPU") for op in ops if op.device):
        return []                          # the eager runs judge placement on other devices
    return sorted({op.type for op in ops if not op.device})


def _q2_result_mistake(result, x: np.ndarray, what: str) -> str | None:
    import tensorflow as tf

    n, m = x.shape
    if isinstance(result, np.ndarray):
        return (f"{what} returns a NumPy array: return the tensor itself, whose .device records where it "
                "was computed (.numpy() forgets that).")
    if not isinstance(result, tf.Tensor) or not isinstance(getattr(result, "device", None), str):
        return f"{what} should return a tf.Tensor, got {describe(result)}."
    kind = _kind(result.device)
    if kind != "CPU":
        return (f"{what} was computed on {result.device}, the device the caller chose, not on the CPU. "
                "Put all of its work inside `with tf.device(<the CPU>):`.")
    shape = tuple(result.shape)
    if shape != (n, n):
        if shape == (m, m) and m != n:
            return (f"for x of shape {x.shape}, {what} has shape {shape}: that is xᵀ @ x. The exercise asks "
                    f"for x @ xᵀ, shape ({n}, {n}).")
        return (f"for x of shape {x.shape}, {what} has shape {shape}, expected ({n}, {n}) = x @ xᵀ: "
                "compute it from the argument x.")
    if result.dtype != tf.float64:
        if result.dtype == tf.float32:
            return (f"{what} is float32: the reference should be float64. Cast x to tf.float64 first "
                    "(inside the CPU scope), then multiply.")
        return f"{what} has dtype {result.dtype.name}, expected float64."
    got = result.numpy()
    x64 = x.astype(np.float64)
    expected = x64 @ x64.T
    if np.allclose(got, expected, rtol=1e-10, atol=1e-12):
        return None
    in32 = (x @ x.T).astype(np.float64)
    if np.allclose(got, in32, rtol=1e-12, atol=1e-12):
        return (f"{what} was multiplied in float32 and cast to float64 afterwards: that keeps float32's "
                "rounding. Cast x to float64 first, then multiply.")
    return f"{what} does not hold x @ xᵀ for the x the check passed: compute it from the argument x."


def _check_device_type(device_type, extra_names) -> None:
    names = Q2_NAMES + [(name, _kind(name)) for name in extra_names]
    answers = []
    for name, expected in names:
        what = f"device_type({name!r})"
        got = _call(device_type, name, what=what)
        answers.append((name, expected, got, what))
    for name, expected, got, what in answers:
        if isinstance(got, str) and got.upper() == expected:
            continue
        if isinstance(got, bool):
            raise Wrong(f"{what} returned {got}: return the kind of device, 'CPU' or 'GPU', not True/False.")
        if not isinstance(got, str):
            if hasattr(got, "device_type"):
                raise Wrong(f"{what} returned a {type(got).__name__}: return its .device_type, the text 'CPU' or 'GPU'.")
            raise Wrong(f"{what} should return the text 'CPU' or 'GPU', got {describe(got)}.")
        if got.upper().startswith(expected + ":") or "/" in got or "device:" in got.lower():
            raise Wrong(f"{what} returned {got!r}: return only the kind of device, {expected!r}, "
                        "without job, task or index.")
        if len({a[2] for a in answers if isinstance(a[2], str)}) == 1:
            raise Wrong(f"device_type returns {got!r} for every name, but {name!r} names a {expected}: "
                        "read the kind from the name it is given, not from this machine.")
        raise Wrong(f"{what} returned {got!r}, expected {expected!r}: the kind of device follows 'device:' in the name.")


def _check_q2(cpu_reference, device_type):
    import tensorflow as tf

    require_function(cpu_reference, "cpu_reference")
    require_function(device_type, "device_type")
    gpus = tf.config.list_logical_devices("GPU")
    outer = gpus[0].name if gpus else "/device:GPU:0"
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(shape).astype(np.float32) for shape in Q2_SHAPES]
    results = []
    for x in xs:
        what = f"cpu_reference(x) for x of shape {x.shape}"
        result, placement = _q2_run(cpu_reference, tf.constant(x), what, outer=outer)
        if placement and _kind(placement[1]) == "CPU":
            raise Wrong(f"cpu_reference(x) asks for {placement[1]}, which does not exist here ({placement[0]}): "
                        "choose the CPU from what exists, tf.config.list_logical_devices('CPU')[0].name.")
        if placement:
            raise Wrong(f"the check called cpu_reference(x) inside `with tf.device('{outer}')`, as a GPU "
                        f"machine would by default, with soft placement off: {placement[0]}. Some of its work is "
                        "not pinned to the CPU. Put everything it computes, the cast too, inside "
                        "`with tf.device(<the CPU>):`.")
        mistake = _q2_result_mistake(result, x, "cpu_reference(x)")
        if mistake:
            raise Wrong(mistake)
        results.append(result)
    unpinned = _q2_unpinned_ops(cpu_reference, xs[0], outer)
    if unpinned:
        raise Wrong(f"cpu_reference's {', '.join(unpinned)} asked for no device at all: `with tf.device(None):` (or "
                    "tf.device('')) clears the caller's device scope instead of naming the CPU, so on a GPU machine "
                    "TensorFlow puts that work on the GPU. Name the CPU: "
                    "`with tf.device(tf.config.list_logical_devices('CPU')[0].name):`.")
    if not gpus:
        with _pretend_gpu():
            result, placement = _q2_run(cpu_reference, tf.constant(xs[0]), "cpu_reference(x)", outer=None)
        if placement:
            raise Wrong("when TensorFlow lists a GPU, your cpu_reference asks for it "
                        f"({placement[0]}; the check made tf.config.list_logical_devices report one). The "
                        "exercise wants the CPU whatever exists: name the CPU, e.g. "
                        "tf.config.list_logical_devices('CPU')[0].name.")
        mistake = _q2_result_mistake(result, xs[0], "cpu_reference(x)")
        if mistake:
            raise Wrong("when TensorFlow lists a GPU, " + mistake)
    _check_device_type(device_type, [results[0].device])
    return (f"cpu_reference ran on {results[0].device} even inside `with tf.device('{outer}')` with soft "
            "placement off, and device_type reads the kind of device from any name.")


q2 = Exercise(
    "ep04.q2", _check_q2,
    hint="A `with tf.device(...)` scope inside the function overrides the caller's: name the CPU there, "
         "e.g. tf.config.list_logical_devices('CPU')[0].name, and do the cast and the product inside it. "
         "tf.DeviceSpec.from_string(name).device_type is the kind of device in a name.",
    solution=SOLUTIONS,
)


# --------------------------------------------------------------------------- q3

#: The notebook's slow_ds: Q3_BATCHES batches of Q3_PREP_S seconds each; time_pipeline's step: Q3_STEP_S.
Q3_BATCHES, Q3_PREP_S, Q3_STEP_S = 12, 0.03, 0.05
#: Shortest possible times, in seconds: nothing overlaps without prefetching, everything but the
#: first batch's preparation overlaps with it (time.sleep never returns early).
Q3_MIN_SLOW = Q3_BATCHES * (Q3_PREP_S + Q3_STEP_S)
Q3_MIN_FAST = Q3_PREP_S + Q3_BATCHES * Q3_STEP_S


def _no_auto_prefetch(ds):
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


def q3_slow_pipeline(batches: int = Q3_BATCHES, prep_s: float = Q3_PREP_S):
    """Like the notebook's slow_ds: each of ``batches`` elements takes ``prep_s`` seconds to make."""
    import tensorflow as tf

    def prep(i):
        time.sleep(prep_s)
        return i

    ds = tf.data.Dataset.range(batches).map(lambda i: tf.py_function(prep, [i], tf.int64))
    return _no_auto_prefetch(ds)


def _q3_batches():
    """A quick pipeline of (images, labels) batches, the last one short."""
    import tensorflow as tf

    images = np.arange(10 * 2 * 2 * 3, dtype=np.uint8).reshape(10, 2, 2, 3)
    labels = np.arange(10, dtype=np.int64) % 4
    return _no_auto_prefetch(tf.data.Dataset.from_tensor_slices((images, labels)).batch(4))


def _chain(ds):
    """The dataset and the ones it reads from, outermost first."""
    seen = []
    while ds is not None and len(seen) < 50:
        seen.append(ds)
        ds = getattr(ds, "_input_dataset", None)
    return seen


def _is_prefetch(ds) -> bool:
    return "prefetch" in type(ds).__name__.lower()


def _step_name(ds) -> str:
    name = type(ds).__name__.strip("_")
    return name[:-len("Dataset")] if name.endswith("Dataset") and name != "Dataset" else name


def _buffer(ds):
    try:
        return int(ds._buffer_size)
    except Exception:
        return None


def _q3_structure(with_prefetch, ds, label: str):
    """``with_prefetch(ds)``, if it adds a prefetch at the end and nothing else; else ``Wrong``."""
    import tensorflow as tf

    what = f"with_prefetch({label})"
    out = _call(with_prefetch, ds, what=what)
    if not isinstance(out, tf.data.Dataset):
        raise Wrong(f"{what} should return a tf.data.Dataset, got {describe(out)}.")
    if out is ds:
        raise Wrong(f"{what} returns its input unchanged: return ds.prefetch(tf.data.AUTOTUNE).")
    chain = _chain(out)
    if not any(d is ds for d in chain):
        raise Wrong(f"{what} returns a dataset that is not built on the ds it was given: does your function "
                    "use the notebook's slow_ds instead of its argument? Return ds.prefetch(...).")
    added = chain[:next(i for i, d in enumerate(chain) if d is ds)]
    prefetches = [d for d in added if _is_prefetch(d)]
    if not _is_prefetch(out):
        after = [_step_name(d) for d in added[:next((i for i, d in enumerate(added) if _is_prefetch(d)), len(added))]]
        if prefetches:
            raise Wrong(f"{what} prefetches, but not as its last step: after it comes {', '.join(after)}. Put "
                        ".prefetch(...) at the very end, so that it overlaps everything before it with the "
                        "training step.")
        inject = out.options().experimental_optimization.inject_prefetch
        if inject:
            raise Wrong(f"{what} switches TensorFlow's automatic prefetch (inject_prefetch) back on instead of "
                        "adding a prefetch step: write .prefetch(tf.data.AUTOTUNE) at the end, which works "
                        "whatever the options say.")
        raise Wrong(f"{what} has no prefetch step (it adds {', '.join(after) or 'nothing'}): return "
                    "ds.prefetch(tf.data.AUTOTUNE).")
    others = [_step_name(d) for d in added if not _is_prefetch(d)]
    if others:
        raise Wrong(f"between ds and the prefetch, {what} adds {', '.join(others)}: add only .prefetch(...), "
                    "change nothing else.")
    if all(_buffer(d) == 0 for d in prefetches):
        raise Wrong(f"{what} ends in prefetch(0), which keeps no batch ready: use tf.data.AUTOTUNE (or at least 1).")
    if out.element_spec != ds.element_spec or int(out.cardinality()) != int(ds.cardinality()):
        raise Wrong(f"{what} changes the elements: only add prefetching, change nothing else.")
    return out


def _q3_time(ds, batches: int, what: str):
    """Iterate ``ds`` like a training loop: (seconds, wait for each batch, values)."""
    waits, values = [], []
    try:
        iterator = iter(ds)
        start = time.perf_counter()
        for _ in range(batches):
            ask = time.perf_counter()
            value = next(iterator)
            waits.append(time.perf_counter() - ask)
            values.append(int(value))
            time.sleep(Q3_STEP_S)
        total = time.perf_counter() - start
    except (NotDone, Wrong):
        raise
    except StopIteration:
        raise Wrong(f"{what} ended after {len(values)} of {batches} batches: change nothing but the prefetch.") from None
    except Exception as exc:
        raise Wrong(f"iterating over {what} raised {type(exc).__name__}: {exc}.") from None
    return total, waits, values


def _q3_numbers(t_slow, t_fast):
    """The learner's timings, if they can be what time_pipeline returned; else ``Wrong``."""
    t_slow, t_fast = as_number("t_slow", t_slow), as_number("t_fast", t_fast)
    for name, t, low in (("t_slow", t_slow, Q3_MIN_SLOW), ("t_fast", t_fast, Q3_MIN_FAST)):
        if t <= 0:
            raise Wrong(f"{name} is {t:g}: it should be the seconds time_pipeline returned, a positive number.")
        if t > 30 * low:
            unit = " That looks like milliseconds: time_pipeline returns seconds." if t / 1000 < 30 * low else ""
            raise Wrong(f"{name} is {t:g}, but one pass takes about a second.{unit} Pass what time_pipeline "
                        "returned, unchanged.")
    # Swapped: the "slow" number is one only a prefetching pipeline can reach, the "fast" one is not.
    if t_fast > t_slow and 0.97 * Q3_MIN_FAST <= t_slow < 0.97 * Q3_MIN_SLOW <= t_fast:
        raise Wrong(f"t_fast ({t_fast:.2f} s) is longer than t_slow ({t_slow:.2f} s): swapped? "
                    "t_slow = time_pipeline(slow_ds), t_fast = time_pipeline(with_prefetch(slow_ds)).")
    if t_slow < 0.97 * Q3_MIN_SLOW:
        raise Wrong(f"t_slow is {t_slow:.2f} s, but {Q3_BATCHES} batches × ({Q3_PREP_S * 1000:.0f} ms + "
                    f"{Q3_STEP_S * 1000:.0f} ms) cannot take less than {Q3_MIN_SLOW:.2f} s without prefetching. "
                    "Did slow_ds prefetch already (did you switch TensorFlow's inject_prefetch back on, or "
                    "change slow_ds), or did you time the fast pipeline? Time slow_ds as given.")
    if t_fast < 0.97 * Q3_MIN_FAST:
        raise Wrong(f"t_fast is {t_fast:.2f} s, but {Q3_BATCHES} training steps of {Q3_STEP_S * 1000:.0f} ms "
                    f"after a first batch of {Q3_PREP_S * 1000:.0f} ms cannot take less than {Q3_MIN_FAST:.2f} s. "
                    "Pass what time_pipeline(with_prefetch(slow_ds)) returned.")
    if t_fast > 0.85 * t_slow:
        raise Wrong(f"your timings show (almost) no gain: {t_slow:.2f} s → {t_fast:.2f} s. Did you time slow_ds "
                    "twice? t_fast = time_pipeline(with_prefetch(slow_ds)). (If the machine was busy while you "
                    "timed, run the timing cell again.)")
    return t_slow, t_fast


def _check_q3(with_prefetch, t_slow, t_fast):
    require_function(with_prefetch, "with_prefetch")
    _q3_structure(with_prefetch, _q3_batches(), "a dataset of (images, labels) batches")
    slow = q3_slow_pipeline()
    fast = _q3_structure(with_prefetch, slow, "a copy of slow_ds")
    t_slow, t_fast = _q3_numbers(t_slow, t_fast)
    # Measure: the pipeline as given, then with the learner's prefetch. Producer and consumer sleep,
    # so CPU load hardly matters; the wait per batch is ~30 ms against ~0 ms by design.
    total_slow, waits_slow, _ = _q3_time(q3_slow_pipeline(), Q3_BATCHES, "slow_ds")
    with answer_deadline("iterating over with_prefetch(slow_ds)"):
        total_fast, waits_fast, values = _q3_time(fast, Q3_BATCHES, "with_prefetch(slow_ds)")
    if values != list(range(Q3_BATCHES)):
        raise Wrong(f"with_prefetch(slow_ds) yields {values}, slow_ds yields {list(range(Q3_BATCHES))}: "
                    "change nothing but the prefetch.")
    wait_slow, wait_fast = statistics.median(waits_slow[1:]), statistics.median(waits_fast[1:])
    if wait_fast > 0.5 * Q3_PREP_S:
        raise Wrong(f"when the check times with_prefetch(slow_ds), the loop still waits {wait_fast * 1000:.0f} ms "
                    f"for each batch ({wait_slow * 1000:.0f} ms without prefetching): nothing is prepared "
                    "ahead. Return ds.prefetch(tf.data.AUTOTUNE).")
    for name, yours, measured in (("t_slow", t_slow, total_slow), ("t_fast", t_fast, total_fast)):
        if yours > max(1.5 * measured, measured + 0.5):
            raise Wrong(f"{name} is {yours:.2f} s, but the same pipeline takes {measured:.2f} s when the check "
                        "times it: pass the seconds time_pipeline returned, unchanged.")
    return (f"with_prefetch adds a prefetch at the end and changes nothing else. Timed by the check: "
            f"{total_slow:.2f} s → {total_fast:.2f} s ({total_slow / total_fast:.1f}× faster); the loop waited "
            f"{wait_slow * 1000:.0f} ms for each batch without prefetching and {wait_fast * 1000:.1f} ms with it "
            f"(yours: {t_slow:.2f} s → {t_fast:.2f} s). While the loop 'trains', the pipeline prepares the "
            "next batch.")


q3 = Exercise(
    "ep04.q3", _check_q3,
    hint="Every tf.data.Dataset has a .prefetch(buffer_size) method that returns a new dataset; "
         "tf.data.AUTOTUNE lets TensorFlow choose the buffer. Time slow_ds and with_prefetch(slow_ds) with "
         "time_pipeline and pass its seconds unchanged.",
    solution=SOLUTIONS,
)


# --------------------------------------------------------------------------- q4

def _q4_fixtures():
    """(confusion matrix, class) pairs where precision and recall differ a lot."""
    rng = np.random.default_rng(40)
    big = rng.integers(0, 5, (10, 10))
    big[np.diag_indices(10)] = rng.integers(25, 40, 10)
    big[3, 5] += 45   # many cats taken for dogs: recall of "cat" is low
    big[:, 7] += rng.integers(4, 9, 10)  # many things taken for horses: precision of "horse" is low
    small = np.array([[9, 1, 20],
                      [0, 30, 5],
                      [1, 4, 30]])
    four = np.array([[20, 10, 0, 2],
                     [1, 12, 1, 0],
                     [3, 15, 25, 1],
                     [0, 8, 2, 30]])
    return [(big, 3), (big, 7), (small, 0), (four, 1), (small, 2)]


def q4_expected(cm, k):
    """(precision, recall, F1) of class ``k``: rows of ``cm`` are true classes, columns predictions."""
    cm = np.asarray(cm, dtype=float)
    p = cm[k, k] / cm[:, k].sum()
    r = cm[k, k] / cm[k, :].sum()
    return p, r, 2 * p * r / (p + r)


def _close4(a, b) -> bool:
    return abs(a - b) <= 6e-4  # three decimals are enough


def _q4_number(name, value, where):
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        raise Wrong(f"{where}{name} is an array of {value.size} values (one per class?): return the number for "
                    "class k only.")
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isnan(float(value)):
        raise Wrong(f"{where}{name} is nan: did you divide by zero (0/0)?")
    x = as_number(name, value)
    if 1 < x <= 100:
        raise Wrong(f"{where}{name} is {x:g}: give a fraction between 0 and 1, not a percentage.")
    if not 0 <= x <= 1:
        raise Wrong(f"{where}{name} is {x:g}, but it must lie between 0 and 1.")
    return x


def _q4_matrix(cm):
    arr = np.asarray(cm) if not isinstance(cm, (str, bytes)) else None
    if arr is None or arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] < 2 \
            or not np.issubdtype(arr.dtype, np.number) or (arr < 0).any():
        raise Wrong(f"cm should be the notebook's confusion matrix (a square array of counts), got {describe(cm)}.")
    return arr


def _q4_mistake(cm, k, p, r, f, notebook_cm) -> str | None:
    n = cm.shape[0]
    P, R, F = q4_expected(cm, k)
    tp, col, row, total = cm[k, k], cm[:, k].sum(), cm[k, :].sum(), cm.sum()
    if k != 3 and n > 3 and _close4(p, q4_expected(cm, 3)[0]) and _close4(r, q4_expected(cm, 3)[1]):
        return (f"these are the numbers of class 3 ('cat'), but the check asked for class k = {k}: does your "
                "function use 3, or numbers typed in, instead of its argument k?")
    if notebook_cm is not None and notebook_cm.shape[0] > k and not (_close4(p, P) and _close4(r, R)):
        nb = q4_expected(notebook_cm, k)
        if _close4(p, nb[0]) and _close4(r, nb[1]):
            return ("these are the numbers of the notebook's cm, not of the matrix the function was given: "
                    "compute from the argument cm.")
    if _close4(p, R) and _close4(r, P):
        return ("precision and recall are swapped. Rows of cm are true classes, columns are predictions: "
                f"precision divides by column {k} (all predicted as class {k}), recall by row {k} (all truly class {k}).")
    if not _close4(p, P):
        if _close4(p, np.trace(cm) / total):
            return f"that precision is the overall accuracy; use only column {k}: cm[{k}, {k}] / cm[:, {k}].sum()."
        if _close4(p, tp / total):
            return (f"precision divides by all {total} images; it divides by column {k} only, everything "
                    f"predicted as class {k}: cm[{k}, {k}] / cm[:, {k}].sum().")
        if _close4(p, R):
            return (f"precision divides by row {k} like recall; it divides by column {k}, everything predicted "
                    f"as class {k}: cm[{k}, {k}] / cm[:, {k}].sum().")
        if p == 0 and P > 0:
            return "precision is 0: integer division (//)? Use / ."
        return (f"precision is {p:.4f}, expected cm[{k}, {k}] / column {k} = {tp} / {col} = {P:.4f}: true positives "
                f"divided by everything predicted as class {k}.")
    if not _close4(r, R):
        if _close4(r, P):
            return (f"recall divides by column {k} like precision; it divides by row {k}, all images of class "
                    f"{k}: cm[{k}, {k}] / cm[{k}, :].sum().")
        if _close4(r, tp / total):
            return f"recall divides by all {total} images; it divides by row {k} only: cm[{k}, {k}] / cm[{k}, :].sum()."
        if r == 0 and R > 0:
            return "recall is 0: integer division (//)? Use / ."
        return (f"recall is {r:.4f}, expected cm[{k}, {k}] / row {k} = {tp} / {row} = {R:.4f}: true positives "
                f"divided by all images of class {k}.")
    if not _close4(f, F):
        if _close4(f, (P + R) / 2):
            return (f"F1 {f:.4f} is the arithmetic mean (P + R) / 2 of precision {P:.3f} and recall {R:.3f}; F1 is "
                    f"their harmonic mean 2·P·R / (P + R) = {F:.4f}, pulled towards the smaller one.")
        if _close4(f, math.sqrt(P * R)):
            return f"F1 {f:.4f} is the geometric mean √(P·R); F1 is the harmonic mean 2·P·R / (P + R) = {F:.4f}."
        if _close4(f, P * R / (P + R)):
            return f"F1 {f:.4f} is P·R / (P + R): the factor 2 is missing, F1 = 2·P·R / (P + R) = {F:.4f}."
        return f"F1 is {f:.4f}, expected 2·P·R / (P + R) = {F:.4f}."
    return None


def _check_q4(precision_recall_f1, cm):
    require_function(precision_recall_f1, "precision_recall_f1")
    notebook_cm = _q4_matrix(cm)
    fixtures = _q4_fixtures()
    answers = []
    for m, k in fixtures:
        what = f"precision_recall_f1(cm, {k}) for a {m.shape[0]}×{m.shape[0]} matrix"
        given = m.copy()
        result = _call(precision_recall_f1, given, k, what=what,
                       explain=lambda exc, what=what, size=m.shape[0]: (
                           f"{what} raised {type(exc).__name__}: {exc}. Does your function assume 10 classes? A "
                           "confusion matrix has one row and one column per class, however many there are.")
                       if isinstance(exc, IndexError) and size < 10 else None)
        if not np.array_equal(given, m):
            raise Wrong(f"{what} changed the matrix cm it was given, in place: the notebook's confusion matrix would "
                        "be wrong for every later cell. Compute from cm without assigning into it (cm / total makes a "
                        "new array; cm /= total does not).")
        if isinstance(result, np.ndarray) and result.shape == (3,):
            result = tuple(result)
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise Wrong(f"{what} should return three numbers, (precision, recall, f1); got {describe(result)}.")
        for v in result:
            require_answer(v, what)
        where = f"For class {k} of {_matrix_text(m)}: "
        p, r, f = (_q4_number(name, v, where) for name, v in zip(("precision", "recall", "f1"), result))
        mistake = _q4_mistake(m, k, p, r, f, notebook_cm)
        if mistake:
            if "class 3 ('cat')" not in mistake and answers and all(np.allclose(a, (p, r, f)) for a in answers):
                raise Wrong(where + f"your function returns {p:.4f}, {r:.4f}, {f:.4f} whatever matrix and class "
                            "it is given: compute from its arguments cm and k.")
            raise Wrong(where + mistake)
        answers.append((p, r, f))
    k = 3 if notebook_cm.shape[0] > 3 else 0
    P, R, F = q4_expected(notebook_cm, k)
    (_, k0), (p0, r0, f0) = fixtures[0], answers[0]
    return (f"right for all {len(fixtures)} matrices and classes the check tried. In your cm, class {k}: "
            f"precision {P:.3f}, recall {R:.3f}, F1 {F:.3f}. When precision and recall differ, the harmonic mean "
            f"stays near the smaller: for class {k0} of the check's first matrix, P = {p0:.3f} and R = {r0:.3f} "
            f"give F1 = {f0:.3f}, where the arithmetic mean would be {(p0 + r0) / 2:.3f}.")


def _matrix_text(m) -> str:
    if m.shape[0] <= 4:
        return "cm = " + np.array2string(m, separator=", ").replace("\n", "")
    return f"a {m.shape[0]}×{m.shape[0]} matrix of the check's"


q4 = Exercise(
    "ep04.q4", _check_q4,
    hint="Row k of cm holds the images of class k, column k everything predicted as class k; cm[k, k] are "
         "the true positives. precision = cm[k, k] / cm[:, k].sum(), recall = cm[k, k] / cm[k, :].sum(), "
         "F1 = 2PR/(P+R).",
    solution=SOLUTIONS,
)
