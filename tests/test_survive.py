"""Episode 11's helpers: exact resumes after SIGKILL, saves killed mid-write, signals, deadlines."""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gpucourse import checkpoint, survive
from gpucourse.children import survive_train

OPTS = dict(epochs=2, samples=512, batch=32, every=5)     # 32 steps
TIMEOUT = 120


def weights(folder):
    return torch.load(folder / "final.pt", weights_only=True)


def assert_identical(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key}: max difference {(a[key] - b[key]).abs().max().item()}"


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    folder = tmp_path_factory.mktemp("straight")
    run = survive.run(folder, timeout=TIMEOUT, **OPTS)
    assert run.returncode == 0, run.summary(20)
    return weights(folder)


def test_resume_after_sigkill_is_bitwise_identical_on_the_cpu(straight, tmp_path):
    kill_at = random.randrange(6, 30)          # a step nobody chose
    # the child waits after printing that step, so the kill lands there however late a busy
    # machine lets this process read the line (the last 3 steps take about 20 ms)
    killed = survive.run(tmp_path, timeout=TIMEOUT, kill_at=kill_at, **OPTS)
    assert killed.killed and killed.last_step == kill_at, (kill_at, killed.summary(20))
    assert not (tmp_path / "final.pt").exists(), kill_at
    resumed = survive.run(tmp_path, timeout=TIMEOUT, **OPTS)
    assert resumed.returncode == 0, resumed.summary(20)
    assert any(line.startswith("resumed from checkpoint-") for line in resumed.lines), (kill_at, resumed.lines[:3])
    assert_identical(weights(tmp_path), straight)


def test_resume_with_loader_workers_is_bitwise_identical(straight, tmp_path):
    killed = survive.run(tmp_path, timeout=TIMEOUT, kill_at=21, workers=2, **OPTS)
    assert killed.killed and killed.last_step == 21, killed.summary(20)
    resumed = survive.run(tmp_path, timeout=TIMEOUT, workers=2, **OPTS)
    assert resumed.returncode == 0, resumed.summary(20)
    assert_identical(weights(tmp_path), straight)


def test_a_save_killed_mid_write_leaves_the_previous_checkpoint(straight, tmp_path):
    first = survive.run(tmp_path, timeout=TIMEOUT, stop_after=10, **OPTS)
    assert first.returncode == 0, first.summary(20)
    # the next save (after step 15) writes half the file, pauses, and is killed there: the pause
    # outlasts the run's deadline, so however late a busy machine passes the line on, the kill
    # lands in the pause
    killed = survive.run(tmp_path, timeout=TIMEOUT, kill_when="saving: half written", slow_save=10 * TIMEOUT,
                         **OPTS)
    assert killed.killed and killed.last_step == 15, killed.summary(20)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith("checkpoint-15.pt.")]
    assert leftovers, "the killed writer's temporary file should still be there"
    assert [p.name for p in checkpoint.saved_checkpoints(tmp_path)] == ["checkpoint-5.pt", "checkpoint-10.pt"]
    ckpt = checkpoint.load(tmp_path / "checkpoint-10.pt")       # whole, and the one before the kill
    assert (ckpt["epoch"], ckpt["step"]) == (0, 10)
    resumed = survive.run(tmp_path, timeout=TIMEOUT, **OPTS)
    assert resumed.returncode == 0, resumed.summary(20)
    assert not [p for p in tmp_path.iterdir() if ".pt." in p.name], "stale temporary kept"
    assert_identical(weights(tmp_path), straight)


def test_sigusr1_saves_then_stops_and_the_run_resumes(straight, tmp_path):
    stopped = survive.run(tmp_path, timeout=TIMEOUT, kill_at=7, sig=signal.SIGUSR1, **OPTS)
    assert stopped.returncode == 128 + signal.SIGUSR1 and stopped.last_step == 7, stopped.summary(20)
    assert "SIGUSR1" in stopped.summary()
    newest = checkpoint.saved_checkpoints(tmp_path)[-1]
    assert newest.name == f"checkpoint-{stopped.last_step}.pt"
    ckpt = checkpoint.load(newest)
    assert ckpt["epoch"] * 16 + ckpt["step"] == stopped.last_step      # saved at the step it stopped
    resumed = survive.run(tmp_path, timeout=TIMEOUT, **OPTS)
    assert resumed.returncode == 0, resumed.summary(20)
    assert_identical(weights(tmp_path), straight)


