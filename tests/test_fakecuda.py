"""The fake CUDA runtime reaches as far as a GPU machine's start-up does.

Imports that switch on ``torch.cuda._is_compiled()`` (torch._dynamo, transformers, peft), bf16
as each model answers it, nvidia-smi's sampling loop, and Python processes started from a
fake block (torchrun's workers, episode 11's training run), which must see the same machine.
"""
import os
import subprocess
import sys
import time

import pytest
import torch

from gpucourse.fakes import fakecuda
from gpucourse.fakes.fakecuda import MODELS, fake_gpu, machine_spec, parse_machine_spec

MIB = 2**20


def _child(code: str, **env) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python with this environment (plus ``env``)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})


# --------------------------------------------------------------------------- imports

@pytest.mark.parametrize("imports", [
    "import torch._dynamo",
    "import transformers; from transformers import LlamaForCausalLM",
    "import peft",
])
def test_libraries_import_first_thing_under_a_fake_t4(imports):
    """With _is_compiled() True, torch/_dynamo/device_interface.py imports _cuda_getCurrentRawStream."""
    pytest.importorskip(imports.split()[1].split(".")[0].rstrip(";"))
    code = ("from gpucourse.fakes.fakecuda import fake_gpu\n"
            "with fake_gpu('T4'):\n"
            f"    {imports}\n"
            "    import torch; print(torch.cuda._is_compiled(), torch.cuda.get_device_name(0))\n")
    done = _child(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["True", "Tesla", "T4"]


def test_a_missing_stream_entry_point_names_itself_when_called():
    before = getattr(torch._C, "_cuda_getCurrentRawStream", None)   # only the CUDA build has it
    with fake_gpu("T4"):
        from torch._C import _cuda_getCurrentRawStream
        with pytest.raises(RuntimeError, match="_cuda_getCurrentRawStream: the fake CUDA runtime"):
            _cuda_getCurrentRawStream(0)
        assert not torch.cuda.is_current_stream_capturing()
    # the build's own again after the block (none on the CPU build, the real one on the CUDA build)
    assert getattr(torch._C, "_cuda_getCurrentRawStream", None) is before


def test_an_optimizer_steps_under_the_fake_on_either_build():
    """Optimizer.step asks torch.accelerator for the current stream (is a CUDA graph being
    captured?): on PyTorch's CUDA build that reached the missing driver under the fake."""
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(model.parameters())
    with fake_gpu("T4"):
        assert torch.accelerator.current_accelerator() == torch.device("cuda")
        assert not torch.accelerator.current_stream().is_capturing()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
    with pytest.raises(RuntimeError, match="fake CUDA runtime"):
        with fake_gpu("T4"):
            torch.accelerator.current_stream().query()


# --------------------------------------------------------------------------- bf16

@pytest.mark.parametrize("model", sorted(MODELS))
def test_bf16_support_follows_the_compute_capability(model):
    """A T4 makes bfloat16 tensors (emulated), so only including_emulation=False tells it apart."""
    with fake_gpu(model):
        assert torch.cuda.is_bf16_supported()
        assert torch.cuda.is_bf16_supported(including_emulation=False) == (MODELS[model]["major"] >= 8)
        assert torch.cuda.is_tf32_supported() == (MODELS[model]["major"] >= 8)
    assert not torch.cuda.is_bf16_supported()


# --------------------------------------------------------------------------- models

@pytest.mark.parametrize("model, name, capability, sms", [
    ("A100 40GB", "NVIDIA A100-SXM4-40GB", (8, 0), 108), ("H100 PCIe", "NVIDIA H100 PCIe", (9, 0), 114),
    ("H200", "NVIDIA H200", (9, 0), 132), ("B200", "NVIDIA B200", (10, 0), 148),
    ("G4", "NVIDIA RTX PRO 6000 Blackwell Server Edition", (12, 0), 188),
])
def test_the_newer_models_report_what_torch_prints_on_them(model, name, capability, sms):
    with fake_gpu(model):
        props = torch.cuda.get_device_properties(0)
        assert (props.name, (props.major, props.minor), props.multi_processor_count) == (name, capability, sms)
        assert torch.cuda.get_device_capability(0) == capability
        assert f"sm_{capability[0]}{capability[1]}" in torch.cuda.get_arch_list()   # no warning at init
    totals_gib = {"A100 40GB": 39.39, "H100 PCIe": 79.11, "H200": 139.80, "B200": 178.36, "G4": 94.97}
    assert MODELS[model]["total_memory"] / 2**30 == pytest.approx(totals_gib[model], abs=0.01)


# --------------------------------------------------------------------------- nvidia-smi

def _smi(*args, **kwargs):
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60, **kwargs)


def test_nvidia_smi_answers_timestamp_and_driver_version():
    with fake_gpu("L4", 2, cuda_version="12.6"):
        lines = _smi("--query-gpu=timestamp,driver_version,index", "--format=csv,noheader").stdout.splitlines()
        assert [line.split(", ")[1:] for line in lines] == [[fakecuda.DRIVER_VERSION, "0"],
                                                             [fakecuda.DRIVER_VERSION, "1"]]
        time.strptime(lines[0].split(", ")[0][:19], "%Y/%m/%d %H:%M:%S")
        assert "CUDA Version: 12.6" in _smi().stdout
        refused = _smi("--query-gpu=timestamp,no.such.field", "--format=csv")
        assert refused.returncode == 2 and refused.stdout.startswith('Field "no.such.field" is not a valid')


