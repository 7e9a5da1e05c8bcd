"""The helpers of episodes 5 and 6: the estimates both share, and the modules that run in fresh processes.

The TensorFlow child really runs (TensorFlow is part of the course's environment): on a CPU it caps its
own address space, runs out of memory on purpose and halves the batch until a step trains. That the
children run the functions episode 6 writes in cells is tests/test_taught_ep06.py's to check.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import torch

from gpucourse import estimate, memory
from gpucourse.children import fragmentation_child, tf_memory_child

ROOT = Path(__file__).resolve().parents[1]
SHARED = ["make_mlp", "make_cnn", "training_step", "state_bytes", "activation_bytes_per_sample", "mlp_parameters",
          "mlp_estimate", "largest"]


def _functions(tree) -> dict:
    """{name: ast.dump} of the functions in ``tree``, without the imports a module function makes first."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            node.body = [s for s in node.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
            found[node.name] = ast.dump(node)
    return found


def _cells(notebook, kind="code"):
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == kind]


def test_episode_5_and_gpucourse_estimate_define_the_same_functions():
    in_notebook = {}
    for source in _cells("episodes/05-gpu-memory.ipynb"):
        in_notebook.update(_functions(ast.parse(source)))
    in_module = _functions(ast.parse(Path(estimate.__file__).read_text()))
    for name in SHARED:
        assert name in in_notebook, f"episode 5 no longer defines {name}"
        assert in_notebook[name] == in_module[name], \
            f"{name} differs between episode 5 and gpucourse/estimate.py: change both (episode 6 imports the module)"


def test_the_estimates_count_what_a_model_holds():
    model = estimate.make_mlp(15, 48, depth=3)
    assert estimate.mlp_parameters(48, 3) == sum(p.numel() for p in model.parameters())
    assert estimate.state_bytes(model) == 16 * estimate.mlp_parameters(48, 3)
    assert estimate.mlp_estimate(48, 3, 10) == estimate.state_bytes(model) + \
        10 * estimate.activation_bytes_per_sample(model, (15,))
    assert estimate.largest(lambda n: n <= 37, 0, 1000) == 37
    assert estimate.largest(lambda n: n <= 1000, 0, 2000, tolerance=0.01) >= 990


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path: an address-space cap, not a GPU")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the cap needs resource.setrlimit (Linux)")
def test_the_tensorflow_child_runs_out_of_memory_and_halves_the_batch():
    report = tf_memory_child.run("growth-on", "search", timeout=300)
    assert report is not None, "the child failed (its stderr is printed above)"
    assert report["device"] == "CPU:0" and report["memory growth"] == "no GPU"
    tries = report["halving search"]["tries"]
    assert tries[0] == 2**18 and len(tries) >= 2, tries    # 2**18 rows of 1024 floats do not fit under the cap
    assert tries == [2**18 // 2**i for i in range(len(tries))], tries
    assert report["largest batch found"] == tries[-1] and 1 <= tries[-1] < 2**18
    assert report["first error"].startswith("ResourceExhaustedError: OOM"), report["first error"]
    search_line = tf_memory_child.describe(report).splitlines()[-1]
    assert search_line.startswith(f"halving search: batch 262,144 → {tries[-1]:,} in {len(tries)} tries")


def test_run_child_says_why_it_has_no_answer(capsys):
    assert memory.run_child([sys.executable, "-c", "import sys; sys.exit('broken on purpose')"]) is None
    assert "exit code 1" in capsys.readouterr().out
    assert memory.run_child([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5) is None
    assert "did not finish within 0.5 s" in capsys.readouterr().out
    assert memory.run_child([sys.executable, "-c", "print('{\"a\": 1}')"]) == {"a": 1}


def test_run_child_without_a_module_says_skipped_in_one_line(capsys):
    assert memory.run_child([sys.executable, "-c", "raise ModuleNotFoundError("
                             "\"No module named 'tensorflow': this cell needs TensorFlow\")"]) is None
    out = capsys.readouterr().out
    assert out == "Skipped: No module named 'tensorflow': this cell needs TensorFlow\n"
    assert memory.run_child([sys.executable, "-c", "raise ValueError('bad size')"]) is None
    assert capsys.readouterr().out == "the child process failed (exit code 1): ValueError: bad size\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a GPU the module refuses")
def test_the_fragmentation_child_needs_a_gpu(capsys):
    assert fragmentation_child.run() is None
    assert "it needs a GPU" in capsys.readouterr().out


def test_the_fragmentation_report_keeps_the_figures_of_the_out_of_memory_message():
    """Episode 6 asks learners to read the figures: the request, what is allowed, what is reserved."""
    message = ("CUDA out of memory. Tried to allocate 640.00 MiB. GPU 0 has a total capacity of 14.74 GiB of which "
               "12.99 GiB is free. Of the allocated memory 512.00 MiB is allocated by PyTorch, and 1.00 GiB is "
               "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
               "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    figures = fragmentation_child._oom_figures(message)
    assert figures.startswith("Tried to allocate 640.00 MiB")
    assert "1.00 GiB is reserved by PyTorch but unallocated" in figures
    assert "If reserved" not in figures and "https" not in figures


def test_the_fragmentation_line_quotes_the_memory_reserved_but_unallocated():
    message = ("CUDA out of memory. Tried to allocate 640.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which "
               "77.50 GiB is free. Of the allocated memory 512.00 MiB is allocated by PyTorch, and 512.00 MiB is "
               "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
    report = {"allocated": 512 * memory.MIB, "reserved": memory.GIB, "640 MiB": f"out of memory: {message}",
              "expandable_segments": False}
    assert fragmentation_child.describe(report) == (
        "512.00 MiB allocated, 1.00 GiB reserved; 640 MiB: out of memory (512.00 MiB is reserved by PyTorch "
        "but unallocated); expandable_segments: False")
    assert fragmentation_child.describe({**report, "640 MiB": "fits", "expandable_segments": True}).endswith(
        "640 MiB: fits; expandable_segments: True")
