"""Checks for episode 4, *A Keras CNN on the GPU*.

* ``q1`` — ``conv2d_facts(input_shape, filters, kernel_size, padding)``: output shape and parameter
  count of a ``Conv2D`` layer, tried on several layers ('valid' and 'same', square or not).
* ``q2`` — ``cpu_reference(x)`` keeps a float64 computation on the CPU on purpose, whatever device
  the caller chose, and ``device_type(name)`` reads the kind of device from ``tensor.device``.
* ``q3`` — ``epoch_seconds(n_batches, prep_s, step_s, prefetch)`` predicts an epoch's time with and
  without prefetching, on training-bound and input-bound cases; then the learner's prediction for the
  notebook's pipeline is set beside their own measurement (no verdict depends on the measurement).
* ``q4`` — ``precision_recall_f1(cm, k)``: one class's precision, recall and F1 from a confusion
  matrix, tried on several matrices and classes where precision and recall differ a lot.

Every check calls the learner's function on fixtures of its own, several of them, so that a
constant, or an answer right for one case only, cannot pass; it recomputes what the right result
is rather than trusting numbers it is handed.

``q2`` follows Keras's backend (``keras.backend.backend()`` of the Keras the notebook imported).
On PyTorch it calls ``cpu_reference`` inside ``keras.device(<a GPU>)``: ``cuda:0`` where one exists,
with ``x`` on it; elsewhere PyTorch's ``meta`` device, which holds shapes but no data, stands in for
the GPU, so that work Keras places by its current device lands there and shows in
``result.device``. Without a GPU two more calls follow: one while ``torch.cuda.is_available()``
says True (code that asks for "the GPU if there is one" asks for it), and one with ``x`` itself on
``meta``, judged by ``result.device`` alone: work that follows ``x`` (``x.double()``, Keras's
``cast``, which changes only the dtype) comes back on ``meta``, and torch's "Cannot copy out of meta
tensor" shows that the answer copied ``x`` to the CPU itself.

How ``q2`` sees placement on TensorFlow on a machine without a GPU: it calls ``cpu_reference`` inside
``with tf.device(<GPU>)`` with soft placement switched off. On a GPU machine an operation that is
not pinned to the CPU runs on the GPU, and ``result.device`` says so; without a GPU the same
operation cannot be placed and TensorFlow raises, instead of silently falling back. A second call
makes ``tf.config.list_*_devices`` report a GPU, so that code which asks for "the GPU if there is
one" asks for it.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import re
import time
from unittest import mock

import numpy as np

from ..exercises import error_message
from ..exercises import (
    Exercise,
    NotDone,
    Wrong,
    answer_deadline,
    as_number,
    describe,
    is_blank,
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
    if any(isinstance(s, numbers.Real) and not isinstance(s, numbers.Integral) for s in shape):
        return (f"the shape {shape!r} holds floats: `/` gives a float even where it divides exactly, and a "
                "shape is whole numbers (np.zeros refuses floats). Use whole-number arithmetic, or `//`.")
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
    hint=("How many positions does a kernel of width k have along a row of n pixels when it may not step "
          "over the edge, and what does padding 'same' add to keep that number? How many numbers does ONE "
          "filter hold?",
          "For 'valid', slide the kernel: the count of positions along each axis is the size minus the kernel "
          "plus one; 'same' keeps height and width. The channels out are the filters. Each filter spans the "
          "kernel's height and width across every input channel, and has one bias."),
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
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

    return (tf.DeviceSpec.from_string(name).device_type or "").upper()


@contextlib.contextmanager
def _strict_placement():
    """Soft placement off for the duration; the setting the caller had afterwards."""
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

    before = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        yield
    finally:
        tf.config.set_soft_device_placement(before)


@contextlib.contextmanager
def _pretend_gpu():
    """``tf.config.list_{logical,physical}_devices`` report one GPU more than exists."""
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

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
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

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
            raise Wrong(error_message(what, exc)) from None
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
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

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


def _rounded_in_float32(got: np.ndarray, x: np.ndarray) -> bool:
    """Whether ``got`` is x @ xᵀ multiplied in float32 (then cast), by whatever library computed it.

    The candidate is recomputed with TensorFlow on the CPU, as the learner multiplied, but two
    libraries (or two builds of one BLAS) sum in different orders and need not agree to the bit.
    So ``got`` may differ from it by what float32 rounding allows any order of summation: the
    standard bound, k·u·(|x| @ |x|ᵀ) for a sum of k products with u = 2⁻²⁴, twice over (ours and
    theirs). That is 10⁻⁷ of the size, while a right float64 product (judged before) is within
    10⁻¹⁰ and a float16 or bfloat16 one is off by 10⁻³: the bound separates every candidate.
    """
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

    with tf.device(tf.config.list_logical_devices("CPU")[0].name):
        x32 = tf.constant(x, dtype=tf.float32)
        in32 = tf.cast(tf.matmul(x32, x32, transpose_b=True), tf.float64).numpy()
    size = np.abs(x).astype(np.float64)
    bound = 2 * (x.shape[1] + 1) * 2.0 ** -24 * (size @ size.T)
    return bool(np.all(np.abs(got - in32) <= bound))


def _q2_shape_dtype_mistake(shape, dtype: str, x: np.ndarray, what: str) -> str | None:
    """The result's shape and dtype, judged the same way on either backend."""
    n, m = x.shape
    if shape != (n, n):
        if shape == (m, m) and m != n:
            return (f"for x of shape {x.shape}, {what} has shape {shape}: that is xᵀ @ x. The exercise asks "
                    f"for x @ xᵀ, shape ({n}, {n}).")
        return (f"for x of shape {x.shape}, {what} has shape {shape}, expected ({n}, {n}) = x @ xᵀ: "
                "compute it from the argument x.")
    if dtype == "float32":
        return (f"{what} is float32: the reference should be float64. Cast x to float64 first "
                "(inside the CPU scope), then multiply.")
    if dtype != "float64":
        return f"{what} has dtype {dtype}, expected float64."
    return None


