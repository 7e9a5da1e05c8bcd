"""Episode 12's checks, three ways: right kernels pass, stubs are "not done", wrong kernels teach.

Every kernel below runs in Triton's interpreter or Numba's CUDA simulator on the CPU, as the
checks run a learner's. The wrong ones are the mistakes the exercises are about: a missing mask,
a stride ignored, a program id off by one, bfloat16 in the interpreter, a 16-bit accumulator, a
missing ``syncthreads`` (a race), a missing bounds check, bytes counted as elements.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")      # before triton is first imported
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from numba import cuda  # noqa: E402

from gpucourse.checks import ep12  # noqa: E402
from gpucourse.exercises import ____  # noqa: E402

from checking import assert_wrong, outcome  # noqa: E402


# --- q1: a * x + y ------------------------------------------------------------------------------

@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * stride_x, mask=mask)
    y = tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, a * x + y, mask=mask)


@triton.jit
def axpy_no_mask(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets,
             a * tl.load(x_ptr + offsets * stride_x) + tl.load(y_ptr + offsets * stride_y))


@triton.jit
def axpy_store_mask_only(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = a * tl.load(x_ptr + offsets * stride_x) + tl.load(y_ptr + offsets * stride_y)
    tl.store(out_ptr + offsets, v, mask=offsets < n)


@triton.jit
def axpy_no_stride_x(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = a * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, v, mask=mask)


@triton.jit
def axpy_no_stride_y(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = a * tl.load(x_ptr + offsets * stride_x, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, v, mask=mask)


@triton.jit
def axpy_no_strides(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = a * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, v, mask=mask)


@triton.jit
def axpy_pid_plus_one(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = (tl.program_id(0) + 1) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = a * tl.load(x_ptr + offsets * stride_x, mask=mask) + \
        tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, v, mask=mask)


@triton.jit
def axpy_no_block(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) + tl.arange(0, BLOCK)
    mask = offsets < n
    v = a * tl.load(x_ptr + offsets * stride_x, mask=mask) + \
        tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, v, mask=mask)


@triton.jit
def axpy_bf16(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * stride_x, mask=mask).to(tl.bfloat16)
    y = tl.load(y_ptr + offsets * stride_y, mask=mask).to(tl.bfloat16)
    tl.store(out_ptr + offsets, (a * x + y).to(tl.float32), mask=mask)


@triton.jit
def axpy_swapped(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = tl.load(x_ptr + offsets * stride_x, mask=mask) + \
        a * tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, v, mask=mask)


@triton.jit
def axpy_a_is_two(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = 2.0 * tl.load(x_ptr + offsets * stride_x, mask=mask) + \
        tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, v, mask=mask)


@triton.jit
def axpy_stub(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = ____
    tl.store(out_ptr + offsets, a, mask=offsets < n)


@triton.jit
def axpy_mask_le(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets <= n
    x = tl.load(x_ptr + offsets * stride_x, mask=mask)
    y = tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, a * x + y, mask=mask)


@triton.jit
def axpy_while_forever(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    start = 0
    while start < BLOCK:            # start never grows
        x = tl.load(x_ptr + offsets * stride_x, mask=mask)
    tl.store(out_ptr + offsets, a * x, mask=mask)


@triton.jit
def axpy_float_a(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * stride_x, mask=mask)
    y = tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, float(a) * x + y, mask=mask)     # Python's float() on a scalar


LANES = 128        # a plain global: the interpreter reads it, Triton's compiler does not


@triton.jit
def axpy_plain_global(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = (offsets < n) & (offsets < n + LANES)
    x = tl.load(x_ptr + offsets * stride_x, mask=mask)
    y = tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, a * x + y, mask=mask)


def test_q1_right():
    assert outcome(ep12.q1, axpy)[0] == "correct"


def test_q1_not_done():
    assert outcome(ep12.q1, ____)[0] == "not-done"
    assert outcome(ep12.q1, axpy_stub)[0] == "not-done"


@pytest.mark.parametrize("kernel, words", [
    (axpy_no_mask, ["outside every tensor", "past the end", "no mask"]),
    (axpy_store_mask_only, ["loads", "mask"]),
    (axpy_no_stride_x, ["wrong stride", "stride_x"]),
    (axpy_no_stride_y, ["wrong stride", "stride_y"]),
    (axpy_no_strides, ["wrong stride", "stride_x"]),
    (axpy_pid_plus_one, ["off by one", "first block"]),
    (axpy_no_block, ["never written", "multiply the program id by BLOCK"]),
    (axpy_bf16, ["bfloat16", "16-bit integers"]),
    (axpy_swapped, ["x + a * y"]),
    (axpy_a_is_two, ["a is -0.5", "use the argument a"]),
    (lambda *args: None, ["@triton.jit"]),
], ids=lambda v: getattr(getattr(v, "fn", v), "__name__", "")[:30])
def test_q1_wrong(kernel, words):
    assert_wrong(ep12.q1, (kernel,), words)


@pytest.mark.parametrize("kernel, words", [
    (axpy_mask_le, ["one lane too many", "<= where < belongs"]),
    (axpy_while_forever, ["never ends", "5,000 lines"]),
    # the interpreter hands the kernel a Python number, so float(a) works there; compiled,
    # a is a tensor: this kernel passed every interpreted launch and could not run on a GPU
    (axpy_float_a, ["compiler refuses", "float()", "sm_75"]),
    (axpy_plain_global, ["compiler refuses", "global variable LANES", "constexpr"]),
], ids=lambda v: getattr(getattr(v, "fn", v), "__name__", "")[:30])
def test_q1_mistakes_the_interpreter_alone_let_through_or_hung(kernel, words):
    assert_wrong(ep12.q1, (kernel,), words)


# --- q2: a fused kernel and the bytes it saves ----------------------------------------------

@triton.jit
def fused(x_ptr, r_ptr, out_ptr, n_cols, stride_x, stride_r, stride_out, scale,
          BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride_x + cols, mask=mask) + \
        tl.load(r_ptr + row * stride_r + cols, mask=mask)
    tl.store(out_ptr + row * stride_out + cols, tl.maximum(v, 0.0) * scale, mask=mask)


@triton.jit
def fused_no_mask(x_ptr, r_ptr, out_ptr, n_cols, stride_x, stride_r, stride_out, scale,
                  BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride_x + cols) + tl.load(r_ptr + row * stride_r + cols)
    tl.store(out_ptr + row * stride_out + cols, tl.maximum(v, 0.0) * scale)


@triton.jit
def fused_packed_x(x_ptr, r_ptr, out_ptr, n_cols, stride_x, stride_r, stride_out, scale,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * n_cols + cols, mask=mask) + \
        tl.load(r_ptr + row * stride_r + cols, mask=mask)
    tl.store(out_ptr + row * stride_out + cols, tl.maximum(v, 0.0) * scale, mask=mask)


@triton.jit
def fused_packed_r(x_ptr, r_ptr, out_ptr, n_cols, stride_x, stride_r, stride_out, scale,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride_x + cols, mask=mask) + \
        tl.load(r_ptr + row * n_cols + cols, mask=mask)
    tl.store(out_ptr + row * stride_out + cols, tl.maximum(v, 0.0) * scale, mask=mask)


@triton.jit
def fused_scale_first(x_ptr, r_ptr, out_ptr, n_cols, stride_x, stride_r, stride_out, scale,
                      BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride_x + cols, mask=mask) + \
        tl.load(r_ptr + row * stride_r + cols, mask=mask)
    tl.store(out_ptr + row * stride_out + cols, tl.maximum(v * scale, 0.0), mask=mask)


@triton.jit
def fused_relu_x_only(x_ptr, r_ptr, out_ptr, n_cols, stride_x, stride_r, stride_out, scale,
                      BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.maximum(tl.load(x_ptr + row * stride_x + cols, mask=mask), 0.0) + \
        tl.load(r_ptr + row * stride_r + cols, mask=mask)
    tl.store(out_ptr + row * stride_out + cols, v * scale, mask=mask)


@triton.jit
def fused_next_row(x_ptr, r_ptr, out_ptr, n_cols, stride_x, stride_r, stride_out, scale,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0) + 1
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride_x + cols, mask=mask) + \
        tl.load(r_ptr + row * stride_r + cols, mask=mask)
    tl.store(out_ptr + row * stride_out + cols, tl.maximum(v, 0.0) * scale, mask=mask)


def saved(rows, cols, itemsize):
    return 4 * rows * cols * itemsize


def saved_times(k, itemsize=True):
    return lambda rows, cols, size: k * rows * cols * (size if itemsize else 1)


def test_q2_right():
    assert outcome(ep12.q2, fused, saved)[0] == "correct"


def test_q2_not_done():
    assert outcome(ep12.q2, ____, saved)[0] == "not-done"
    assert outcome(ep12.q2, fused, ____)[0] == "not-done"
    assert outcome(ep12.q2, fused, lambda rows, cols, size: ____)[0] == "not-done"


@pytest.mark.parametrize("kernel, count, words", [
    (fused_no_mask, saved, ["outside every tensor", "no mask"]),
    (fused_packed_x, saved, ["wrong stride", "stride_x"]),
    (fused_packed_r, saved, ["wrong stride", "stride_r"]),
    (fused_scale_first, saved, ["scaled before the ReLU"]),
    (fused_relu_x_only, saved, ["ReLU to x alone"]),
    (fused_next_row, saved, ["outside every tensor", "where it starts is wrong"]),
    (fused, saved_times(4, itemsize=False), ["elements, not bytes"]),
    (fused, saved_times(7), ["everything the eager chain moves"]),
    (fused, saved_times(3), ["what the fused kernel moves"]),
    (fused, saved_times(-4), ["the other way round"]),
    (fused, saved_times(2), ["two intermediate tensors", "one of them"]),
    (fused, lambda rows, cols, size: 16 * rows * cols, ["assumed 4 bytes", "itemsize"]),
    (fused, lambda rows, cols, size: "4 * N", ["should be a number"]),
    (fused, lambda rows, cols, size: 67_108_864, ["bytes_saved(300, 77, 2)"]),
], ids=lambda v: getattr(getattr(v, "fn", v), "__name__", "")[:30])
def test_q2_wrong(kernel, count, words):
    assert_wrong(ep12.q2, (kernel, count), words)


# --- q3: matmul, bias and ReLU -------------------------------------------------------------

ACC16 = RELU_OFF = BIAS_OFF = SWAP = NO_MASK_K = PACKED_W = BIAS_ROWS = BF16 = STORE16 = \
    ONE_SLAB = False       # the mistakes linear_kernel can make: each variant sets one in its globals


def _linear(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
            stride_om, stride_on, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    if SWAP:
        rows = tl.program_id(1) * BM + tl.arange(0, BM)
        cols = tl.program_id(0) * BN + tl.arange(0, BN)
    else:
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        cols = tl.program_id(1) * BN + tl.arange(0, BN)
    if ACC16 or ACC16_ZEROS:
        acc = tl.zeros((BM, BN), dtype=tl.float16)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    if PACKED_W:
        stride_wk = N
        stride_wn = 1
    last = BK if ONE_SLAB else K
    for k in range(0, last, BK):
        ks = k + tl.arange(0, BK)
        if NO_MASK_K:
            k_ok = ks >= 0
        else:
            k_ok = ks < K
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(rows[:, None] < M) & k_ok[None, :], other=0.0)
        w = tl.load(w_ptr + ks[:, None] * stride_wk + cols[None, :] * stride_wn,
                    mask=k_ok[:, None] & (cols[None, :] < N), other=0.0)
        if BF16:
            x = x.to(tl.bfloat16)
            w = w.to(tl.bfloat16)
        if ACC16:
            acc = tl.dot(x, w, acc, out_dtype=tl.float16)
        else:
            acc += tl.dot(x, w)
    v = acc.to(tl.float32)
    if not BIAS_OFF:
        if BIAS_ROWS:
            v += tl.load(b_ptr + rows, mask=rows < M, other=0.0)[:, None]
        else:
            v += tl.load(b_ptr + cols, mask=cols < N, other=0.0)[None, :]
    if not RELU_OFF:
        v = tl.maximum(v, 0.0)
    if STORE16:
        v = v.to(tl.float16).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, v,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def linear_kernel(**mistakes):
    """linear_relu_kernel with the chosen mistakes (names of the flags above) switched on."""
    import types

    flags = ("SWAP", "ACC16", "ACC16_ZEROS", "PACKED_W", "ONE_SLAB", "NO_MASK_K", "BF16",
             "BIAS_OFF", "BIAS_ROWS", "RELU_OFF", "STORE16")
    # tl.constexpr: Triton's compiler (which the check also runs) reads no plain global
    scope = dict(globals(), **{flag: tl.constexpr(mistakes.get(flag, False)) for flag in flags})
    fn = types.FunctionType(_linear.__code__, scope, "_linear")
    return triton.jit(fn)


def test_q3_right():
    assert outcome(ep12.q3, linear_kernel())[0] == "correct"


def test_q3_not_done():
    assert outcome(ep12.q3, ____)[0] == "not-done"


@pytest.mark.parametrize("mistake, words", [
    (dict(ACC16=True), ["16-bit accumulator", "float32"]),
    # the interpreter turns this float16 accumulator into float32 at the first +=, so it
    # computes right; Triton's compiler refuses it (a loop-carried type change)
    (dict(ACC16_ZEROS=True), ["16-bit accumulator", "compiler refuses", "tl.float32"]),
    (dict(STORE16=True), ["16-bit"]),
    (dict(RELU_OFF=True), ["ReLU is missing"]),
    (dict(BIAS_OFF=True), ["bias is missing"]),
    (dict(SWAP=True), ["never written", "program_id(0) for rows"]),
    (dict(NO_MASK_K=True), ["outside every tensor", "no mask"]),
    (dict(PACKED_W=True), ["strides"]),
    (dict(BIAS_ROWS=True), ["outside every tensor", "of b_ptr are on"]),
    (dict(BF16=True), ["bfloat16"]),
    (dict(ONE_SLAB=True), ["relu(x @ w + b)"]),
], ids=lambda v: ",".join(v) if isinstance(v, dict) else "")
def test_q3_wrong(mistake, words):
    assert_wrong(ep12.q3, (linear_kernel(**mistake),), words)


# --- q4: block sums in shared memory ------------------------------------------------------

TPB = 16


@cuda.jit
def block_sums(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_no_sync(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_no_sync_in_loop(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_no_bounds(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i]
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_thread_index(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    t = cuda.threadIdx.x
    shared[t] = x[t] if t < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_never_written(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    if t == 0 and cuda.blockIdx.x == 0:
        total = 0.0
        for j in range(TPB):
            total += shared[j]
        out[0] = total


@cuda.jit
def sums_step_too_big(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_half(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 4
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


def make_with_tpb(tpb):
    @cuda.jit
    def kernel(x, out):
        shared = cuda.shared.array(8, dtype=np.float32)
        t = cuda.threadIdx.x
        shared[t % 8] = 0.0
        out[0] = shared[0]
    kernel.py_func.__globals__  # the module's globals: TPB is read from there
    return kernel


def sums_python(x, out):
    out[:] = x.sum()


def test_q4_right():
    assert outcome(ep12.q4, block_sums)[0] == "correct"


def test_q4_not_done():
    assert outcome(ep12.q4, ____)[0] == "not-done"


@pytest.mark.parametrize("kernel, words", [
    (sums_no_sync, ["a race", "syncthreads"]),
    (sums_no_sync_in_loop, ["a race", "inside the loop"]),
    (sums_no_bounds, ["past the end", "tid=", "That is x", "i < x.size"]),
    (sums_thread_index, ["every block summed the first", "blockDim"]),
    (sums_never_written, ["never written", "out[cuda.blockIdx.x]"]),
    (sums_step_too_big, ["past the end", "the shared array", "t + step"]),
    (sums_half, ["expected"]),
    (sums_python, ["@cuda.jit"]),
], ids=lambda v: getattr(v, "__name__", "")[:30])
def test_q4_wrong(kernel, words):
    assert_wrong(ep12.q4, (kernel,), words)


@cuda.jit
def sums_barrier_in_if(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
            cuda.syncthreads()          # only the threads t < step reach it
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_early_return(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t >= step:
            return                      # the barriers below then miss these threads
        shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_step_never_halved(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step // 2                       # computed, never stored: the loop never ends
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_spin_without_barrier(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        step // 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_out_by_thread(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    out[i] = shared[0]                  # every thread, at its global index


@pytest.mark.parametrize("kernel, words", [
    # Numba's simulator releases a barrier once every *live* thread waits, so these two ran
    # to the right sums in both thread orders and passed; on a GPU they are undefined
    (sums_barrier_in_if, ["reached 5 syncthreads", "only 1", "inside an if"]),
    (sums_early_return, ["syncthreads", "return"]),
], ids=lambda v: getattr(v, "__name__", "")[:30])
def test_q4_a_barrier_not_every_thread_reaches_is_named(kernel, words):
    assert_wrong(ep12.q4, (kernel,), words)


@pytest.mark.parametrize("kernel, words", [
    (sums_step_never_halved, ["never ends", "halved"]),
    (sums_spin_without_barrier, ["5,000 lines", "never ends"]),
], ids=lambda v: getattr(v, "__name__", "")[:30])
def test_q4_a_loop_that_never_ends_is_stopped_by_counting(kernel, words):
    """Once a hang: the ordered run released the barrier for ever. Stopped by a count of
    barriers or lines, so the verdict is the same on a busy machine."""
    assert_wrong(ep12.q4, (kernel,), words)


def test_q4_names_the_array_indexed_past_its_end():
    assert_wrong(ep12.q4, (sums_out_by_thread,), ["That is out", "cuda.blockIdx.x"])


def test_q4_names_a_different_tpb(monkeypatch):
    monkeypatch.setitem(block_sums.py_func.__globals__, "TPB", 8)
    assert_wrong(ep12.q4, (block_sums,), ["TPB is 8", "16"])


@pytest.mark.parametrize("exercise", [ep12.q1, ep12.q2, ep12.q3, ep12.q4], ids=lambda q: q.name)
def test_hints_come_in_two_steps_without_code(exercise, capsys):
    exercise.hint()
    first = capsys.readouterr().out
    exercise.hint(2)
    second = capsys.readouterr().out
    assert "?" in first and "hint(2)" in first
    assert "tl.load(" not in second and "def " not in second and "@" not in second


# --- what an inside review's wrong answers found: each passed, hung or was misnamed before ------

@cuda.jit
def sums_barrier_in_each_branch(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
            cuda.syncthreads()
        else:
            cuda.syncthreads()          # as many barriers, but not the same ones
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_shared_plus_equals(x, out):
    shared = cuda.shared.array(1, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    if t == 0:
        shared[0] = 0.0
    cuda.syncthreads()
    shared[0] += x[i] if i < x.size else 0.0     # every thread: updates lost on a GPU
    cuda.syncthreads()
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_out_plus_equals(x, out):
    i = cuda.grid(1)
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x] = 0.0
    cuda.syncthreads()
    if i < x.size:
        out[cuda.blockIdx.x] += x[i]


@cuda.jit
def sums_atomic(x, out):
    acc = cuda.shared.array(1, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    if t == 0:
        acc[0] = 0.0
    cuda.syncthreads()
    if i < x.size:
        cuda.atomic.add(acc, 0, x[i])
    cuda.syncthreads()
    if t == 0:
        out[cuda.blockIdx.x] = acc[0]


@cuda.jit
def sums_no_else_zero(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    if i < x.size:
        shared[t] = x[i]
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_stop_at_two(x, out):
    shared = cuda.shared.array(TPB, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 1:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@cuda.jit
def sums_int_shared(x, out):
    shared = cuda.shared.array(TPB, dtype=np.int32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = shared[0]


@pytest.mark.parametrize("kernel, words", [
    (sums_barrier_in_each_branch, ["barrier number 5", "on line", "branch of an if"]),
    (sums_shared_plus_equals, ["writes the shared array[0]", "a race", "cuda.atomic.add"]),
    (sums_out_plus_equals, ["writes an argument[0]", "a race"]),
    (sums_no_else_zero, ["NaN", "no thread wrote", "else 0"]),
    (sums_stop_at_two, ["even-numbered", "step > 1"]),
    (sums_int_shared, ["whole numbers", "np.float32"]),
], ids=lambda v: getattr(v, "__name__", "")[:30])
def test_q4_review_answers_are_named(kernel, words):
    """The first three passed (threads run one at a time serialise a read-modify-write, and
    two barriers were counted as one); the rest got a bare "sums …, expected …"."""
    assert_wrong(ep12.q4, (kernel,), words)


def test_q4_an_atomic_sum_is_right():
    assert outcome(ep12.q4, sums_atomic)[0] == "correct"


@triton.jit
def linear_fixed_16(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk,
                    stride_wn, stride_om, stride_on, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr):
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    cols = tl.program_id(1) * 16 + tl.arange(0, 16)
    acc = tl.zeros((16, 16), dtype=tl.float32)
    for k in range(0, K, 16):
        ks = k + tl.arange(0, 16)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + ks[:, None] * stride_wk + cols[None, :] * stride_wn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(x, w)
    v = tl.maximum(acc + tl.load(b_ptr + cols, mask=cols < N, other=0.0)[None, :], 0.0)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, v,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def linear_out_packed(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk,
                      stride_wn, stride_om, stride_on, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        ks = k + tl.arange(0, BK)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + ks[:, None] * stride_wk + cols[None, :] * stride_wn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(x, w)
    v = tl.maximum(acc + tl.load(b_ptr + cols, mask=cols < N, other=0.0)[None, :], 0.0)
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], v,        # as the episode's C
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@pytest.mark.parametrize("kernel, words", [
    (linear_fixed_16, ["BM=32", "never written", "not fixed numbers"]),
    (linear_out_packed, ["out a transposed view", "stride_om"]),
], ids=lambda v: getattr(getattr(v, "fn", v), "__name__", "")[:30])
def test_q3_review_answers_that_passed_are_wrong(kernel, words):
    """Both passed: every case had blocks of 16 and a contiguous out."""
    assert_wrong(ep12.q3, (kernel,), words)


@triton.jit
def axpy_numpy_call(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * stride_x, mask=mask)
    y = tl.load(y_ptr + offsets * stride_y, mask=mask)
    tl.store(out_ptr + offsets, np.multiply(a, x) + y, mask=mask)


def test_q1_a_numpy_call_in_a_kernel_is_refused_as_the_compiler_refuses_it():
    """Passed, with "It also compiles": the compile step lacked the kernel's own `np`."""
    assert_wrong(ep12.q1, (axpy_numpy_call,), ["compiler refuses", "Unsupported function"])


