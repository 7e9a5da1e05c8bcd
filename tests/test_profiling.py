"""gpucourse.profiling: the slow-shard data set and the self-time table."""
import time
from types import SimpleNamespace

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


def _cpu_event(key, self_us, count=1):
    return SimpleNamespace(key=key, self_cpu_time_total=self_us, count=count,
                           device_type=torch.autograd.DeviceType.CPU)


def test_self_time_table_lists_ops_by_self_time_with_their_shares():
    """Recorded events with fixed times: the order and the shares cannot depend on the machine's load."""
    events = [_cpu_event("aten::zeros", 40.0), _cpu_event("aten::mm", 6_000.0, count=5),
              _cpu_event("aten::matmul", 200.0, count=5), _cpu_event("aten::add", 1_760.0),
              _cpu_event("aten::empty", 2_000.0, count=4)]
    prof = SimpleNamespace(key_averages=lambda: events)
    lines = self_time_table(prof, top=3).splitlines()
    assert lines[0].split()[0] == "op" and len(lines) == 4
    rows = [line.split() for line in lines[1:]]
    assert [r[0] for r in rows] == ["aten::mm", "aten::empty", "aten::add"]
    assert rows[0][1:] == ["5", "6.00", "60%"]                # shares of all 10 ms, not of the rows shown
    assert rows[2][1:] == ["1", "1.76", "18%"]


def test_self_time_table_of_a_live_profile_is_sorted_by_self_time():
    """A real profile: which op comes first depends on the machine, so only the table's shape is asserted."""
    a = torch.randn(300, 300)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            a @ a
        torch.zeros(3) + 1
    lines = self_time_table(prof, top=3).splitlines()
    assert lines[0].split()[0] == "op" and len(lines) == 4
    recorded = {e.key for e in prof.key_averages()}
    rows = [line.split() for line in lines[1:]]
    assert all(r[0] in recorded for r in rows) and "aten::mm" in recorded
    ms = [float(r[2]) for r in rows]
    assert ms == sorted(ms, reverse=True)