def _q2_result_mistake(result, x: np.ndarray, what: str) -> str | None:
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

    if isinstance(result, np.ndarray):
        return (f"{what} returns a NumPy array: return the tensor itself, whose .device records where it "
                "was computed (.numpy() forgets that).")
    if not isinstance(result, tf.Tensor) or not isinstance(getattr(result, "device", None), str):
        return f"{what} should return a tf.Tensor, got {describe(result)}."
    kind = _kind(result.device)
    if kind != "CPU":
        return (f"{what} was computed on {result.device}, the device the caller chose, not on the CPU. "
                "Put all of its work inside `with tf.device(<the CPU>):`.")
    mistake = _q2_shape_dtype_mistake(tuple(result.shape), result.dtype.name, x, what)
    if mistake:
        return mistake
    got = result.numpy()
    x64 = x.astype(np.float64)
    expected = x64 @ x64.T
    if np.allclose(got, expected, rtol=1e-10, atol=1e-12):
        return None
    if _rounded_in_float32(got, x):
        return (f"{what} was multiplied in float32 and cast to float64 afterwards: that keeps float32's "
                "rounding. Cast x to float64 first, then multiply.")
    return f"{what} does not hold x @ xᵀ for the x the check passed: compute it from the argument x."


#: torch's device names and the kind of device in each.
Q2_TORCH_NAMES = [("cuda:0", "GPU"), ("cpu", "CPU"), ("cuda:1", "GPU"), ("cuda", "GPU")]


def _check_device_type(device_type, extra_names) -> None:
    """Both backends' names, whichever backend runs: the prompt asks for both."""
    names = Q2_NAMES + Q2_TORCH_NAMES + list(extra_names)
    answers = []
    for name, expected in names:
        what = f"device_type({str(name)!r})"
        torch_name = "device:" not in str(name)
        got = _call(device_type, name, what=what, explain=lambda exc, what=what, torch_name=torch_name: (
            f"{what} raised {type(exc).__name__}: {' '.join(str(exc).split())[:160].rstrip('.')}. "
            + ("A torch name such as 'cuda:0' has no 'device:' part: TensorFlow's DeviceSpec cannot read it."
               if torch_name else "TensorFlow's long names cannot be read by torch.device.")
            + " Read the kind from the text itself, for either backend's names."))
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
        if got.upper().split(":")[0] == "CUDA" and expected == "GPU":
            raise Wrong(f"{what} returned {got!r}: torch calls an NVIDIA GPU 'cuda'; return the kind of "
                        "device, 'GPU'.")
        if got.upper().startswith(expected + ":") or "/" in got or "device:" in got.lower():
            raise Wrong(f"{what} returned {got!r}: return only the kind of device, {expected!r}, "
                        "without job, task or index.")
        if len({a[2] for a in answers if isinstance(a[2], str)}) == 1:
            raise Wrong(f"device_type returns {got!r} for every name, but {str(name)!r} names a {expected}: "
                        "read the kind from the name it is given, not from this machine.")
        if "device:" not in str(name) and expected == "GPU":
            raise Wrong(f"{what} returned {got!r}, expected 'GPU': torch's names carry no 'GPU', an NVIDIA "
                        "GPU is 'cuda' there. Read both backends' names.")
        raise Wrong(f"{what} returned {got!r}, expected {expected!r}: the kind of device follows 'device:' in "
                    "TensorFlow's names and starts torch's.")


