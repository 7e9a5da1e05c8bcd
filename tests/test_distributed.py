"""The episode 9 launcher and training scripts: deadlines, clean-up, identical replicas."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
import torch

from gpucourse.distributed import (GRACE_S, PORT_CLASH, free_port, free_ports, launch, launch_many,
                                   python_processes, startup_seconds, torchrun)


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

    for _ in range(20):
        ports = free_ports(5)
        assert len(set(ports)) == 5, ports          # held open until all are chosen: never one port twice
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))


def test_a_port_clash_is_tried_once_more(tmp_path, capsys):
    marker = tmp_path / "tried"
    code = ("import pathlib, sys; m = pathlib.Path(sys.argv[1]); first = not m.exists(); m.touch(); "
            f"print({PORT_CLASH!r} if first else 'bound'); sys.exit(1 if first else 0)")
    run = launch([sys.executable, "-c", code, marker], timeout=30)
    assert run.ok and run.output.strip() == "bound"
    assert "trying once more" in capsys.readouterr().out
    fresh = []
    runs = launch_many([[sys.executable, "-c", code, marker.with_name("again")]], timeout=30, show=False,
                       retry=lambda: (fresh.append(1) or [[sys.executable, "-c", "print('new ports')"]], None))
    assert fresh and runs[0].ok and "new ports" in runs[0].output
    never = launch([sys.executable, "-c", f"print({PORT_CLASH!r}); raise SystemExit(1)"], timeout=30, show=False,
                   retry=False)
    assert not never.ok


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
    start_up = startup_seconds()      # measured before the clock starts: the first call measures it
    start = time.perf_counter()
    run = launch([sys.executable, "-c", code], timeout=8, show=False)
    # the deadline (8 s and the start of one interpreter as measured here), then SIGTERM, SIGKILL
    assert time.perf_counter() - start < 8 + start_up + 2 * GRACE_S + 5
    assert run.timed_out and "started" in run.output, run.output[-2000:]
    child = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child), "the worker started by the launched command survived the deadline"


def test_a_log_keeps_the_whole_output_and_the_cell_prints_the_lines_asked_for(tmp_path, capsys):
    talk = "print('[rank 0] backend gloo'); print('noise'); print('[rank 0] backend gloo')"
    runs = launch_many([[sys.executable, "-c", talk], [sys.executable, "-c", "print('more noise')"]],
                       timeout=30, labels=["node A", "node B"], log=tmp_path / "run.log", lines="backend")
    assert all(r.ok for r in runs)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "[rank 0] backend gloo" and len(printed) == 2, printed    # each line once
    assert re.fullmatch(r"✓ ok after \d+\.\d s \(whole output: .*run\.log\)", printed[1]), printed
    log = (tmp_path / "run.log").read_text()
    assert "──── node A:" in log and "noise" in log and "more noise" in log and "exit code 0" in log


def test_a_failed_run_with_a_log_prints_its_first_error_in_one_line(tmp_path, capsys):
    error = ("import sys; print('[rank0]: RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/"
             "unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation to complete'); sys.exit(1)")
    run = launch([sys.executable, "-c", error], timeout=30, log=tmp_path / "run.log")
    assert run.returncode == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("✗ exit code 1 after") and line.endswith(f"(whole output: {tmp_path / 'run.log'})")
    assert "First error: RuntimeError: Timed out waiting 3000ms for recv operation to complete" in line
    slow = launch([sys.executable, "-c", "import time; time.sleep(300)"], timeout=2, log=tmp_path / "slow.log")
    deadline = f"{2 + startup_seconds():.0f} s deadline (2 s for the run and {startup_seconds():.0f} s to start"
    assert slow.timed_out and deadline in capsys.readouterr().out


def test_the_deadline_leaves_time_to_start_the_processes(monkeypatch, capsys):
    """The deadline is the run's own time plus, per Python process, this machine's start-up: a busy
    machine's slow start is not taken from the run (episode 9's hang ran out of its 60 s while
    three processes were still importing torch, on 2 cores with a load of 10)."""
    import gpucourse.distributed as dist

    monkeypatch.setattr(dist, "_STARTUP", [30.0])       # as if starting one took 30 s here
    run = launch([sys.executable, "-c", "import time; time.sleep(3); print('finished')"], timeout=0.5,
                 show=False)
    assert run.ok and "finished" in run.output, "a run that finished within its start-up allowance was killed"
    monkeypatch.setattr(dist, "_STARTUP", [1.0])
    late = launch([sys.executable, "-c", "import time; time.sleep(300)"], timeout=1)
    assert late.timed_out and late.seconds >= 2, late.seconds
    assert "killed after the 2 s deadline (1 s for the run and 1 s to start its 1 Python process " \
           "on this machine)" in capsys.readouterr().out


@pytest.mark.parametrize("args, processes", [
    (["--standalone", "--nproc-per-node=2", "-m", "x"], 3),
    (["--nproc_per_node", "4", "script.py"], 5),
    (["--nnodes=2", "-m", "x"], 2),
])
def test_torchrun_starts_its_own_python_and_one_per_worker(args, processes):
    assert python_processes(torchrun(*args)) == processes
    assert python_processes([sys.executable, "-c", "print(1)"]) == 1


def test_startup_is_measured_once_and_is_the_start_of_a_python_that_imports_torch(monkeypatch):
    import gpucourse.distributed as dist

    calls = []
    real_run = dist.subprocess.run
    monkeypatch.setattr(dist, "_STARTUP", [])
    monkeypatch.setattr(dist.subprocess, "run", lambda command, **kw: calls.append(command) or real_run(command, **kw))
    first = startup_seconds()
    assert startup_seconds() == first > 0 and len(calls) == 1
    assert calls[0][0] == sys.executable and "import torch" in calls[0][-1]


def test_launch_many_one_deadline():
    runs = launch_many([[sys.executable, "-c", "print(1)"], [sys.executable, "-c", "import time; time.sleep(600)"]],
                       timeout=3, show=False)
    assert runs[0].ok and runs[1].timed_out


def test_ddp_two_processes_identical_and_equal_to_one(tmp_path):
    import json

    common = ["-m", "gpucourse.distributed.ddp_train", "--samples", "512", "--epochs", "1", "--global-batch", "128"]
    two = launch(torchrun("--standalone", "--nproc-per-node=2", *common, "--bench-steps", "2", "--out",
                          tmp_path / "two"), timeout=120)
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
    bench = json.loads((tmp_path / "two" / "bench.json").read_text())
    assert bench["per_rank_batch"] == 64 and bench["global_batch"] == 128
    assert all(bench[k] > 0 for k in ("step_s", "no_sync_step_s", "weak_step_s"))


def test_uneven_bug_times_out_and_fix_runs(tmp_path, capsys):
    bug = launch(torchrun("--standalone", "--nproc-per-node=2", "-m", "gpucourse.distributed.uneven", "--bug",
                          "--timeout", "2"), timeout=60, log=tmp_path / "hang.log", lines=r"^\[rank \d\] done")
    assert not bug.ok and not bug.timed_out, "the process group's own timeout must end the hang"
    assert "Timed out" in bug.output or "timed out" in bug.output.lower()
    printed = capsys.readouterr().out.splitlines()    # what episode 9 shows of the hang: two lines
    assert printed[0].startswith("[rank 1] done after 4 steps") and len(printed) == 2, printed
    assert re.search(r"^✗ exit code 1 after \d+ s\. First error: RuntimeError: .*[Tt]imed out", printed[1])
    assert ".cc:" not in printed[1] and str(tmp_path / "hang.log") in printed[1]
    assert "Traceback" in (tmp_path / "hang.log").read_text()      # the whole output is kept
    fixed = launch(torchrun("--standalone", "--nproc-per-node=2", "-m", "gpucourse.distributed.uneven"),
                   timeout=60, show=False)
    assert fixed.ok and fixed.output.count("passed the final barrier") == 2


# Rank 1 reaches the join some seconds after rank 0, as two processes that import torch at once on a
# busy machine do: the short timeout must end the hang of the collectives, not the joining.
_LATE_RANK = """
import os, sys, time
if os.environ["RANK"] == "1":
    time.sleep(float(sys.argv[1]))
