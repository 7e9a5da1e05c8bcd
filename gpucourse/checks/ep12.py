"""Checks for episode 12, "Your first GPU kernels".

``q1`` a masked, strided Triton kernel (``a * x + y``) · ``q2`` a fused Triton kernel
(``relu(x + residual) * scale``) and the bytes it saves · ``q3`` a tiled ``tl.dot`` matmul
with a bias and ReLU after it, accumulated in float32 · ``q4`` a Numba CUDA kernel that sums
each block in shared memory.

Every check runs the learner's kernel on the CPU, whatever the machine has: Triton kernels in
the interpreter with :mod:`gpucourse.kernels`' guards (every address checked against the
tensors passed, bfloat16 refused), Numba kernels in the CUDA simulator with each block's
threads run one at a time in both orders (:func:`gpucourse.kernels.thread_order`), so that a
missing ``syncthreads`` shows every time. Shapes are not multiples of the block, and some
inputs are strided views. Outputs start as NaN, so a position no program writes is seen.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from .. import kernels
from ..device import cuda_usable
from ..exercises import NotDone, Exercise, Wrong, as_number, describe, require_function, \
    solution_link
from ..exercises import call_answer as _call

NOTEBOOK = "12-gpu-kernels.ipynb"
if not cuda_usable():
    os.environ.setdefault(kernels.INTERPRET_ENV, "1")     # before triton is first imported
    os.environ.setdefault(kernels.SIMULATOR_ENV, "1")


FILLER = 1000.0   # between the elements of a strided view: a kernel that reads it is seen


def _spaced(values: torch.Tensor, step: int = 1) -> torch.Tensor:
    """``values`` in a buffer of its own with filler around it (and between, for ``step`` > 1):
    a view whose neighbours in memory belong to no tensor, so a stray address is caught."""
    flat = values.reshape(-1)
    buffer = torch.full((flat.numel() * step + 64,), FILLER, dtype=values.dtype)
    view = buffer[32:32 + flat.numel() * step:step]
    view.copy_(flat)
    return view


def _launch(kernel, grid, args, what: str, **constexprs):
    """Run a learner's Triton kernel in the guarded interpreter; name what went wrong."""
    require_function(kernel, what.split("[")[0])
    try:
        runnable = kernels.interpreted(kernel)
    except TypeError as exc:
        raise Wrong(str(exc)) from None
    try:
        runnable[grid](*args, **constexprs)
    except NotDone:
        raise
    except Exception as exc:           # noqa: BLE001 - the learner's kernel may raise anything
        guard = kernels.guard_error(exc)
        if isinstance(guard, kernels.OutOfBounds):
            raise Wrong(f"{what}: {_out_of_bounds(guard)} {guard}") from None
        if isinstance(guard, kernels.Bf16InInterpreter):
            raise Wrong(f"{what}: bfloat16 in the interpreter. {guard}") from None
        if isinstance(guard, kernels.RunawayKernel):
            raise Wrong(f"{what}: {guard}") from None
        text = str(exc)
        if "____" in text or "_Blank" in text:
            raise NotDone("your kernel still uses ____: replace it with your code.") from None
        raise Wrong(f"{what} raised {type(exc).__name__}: {text[:300]}") from None


def _out_of_bounds(guard: "kernels.OutOfBounds") -> str:
    """The likely mistake behind an address outside the tensors, from what the access did."""
    access = f"a {guard.verb[:-1]} of {guard.tensor}"
    if guard.past_end < 0:
        return (f"{access} reaches before the tensor's start: an offset below zero (a program "
                "id or an index minus one?).")
    if guard.active == guard.total:
        return (f"all {guard.total} lanes of {access} are on, so the lanes past the end of the "
                "data touch memory too: it has no mask, or its mask lets every lane through. "
                "Every load and every store needs a mask that tests its own positions against "
                "the size (offsets < n; rows < M and columns < N).")
    if guard.lanes == guard.active:
        return (f"every lane {access} switched on lies outside the tensor: the block starts "
                "past the end, so where it starts is wrong (a program id plus one? a row "
                "start that uses the wrong stride?).")
    if guard.lanes == 1 and guard.past_end == 1:
        return (f"{access} has one lane too many switched on, one element past the end: a "
                "mask with <= where < belongs? Positions run 0 … n − 1.")
    return (f"{access} is masked, but its mask lets {guard.lanes} lane(s) through whose "
            "addresses lie outside the tensor: the mask must test the same positions the "
            "address uses, against the size of that dimension (rows against M, columns "
            "against N, the K slab against K).")


