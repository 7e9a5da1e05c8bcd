"""Episode 1's cells: the device choice on every backend, the timer it teaches beside the course's
``timing.benchmark``, the crossover cell, and the answer to its prediction beside the record.

The cells are executed here as a learner runs them, in one namespace, on this CPU-only machine:
a GPU is faked at torch's C layer (``fakecuda``), which chooses devices but runs no kernels.
"""

from __future__ import annotations

import re
import statistics
import time

import pandas as pd
import pytest
import torch

from gpucourse import reference, timing
from gpucourse.fakes import fakecuda
import taught
from taught import cells_calling, code_cells, prediction

EPISODE = "episodes/01-what-is-a-gpu.ipynb"


def code_cell(marker: str) -> str:
    return taught.code_cell(EPISODE, marker)


def first_screen() -> list[str]:
    return taught.first_screen(EPISODE)


def run(sources: list[str], namespace: dict | None = None) -> dict:
    return taught.run_cells(EPISODE, sources, namespace)


@pytest.fixture
def full_size(monkeypatch):
    """Sizes as a learner gets them: not the test suite's quick mode."""
    monkeypatch.delenv("GPUCOURSE_QUICK", raising=False)
    monkeypatch.delenv("GPUCOURSE_FIGURES", raising=False)


# --------------------------------------------------------------------------- the device choice

def test_the_device_is_chosen_as_episode_2_teaches():
    chosen = cells_calling(EPISODE, "course_device.pick_device")
    assert len(chosen) == 1 and "print(course_device.describe_choice(device))" in chosen[0]
    assert not re.search(r"torch\.device\(\s*[\"']cuda[\"']\s*if", "\n".join(code_cells(EPISODE)))


def test_apples_gpu_is_compared_with_the_cpu_at_full_size(full_size, capsys):
    with fakecuda.fake_backend("mps"):
        ns = run(first_screen())
    out = capsys.readouterr().out
    assert ns["device"] == torch.device("mps")
    assert out.startswith("device: mps (Apple's GPU)") and "NO GPU FOUND" not in out
    assert ns["DEVICES"] == [torch.device("cpu"), torch.device("mps")]
    assert ns["GPU_NAME"] == "Apple GPU (MPS)"
    assert ns["SIZES"].mode == "full" and max(ns["SIZES"]["matmul_n"]) == 8192
    assert ns["SIZES"].describe() in out


def test_an_intel_gpu_is_compared_under_its_own_name(full_size, monkeypatch, capsys):
    # The fake has no device properties to read a name from; a real XPU has.
    monkeypatch.setattr(torch.xpu, "get_device_name", lambda device=None: "Intel(R) Arc(TM) A770")
    with fakecuda.fake_backend("xpu"):
        ns = run(first_screen())
    assert ns["GPU"] == torch.device("xpu", 0) and ns["GPU_NAME"] == "Intel(R) Arc(TM) A770"
    assert capsys.readouterr().out.startswith("device: xpu (Intel's GPU)")


def test_an_nvidia_gpu_is_named_as_its_driver_names_it(full_size, capsys):
    with fakecuda.fake_gpu("T4", nvidia_smi=False, children=False):
        ns = run(first_screen())
    assert ns["GPU"] == torch.device("cuda", 0) and ns["GPU_NAME"] == "Tesla T4"
    assert ns["SIZES"].mode == "full"
    assert capsys.readouterr().out.startswith("device: cuda:0 (Tesla T4, NVIDIA)")


def test_without_a_gpu_the_cpu_runs_alone_at_reduced_size_and_says_how_to_get_one(full_size, capsys):
    ns = run(first_screen())
    out = capsys.readouterr().out
    assert ns["GPU"] is None and ns["GPU_NAME"] is None and ns["DEVICES"] == [torch.device("cpu")]
    assert "NO GPU FOUND" in out
    assert ns["SIZES"].mode == "reduced" and max(ns["SIZES"]["matmul_n"]) == 2048


# --------------------------------------------------------------------------- the timer it teaches

class QueuedDevice:
    """A device that queues work, as a GPU does: a call only launches it (1 µs), and the
    device's synchronize() waits for all of it. Its clock stands in for time.perf_counter."""

    LAUNCH = 1e-6

    def __init__(self, durations):
        self.now, self.queued, self.durations = 0.0, 0.0, iter(durations)

    def perf_counter(self):
        return self.now

    def launch(self):
        self.now += self.LAUNCH
        self.queued += next(self.durations)

    def synchronize(self, *args):
        self.now, self.queued = self.now + self.queued, 0.0