from gpucourse.distributed import uneven
uneven.main(sys.argv[2:])
"""


def test_a_rank_that_joins_late_still_shows_the_hang_not_a_failed_join(tmp_path):
    script = tmp_path / "late_rank.py"
    script.write_text(_LATE_RANK)
    bug = launch(torchrun("--standalone", "--nproc-per-node=2", script, 4, "--bug", "--timeout", "2"),
                 timeout=60, show=False)
    assert not bug.ok and not bug.timed_out
    assert "[rank 1] done after 4 steps" in bug.output, "the 2 s timeout ended the joining, 4 s apart"
    assert re.search(r"RuntimeError: .*[Tt]imed out waiting 2000ms for recv", bug.output), bug.output[-2000:]


def _tf_envs() -> list:
    """Two local TensorFlow workers' settings, on ports free now (a retry after a clash asks again)."""
    import json

    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    return [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
             "CUDA_VISIBLE_DEVICES": ""} for i in range(2)]


def test_tf_multiworker_two_local_workers_agree(tmp_path):
    import numpy as np

    worker = [sys.executable, "-m", "gpucourse.distributed.tf_multiworker", "--samples", "512", "--epochs", "1",
              "--out", tmp_path]
    runs = launch_many([worker, worker], timeout=180, env=_tf_envs(), show=False,
                       retry=lambda: ([worker, worker], _tf_envs()))     # new ports, as episode 9 does
    assert all(r.ok for r in runs), [r.output[-2000:] for r in runs]
    assert all("2 replicas in sync" in r.output for r in runs)
    w0, w1 = (np.load(tmp_path / f"weights-worker{i}.npz") for i in range(2))
    assert all(np.array_equal(w0[k], w1[k]) for k in w0)


