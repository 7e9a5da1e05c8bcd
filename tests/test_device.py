import sys

import pytest

from gpucourse import device


def test_reports_on_this_machine():
    torch_rep, tf_rep = device.report()
    assert torch_rep.framework == "PyTorch" and torch_rep.installed
    assert tf_rep.framework == "TensorFlow" and tf_rep.installed
    import torch

    assert torch_rep.gpu_count == torch.cuda.device_count()


def test_unknown_framework_is_named():
    with pytest.raises(ValueError, match="jax"):
        device.report(["jax"])


def test_banner_without_gpu_outside_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    reps = [device.FrameworkReport("PyTorch", "2.x", True)]
    text = device.format_report(reps)
    assert "NO GPU FOUND" in text and "Colab" in text


def test_banner_in_colab_gives_runtime_steps(monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-test")
    text = device.format_report([device.FrameworkReport("TensorFlow", "2.x", True)])
    assert "Runtime → Change runtime type" in text


def test_report_lists_gpus_without_banner():
    gpu = device.GPUInfo(0, "Tesla T4", 14.7, "7.5")
    rep = device.FrameworkReport("PyTorch", "2.x", True, gpus=[gpu], cuda="12.4", cudnn="90100")
    text = device.format_report([rep])
    assert "[0] Tesla T4 · 14.7 GiB · compute capability 7.5" in text
    assert "CUDA 12.4" in text and "NO GPU" not in text


def test_missing_framework(monkeypatch):
    monkeypatch.setattr(device, "_installed", lambda name: False)
    rep = device.torch_report()
    assert not rep.installed and "not installed" in device.format_report([rep])


def test_nvidia_smi_absent(monkeypatch):
    monkeypatch.setattr(device.shutil, "which", lambda name: None)
    assert device.nvidia_smi() is None
