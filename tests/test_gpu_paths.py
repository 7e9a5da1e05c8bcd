"""The branches that run only on a GPU, executed on the CPU under the fake CUDA runtime.

`gpucourse.fakes.fakecuda` replaces only the lowest layer (torch._C's CUDA entry points, cudaMemGetInfo,
nvidia-smi, TensorFlow's GPU list); torch.cuda's Python wrappers stay real, so a wrong argument fails
here as it does on a GPU. Each test names the review finding (D1–D10) it would have caught.
"""
import json
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gpucourse import device as gdevice
from gpucourse import memory, reference
from gpucourse.fakes.fakecuda import MODELS, fake_gpu, segment_size
from gpucourse.profiling import self_time_table

MIB, GIB = 2**20, 2**30


# --------------------------------------------------------------------------- the fake itself

def test_the_fake_keeps_torchs_own_checks():
    """An index-less device where torch requires an index fails under the fake exactly as on a GPU (D1)."""
    with fake_gpu("T4"):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.cuda.get_device_name(torch.device("cuda")) == "Tesla T4"
        with pytest.raises(ValueError, match="specified index"):
            torch.cuda.set_per_process_memory_fraction(0.5, torch.device("cuda"))
        with pytest.raises(AssertionError, match="Invalid device id"):
            torch.cuda.get_device_properties(1)
    assert not torch.cuda.is_available()            # everything restored


def test_visible_devices_are_what_cuda_shows():
    with fake_gpu("A100", 8, visible="3,5"):
        assert torch.cuda.device_count() == 2
        names = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                               capture_output=True, text=True, check=True).stdout.split()
        assert names == [str(i) for i in range(8)]  # nvidia-smi ignores CUDA_VISIBLE_DEVICES
    with fake_gpu("T4", 2, visible="1,7,0"):        # CUDA stops at the first invalid entry
        assert torch.cuda.device_count() == 1


def test_the_fake_allocator_reserves_segments_and_runs_out():
    assert segment_size(100) == 2 * MIB and segment_size(3 * MIB) == 20 * MIB
    assert segment_size(12 * MIB) == 12 * MIB and segment_size(13 * MIB + 1) == 14 * MIB
    with fake_gpu("T4") as gpu:
        gpu.allocate(12 * MIB)
        assert (torch.cuda.memory_allocated(0), torch.cuda.memory_reserved(0)) == (12 * MIB, 12 * MIB)
        torch.cuda.set_per_process_memory_fraction(20 * MIB / MODELS["T4"]["total_memory"], 0)
        with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 10.00 MiB"):
            gpu.allocate(10 * MIB)


# --------------------------------------------------------------------------- D1: the memory meter

@pytest.mark.parametrize("spec, index", [(torch.device("cuda"), 0), ("cuda", 0), ("cuda:1", 1), (1, 1)])
def test_cuda_meter_takes_every_way_of_naming_a_device(spec, index):
    with fake_gpu("T4", 2) as gpu:
        meter = memory.meter_for(spec) if not isinstance(spec, int) else memory.CudaMeter(spec)
        assert meter.device == torch.device("cuda", index)
        gpu.allocate(3 * MIB, device=index)
        assert meter.allocated() == 3 * MIB and meter.reserved() == 20 * MIB
        with meter.budget(100 * MIB):             # the call that stopped Run all in episode 5 (D1)
            fraction = torch.cuda.get_per_process_memory_fraction(index)
            assert fraction == pytest.approx((20 * MIB + 100 * MIB) / MODELS["T4"]["total_memory"])
        assert torch.cuda.get_per_process_memory_fraction(index) == 1.0


def test_a_cuda_meter_is_a_context_that_lets_errors_through():
    with fake_gpu("L4") as gpu:
        with pytest.raises(torch.OutOfMemoryError):
            with memory.meter_for("cuda") as meter:
                gpu.allocate(MIB)
                assert meter.peak() >= MIB
                raise torch.OutOfMemoryError("CUDA out of memory")