def test_ddp_rejects_a_global_batch_that_does_not_split(tmp_path):
    run = launch(torchrun("--standalone", "--nproc-per-node=2", "-m", "gpucourse.distributed.ddp_train",
                          "--samples", "256", "--global-batch", "99", "--out", tmp_path), timeout=120, show=False)
    assert not run.ok and "not divisible by 2" in run.output


KERAS_FIT_WORKER = """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from gpucourse.frameworks import import_tensorflow
tf = import_tensorflow()
import keras, numpy as np
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
try:
    model.fit(np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32"), batch_size=16, epochs=1, verbose=0)
    print("FIT RAN")
except ValueError as exc:
    print("VALUEERROR", "PerReplica" in str(exc))
"""


def test_keras_fit_still_fails_under_multiworker_mirrored_strategy(tmp_path):
    """Episode 9 says Keras 3's fit fails here (keras-team/keras#20585); this notices when Keras fixes it."""
    import keras

    script = tmp_path / "fit_worker.py"
    script.write_text(KERAS_FIT_WORKER)
    workers = [[sys.executable, script]] * 2
    runs = launch_many(workers, timeout=120, env=_tf_envs(), show=False, retry=lambda: (workers, _tf_envs()))
    assert all(r.ok for r in runs), [r.output[-2000:] for r in runs]
    if any("FIT RAN" in r.output for r in runs):
        pytest.fail(f"model.fit ran under MultiWorkerMirroredStrategy with Keras {keras.__version__}: "
                    "update episode 9's text (section 5) and tf_multiworker.py's docstring")
    assert all("VALUEERROR True" in r.output for r in runs), [r.output[-2000:] for r in runs]


def test_a_failed_command_stops_the_others_at_once(tmp_path, capsys):
    from gpucourse.distributed import STOPPED

    pidfile = tmp_path / "waiter.pid"
    waiter = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    startup_seconds()                # measured before the clock starts
    start = time.perf_counter()
    # the first command fails once the waiter is surely running (its PID file written), however
    # slowly a busy machine starts it
    breaks = (f"import os, time\nfor _ in range(3000):\n    if os.path.exists({str(pidfile)!r}): break\n"
              "    time.sleep(0.01)\nraise ValueError('worker 1 broke')")
    runs = launch_many([[sys.executable, "-c", breaks], [sys.executable, "-c", waiter]], timeout=60,
                       labels=["a", "b"])
    assert time.perf_counter() - start < 60, "the second command waited for the deadline"
    assert runs[0].returncode == 1 and runs[1].returncode == STOPPED and not runs[1].timed_out
    assert not _alive(int(pidfile.read_text()))
    out = capsys.readouterr().out
    assert "First error: ValueError: worker 1 broke" in out and "another command of this run failed" in out


