"""Write GPU kernels with or without a GPU (episode 12).

On a CUDA GPU, Triton kernels compile and Numba CUDA kernels run on the device. Without one,
Triton's interpreter (``TRITON_INTERPRET=1``) and Numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``) run the same kernels on the CPU, for correctness only: both run
one program (or one thread) after another in Python, so their timings mean nothing.
:func:`setup` chooses and must run before ``@triton.jit`` and ``numba.cuda`` are first used.

The interpreter has two traps this module turns into errors that say what happened:

* it does not check addresses: a load or store without a mask reads or overwrites whatever
  memory lies past a tensor. :func:`guard_interpreter` checks every address a kernel touches
  against the tensors it was given, and names the program and the tensor (``OutOfBounds``);
* it computes ``bfloat16`` as 16-bit integers and returns wrong numbers without a word
  (``x + x`` on ``[1, 2, 3, 0.5]`` gave ``[1.7e38, -0.0, -1.2e-38, 4.3e37]`` with triton
  3.7.1); a bfloat16 tensor or cast raises ``Bf16InInterpreter`` instead.

Also: which triton/numpy pairs have a working interpreter (:func:`interpreter_pair_problem`),
compiling a kernel for a GPU it does not need (:func:`compile_ptx`, with ``GPUTarget``), and
what ``tl.dot`` became there (:func:`instruction_mix`, :func:`dot_unit`); a deterministic
thread order for the simulator that exposes a missing ``syncthreads`` (:func:`thread_order`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
import time
from dataclasses import dataclass

from gpucourse import tracebacks

INTERPRET_ENV = "TRITON_INTERPRET"
SIMULATOR_ENV = "NUMBA_ENABLE_CUDASIM"
#: The triton that torch 2.13's CUDA wheel pins (its ``requires_dist``); requirements.txt pins it.
TRITON_PIN = "3.7.1"
#: Compute capabilities of the three GPUs the episode compiles for.
TARGETS = {"T4": (7, 5), "A100": (8, 0), "H100": (9, 0)}


class KernelSetupError(RuntimeError):
    """Triton or Numba cannot run kernels here as installed; the message says what to do."""


class OutOfBounds(IndexError):
    """A kernel in the interpreter touched memory outside every tensor it was given.

    ``tensor`` is the nearest tensor's argument name, ``verb`` "loads" or "stores",
    ``past_end`` how many elements past its end the first bad address lies (negative: before
    its start), ``lanes`` how many lanes of the access were outside every tensor and
    ``active`` how many lanes the access had switched on, of ``total`` (all of them without a
    mask).
    """

    def __init__(self, message: str, tensor: str = "", verb: str = "", past_end: int = 0,
                 lanes: int = 0, active: int = 0, total: int = 0):
        super().__init__(message)
        self.tensor, self.verb, self.past_end = tensor, verb, past_end
        self.lanes, self.active, self.total = lanes, active, total


class Bf16InInterpreter(TypeError):
    """bfloat16 in Triton's interpreter, which computes it wrongly without an error."""


class RunawayKernel(RuntimeError):
    """A kernel ran far more lines, or reached far more barriers, than any right one could:
    on a GPU it would never end. Counted, not timed, so a busy machine cannot cause it."""


class DivergentBarrier(RuntimeError):
    """Threads of one block reached different numbers of ``syncthreads``: on a GPU that is
    undefined behaviour (a hang or wrong results), though Numba's simulator lets it pass."""


#: Lines a kernel's own code may run in one program (Triton) or one thread (Numba), and
#: barriers one thread may reach, before it is stopped as a loop that never ends. A right
#: program of the episode or its exercises runs under a thousand lines; an interpreted Triton
#: line takes up to about a millisecond, so a runaway program is named within seconds.
LINE_LIMIT = 5_000
BARRIER_LIMIT = 1_000


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def interpreter_pair_problem(triton_version: str, numpy_version: str) -> str | None:
    """Why this triton/numpy pair cannot run loops in the interpreter, or None if it can.

    NumPy 2.4 made converting an array of one element with ``int()`` an error; triton's
    interpreter did that for every loop bound until 3.7.0 (triton-lang/triton#9171, fixed by
    #9172). Colab pairs triton 3.6 with NumPy 2.1, which works.
    """
    if _release(triton_version)[:2] < (3, 7) and _release(numpy_version)[:2] >= (2, 4):
        return (f"triton {triton_version}'s interpreter fails on every loop with NumPy "
                f"{numpy_version} ('only 0-dimensional arrays can be converted to Python "
                "scalars', triton-lang/triton#9171): install triton>=3.7 or numpy<2.4 "
                f"(the course pins triton=={TRITON_PIN} with numpy 2.4.6), then restart.")
    return None