#: Compute capabilities a learner's Triton kernel is also compiled for: the interpreter runs
#: Python that Triton's compiler refuses (a float16 accumulator that the first += turns into
#: float32 in NumPy, a Python call on a tensor), so a check that only interprets would pass it.
COMPILE_FOR = ((7, 5), (8, 0))


def _compiled(kernel, args, constexprs, what: str, needs_dot: bool = False) -> str:
    """Compile the learner's kernel as a T4 and an A100 would; Wrong if Triton refuses it.

    Returns a note for the ✓ message when the compiler could not run here at all."""
    jobs = [(kernel, cc, args, constexprs) for cc in COMPILE_FOR]
    try:
        results = kernels.compile_results(jobs)
    except Exception as exc:            # noqa: BLE001 - no triton compiler here, a crash
        return f" (Not compiled for a GPU here: {str(exc)[:120]}.)"
    skipped = []
    for cc, result in zip(COMPILE_FOR, results):
        error = result.get("error", "")
        if "is not defined" in error:                  # a name the child could not give it
            skipped.append(f"sm_{cc[0]}{cc[1]}")
            continue
        if not error:
            if needs_dot and cc >= (8, 0) and not kernels.instruction_mix(result["ptx"])["mma.sync"]:
                raise Wrong(f"{what}: right numbers, but compiled for sm_{cc[0]}{cc[1]} the "
                            "kernel has no tensor-core instruction: it multiplies without "
                            "tl.dot. Load a BM × BK block of x and a BK × BN block of w and "
                            "add tl.dot of the two to the accumulator.")
            continue
        cause = error.strip().splitlines()[-1]
        if "Loop-carried variable" in error and "fp16" in error:
            raise Wrong(f"{what}: a 16-bit accumulator. The interpreter let it pass (NumPy "
                        "made it float32 at the first +=), but Triton's compiler refuses it "
                        f"for sm_{cc[0]}{cc[1]}: {cause[:200]} Start from "
                        "tl.zeros((BM, BN), dtype=tl.float32).")
        raise Wrong(f"{what}: the interpreter ran it, but Triton's compiler refuses it for "
                    f"sm_{cc[0]}{cc[1]}, so it would not run on a GPU: {cause[:300]}")
    if skipped:
        return f" (Not compiled for {' and '.join(skipped)}: it names something only your notebook has.)"
    return " It also compiles for sm_75 and sm_80."


def _unwritten(out: torch.Tensor) -> str | None:
    missing = torch.nonzero(torch.isnan(out.reshape(-1))).reshape(-1)
    if missing.numel() == 0:
        return None
    first, last = int(missing[0]), int(missing[-1])
    return f"{missing.numel()} of {out.numel()} outputs were never written (positions {first}..{last})"


# --- q1: a * x + y on strided vectors ---------------------------------------------------------

_Q1_FIXTURES = [  # n, BLOCK, stride of x, stride of y, a
    (1000, 128, 1, 1, 2.0),
    (77, 32, 3, 1, -0.5),      # x is every third element of its buffer
    (256, 64, 2, 5, 1.5),      # a multiple of the block, both strided
    (5, 64, 1, 2, 3.0),        # smaller than one block
]


def _q1_case(kernel, n, block, sx, sy, a, seed):
    gen = torch.Generator().manual_seed(seed)
    x, y = _spaced(torch.randn(n, generator=gen), sx), _spaced(torch.randn(n, generator=gen), sy)
    out = _spaced(torch.full((n,), float("nan")))
    what = f"axpy_kernel[(cdiv({n}, {block}),)] with stride_x={sx}, stride_y={sy}"
    _launch(kernel, (triton_cdiv(n, block),), (x, y, out, n, sx, sy, a), what, BLOCK=block)
    return x, y, out, what