def test_first_error_is_the_root_cause_not_torchruns_report():
    from gpucourse.distributed import first_error

    output = "\n".join(["W1123 08:50:19 api.py:1028] Sending process 1 closing signal SIGTERM",
                        "[rank1]: Traceback (most recent call last):",
                        '[rank1]:   File "train.py", line 12, in <module>',
                        "[rank1]: RuntimeError: boom in rank 1",
                        "[rank0]: RuntimeError: Connection closed by peer",
                        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                        "  error_file: <N/A>"])
    assert first_error(output) == "RuntimeError: boom in rank 1"
    # The ranks share one stream: the other rank's "peer gone" may be printed before the cause.
    timeout = ("[rank1]: RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer "
               "[127.0.0.1]:47540\n[rank0]: RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] "
               "Timed out waiting 2000ms for recv operation to complete")
    assert first_error(timeout) == "RuntimeError: Timed out waiting 2000ms for recv operation to complete"
    alone = "[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:47540"
    assert first_error(alone) == "RuntimeError: Connection closed by peer [127.0.0.1]:47540"
    assert first_error("ddp_train.py: error: argument --lr: invalid float value: 'x'").startswith("error: argument")
    assert first_error("all went well\n  error_file: <N/A>") is None


def test_an_interrupt_during_a_launch_kills_every_process(tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    code = ("import os, subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r} + '.tmp', 'w').write(str(p.pid)); "
            f"os.replace({str(pidfile)!r} + '.tmp', {str(pidfile)!r}); time.sleep(60)")
    _interrupt_when_written(monkeypatch, [pidfile])   # the kernel's stop button, pressed once the worker runs
    with pytest.raises(KeyboardInterrupt):
        launch([sys.executable, "-c", code], timeout=60, show=False)
    child = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child), "a worker survived the interrupt"


# A worker that outlives SIGTERM, in one of two ways: it ignores the signal, or a library's handler
# only notes it while the worker is blocked in a system call (read on a pipe nobody writes), which
# Python resumes after the handler (PEP 475). Each writes its PID to a file, then waits forever.
_STUBBORN_WORKER = """
import os, signal, sys, time
how, pidfile = sys.argv[-2:]
if how == "ignores-sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM noted; finishing the current read", flush=True))
open(pidfile + ".tmp", "w").write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
if how == "ignores-sigterm":
    time.sleep(600)
else:
    os.read(os.pipe()[0], 1)
"""


def _pids_when_written(pidfiles, seconds=120.0):
    """Wait (up to ``seconds``, however loaded the machine) until every file holds a PID."""
    end = time.monotonic() + seconds
    while not all(f.exists() for f in pidfiles) and time.monotonic() < end:
        time.sleep(0.05)
    assert all(f.exists() for f in pidfiles), "the workers never started"
    return [int(f.read_text()) for f in pidfiles]


def _interrupt_when_written(monkeypatch, pidfiles):
    """Press the kernel's stop button once every worker has written its PID: KeyboardInterrupt in the
    launcher's wait, where a notebook's interrupt lands while a launch runs.

    Raised from the launcher's own ``time.sleep`` in the thread that runs it, not sent as a signal
    from another thread: the verdict then depends neither on when the signal is handled nor on
    which thread a test runner runs tests in.
    """
    import types

    import gpucourse.distributed as dist

    marks = {}

    def sleep(seconds):
        if "pressed" not in marks and all(f.exists() for f in pidfiles):
            marks["pressed"] = time.perf_counter()
            raise KeyboardInterrupt
        time.sleep(seconds)

    clock = types.SimpleNamespace(sleep=sleep, perf_counter=time.perf_counter, monotonic=time.monotonic)
    monkeypatch.setattr(dist, "time", clock)
    return marks


def test_workers_in_sessions_of_their_own_that_outlive_sigterm_are_stopped(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_STUBBORN_WORKER)
    pidfiles = [tmp_path / "ignores.pid", tmp_path / "blocked.pid"]
    # like torchrun: each worker in a session of its own; this launcher fails once both run, so
    # the workers are orphans (parent PID 1) before the launch stops anything
    launcher = (f"import subprocess, sys, time; from pathlib import Path; "
                f"files = [Path({str(pidfiles[0])!r}), Path({str(pidfiles[1])!r})]; "
                f"[subprocess.Popen([sys.executable, {str(script)!r}, how, str(f)], start_new_session=True) "
                f"for how, f in zip(['ignores-sigterm', 'blocked-in-read'], files)]; "
                "[time.sleep(0.05) for _ in range(2400) if not all(f.exists() for f in files)]; sys.exit(1)")
    run = launch([sys.executable, "-c", launcher], timeout=120, show=False)
    returned = time.time()
    pids = _pids_when_written(pidfiles, 0)
    alive = [pid for pid in pids if _alive(pid)]
    for pid in alive:
        os.kill(pid, 9)
    assert run.returncode == 1
    assert not alive, f"workers {alive} (in sessions of their own, outliving SIGTERM) survived the launch"
    started = max(f.stat().st_mtime for f in pidfiles)
    assert returned - started < GRACE_S + 10 + startup_seconds(), \
        f"the launch returned {returned - started:.1f} s after its command failed (grace {GRACE_S:g} s)"


