"""gpucourse.memory: the CPU's TensorMeter counts like the CUDA allocator; CudaMeter is the CUDA calls."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from gpucourse import memory
from gpucourse.fakes.fakecuda import fake_gpu
from gpucourse.memory import GIB, MIB, format_bytes


def test_format_bytes_uses_binary_units():
    assert format_bytes(3 * MIB) == "3.00 MiB"
    assert format_bytes(1.5 * GIB) == "1.50 GiB"
    assert format_bytes(2048) == "2.00 KiB"
    assert format_bytes(512) == "512 B"


def test_counts_tensors_created_inside_and_frees_them():
    meter = memory.TensorMeter()
    with meter:
        x = torch.zeros(1024, 256)                  # 1 MiB of float32
        view = x[:10]                               # a view: no new memory
        x.add_(1)                                   # in place: no new memory
    assert meter.allocated() == MIB
    del x, view
    assert meter.allocated() == 0
    assert meter.peak() == MIB


def test_tensors_from_outside_are_not_counted():
    outside = torch.zeros(1000)
    meter = memory.TensorMeter()
    with meter:
        part = outside[:500]
        outside.mul_(2)
    assert meter.allocated() == 0
    del part


def test_training_state_is_sixteen_bytes_per_parameter_with_adam():
    meter = memory.TensorMeter()
    with meter:
        model = nn.Sequential(nn.Linear(15, 64), nn.ReLU(), nn.Linear(64, 1))
        n = sum(p.numel() for p in model.parameters())
        assert meter.allocated() == 4 * n
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.randn(8, 15)).sum().backward()
        optimizer.step()
        held = meter.allocated()                    # the batch is gone: nothing refers to it
        assert 16 * n <= held <= 16 * n + 64          # (+ Adam's step counters, one scalar per tensor)
        optimizer.zero_grad(set_to_none=True)
        assert 12 * n <= meter.allocated() <= 12 * n + 64


def test_peak_and_reset():
    meter = memory.TensorMeter()
    with meter:
        a = torch.zeros(MIB, dtype=torch.uint8)
        b = torch.zeros(MIB, dtype=torch.uint8)
        del b
        assert meter.peak() == 2 * MIB
        meter.reset_peak()
        assert meter.peak() == MIB
    del a


def test_budget_raises_the_gpu_error_and_is_restored():
    meter = memory.TensorMeter()
    keep = []
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 1.00 MiB. The budget of 1.50 MiB"):
        with meter.budget(int(1.5 * MIB)):
            for _ in range(3):
                keep.append(torch.zeros(MIB, dtype=torch.uint8))
    assert len(keep) == 1 and meter.limit is None and not meter.active
    with pytest.raises(ValueError):
        with meter.budget(0):
            pass


def test_failed_step_memory_is_held_by_the_exception():
    meter = memory.TensorMeter()

    def step():
        big = torch.zeros(MIB, dtype=torch.uint8)  # noqa: F841
        torch.zeros(MIB, dtype=torch.uint8)         # over budget

    with meter.budget(int(1.5 * MIB)):
        try:
            step()
        except torch.OutOfMemoryError as exc:
            assert meter.allocated() == MIB         # `big`, held by the traceback's frame
            kept = exc
        assert meter.allocated() == MIB
        del kept
        gc.collect()
        assert meter.allocated() == 0


def test_nested_entry_counts_once_and_summary_names_the_op():
    meter = memory.TensorMeter()
    with meter:
        with meter:
            x = torch.ones(100)
        assert meter.active
    assert not meter.active
    text = meter.summary()
    assert "ones" in text and "(100,)" in text and "400 B" in text
    del x


def test_backward_and_checkpointing_are_counted():
    from torch.utils.checkpoint import checkpoint_sequential

    def peak(ckpt):
        meter = memory.TensorMeter()
        with meter:
            torch.manual_seed(0)
            model = nn.Sequential(*[layer for _ in range(8) for layer in (nn.Linear(64, 64), nn.ReLU())])
            x = torch.randn(512, 64)
            meter.reset_peak()
            out = checkpoint_sequential(model, 4, x, use_reentrant=False) if ckpt else model(x)
            out.sum().backward()
            return meter.peak()

    assert peak(ckpt=True) < 0.8 * peak(ckpt=False)


def test_meter_for_picks_by_device():
    assert isinstance(memory.meter_for("cpu"), memory.TensorMeter)
    for other in ("mps", "xpu"):        # no CUDA statistics there: the meter counts tensors
        assert isinstance(memory.meter_for(other), memory.TensorMeter)
    with pytest.raises(ValueError, match="no memory meter"):
        memory.meter_for("meta")


def test_cuda_meter_is_the_cuda_calls():
    """Under the fake CUDA runtime torch.cuda's own functions run: the meter reads them for the device the
    notebooks name, torch.device("cuda") without an index (which set_per_process_memory_fraction rejects)."""
    with fake_gpu("T4") as gpu:
        meter = memory.meter_for(torch.device("cuda"))
        assert isinstance(meter, memory.CudaMeter) and meter.device == torch.device("cuda", 0)
        gpu.allocate(3 * MIB)                    # 1-10 MiB requests share 20 MiB segments
        assert (meter.allocated(), meter.reserved(), meter.peak()) == (3 * MIB, 20 * MIB, 3 * MIB)
        gpu.free(3 * MIB)
        meter.reset_peak()
        assert meter.peak() == 0 and "memory summary" in meter.summary()
        with pytest.raises(ValueError, match="more than the device's"):
            with meter.budget(16 * GIB):
                pass
        with pytest.raises(ValueError, match="positive number of bytes"):
            with meter.budget(0):
                pass


def test_cuda_budget_is_on_top_of_what_is_already_reserved():
    """A GPU budget, like a TensorMeter's, is for what the block creates: memory the allocator still holds
    after emptying its cache (the cuBLAS workspace, live tensors) is added, not charged to the budget."""
    with fake_gpu("T4") as gpu:
        meter = memory.CudaMeter("cuda")
        gpu.allocate(8 * MIB)                    # a workspace that stays: one 20 MiB segment
        gpu.allocate(500 * MIB)
        gpu.free(500 * MIB)                      # cached, given back by free_cache() before the budget is set
        with meter.budget(64 * MIB):
            allowed = torch.cuda.get_per_process_memory_fraction(0) * meter.total()
            assert meter.reserved() == 20 * MIB
            assert allowed == pytest.approx(84 * MIB)    # 20 MiB held + the 64 MiB budget, not 64 MiB in all
            gpu.allocate(60 * MIB)               # a segment of its own: 80 MiB reserved
            with pytest.raises(torch.OutOfMemoryError):
                gpu.allocate(20 * MIB)
        assert torch.cuda.get_per_process_memory_fraction(0) == 1.0
        with pytest.raises(ValueError, match="already reserved"):
            with meter.budget(meter.total() - 60 * MIB):
                pass
    with pytest.raises(ValueError, match="needs a CUDA device"):
        memory.CudaMeter("cpu")