def _q1_unwritten(out, n: int, block: int, stride_x: int) -> str:
    """The likely cause of outputs no program wrote, from where the written part ends."""
    first = int(torch.nonzero(torch.isnan(out)).reshape(-1)[0])
    if not torch.isnan(out[first:]).all():
        return ("Each program starts BLOCK positions after the one before: offsets = "
                "tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), and the grid has cdiv(n, BLOCK) "
                "programs.")
    if first == n - 1:
        return ("Only the last position is missing: the mask stops one short (offsets < n - 1?). "
                "Positions run 0 … n − 1, so the mask is offsets < n.")
    if first == block:
        return ("Only the first block was written: every program wrote positions 0 … BLOCK − 1 "
                "(tl.program_id(1), or a mask offsets < BLOCK?). Program p's offsets start at "
                "p * BLOCK, and the mask is offsets < n.")
    if stride_x > 1 and first == triton_cdiv(n, stride_x):
        return (f"Positions from {first} on (n / stride_x) were switched off: the mask compares "
                "offsets * stride_x with n. The mask counts positions, offsets < n; the stride "
                "belongs in the address only.")
    if first == triton_cdiv(n, block) - 1 + block:
        return ("The programs overlap and stop early: offsets = tl.program_id(0) + "
                "tl.arange(0, BLOCK) forgets to multiply the program id by BLOCK.")
    return ("The positions past them were never switched on: offsets = tl.program_id(0) * BLOCK "
            "+ tl.arange(0, BLOCK), masked by offsets < n, over cdiv(n, BLOCK) programs.")


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_axpy(kernel):
    require_function(kernel, "axpy_kernel")
    for seed, (n, block, sx, sy, a) in enumerate(_Q1_FIXTURES):
        x, y, out, what = _q1_case(kernel, n, block, sx, sy, a, seed)
        expected = a * x + y
        if torch.allclose(out, expected, atol=1e-5, equal_nan=False):
            continue
        unwritten = _unwritten(out)
        if unwritten and torch.isnan(out[:min(block, n)]).all() and n > block:
            raise Wrong(f"{what}: {unwritten}, the whole first block: the program id is off by "
                        "one. Program 0 handles positions 0 .. BLOCK-1: offsets = pid * BLOCK + "
                        "tl.arange(0, BLOCK).")
        if unwritten:
            raise Wrong(f"{what}: {unwritten}. {_q1_unwritten(out, n, block, sx)}")
        x_flat = x.as_strided((n,), (1,))      # what a kernel that ignores the stride reads
        y_flat = y.as_strided((n,), (1,))
        for name, guess in (("stride_x", a * x_flat + y), ("stride_y", a * x + y_flat),
                            ("stride_x and stride_y", a * x_flat + y_flat)):
            if torch.allclose(out, guess, atol=1e-5, equal_nan=True):
                tensors = " and ".join(f"element i of {v} is at {v}_ptr + i * stride_{v}"
                                       for v in "xy" if f"stride_{v}" in name)
                raise Wrong(f"{what}: wrong stride: your kernel reads neighbouring elements, "
                            f"not every {name}-th one. Multiply the offsets by {name} when you "
                            f"load: {tensors}.")
        if torch.allclose(out, x + a * y, atol=1e-5):
            raise Wrong(f"{what}: you computed x + a * y; the exercise asks for a * x + y.")
        if torch.allclose(out, a * (x + y), atol=1e-5):
            raise Wrong(f"{what}: you computed a * (x + y); the exercise asks for a * x + y.")
        if torch.allclose(out, (a * x + y).half().float(), atol=1e-5):
            raise Wrong(f"{what}: right to float16's precision only: the result went through "
                        "float16. Keep float32 from load to store.")
        fitted = float(((out - y) * x).sum() / (x * x).sum())
        if abs(fitted - a) > 1e-3 and abs(fitted) > 1e-3 and \
                torch.allclose(out, fitted * x + y, atol=1e-4):
            raise Wrong(f"{what}: you computed {fitted:g} * x + y, but a is {a} here: use the "
                        "argument a, not a number.")
        _compiled(kernel, (x, y, out, n, sx, sy, a), {"BLOCK": block}, what)  # a cause there?
        worst = int((out - expected).abs().argmax())
        raise Wrong(f"{what}: out[{worst}] is {out[worst].item():.4g}, expected "
                    f"{expected[worst].item():.4g} (a * x + y with a = {a}).")
    note = _compiled(kernel, (x, y, out, n, sx, sy, a), {"BLOCK": block}, what)
    return (f"right on {len(_Q1_FIXTURES)} launches: ragged sizes, one smaller than a block, "
            "strided x and y, and no address outside the tensors." + note)