@dataclass(frozen=True)
class KernelMode:
    """How this session runs kernels: ``triton`` is "compiled" or "interpreted", ``numba``
    "compiled" or "simulated"; ``late`` is True when triton was imported before the
    interpreter was chosen (its reductions, ``tl.max`` and ``tl.sum``, then fail)."""

    triton: str
    numba: str
    late: bool = False
    #: why Numba runs in its simulator on a machine with a GPU ("" otherwise)
    numba_problem: str = ""

    def describe(self) -> str:
        if self.triton == "compiled":
            if self.numba == "compiled":
                return "Triton compiles for this GPU; Numba runs on it."
            return ("Triton compiles for this GPU; Numba runs only in its simulator"
                    + (f": {self.numba_problem}" if self.numba_problem else "."))
        text = ("No CUDA GPU: Triton kernels run in its interpreter and Numba kernels in its CUDA "
                "simulator, on the CPU, for correctness. Their timings mean nothing here.")
        if self.late:
            text += (" But triton was imported before the interpreter was chosen, so kernels "
                     "that use tl.max or tl.sum fail: restart the kernel and run the cells in "
                     "order, this one before anything that imports triton (torch.compile does).")
        return text


def library_interpreted() -> bool:
    """Whether triton's own ``@jit`` functions (``tl.max``, ...) were made for the interpreter:
    triton decorates them when it is first imported, so only if it was interpreting then."""
    from triton.language import standard
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(standard.max, InterpretedFunction)


#: Compiles and launches one tiny kernel: what the episode's Numba cells need of numba-cuda.
_NUMBA_PROBE = """
import importlib.util
import numpy as np
from numba import cuda

# numba-cuda's NumPy support, which the first compile loads: imported first, so that a NumPy
# it cannot use is named even where no driver answers (numba's built-in target has none).
if importlib.util.find_spec("numba.cuda.np") and importlib.util.find_spec("numba.cuda.np.arrayobj"):
    import numba.cuda.np.arrayobj

@cuda.jit
def one(x):
    x[0] = 1.0

x = np.zeros(1, dtype=np.float32)
one[1, 1](x)
assert x[0] == 1.0, "the kernel ran but did not write"
"""


