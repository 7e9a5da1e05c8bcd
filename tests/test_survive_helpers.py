"""Episode 11's smaller helpers: the requeue script, SlowShards' copies, the fsync of a save."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from gpucourse.atomic import save_atomic
from gpucourse.distributed import slurm
from gpucourse.profiling import SlowShards

EPISODE = Path(__file__).resolve().parents[1] / "episodes" / "11-runs-that-survive.ipynb"

# Stands in for `python -m gpucourse.children.survive_train`: on USR1 or TERM it "saves" and exits
# 128 + the signal's number, as the script does; FINISH makes it end by itself. It waits in a
# `sleep` that it stops on its way out and that writes nowhere: a sleep left running with the
# job's output open would keep that output open, and the test waiting for its end, for the
# whole sleep (the test then took as long as the sleep, and failed when a busy machine made it
# a little longer than its 60 s wait).
FAKE_PYTHON = """#!/bin/bash
trap 'echo saved >> "$LOG"; kill $! 2>/dev/null; exit 138' USR1
trap 'echo saved >> "$LOG"; kill $! 2>/dev/null; exit 143' TERM
echo started >> "$LOG"
if [ -n "$FINISH" ]; then exit "$FINISH"; fi
sleep 600 > /dev/null 2>&1 & wait $!
"""
FAKE_SCONTROL = """#!/bin/bash
echo "scontrol $*" >> "$LOG"
"""


def _stand_in(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _wait_until_trapped(pid: int, signals, most: float = 30.0) -> None:
    """Wait until process ``pid`` catches every one of ``signals`` (its SigCgt mask in /proc):
    a signal sent before the shell reaches its ``trap`` lines would kill it instead."""
    wanted = sum(1 << (s - 1) for s in signals)
    end = time.monotonic() + most
    if not Path(f"/proc/{pid}").exists():       # no /proc (macOS): a pause instead
        time.sleep(0.5)
        return
    while time.monotonic() < end:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught & wanted == wanted:
            return
        time.sleep(0.01)
    raise AssertionError(f"the batch script set no trap for {[signal.Signals(s).name for s in signals]} "
                         f"within {most:g} s")


def _run_batch_script(tmp_path: Path, sig=None, finish: str = "") -> tuple[int, str]:
    script = slurm.write_requeue(tmp_path / "train.sbatch")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stand_in(bin_dir, "python", FAKE_PYTHON)
    _stand_in(bin_dir, "scontrol", FAKE_SCONTROL)
    log = tmp_path / "log"
    log.touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log),
           "SLURM_JOB_ID": "4242", "SCRATCH": str(tmp_path), "FINISH": finish}
    job = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, text=True)
    if sig is not None:
        end = time.monotonic() + 30
        while "started" not in log.read_text() and time.monotonic() < end:
            time.sleep(0.02)
        _wait_until_trapped(job.pid, (signal.SIGUSR1, signal.SIGTERM))   # the shell's traps are set
        job.send_signal(sig)
    try:
        out, _ = job.communicate(timeout=600)    # it ends at once: the wait is only a bound
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    return job.returncode, log.read_text() + out


@pytest.mark.skipif(shutil.which("bash") is None, reason="the batch script is a bash script")
@pytest.mark.parametrize("sig, code", [(signal.SIGUSR1, 138), (signal.SIGTERM, 143)],
                         ids=["wall time (USR1)", "pre-emption (TERM)"])
def test_the_requeue_script_saves_and_requeues_on_usr1_and_on_term(tmp_path, sig, code):
    returncode, log = _run_batch_script(tmp_path, sig=sig)
    assert returncode == code, log
    assert "saved" in log, f"the run was not asked to save: {log}"
    assert "scontrol requeue 4242" in log, f"the job was not requeued after {sig.name}: {log}"


@pytest.mark.skipif(shutil.which("bash") is None, reason="the batch script is a bash script")
@pytest.mark.parametrize("finish", ["0", "1"], ids=["finished", "crashed"])
def test_the_requeue_script_does_not_requeue_a_run_that_ended_by_itself(tmp_path, finish):
    returncode, log = _run_batch_script(tmp_path, finish=finish)
    assert returncode == int(finish), log
    assert "scontrol" not in log, log


def test_the_episode_shows_the_requeue_script_as_the_module_has_it():
    cells = json.loads(EPISODE.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert f"```bash\n{slurm.REQUEUE}```" in text, (
        "episode 11's batch script differs from gpucourse/distributed/slurm.py's REQUEUE: "
        "copy REQUEUE into the episode's ```bash block again")


def test_slow_shards_hand_out_copies_not_views_of_the_table():
    """A view sent from a worker takes its whole storage (the table) to shared memory."""
    X, y = torch.randn(64, 8), torch.randn(64)
    xb, yb = SlowShards(X, y, 16, 0.0)[1]
    assert xb.untyped_storage().nbytes() == xb.nbytes and yb.untyped_storage().nbytes() == yb.nbytes
    assert torch.equal(xb, X[16:32]) and torch.equal(yb, y[16:32])
    xb, _ = next(iter(DataLoader(SlowShards(X, y, 16, 0.0), batch_size=None, num_workers=1)))
    assert xb.untyped_storage().nbytes() == xb.nbytes, "a worker sent the whole table"


def test_the_temporary_is_fsynced_through_a_descriptor_open_for_writing(tmp_path, monkeypatch):
    """On Windows fsync is FlushFileBuffers, which needs write access: no read-only descriptor."""
    modes, real_fsync = [], os.fsync

    def fsync(fd):
        modes.append(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE)
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    save_atomic(lambda tmp: Path(tmp).write_bytes(b"data"), tmp_path / "file.bin")
    assert (tmp_path / "file.bin").read_bytes() == b"data"
    assert modes and modes[0] != os.O_RDONLY, "the file was fsynced through a read-only descriptor"
