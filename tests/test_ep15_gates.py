"""Episode 15's gates, on a CPU: what the episode shows holds, as counts, identities and directions.

The episode's own cells run in one namespace (top-level ``await`` included, as Jupyter runs it),
then each gate reads what they left: every request's tokens equal to generate()'s, prefix hits
equal to (n - 1)·⌊P/S⌋·S with outputs unchanged, tokens equal alone and in a crowd with
log-probabilities within 1e-5, throughput up and median TTFT down from a cap of 1 to the largest
(retried once: a direction, never a time), Little's law within 10 %, goodput at most the throughput
and never lower for looser limits, a timed-out request counted as failed, and the server gone.
"""

import ast
import asyncio
import os

import numpy as np
import pytest

from gpucourse.checks import ep15
from taught import cells

EPISODE = "episodes/15-serving.ipynb"


@pytest.fixture(scope="module")
def ns():
    namespace = {}
    for cell in cells(EPISODE):
        if cell["cell_type"] != "code" or "colab-setup" in cell["metadata"].get("tags", []):
            continue
        code = compile("".join(cell["source"]), EPISODE, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    return namespace


def test_continuous_batching_gives_every_request_generates_tokens(ns):
    outputs, alone = ns["outputs"], ns["alone"]
    assert len(alone) == len(ns["prompts"]) >= 8
    assert all(outputs[f"req_{i}"].generated_tokens == alone[i] for i in range(len(alone)))


def test_prefix_hits_follow_the_page_arithmetic_and_change_nothing(ns):
    assert ns["hits"] == (ns["n"] - 1) * (ns["P"] // ns["S"]) * ns["S"] > 0
    assert [a.generated_tokens for a in ns["with_sharing"]] == [b.generated_tokens for b in ns["without"]]


def test_batch_invariance_report(ns):
    assert ns["a"].generated_tokens == ns["b"].generated_tokens
    assert ns["gap"] < 1e-5


def test_continuous_batching_takes_fewer_steps_than_static(ns):
    lengths, batch = ns["lengths"], ns["batch"]
    assert ns["static_steps"](lengths, batch) == ep15._static(lengths, batch)
    assert ep15._continuous(lengths, batch) < ns["static_steps"](lengths, batch)


def test_a_higher_cap_raises_throughput_and_lowers_ttft(ns):
    low, high = min(ns["SIZES"]["caps"]), max(ns["SIZES"]["caps"])
    for attempt in range(2):
        measured = {}
        for cap in (low, high):
            start = __import__("time").perf_counter()
            outputs = ns["run_batch"](cap)
            measured[cap] = ns["ttft_and_rate"](outputs, __import__("time").perf_counter() - start)
        (ttft_low, rate_low), (ttft_high, rate_high) = measured[low], measured[high]
        if rate_high > rate_low and ttft_high < ttft_low:
            return
    pytest.fail(f"cap {low}: {measured[low]}, cap {high}: {measured[high]} (median TTFT s, tokens/s)")


def _time_weighted(samples):
    at, count = np.array(samples).T
    return np.sum(count[:-1] * np.diff(at)) / (at[-1] - at[0])


def test_littles_law_holds_within_ten_percent(ns):
    for rate, (records, seconds, samples) in ns["runs"].items():
        assert all(r["ok"] for r in records)
        wait = np.mean([r["times"][-1] - r["sent"] for r in records])
        expected = len(records) / seconds * wait
        assert _time_weighted(samples) == pytest.approx(expected, rel=0.10), rate


def test_goodput_is_at_most_the_throughput_and_grows_as_the_slo_loosens(ns):
    tpot = ns["tpot"]
    for records, seconds, _ in ns["runs"].values():
        done = [r for r in records if r["ok"]]
        last = -1.0
        for limit in (0.01, 0.1, 1.0, 10.0, 1e9):
            good = sum(r["times"][0] - r["sent"] <= limit and tpot(r) <= limit for r in done)
            assert good / seconds <= len(done) / seconds
            assert good / seconds >= last
            last = good / seconds
        assert last == len(done) / seconds


def test_a_timed_out_request_is_failed_not_fast(ns):
    record = ns["record"]
    assert record["ok"] is False and record["times"] == [] and record["error"] == "TimeoutError"


def test_nothing_outlives_the_episode(ns):
    server = ns["server"]
    assert not server.running()
    with pytest.raises(ProcessLookupError):
        os.killpg(server.pid, 0)
