"""Episode 4 on either Keras backend: chosen before Keras is imported, run on PyTorch too.

``make test`` runs the episode under nbval with TensorFlow's backend (this machine has
TensorFlow); the test below runs it again, top to bottom, with ``KERAS_BACKEND=torch``, as on a
GPU node without TensorFlow.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest

from conftest import ROOT
from gpucourse import frameworks

EPISODE = ROOT / "episodes" / "04-keras-cnn.ipynb"


def _outputs(nb) -> str:
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text") or "".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(texts)


def test_episode_4_runs_on_keras_pytorch_backend(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(EPISODE, as_version=4)
    env = dict(os.environ, KERAS_BACKEND="torch", GPUCOURSE_QUICK="1", GPUCOURSE_OFFLINE="1",
               GPUCOURSE_FIGURES=str(tmp_path / "figures.jsonl"), GPUCOURSE_NOTEBOOK="episodes/04-keras-cnn.ipynb")
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(EPISODE.parent)}}).execute(env=env)
    shown = _outputs(nb)
    assert "Keras will run on torch: KERAS_BACKEND was set to 'torch' before this cell" in shown
    assert "on torch · GPU: none" in shown
    assert "inside keras.device('cpu:0') → cpu" in shown
    assert "in float32 (Keras on torch)" in shown
    assert "I0000" not in shown and "absl::InitializeLog" not in shown   # TensorFlow imported quietly
    logged = (tmp_path / "figures.jsonl").read_text()
    assert '"name": "ep04.keras_backend", "value": "torch"' in logged


def test_the_backend_is_set_in_one_cell_before_keras_is_imported():
    cells = [c.source for c in nbformat.read(EPISODE, as_version=4).cells if c.cell_type == "code"]
    chooses = [i for i, s in enumerate(cells) if 'os.environ["KERAS_BACKEND"]' in s]
    imports = [i for i, s in enumerate(cells) if re.search(r"^(import keras|from keras)\b", s, re.M)]
    assert len(chooses) == 1 and chooses[0] < min(imports)


def test_an_explicit_keras_backend_wins(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    assert frameworks.keras_backend() == ("torch", "KERAS_BACKEND was set to 'torch' before this cell")


def test_without_tensorflow_keras_runs_on_pytorch_and_says_so(monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.delitem(sys.modules, "keras", raising=False)

    def missing():
        raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")

    monkeypatch.setattr(frameworks, "import_tensorflow", missing)
    backend, why = frameworks.keras_backend()
    assert backend == "torch" and why == "TensorFlow is not installed here, so Keras runs on PyTorch"

    def broken():
        raise ImportError("dlopen: libmetal_plugin.dylib not found")

    monkeypatch.setattr(frameworks, "import_tensorflow", broken)
    backend, why = frameworks.keras_backend()
    assert backend == "torch" and "TensorFlow is installed but does not load" in why


def test_with_tensorflow_keras_runs_on_it(monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    monkeypatch.setattr(frameworks, "import_tensorflow", lambda: None)
    assert frameworks.keras_backend() == ("tensorflow", "TensorFlow is installed here")