q1 = Exercise("ep12.q1", _check_axpy,
              hint=("Which positions does program `pid` own, and which of them exist when n is "
                    "not a multiple of BLOCK? Where in memory is element i of a strided x?",
                    "offsets = program id × BLOCK + arange(BLOCK); mask = offsets < n; load x at "
                    "x_ptr + offsets × stride_x and y likewise, with the mask; store a·x + y at "
                    "out_ptr + offsets with the same mask."),
              solution=solution_link(NOTEBOOK))


# --- q2: a fused kernel, and the bytes it saves ---------------------------------------------

_Q2_FIXTURES = [  # rows, cols, extra columns in x's rows, extra in residual's, scale
    (6, 100, 0, 0, 2.0),
    (5, 37, 11, 0, -0.5),      # x is a slice of wider rows; a negative scale
    (3, 64, 0, 7, 1.5),        # the residual is the strided one
]
ELEMENTWISE_STEPS = "x + residual, relu, * scale"


def _rows(values: torch.Tensor, extra: int) -> torch.Tensor:
    rows, cols = values.shape
    wide = torch.full((rows, cols + extra), FILLER)
    wide[:, :cols] = values
    return _spaced(wide).view(rows, cols + extra)[:, :cols]


def _check_fused(kernel, bytes_saved):
    require_function(kernel, "add_relu_scale_kernel")
    require_function(bytes_saved, "bytes_saved")
    for seed, (rows, cols, ex, er, scale) in enumerate(_Q2_FIXTURES):
        gen = torch.Generator().manual_seed(10 + seed)
        x = _rows(torch.randn(rows, cols, generator=gen), ex)
        r = _rows(torch.randn(rows, cols, generator=gen), er)
        out = _rows(torch.full((rows, cols), float("nan")), 3)
        block = 1 << (cols - 1).bit_length()
        what = (f"add_relu_scale_kernel[({rows},)] on {rows} × {cols} rows "
                f"(stride_x={x.stride(0)}, stride_r={r.stride(0)}, scale={scale})")
        _launch(kernel, (rows,), (x, r, out, cols, x.stride(0), r.stride(0), out.stride(0), scale),
                what, BLOCK=block)
        expected = torch.relu(x + r) * scale
        if torch.allclose(out, expected, atol=1e-5):
            continue
        unwritten = _unwritten(out)
        packed = out.as_strided((rows, cols), (cols, 1))      # rows n_cols apart in out's memory
        if torch.allclose(packed, expected, atol=1e-5):
            raise Wrong(f"{what}: you stored row r at out_ptr + r * n_cols (or with x's stride), "
                        f"but out's rows are stride_out = {out.stride(0)} elements apart: "
                        "out_ptr + row * stride_out + cols.")
        if unwritten:
            raise Wrong(f"{what}: {unwritten}. One program per row: row = tl.program_id(0), "
                        "columns tl.arange(0, BLOCK) masked by cols < n_cols.")
        fitted = float((out * torch.relu(x + r)).sum() / (torch.relu(x + r) ** 2).sum())
        if abs(fitted - scale) > 1e-3 and abs(fitted) > 1e-3 and \
                torch.allclose(out, torch.relu(x + r) * fitted,
                                                         atol=1e-4):
            raise Wrong(f"{what}: you scaled by {fitted:g}, but scale is {scale} here: use the "
                        "argument scale, not a number.")
        if torch.allclose(out, torch.relu((x + r) * scale), atol=1e-5):
            raise Wrong(f"{what}: you scaled before the ReLU; with scale = {scale} that differs. "
                        "The order is relu(x + residual), then * scale.")
        if torch.allclose(out, (torch.relu(x) + r) * scale, atol=1e-5):
            raise Wrong(f"{what}: you applied the ReLU to x alone; add the residual first.")
        # with a negative scale this equals scaling first, named above
        if torch.allclose(out, torch.minimum(x + r, torch.zeros(())) * scale, atol=1e-5):
            raise Wrong(f"{what}: you kept the smaller of the sum and 0: the ReLU keeps the "
                        "larger, tl.maximum(v, 0.0).")
        flat = lambda t: t.as_strided(t.shape, (t.shape[1], 1))   # noqa: E731 - rows n_cols apart
        for name, guess in (("stride_x", torch.relu(flat(x) + r) * scale),
                            ("stride_r", torch.relu(x + flat(r)) * scale)):
            if torch.allclose(out, guess, atol=1e-5, equal_nan=True):
                raise Wrong(f"{what}: wrong stride: your rows start n_cols apart, but this "
                            f"tensor's rows are {name} = {x.stride(0) if name == 'stride_x' else r.stride(0)} "
                            f"elements apart. Row r starts at ptr + r * {name}.")
        _compiled(kernel, (x, r, out, cols, x.stride(0), r.stride(0), out.stride(0), scale),
                  {"BLOCK": block}, what)                # a construct the compiler refuses?
        worst = divmod(int((out - expected).abs().argmax()), cols)
        raise Wrong(f"{what}: out{list(worst)} is {out[worst].item():.4g}, expected "
                    f"{expected[worst].item():.4g} = relu(x + residual) * scale.")
    note = _compiled(kernel, (x, r, out, cols, x.stride(0), r.stride(0), out.stride(0), scale),
                     {"BLOCK": block}, what)
    _check_bytes(bytes_saved)
    return ("a fused kernel right on strided rows, and the bytes: eager PyTorch moves 7 tensors' "
            "worth (three kernels), the fused one 3, so it saves 4 × rows × cols × itemsize." + note)


