"""The episode 7 launcher and training scripts: deadlines, clean-up, identical replicas."""

from __future__ import annotations

import os
import sys
import time

import torch

from gpucourse.distributed import free_port, launch, launch_many, torchrun


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return True


def test_free_ports_differ_and_are_bindable():
    import socket

    ports = {free_port() for _ in range(5)}
    assert len(ports) >= 4
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_output_is_captured_and_exit_code_kept(capsys):
    run = launch([sys.executable, "-c", "import sys; print('hello'); sys.exit(3)"], timeout=30)
    assert run.returncode == 3 and not run.ok and not run.timed_out
    assert "hello" in run.output
    out = capsys.readouterr().out
    assert "hello" in out and "exited with code 3" in out


def test_deadline_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)")
    start = time.perf_counter()
    run = launch([sys.executable, "-c", code], timeout=3, show=False)
    assert time.perf_counter() - start < 15
    assert run.timed_out and "started" in run.output
    child = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child), "the worker started by the launched command survived the deadline"


def test_launch_many_one_deadline():
    runs = launch_many([[sys.executable, "-c", "print(1)"], [sys.executable, "-c", "import time; time.sleep(30)"]],
                       timeout=3, show=False)
    assert runs[0].ok and runs[1].timed_out


def test_ddp_two_processes_identical_and_equal_to_one(tmp_path):
    common = ["-m", "gpucourse.distributed.ddp_train", "--samples", "512", "--epochs", "1", "--global-batch", "128"]
    two = launch(torchrun("--standalone", "--nproc-per-node=2", *common, "--out", tmp_path / "two"), timeout=120)
    one = launch(torchrun("--standalone", "--nproc-per-node=1", *common, "--out", tmp_path / "one"), timeout=120)
    assert two.ok and one.ok
    w0, w1 = (torch.load(tmp_path / "two" / f"weights-rank{r}.pt") for r in (0, 1))
    single = torch.load(tmp_path / "one" / "weights-rank0.pt")
    for key in w0:
        assert torch.equal(w0[key], w1[key]), key
        torch.testing.assert_close(w0[key], single[key], rtol=1e-5, atol=1e-6)
    checkpoint = torch.load(tmp_path / "two" / "checkpoint.pt")
    assert checkpoint["world_size"] == 2 and set(checkpoint["model"]) == set(w0)
    assert not (tmp_path / "one" / "checkpoint-rank1.pt").exists()


def test_uneven_bug_times_out_and_fix_runs():
    bug = launch(torchrun("--standalone", "--nproc-per-node=2", "-m", "gpucourse.distributed.uneven", "--bug",
                          "--timeout", "2"), timeout=60, show=False)
    assert not bug.ok and not bug.timed_out, "the process group's own timeout must end the hang"
    assert "Timed out" in bug.output or "timed out" in bug.output.lower()
    fixed = launch(torchrun("--standalone", "--nproc-per-node=2", "-m", "gpucourse.distributed.uneven"),
                   timeout=60, show=False)
    assert fixed.ok and fixed.output.count("passed the final barrier") == 2


def test_tf_multiworker_two_local_workers_agree(tmp_path):
    import json

    import numpy as np

    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    envs = [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
             "CUDA_VISIBLE_DEVICES": ""} for i in range(2)]
    worker = [sys.executable, "-m", "gpucourse.distributed.tf_multiworker", "--samples", "512", "--epochs", "1",
              "--out", tmp_path]
    runs = launch_many([worker, worker], timeout=180, env=envs, show=False)
    assert all(r.ok for r in runs), [r.output[-2000:] for r in runs]
    assert all("2 replicas in sync" in r.output for r in runs)
    w0, w1 = (np.load(tmp_path / f"weights-worker{i}.npz") for i in range(2))
    assert all(np.array_equal(w0[k], w1[k]) for k in w0)


def test_ddp_rejects_a_global_batch_that_does_not_split(tmp_path):
    run = launch(torchrun("--standalone", "--nproc-per-node=2", "-m", "gpucourse.distributed.ddp_train",
                          "--samples", "256", "--global-batch", "99", "--out", tmp_path), timeout=120, show=False)
    assert not run.ok and "not divisible by 2" in run.output
