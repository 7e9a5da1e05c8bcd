"""gpucourse.profiling: the slow-shard data set and the self-time table."""
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader

from gpucourse.profiling import SlowShards, self_time_table


def test_shards_are_consecutive_batches_and_take_their_time():
    X, y = torch.arange(20.0).reshape(10, 2), torch.arange(10.0)
    ds = SlowShards(X, y, batch_size=3, read_seconds=0.01)
    assert len(ds) == 3
    start = time.perf_counter()
    xb, yb = ds[1]
    assert time.perf_counter() - start >= 0.009
    assert torch.equal(yb, torch.tensor([3.0, 4.0, 5.0])) and xb.shape == (3, 2)
    with pytest.raises(IndexError, match="out of range"):
        ds[3]
    assert [int(b[1][0]) for b in DataLoader(ds, batch_size=None)] == [0, 3, 6]


@pytest.mark.parametrize("kwargs, words", [(dict(batch_size=0, read_seconds=0.0), "batch_size >= 1"),
                                           (dict(batch_size=2, read_seconds=-1.0), "read_seconds >= 0"),
                                           (dict(batch_size=20, read_seconds=0.0), "fewer than one batch")])
def test_bad_arguments_are_named(kwargs, words):
    with pytest.raises(ValueError, match=words):
        SlowShards(torch.zeros(10, 2), torch.zeros(10), **kwargs)


def test_self_time_table_lists_the_dominant_op_first():
    a = torch.randn(300, 300)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            a @ a
        torch.zeros(3) + 1
    table = self_time_table(prof, top=3)
    lines = table.splitlines()
    assert lines[0].split()[0] == "op" and len(lines) == 4
    assert lines[1].startswith("aten::mm")