def _keras_backend() -> str:
    """The backend of the Keras the notebook imported ("tensorflow" where none is imported)."""
    import sys

    keras = sys.modules.get("keras")
    return keras.backend.backend() if keras is not None else "tensorflow"


def _q2_torch_error(what: str, exc: BaseException) -> str:
    text = str(exc)
    if "not compiled with CUDA" in text or "NVIDIA driver" in text or "CUDA driver" in text:
        return (f"{what} raised {type(exc).__name__}: {' '.join(text.split())[:120]}. It asked for a CUDA GPU: "
                "this function should ask for the CPU whatever exists, `with keras.device(\"cpu:0\"):`.")
    return error_message(what, exc)


def _q2_torch_result_mistake(result, x: np.ndarray, what: str, outer: str) -> str | None:
    import torch

    if isinstance(result, np.ndarray):
        return (f"{what} returns a NumPy array: return the tensor itself, whose .device records where it "
                "was computed (converting it forgets that).")
    if not isinstance(result, torch.Tensor):
        return f"{what} should return a tensor, got {describe(result)}."
    if result.device.type != "cpu":
        stand_in = (" (the check stood PyTorch's 'meta' device, which holds no data, in for a GPU)"
                    if outer == "meta" else "")
        return (f"{what} was computed on {result.device}, the device the caller chose{stand_in}, not on the "
                "CPU. Put all of its work inside `with keras.device(\"cpu:0\"):`.")
    mistake = _q2_shape_dtype_mistake(tuple(result.shape), str(result.dtype).replace("torch.", ""), x, what)
    if mistake:
        return mistake
    got = result.detach().numpy()
    x64 = x.astype(np.float64)
    if np.allclose(got, x64 @ x64.T, rtol=1e-10, atol=1e-12):
        return None
    x32 = torch.from_numpy(x)
    in32 = (x32 @ x32.T).double().numpy()
    size = np.abs(x64)
    if np.all(np.abs(got - in32) <= 2 * (x.shape[1] + 1) * 2.0 ** -24 * (size @ size.T)):
        return (f"{what} was multiplied in float32 and cast to float64 afterwards: that keeps float32's "
                "rounding. Cast x to float64 first, then multiply.")
    return f"{what} does not hold x @ xᵀ for the x the check passed: compute it from the argument x."


def _q2_torch_call(cpu_reference, tensor, what: str, outer: str, mode=None):
    import keras

    try:
        with answer_deadline(what), keras.device(outer), (mode or contextlib.nullcontext()):
            return cpu_reference(tensor), None
    except (NotDone, Wrong):
        raise
    except Exception as exc:
        if _mentions_blank(exc):
            raise NotDone(f"{what} still uses ____: replace it with your code.") from None
        return None, exc


def _q2_torch_keras_downcast(cpu_reference, x: np.ndarray, what: str) -> str | None:
    """Whether the float32 result is Keras's: keras.ops.matmul and dot compute float64 in float32 off
    TensorFlow (keras/src/backend/common/dtypes.py, BIT64_TO_BIT32_DTYPE). Rerun with both keeping float64."""
    import keras
    import torch

    def keeps64(a, b):
        return torch.matmul(keras.ops.convert_to_tensor(a), keras.ops.convert_to_tensor(b))

    with mock.patch.object(keras.ops, "matmul", keeps64), mock.patch.object(keras.ops, "dot", keeps64):
        again, error = _q2_torch_call(cpu_reference, torch.from_numpy(x), what, "cpu:0")
    if error is None and _q2_torch_result_mistake(again, x, what, "cpu:0") is None:
        return (f"{what} is float32 although x was cast to float64: keras.ops.matmul (and keras.ops.dot) "
                "compute float64 inputs in float32 on Keras's PyTorch backend (Keras maps 64-bit types to "
                "32 bits on every backend but TensorFlow). Multiply with `@` or torch.matmul, which keep float64.")
    return None