@pytest.mark.parametrize("factor, words", [
    (1e-6, ["megabytes"]), (8, ["bits"]),
], ids=["megabytes", "bits"])
def test_q2_bytes_in_other_units_are_named(factor, words):
    def saved_in(rows, cols, itemsize):
        return 4 * rows * cols * itemsize * factor
    assert_wrong(ep12.q2, (fused, saved_in), words)


def _axpy_variant(offsets_rule: str, mask_rule: str, value: str):
    """An axpy kernel with the offsets, the mask and the stored value as given (Triton source)."""
    import importlib.util
    import pathlib
    import tempfile

    source = (
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def axpy_kernel(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, a, BLOCK: tl.constexpr):\n"
        f"    offsets = {offsets_rule}\n    mask = {mask_rule}\n"
        "    x = tl.load(x_ptr + offsets * stride_x, mask=mask)\n"
        "    y = tl.load(y_ptr + offsets * stride_y, mask=mask)\n"
        f"    tl.store(out_ptr + offsets, {value}, mask=mask)\n")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="axpy-"))
    path = folder / f"variant_{abs(hash(source))}.py"
    path.write_text(source)              # Triton reads a kernel's source from its file
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.axpy_kernel


RIGHT_OFFSETS = "tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)"


@pytest.mark.parametrize("offsets, mask, value, words", [
    (RIGHT_OFFSETS, "offsets < n - 1", "a * x + y", ["stops one short", "offsets < n"]),
    (RIGHT_OFFSETS, "offsets < BLOCK", "a * x + y", ["Only the first block"]),
    (RIGHT_OFFSETS, "offsets * stride_x < n", "a * x + y", ["offsets * stride_x with n"]),
    ("tl.program_id(0) + tl.arange(0, BLOCK)", "offsets < n", "a * x + y",
     ["forgets to multiply the program id by BLOCK"]),
    (RIGHT_OFFSETS, "offsets < n", "a * (x + y)", ["a * (x + y)"]),
    (RIGHT_OFFSETS, "offsets < n", "2.0 * x + y", ["use the argument a"]),
    (RIGHT_OFFSETS, "offsets < n", "(a * x + y).to(tl.float16)", ["float16"]),
], ids=["n-1", "block", "memory-units", "no-times-block", "a-times-sum", "fixed-a", "fp16"])
def test_q1_where_the_outputs_stop_names_the_mask_or_the_offsets(offsets, mask, value, words):
    """Each got one sentence about where programs start, or a bare 'expected', before."""
    assert_wrong(ep12.q1, (_axpy_variant(offsets, mask, value),), words)


@triton.jit
def fused_out_packed(x_ptr, r_ptr, out_ptr, n_cols, stride_x, stride_r, stride_out, scale,
                     BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride_x + cols, mask=mask) + \
        tl.load(r_ptr + row * stride_r + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, tl.maximum(v, 0.0) * scale, mask=mask)


def test_q2_out_stored_with_the_wrong_row_stride_is_named():
    """Was told 'One program per row', which it already was."""
    assert_wrong(ep12.q2, (fused_out_packed, saved), ["stride_out", "out_ptr + row * stride_out"])
