"""Episode 4's cells against what they teach and what the course derives from them.

The episode's ``build_model`` is the network episode 5 counts in PyTorch
(``estimate.make_cnn``) and the feasibility model sizes on every GPU
(``feasibility.cnn_parameters``): the three must keep counting the same parameters. The
one-line-per-resolution summary, the timing table's GPU line, the sizes file, the single
predict-then-reveal question and the cells' size are checked here too.
"""

from __future__ import annotations

import ast
import json
import re
import statistics

import pytest

from gpucourse import estimate, feasibility, reference, settings
from taught import ROOT, cell_function, cells, code_cells, markdown_cells, prediction

NOTEBOOK = "episodes/04-keras-cnn.ipynb"


def _defined(*names: str, **namespace) -> dict:
    """Run the notebook's ``def`` cells of ``names`` in ``namespace`` and return it."""
    for name in names:
        module = ast.Module(body=[cell_function(NOTEBOOK, name)], type_ignores=[])
        exec(compile(module, NOTEBOOK, "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def keras():
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed: episode 4 stops at its import cell")
    from gpucourse.frameworks import import_tensorflow

    import_tensorflow()
    import keras

    return keras


@pytest.fixture(scope="module")
def build(keras):
    """The notebook's build_model and parameters_by_resolution, with the names they use."""
    return _defined("preprocess", "build_model", "parameters_by_resolution",
                    keras=keras, layers=keras.layers)


# ---- the sizes file -----------------------------------------------------------------------

def test_the_sizes_file_has_three_rows_with_the_same_literal_numbers():
    table = json.loads((settings.SIZES_DIR / "ep04.json").read_text(encoding="utf-8"))
    assert sorted(table) == sorted(settings.MODES)
    keys = [list(row) for row in table.values()]
    assert all(k == keys[0] for k in keys), "the three rows must name the same sizes"
    assert all(type(v) is int for row in table.values() for v in row.values())
    assert table["full"]["width"] > table["reduced"]["width"] > table["quick"]["width"]


def test_the_notebook_reads_every_size_from_the_file():
    code = "\n".join(code_cells(NOTEBOOK))
    assert 'SIZES = settings.sizes("ep04", gpu_available=bool(gpus))' in code
    assert "print(SIZES.describe())" in code
    assert not re.search(r"\}\[MODE\]", code), "a three-mode table is back in a cell"
    used = set(re.findall(r"SIZES\[[\"'](\w+)[\"']\]", code))
    table = json.loads((settings.SIZES_DIR / "ep04.json").read_text(encoding="utf-8"))
    assert used and used <= set(table["full"]), f"not in ep04.json: {used - set(table['full'])}"
    assert feasibility.full_sizes(ROOT / NOTEBOOK)["SIZES"] == table["full"]


# ---- the network: the cell, episode 5's PyTorch copy and the closed form -----------------

@pytest.mark.parametrize("width", [8, 64])
def test_build_model_counts_what_make_cnn_and_the_closed_form_count(build, width):
    model = build["build_model"](width)
    trainable = sum(int(w.numpy().size) for w in model.trainable_weights)
    frozen = sum(int(w.numpy().size) for w in model.non_trainable_weights)
    torch_model = estimate.make_cnn(width)
    assert trainable == sum(p.numel() for p in torch_model.parameters())
    assert trainable == feasibility.cnn_parameters(width)
    running = sum(b.numel() for name, b in torch_model.named_buffers() if "running" in name)
    assert frozen == running, "batch norm's running statistics differ"
    kernels = [tuple(layer.kernel.shape) for layer in model.layers if hasattr(layer, "kernel")]
    torch_kernels = [tuple(m.weight.shape) for m in torch_model.modules()
                     if hasattr(m, "weight") and m.weight is not None and m.weight.dim() > 1]
    as_keras = [(s[2], s[3], s[1], s[0]) if len(s) == 4 else (s[1], s[0]) for s in torch_kernels]
    assert kernels == as_keras


def test_build_model_restores_the_default_policy(build, keras):
    model = build["build_model"](8, "mixed_float16")
    assert model.dtype_policy.name == "mixed_float16"
    assert model.layers[-1].dtype_policy.name == "float32", "the logits must stay float32"
    assert keras.config.dtype_policy().name == "float32"


@pytest.mark.parametrize("width", [8, 64])
def test_one_line_per_resolution_adds_up_to_the_model(build, width):
    model = build["build_model"](width)
    counts = build["parameters_by_resolution"](model)
    assert list(counts) == ["32×32", "16×16", "8×8", "top"]
    assert sum(counts.values()) == model.count_params()
    # two 3 × 3 convolutions and two batch norms (4 numbers per channel) per resolution
    assert counts["32×32"] == 9 * 3 * width + 9 * width**2 + 8 * width
    assert counts["top"] == 10 * 4 * width + 10


def test_no_cell_prints_the_full_summary():
    assert not [s for s in code_cells(NOTEBOOK) if ".summary()" in s.split("#")[0]]


# ---- the timing table's GPU line, without a GPU ------------------------------------------

def test_a_gpu_run_is_described_against_the_cpu_and_the_datasheet():
    _, spec = reference.gpu_model("Tesla T4")
    cpu = "/device:CPU:0"
    names = _defined("describe_run", CPU=cpu, spec=spec, timings={(cpu, "float32"): (20.0, 1.0)})
    describe = names["describe_run"]
    assert describe(cpu, "float32", 20.0, 0.02) == "CPU, float32: 20.0 s per epoch, 0.02 TFLOP/s"
    line = describe("/device:GPU:0", "mixed_float16", 2.0, 6.5)
    assert line == ("GPU, mixed_float16: 2.0 s per epoch, 10.0× the CPU's speed, 6.50 TFLOP/s"
                    f" = 10% of its peak, {spec['fp16_tensor_dense_tflops']} TFLOP/s")
    assert describe("/device:GPU:0", "float32", 4.0, 4.05).endswith(
        f"= 50% of its peak, {spec['fp32_tflops']} TFLOP/s")
    names["spec"] = None                       # a GPU the course has no datasheet for
    assert describe("/device:GPU:0", "float32", 4.0, 1.0).endswith(
        "5.0× the CPU's speed, 1.00 TFLOP/s")


def _cell_starting(prefix: str) -> str:
    found = [s for s in code_cells(NOTEBOOK) if s.startswith(prefix)]
    assert len(found) == 1, f"{len(found)} cells start with {prefix!r}"
    return found[0]


@pytest.mark.parametrize("model, policy", [("T4", "mixed_float16"), ("A100", "mixed_bfloat16"),
                                           ("H100", "mixed_bfloat16")])
def test_each_gpu_gets_its_policy_and_three_timed_runs(keras, model, policy):
    import tensorflow as tf

    from gpucourse.fakes.fakecuda import fake_gpu

    with fake_gpu(model, tensorflow=True):
        gpus = tf.config.list_physical_devices("GPU")
        details = tf.config.experimental.get_device_details(gpus[0])
    names = {"CC": details["compute_capability"], "GPU_NAME": details["device_name"],
             "gpus": gpus, "DEVICE": "/device:GPU:0", "tf": tf, "reference": reference,
             "BACKEND": "tensorflow"}
    exec(_cell_starting("if CC >= (8, 0):"), names)
    exec(_cell_starting('if BACKEND == "tensorflow":\n    CPU = '), names)
    assert names["POLICY"] == policy
    cpu = names["CPU"]
    assert names["runs"] == [(cpu, "float32"), ("/device:GPU:0", "float32"),
                             ("/device:GPU:0", policy)]
    assert names["spec"]["fp16_tensor_dense_tflops"] > names["spec"]["fp32_tflops"]


@pytest.mark.parametrize("capability, gpus, runs", [((6, 0), ["P100"], 2), ((0, 0), [], 1)])
def test_without_tensor_cores_it_times_float32_only(keras, capability, gpus, runs):
    import tensorflow as tf

    names = {"CC": capability, "GPU_NAME": None, "gpus": gpus, "DEVICE": "/device:GPU:0",
             "tf": tf, "reference": reference, "BACKEND": "tensorflow"}
    exec(_cell_starting("if CC >= (8, 0):"), names)
    exec(_cell_starting('if BACKEND == "tensorflow":\n    CPU = '), names)
    assert names["POLICY"] == "float32"
    assert [policy for _, policy in names["runs"]] == ["float32"] * runs


# ---- lesson shape: one question, runnable lessons, short cells ---------------------------

def test_one_predict_then_reveal_around_the_timing():
    between, _ = prediction(NOTEBOOK)
    assert any("epoch_seconds(" in s for s in between), "the measurement runs between them"


def test_the_only_fence_is_the_broken_tutorial_which_cannot_run():
    fences = [block for text in markdown_cells(NOTEBOOK)
              for block in re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)]
    assert len(fences) == 1, "lesson code belongs in runnable cells"
    with pytest.raises(SyntaxError):
        compile(fences[0], "the tutorial as published", "exec")
    assert any("keras.datasets.cifar10.load_data()" in s for s in code_cells(NOTEBOOK))


def test_cells_fit_the_page():
    sizes = []
    for cell in cells(NOTEBOOK):
        if cell["cell_type"] != "code" or "colab-setup" in cell["metadata"].get("tags", []):
            continue                            # generated by make sync
        source = "".join(cell["source"])
        sizes.append(len([line for line in source.splitlines() if line.strip()]))
        assert sizes[-1] <= 15, source[:80]
        assert max(map(len, source.splitlines())) <= 88, source[:80]
    assert statistics.median(sizes) <= 8
