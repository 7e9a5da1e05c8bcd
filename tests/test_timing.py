import time
from types import SimpleNamespace

import pytest

from gpucourse import timing


def test_benchmark_counts_warmup_and_repeats():
    calls = []
    result = timing.benchmark(lambda: calls.append(1), "cpu", warmup=2, repeats=3)
    assert len(calls) == 5 and len(result.times) == 3


class _QueuedDevice:
    """A pretend GPU on a pretend clock: ``run`` queues work and returns after 1 µs, ``sync`` waits
    until the queue is empty. No real time passes, so the figures are exact on any machine."""

    def __init__(self, works):
        self.now, self.queued, self.works = 100.0, 0.0, list(works)

    def clock(self):
        return self.now

    def run(self):
        self.now += 1e-6
        self.queued += self.works.pop(0)

    def sync(self):
        self.now, self.queued = self.now + self.queued, 0.0


def test_benchmark_times_each_repeat_from_before_the_call_to_after_the_sync(monkeypatch):
    # the warm-up pays a one-off 5 s (start-up, autotuning); then three repeats of 10, 30 and 20 ms
    device = _QueuedDevice([5.0, 0.010, 0.030, 0.020])
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=device.clock))
    monkeypatch.setattr(timing, "synchronizer", lambda dev: device.sync)
    result = timing.benchmark(device.run, "cuda:0", warmup=1, repeats=3)
    assert result.times == pytest.approx((0.010001, 0.030001, 0.020001), abs=1e-9), \
        "each repeat must count its own work, waited for, and not the warm-up's"
    assert result.median == pytest.approx(0.020001) and result.best == pytest.approx(0.010001)
    assert result.spread == pytest.approx(0.020)
    assert str(result) == "median 20.00 ms (best 10.00 ms, 3 repeats)"


def test_benchmark_on_the_real_clock_never_reads_less_than_the_work():
    # only a lower bound: time.sleep never returns early, and a busy machine can only add time
    result = timing.benchmark(lambda: time.sleep(0.01), "cpu", warmup=0, repeats=3)
    assert len(result.times) == 3 and result.best >= 0.0099


def test_synchronizer_waits_for_the_device(monkeypatch):
    """On a GPU the clock must be read after the device finished, not after the launch."""
    import torch

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: waited.append(dev))
    timing.benchmark(lambda: None, "cuda:0", warmup=1, repeats=2)
    assert len(waited) == 3  # once after warm-up, once per repeat


def test_tensorflow_gpu_name_uses_tf_sync(monkeypatch):
    import tensorflow as tf

    called = []
    monkeypatch.setattr(tf.test.experimental, "sync_devices", lambda: called.append(1))
    timing.synchronizer("/GPU:0")()
    assert called == [1]


@pytest.mark.parametrize("bad", ["tpu", "npu:0"])
def test_unknown_device(bad):
    with pytest.raises(ValueError, match="Don't know how to wait"):
        timing.synchronizer(bad)


def test_bad_repeats():
    with pytest.raises(ValueError, match="repeats"):
        timing.benchmark(lambda: None, repeats=0)


@pytest.mark.parametrize("cpu, gpu, expected", [
    ([1.0, 2.0, 4.0, 8.0], [3.0, 3.0, 3.0, 3.0], 400),    # the GPU wins from the third width on
    ([1.0, 2.0, 4.0, 8.0], [0.5, 3.0, 3.0, 3.0], 400),    # an early win that does not last is no crossover
    ([1.0, 2.0, 4.0, 8.0], [3.0, 3.0, 3.0, 9.0], None),   # it loses again at the widest: none
    ([1.0, 2.0, 4.0, 8.0], [3.0, 3.0, 4.0, 5.0], 800),    # a tie (at 400) is not a win
    ([1.0, 2.0, 4.0, 8.0], [0.5, 0.5, 0.5, 0.5], 100),    # faster everywhere
    ([1.0, 2.0, 4.0, 8.0], None, None),                   # no GPU
])
def test_crossover_is_where_the_gpu_wins_and_keeps_winning(cpu, gpu, expected):
    assert timing.crossover([100, 200, 400, 800], cpu, gpu) == expected


def test_an_intel_gpu_is_waited_for_with_its_own_synchronize():
    import torch

    assert timing.synchronizer("xpu:0") is torch.xpu.synchronize