def test_leaving_a_part_out_changes_the_result(straight, tmp_path):
    from gpucourse.children import survive_train

    args = ["--epochs", "2", "--samples", "512", "--batch", "32", "--quiet"]
    survive_train.main(args + ["--out", str(tmp_path), "--stop-after", "20"])
    survive_train.main(args + ["--out", str(tmp_path), "--forget", "optimizer"])
    got = weights(tmp_path)
    assert not all(torch.equal(got[k], straight[k]) for k in got)


def test_bad_arguments_are_named(tmp_path):
    run = survive.run(tmp_path, timeout=TIMEOUT, forget="weights")
    assert run.returncode == 2
    assert "unknown part(s) ['weights']" in "\n".join(run.lines)


def test_the_deadline_kills_the_run(tmp_path):
    from gpucourse.distributed import startup_seconds

    run = survive.run(tmp_path, timeout=1.0, epochs=10_000)
    assert run.returncode is None
    assert "deadline" in run.summary()
    assert run.seconds >= 1.0 + startup_seconds(), \
        "the deadline left no time to start the script: it must add this machine's start-up to the run's time"
    with pytest.raises(ProcessLookupError):
        os.kill(run.pid, 0)


def test_the_pause_at_the_kill_step_lasts_until_the_signal_not_a_fixed_time(monkeypatch):
    """--pause-at waits for the signal as long as its parent lives: a busy machine may take any
    time to read the step line and send it. It ends when the parent has gone (no process left
    waiting forever)."""
    import types

    clock = {"now": 0.0, "sleeps": 0}

    def sleep(seconds):
        clock["now"] += 30.0                 # every pause looks like 30 s passing
        clock["sleeps"] += 1

    parents = iter([1234] * 10 + [1] * 100)       # the parent goes after ten looks
    monkeypatch.setattr(survive_train, "time", types.SimpleNamespace(sleep=sleep, monotonic=lambda: clock["now"]))
    monkeypatch.setattr(survive_train.os, "getppid", lambda: next(parents))
    monkeypatch.setattr(survive_train, "_stop", [])
    survive_train._wait_for_a_signal()
    assert clock["sleeps"] >= 9, f"it stopped waiting after {clock['now']:.0f} s, with the parent still there"
    assert clock["sleeps"] < 100, "it went on waiting after its parent had gone"


def test_an_interrupt_in_the_notebook_stops_the_run_and_its_loader_workers(tmp_path, monkeypatch):
    """Ctrl-C (or any error) in the kernel while a run goes: the script and its DataLoader workers are gone."""
    import queue
    import types

    import psutil

    from gpucourse.distributed import startup_seconds

    startup_seconds()                 # measured now, so that the only process started below is the run's
    started, family = [], []
    real_popen = survive.subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    class Interrupted(queue.Queue):
        def get(self, *args, **kwargs):
            line = super().get(*args, **kwargs)
            if line and line.startswith("step 3 "):
                family.extend(psutil.Process(started[0].pid).children(recursive=True))
                raise KeyboardInterrupt
            return line

    monkeypatch.setattr(survive.subprocess, "Popen", popen)
    monkeypatch.setattr(survive, "queue", types.SimpleNamespace(Queue=Interrupted, Empty=queue.Empty))
    with pytest.raises(KeyboardInterrupt):
        survive.run(tmp_path, timeout=TIMEOUT, workers=2, **OPTS)
    assert len(family) >= 2, "the run should have had its two loader workers when it was interrupted"
    for proc in [psutil.Process(started[0].pid) if psutil.pid_exists(started[0].pid) else None, *family]:
        if proc is not None and proc.is_running():
            assert proc.status() == psutil.STATUS_ZOMBIE, f"process {proc.pid} outlived the interrupt"