def test_torchrun_workers_that_outlive_sigterm_are_stopped(tmp_path, monkeypatch):
    script = tmp_path / "worker.py"
    script.write_text("import os\n"
                      "how = 'ignores-sigterm' if os.environ['RANK'] == '0' else 'blocked-in-read'\n"
                      f"pidfile = {str(tmp_path)!r} + '/rank' + os.environ['RANK'] + '.pid'\n"
                      "import sys; sys.argv += [how, pidfile]\n" + _STUBBORN_WORKER)
    pidfiles = [tmp_path / "rank0.pid", tmp_path / "rank1.pid"]
    marks = _interrupt_when_written(monkeypatch, pidfiles)
    with pytest.raises(KeyboardInterrupt):
        launch(torchrun("--standalone", "--nproc-per-node=2", script), timeout=300, show=False)
    returned = time.perf_counter()
    pids = _pids_when_written(pidfiles, 0)
    alive = [pid for pid in pids if _alive(pid)]
    for pid in alive:
        os.kill(pid, 9)
    assert not alive, f"torchrun's workers {alive} survived the launch"
    assert returned - marks["pressed"] < GRACE_S + 10 + startup_seconds(), \
        f"the launch returned {returned - marks['pressed']:.1f} s after the interrupt (grace {GRACE_S:g} s)"


def test_a_checkpoint_writer_killed_mid_save_leaves_no_temporary_after_the_next_save(tmp_path):
    import signal
    import subprocess

    from gpucourse.distributed.ddp_train import save_atomic

    target = tmp_path / "checkpoint.pt"
    save_atomic(lambda f: torch.save({"step": 1}, f), target)
    writer = ("import sys, time, torch\nfrom pathlib import Path\n"
              "from gpucourse.distributed.ddp_train import save_atomic\n"
              "def save(f):\n"
              "    torch.save({'step': 2, 'big': torch.zeros(1000)}, f); print('WRITING', flush=True); time.sleep(600)\n"
              f"save_atomic(save, Path({str(target)!r}))\n")
    writers = [subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    try:
        for w in writers:
            assert w.stdout.readline().strip() == "WRITING"
        killed, living = writers
        killed.send_signal(signal.SIGKILL)       # as the out-of-memory killer or a scheduler would
        killed.wait(timeout=30)
        before = sorted(p.name for p in tmp_path.iterdir())
        assert len(before) == 3, f"expected the file and two temporaries, found {before}"
        save_atomic(lambda f: torch.save({"step": 3}, f), target)
        after = sorted(p.name for p in tmp_path.iterdir())
        assert torch.load(target) == {"step": 3}
        assert len(after) == 2 and str(living.pid) in after[0] + after[1], \
            f"the next save should leave the file and the living writer's temporary, found {after}"
    finally:
        for w in writers:
            w.kill()
            w.wait(timeout=30)


def test_temporaries_left_by_dead_writers_are_removed_and_a_living_writers_kept(tmp_path):
    import subprocess

    from gpucourse.atomic import save_atomic

    dead = subprocess.Popen(["true"])   # a PID whose process has exited
    dead.wait()
    target = tmp_path / "weights.npz"
    names = {"dead": f"weights.npz.{dead.pid}-0a1b.part.npz",
             "dead, named as before gpucourse.atomic": f".weights.{dead.pid}.tmp.npz",
             "living (this process)": f"weights.npz.{os.getpid()}-0a1b.part.npz",
             "another file's": f"other.npz.{dead.pid}-0a1b.part.npz"}
    for name in names.values():
        (tmp_path / name).write_bytes(b"half")
    save_atomic(lambda f: f.write_bytes(b"whole"), target)
    left = {what for what, name in names.items() if (tmp_path / name).exists()}
    assert left == {"living (this process)", "another file's"}, left
    assert target.read_bytes() == b"whole"


@pytest.mark.parametrize("argv, words", [
    (["--global-batch", "0"], "at least 1"),
    (["--samples", "100", "--global-batch", "128"], "less than one global batch"),
    (["--epochs", "0"], "at least 1"),
])
def test_ddp_train_rejects_bad_arguments_before_it_starts(tmp_path, capsys, argv, words):
    from gpucourse.distributed import ddp_train

    with pytest.raises(SystemExit):
        ddp_train.parse_args(["--out", str(tmp_path), *argv])
    assert words in capsys.readouterr().err


def test_ddp_train_checks_the_output_folder_first_and_saves_whole_files(tmp_path):
    from gpucourse.atomic import save_atomic, writable_folder

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit, match="not a folder this process can write to"):
        writable_folder(blocker / "runs")
    target = writable_folder(tmp_path / "runs") / "checkpoint.pt"
    save_atomic(lambda f: torch.save({"step": 1}, f), target)

    def interrupted(f):                  # stopped half-way through writing
        f.write_bytes(b"half a checkpoint")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        save_atomic(interrupted, target)
    assert torch.load(target) == {"step": 1}, "the previous checkpoint was clobbered"
    assert sorted(p.name for p in target.parent.iterdir()) == ["checkpoint.pt"], "a temporary file was left"


