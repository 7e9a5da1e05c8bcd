"""Episode 11's checks, three ways: right answers pass, stubs are "not done", wrong answers teach."""

from __future__ import annotations

import io
import math
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gpucourse.checks import ep11
from gpucourse.exercises import ____

from checking import assert_two_step_hints, assert_wrong


# --- q1: capture and restore ------------------------------------------------------------------

def capture(model, optimizer, scheduler, epoch, step):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "grads": [p.grad for p in model.parameters()], "epoch": epoch, "step": step,
            "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}}


def restore(ckpt, model, optimizer, scheduler):
    model.load_state_dict(ckpt["model"])
    for p, g in zip(model.parameters(), ckpt["grads"]):
        p.grad = g
    optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    random.setstate(ckpt["rng"]["python"])
    np.random.set_state(ckpt["rng"]["numpy"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    return ckpt["epoch"], ckpt["step"]


def restore_without(*parts, position=None, draw_after=False):
    def fn(ckpt, model, optimizer, scheduler):
        if "model" not in parts:
            model.load_state_dict(ckpt["model"])
        if "grads" not in parts:
            for p, g in zip(model.parameters(), ckpt["grads"]):
                p.grad = g
        if "optimizer" not in parts:
            optimizer.load_state_dict(ckpt["optimizer"])
        if "scheduler" not in parts:
            scheduler.load_state_dict(ckpt["scheduler"])
        if "python" not in parts:
            random.setstate(ckpt["rng"]["python"])
        if "numpy" not in parts:
            np.random.set_state(ckpt["rng"]["numpy"])
        if "torch" not in parts:
            torch.set_rng_state(ckpt["rng"]["torch"])
        if draw_after:
            torch.nn.Linear(2, 2)                  # makes a layer after the generators are back: draws
        return position(ckpt) if position else (ckpt["epoch"], ckpt["step"])
    return fn


def capture_named(model, optimizer, scheduler, epoch, step):     # gradients by name, zeros for None
    ckpt = capture(model, optimizer, scheduler, epoch, step)
    ckpt["grads"] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return ckpt


def restore_named(ckpt, model, optimizer, scheduler):
    where = restore_without("grads")(ckpt, model, optimizer, scheduler)
    for n, p in model.named_parameters():
        p.grad = ckpt["grads"].get(n)
    return where


def test_q1_right_and_stub():
    assert ep11.q1.outcome(capture, restore)[0] == "correct"
    assert ep11.q1.outcome(capture_named, restore_named)[0] == "correct"
    assert ep11.q1.outcome(____, ____)[0] == "not-done"
    assert ep11.q1.outcome(capture, ____)[0] == "not-done"
    assert ep11.q1.outcome(lambda *a: ____, restore)[0] == "not-done"


class NoScaler:
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_q1_the_episodes_helper_is_not_the_answer():
    """The episode's capture saves after an optimizer step; this loop also stops between the batches of one."""
    from gpucourse import checkpoint

    assert_wrong(ep11.q1, (lambda m, o, s, e, st: checkpoint.capture(m, o, NoScaler(), s, e, st),
                           lambda c, m, o, s: checkpoint.restore(c, m, o, NoScaler(), s)), ["gradients", ".grad"])


Q1_WRONG = [
    ((capture, restore_without("grads")), ["lost the gradients", "between the 2 batches"]),
    ((capture, restore_without("grads", "optimizer")), ["optimizer"]),
    ((capture, restore_without("optimizer")), ["optimizer", "momentum"]),
    ((capture, restore_without("scheduler")), ["scheduler"]),
    ((capture, restore_without("torch")), ["torch", "dropout"]),
    ((capture, restore_without("numpy")), ["NumPy"]),
    ((capture, restore_without("python")), ["Python's random"]),
    ((capture, restore_without("model")), ["model's weights"]),
    ((capture, restore_without(position=lambda c: (c["epoch"], 0))), ["first batch"]),
    ((capture, restore_without(position=lambda c: (c["epoch"] + 1, 0))), ["skipping the rest"]),
    ((capture, restore_without(draw_after=True)), ["torch", "last"]),
    ((capture, restore_without(position=lambda c: None)), ["returned None"]),
    ((capture, restore_without(position=lambda c: c["epoch"])), ["pair"]),
    ((lambda m, o, s, e, st: {"model": m.state_dict(), "epoch": e, "step": st},       # the weights only
      lambda c, m, o, s: (m.load_state_dict(c["model"]), (c["epoch"], c["step"]))[1]), ["optimizer"]),
    ((lambda m, o, s, e, st: {**capture(m, o, s, e, st), "grads": [None if g is None else g.clone().zero_()
                                                                  for g in capture(m, o, s, e, st)["grads"]]},
      restore), ["lost the gradients"]),                                         # zeroed, not kept
    ((lambda m, o, s, e, st: m.state_dict(), restore), ["KeyError"]),
    ((lambda m, o, s, e, st: [m.state_dict()], restore), ["dict"]),
    ((lambda m, o, s, e, st: {"gen": (x for x in ())}, restore), ["torch.save"]),
    ((42, restore), ["function itself"]),
]


@pytest.mark.parametrize("answers, words", Q1_WRONG)
def test_q1_wrong(answers, words):
    assert_wrong(ep11.q1, answers, words)


def test_q1_names_the_lost_epoch():
    def global_step(c):                               # the first fixture has 6 steps per epoch
        return 0, c["epoch"] * 6 + c["step"]
    message = assert_wrong(ep11.q1, (capture, restore_without(position=global_step)), ["epoch lost"])
    assert "(1, 2)" in message


# --- q2: an atomic save --------------------------------------------------------------------------

def save_checkpoint(state, path):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_via_helper(state, path):
    from gpucourse.atomic import save_atomic
    save_atomic(lambda f: torch.save(state, f), Path(path))


def save_buffered(state, path):       # pickled to memory first: also atomic
    buffer = io.BytesIO()
    torch.save(state, buffer)
    tmp = Path(str(path) + ".part")
    with open(tmp, "wb") as f:
        f.write(buffer.getvalue())
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def save_with_fdatasync(state, path):     # Linux: flushes a new file's data and its size
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fdatasync(f.fileno())
    os.replace(tmp, path)


def test_q2_right_and_stub():
    for fn in (save_checkpoint, save_via_helper, save_buffered):
        assert ep11.q2.outcome(fn)[0] == "correct", ep11.q2.outcome(fn)
    assert ep11.q2.outcome(____)[0] == "not-done"
    assert ep11.q2.outcome(lambda s, p: ____)[0] == "not-done"


def direct(state, path):
    torch.save(state, path)


def no_fsync(state, path):
    tmp = Path(str(path) + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def elsewhere(state, path):
    import tempfile
    fd, tmp = tempfile.mkstemp(dir=os.path.join(os.path.dirname(path), os.pardir))
    with os.fdopen(fd, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def delete_first(state, path):
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    Path(path).unlink(missing_ok=True)
    os.rename(tmp, path)


def copy_over(state, path):
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    shutil.copyfile(tmp, path)


def copy_and_remove(state, path):
    copy_over(state, path)
    os.remove(str(path) + ".tmp")


def write_later(state, path):           # pickles to memory, then writes path itself: not atomic
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
        f.flush()
        os.fsync(f.fileno())


def saves_something_else(state, path):
    save_checkpoint({"step": 0}, path)


def saves_nothing(state, path):
    pass


def delete_if_there(state, path):        # the first save has nothing to delete: only a later one shows it
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if Path(path).exists():
        os.remove(path)
    os.rename(tmp, path)


def syncs_the_folder_only(state, path):  # the rename's folder on disk, the data of the file not
    tmp = Path(str(path) + ".tmp")
    torch.save(state, tmp)
    folder = os.open(Path(path).parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    os.replace(tmp, path)


def syncs_another_file(state, path):     # fsyncs a file, but not the one it renames
    import tempfile
    tmp = Path(str(path) + ".tmp")
    torch.save(state, tmp)
    with tempfile.TemporaryFile() as log:
        log.write(b"saved")
        log.flush()
        os.fsync(log.fileno())
    os.replace(tmp, path)


def moves_the_old_aside(state, path):   # no delete, but for a moment there is no file at path
    tmp, aside = Path(str(path) + ".tmp"), Path(str(path) + ".old")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if Path(path).exists():
        os.rename(path, aside)
    os.replace(tmp, path)
    aside.unlink(missing_ok=True)


Q2_WRONG = [
    (moves_the_old_aside, ["killed just before os.replace", "no checkpoint at all"]),
    (delete_if_there, ["deletes the old checkpoint"]),
    (syncs_the_folder_only, ["fsync", "temporary file"]),
    (syncs_another_file, ["fsync", "temporary file"]),
    (direct, ["never renames"]),
    (no_fsync, ["fsync"]),
    (elsewhere, ["not in the checkpoint's folder"]),
    (delete_first, ["deletes the old checkpoint"]),
    (copy_over, ["never renames"]),
    (copy_and_remove, ["never renames"]),
    (write_later, ["never renames"]),
    (saves_something_else, ["does not hold the state"]),
    (saves_nothing, ["no file at path"]),
    (lambda s, p: np.save(p, np.zeros(3)), ["no file at path"]),      # np.save adds .npy
    ("save_checkpoint", ["function itself"]),
]


@pytest.mark.parametrize("fn, words", Q2_WRONG)
def test_q2_wrong(fn, words):
    assert_wrong(ep11.q2, (fn,), words)


def test_q2_kill_mid_write_finds_half_written_files(monkeypatch):
    """The part of the check that kills a save: a save that renames but writes the final path first is caught."""
    def renames_after_writing_in_place(state, path):
        torch.save(state, path)                       # half a file here when killed ...
        tmp = Path(str(path) + ".tmp")
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    assert_wrong(ep11.q2, (renames_after_writing_in_place,), ["half-written"])


# --- q3: how often to checkpoint ---------------------------------------------------------------

def checkpoint_every(step_s, save_s, per_day):
    return max(1, round(math.sqrt(2 * save_s * 86_400 / per_day) / step_s))


def _young(step_s, save_s, per_day):
    return math.sqrt(2 * save_s * 86_400 / per_day) / step_s


def test_q3_right_and_stub():
    assert ep11.q3.outcome(checkpoint_every)[0] == "correct"
    assert ep11.q3.outcome(lambda a, b, c: int(np.ceil(_young(a, b, c))) if _young(a, b, c) >= 1 else 1)[0] == "correct"
    assert ep11.q3.outcome(lambda a, b, c: np.int64(max(1, round(_young(a, b, c)))))[0] == "correct"
    assert ep11.q3.outcome(____)[0] == "not-done"
    assert ep11.q3.outcome(lambda a, b, c: ____)[0] == "not-done"


Q3_WRONG = [
    (lambda a, b, c: max(1, round(math.sqrt(b * 86_400 / c) / a)), ["without the 2"]),
    (lambda a, b, c: max(1, round(math.sqrt(2 * b * 24 / c) / a)), ["in hours"]),
    (lambda a, b, c: max(1, round(math.sqrt(2 * b / c) / a)), ["in days"]),
    (lambda a, b, c: max(1, round(math.sqrt(2 * b * c) / a)), ["rate used as if"]),
    (lambda a, b, c: max(1, round(math.sqrt(2 * b * 86_400 / c))), ["seconds, not steps"]),
    (lambda a, b, c: max(1, round(2 * b * 86_400 / c / a)), ["without the square root"]),
    (lambda a, b, c: _young(a, b, c), ["whole number"]),
    (lambda a, b, c: round(_young(a, b, c)), ["at least one step"]),
    (lambda a, b, c: max(1, round((math.sqrt(2 * b * 86_400 / c) - b) / a)), ["expected"]),   # Daly's
    (lambda a, b, c: 2629, ["expected"]),
    (lambda a, b, c: "2629", ["number", "quotes"]),
    (3, ["function itself"]),
]


@pytest.mark.parametrize("fn, words", Q3_WRONG)
def test_q3_wrong(fn, words):
    assert_wrong(ep11.q3, (fn,), words)


@pytest.mark.skipif(not hasattr(os, "fdatasync"), reason="os.fdatasync exists on Linux only")
def test_q2_accepts_fdatasync_as_the_files_flush():
    assert ep11.q2.outcome(save_with_fdatasync)[0] == "correct", ep11.q2.outcome(save_with_fdatasync)


# --- q4: is the GPU waiting for the host? ----------------------------------------------------------

def host_bound(util):
    busy = [i for i, u in enumerate(util) if u > 5]
    window = util[busy[0]: busy[-1] + 1]
    return sum(window) / len(window) < 80


def _window(util):
    busy = np.flatnonzero(np.asarray(util) > 5)
    return np.asarray(util)[busy[0]: busy[-1] + 1]


def _window_at_least_5(util):
    busy = np.flatnonzero(np.asarray(util) >= 5)
    return np.asarray(util)[busy[0]: busy[-1] + 1]


def test_q4_right_and_stub():
    assert ep11.q4.outcome(host_bound)[0] == "correct"
    assert ep11.q4.outcome(lambda u: np.mean(_window(u)) < 80)[0] == "correct"     # a NumPy bool
    assert ep11.q4.outcome(____)[0] == "not-done"
    assert ep11.q4.outcome(lambda u: ____)[0] == "not-done"


Q4_WRONG = [
    (lambda u: sum(u) / len(u) < 80, ["idle samples before the first step"]),
    (lambda u: float(np.median(_window(u))) < 80, ["median"]),
    (lambda u: max(u) < 80, ["highest sample"]),
    (lambda u: min(_window(u)) < 80, ["lowest sample"]),
    (lambda u: float(np.mean(_window(u))) < 50, ["80 %"]),
    (lambda u: float(np.mean(_window(u))), ["True (host-bound: the GPU waited) or False"]),
    (lambda u: "yes" if np.mean(_window(u)) < 80 else "no", ["True (host-bound: the GPU waited) or False"]),
    (lambda u: float(np.mean(_window(u))) > 80, ["backwards", "less than 80 %"]),
    (lambda u: float(np.mean(_window(u))) >= 80, ["backwards", "less than 80 %"]),
    (lambda u: float(np.mean(_window(u))) < 0.8, ["0.8", "percent"]),
    (lambda u: float(np.mean(_window(u))) / 100 < 0.8 * 100, ["True for every one", "80 %"]),
    (lambda u: float(np.mean(np.asarray(u)[np.asarray(u) > 5])) < 80, ["only the samples above 5 %"]),
    (lambda u: float(np.max(u)) < 80, ["highest sample"]),
    # the boundaries the prompt states: "less than 80 %" and "the first sample above 5 %"
    (lambda u: sum(_window(u)) / len(_window(u)) <= 80, ["strict", "not <= 80"]),
    (lambda u: float(np.mean(_window_at_least_5(u))) < 80, ["ABOVE 5 %", "not >= 5"]),
    (lambda u: True, ["fed"]),
    (lambda u: False, ["starved", "80 %"]),
    (None, ["function itself"]),
]


@pytest.mark.parametrize("fn, words", Q4_WRONG)
def test_q4_wrong(fn, words):
    assert_wrong(ep11.q4, (fn,), words)


# --- hints ------------------------------------------------------------------------------------------

CODE = ("()", " = ", "==", "return ", "import", "[", "]", "**", "//", "sqrt", "√", "86_400", "86400", "os.", "torch.",
        "np.", "llm.", "math.", "state_dict", "getstate", "get_state", "fsync", "replace(", "config.", "_proj ")


@pytest.mark.parametrize("exercise", [ep11.q1, ep11.q2, ep11.q3, ep11.q4], ids=lambda q: q.name)
def test_hints_come_in_two_steps_without_the_code(exercise, capsys):
    assert_two_step_hints(exercise, capsys, CODE)


def test_q4_traces_tell_every_named_rule_apart():
    """Each wrong rule the check can name gives verdicts of its own, unlike the right rule and every other."""
    traces = ep11._traces()
    verdicts = {rule: tuple(fn(t) for _, t, _, _ in traces) for rule, fn in ep11._Q4_RULES.items()}
    verdicts["right"] = tuple(truth for _, _, truth, _ in traces)
    verdicts["always True"], verdicts["always False"] = (True,) * len(traces), (False,) * len(traces)
    assert len(set(verdicts.values())) == len(verdicts), verdicts


def waits_for_its_temporary(state, path):
    """Waits while 'another save' is in progress: forever, once a killed save has left its temporary."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    while tmp.exists():
        time.sleep(0.05)
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def test_q2_a_save_that_hangs_after_a_kill_is_stopped_and_explained(monkeypatch):
    """The killed saves run in child processes; one that never ends is stopped at the deadline every
    answer has (shortened here), with the likely cause, instead of the check waiting for it forever."""
    monkeypatch.setattr(ep11._exercises, "DEADLINE_S", 3.0)
    assert_wrong(ep11.q2, (waits_for_its_temporary,), ["did not return within 3 s", "leaves behind",
                                                       "checkpoint.pt.tmp"])


def test_q2_sees_every_save_not_only_the_first():
    """A save that deletes the old checkpoint only when there is one is caught: the first save has none."""
    message = assert_wrong(ep11.q2, (delete_if_there,), ["deletes the old checkpoint"])
    assert "save number 2" in message


def test_q4_grades_the_rule_the_episode_applies_with_monitor():
    """Exercise 4's training window is Monitor.training_mean_util's: one rule, in one place."""
    from gpucourse.monitor import Monitor

    for _, trace, truth, _ in ep11._traces():
        mon = Monitor()
        mon.util = list(trace)
        assert (mon.training_mean_util() < 80) == truth