_Q2_BYTES = [(1024, 4096, 4), (300, 77, 2), (8, 8, 4)]


def _check_bytes(bytes_saved):
    for rows, cols, itemsize in _Q2_BYTES:
        what = f"bytes_saved({rows}, {cols}, {itemsize})"
        got = as_number(what, _call(bytes_saved, rows, cols, itemsize, what=what))
        n = rows * cols
        if got == 4 * n * itemsize:
            continue
        ratio = got / (n * itemsize)
        if got == 4 * n:
            raise Wrong(f"{what} returned {got:g}: elements, not bytes. Multiply by the itemsize "
                        f"({itemsize} bytes per element).")
        if got == 4 * rows * cols * 4 and itemsize != 4:
            raise Wrong(f"{what} returned {got:g}: you assumed 4 bytes per element; use itemsize.")
        n_bytes = 4 * n * itemsize
        for value, why in ((n_bytes / 1e6, "megabytes, not bytes: return the number of bytes"),
                           (n_bytes * 8, "bits, not bytes: a byte is 8 bits"),
                           (4 / 7, "a fraction of eager's traffic, not a number of bytes")):
            if abs(got - value) <= 1e-6 * abs(value):
                raise Wrong(f"{what} returned {got:g}: {why}.")
        named = {7: "everything the eager chain moves; subtract what the fused kernel moves (3)",
                 3: "what the fused kernel moves, or eager's traffic with one read missing (the "
                    "add reads x and the residual). The question is what fusing saves: eager "
                    "(3 + 2 + 2) minus fused (2 + 1)",
                 -4: "fused minus eager: the other way round",
                 2: "half of what fusing saves: two intermediate tensors (after the add and after "
                    "the ReLU) are each written once and read once; did you count one of them, or "
                    "only their writes, or only their reads?",
                 5: "a count that misses one read: the add reads x and the residual, the ReLU and "
                    "the scaling read one tensor each"}
        for k, why in named.items():
            if abs(ratio - k) < 1e-9:
                raise Wrong(f"{what} returned {got:g} = {ratio:g} × rows × cols × itemsize: {why}.")
        raise Wrong(f"{what} returned {got:g}; count each kernel's reads and writes of a "
                    f"{rows} × {cols} tensor ({ELEMENTWISE_STEPS}: eager is three kernels).")


q2 = Exercise("ep12.q2", _check_fused,
              hint=("Where does row r of a tensor start when its rows are not packed? And for the "
                    "bytes: which tensors does each of eager PyTorch's three kernels read and "
                    "write, and which does the fused kernel?",
                    "One program per row: row = program id, cols = arange(BLOCK) masked by n_cols; "
                    "load at ptr + row × stride + cols for x and the residual, compute relu then "
                    "scale, store at out_ptr + row × stride_out + cols. Eager moves 3 + 2 + 2 "
                    "tensors, fused 2 + 1; multiply the difference by rows × cols × itemsize."),
              solution=solution_link(NOTEBOOK))


