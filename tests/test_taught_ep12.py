"""Episode 12 writes its taught lines in cells: the two switches before the imports, the bytes
counted, ``triton.compile`` in a script the notebook writes, and the "cpu tensor?" error.

Where the course's helper does the same job for later cells or the exercises, a test here
keeps the two equal: ``kernels.setup`` sets the switches the cell sets, and
``kernels.compile_many`` writes the PTX the episode's own compile script writes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
import torch

from gpucourse import kernels
from gpucourse.numbers import readable
from taught import ROOT, code_cell, code_cells

EPISODE = "episodes/12-gpu-kernels.ipynb"
SWITCHES = ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")


def _index(marker: str) -> int:
    found = [i for i, source in enumerate(code_cells(EPISODE)) if marker in source]
    assert len(found) == 1, f"{len(found)} cells hold {marker!r}"
    return found[0]


# --------------------------------------------------------------------------- the switches

def test_the_switches_are_set_in_a_cell_before_triton_and_numba_are_imported():
    switches = _index('os.environ["TRITON_INTERPRET"] = "1"')
    assert 'os.environ["NUMBA_ENABLE_CUDASIM"] = "1"' in code_cells(EPISODE)[switches]
    triton_import = _index("import triton\nimport triton.language as tl\n")
    assert switches < triton_import < _index("from numba import cuda\n\nTILE")
    assert "kernels.setup(" in code_cells(EPISODE)[triton_import]


def _cell_switches(monkeypatch, device_type: str) -> dict:
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    exec(code_cell(EPISODE, 'os.environ["TRITON_INTERPRET"]'),
         {"os": os, "device": types.SimpleNamespace(type=device_type)})
    return {name: os.environ.get(name) for name in SWITCHES}


def test_without_a_gpu_the_cell_sets_what_kernels_setup_sets(monkeypatch):
    cell = _cell_switches(monkeypatch, "cpu")
    assert cell == {"TRITON_INTERPRET": "1", "NUMBA_ENABLE_CUDASIM": "1"}
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "numba.cuda", raising=False)   # as before the import
    kernels.setup(gpu_available=False)
    assert {name: os.environ.get(name) for name in SWITCHES} == cell


def test_on_a_gpu_neither_the_cell_nor_kernels_setup_sets_a_switch(monkeypatch):
    from gpucourse.fakes import fakecuda

    assert _cell_switches(monkeypatch, "cuda") == dict.fromkeys(SWITCHES)
    monkeypatch.setattr(kernels, "numba_cuda_problem", lambda: None)   # numba-cuda works
    with fakecuda.fake_gpu("T4"):
        kernels.setup(gpu_available=torch.cuda.is_available())
    assert {name: os.environ.get(name) for name in SWITCHES} == dict.fromkeys(SWITCHES)


# --------------------------------------------------------------------------- the bytes

def test_the_bytes_are_counted_in_the_cell_four_passes_eager_two_fused(capsys):
    namespace = {"torch": torch, "SIZES": {"rows": 3, "cols": 1000},
                 "device": torch.device("cpu"), "readable": readable}
    exec(code_cell(EPISODE, "eager_bytes = "), namespace)
    assert namespace["eager_bytes"] == 4 * 3000 * 4 == 2 * namespace["fused_bytes"]
    assert "eager: 0.048 MB moved, at least 0.16 µs on a T4" in capsys.readouterr().out
    assert "elementwise_bytes" not in "".join(code_cells(EPISODE))


# --------------------------------------------------------------------------- "cpu tensor?"

class _Launcher:
    """Stands in for a Triton kernel launched on a GPU: like Triton's launcher, it refuses a
    pointer argument the GPU cannot reach (here: one on another device than the first)."""

    def __getitem__(self, grid):
        def launch(*args, **constexprs):
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if any(t.device != tensors[0].device for t in tensors):
                raise ValueError("Pointer argument cannot be accessed from Triton (cpu tensor?)")
        return launch


def test_the_cpu_tensor_cell_makes_its_output_on_the_cpu_and_the_fix_on_the_inputs_device(
        capsys):
    import triton

    a = torch.empty(10, device="meta")         # stands for a GPU tensor: not on the CPU
    namespace = {"torch": torch, "triton": triton, "add_kernel": _Launcher(), "a": a,
                 "b": a, "readable": readable}
    exec(code_cell(EPISODE, "out = torch.empty(x.shape)"), namespace)
    printed = capsys.readouterr().out
    assert "ValueError: Pointer argument cannot be accessed from Triton (cpu tensor?)" in printed
    assert "a, b and add's out are on: meta meta cpu" in printed
    fixed = code_cell(EPISODE, "# the fix: the same device")
    exec(fixed.split("\ndifference = ")[0], namespace)    # the fixed wrapper, not its check
    namespace["add"](a, a)                                     # no ValueError now


def test_the_cpu_tensor_cell_runs_on_the_cpu_and_says_why(capsys):
    import triton

    namespace = {"torch": torch, "triton": triton, "add_kernel": _Launcher(),
                 "a": torch.ones(10), "b": torch.ones(10), "readable": readable}
    exec(code_cell(EPISODE, "out = torch.empty(x.shape)"), namespace)
    assert "it ran: the interpreter works in the CPU's memory" in capsys.readouterr().out


# --------------------------------------------------------------------------- triton.compile

def _script(work: Path) -> str:
    source = code_cell(EPISODE, "%%writefile {work}/compile_matmul.py")
    first, body = source.split("\n", 1)
    assert first == "%%writefile {work}/compile_matmul.py"
    assert "triton.compile(source, target=GPUTarget(" in body
    return body


def _no_debug(ptx: str) -> list[str]:
    """PTX without what names the file and its lines (``.loc``, ``.file``, debug sections)."""
    ptx = ptx.split(".section\t.debug", 1)[0]
    return [line for line in ptx.splitlines()
            if line.strip() and not line.lstrip().startswith((".loc", ".file", "//", "$L"))]


@pytest.fixture(scope="module")
def matmul_kernel():
    from test_kernels import _episode_kernels

    class Factory:
        def mktemp(self, name):
            return Path(tempfile.mkdtemp(prefix=name))
    return _episode_kernels(Factory()).matmul_kernel


def test_the_episodes_compile_script_writes_the_ptx_kernels_compile_many_writes(matmul_kernel):
    """The script (the taught call) and the helper (the table of three kernels) agree on
    sm_80, given the same facts: aligned pointers, and integers neither 1 nor divisible by 16."""
    work = Path(tempfile.mkdtemp(prefix="ep12-compile-"))
    namespace = {"matmul_kernel": matmul_kernel}
    write = code_cell(EPISODE, 'work = Path(tempfile.mkdtemp(')
    exec(write.replace('tempfile.mkdtemp(prefix="triton-compile-")', repr(str(work))), namespace)
    (work / "compile_matmul.py").write_text(_script(work))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "compile_matmul.py", "80", "fp16"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    A = torch.empty(64, 64, dtype=torch.float16)
    helper = kernels.compile_many([(matmul_kernel, (8, 0), (A, A, A, 17, 19, 23, 23, 3, 5, 7),
                                    dict(BM=64, BN=64, BK=32))])[0]
    assert _no_debug(done.stdout) == _no_debug(helper)
    assert len(re.findall(r"^\s*mma\.sync", done.stdout, re.M)) == 16


def test_the_compile_cell_runs_the_script_without_the_interpreter():
    launch = code_cell(EPISODE, "def compile_matmul(")
    assert 'k != "TRITON_INTERPRET"' in launch and "env=no_interpreter" in launch
    assert "kernels.compile_ptx" not in "".join(code_cells(EPISODE))
    assert ROOT.joinpath(EPISODE).exists()