def test_a_checkpoint_from_more_gpus_than_this_machine_has_starts_the_cuda_generators_afresh(capsys):
    from gpucourse import checkpoint

    state = checkpoint.rng_state()
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8)] * 2     # written on two GPUs
    with fake_gpu("T4", 1):
        checkpoint.set_rng_state(state)
    assert "2 CUDA generator states and this machine 1 GPUs" in capsys.readouterr().out


class _OnTheGpu:
    """A tensor as ``torch.load(map_location="cuda")`` hands it back: ``numpy()`` refuses it."""

    def __init__(self, tensor):
        self.tensor = tensor

    def numpy(self):
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                        "tensor to host memory first.")

    def cpu(self):
        return self.tensor


def test_random_states_restore_from_tensors_that_were_mapped_to_a_gpu():
    from gpucourse import checkpoint

    state = checkpoint.rng_state()
    want = np.random.rand()
    state["numpy"]["key"] = _OnTheGpu(state["numpy"]["key"])
    state["torch"] = _OnTheGpu(state["torch"])
    np.random.rand()
    checkpoint.set_rng_state(state)
    assert np.random.rand() == want


def test_a_checkpoint_loads_into_cpu_memory_whatever_it_was_written_on(tmp_path):
    """restore() places each part on its object's device; Adam's step counts must stay on the CPU."""
    from gpucourse import checkpoint

    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    checkpoint.save({"optimizer": optimizer.state_dict()}, tmp_path / "c.pt")
    with fake_gpu("A100"):                             # this run has a GPU now
        loaded = checkpoint.load(tmp_path / "c.pt")
    devices = {t.device.type for s in loaded["optimizer"]["state"].values() for t in s.values()}
    assert devices == {"cpu"}


def test_a_cuda_budget_raises_the_gpus_error_beyond_it():
    with fake_gpu("H100") as gpu:
        meter = memory.meter_for(torch.device("cuda"))
        with meter.budget(64 * MIB):
            gpu.allocate(40 * MIB)
            with pytest.raises(torch.OutOfMemoryError):
                gpu.allocate(40 * MIB)
        gpu.allocate(40 * MIB)                      # the budget is gone after the block
        assert meter.peak() == 80 * MIB
        meter.reset_peak()
        assert meter.total() == MODELS["H100"]["total_memory"] and "memory summary" in meter.summary()


def test_a_budget_larger_than_the_gpu_is_named():
    with fake_gpu("T4"):
        with pytest.raises(ValueError, match="more than the device"):
            with memory.meter_for("cuda").budget(20 * GIB):
                pass


# --------------------------------------------------------------------------- D4: the profiler table

def _event(key, device_type, self_device_us, self_cpu_us=0.0, count=1, user=False):
    return SimpleNamespace(key=key, device_type=device_type, self_device_time_total=self_device_us,
                           self_cpu_time_total=self_cpu_us, count=count, is_user_annotation=user)


def test_the_gpu_table_counts_each_kernel_once_and_no_annotation():
    """Kineto's shape: the aten op carries its kernel's time too, and a record_function label gets a GPU row."""
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    events = [_event("aten::addmm", cpu, 900.0, 50.0, 3), _event("ampere_sgemm_128x64_tn", cuda, 900.0, count=3),
              _event("train_step", cuda, 2500.0, user=True), _event("train_step", cpu, 0.0, 400.0, user=True),
              _event("Memcpy HtoD (Pageable -> Device)", cuda, 100.0, count=3)]
    prof = SimpleNamespace(key_averages=lambda: events)
    rows = self_time_table(prof, device=True).splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["ampere_sgemm_128x64_tn", "Memcpy"]
    assert rows[0].split()[-1] == "90%" and rows[1].split()[-1] == "10%"   # shares of 1000 µs, not of 4400
    cpu_rows = self_time_table(prof).splitlines()[1:]
    assert cpu_rows[0].split()[0] == "train_step"                          # the CPU table is unchanged


# --------------------------------------------------------------------------- D7, D9: bands

@pytest.fixture
def records_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_REFERENCE_DIR", str(tmp_path))
    return tmp_path