# --- q3: a tiled matmul with a bias and ReLU, accumulated in float32 -----------------------

_Q3_FIXTURES = [  # M, N, K, B transposed?, out a transposed view?, (BM, BN, BK)
    (40, 24, 200, False, False, (16, 16, 16)),
    (33, 17, 50, True, False, (16, 16, 16)),   # ragged in every direction; B a transposed view
    (16, 48, 16, False, True, (16, 16, 16)),   # out a transposed view: its strides count
    (45, 40, 70, False, False, (32, 16, 32)),  # other blocks: none may be written as 16
]


def _check_linear(kernel):
    require_function(kernel, "linear_relu_kernel")
    for seed, (M, N, K, transposed, out_t, (BM, BN, BK)) in enumerate(_Q3_FIXTURES):
        gen = torch.Generator().manual_seed(20 + seed)
        x = _spaced(torch.randn(M, K, generator=gen).half()).view(M, K)
        w = torch.randn(N, K, generator=gen).half()
        w = _spaced(w).view(N, K).t() if transposed else _spaced(w.t().contiguous()).view(K, N)
        b = _spaced(torch.randn(N, generator=gen))
        out = (_spaced(torch.full((N, M), float("nan"))).view(N, M).t() if out_t else
               _spaced(torch.full((M, N), float("nan"))).view(M, N))
        what = (f"linear_relu_kernel on M={M}, N={N}, K={K}, BM={BM}, BN={BN}, BK={BK}" +
                (" with w a transposed view" if transposed else "") +
                (f" and out a transposed view (strides {out.stride()})" if out_t else ""))
        grid = (triton_cdiv(M, BM), triton_cdiv(N, BN))
        _launch(kernel, grid, (x, w, b, out, M, N, K, *x.stride(), *w.stride(), *out.stride()),
                what, BM=BM, BN=BN, BK=BK)
        exact = x.float() @ w.float()
        expected = torch.relu(exact + b)
        scale = expected.abs().max().item()
        error = (out - expected).abs().max().item()
        if error <= 1e-4 * scale:
            continue
        unwritten = _unwritten(out)
        packed = out.as_strided((M, N), (N, 1))
        if out_t and torch.allclose(packed, expected, atol=1e-2 * scale):
            raise Wrong(f"{what}: you stored as if out were contiguous (row r at r * N): "
                        "use its strides, out_ptr + rows * stride_om + cols * stride_on.")
        if unwritten:
            raise Wrong(f"{what}: {unwritten}. Program (i, j) computes the tile of rows "
                        "i·BM … and columns j·BN …: program_id(0) for rows, program_id(1) for "
                        "columns, as the grid (cdiv(M, BM), cdiv(N, BN)) has them, with the "
                        "block sizes the launch passes (BM, BN, BK), not fixed numbers.")
        if error <= 5e-2 * scale:
            raise Wrong(f"{what}: off by up to {error:.3g} (results are up to {scale:.3g}): a "
                        "16-bit accumulator. Summing hundreds of products in float16 loses "
                        "digits; start from tl.zeros((BM, BN), dtype=tl.float32) and keep the "
                        "sum in float32 until the store.")
        last = (K - 1) // BK * BK                         # where the last slab along K starts
        last_slab = x[:, last:].float() @ w[last:].float()
        for guess, why in (
                (torch.relu(exact.half().float() + b), "the sum rounded to float16 before "
                 "the bias and the ReLU: keep it in float32 until the store"),
                (torch.relu(exact) + b, "the ReLU before the bias: add b first, then take "
                                        "the ReLU of the sum"),
                (torch.minimum(exact + b, torch.zeros(())), "the smaller of the value and 0 "
                 "(tl.minimum): the ReLU keeps the larger, tl.maximum(v, 0.0)"),
                (torch.relu(last_slab + b), "only the last slab along K: acc = tl.dot(...) "
                 "replaces the sum each time round; it must add, acc += tl.dot(...)"),
                (torch.relu(exact - last_slab + b), "every slab but the last along K: the loop "
                 "must run while k < K, range(0, K, BK), with the last slab masked")):
            if torch.allclose(out, guess, atol=1e-2 * scale):
                raise Wrong(f"{what}: you computed {why}.")
        if torch.allclose(out, exact + b, atol=1e-2 * scale):
            raise Wrong(f"{what}: the ReLU is missing: negative results must become 0.")
        if torch.allclose(out, torch.relu(exact), atol=1e-2 * scale):
            raise Wrong(f"{what}: the bias is missing: add b[columns] to each row.")
        raise Wrong(f"{what}: results differ from relu(x @ w + b) by up to {error:.3g} (results "
                    f"up to {scale:.3g}). With w a transposed view, use both of w's strides; "
                    "with K not a multiple of BK, mask the last slab in K.")
    note = _compiled(kernel, (x, w, b, out, M, N, K, *x.stride(), *w.stride(), *out.stride()),
                     {"BM": BM, "BN": BN, "BK": BK}, what, needs_dot=True)
    return ("right on ragged shapes and a transposed w, with a float32 accumulator: tl.dot on "
            "tensor cores from sm_80, on FMAs on a T4 (section 5)." + note)


