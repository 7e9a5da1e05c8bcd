"""Episode 2's device-mismatch demo: its cells raise the error, print it in one line, and fix it.

The cells run in a fresh Python process, with TensorFlow imported first as in the episode: an
error on the ``meta`` device once crashed a process that had TensorFlow loaded (torch 2.13.0
for CUDA 13), and the episode now runs it in the learner's kernel.
"""
import subprocess
import sys

from conftest import ROOT
from taught import code_cells

EPISODE_2 = "episodes/02-finding-your-gpu.ipynb"
PRELUDE = """\
import torch
from gpucourse.frameworks import has_tensorflow, import_tensorflow
tf = import_tensorflow() if has_tensorflow() else None
device = torch.device("cpu")     # what pick_device() gives on a machine without a GPU
"""


def demo_cells() -> list[str]:
    """The episode's cells from the model to the fix, in order."""
    cells = code_cells(EPISODE_2)
    start = next(i for i, c in enumerate(cells) if "torch.nn.Sequential" in c)
    end = next(i for i, c in enumerate(cells) if "cpu_batch.to(other)" in c)
    return cells[start:end + 1]


def test_the_demo_is_in_cells_not_in_a_module_or_a_fence():
    cells = demo_cells()
    assert any("except RuntimeError as err:" in c for c in cells)
    assert not (ROOT / "gpucourse" / "mismatch_demo.py").exists()
    assert all("mismatch_demo" not in c for c in code_cells(EPISODE_2))


def test_the_cells_raise_the_mismatch_in_one_line_and_show_the_fix():
    script = PRELUDE + "\n".join(demo_cells())
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "RuntimeError: Tensor on device meta is not on the expected device cpu!" in lines
    assert lines[-1] == "after .to(): meta with shape (16, 2)"
