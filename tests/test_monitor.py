"""Episode 11's monitor: psutil on the CPU, nvidia-smi (a fake one here) on a GPU."""

from __future__ import annotations

import datetime as dt
import stat
import time

import torch

from gpucourse import monitor

FAKE_SMI = """#!/bin/sh
echo "$@" > "{args}"
i=0
while true; do
  echo "Warning: a line nvidia-smi may print"
  echo "$(date '+%Y/%m/%d %H:%M:%S.000'), $((i % 3 * 40 + 10)), 1500"
  echo "$(date '+%Y/%m/%d %H:%M:%S.000'), [N/A], [N/A]"
  i=$((i + 1))
  sleep 0.05
done
"""


def _until(condition, seconds=30.0):
    """Wait until ``condition()`` holds (however loaded the machine), or fail after ``seconds``."""
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.02)
    assert condition(), f"not reached within {seconds:g} s"


def test_parse_smi_line():
    stamp, util, memory = monitor.parse_smi_line("2026/11/24 13:58:44.123, 87, 1523\n")
    assert (util, memory) == (87.0, 1523.0)
    assert stamp == dt.datetime(2026, 11, 24, 13, 58, 44, 123000)
    for junk in ("2026/11/24 13:58:44.123, [N/A], [N/A]", "timestamp, utilization.gpu [%], memory.used [MiB]",
                 "", "No devices were found"):
        assert monitor.parse_smi_line(junk) is None


def test_cpu_monitor_samples_this_process():
    with monitor.Monitor(None, interval_s=0.05) as mon:
        end = time.monotonic() + 30
        while len(mon.times) < 3 and time.monotonic() < end:    # busy until three samples, however slow
            sum(i * i for i in range(1000))
    assert len(mon.times) >= 3 and len(mon.times) == len(mon.util) == len(mon.memory_mib)
    assert all(m > 10 for m in mon.memory_mib)                  # MiB of a Python process with torch
    assert mon.times == sorted(mon.times)
    assert "CPU" in mon.util_label and not mon.gpu


def test_gpu_monitor_reads_nvidia_smi(tmp_path, monkeypatch):
    args = tmp_path / "args.txt"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(args=args))
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with monitor.Monitor(torch.device("cuda", 0), interval_s=0.05) as mon:
        _until(lambda: len(mon.util) >= 3)
    assert mon.gpu and "GPU" in mon.util_label
    assert len(mon.util) >= 3
    assert set(mon.util) <= {10.0, 50.0, 90.0} and set(mon.memory_mib) == {1500.0}
    called = args.read_text()
    assert "--query-gpu=timestamp,utilization.gpu,memory.used" in called
    assert "--format=csv,noheader,nounits" in called and "-lms 50" in called
    assert mon._proc.poll() is not None                          # stopped with the monitor


def test_without_nvidia_smi_the_cpu_is_sampled(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    mon = monitor.Monitor(torch.device("cuda", 0), interval_s=0.05)
    assert not mon.gpu and "nvidia-smi was not found" in capsys.readouterr().out


def test_a_failing_nvidia_smi_is_explained(tmp_path, monkeypatch, capsys):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with monitor.Monitor(torch.device("cuda", 0), interval_s=0.05) as mon:
        mon._proc.wait(timeout=30)      # it has printed its error and exited before the monitor stops
    assert mon.times == [] and mon.util == []
    out = capsys.readouterr().out
    assert "nvidia-smi gave no samples: No devices were found" in out and "--query-gpu" in out


def test_the_monitor_samples_a_fake_gpu():
    """The fake runtime's nvidia-smi loops with -lms, as the monitor calls it, and names the GPU by UUID."""
    from gpucourse.fakes.fakecuda import CONTEXT_BYTES, fake_gpu

    with fake_gpu("T4", 2) as gpu:
        torch.cuda.set_device(1)
        gpu.allocate(100 * 2**20, device=1)
        with monitor.Monitor(torch.device("cuda", 1), interval_s=0.05) as mon:
            _until(lambda: len(mon.times) >= 3)
        assert "-i" in mon._smi_command() and mon._smi_command()[-1].startswith("GPU-")
    assert mon.gpu and len(mon.times) >= 3 and mon.times == sorted(mon.times)
    assert set(mon.memory_mib) == {float((CONTEXT_BYTES + 100 * 2**20) >> 20)}   # GPU 1's, not GPU 0's
    assert mon._proc.poll() is not None


def test_nvidia_smis_own_explanation_on_stdout_is_shown(monkeypatch, capsys):
    """G4-8: nvidia-smi refuses a field on stdout; the message must carry its words, not 'no output'."""
    from gpucourse.fakes.fakecuda import fake_gpu

    monkeypatch.setattr(monitor, "QUERY", "timestamp,utilization.gpu,memory.usedd")
    with fake_gpu("H100"):
        with monitor.Monitor(torch.device("cuda", 0), interval_s=0.05) as mon:
            mon._proc.wait(timeout=30)
    out = capsys.readouterr().out
    assert mon.times == []
    assert 'nvidia-smi gave no samples: Field "memory.usedd" is not a valid field to query.' in out


def test_the_training_window_leaves_out_the_idle_start_and_end():
    assert monitor.training_window([0, 3, 90, 0, 95, 4, 0]) == slice(2, 5)
    assert monitor.training_window([0, 0]) == slice(0, 0)          # never busy: nothing to judge
    mon = monitor.Monitor()
    mon.util = [0.0] * 40 + [90.0, 70.0] * 10 + [0.0] * 30       # idle start, training, idle end
    assert mon.training_mean_util() == 80.0
    assert mon.mean_util() < 30                                   # the whole trace: biased low
    mon.util = [0.0, 1.0]
    assert mon.training_mean_util() != mon.training_mean_util()     # NaN: no busy sample