class _Placed:
    """Records the device of every tensor that torch functions return while it is on."""

    def __new__(cls):
        from torch.overrides import TorchFunctionMode
        from torch.utils._pytree import tree_flatten

        class Placed(TorchFunctionMode):
            def __init__(self):
                super().__init__()
                self.ops = []

            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                name = getattr(func, "__name__", str(func))
                for t in tree_flatten(out)[0]:
                    if getattr(t, "device", None) is not None and getattr(t.device, "type", "") == "meta" \
                            and name not in ("__get__", "empty_like") and name not in self.ops:
                        self.ops.append(name)
                return out

        return Placed()


def _q2_torch_follows_x(cpu_reference, x: np.ndarray, what: str) -> str | None:
    """Call with x itself on 'meta' (a GPU's stand-in): work that runs where x is shows there."""
    import torch

    placed = _Placed()
    result, error = _q2_torch_call(cpu_reference, torch.from_numpy(x).to("meta"), what, "meta", placed)
    if error is not None:
        if "Cannot copy out of meta tensor" in str(error):
            return None              # it copied x to the CPU itself: x.cpu(), x.to("cpu", ...)
        return (f"with x on PyTorch's 'meta' device (the check's stand-in for a GPU, it holds no data), "
                + _q2_torch_error(what, error))
    if not isinstance(result, torch.Tensor) or result.device.type == "cpu":
        return None
    ops = ", ".join(placed.ops) or "work"
    return (f"with x itself on PyTorch's 'meta' device (the check's stand-in for a GPU: it holds no data), "
            f"{what} came back on {result.device}: its {ops} ran where x is. On PyTorch an operation runs "
            "where its tensor is: x.double(), keras.ops.cast (it changes only the dtype) and `with "
            "torch.device(...)` (it places only new tensors) leave x on the GPU. Copy x to the CPU first, "
            "inside the scope: `keras.ops.convert_to_tensor(x, \"float64\")` within "
            "`with keras.device(\"cpu:0\"):`, or x.to(\"cpu\", torch.float64).")


def _q2_torch_asks_for_gpu(cpu_reference, x: np.ndarray, what: str) -> str | None:
    """One call while torch.cuda reports a GPU, on a machine without one."""
    import torch

    with mock.patch.object(torch.cuda, "is_available", lambda: True), \
            mock.patch.object(torch.cuda, "device_count", lambda: 1):
        _, error = _q2_torch_call(cpu_reference, torch.from_numpy(x), what, "meta")
    if error is None:
        return None
    return ("when PyTorch reports a GPU (the check made torch.cuda.is_available() say True), your "
            f"cpu_reference asks for it: {type(error).__name__}: {' '.join(str(error).split())[:100]}. The "
            "exercise wants the CPU whatever exists: `with keras.device(\"cpu:0\"):`, never \"the GPU if "
            "there is one\".")


