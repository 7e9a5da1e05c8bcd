"""Importing TensorFlow: a safe order with Triton, GPUs it cannot run on, and machines without it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpucourse import fakecuda, features, frameworks

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


def test_without_tensorflow_an_optional_import_says_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorflow", None)    # `import tensorflow` now fails
    assert frameworks.import_tensorflow(optional=True) is None
    assert capsys.readouterr().out.strip() == frameworks.MISSING_TENSORFLOW
    with pytest.raises(ModuleNotFoundError):
        frameworks.import_tensorflow()


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
