import time

import pytest

from gpucourse import timing


def test_benchmark_counts_warmup_and_repeats():
    calls = []
    result = timing.benchmark(lambda: calls.append(1), "cpu", warmup=2, repeats=3)
    assert len(calls) == 5 and len(result.times) == 3


def test_benchmark_measures_sleep():
    result = timing.benchmark(lambda: time.sleep(0.01), "cpu", warmup=0, repeats=3)
    assert 0.009 < result.median < 0.5
    assert result.best <= result.median and result.spread >= 0
    assert "ms" in str(result)


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