def _record(folder, gpu_name, **figures):
    record = {"schema": 1, "date": "2026-11-20", "device": "test", "hardware": {"gpu_name": gpu_name},
              "software": {}, "notebooks": [{"notebook": "episodes/05.ipynb", "outcome": "ok", "seconds": 1.0}],
              "figures": {k: {"value": v, "unit": "", "device": gpu_name, "notebook": "episodes/05.ipynb"}
                          for k, v in figures.items()}}
    (folder / "t4.json").write_text(json.dumps(record))


def test_a_measured_band_of_a_negative_figure_is_not_inverted(records_dir):
    _record(records_dir, "Tesla T4", **{"ep05.some_change_pct": -20.0, "ep05.zero_pct": 0.0})
    expected = reference.band("ep05.some_change_pct", "Tesla T4")
    assert (expected.low, expected.high) == pytest.approx((-23.0, -17.0))
    assert "✓ inside" in reference.verdict("ep05.some_change_pct", -19.0, "%", "Tesla T4")
    assert reference.band("ep05.zero_pct", "Tesla T4") is None     # ±15 % of nothing is no band


@pytest.mark.parametrize("name, model", [
    ("Tesla T4", "Tesla T4"), ("NVIDIA L4", "NVIDIA L4"), ("Tesla V100-SXM2-16GB", "Tesla V100 SXM2"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"), ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL"), ("NVIDIA H200", "NVIDIA H200"), ("NVIDIA H200 NVL", "NVIDIA H200 NVL"),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"), ("Tesla V100-PCIE-16GB", "Tesla V100 PCIe"),
    ("Tesla V100-PCIE-32GB", "Tesla V100 PCIe"), ("Tesla V100-SXM2-32GB", "Tesla V100 SXM2"),
    ("NVIDIA GH200 480GB", "NVIDIA GH200"), ("NVIDIA L40S", None), ("NVIDIA GeForce RTX 4090", None),
])
def test_every_gpu_name_finds_its_own_datasheet(name, model):
    assert reference.gpu_model(name)[0] == model


def test_a_variant_is_judged_by_its_own_datasheet():
    """An A100 80GB PCIe has 1,935 GB/s, not the SXM's 2,039; an H200 NVL 60 TFLOP/s FP32, not 67."""
    assert reference.band("ep01.bandwidth_gbs", "NVIDIA A100 80GB PCIe").high == pytest.approx(0.92 * 1935)
    assert reference.band("ep01.matmul_fp32_tflops", "NVIDIA H200 NVL").high == pytest.approx(0.95 * 60)
    assert reference.band("ep01.matmul_fp32_tflops", "Tesla V100-PCIE-16GB").high == pytest.approx(0.95 * 14)


def test_a_t4s_power_cap_and_ecc_widen_its_bands_below():
    assert reference.band("ep01.matmul_fp32_tflops", "Tesla T4").low == pytest.approx(0.45 * 8.1)
    assert reference.band("ep01.bandwidth_gbs", "Tesla T4").low == pytest.approx(0.6 * 320)
    assert reference.band("ep01.matmul_fp32_tflops", "NVIDIA L4").low == pytest.approx(0.6 * 30.3)


# Fake models the bands file has no datasheet row for (yet): the course says "no expected band".
WITHOUT_BANDS = {"B200", "G4", "P100"}


def test_every_model_in_the_bands_file_matches_its_own_fake_name():
    for key, spec in MODELS.items():
        found = reference.gpu_model(spec["name"])[0]
        assert (found is None) == (key in WITHOUT_BANDS), (key, found)


def test_a_gh200_gets_no_pcie_band_for_its_nvlink_copies(records_dir):
    """D9: 'GH200' used to match 'H200', and its NVLink-C2C copies were judged against PCIe."""
    assert reference.band("ep01.h2d_gbs", "NVIDIA GH200 480GB") is None
    assert reference.band("ep01.matmul_fp32_tflops", "NVIDIA GH200 480GB").high == pytest.approx(0.95 * 67)
    assert reference.band("ep01.bandwidth_gbs", "NVIDIA H100 NVL").high == pytest.approx(0.92 * 3900)


# --------------------------------------------------------------------------- device report and nvidia-smi