def _check_q2_torch(cpu_reference, device_type):
    import torch

    outer = "cuda:0" if torch.cuda.is_available() else "meta"
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(shape).astype(np.float32) for shape in Q2_SHAPES]
    results = []
    for x in xs:
        what = f"cpu_reference(x) for x of shape {x.shape}"
        tensor = torch.from_numpy(x).to("cuda:0") if outer != "meta" else torch.from_numpy(x)
        result, error = _q2_torch_call(cpu_reference, tensor, what, outer)
        if error is not None:
            raise Wrong(_q2_torch_error(what, error))
        result = require_answer(result, what)
        mistake = _q2_torch_result_mistake(result, x, what, outer)
        if mistake and mistake.startswith(f"{what} is float32"):
            mistake = _q2_torch_keras_downcast(cpu_reference, x, what) or mistake
        if mistake and outer == "meta" and mistake.endswith("compute it from the argument x."):
            again, _ = _q2_torch_call(cpu_reference, torch.from_numpy(x), what, "cpu:0")
            if _q2_torch_result_mistake(again, x, what, "cpu") is None:   # right when the caller is the CPU
                raise Wrong(f"part of {what}'s work follows the caller's device: inside "
                            "keras.device('meta'), the check's stand-in for a GPU (it holds no data), its "
                            "result comes back wrong, and right inside keras.device('cpu:0'). Put all of its "
                            "work, the cast included, inside `with keras.device(\"cpu:0\"):`.")
        if mistake:
            raise Wrong(mistake)
        results.append(result)
    _check_device_type(device_type, [(results[0].device, "CPU"), (torch.device("cuda", 2), "GPU")])
    if outer == "meta":       # without a GPU: a GPU that torch.cuda reports, then x itself on the stand-in
        asks = _q2_torch_asks_for_gpu(cpu_reference, xs[0], "cpu_reference(x)")
        if asks:
            raise Wrong(asks)
        for x in xs:
            follows = _q2_torch_follows_x(cpu_reference, x, f"cpu_reference(x) for x of shape {x.shape}")
            if follows:
                raise Wrong(follows)
    return (f"cpu_reference ran on {results[0].device} even inside `keras.device('{outer}')`, with x there "
            "too, and device_type reads the kind of device from TensorFlow's names and torch's.")


def _check_q2(cpu_reference, device_type):
    if _keras_backend() == "torch":
        require_function(cpu_reference, "cpu_reference")
        require_function(device_type, "device_type")
        return _check_q2_torch(cpu_reference, device_type)
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

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
    _check_device_type(device_type, [(results[0].device, "CPU")])
    return (f"cpu_reference ran on {results[0].device} even inside `with tf.device('{outer}')` with soft "
            "placement off, and device_type reads the kind of device from TensorFlow's names and torch's.")


q2 = Exercise(
    "ep04.q2", _check_q2,
    hint=("When a device scope is opened inside your function and another one around the call, which one "
          "does an operation in your function obey? And does the cast to float64 move x, or only change "
          "its type?",
          "Open Keras's device scope on the CPU inside the function and do every step in it: convert x "
          "there, which copies it to the CPU, as float64, then multiply. For the kind of device, read the "
          "part of the name after 'device:' in TensorFlow's names, or before the colon in torch's, and "
          "remember that torch calls an NVIDIA GPU 'cuda'."),
    solution=SOLUTIONS,
)


# --------------------------------------------------------------------------- q3

#: The notebook's slow pipeline: Q3_BATCHES batches of Q3_PREP_S seconds each; a training step takes Q3_STEP_S.
Q3_BATCHES, Q3_PREP_S, Q3_STEP_S = 12, 0.03, 0.05


def _no_auto_prefetch(ds):
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


def q3_slow_pipeline(batches: int = Q3_BATCHES, prep_s: float = Q3_PREP_S):
    """Like the notebook's slow pipeline: each of ``batches`` elements takes ``prep_s`` seconds to make, and
    TensorFlow adds no prefetch by itself."""
    from ..frameworks import import_tensorflow

    tf = import_tensorflow()  # Triton first: TensorFlow then Triton crashes

    def prep(i):
        time.sleep(prep_s)
        return i

    ds = tf.data.Dataset.range(batches).map(lambda i: tf.py_function(prep, [i], tf.int64))
    return _no_auto_prefetch(ds)


def q3_expected(n_batches, prep_s, step_s, prefetch):
    """Seconds of one epoch: without prefetching the two wait for each other; with it, everything overlaps
    except the first batch's preparation and the last batch's step."""
    if not prefetch:
        return n_batches * (prep_s + step_s)
    return prep_s + step_s + (n_batches - 1) * max(prep_s, step_s)


#: (batches, seconds to prepare one, seconds of one step): training-bound, input-bound, equal, one batch.
_Q3_CASES = [(12, 0.03, 0.05), (20, 0.08, 0.02), (5, 0.04, 0.04), (1, 0.03, 0.05), (100, 0.002, 0.011)]


