import os
import shutil
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


# ---------------------------------------------------------------- nvidia-smi
DRIVER_FAILURE = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                  "Make sure that the latest NVIDIA driver is installed and running.")


def fake_nvidia_smi(folder, body):
    """Write an executable `nvidia-smi` shell script into `folder` and put only `folder` on PATH."""
    exe = folder / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return exe


@pytest.fixture
def only_tmp_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    return tmp_path


def test_nvidia_smi_missing_from_path(only_tmp_on_path):
    assert device.nvidia_smi() is None


def test_nvidia_smi_failure_shows_the_reason_it_prints_on_stdout(only_tmp_on_path):
    # The real tool prints this to stdout and exits with 9 when the driver is not loaded.
    fake_nvidia_smi(only_tmp_on_path, f'echo "{DRIVER_FAILURE}"\nexit 9\n')
    text = device.nvidia_smi()
    assert text.startswith("nvidia-smi failed (exit code 9)")
    assert DRIVER_FAILURE in text


def test_nvidia_smi_failure_shows_stdout_and_stderr(only_tmp_on_path):
    fake_nvidia_smi(only_tmp_on_path, 'echo "on stdout"\necho "on stderr" >&2\nexit 255\n')
    text = device.nvidia_smi()
    assert "exit code 255" in text and "on stdout" in text and "on stderr" in text


def test_nvidia_smi_silent_failure_says_so(only_tmp_on_path):
    fake_nvidia_smi(only_tmp_on_path, "exit 3\n")
    assert device.nvidia_smi() == "nvidia-smi failed (exit code 3):\n(it printed nothing)"


def test_nvidia_smi_success_returns_its_table(only_tmp_on_path):
    fake_nvidia_smi(only_tmp_on_path, 'echo "| NVIDIA-SMI 580.00   Driver Version: 580.00   CUDA Version: 13.0 |"\n')
    assert "CUDA Version: 13.0" in device.nvidia_smi()


def test_nvidia_smi_that_hangs_is_reported(only_tmp_on_path):
    sleep = shutil.which("sleep", path=os.defpath) or "/bin/sleep"
    fake_nvidia_smi(only_tmp_on_path, f"exec {sleep} 30\n")
    assert "no answer within 0.5 s" in device.nvidia_smi(timeout=0.5)


def test_banner_on_kaggle_names_the_accelerator_and_what_to_do_without_one(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    text = device.no_gpu_banner()
    assert "GPU T4 x2" in text and "Runtime → Change runtime type" not in text
    assert "Cannot connect to GPU backend" in text and "reduced size" in text


@pytest.mark.parametrize("cuda, hip, expected", [(None, None, "a CPU-only build"),
                                                  ("13.0", None, "CUDA 13.0 (NVIDIA GPUs)"),
                                                  (None, "6.4", "ROCm/HIP 6.4 (AMD GPUs")])
def test_backend_names_the_build_on_a_machine_without_gpu(monkeypatch, cuda, hip, expected):
    """Holds on PyPI's CUDA build (Linux) and on the CPU build alike: the build is faked, the GPU absent."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.version, "xpu", None, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    text = device.backend()
    assert expected in text and text.endswith("usable devices: the CPU only")


def test_backend_names_the_build_and_what_is_usable():
    from gpucourse.fakes.fakecuda import fake_gpu

    with fake_gpu("L4", cuda_version="12.8"):
        text = device.backend()
    assert "CUDA 12.8 (NVIDIA GPUs)" in text and text.endswith("usable devices: cuda")


@pytest.mark.parametrize("name, marked", [("Tesla T4", "Tesla T4"), ("NVIDIA H100 NVL", "NVIDIA H100 NVL"),
                                          ("NVIDIA GH200 480GB", "NVIDIA GH200"), (None, None),
                                          ("NVIDIA RTX A6000", None)])
def test_the_datasheet_table_marks_the_learners_gpu(name, marked):
    lines = device.datasheet_table(name).splitlines()
    arrows = [line for line in lines if line.startswith("→")]
    assert [line.split("  ")[1].strip() for line in arrows] == ([marked] if marked else [])
    assert any("Tesla T4" in line for line in lines) and len(lines) >= 9
    assert ("not in the table" in lines[-1]) == (name is not None and marked is None)


@pytest.mark.parametrize("backend", ["mps", "xpu"])
def test_an_apple_or_intel_gpu_is_not_reported_as_no_gpu(monkeypatch, backend):
    """torch's own availability checks say so; the report names the device instead of the no-GPU banner."""
    import torch

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: backend == "mps")
    if backend == "xpu":
        monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
        monkeypatch.setattr(torch.xpu, "get_device_name", lambda index=0: "Intel(R) Arc(TM) A770 Graphics")
    assert device.other_gpu() == backend
    rep = device.torch_report()
    assert f"device '{backend}'" in rep.note and "CPU-only" not in rep.note
    assert "NO GPU FOUND" not in device.format_report([rep])
    assert f"usable devices: {backend}" in device.backend()


def test_without_any_gpu_the_banner_stays(monkeypatch):
    import torch

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    assert device.other_gpu() is None
    assert "NO GPU FOUND" in device.format_report([device.torch_report()])