@pytest.mark.parametrize("kind", ["cuda", "mps", "xpu"])
def test_the_lessons_synchronize_waits_for_the_device_as_the_course_timer_does(kind, monkeypatch):
    ns = run([code_cell("def synchronize(")], {"torch": torch})
    waited = []
    monkeypatch.setattr(getattr(torch, kind), "synchronize",
                        lambda *args: waited.append(kind))
    ns["synchronize"](torch.device(kind))
    timing.synchronizer(kind)()
    assert waited == [kind, kind]


def test_time_it_waits_for_queued_work_as_benchmark_does_and_naive_timing_does_not(monkeypatch):
    work = [5e-3, 1e-3, 3e-3, 2e-3, 9e-3, 4e-3]           # the first is the warm-up's
    ns = run([code_cell("def synchronize("), code_cell("def time_it("),
              code_cell("def naive_seconds(")], {"torch": torch, "time": time, "statistics": statistics})
    taught, packaged, naive = QueuedDevice(work), QueuedDevice(work), QueuedDevice(work)
    for clock, calls in ((taught, "time_it"), (packaged, "benchmark"), (naive, "naive")):
        monkeypatch.setattr(time, "perf_counter", clock.perf_counter)
        monkeypatch.setattr(torch.cuda, "synchronize", clock.synchronize)
        if calls == "time_it":
            seconds = ns["time_it"](clock.launch, torch.device("cuda"), repeats=5)
        elif calls == "benchmark":
            seconds = timing.benchmark(clock.launch, "cuda", warmup=1, repeats=5).median
        else:
            seconds = ns["naive_seconds"](clock.launch)
        monkeypatch.undo()
        if calls == "naive":
            assert seconds == pytest.approx(QueuedDevice.LAUNCH)   # the launch only
        else:
            assert seconds == pytest.approx(3e-3 + QueuedDevice.LAUNCH), calls


# --------------------------------------------------------------------------- the crossover

def sweep_namespace() -> dict:
    return run([code_cell("def calls_per_timing("), code_cell("def matmul_seconds("),
                code_cell("def matmul_sweep(")],
               {"torch": torch, "timing": timing, "tqdm": lambda xs, **kw: xs})


def test_the_sweep_times_each_size_with_enough_work_per_timing():
    ns = sweep_namespace()
    assert ns["calls_per_timing"](lambda: None, torch.device("cpu")) == 1000   # capped
    assert ns["calls_per_timing"](lambda: time.sleep(0.02), torch.device("cpu")) == 1
    rows = ns["matmul_sweep"](torch.device("cpu"), [8, 32], repeats=1)
    assert [(r["label"], r["n"]) for r in rows] == [("cpu float32", 8), ("cpu float32", 32)]
    for r in rows:
        assert r["tflops"] == pytest.approx(2 * r["n"] ** 3 / r["seconds"] / 1e12)


def test_the_crossover_is_the_first_size_from_which_the_gpu_stays_faster(full_size, capsys):
    cpu = pd.DataFrame({"label": "cpu float32", "n": [16, 64, 256, 1024],
                        "seconds": [1e-6, 5e-6, 1e-4, 5e-3]})
    # faster at 16 by noise, slower at 64, faster from 256 on; one more size than the CPU ran
    gpu = pd.DataFrame({"label": "cuda float32", "n": [16, 64, 256, 1024, 4096],
                        "seconds": [9e-7, 1e-5, 1.6e-5, 5e-5, 2e-3]})
    ns = {"results": pd.concat([cpu, gpu]), "GPU": torch.device("cuda", 0),
          "GPU_NAME": "Tesla T4", "timing": timing, "reference": reference}
    run([code_cell('"ep01.crossover_n"')], ns)
    assert "ep01.crossover_n: 256 on Tesla T4" in capsys.readouterr().out


# --------------------------------------------------------------------------- predict, then reveal

def test_the_prediction_comes_before_the_sweep_and_its_answer_after_it():
    between, _ = prediction(EPISODE)
    assert any("matmul_sweep(" in text for text in between)
    assert any('"ep01.crossover_n"' in text for text in between)


def test_the_answer_quotes_the_course_record_as_the_notebook_prints_it():
    _, answer = prediction(EPISODE)
    record, crossover = reference.gpu_reference("ep01.crossover_n")
    gpu = record["hardware"]["gpu_name"]
    assert f"n = {crossover}**" in answer
    assert f"recorded on an {gpu} (course record, {record['date']})" in answer
    assert f"{record['hardware']['cpu_cores']}-core CPU" in answer
    _, sweep = reference.gpu_reference("ep01.matmul_sweep")
    float32 = dict(zip(sweep["n"], sweep["seconds"]["cuda float32"]))
    for n in (16, 512):
        assert f"{round(float32[n] * 1e6)} µs at n = {n}" in answer