def test_tf_worker_whose_port_is_taken_says_so(tmp_path):
    import json
    import socket

    ports = free_ports(2)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[0]))
        holder.listen()
        env = {"TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                        "task": {"type": "worker", "index": 0}}), "CUDA_VISIBLE_DEVICES": ""}
        run = launch([sys.executable, "-m", "gpucourse.distributed.tf_multiworker", "--out", tmp_path], timeout=60,
                     env=env, show=False, retry=False)
    assert not run.ok and not run.timed_out
    assert PORT_CLASH in run.output and f"127.0.0.1:{ports[0]}" in run.output and "free_ports()" in run.output


# --------------------------------------------------------------------------- the device of each process

def test_pick_device_gives_each_local_rank_its_own_gpu_and_nccl():
    from gpucourse.distributed.ddp_train import pick_device
    from gpucourse.fakes.fakecuda import fake_gpu

    with fake_gpu("T4", count=2):
        assert pick_device(0, 2) == (torch.device("cuda", 0), "nccl")
        assert pick_device(1, 2) == (torch.device("cuda", 1), "nccl")
    with fake_gpu("A100", count=8, visible="6,7"):   # a shared server: this job may use GPUs 6 and 7
        assert pick_device(1, 2) == (torch.device("cuda", 1), "nccl")   # cuda:1 is physical GPU 7


@pytest.mark.parametrize("count, visible, local_rank, local_world_size", [
    (2, None, 2, 3),        # three processes on a node with two GPUs
    (4, "3", 1, 2),         # two processes, CUDA_VISIBLE_DEVICES leaves one GPU
    (1, None, 1, 1),        # a local rank beyond the count, whatever the world size says
    (1, None, 0, 2),        # rank 0 fails too: a mix of GPU and CPU ranks could not talk
])
def test_pick_device_refuses_more_processes_than_visible_gpus(count, visible, local_rank, local_world_size):
    from gpucourse.distributed.ddp_train import pick_device
    from gpucourse.fakes.fakecuda import fake_gpu

    with fake_gpu("T4", count=count, visible=visible):
        seen = torch.cuda.device_count()
        with pytest.raises(RuntimeError, match=f"sees {seen} GPU") as err:
            pick_device(local_rank, local_world_size)
    message = str(err.value)
    assert f"--nproc-per-node={seen}" in message and "CUDA_VISIBLE_DEVICES=" in message
    assert (f"CUDA_VISIBLE_DEVICES={visible!r}" in message) == (visible is not None)


@pytest.mark.parametrize("visible", [None, ""])
def test_pick_device_without_a_gpu_is_the_cpu_and_gloo(visible):
    from gpucourse.distributed.ddp_train import pick_device
    from gpucourse.fakes.fakecuda import fake_gpu

    with fake_gpu("T4", count=2 if visible == "" else 0, visible=visible):   # GPUs hidden, or none at all
        assert not torch.cuda.is_available()
        assert pick_device(0, 2) == (torch.device("cpu"), "gloo")
        assert pick_device(1, 2) == (torch.device("cpu"), "gloo")


# --------------------------------------------------------------------------- what the episode shows

# The blocks episode 9 prints with key_lines, and a call each must contain: if a marker is lost or
# moved off its lines, the episode would silently show less (or other) code than it explains.
SHOWN = {
    "ddp_train": {1: ["pick_device(local_rank", "dist.init_process_group(backend"],
                  2: ["DistributedSampler(", "sampler=sampler"],
                  3: ["DDP(model"],
                  4: ["sampler.set_epoch(epoch)"],
                  5: ["if rank == 0:", "ddp.module.state_dict()", "dist.barrier()"],
                  6: ["dist.destroy_process_group()"]},
    "tf_multiworker": {1: ["TF_CONFIG", "tf.distribute.MultiWorkerMirroredStrategy()"],
                       2: ["strategy.experimental_distribute_dataset("],
                       3: ["with strategy.scope():", "keras.Sequential(", "optimizers.SGD("],
                       4: ["compute_average_loss(", "global_batch_size="],
                       5: ["strategy.run(replica_step", "strategy.reduce("]},
    "uneven": {1: ['dist.init_process_group("gloo")', "dist.new_group(timeout="],
               2: ["if not args.bug:", "ReduceOp.MIN", "dist.all_reduce(grad, group=group)"]},
}


@pytest.mark.parametrize("script", sorted(SHOWN))
def test_the_lines_the_episode_shows_are_marked_in_the_scripts(script):
    from gpucourse.distributed.key_lines import blocks, key_lines

    found = {b.number: b for b in blocks(script)}
    assert sorted(found) == sorted(SHOWN[script]), f"{script}.py marks blocks {sorted(found)}"
    for number, calls in SHOWN[script].items():
        for call in calls:
            assert call in found[number].code, f"{script}.py block {number} no longer holds {call!r}"
        assert len(found[number].code.splitlines()) <= 8, f"{script}.py block {number} grew past a few lines"
    text = key_lines(script)
    assert sum(len(b.code.splitlines()) for b in found.values()) <= 25 and "# <<<" not in text and "# >>>" not in text
    source = (Path(__file__).parents[1] / "gpucourse" / "distributed" / f"{script}.py").read_text().splitlines()
    for b in found.values():                                 # the line numbers shown are the script's own
        assert source[b.first_line - 1].strip() == b.code.splitlines()[0].strip()


def test_key_lines_rejects_broken_markers(tmp_path, monkeypatch):
    from gpucourse.distributed import key_lines as kl

    monkeypatch.setattr(kl, "__file__", str(tmp_path / "key_lines.py"))
    (tmp_path / "open.py").write_text("# >>> 1. never closed\nx = 1\n")
    (tmp_path / "stray.py").write_text("x = 1\n# <<<\n")
    with pytest.raises(ValueError, match="never closed"):
        kl.blocks("open")
    with pytest.raises(ValueError, match="out of order"):
        kl.blocks("stray")
    with pytest.raises(FileNotFoundError, match="choose one of"):
        kl.blocks("missing")


def test_the_slurm_script_parses_and_runs_dry(tmp_path):
    from gpucourse.distributed import slurm

    script = slurm.write(tmp_path / "ddp.sbatch")
    syntax = launch(["bash", "-n", script], timeout=30, show=False)
    assert syntax.ok, syntax.output
    stubs = "\n".join(['srun() { echo "srun would start: $*"; }', "module() { :; }",
                       "scontrol() { echo node001; echo node002; }",
                       'export SLURM_JOB_NODELIST="node[001-002]" SLURM_JOB_NUM_NODES=2 SLURM_GPUS_ON_NODE=4',
                       "export SLURM_CPUS_PER_TASK=16 SLURM_JOB_ID=42 SLURM_SUBMIT_DIR=/home/me",
                       'source "$0"'])
    dry = launch(["bash", "-c", stubs, script], timeout=30, show=False)
    assert dry.ok, dry.output
    assert dry.output.strip() == ("srun would start: torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d "
                                  "--rdzv-endpoint=node001:20042 --rdzv-id=42 -m gpucourse.distributed.ddp_train "
                                  "--out /home/me/runs/42 --epochs 20")