def numba_cuda_problem(timeout: float = 180) -> str | None:
    """Why Numba cannot compile for this machine's GPU, or None if it can.

    Asked in a child process, because a failed first compile leaves ``numba.cuda`` half
    imported, and the simulator can only be chosen before that import. Seen: numba-cuda 0.30
    with NumPy 2.5, which removed ``np.row_stack`` that numba-cuda still registers.
    """
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != SIMULATOR_ENV}
    try:
        done = subprocess.run([sys.executable, "-c", _NUMBA_PROBE], env=env, timeout=timeout,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return f"a one-line Numba kernel did not compile and run within {timeout:.0f} s"
    if done.returncode == 0:
        return None
    error = tracebacks.last_exception(done.stderr) or f"exit status {done.returncode}"
    advice = ("; install a numba-cuda that supports this NumPy, or a NumPy it supports, then "
              "restart") if "'numpy'" in error else ""
    return f"numba-cuda cannot compile here ({error}; {_numba_versions()}){advice}"


def _numba_versions() -> str:
    from importlib import metadata

    found = []
    for name in ("numba-cuda", "numba", "numpy"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(found)


def setup(gpu_available: bool) -> KernelMode:
    """Run kernels on the GPU if there is one, else in the interpreter and the simulator.

    Call it before the first ``@triton.jit`` and before ``from numba import cuda``: the
    interpreter is chosen when a kernel is decorated, the simulator when ``numba.cuda`` is
    first imported. Episode 12 sets the two switches in a cell of its own before importing
    triton and then calls this for the checks; without a GPU both set the same variables
    (tests/test_taught_ep12.py).

    Parameters
    ----------
    gpu_available : bool
        ``torch.cuda.is_available()``.
    """
    import numpy
    import torch

    if not gpu_available:
        os.environ[INTERPRET_ENV] = "1"      # before triton decorates its own library
    try:
        import triton
    except ImportError:
        raise KernelSetupError(
            "triton is not installed: torch's CPU wheels do not bring it. Install the version "
            f"torch's CUDA wheel pins (pip install triton=={TRITON_PIN}), then restart. Triton has "
            "wheels for Linux only: on macOS or Windows, run this episode in Colab, on Kaggle or "
            "in WSL2.") from None
    nvidia = gpu_available and torch.version.hip is None
    if not gpu_available:
        problem = interpreter_pair_problem(triton.__version__, numpy.__version__)
        if problem:
            raise KernelSetupError(problem)
        guard_interpreter()
    numba_problem = numba_cuda_problem() if nvidia else None
    simulate = not nvidia or numba_problem is not None
    if simulate:
        if "numba.cuda" in sys.modules and os.environ.get(SIMULATOR_ENV) != "1":
            raise KernelSetupError("numba.cuda was imported before kernels.setup(); restart the "
                                   "kernel and run the cells in order.")
        os.environ[SIMULATOR_ENV] = "1"
    from . import reference

    reference.path_taken("ep12.numba", "simulated" if simulate else "compiled",
                         why=numba_problem or None)        # for a GPU run's log
    return KernelMode("interpreted" if not gpu_available else "compiled",
                      "simulated" if simulate else "compiled",
                      late=not gpu_available and not library_interpreted(),
                      numba_problem=numba_problem or "")


# ---- guards for the interpreter ----------------------------------------------------------

_launch = threading.local()      # the tensors of the launch that is running: (name, start, end)


def _ranges(names, args, kwargs) -> list[tuple[str, int, int]]:
    found = []
    for name, arg in [*zip(names, args), *kwargs.items()]:
        if hasattr(arg, "data_ptr") and hasattr(arg, "stride") and arg.numel():
            # the elements of the view, not its whole storage: a slice's neighbours are not its own
            last = sum((size - 1) * abs(step) for size, step in zip(arg.shape, arg.stride()))
            found.append((name, arg.data_ptr(), arg.data_ptr() + (last + 1) * arg.element_size()))
    return found


def _refuse_bf16(names, args, kwargs) -> None:
    import torch

    for name, arg in [*zip(names, args), *kwargs.items()]:
        if getattr(arg, "dtype", None) == torch.bfloat16:
            raise Bf16InInterpreter(
                f"{name} is a bfloat16 tensor, and Triton's interpreter computes bfloat16 as "
                "16-bit integers: the results would be wrong without an error. Use float32 or "
                "float16 on the CPU; bfloat16 kernels need a GPU of compute capability 8.0+.")


def _check_addresses(builder, ptrs, mask, verb: str) -> None:
    import numpy as np

    ranges = getattr(_launch, "ranges", None)
    if not ranges:
        return
    size = np.dtype(_np_dtype(ptrs.get_element_ty())).itemsize
    addresses = np.broadcast_to(ptrs.data, mask.data.shape)[mask.data.astype(bool)]
    addresses = addresses.astype(np.uint64).ravel()
    inside = np.zeros(addresses.shape, dtype=bool)
    for _, start, end in ranges:
        inside |= (addresses >= start) & (addresses + size <= end)
    if inside.all():
        return
    bad = int(addresses[~inside][0])
    name, start, end = min(ranges, key=lambda r: min(abs(bad - r[1]), abs(bad - r[2])))
    past = (bad - end) // size + 1 if bad >= end else -((start - bad + size - 1) // size)
    where = (f"{past} element(s) past the end of {name}" if past > 0 else
             f"{-past} element(s) before the start of {name}")
    lanes = int((~inside).sum())
    raise OutOfBounds(
        f"program {tuple(builder.grid_idx)} {verb} {lanes} element(s) outside every "
        f"tensor it was given, the first {where}. On a GPU this reads or overwrites someone "
        "else's memory, or stops the program with an illegal address.",
        tensor=name, verb=verb, past_end=past, lanes=lanes, active=int(addresses.size),
        total=int(mask.data.size))


def _np_dtype(triton_dtype):
    from triton.runtime import interpreter

    return interpreter._get_np_dtype(triton_dtype)


def _is_bf16(triton_dtype) -> bool:
    import triton.language as tl

    return getattr(triton_dtype, "scalar", triton_dtype) == tl.bfloat16


_BF16_SENTENCE = ("Triton's interpreter computes bfloat16 as 16-bit integers, so this kernel "
                  "would return wrong numbers without an error. Keep float32 (or float16) on the "
                  "CPU; try bfloat16 on a GPU of compute capability 8.0 or newer.")


@functools.lru_cache(maxsize=None)
def guard_interpreter() -> bool:
    """Make Triton's interpreter check addresses and refuse bfloat16 (once per process)."""
    from triton.runtime import interpreter

    builder, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
    load, store, cast = (builder.create_masked_load, builder.create_masked_store,
                         builder.cast_impl)
    call = executor.__call__

    def checked_load(self, ptrs, mask, other, *rest):
        if _is_bf16(ptrs.get_element_ty()):
            raise Bf16InInterpreter("the kernel loads bfloat16 values. " + _BF16_SENTENCE)
        _check_addresses(self, ptrs, mask, "loads")
        return load(self, ptrs, mask, other, *rest)

    def checked_store(self, ptrs, value, mask, *rest):
        _check_addresses(self, ptrs, mask, "stores")
        return store(self, ptrs, value, mask, *rest)

    def checked_cast(self, src, dst_type):
        if _is_bf16(dst_type):
            raise Bf16InInterpreter("the kernel converts values to bfloat16. " + _BF16_SENTENCE)
        return cast(self, src, dst_type)

    def checked_call(self, *args, **kwargs):
        _refuse_bf16(self.arg_names, args, kwargs)
        outer = getattr(_launch, "ranges", None)
        _launch.ranges = _ranges(self.arg_names, args, kwargs)
        try:
            with _library_interpreted(), line_budget(self.fn):
                return call(self, *args, **kwargs)
        finally:
            _launch.ranges = outer

    builder.create_masked_load, builder.create_masked_store = checked_load, checked_store
    builder.cast_impl, executor.__call__ = checked_cast, checked_call
    return True


@contextlib.contextmanager
def _library_interpreted():
    """While a kernel is interpreted, let triton's own ``@jit`` functions (``tl.zeros``,
    ``tl.max``, ...) run in the interpreter too, even where triton was imported before
    ``TRITON_INTERPRET=1`` was set (a test process, a notebook that imported torch._dynamo)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    original = JITFunction.__call__
    interpreted_of = {}

    def call_interpreted(self, *args, **kwargs):
        if self not in interpreted_of:
            interpreted_of[self] = InterpretedFunction(self.fn)
        return interpreted_of[self](*args, **kwargs)

    JITFunction.__call__ = call_interpreted
    try:
        yield
    finally:
        JITFunction.__call__ = original


def _budget_tracer(fn, limit: int, what: str):
    """A ``sys.settrace`` function that counts the lines ``fn``'s own code runs (the
    interpreter's rewritten copy keeps its name and file) and stops it past ``limit``."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    name, filename = code.co_name, code.co_filename
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if count > limit:
                raise RunawayKernel(
                    f"{what} ran more than {limit:,} lines of {name} without finishing: a loop "
                    "that never ends. Does the loop's variable change each time round (a step "
                    "that is never halved, a counter never increased, a range with step 0)?")
        return local

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code.co_name == name and frame.f_code.co_filename == filename:
            count = 0                     # a new program (Triton) or thread (Numba): its own count
            return local
        return None
    return tracer


@contextlib.contextmanager
def line_budget(fn, limit: int | None = None, what: str = "one program of the launch"):
    """Inside, stop ``fn`` with :class:`RunawayKernel` once its own lines have run more than
    ``limit`` times (default :data:`LINE_LIMIT`), in this thread. A count, not a clock: the
    verdict is the same on a busy machine and an idle one."""
    tracer = _budget_tracer(fn, LINE_LIMIT if limit is None else limit, what)
    if tracer is None:
        yield
        return
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(previous)


def guard_error(exc: BaseException) -> BaseException | None:
    """The ``OutOfBounds``, ``Bf16InInterpreter`` or ``RunawayKernel`` behind an interpreter
    error, if any."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (OutOfBounds, Bf16InInterpreter, RunawayKernel)):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def interpreted(kernel):
    """``kernel`` as the interpreter runs it, whether it was decorated with or without one."""
    from triton.runtime.interpreter import InterpretedFunction

    guard_interpreter()
    if isinstance(kernel, InterpretedFunction):
        return kernel
    fn = getattr(kernel, "fn", None)
    if fn is None:
        raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}: put "
                        "@triton.jit above its def.")
    return InterpretedFunction(fn)


# ---- what a kernel becomes on a GPU ------------------------------------------------------

_TRITON_TYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int32": "i32",
                 "int64": "i64", "int8": "i8", "uint8": "u8", "bool": "i1"}


def signature(kernel, *args, **constexprs) -> dict:
    """Triton's signature of ``kernel`` for these example arguments (tensors give pointers)."""
    fn = getattr(kernel, "fn", kernel)
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    if len(args) + len(constexprs) != len(names):
        raise TypeError(f"{fn.__name__} takes {len(names)} arguments ({', '.join(names)}); "
                        f"got {len(args)} values and constexprs {sorted(constexprs)}.")
    sig = {}
    for name, arg in zip(names, args):
        if hasattr(arg, "dtype") and hasattr(arg, "data_ptr"):
            sig[name] = "*" + _TRITON_TYPES[str(arg.dtype).removeprefix("torch.")]
        elif isinstance(arg, bool) or not isinstance(arg, (int, float)):
            raise TypeError(f"argument {name}={arg!r}: pass a tensor, an int or a float.")
        else:
            sig[name] = "i32" if isinstance(arg, int) else "fp32"
    sig.update({name: "constexpr" for name in names[len(args):]})
    return sig


_CHILD = r"""
import importlib.util, json, pathlib, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
jobs = json.loads(sys.stdin.read())
out = []
folder = pathlib.Path(tempfile.mkdtemp(prefix="gpucourse-kernels-"))
for i, job in enumerate(jobs):
    path = folder / f"kernel_{i}.py"                # triton reads a kernel's source from its file
    path.write_text(job["source"])
    spec = importlib.util.spec_from_file_location(f"kernel_{i}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = getattr(module, job["name"])
    if not isinstance(kernel, triton.runtime.JITFunction):    # its source had no @triton.jit
        kernel = triton.jit(kernel)
    major, minor = job["capability"]
    attrs = {(index,): [["tt.divisibility", 16]] for index in job["aligned"]}
    source = ASTSource(kernel, job["signature"], constexprs=job["constexprs"], attrs=attrs)
    try:
        compiled = triton.compile(source, target=GPUTarget("cuda", 10 * major + minor, 32),
                                  options={"num_warps": job["num_warps"]})
        out.append({"ptx": compiled.asm["ptx"]})
    except Exception as error:                      # the kernel's own mistake, reported per job
        out.append({"error": f"{type(error).__name__}: {error}"})
sys.stdout.write(json.dumps(out))
"""


def _job(kernel, capability, args, constexprs, num_warps) -> dict:
    """What the child compiles. Like Triton's JIT, it specialises what a launch with these
    arguments would: a pointer 16-byte aligned, or an integer divisible by 16, is marked
    ``tt.divisibility`` 16 (so the PTX has the vector loads the real launch gets), and an
    integer equal to 1 becomes a constant."""
    import inspect
    import textwrap

    fn = getattr(kernel, "fn", kernel)
    source = textwrap.dedent(inspect.getsource(fn))
    header = "import triton\nimport triton.language as tl\n" + _constant_globals(fn)
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    sig = signature(fn, *args, **constexprs)
    constexprs = dict(constexprs)
    aligned = []
    for index, (name, arg) in enumerate(zip(names, args)):
        if hasattr(arg, "data_ptr"):
            if arg.data_ptr() % 16 == 0:
                aligned.append(index)
        elif isinstance(arg, int) and arg == 1:
            sig[name], constexprs[name] = "constexpr", 1
        elif isinstance(arg, int) and arg % 16 == 0:
            aligned.append(index)
    return {"source": header + source, "name": fn.__name__,
            "capability": list(capability), "signature": sig,
            "constexprs": constexprs, "aligned": aligned, "num_warps": num_warps}


def _constant_globals(fn, seen=None) -> str:
    """Lines that give the child what ``fn`` reads from its module: the modules it names
    (``np``, ``math``), the plain constants (a block size, a flag, a ``tl.constexpr``) and the
    ``@triton.jit`` functions it calls. The kernel's own file there has only the imports, and
    Triton's compiler must see what the learner's kernel sees to refuse what it refuses."""
    import inspect
    import textwrap
    import types

    seen = set() if seen is None else seen
    lines = []
    for name in fn.__code__.co_names:
        if name not in fn.__globals__ or name in seen:
            continue
        seen.add(name)
        value = fn.__globals__[name]
        if isinstance(value, types.ModuleType):
            if name not in ("triton", "tl"):
                lines.append(f"import {value.__name__} as {name}\n")
            continue
        helper = getattr(value, "fn", None)
        if callable(helper) and type(value).__name__ == "JITFunction":
            try:
                body = textwrap.dedent(inspect.getsource(helper)).splitlines(keepends=True)
            except (OSError, TypeError):
                continue
            while body and body[0].lstrip().startswith("@"):       # its own decorator
                body.pop(0)
            lines.append(_constant_globals(helper, seen) + "@triton.jit\n" + "".join(body))
            continue
        inner = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
        if isinstance(inner, (bool, int, float, str)) or inner is None:
            wrap = "tl.constexpr({!r})" if inner is not value else "{!r}"
            lines.append(f"{name} = {wrap.format(inner)}\n")
    return "".join(lines)


_ptx_cache: dict[str, dict] = {}


def compile_results(jobs: list[tuple]) -> list[dict]:
    """For each ``(kernel, capability, args, constexprs)``, ``{"ptx": ...}`` or, where Triton's
    compiler refused the kernel, ``{"error": "ExceptionType: message"}``.

    Triton's compiler cannot run in a process whose triton interprets (its own library was
    made for the interpreter), so the kernels' source is compiled in a child process with the
    interpreter off. ``RuntimeError`` if the child itself fails (no triton, a crash).
    """
    import json
    import subprocess

    specs = [_job(kernel, cap, args, cx, 4) for kernel, cap, args, cx in jobs]
    keys = [json.dumps(spec, sort_keys=True) for spec in specs]
    todo = [spec for key, spec in zip(keys, specs) if key not in _ptx_cache]
    if todo:
        env = {k: v for k, v in os.environ.items() if k != INTERPRET_ENV}
        done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(todo),
                              capture_output=True, text=True, env=env, timeout=600)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
            raise RuntimeError(f"compiling {', '.join(sorted({s['name'] for s in todo}))} "
                               f"failed: {last}")
        for spec, result in zip(todo, json.loads(done.stdout)):
            _ptx_cache[json.dumps(spec, sort_keys=True)] = result
    return [_ptx_cache[key] for key in keys]


def compile_many(jobs: list[tuple]) -> list[str]:
    """PTX for each ``(kernel, capability, args, constexprs)``; see :func:`compile_ptx`."""
    results = compile_results(jobs)
    for (kernel, cap, _, _), result in zip(jobs, results):
        if "error" in result:
            name = getattr(getattr(kernel, "fn", kernel), "__name__", "kernel")
            raise RuntimeError(f"compiling {name} for sm_{cap[0]}{cap[1]} failed: "
                               f"{result['error'].strip().splitlines()[-1]}")
    return [result["ptx"] for result in results]


def compile_ptx(kernel, capability: tuple[int, int], *args, **constexprs) -> str:
    """The PTX Triton writes for ``kernel`` on a GPU of ``capability``, with no GPU needed.

    ``args`` are example arguments (tensors for pointers: only their dtype matters), and
    ``constexprs`` the block sizes. The same call works with triton 3.6 (Colab) and 3.7:
    ``triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 75, 32))``.
    """
    return compile_many([(kernel, capability, args, constexprs)])[0]


#: PTX instructions that do the multiply-adds of ``tl.dot``, and who issues each one.
MIX = {"fma.rn.f32": "one fp32 multiply-add on a CUDA core, per thread",
       "mma.sync": "a tensor-core matrix multiply, per warp of 32 threads (in hardware from "
                   "sm_70; Triton 3.3 and later emits it from sm_80 only)",
       "wgmma.mma_async": "a tensor-core matrix multiply, per warp group of 4 warps (sm_90)"}


def instruction_mix(ptx: str) -> dict[str, int]:
    """How many of each instruction in :data:`MIX` the PTX holds (plus global loads/stores).

    Only the instructions that multiply are counted (``wgmma.mma_async``, not the
    ``wgmma.fence`` and ``wgmma.wait_group`` around it). The counts are per thread, per warp
    and per warp group respectively: compare :func:`multiply_adds`, not these counts."""
    mix = {name: len(re.findall(rf"^\s*(?:@%p\d+\s+)?{re.escape(name)}", ptx, re.M))
           for name in MIX}
    mix["ld.global"] = len(re.findall(r"^\s*(?:@!?%p\d+\s+)?ld\.global", ptx, re.M))
    mix["st.global"] = len(re.findall(r"^\s*(?:@!?%p\d+\s+)?st\.global", ptx, re.M))
    return mix


def multiply_adds(ptx: str, num_warps: int = 4) -> int:
    """Multiply-adds that one program's PTX does, summed over its threads: each
    ``fma.rn.f32`` is one per thread, each ``mma.sync.…mMnNkK`` M·N·K per warp and each
    ``wgmma.mma_async.…mMnNkK`` M·N·K per warp group (4 warps)."""
    shapes = lambda name: [int(m) * int(n) * int(k) for m, n, k in re.findall(   # noqa: E731
        rf"^\s*(?:@%p\d+\s+)?{re.escape(name)}\S*\.m(\d+)n(\d+)k(\d+)", ptx, re.M)]
    fma = instruction_mix(ptx)["fma.rn.f32"]
    return (fma * 32 * num_warps + sum(shapes("mma.sync")) * num_warps
            + sum(shapes("wgmma.mma_async")) * (num_warps // 4))


def dot_unit(mix: dict[str, int]) -> str:
    """Where the multiply-adds of ``tl.dot`` ran, read from an :func:`instruction_mix`."""
    if mix.get("wgmma.mma_async"):
        return "tensor cores (wgmma)"
    if mix.get("mma.sync"):
        return "tensor cores (mma.sync)"
    return "CUDA cores (fma)" if mix.get("fma.rn.f32") else "no multiply-adds"


def tensor_core_dot(capability: tuple[int, int], triton_version: str | None = None) -> bool:
    """Whether ``tl.dot`` uses tensor cores there, by the course's feasibility model."""
    from . import feasibility

    if triton_version is None:
        import triton

        triton_version = triton.__version__
    return feasibility.feature_available("triton_tensor_core_dot", capability,
                                         {"triton": triton_version})


# ---- Numba's simulator, threads in an order of our choosing --------------------------------

def _wait_until(predicate, seconds: float = 600.0) -> None:
    """Wait for a simulated thread. Runaway loops are stopped by counting (LINE_LIMIT); this
    clock is only the last resort for a thread stuck outside Python (a blocking call)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("a simulated thread neither finished nor reached syncthreads "
                               f"within {seconds:g} s: does it wait on something that never "
                               "comes?")
        time.sleep(0)


class SharedRace(RuntimeError):
    """Two threads of a block touched one element between the same two barriers, and at least
    one of them wrote it: on a GPU the result depends on timing (``compute-sanitizer --tool
    racecheck`` reports it), even where running the threads one at a time gives the right sum."""


class _Accesses:
    """Who read and wrote each element of each array, per barrier phase, in one block."""

    def __init__(self):
        self.seen: dict = {}              # (array id, index, phase) -> {thread: "r" or "w"}
        self.names: dict[int, str] = {}

    def note(self, array, index, kind: str) -> None:
        thread = threading.current_thread()
        phase = getattr(thread, "gpucourse_phase", None)
        if phase is None:
            return
        if not isinstance(index, tuple):
            index = (index,)
        if not all(isinstance(i, (int,)) or hasattr(i, "__index__") for i in index):
            return                        # a slice or an array of indices: not followed
        key = (id(array), tuple(int(i) for i in index), phase)
        who = self.seen.setdefault(key, {})
        idx = tuple(thread.threadIdx)
        who[idx] = "w" if kind == "w" or who.get(idx) == "w" else "r"

    def first_race(self):
        for (array, index, phase), who in self.seen.items():
            writers = [t for t, k in who.items() if k == "w"]
            if writers and len(who) > 1:
                other = next(t for t in who if t != writers[0])
                return self.names.get(array, "an array"), index, writers[0], other, who[other]
        return None


def _watch(array, name: str):
    """``array`` (a shared array of the simulator) with its element reads and writes noted."""
    import numpy as np

    class Watched(np.ndarray):
        def __getitem__(self, index):
            log = _block_log[0]
            if log is not None:
                log.note(self.base if self.base is not None else self, index, "r")
            return super().__getitem__(index)

        def __setitem__(self, index, value):
            log = _block_log[0]
            if log is not None:
                log.note(self.base if self.base is not None else self, index, "w")
            super().__setitem__(index, value)

    watched = array.view(Watched)
    if _block_log[0] is not None:
        _block_log[0].names[id(array)] = name
    return watched


_block_log: list = [None]                 # the block being run in order, if races are followed


def _ordered_run(order: str, races: bool = False):
    """A ``BlockManager.run`` that runs the threads of a block one at a time, each until it
    reaches ``syncthreads`` or ends, in index order ("forward") or reversed ("reverse").

    It also follows each thread's barriers: Numba's own simulator releases a barrier once every
    *live* thread waits there, so a ``syncthreads`` inside an ``if`` that only some threads
    take, or after a ``return`` that only some take, passes it silently, and so does a
    different ``syncthreads`` in each branch of an ``if``. On a GPU that is undefined (CUDA C++
    Programming Guide, ``__syncthreads()``: allowed in conditional code only if the condition
    is the same for the whole block). Here threads that reach different barriers, or different
    numbers of them, are a :class:`DivergentBarrier`, and a thread past
    :data:`BARRIER_LIMIT` barriers or :data:`LINE_LIMIT` lines a :class:`RunawayKernel`. With
    ``races``, two threads touching one element of an array between the same two barriers,
    one of them writing, are a :class:`SharedRace`: running threads one at a time would
    otherwise hide a read-modify-write race (``shared[0] += v`` in every thread)."""
    import numpy as np

    def run(self, grid_point, *args):
        from numba.cuda.simulator import kernel as sim

        points = list(np.ndindex(*self._block_dim))
        points = points[::-1] if order == "reverse" else points
        threads, sites = [], {}
        kernel = getattr(self._f, "py_func", self._f)
        code = getattr(kernel, "__code__", None)
        _block_log[0] = _Accesses() if races else None
        fake_cuda = getattr(kernel, "__globals__", {}).get("cuda")
        for made in getattr(getattr(fake_cuda, "_shared", None), "_allocations", {}).values():
            made[...] = np.nan if made.dtype.kind in "fc" else -1   # this block wrote none yet

        def stop_all():
            for other in threads:
                other.abort, other.syncthreads_blocked = True, False
                other.syncthreads_event.set()

        def call_site(thread) -> int:
            frame = sys._current_frames().get(thread.ident)
            while frame is not None and code is not None and frame.f_code is not code:
                frame = frame.f_back
            return frame.f_lineno if frame is not None else 0

        def settle(thread):
            _wait_until(lambda: thread.syncthreads_blocked or not thread.is_alive())
            if thread.exception:
                stop_all()
                raise thread.exception[0].with_traceback(thread.exception[1])
            if thread.syncthreads_blocked:
                sites[thread].append(call_site(thread))
                thread.gpucourse_phase = len(sites[thread])
                if len(sites[thread]) > BARRIER_LIMIT:
                    stop_all()
                    raise RunawayKernel(
                        f"thread {tuple(thread.threadIdx)} of block {tuple(grid_point)} reached "
                        f"more than {BARRIER_LIMIT:,} syncthreads without finishing: a loop "
                        "that never ends. Does its variable change each time round (a step "
                        "that is never halved)?")

        def body():
            with line_budget(kernel, what="one simulated thread"):
                self._f(*args)

        try:
            for point in points:
                thread = sim.BlockThread(body, self, grid_point, point, self._debug)
                thread.gpucourse_phase = 0
                threads.append(thread)
                sites[thread] = []
                thread.start()
                settle(thread)
            while any(t.is_alive() for t in threads):
                for thread in threads:
                    if thread.is_alive() and thread.syncthreads_blocked:
                        thread.syncthreads_blocked = False
                        thread.syncthreads_event.set()
                        settle(thread)
            _judge_block(grid_point, {tuple(t.threadIdx): s for t, s in sites.items()})
        finally:
            log, _block_log[0] = _block_log[0], None
        race = log.first_race() if log is not None else None
        if race:
            name, index, writer, other, kind = race
            where = f"{name}[{', '.join(map(str, index))}]"
            fix = ("Several threads updating one element lose updates on a GPU, where the "
                   "threads of a warp all read before any of them writes: give each thread "
                   "its own element and add them up in steps, or use cuda.atomic.add."
                   if kind == "w" else
                   "Put cuda.syncthreads() between every write to an element and the reads of "
                   "it by other threads, including inside the loop: on a GPU the reader may "
                   "run first.")
            raise SharedRace(
                f"in block {tuple(grid_point)}, thread {writer} writes {where} and thread "
                f"{other} {'writes' if kind == 'w' else 'reads'} it between the same two "
                f"barriers: a race. {fix}")
    return run


def _judge_block(grid_point, sites: dict) -> None:
    """DivergentBarrier unless every thread reached the same barriers, in the same order."""
    first = next(iter(sites))
    most = max(sites, key=lambda t: len(sites[t]))
    least = min(sites, key=lambda t: len(sites[t]))
    for thread, lines in sites.items():
        if lines == sites[first]:
            continue
        if len(sites[most]) != len(sites[least]):
            raise DivergentBarrier(
                f"in block {tuple(grid_point)}, thread {most} reached {len(sites[most])} "
                f"syncthreads but thread {least} only {len(sites[least])}: every thread of a "
                "block must reach the same barriers. A syncthreads inside an if that not every "
                "thread takes (if t < step: ... syncthreads()), or after a return that some "
                "threads take, hangs or gives wrong results on a GPU, even where this "
                "simulator lets it pass.")
        step = next(i for i, (a, b) in enumerate(zip(lines, sites[first])) if a != b)
        raise DivergentBarrier(
            f"in block {tuple(grid_point)}, thread {first}'s barrier number {step + 1} is the "
            f"syncthreads on line {sites[first][step]} of the kernel, thread {thread}'s the one "
            f"on line {lines[step]}: every thread of a block must reach the same barriers. A "
            "syncthreads in each branch of an if is two different barriers: put one after "
            "the if, where every thread reaches it.")


@contextlib.contextmanager
def thread_order(order: str = "forward", races: bool = False):
    """Inside, Numba's simulator runs each block's threads one at a time, in index order or
    reversed, each until it reaches ``cuda.syncthreads()`` or ends.

    A kernel that reads what another thread wrote without a ``syncthreads`` in between gets
    the value only in one of the two orders: run it in both, and a race shows every time
    rather than now and then. Every thread of a block must reach the same barriers
    (:class:`DivergentBarrier` otherwise). Shared arrays start as NaN (float) or -1
    (integer), not as whatever memory held before, so an element no thread wrote is seen.
    With ``races``, every element two threads touch between two barriers is followed too
    (:class:`SharedRace`).
    """
    if order not in ("forward", "reverse"):
        raise ValueError(f"order must be 'forward' or 'reverse', not {order!r}.")
    import numpy as np
    from numba.cuda.simulator import kernel as sim
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv import devicearray

    original = sim.BlockManager.run
    shared_array = kernelapi.FakeCUDAShared.array
    get, put = devicearray.FakeCUDAArray.__getitem__, devicearray.FakeCUDAArray.__setitem__

    def array(self, shape, dtype, alignment=None):
        # Numba's simulator tells shared arrays apart by the file and line that ask for one
        # (the frame above its own `array`): asked from here, every shared array of a kernel
        # would be one and the same. So the kernel's own line is the key, as in Numba.
        if shape == 0 or alignment is not None or not hasattr(self, "_allocations"):
            made = shared_array(self, shape, dtype, alignment)   # dynamic: one buffer anyway
        else:
            caller = sys._getframe(1)
            key = (caller.f_code.co_filename, caller.f_lineno)
            made = self._allocations.get(key)
            if made is None:                  # new for this block: not yet written by any thread
                kind = (kernelapi.numpy_support.as_dtype(dtype)       # a Numba type, or
                        if isinstance(dtype, kernelapi.types.Type) else dtype)   # NumPy's
                made = np.full(shape, np.nan if np.dtype(kind).kind in "fc" else -1, kind)
                self._allocations[key] = made
        if races and isinstance(made, np.ndarray):
            return _watch(made, "the shared array")
        return made

    def noted_get(self, index):
        if _block_log[0] is not None:
            _block_log[0].names.setdefault(id(self._ary), "an argument")
            _block_log[0].note(self._ary, index, "r")
        return get(self, index)

    def noted_put(self, index, value):
        if _block_log[0] is not None:
            _block_log[0].names.setdefault(id(self._ary), "an argument")
            _block_log[0].note(self._ary, index, "w")
        return put(self, index, value)

    atomics = {name: getattr(kernelapi.FakeCUDAAtomic, name)
               for name in vars(kernelapi.FakeCUDAAtomic) if not name.startswith("_")}

    def unfollowed(method):
        def call(self, *args, **kwargs):     # an atomic is one indivisible step, no race
            log, _block_log[0] = _block_log[0], None
            try:
                return method(self, *args, **kwargs)
            finally:
                _block_log[0] = log
        return call

    sim.BlockManager.run = _ordered_run(order, races)
    kernelapi.FakeCUDAShared.array = array
    for name, method in atomics.items():
        setattr(kernelapi.FakeCUDAAtomic, name, unfollowed(method))
    if races:
        devicearray.FakeCUDAArray.__getitem__ = noted_get
        devicearray.FakeCUDAArray.__setitem__ = noted_put
    try:
        yield
    finally:
        sim.BlockManager.run = original
        kernelapi.FakeCUDAShared.array = shared_array
        for name, method in atomics.items():
            setattr(kernelapi.FakeCUDAAtomic, name, method)
        devicearray.FakeCUDAArray.__getitem__, devicearray.FakeCUDAArray.__setitem__ = get, put