#: Typical mistakes, each a rule for (batches, prep_s, step_s, prefetch), and what to say when an answer follows
#: it on every case. A rule that only covers one of the two settings gives the right time for the other.
def _q3_rules():
    right = q3_expected
    return [
        (lambda n, p, s, f: n * (p + s),
         "with prefetching the next batch is prepared while the device trains on this one: the two overlap, so "
         "they no longer simply add up."),
        (lambda n, p, s, f: right(n, p, s, True),
         "that is the time WITH prefetching every time; without it nothing overlaps and the two times add up."),
        (lambda n, p, s, f: right(n, p, s, not f), "the two cases are swapped: without prefetching nothing "
                                                   "overlaps; with it, the slower of the two sets the pace."),
        (lambda n, p, s, f: n * max(p, s) if f else right(n, p, s, f),
         "almost: but the first batch must be prepared before any training can start, and the last step has no "
         "preparation left to hide. Add the part that cannot overlap."),
        (lambda n, p, s, f: n * min(p, s) if f else right(n, p, s, f),
         "the faster of the two cannot set the pace: each batch waits for the SLOWER of preparing and training."),
        (lambda n, p, s, f: p + n * s if f else right(n, p, s, f),
         "that assumes training is always the slower part. When preparing a batch takes longer than a step, "
         "the device waits for the pipeline instead."),
        (lambda n, p, s, f: n * s if f else right(n, p, s, f),
         "that assumes preparing is free once it overlaps; the slower of the two sets the pace, and the first "
         "batch must be prepared before any training."),
        (lambda n, p, s, f: (n - 1) * max(p, s) if f else right(n, p, s, f),
         "that leaves out the first batch's preparation and the last batch's step, which overlap with nothing."),
        (lambda n, p, s, f: right(n, p, s, f) if f else n * max(p, s),
         "without prefetching nothing overlaps: each batch is prepared, THEN trained on, so the two times add up."),
        (lambda n, p, s, f: right(n, p, s, f) if f else n * s,
         "without prefetching the step waits for every batch's preparation too; add it."),
        (lambda n, p, s, f: 1000 * right(n, p, s, f),
         "that is in milliseconds; the times come in seconds, so return seconds."),
    ]


def _q3_prefetches(timed) -> bool | None:
    """Whether the pipeline that was timed prepares batches ahead; None where it cannot be told."""
    if type(timed).__name__ == "DataLoader":
        return getattr(timed, "num_workers", 0) > 0
    if hasattr(timed, "_input_dataset") or type(timed).__name__.endswith("Dataset"):
        while type(timed).__name__ in ("_OptionsDataset", "OptionsDataset") and hasattr(timed, "_input_dataset"):
            timed = timed._input_dataset
        return "Prefetch" in type(timed).__name__
    if hasattr(timed, "loader") and hasattr(timed, "__iter__"):   # the notebook's threaded prefetcher
        return True
    return None


