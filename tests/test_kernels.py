"""gpucourse.kernels and episode 12's own kernels.

Every Triton kernel of the episode (read from the notebook's cells) runs in the interpreter
against PyTorch, and is compiled for sm_75, sm_80 and sm_90 with its instruction mix asserted:
``tl.dot`` becomes FMAs on a T4, ``mma.sync`` on an A100 and ``wgmma`` on an H100, as the
feasibility model's capabilities say. The interpreter's guards (addresses, bfloat16), the
triton/numpy pairs, the set-up on a CPU and on a (fake) GPU, and the simulator's thread order
that exposes a race are tested on kernels of their own.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from numba import cuda  # noqa: E402

from conftest import ROOT  # noqa: E402
from gpucourse import kernels, tracebacks
from gpucourse.fakes import fakecuda  # noqa: E402

EPISODE = ROOT / "episodes" / "12-gpu-kernels.ipynb"


def _code_cells() -> list[str]:
    return ["".join(c["source"]) for c in json.loads(EPISODE.read_text())["cells"]
            if c["cell_type"] == "code"]


def _episode_kernels(tmp_path_factory):
    """The ``@triton.jit`` functions of the episode's code cells, imported from a file."""
    sources = []
    for cell in json.loads(EPISODE.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or "@triton.jit" not in source:
            continue
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d) == "triton.jit" for d in node.decorator_list):
                sources.append("@triton.jit\n" + ast.get_source_segment(source, node))
    path = tmp_path_factory.mktemp("episode12") / "episode_kernels.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + "\n\n\n".join(sources))
    spec = importlib.util.spec_from_file_location("episode_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    return _episode_kernels(tmp_path_factory)


def test_the_episode_has_the_kernels_it_teaches(episode):
    for name in ("add_kernel", "add_kernel_no_mask", "bias_gelu_kernel", "softmax_kernel",
                 "matmul_kernel"):
        assert hasattr(episode, name), f"episode 12 no longer defines {name}"


# --- the episode's kernels, right on the CPU -----------------------------------------------

def test_vector_add_is_right_on_a_ragged_size(episode):
    a, b = torch.randn(1000), torch.randn(1000)
    out = torch.full_like(a, float("nan"))
    kernels.interpreted(episode.add_kernel)[(4,)](a, b, out, 1000, BLOCK=256)
    assert torch.allclose(out, a + b)


def test_the_missing_mask_is_named_with_program_and_tensor(episode):
    a, b, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
    with pytest.raises(Exception) as caught:
        kernels.interpreted(episode.add_kernel_no_mask)[(4,)](a, b, out, 1000, BLOCK=256)
    guard = kernels.guard_error(caught.value)
    assert isinstance(guard, kernels.OutOfBounds), caught.value
    assert "program (3, 0, 0)" in str(guard) and "past the end of x_ptr" in str(guard)


def test_bias_gelu_follows_strides(episode):
    wide = torch.randn(7, 130)
    x, bias = wide[:, :100], torch.randn(100)
    out = torch.full((7, 100), float("nan"))
    kernels.interpreted(episode.bias_gelu_kernel)[(7,)](x, bias, out, 100, 130, 100, BLOCK=128)
    assert torch.allclose(out, torch.nn.functional.gelu(x + bias), atol=1e-5)


SOFTMAX = """
import sys, torch
from gpucourse import kernels
mode = kernels.setup(gpu_available=False)                # as the episode does, before triton
sys.path.insert(0, sys.argv[1])
import episode_kernels
wide = torch.randn(7, 130)
x, out = wide[:, :100], torch.full((7, 100), float("nan"))
episode_kernels.softmax_kernel[(7,)](x, out, 100, 130, 100, BLOCK=128)
print(mode.late, (out - x.softmax(1)).abs().max().item())
"""


def test_softmax_follows_strides_in_a_fresh_interpreter(episode):
    """Reductions (tl.max, tl.sum) need triton imported with the interpreter on: this test
    process imported it first (conftest), so the episode's order runs in a process of its own."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", SOFTMAX, os.path.dirname(episode.__file__)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    late, error = done.stdout.split()[-2:]
    assert late == "False" and float(error) < 1e-6


def test_setup_says_when_triton_came_first():
    mode = kernels.setup(gpu_available=False)            # conftest imported triton first
    assert mode.late == (not kernels.library_interpreted())
    if mode.late:
        assert "tl.max or tl.sum fail" in mode.describe()


def test_matmul_is_right_on_ragged_shapes_and_a_transposed_view(episode):
    A = torch.randn(37, 50).half()
    B = torch.randn(21, 50).half().t()
    C = torch.full((37, 21), float("nan"))
    kernels.interpreted(episode.matmul_kernel)[(3, 2)](A, B, C, 37, 21, 50, *A.stride(),
                                                       *B.stride(), BM=16, BN=16, BK=16)
    assert torch.allclose(C, A.float() @ B.float(), atol=1e-3)


# --- what they become on three GPUs --------------------------------------------------------

@pytest.fixture(scope="module")
def mixes(episode):
    a16, f32 = torch.empty(1, dtype=torch.float16), torch.empty(1)
    examples = {"add_kernel": ((f32, f32, f32, 1), dict(BLOCK=256)),
                "softmax_kernel": ((f32, f32, 1, 1, 1), dict(BLOCK=1024)),
                "bias_gelu_kernel": ((f32, f32, f32, 1, 1, 1), dict(BLOCK=1024)),
                "matmul_kernel": ((a16, a16, f32, *[1] * 7), dict(BM=64, BN=64, BK=32))}
    jobs = [(getattr(episode, name), cc, args, consts)
            for name, (args, consts) in examples.items() for cc in kernels.TARGETS.values()]
    ptx = kernels.compile_many(jobs)
    return {(job[0].fn.__name__, job[1]): kernels.instruction_mix(text)
            for job, text in zip(jobs, ptx)}


@pytest.mark.parametrize("gpu", list(kernels.TARGETS))
def test_tl_dot_becomes_what_the_feasibility_model_says(mixes, gpu):
    cc = kernels.TARGETS[gpu]
    mix = mixes[("matmul_kernel", cc)]
    expected = {"T4": "CUDA cores (fma)", "A100": "tensor cores (mma.sync)",
                "H100": "tensor cores (wgmma)"}[gpu]
    assert kernels.dot_unit(mix) == expected, mix
    assert kernels.tensor_core_dot(cc) == (mix["mma.sync"] + mix["wgmma.mma_async"] > 0)
    if gpu == "T4":
        assert mix["fma.rn.f32"] >= 64 * 64 * 32 // 128, mix   # the whole tile, one thread's share
        assert mix["mma.sync"] == mix["wgmma.mma_async"] == 0
    if gpu == "A100":
        assert mix["mma.sync"] > 0 and mix["wgmma.mma_async"] == 0 and mix["fma.rn.f32"] == 0
    if gpu == "H100":
        assert mix["wgmma.mma_async"] > 0 and mix["mma.sync"] == 0


@pytest.fixture(scope="module")
def matmul_ptx(episode):
    """The episode's matmul for three GPUs, with the arguments of its own cell 25: what the
    JIT would compile for a 4,101 × 4,096 by 4,096 × 4,099 product (strides 1 specialised,
    aligned pointers and strides of 4,096 marked divisible by 16)."""
    a, c = torch.empty(64, dtype=torch.float16), torch.empty(64, dtype=torch.float16)
    args = (a, a, c, 4101, 4099, 4096, 4096, 1, 1, 4096)
    jobs = [(episode.matmul_kernel, cc, args, dict(BM=64, BN=64, BK=32))
            for cc in kernels.TARGETS.values()]
    fp32 = torch.empty(64)
    jobs.append((episode.matmul_kernel, (8, 0), (fp32, fp32, fp32, *args[3:]),
                 dict(BM=64, BN=64, BK=32)))
    return kernels.compile_many(jobs)


def test_every_gpu_does_the_same_multiply_adds_per_k_step(matmul_ptx):
    """1,024 FMAs per thread, 16 mma.sync per warp and 2 wgmma per warp group are one amount of
    work, a 64 × 64 × 32 tile: the counts alone are no speed ratio."""
    for ptx in matmul_ptx[:3]:
        assert kernels.multiply_adds(ptx) == 64 * 64 * 32


def test_aligned_arguments_give_the_vector_copies_the_real_launch_gets(matmul_ptx):
    a100 = matmul_ptx[1]
    assert "cp.async.cg" in a100, "divisibility 16 lets Triton copy 16 bytes at a time"


def test_float32_inputs_make_tl_dot_tf32_on_an_a100(matmul_ptx):
    assert re.search(r"mma\.sync\.aligned\.m16n8k8\S*\.tf32\.tf32", matmul_ptx[3])


@pytest.mark.parametrize("name", ["add_kernel", "softmax_kernel", "bias_gelu_kernel"])
def test_memory_bound_kernels_use_no_tensor_cores_anywhere(mixes, name):
    for cc in kernels.TARGETS.values():
        mix = mixes[(name, cc)]
        assert mix["mma.sync"] == mix["wgmma.mma_async"] == 0, (name, cc, mix)
        assert mix["ld.global"] > 0 and mix["st.global"] > 0, (name, cc, mix)


def test_a_failed_compile_names_the_kernel():
    @triton.jit
    def broken(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), undefined_name)  # noqa: F821

    with pytest.raises(RuntimeError, match="compiling broken for sm_80 failed"):
        kernels.compile_ptx(broken, (8, 0), torch.empty(1), BLOCK=64)


def test_signature_from_example_arguments():
    def fn(x_ptr, n, scale, BLOCK):
        pass

    sig = kernels.signature(fn, torch.empty(1, dtype=torch.float16), 3, 0.5, BLOCK=32)
    assert sig == {"x_ptr": "*fp16", "n": "i32", "scale": "fp32", "BLOCK": "constexpr"}
    with pytest.raises(TypeError, match="takes 4 arguments"):
        kernels.signature(fn, torch.empty(1))


def test_instruction_mix_counts_predicated_instructions():
    ptx = "\tfma.rn.f32 %f1, %f2, %f3, %f4;\n@%p1 ld.global.v4.b32 {..}, [%rd1];\n" \
          "\tmma.sync.aligned.m16n8k16 ...;\n@!%p2 st.global.b32 [%rd2], %r1;\n"
    mix = kernels.instruction_mix(ptx)
    assert mix == {"fma.rn.f32": 1, "mma.sync": 1, "wgmma.mma_async": 0, "ld.global": 1,
                   "st.global": 1}


def test_instruction_mix_counts_only_the_instructions_that_multiply():
    ptx = ("\twgmma.fence.sync.aligned;\n"
           "\twgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {..};\n"
           "\twgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {..};\n"
           "\twgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;\n")
    assert kernels.instruction_mix(ptx)["wgmma.mma_async"] == 2       # not the fence or waits
    assert kernels.multiply_adds(ptx, num_warps=4) == 2 * 64 * 64 * 16   # one warp group


def test_multiply_adds_count_per_thread_per_warp_and_per_warp_group():
    fma = "\tfma.rn.f32 %f1, %f2, %f3, %f4;\n" * 3
    mma = "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {..};\n" * 2
    assert kernels.multiply_adds(fma, num_warps=4) == 3 * 128        # 128 threads
    assert kernels.multiply_adds(mma, num_warps=4) == 2 * 16 * 8 * 16 * 4   # 4 warps
    assert kernels.multiply_adds(mma, num_warps=8) == 2 * 16 * 8 * 16 * 8


# --- guards and set-up -----------------------------------------------------------------------

@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n),
             mask=offsets < n)


@triton.jit
def _double_in_bf16(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offsets, mask=offsets < n).to(tl.bfloat16)
    tl.store(out_ptr + offsets, (v + v).to(tl.float32), mask=offsets < n)


def test_bf16_tensors_and_casts_are_refused_in_the_interpreter():
    x = torch.tensor([1, 2, 3, 0.5])
    with pytest.raises(kernels.Bf16InInterpreter, match="x_ptr is a bfloat16 tensor"):
        kernels.interpreted(_double)[(1,)](x.bfloat16(), x.bfloat16(), 4, BLOCK=4)
    with pytest.raises(Exception) as caught:
        kernels.interpreted(_double_in_bf16)[(1,)](x, torch.empty(4), 4, BLOCK=4)
    assert isinstance(kernels.guard_error(caught.value), kernels.Bf16InInterpreter)
    out = torch.empty(4)
    kernels.interpreted(_double)[(1,)](x, out, 4, BLOCK=4)
    assert out.tolist() == [2, 4, 6, 1]


def test_a_neighbouring_slice_is_not_the_kernels_memory():
    buffer = torch.zeros(300)
    x, out = buffer[:100], buffer[100:200]          # one storage; reading past x reads out
    with pytest.raises(Exception) as caught:
        kernels.interpreted(_double)[(2,)](x, out, 128, BLOCK=64)
    assert "past the end of out_ptr" in str(kernels.guard_error(caught.value))   # its storage goes on


@pytest.mark.parametrize("triton_version, numpy_version, broken", [
    ("3.6.0", "2.4.6", True), ("3.6.0", "2.1.3", False), ("3.7.1", "2.4.6", False),
    ("3.2.0", "2.4.0", True), ("3.9.0", "2.5.1", False)])
def test_interpreter_pairs(triton_version, numpy_version, broken):
    problem = kernels.interpreter_pair_problem(triton_version, numpy_version)
    assert (problem is not None) == broken
    if broken:
        assert "#9171" in problem and triton_version in problem and "triton>=3.7" in problem


def test_setup_without_a_gpu_interprets_and_simulates(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    mode = kernels.setup(gpu_available=False)
    assert (mode.triton, mode.numba) == ("interpreted", "simulated")
    assert os.environ["TRITON_INTERPRET"] == "1" and os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
    assert "timings mean nothing" in mode.describe()


def test_setup_refuses_a_broken_pair(monkeypatch):
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(np, "__version__", "2.4.6")
    with pytest.raises(kernels.KernelSetupError, match="numpy<2.4"):
        kernels.setup(gpu_available=False)


def test_setup_without_triton_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    with pytest.raises(kernels.KernelSetupError, match=f"triton=={kernels.TRITON_PIN}"):
        kernels.setup(gpu_available=False)


@pytest.mark.parametrize("model", ["T4", "A100", "H100"])
def test_setup_on_a_gpu_compiles(monkeypatch, model):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(kernels, "numba_cuda_problem", lambda: None)   # a working numba-cuda
    with fakecuda.fake_gpu(model):
        mode = kernels.setup(gpu_available=torch.cuda.is_available())
    assert (mode.triton, mode.numba) == ("compiled", "compiled")
    assert "TRITON_INTERPRET" not in os.environ
    assert mode.describe().startswith("Triton compiles for this GPU")


def test_setup_on_a_gpu_simulates_numba_that_cannot_compile(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(kernels, "numba_cuda_problem", lambda: "numba-cuda cannot compile here")
    with fakecuda.fake_gpu("H100"):
        mode = kernels.setup(gpu_available=torch.cuda.is_available())
    assert (mode.triton, mode.numba) == ("compiled", "simulated")
    assert os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
    assert mode.describe().endswith("simulator: numba-cuda cannot compile here")


def test_numba_probe_names_the_error_of_a_numpy_numba_cuda_cannot_use(tmp_path, monkeypatch):
    # NumPy 2.5 removed np.row_stack, which numba-cuda 0.30 registers at its first compile.
    (tmp_path / "sitecustomize.py").write_text(
        "import numpy\n"
        "def _gone(name, _old=numpy.__getattr__ if hasattr(numpy, '__getattr__') else None):\n"
        "    if name == 'row_stack':\n"
        "        raise AttributeError(\"module 'numpy' has no attribute 'row_stack'\")\n"
        "    return _old(name)\n"
        "numpy.__dict__.pop('row_stack', None)\n"
        "numpy.__getattr__ = _gone\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    problem = kernels.numba_cuda_problem()
    assert problem.startswith("numba-cuda cannot compile here (")
    assert "row_stack" in problem and "numba-cuda " in problem and "numpy " in problem
    assert "a NumPy it supports" in problem


def test_numba_probe_on_a_machine_without_a_gpu_reports_why():
    problem = kernels.numba_cuda_problem()
    assert problem and "numba-cuda cannot compile here" in problem


# --- the simulator, with the threads of a block in a chosen order -----------------------------

TPB = 8


@cuda.jit
def _shift_sum(x, out, sync):
    tile = cuda.shared.array(TPB + 1, dtype=np.float32)
    i, t = cuda.grid(1), cuda.threadIdx.x
    tile[t] = x[i] if i < x.size else 0.0
    if t == 0:
        tile[TPB] = x[i + TPB] if i + TPB < x.size else 0.0
    if sync:
        cuda.syncthreads()
    if i < x.size:
        out[i] = tile[t] + tile[t + 1]


def _shift(order, sync):
    x = np.arange(20, dtype=np.float32)
    out = np.zeros_like(x)
    with kernels.thread_order(order):
        _shift_sum[3, TPB](x, out, sync)
    return np.allclose(out, x + np.append(x[1:], 0))


def test_thread_order_shows_a_race_and_passes_a_barrier():
    assert _shift("forward", True) and _shift("reverse", True)
    assert not (_shift("forward", False) and _shift("reverse", False))


@cuda.jit
def _two_tiles(a, b, out):
    sa = cuda.shared.array(TPB, dtype=np.float32)     # two shared arrays on two lines:
    sb = cuda.shared.array(TPB, dtype=np.float32)     # two allocations, as on a GPU
    i, t = cuda.grid(1), cuda.threadIdx.x
    sa[t], sb[t] = a[i], b[i]
    cuda.syncthreads()
    out[i] = sa[TPB - 1 - t] - sb[TPB - 1 - t]


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("races", [False, True])
def test_thread_order_keeps_each_shared_array_apart(order, races):
    """Numba's simulator tells shared arrays apart by the line that asks for them; a wrapper
    that asked on their behalf once made every shared array of a kernel one and the same."""
    a, b = np.arange(16, dtype=np.float32), np.full(16, 100, dtype=np.float32)
    out = np.zeros_like(a)
    with kernels.thread_order(order, races=races):
        _two_tiles[2, TPB](a, b, out)
    expected = a.reshape(2, TPB)[:, ::-1].ravel() - 100
    assert np.array_equal(out, expected), out


def test_the_episodes_tiled_matmul_is_right_with_barriers_in_either_order():
    """Episode 12's race demonstration: with syncthreads the tiled matmul is right in both
    orders (two shared tiles), and without the first barrier it is wrong in at least one."""
    sources = [s for s in _code_cells() if "def matmul_tiled(" in s or "def at(" in s
               or "def run_tiled(" in s or "a_np = rng." in s]
    namespace = {"np": np, "cuda": cuda, "warnings": __import__("warnings"),
                 "triton": triton, "SIZES": {"tile": 8, "sim": 20}}
    for source in sources:
        exec(source, namespace)
    run = namespace["run_tiled"]
    for order in ("forward", "reverse"):
        with kernels.thread_order(order):
            assert run(True) < 1e-4, order
    with kernels.thread_order("forward"):
        wrong = run(False)
    with kernels.thread_order("reverse"):
        wrong = max(wrong, run(False))
    assert not wrong < 1e-4


def test_thread_order_names_the_thread_out_of_bounds_and_restores_the_simulator():
    from numba.cuda.simulator import kernel as sim

    before = sim.BlockManager.run

    @cuda.jit
    def double(x):
        i = cuda.grid(1)
        x[i] = 2 * x[i]

    with pytest.raises(IndexError, match=r"tid=\[4, 0, 0\] ctaid=\[1, 0, 0\]"):
        with kernels.thread_order("forward"):
            double[2, 8](np.ones(12, dtype=np.float32))
    assert sim.BlockManager.run is before
    with pytest.raises(ValueError, match="'sideways'"):
        with kernels.thread_order("sideways"):
            pass


def test_last_exception_keeps_a_message_over_several_lines():
    stderr = ("Traceback (most recent call last):\n  File \"x\", line 1\n"
              "numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: \n\n"
              "CUDA driver library cannot be found.\n:\n")
    assert tracebacks.last_exception(stderr) == ("CudaSupportError: Error at driver init: CUDA "
                                              "driver library cannot be found.")
