"""Importing TensorFlow: a safe order with Triton, GPUs it cannot run on, and machines without it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpucourse import features, frameworks
from gpucourse.fakes import fakecuda

ROOT = Path(__file__).resolve().parents[1]
# Colab's G4 (sm_120), as in fakecuda.MODELS once it is there; added here for the test where not.
G4 = dict(name="NVIDIA RTX PRO 6000 Blackwell Server Edition", total_memory=102_000_000_000,
          major=12, minor=0, multi_processor_count=188)


@pytest.fixture
def g4_model(monkeypatch):
    if not any(model["major"] == 12 for model in fakecuda.MODELS.values()):
        monkeypatch.setitem(fakecuda.MODELS, "G4", G4)
    return next(name for name, model in fakecuda.MODELS.items() if model["major"] == 12)


@pytest.fixture
def tf(monkeypatch):
    """TensorFlow, with this module's record of hidden GPUs reset and ``set_visible_devices``
    recorded instead of done (a started runtime would refuse it)."""
    module = frameworks.import_tensorflow()
    monkeypatch.setattr(frameworks, "_hidden_because", None)
    calls = []
    monkeypatch.setattr(module.config, "set_visible_devices",
                        lambda devices, kind=None: calls.append((list(devices), kind)))
    module.visible_calls = calls
    yield module
    del module.visible_calls


@pytest.mark.parametrize("version, model, usable", [
    ("2.20.0", "T4", True), ("2.20.0", "H100", True), ("2.19.1", "sm_120", False),
    ("2.20.0", "sm_120", False), ("2.21.0", "sm_120", True), ("2.22.0rc0", "sm_120", True),
])
def test_tensorflow_before_2_21_cannot_use_sm_120(tf, g4_model, monkeypatch, version, model, usable):
    monkeypatch.setattr(tf, "__version__", version)
    with fakecuda.fake_gpu(g4_model if model == "sm_120" else model, tensorflow=True):
        problem = features.tf_gpu_problem(tf)
        assert features.tf_gpu_usable(tf) is usable
    assert (problem is None) is usable
    if not usable:
        assert f"TensorFlow {version} cannot run on this GPU's sm_120" in problem
        assert "RTX PRO 6000" in problem and "2.21" in problem


def test_a_gpu_tensorflow_did_not_list_itself_is_not_judged(tf, monkeypatch):
    """Episode 4's check pretends a GPU is listed (TensorFlow 2.20, Colab's): asking for its
    details raises ValueError, which must not stop the check."""
    monkeypatch.setattr(tf, "__version__", "2.20.0")
    pretended = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda device_type=None: [pretended] if device_type == "GPU" else [])
    assert features.tf_gpu_problem(tf) is None


def test_import_tensorflow_hides_a_gpu_it_cannot_run_on_once(tf, g4_model, monkeypatch, capsys):
    monkeypatch.setattr(tf, "__version__", "2.20.0")
    with fakecuda.fake_gpu(g4_model, tensorflow=True):
        assert len(frameworks.tensorflow_gpus(tf)) == 1     # before: listed
        assert frameworks.import_tensorflow() is tf
        assert tf.visible_calls == [([], "GPU")]
        assert frameworks.tensorflow_gpus(tf) == []
        said = capsys.readouterr().out
        frameworks.import_tensorflow()                       # a second import says nothing new
        assert capsys.readouterr().out == "" and len(tf.visible_calls) == 1
    assert said.count("\n") == 1 and said.strip().endswith(
        "so it runs on the CPU here; PyTorch keeps the GPU.")


def test_import_tensorflow_leaves_a_gpu_it_can_run_on(tf, capsys):
    with fakecuda.fake_gpu("T4", tensorflow=True):
        frameworks.import_tensorflow()
        assert tf.visible_calls == [] and len(frameworks.tensorflow_gpus(tf)) == 1
    assert capsys.readouterr().out == ""


def test_a_started_runtime_is_reported_not_hidden(tf, g4_model, monkeypatch, capsys):
    def refuse(devices, kind=None):
        raise RuntimeError("Visible devices cannot be modified after being initialized")

    monkeypatch.setattr(tf, "__version__", "2.20.0")
    monkeypatch.setattr(tf.config, "set_visible_devices", refuse)
    with fakecuda.fake_gpu(g4_model, tensorflow=True):
        frameworks.import_tensorflow()
        assert len(frameworks.tensorflow_gpus(tf)) == 1
    assert "restart the runtime" in capsys.readouterr().out


def test_listing_and_device_details_do_not_start_the_runtime():
    """The decision is taken before the runtime starts, so hiding the GPUs is still allowed."""
    script = textwrap.dedent("""
        from gpucourse.frameworks import import_tensorflow
        tf = import_tensorflow()
        for device in tf.config.list_physical_devices():
            tf.config.experimental.get_device_details(device)
        # Settings like this one raise RuntimeError once the runtime has started.
        tf.config.threading.set_intra_op_parallelism_threads(2)
        tf.config.set_visible_devices([], "GPU")
        tf.random.normal((2, 2))
        try:
            tf.config.threading.set_intra_op_parallelism_threads(1)
        except RuntimeError:
            print("started only by the first operation")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "started only by the first operation" in done.stdout


def test_without_tensorflow_has_tensorflow_says_so(monkeypatch, capsys):
    assert frameworks.has_tensorflow() and capsys.readouterr().out == ""
    monkeypatch.setitem(sys.modules, "tensorflow", None)    # `import tensorflow` now fails
    assert frameworks.has_tensorflow() is False
    assert capsys.readouterr().out.strip() == frameworks.MISSING_TENSORFLOW
    with pytest.raises(ModuleNotFoundError):
        frameworks.import_tensorflow()