def _check_q3(epoch_seconds, predicted_s, measured_s, timed=None):
    require_function(epoch_seconds, "epoch_seconds")
    cases = [(n, p, s, prefetch) for n, p, s in _Q3_CASES for prefetch in (False, True)]
    answers = []
    for n, p, s, prefetch in cases:
        what = f"epoch_seconds({n}, {p}, {s}, prefetch={prefetch})"
        got = _call(epoch_seconds, n, p, s, prefetch, what=what)
        answers.append(as_number(f"{what}'s result", got))
    wrong = [(case, value) for case, value in zip(cases, answers)
             if not math.isclose(value, q3_expected(*case), rel_tol=1e-6, abs_tol=1e-9)]
    if wrong:
        (n, p, s, prefetch), value = wrong[0]
        what = f"epoch_seconds({n}, {p}, {s}, prefetch={prefetch}) returned {value:.4g} s"
        for rule, message in _q3_rules():
            if all(math.isclose(v, rule(*case), rel_tol=1e-6, abs_tol=1e-9) for case, v in zip(cases, answers)):
                raise Wrong(f"{what}: {message}")
        raise Wrong(f"{what}; expected {q3_expected(n, p, s, prefetch):.4g} s.")
    if is_blank(predicted_s) or is_blank(measured_s) or (timed is not None and is_blank(timed)):
        raise NotDone("epoch_seconds is right; now predict and measure the notebook's pipeline (replace ____).")
    predicted, measured = as_number("predicted_s", predicted_s), as_number("measured_s", measured_s)
    expected = q3_expected(Q3_BATCHES, Q3_PREP_S, Q3_STEP_S, True)
    if math.isclose(predicted, 1000 * expected, rel_tol=1e-6):
        raise Wrong(f"predicted_s is {predicted:.4g}: that is your epoch_seconds in milliseconds; give it in "
                    f"seconds ({expected:.4g}), as epoch_seconds returns it.")
    if not math.isclose(predicted, expected, rel_tol=1e-6):
        raise Wrong(f"predicted_s is {predicted:.4g} s, but your epoch_seconds gives {expected:.4g} s for the "
                    f"notebook's pipeline ({Q3_BATCHES} batches, {Q3_PREP_S} s and {Q3_STEP_S} s, prefetching): "
                    "use your function with those numbers.")
    if measured <= 0:
        raise Wrong(f"measured_s is {measured:g}; the seconds of one epoch are more than 0.")
    if math.isclose(measured, predicted, rel_tol=1e-9):
        raise Wrong(f"measured_s is {measured!r}, the prediction to the last digit: no clock measures that. "
                    "Time the pipeline: measured_s = time_pipeline(prefetched(slow_ds)).")
    ratio = measured / predicted
    if 300 <= ratio <= 3000:     # no load slows 0.6 s to minutes: a factor near 1000 is a unit
        raise Wrong(f"measured_s is {measured:.4g}, about 1000 × the {predicted:.3f} s predicted: that looks like "
                    "milliseconds. Give the measured epoch in seconds (time.perf_counter() counts seconds; "
                    "do not multiply by 1000).")
    floor = Q3_PREP_S + Q3_BATCHES * Q3_STEP_S
    if measured < 0.95 * floor:  # time.sleep never returns early: no machine runs the pipeline faster
        raise Wrong(f"measured_s is {measured:.4g} s, but time_pipeline cannot take less than {floor:.2f} s on any "
                    f"machine: it sleeps {Q3_STEP_S} s for each of the {Q3_BATCHES} steps, and the first batch "
                    f"must be prepared ({Q3_PREP_S} s) before the first step. Did you type a number in, or time "
                    "only part of the epoch? Give time_pipeline(prefetched(slow_ds)) itself.")
    unprefetched = Q3_BATCHES * (Q3_PREP_S + Q3_STEP_S)
    prefetches = _q3_prefetches(timed) if timed is not None else None
    if prefetches is False:
        raise Wrong(f"the pipeline you timed ({measured:.3f} s) prepares nothing ahead: that is slow_ds itself, "
                    f"whose epoch takes at least {unprefetched:.2f} s. Time prefetched(slow_ds).")
    if timed is None:   # a time alone cannot say it: a busy machine slows a prefetched epoch too
        raise Wrong(f"measured_s is {measured:.3f} s; give the pipeline you timed as well, "
                    "q3.check(epoch_seconds, predicted_s, measured_s, prefetched(slow_ds)): the check "
                    "reads from it whether it prepares a batch ahead, which no time can show on a busy "
                    f"machine (without prefetching an epoch takes at least {unprefetched:.2f} s).")
    note = ("within 20 %: the model of two overlapping queues holds." if 0.8 <= ratio <= 1.2 else
            "more than 20 % away from the prediction: a busy machine slows the measurement (it can only add "
            "time).")
    return (f"right on {2 * len(_Q3_CASES)} cases, training-bound and input-bound. For the notebook's pipeline "
            f"you predicted {predicted:.3f} s and measured {measured:.3f} s, ×{ratio:.2f}: {note}")


q3 = Exercise(
    "ep04.q3", _check_q3,
    hint=("Picture the two workers: one prepares batches, the other trains on them. Without a buffer between "
          "them, who waits for whom? With one, which of the two sets the pace, and what can never overlap "
          "at the very start and at the very end?",
          "Without prefetching, add the two times for every batch. With it, the slower of the two sets the "
          "pace for all but one batch; the first preparation and the last step stand alone. Check a case "
          "where preparing is slower than training, and one with a single batch."),
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
    hint=("Which line of the matrix holds every image that truly is class k, and which holds every image "
          "predicted as class k? Where do the correct ones sit?",
          "The correct predictions of class k are on the diagonal. Precision divides them by the sum of "
          "column k, recall by the sum of row k; F1 is the harmonic mean of the two."),
    solution=SOLUTIONS,
)