def test_nvidia_smi_samples_in_a_loop_until_it_is_terminated():
    """``-lms``: a line per period through a pipe, each as it is printed; the memory is read anew."""
    with fake_gpu("T4") as gpu:
        proc = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,memory.used", "--format=csv,noheader,nounits",
                                 "-lms", "50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = [proc.stdout.readline() for _ in range(3)]
            gpu.allocate(500 * MIB)
            # lines printed before the allocation may still be in the pipe (this process may have
            # been paused): read until one shows the new memory, as a watching program would
            now = str((fakecuda.CONTEXT_BYTES + 500 * MIB) >> 20)
            later = []
            while len(later) < 200 and (len(later) < 4 or later[-1].split(", ")[1].strip() != now):
                later.append(proc.stdout.readline())
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0          # SIGTERM ends it quietly
        assert proc.stderr.read() == ""
        proc.stdout.close()
        proc.stderr.close()
    stamps = [line.split(", ")[0] for line in first + later]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert {line.split(", ")[1].strip() for line in first} == {"0"}
    assert later[-1].split(", ")[1].strip() == now, f"200 samples later, still {later[-1]!r}"


def test_nvidia_smi_l_takes_seconds():
    with fake_gpu("T4"):
        proc = subprocess.Popen(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader", "-l", "1"],
                                stdout=subprocess.PIPE, text=True)
        start = time.monotonic()
        lines = [proc.stdout.readline() for _ in range(2)]
        took = time.monotonic() - start
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert lines == ["0\n", "0\n"] and took >= 0.9


# --------------------------------------------------------------------------- child processes

@pytest.mark.parametrize("text, args", [
    ("T4", dict(model="T4", count=1)), ("T4x2", dict(model="T4", count=2)),
    ("A100 40GBx8;mode=Exclusive_Process", dict(model="A100 40GB", count=8, compute_mode="Exclusive_Process")),
    ("G4;cuda=12.9;tensorflow", dict(model="G4", count=1, cuda_version="12.9", tensorflow=True)),
])
def test_a_machine_spec_reads_back(text, args):
    parsed = parse_machine_spec(text)
    assert {k: parsed[k] for k in args} == args
    assert parse_machine_spec(machine_spec(**parsed)) == parsed


@pytest.mark.parametrize("text", ["K80", "T4xtwo", "T4;colour=green"])
def test_a_bad_machine_spec_is_named(text):
    with pytest.raises(ValueError, match="GPUCOURSE_FAKE_GPU"):
        parse_machine_spec(text)


def test_a_child_process_sees_the_same_fake_machine():
    code = "import torch; print(torch.cuda.device_count(), torch.cuda.get_device_name(0))"
    with fake_gpu("T4", 2):
        assert _child(code).stdout.strip() == "2 Tesla T4"
    assert "GPUCOURSE_FAKE_GPU" not in os.environ
    assert fakecuda.SITE_FOLDER.as_posix() not in os.environ.get("PYTHONPATH", "")
    assert _child(code.replace(", torch.cuda.get_device_name(0)", "")).stdout.strip() == "0"


def test_a_child_respects_its_own_visible_devices_and_runs_other_sitecustomize(tmp_path):
    other = tmp_path / "sitecustomize.py"
    other.write_text("import os; os.environ['OTHER_SITE_RAN'] = 'yes'\n")
    code = "import os, torch; print(torch.cuda.device_count(), os.environ.get('OTHER_SITE_RAN'))"
    with fake_gpu("H100", 8):
        env = dict(CUDA_VISIBLE_DEVICES="5,6", PYTHONPATH=os.environ["PYTHONPATH"] + os.pathsep + str(tmp_path))
        assert _child(code, **env).stdout.split() == ["2", "yes"]


def test_a_tensorflow_child_sees_the_fake_gpus_when_the_parent_faked_tensorflow():
    """Episode 6's TensorFlow child (tf_memory_child) must not report a CPU run as the parent's GPU."""
    pytest.importorskip("tensorflow")
    code = ("from gpucourse.frameworks import import_tensorflow\n"
            "tf = import_tensorflow()\n"
            "gpus = tf.config.list_physical_devices('GPU')\n"
            "print(len(gpus), tf.config.experimental.get_device_details(gpus[0])['device_name'])")
    with fake_gpu("T4", 2, tensorflow=True):
        assert _child(code).stdout.strip() == "2 Tesla T4"


def test_a_child_that_never_imports_torch_does_not_load_it():
    with fake_gpu("T4"):
        done = _child("import sys; print('torch' in sys.modules, 'gpucourse.fakes.fakecuda' in sys.modules)")
    assert done.stdout.split() == ["False", "True"]


def test_a_torchrun_worker_takes_a_gpu_and_nccl_not_the_cpu():
    """A fake run must never time a CPU/Gloo worker and record it as a 'Tesla T4' figure (G4-11d)."""
    code = ("from gpucourse.distributed.ddp_train import pick_device\n"
            "import torch\n"
            "device, backend = pick_device(1, 2)\n"
            "name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'none'\n"
            "print(device, backend, name)")
    with fake_gpu("T4", 2):
        assert _child(code).stdout.strip() == "cuda:1 nccl Tesla T4"
        assert _child(code, CUDA_VISIBLE_DEVICES="").stdout.split() == ["cpu", "gloo", "none"]


def test_episode_11s_training_child_goes_to_the_fake_gpu_instead_of_training_on_the_cpu(tmp_path):
    """Without the fake in the child it trained on the CPU while the notebook named a GPU; now it
    chooses CUDA (``--device auto``) and stops at its first CUDA tensor, which the fake cannot make."""
    command = [sys.executable, "-m", "gpucourse.children.survive_train", "--out", str(tmp_path), "--epochs", "1",
               "--samples", "64", "--batch", "64", "--quiet"]
    with fake_gpu("T4"):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "cuda" in done.stderr.lower()
    assert not (tmp_path / "final.pt").exists()
    plain = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert plain.returncode == 0 and (tmp_path / "final.pt").exists(), plain.stderr[-2000:]