def test_a_broken_tensorflow_is_not_reported_as_missing(monkeypatch):
    def broken():
        raise ModuleNotFoundError("No module named 'ml_dtypes'", name="ml_dtypes")

    monkeypatch.setattr(frameworks, "import_tensorflow", broken)
    with pytest.raises(ModuleNotFoundError, match="ml_dtypes"):
        frameworks.has_tensorflow()


def _fake_triton(folder: Path) -> Path:
    """A ``triton`` package that records whether TensorFlow was imported before it."""
    package = folder / "triton"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import sys\nprint('triton after tensorflow:', 'tensorflow' in sys.modules)\n")
    return folder


def test_triton_is_imported_before_tensorflow(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_fake_triton(tmp_path)), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", "from gpucourse.frameworks import import_tensorflow\n"
                           "import_tensorflow()\nimport triton"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["triton after tensorflow: False"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                    reason="triton is not installed (the CPU build of torch brings none); the crash "
                           "needs Linux's CUDA torch with triton 3.7 and TensorFlow 2.21")
def test_importing_real_triton_after_tensorflow_does_not_crash():
    """``python -c "import tensorflow; import triton"`` segfaults with TensorFlow 2.21 and triton 3.7.1."""
    done = subprocess.run([sys.executable, "-c", "from gpucourse.frameworks import import_tensorflow\n"
                           "import_tensorflow()\nimport triton\nimport torch._dynamo\nprint('alive')"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "alive", done.stderr[-2000:]


def test_a_failed_compile_on_an_old_gpu_names_triton_s_supported_range():
    text = "Found Tesla P100 which is too old to be supported by the triton GPU compiler, CC 6.0"
    message = features.compile_failure(RuntimeError(text + "\nsecond line"))
    assert "Triton supports compute capability 8.0+ (7.x works only partly)" in message
    assert "7.0 or newer" not in message
    assert message.startswith(f"torch.compile failed (RuntimeError: {text})")


def test_a_version_without_numbers_is_refused():
    with pytest.raises(ValueError, match="'nightly'"):
        features._version_tuple("nightly")


# --------------------------------------------------------------------------- without TensorFlow
# A line that only the episode's last PyTorch cells print, after its first TensorFlow cell.
LAST_PYTORCH_OUTPUT = {
    "02-finding-your-gpu": "Running in Colab:",
    "07-faster-training": "torch.compile, training step",
    "08-feeding-the-gpu": "of which torch ops on the CPU side",
    "09-more-than-one-gpu": "(weak scaling)",
}


@pytest.fixture
def without_tensorflow(tmp_path, monkeypatch):
    """Kernels started from here find no TensorFlow and no Keras, as on a PyTorch-only machine
    (``importlib.util.find_spec`` says None and ``import`` raises ModuleNotFoundError)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['tensorflow'] = None\nsys.modules['keras'] = None\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    monkeypatch.setenv("GPUCOURSE_QUICK", "1")
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")


def _execute(name: str):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "episodes" / f"{name}.ipynb", as_version=4)
    for cell in nb.cells:                # outputs kept for nbval must not count as run here
        if cell.cell_type == "code":
            cell.execution_count, cell.outputs = None, []
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "episodes")}})
    return nb, client


def _text(nb) -> str:
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_the_blocker_hides_tensorflow(without_tensorflow):
    done = subprocess.run([sys.executable, "-c", "import importlib.util\n"
                           "print(importlib.util.find_spec('tensorflow'))\nimport keras"],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "None" and "ModuleNotFoundError" in done.stderr


@pytest.mark.parametrize("name", sorted(LAST_PYTORCH_OUTPUT))
def test_every_pytorch_cell_runs_without_tensorflow(name, without_tensorflow):
    nb, client = _execute(name)
    client.execute()                     # raises CellExecutionError at the first failing cell
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a code cell did not run"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    text = _text(nb)
    assert frameworks.MISSING_TENSORFLOW in text
    assert "Skipped: TensorFlow is not installed here." in text
    assert LAST_PYTORCH_OUTPUT[name] in text


def _first_cells(name: str, count: int):
    """The notebook's first ``count`` code cells (and the markdown between), and a client."""
    nb, client = _execute(name)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells = nb.cells[:code[count - 1] + 1]
    return nb, client


@pytest.fixture
def without_tensorflow_only(tmp_path, monkeypatch):
    """Kernels find no TensorFlow, but Keras 3 and PyTorch (a PyTorch-only GPU node with Keras)."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['tensorflow'] = None\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    monkeypatch.setenv("GPUCOURSE_QUICK", "1")
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    monkeypatch.delenv("KERAS_BACKEND", raising=False)


def test_without_tensorflow_the_keras_episode_runs_on_pytorch_and_says_so(without_tensorflow_only):
    nb, client = _first_cells("04-keras-cnn", 5)   # setup, backend, imports, the two device cells
    client.execute()
    text = _text(nb)
    assert "Keras will run on torch: TensorFlow is not installed here, so Keras runs on PyTorch" in text
    assert "on torch · GPU: none" in text


def test_without_tensorflow_or_keras_the_keras_episode_stops_at_its_import(without_tensorflow):
    from nbclient.exceptions import CellExecutionError

    nb, client = _execute("04-keras-cnn")
    with pytest.raises(CellExecutionError, match="import of keras halted"):
        client.execute()
    ran = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count]
    first_code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"][:3]
    assert ran == first_code             # the setup cell, the backend, then the import that stops