q3 = Exercise("ep12.q3", _check_linear,
              hint=("Which tile of the output is program (i, j)'s, which slabs along K does it "
                    "add up, and in what precision does the sum live?",
                    "rows = i·BM + arange(BM), cols = j·BN + arange(BN); loop k over K in steps "
                    "of BK, load masked slabs of x and w with their strides, acc += tl.dot(...) "
                    "with acc float32 from tl.zeros; after the loop add the bias of the columns, "
                    "take the ReLU, store with a mask on rows and columns."),
              solution=solution_link(NOTEBOOK))


# --- q4: block sums in shared memory, in Numba ------------------------------------------------

TPB = 16                                   # threads per block the check launches with
UNWRITTEN = np.float32(3.0e38)             # what out holds where no thread wrote
_Q4_FIXTURES = [50, 16, 37]   # n (Numba copies only contiguous arrays to a GPU, so no strides)


def _simulated(kernel):
    """The learner's ``@cuda.jit`` kernel as the CUDA simulator runs it."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if isinstance(kernel, FakeCUDAKernel):
        return kernel
    fn = getattr(kernel, "py_func", None)
    if fn is None:
        raise Wrong(f"expected a @cuda.jit kernel, got {describe(kernel)}: put @cuda.jit "
                    "above its def.")
    return FakeCUDAKernel(fn, device=False)


def _check_block_sums(kernel):
    require_function(kernel, "block_sums")
    runnable = _simulated(kernel)
    tpb = getattr(getattr(runnable, "fn", None), "__globals__", {}).get("TPB", TPB)
    if tpb != TPB:
        raise Wrong(f"your TPB is {tpb!r}; the check launches {TPB} threads per block: keep "
                    f"TPB = {TPB}.")
    for seed, n in enumerate(_Q4_FIXTURES):
        x = np.random.default_rng(30 + seed).standard_normal(n).astype(np.float32)
        blocks = -(-n // TPB)
        expected = np.array([x[i * TPB:(i + 1) * TPB].sum() for i in range(blocks)])
        what = f"block_sums[{blocks}, {TPB}] on {n} values"
        results = {}
        for order in ("forward", "reverse"):
            out = np.full(blocks, UNWRITTEN, dtype=np.float32)
            try:
                with kernels.thread_order(order, races=True):
                    runnable[blocks, TPB](x, out)
            except IndexError as exc:
                raise Wrong(f"{what}: {_index_error(exc, n, blocks)}") from None
            except (kernels.DivergentBarrier, kernels.SharedRace) as exc:
                raise Wrong(f"{what}: {exc}") from None
            except (kernels.RunawayKernel, TimeoutError) as exc:
                raise Wrong(f"{what}: {exc}") from None
            except Exception as exc:     # noqa: BLE001 - the learner's kernel may raise anything
                if "____" in str(exc) or "_Blank" in str(exc):
                    raise NotDone("your kernel still uses ____: replace it with your code.") from None
                raise Wrong(f"{what} raised {type(exc).__name__}: {str(exc)[:300]}") from None
            results[order] = out
        right = {order: np.allclose(out, expected, atol=1e-4) for order, out in results.items()}
        if all(right.values()):
            continue
        if any(right.values()) or not np.allclose(results["forward"], results["reverse"],
                                                  atol=1e-4, equal_nan=True):
            raise Wrong(f"{what}: a race. With the threads of each block run in index order the "
                        f"sums are {_show(results['forward'])}, in reverse order "
                        f"{_show(results['reverse'])}; expected {_show(expected)}. A thread "
                        "reads shared memory another thread writes: put cuda.syncthreads() "
                        "between every write to the shared array and the reads that need it, "
                        "including inside the loop.")
        got = results["forward"]
        if (got == UNWRITTEN).any():
            raise Wrong(f"{what}: out[{int(np.flatnonzero(got == UNWRITTEN)[0])}] was never "
                        "written: one thread of each block (thread 0) writes the block's sum to "
                        "out[cuda.blockIdx.x].")
        if np.isnan(got).any():
            raise Wrong(f"{what}: out[{int(np.flatnonzero(np.isnan(got))[0])}] is NaN: the sum "
                        "read an element of the shared array that no thread wrote. Every "
                        "thread writes its element, those past the end of x a 0 "
                        "(x[i] if i < x.size else 0).")
        tree = [x[b * TPB:(b + 1) * TPB] for b in range(blocks)]
        even = np.array([np.pad(t, (0, TPB - t.size))[::2].sum() for t in tree])
        if np.allclose(got, even, atol=1e-4):
            raise Wrong(f"{what}: each sum holds only the even-numbered elements: the last "
                        "halving step, step 1 (shared[0] += shared[1]), never ran. Does the "
                        "loop stop at step > 1, or does thread 0 write out before the loop ends?")
        truncated = np.array([np.trunc(t).sum() for t in tree])
        if np.allclose(got, truncated, atol=1e-4):
            raise Wrong(f"{what}: sums of the values cut to whole numbers: the shared array "
                        "holds integers. Give it dtype=np.float32.")
        if blocks > 1 and np.allclose(got, expected[0], atol=1e-4):
            raise Wrong(f"{what}: every block summed the first {TPB} values: block b starts at "
                        "b * blockDim.x (cuda.grid(1) gives the global index).")
        raise Wrong(f"{what}: sums {_show(got)}, expected {_show(expected)}.")
    return (f"right in both thread orders on {len(_Q4_FIXTURES)} vectors (ragged and whole "
            "blocks), and every thread of a block reaches the same barriers.")


def _index_error(exc: IndexError, n: int, blocks: int) -> str:
    """Which array a simulated thread indexed past, told by the size the simulator names."""
    import re

    found = re.search(r"index (-?\d+) is out of bounds for axis \d+ with size (\d+)", str(exc))
    index, size = (int(found.group(1)), int(found.group(2))) if found else (None, None)
    where = f"the simulator stopped a thread that indexed past the end ({exc})."
    if size == n:
        return (f"{where} That is x, of {n} values: the last block's threads past the end of x "
                "must not read it; give them 0 instead (x[i] if i < x.size else 0).")
    if size == TPB:
        return (f"{where} That is the shared array, of {TPB}: a thread read shared[t + step] "
                f"with t + step ≥ {TPB}. Only threads t < step add, and step starts at "
                f"TPB // 2.")
    if size == blocks:
        return (f"{where} That is out, one value per block ({blocks}): write "
                "out[cuda.blockIdx.x], the block's number, not the thread's global index.")
    return f"{where} Which index could reach {index}?"


def _show(values) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in np.asarray(values)[:4]) + \
        (", …]" if len(values) > 4 else "]")


q4 = Exercise("ep12.q4", _check_block_sums,
              hint=("Which element does each thread copy into shared memory, what should a "
                    "thread past the end of x copy, and when may a thread read what another one "
                    "wrote?",
                    "i = cuda.grid(1); t = cuda.threadIdx.x; shared[t] = x[i] if i < x.size "
                    "else 0; syncthreads; then halve a step s from TPB // 2: threads t < s add "
                    "shared[t + s] into shared[t], with a syncthreads after each step; thread 0 "
                    "writes shared[0] to out[cuda.blockIdx.x]."),
              solution=solution_link(NOTEBOOK))
