"""What a bare GPU node lacks, and which notebooks each missing package costs (G5-7)."""

from __future__ import annotations

import sys

import nbformat

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import gpu_bundle  # noqa: E402
import gpu_check  # noqa: E402

BARE = {"torch", "numpy"}


def _carried() -> set[str]:
    """The import names of what the bundle carries (for every Python it is built for)."""
    names = {p["name"] for p in gpu_bundle.read_requirements()}
    import_names = {"pillow": "PIL", "scikit-learn": "sklearn", "python-dateutil": "dateutil",
                    "absl-py": "absl", "ml-dtypes": "ml_dtypes", "typing-extensions": "typing_extensions"}
    return {import_names.get(n, n.replace("-", "_")) for n in names}


def _nb(path, *sources):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
    return path


def test_a_bare_node_is_told_which_notebooks_each_missing_package_costs():
    costs = gpu_check.missing_costs(gpu_check.notebooks(None), present=lambda m: m in BARE)
    assert len(costs["matplotlib"]) == 11 and "episodes/01-what-is-a-gpu.ipynb" in costs["matplotlib"]
    assert costs["keras"] == ["episodes/04-keras-cnn.ipynb", "solutions/04-keras-cnn.ipynb"]
    assert "tensorflow" not in costs          # episode 4 runs on Keras's PyTorch backend without it
    text = gpu_check.describe_costs(costs)
    assert text.splitlines()[1] == ("  matplotlib: 11 notebooks (epi 01, epi 03, epi 04, epi 05, epi 06, "
                                    "epi 07, epi 09, epi 10, epi 11, epi 13, epi 14)")


def test_the_bundle_carries_what_the_episodes_import_but_the_big_frameworks():
    carried = _carried()
    assert {"matplotlib", "pandas", "keras", "tqdm", "h5py", "PIL"} <= carried
    costs = gpu_check.missing_costs(gpu_check.notebooks(None), present=lambda m: m in BARE | carried)
    # what is left is a framework (transformers and its kin), or too big for 60 MiB (scikit-learn + SciPy)
    assert set(costs) <= {"transformers", "peft", "accelerate", "sklearn", "aiohttp", "xgboost",
                          "tensorflow", "triton", "numba"}, costs
    assert gpu_bundle.MAX_MIB == 60.0


def test_an_import_the_notebook_guards_is_not_a_cost(tmp_path):
    path = _nb(tmp_path / "07-x.ipynb",
               "import matplotlib.pyplot as plt",
               "try:\n    import tensorflow as tf\nexcept ImportError:\n    tf = None",
               "if False:\n    import xgboost",
               "def f():\n    import cupy\n    return cupy",
               "%%writefile matmul_source.py\nx = 1",
               "from matmul_source import x")
    assert gpu_check.notebook_imports(path) == {"matplotlib"}
    assert gpu_check.missing_costs([path], present=lambda m: False) == {"matplotlib": ["07-x.ipynb"]}


def test_episode_12_needs_neither_triton_nor_numba_to_start():
    costs = gpu_check.missing_costs([ROOT / "episodes" / "12-gpu-kernels.ipynb"], present=lambda m: m in BARE)
    assert "triton" not in costs and "numba" not in costs