def test_the_device_report_on_two_fake_t4s():
    with fake_gpu("T4", 2, tensorflow=True):
        torch_rep, tf_rep = gdevice.report()
        assert [g.name for g in torch_rep.gpus] == ["Tesla T4", "Tesla T4"]
        assert torch_rep.gpus[0].compute_capability == "7.5" and round(torch_rep.gpus[0].memory_gib, 2) == 14.74
        assert tf_rep.gpu_count == 2 and tf_rep.gpus[1].name == "Tesla T4"
        text = gdevice.format_report([torch_rep, tf_rep])
        assert "NO GPU FOUND" not in text and "[1] Tesla T4 · 14.7 GiB" in text
        assert "Tesla T4" in gdevice.nvidia_smi()


# --------------------------------------------------------------------------- features a GPU may lack

@pytest.mark.parametrize("model, dtype", [("T4", torch.float16), ("L4", torch.bfloat16), ("A100", torch.bfloat16),
                                          ("H100", torch.bfloat16)])
def test_autocast_uses_bfloat16_from_ampere_and_float16_with_a_scaler_before(model, dtype):
    from gpucourse import features

    with fake_gpu(model):
        chosen, why = features.amp_dtype_for(torch.device("cuda"))
    assert chosen == dtype and ("GradScaler" in why)
    assert features.amp_dtype_for("cpu")[0] == torch.bfloat16


@pytest.mark.parametrize("text, words", [
    ("RuntimeError: Failed to find C compiler. Please specify via CC environment variable.", "C compiler"),
    ("Found Tesla P100 which is too old to be supported by the triton GPU compiler", "too old for Triton"),
    ("InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx", "C++ compiler"),
    ("something else entirely", "first line"),
])
def test_a_failed_compile_is_explained_by_its_own_error(text, words):
    from torch._inductor.exc import InductorError

    from gpucourse import features

    assert issubclass(InductorError, features.COMPILE_ERRORS)
    message = features.compile_failure(RuntimeError(text))
    assert words in message and text.splitlines()[0][:40] in message


def test_an_exclusive_process_gpu_is_noticed():
    from gpucourse import features

    with fake_gpu("A100", 2, compute_mode="Exclusive_Process"):
        assert features.compute_mode(1) == "Exclusive_Process" and features.gpu_is_exclusive(0)
    with fake_gpu("T4"):
        assert features.compute_mode(0) == "Default" and not features.gpu_is_exclusive(0)
    assert features.compute_mode(0) is None or not features.gpu_is_exclusive(0)   # no nvidia-smi here


def test_timing_synchronises_a_cuda_device():
    from gpucourse.timing import synchronizer

    calls = []
    with fake_gpu("T4"):
        real = torch._C._cuda_synchronize
        torch._C._cuda_synchronize = lambda: calls.append("sync")
        try:
            synchronizer(torch.device("cuda"))()
            synchronizer("cuda:0")()
        finally:
            torch._C._cuda_synchronize = real
    assert calls == ["sync", "sync"]


@pytest.mark.parametrize("model, runs", [("T4", False), ("A100", True), ("H100", True), ("L4", True)])
def test_int4_is_tried_only_where_tinygemm_exists(model, runs):
    """A T4 (7.5) would fail inside a CUDA kernel, asynchronously: the episode must ask first."""
    from gpucourse import llm

    with fake_gpu(model):
        why = llm.why_no_int4(torch.device("cuda"))
    assert (why is None) == runs
    if not runs:
        assert "8.0" in why and "7.5" in why and MODELS[model]["name"] in why


def test_int4_is_not_tried_without_a_gpu():
    from gpucourse import llm

    assert "CUDA" in llm.why_no_int4("cpu")


def test_the_int4_config_uses_the_tinygemm_layout_in_this_torchao():
    pytest.importorskip("torchao")
    from gpucourse import llm

    config = llm.int4_config(group_size=64)
    assert config.group_size == 64
    fmt = getattr(config, "int4_packing_format", None)        # torchao >= 0.15: plain (mslk) by default
    layout = getattr(config, "layout", None)                  # older: the tensor-core tiled layout
    assert (fmt is not None and str(getattr(fmt, "value", fmt)) == "tile_packed_to_4d") or \
        type(layout).__name__ == "TensorCoreTiledLayout"