def test_rng_state_survives_a_weights_only_file(tmp_path):
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    state = checkpoint.rng_state()
    want = (random.random(), np.random.rand(), torch.rand(1).item(), np.random.randn())
    checkpoint.save({"rng": state}, tmp_path / "rng.pt")
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    checkpoint.set_rng_state(checkpoint.load(tmp_path / "rng.pt")["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item(), np.random.randn()) == want


def test_epoch_sampler_reshuffles_each_epoch_and_starts_mid_epoch():
    s = checkpoint.EpochSampler(10, seed=1)
    s.set_epoch(0)
    first = list(s)
    s.set_epoch(1)
    assert sorted(list(s)) == list(range(10)) and list(s) != first
    s.set_epoch(0, start=4)
    assert list(s) == first[4:] and len(s) == 6


def test_where_to_keep(tmp_path, monkeypatch, capsys):
    chosen = checkpoint.where_to_keep("ep11", chosen=tmp_path / "mine")
    assert chosen == tmp_path / "mine" and chosen.is_dir()
    monkeypatch.setattr(checkpoint, "KAGGLE", tmp_path / "no-kaggle")
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    default = checkpoint.where_to_keep("ep11")
    assert str(default).startswith(os.environ["GPUCOURSE_DATA"])      # the course's cache, nowhere else
    # Colab without Drive: the cache, and a clear message; with Drive mounted: Drive
    monkeypatch.setitem(sys.modules, "google.colab", object())
    monkeypatch.setattr(checkpoint, "DRIVE", tmp_path / "drive" / "MyDrive")
    capsys.readouterr()
    local = checkpoint.where_to_keep("ep11")
    assert str(local).startswith(os.environ["GPUCOURSE_DATA"]) and "WIPED" in capsys.readouterr().out
    (tmp_path / "drive" / "MyDrive").mkdir(parents=True)
    assert checkpoint.where_to_keep("ep11") == tmp_path / "drive" / "MyDrive" / "gpucourse-checkpoints" / "ep11"
    assert "flush_and_unmount" in capsys.readouterr().out    # Drive uploads later: say how to make sure
    monkeypatch.delitem(sys.modules, "google.colab")
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    monkeypatch.setattr(checkpoint, "KAGGLE", tmp_path / "kaggle" / "working")
    assert checkpoint.where_to_keep("ep11") == tmp_path / "kaggle" / "working" / "checkpoints" / "ep11"
    kaggle_message = capsys.readouterr().out
    assert "LOST" in kaggle_message and "Persistence" in kaggle_message


EPISODE = Path(__file__).resolve().parents[1] / "episodes" / "11-runs-that-survive.ipynb"


def _shown_code() -> list[str]:
    """The ```python blocks of episode 11's markdown: the code a learner reads there."""
    cells = json.loads(EPISODE.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _code_cells() -> list[str]:
    cells = json.loads(EPISODE.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("fn", [checkpoint.capture, checkpoint.restore, checkpoint.save, checkpoint.load],
                         ids=lambda fn: fn.__name__)
def test_the_episode_defines_the_checkpoint_functions_as_the_module_has_them(fn):
    """Episode 11 defines capture, restore, save and load in runnable cells; the killed child
    processes run gpucourse/checkpoint.py. The two must be the same code, line for line."""
    defining = [cell for cell in _code_cells() if re.search(rf"^def {fn.__name__}\(", cell, re.M)]
    assert len(defining) == 1, f"episode 11 should define {fn.__name__} in one code cell"
    assert defining[0].strip() == inspect.getsource(fn).strip(), (
        f"episode 11's cell that defines {fn.__name__} differs from checkpoint.{fn.__name__} in "
        "gpucourse/checkpoint.py: make the cell the function, as the module has it (and nothing else)")
    assert f"```python\ndef {fn.__name__}(" not in "".join(_shown_code()), "shown twice"


def test_the_episodes_in_kernel_runs_use_the_functions_its_cells_define():
    runs = [cell for cell in _code_cells() if "survive_train.main(" in cell]
    assert runs and all("functions=" in cell for cell in runs), (
        "each survive_train.main(...) in episode 11 should pass functions=... (the cells' own)")


def test_the_episode_shows_lines_of_the_training_loop_that_run():
    """Each line shown of survive_train.train is in it, in the same order and nesting ('...' skips lines)."""
    loop = [block for block in _shown_code() if "while epoch < args.epochs" in block]
    assert len(loop) == 1, "episode 11 should show the training loop's key lines once"
    body = [line[4:].rstrip() for line in inspect.getsource(survive_train.train).splitlines()]
    at = 0
    for line in loop[0].splitlines():
        if not line.strip() or line.strip() == "...":
            continue
        assert line.rstrip() in body[at:], (f"episode 11 shows {line.strip()!r}, which survive_train.train does not "
                                            "have (at this place): bring the notebook's block in step with it")
        at = body.index(line.rstrip(), at) + 1


# --- numbered checkpoints, the last two kept ----------------------------------------------------

def test_a_run_keeps_its_last_two_checkpoints_only(tmp_path):
    run = survive.run(tmp_path, timeout=TIMEOUT, stop_after=22, **OPTS)
    assert run.returncode == 0, run.summary(20)
    names = [p.name for p in checkpoint.saved_checkpoints(tmp_path)]
    assert names == ["checkpoint-20.pt", "checkpoint-22.pt"], names


def test_a_newest_checkpoint_cut_short_falls_back_to_the_one_before(straight, tmp_path):
    """What keeping the previous checkpoint is for: the last one did not arrive whole."""
    first = survive.run(tmp_path, timeout=TIMEOUT, stop_after=10, **OPTS)
    assert first.returncode == 0, first.summary(20)
    newest = tmp_path / "checkpoint-10.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])   # an upload cut short
    resumed = survive.run(tmp_path, timeout=TIMEOUT, **OPTS)
    assert resumed.returncode == 0, resumed.summary(20)
    text = "\n".join(resumed.lines)
    assert "skipping checkpoint-10.pt" in text and "resumed from checkpoint-5.pt" in text, text[:600]
    assert_identical(weights(tmp_path), straight)


def test_prune_orders_by_step_removes_stale_temporaries_and_refuses_keep_0(tmp_path):
    for step in (5, 10, 100, 15):
        checkpoint.save({"step": step}, checkpoint.numbered(tmp_path, step))
    dead = tmp_path / "checkpoint-20.pt.999999999-abcd.part.pt"    # a writer long gone
    dead.write_bytes(b"half")
    removed = checkpoint.prune(tmp_path, keep=2)
    assert [p.name for p in checkpoint.saved_checkpoints(tmp_path)] == ["checkpoint-15.pt", "checkpoint-100.pt"]
    assert dead in removed and not dead.exists()
    with pytest.raises(ValueError, match="keep=0"):
        checkpoint.prune(tmp_path, keep=0)
    assert checkpoint.load_latest(tmp_path / "empty") == (None, None)


def test_main_uses_the_functions_it_is_given(tmp_path):
    calls = []

    def counted(name):
        real = getattr(checkpoint, name)
        return lambda *args: calls.append(name) or real(*args)

    mine = {name: counted(name) for name in survive_train.CHECKPOINT_FUNCTIONS}
    args = ["--epochs", "1", "--samples", "64", "--batch", "16", "--every", "2", "--quiet", "--out", str(tmp_path)]
    survive_train.main(args + ["--stop-after", "2"], functions=mine)
    survive_train.main(args, functions=mine)
    assert calls == ["capture", "save", "load", "restore", "capture", "save"], calls
    with pytest.raises(ValueError, match="'svae'"):
        survive_train.main(args, functions={"svae": print})


# --- an asynchronous save ------------------------------------------------------------------------

def test_a_background_save_writes_the_state_as_it_was_when_called(tmp_path):
    model = torch.nn.Linear(4, 3)
    ckpt = {"model": model.state_dict(), "step": 7, "rng": checkpoint.rng_state()}
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pending = checkpoint.save_in_background(ckpt, tmp_path / "async.pt")
    with torch.no_grad():
        model.weight.add_(1.0)            # training goes on changing the weights in place
    assert pending.result(timeout=60) == tmp_path / "async.pt"
    saved = checkpoint.load(tmp_path / "async.pt")
    assert saved["step"] == 7
    assert_identical(saved["model"], before)


def test_a_background_save_re_raises_the_writers_error(tmp_path):
    pending = checkpoint.save_in_background({"step": 1}, tmp_path / "no-such-folder" / "c.pt")
    with pytest.raises(FileNotFoundError):
        pending.result(timeout=60)


def test_cpu_copy_copies_tensors_and_keeps_the_structure():
    state = {"a": [torch.ones(2), (torch.zeros(1), 3)], "b": "text"}
    copy = checkpoint.cpu_copy(state)
    state["a"][0].add_(1)
    assert torch.equal(copy["a"][0], torch.ones(2)) and isinstance(copy["a"][1], tuple)
    assert copy["a"][1][1] == 3 and copy["b"] == "text"
