"""Checks for episode 11, "Training runs that survive".

``q1`` capture and restore everything an exact resume needs · ``q2`` an atomic checkpoint save ·
``q3`` how often to checkpoint (Young's formula) · ``q4`` read a utilisation trace: is the GPU
waiting for the host?

``q1`` interrupts training runs of its own (dropout, NumPy noise, Python coin flips, a shuffle per
epoch, gradients summed over two batches per optimizer step, Adam or SGD with momentum, a
learning-rate schedule) after several batches, one of them between the two batches of an
optimizer step (a case the episode's helper does not cover), passes the learner's
checkpoint through bytes as a file would, restores it into fresh objects, finishes the run and
compares the weights bit for bit with a run that was never stopped; it names the part that was
not restored. ``q2`` calls the learner's save in a forked child process and kills it with SIGKILL
while it is writing, then loads what is on disk. ``q3`` and ``q4`` recompute the answer on
fixtures of their own.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import os
import random
import signal
import tempfile
import time
import warnings
from pathlib import Path
from stat import S_ISDIR

import numpy as np
import torch
from torch import nn

from ..exercises import Exercise, NotDone, Wrong, as_number, describe, require_function, solution_link
from .. import exercises as _exercises
from ..exercises import call_answer as _call
from ..monitor import training_window

NOTEBOOK = "11-runs-that-survive.ipynb"


# --- q1: what a checkpoint must hold --------------------------------------------------------

_Q1_FIXTURES = [  # (optimizer, scheduler, epochs, batches per epoch, interrupt after global batch)
    ("adam", "step", 3, 6, 8),
    ("sgd", "cosine", 3, 5, 10),      # at the end of an epoch
    ("adam", "cosine", 2, 7, 3),      # between the two batches of one optimizer step: gradients pending
    ("sgd", "step", 2, 5, 7),         # the same with momentum
]
ACCUMULATE = 2   # batches whose gradients are summed before each optimizer step


def _q1_objects(opt_kind: str, sched_kind: str, total_steps: int):
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
    if opt_kind == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=5e-2, momentum=0.9)
    if sched_kind == "step":
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    else:
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
    return model, optimizer, scheduler


def _q1_run(fixture, *, stop_after=None, resume=None, capture=None, restore=None):
    """One run of a fixture; returns the checkpoint bytes (stopped) or the final weights."""
    opt_kind, sched_kind, epochs, per_epoch, _ = fixture
    batch = 8
    data_gen = torch.Generator().manual_seed(7)
    X = torch.randn(per_epoch * batch, 6, generator=data_gen)
    y = X[:, :2].sum(1, keepdim=True)
    random.seed(1)                       # what a fresh process does first
    np.random.seed(1)
    torch.manual_seed(1)
    model, optimizer, scheduler = _q1_objects(opt_kind, sched_kind, epochs * per_epoch)
    model.train()
    epoch, step = 0, 0
    report = {}
    if resume is not None:
        ckpt = torch.load(io.BytesIO(resume), weights_only=False)
        where = _call(restore, ckpt, model, optimizer, scheduler, what="restore(ckpt, model, optimizer, scheduler)",
                      none_ok=True)
        report = {"returned": where, "model": _flat(model.state_dict()), "grads": _grads(model),
                  "optimizer": _flat(optimizer.state_dict()["state"]), "scheduler": scheduler.state_dict(),
                  "torch": torch.get_rng_state(), "numpy": np.random.get_state()[1].copy(),
                  "python": random.getstate()}
        epoch, step = _position(where)
    while epoch < epochs:
        order = torch.randperm(per_epoch * batch, generator=torch.Generator().manual_seed(100 + epoch))
        while step < per_epoch:
            idx = order[step * batch:(step + 1) * batch]
            xb = X[idx] + torch.from_numpy(np.random.normal(0, 0.05, (batch, 6))).float()   # NumPy's generator
            if random.random() < 0.5:                                                     # Python's
                xb = -xb
            loss = ((model(xb) - y[idx]) ** 2).mean() / ACCUMULATE                        # dropout: torch's
            loss.backward()                                                               # adds to .grad
            step += 1
            if (epoch * per_epoch + step) % ACCUMULATE == 0:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if stop_after is not None and epoch * per_epoch + step == stop_after:
                state = {"model": _flat(model.state_dict()), "grads": _grads(model), "optimizer": _flat(optimizer.state_dict()["state"]),
                         "scheduler": scheduler.state_dict(), "torch": torch.get_rng_state(),
                         "numpy": np.random.get_state()[1].copy(), "python": random.getstate(),
                         "position": (epoch, step)}
                ckpt = _call(capture, model, optimizer, scheduler, epoch, step,
                             what=f"capture(model, optimizer, scheduler, {epoch}, {step})")
                if not isinstance(ckpt, dict):
                    raise Wrong(f"capture(...) should return a dict (what torch.save writes); got {describe(ckpt)}.")
                buffer = io.BytesIO()
                try:
                    torch.save(ckpt, buffer)                   # as a file would: no live objects survive
                except Exception as exc:
                    raise Wrong(f"torch.save could not write what capture returned ({type(exc).__name__}: "
                                f"{exc}). Keep tensors, numbers, lists, tuples and dicts in it.") from None
                return buffer.getvalue(), state
        epoch, step = epoch + 1, 0
    return _flat(model.state_dict()), report


def _flat(tree) -> list:
    """Every tensor in a (nested) state dict, in order, as float64 copies."""
    out = []
    if isinstance(tree, dict):
        for key in sorted(tree, key=str):
            out += _flat(tree[key])
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            out += _flat(v)
    elif isinstance(tree, torch.Tensor):
        out.append(tree.detach().clone())
    return out


def _grads(model) -> list:
    """Each parameter's accumulated gradient (None where there is none yet), as copies."""
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def _same_grads(a: list, b: list) -> bool:
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None and x.shape == y.shape
                                                                  and torch.equal(x, y)) for x, y in zip(a, b))


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _position(where):
    if where is None:
        raise Wrong("restore(...) returned None: return (epoch, step), where to continue, so that the "
                    "loop skips what it already trained on.")
    if not isinstance(where, (tuple, list)) or len(where) != 2:
        raise Wrong(f"restore(...) should return the pair (epoch, step); got {describe(where)}.")
    epoch, step = (as_number("the epoch restore returns", where[0]), as_number("the step restore returns", where[1]))
    if epoch != int(epoch) or step != int(step):
        raise Wrong(f"restore(...) returned ({epoch:g}, {step:g}); the epoch and step are whole numbers.")
    return int(epoch), int(step)


def _q1_diagnose(fixture, state, report):
    """Name the first part of the state that restore did not bring back."""
    _, _, _, per_epoch, stop = fixture
    epoch, step = state["position"]
    got = _position(report["returned"])
    if got != (epoch, step):
        if got == (epoch, 0):
            raise Wrong(f"after {stop} steps restore returned {got}: the run would start epoch {epoch} again from "
                        f"its first batch and train twice on what it already saw. Save the step within the "
                        f"epoch too: ({epoch}, {step}).")
        if got == (0, stop):
            raise Wrong(f"restore returned {got}: that is the step counted from the start of training with the "
                        f"epoch lost. Keep the epoch and the step within it: ({epoch}, {step}).")
        if got == (epoch + 1, 0) and step != per_epoch:
            raise Wrong(f"restore returned {got}, skipping the rest of epoch {epoch}; it should be "
                        f"({epoch}, {step}).")
        raise Wrong(f"after {stop} steps (epoch {epoch}, step {step} of it) restore returned {got}, "
                    f"not ({epoch}, {step}).")
    if not _same(report["model"], state["model"]):
        raise Wrong("after restore the model's weights are not the ones saved: keep model.state_dict() and "
                    "load it with model.load_state_dict().")
    if not _same_grads(report["grads"], state["grads"]):
        raise Wrong(f"stopped after batch {stop}, between the {ACCUMULATE} batches whose gradients this loop adds up "
                    "before each optimizer step, the resumed run has lost the gradients of the batches already done "
                    "(a fresh model has none): the next optimizer step would use only part of its batches. Keep each "
                    "parameter's .grad and give it back, None where it is None.")
    if not _same(report["optimizer"], state["optimizer"]):
        raise Wrong("after restore the optimizer starts from scratch: its state (SGD's momentum buffers, "
                    "Adam's moment estimates and step counts) was not saved or not loaded. Keep "
                    "optimizer.state_dict() and load it with optimizer.load_state_dict().")
    if report["scheduler"] != state["scheduler"]:
        raise Wrong(f"after restore the learning-rate scheduler is at step {report['scheduler'].get('last_epoch')}, "
                    f"not {state['scheduler'].get('last_epoch')}: the rate would start its schedule again. Keep "
                    "scheduler.state_dict() and load it.")
    if not torch.equal(report["torch"], state["torch"]):
        raise Wrong("after restore torch's random generator is not where it was: the next dropout masks differ. "
                    "Keep torch.get_rng_state() and put it back with torch.set_rng_state() — last, after "
                    "anything that draws random numbers (with a GPU: torch.cuda.get_rng_state_all() as well).")
    if not np.array_equal(report["numpy"], state["numpy"]):
        raise Wrong("after restore NumPy's global generator is not where it was: the noise added to the next "
                    "batch differs. Keep np.random.get_state() and put it back with np.random.set_state().")
    if report["python"] != state["python"]:
        raise Wrong("after restore Python's random module is not where it was: the next coin flips differ. "
                    "Keep random.getstate() and put it back with random.setstate().")


def _check_resume(capture, restore):
    require_function(capture, "capture")
    require_function(restore, "restore")
    for fixture in _Q1_FIXTURES:
        straight, _ = _q1_run(fixture)
        saved, state = _q1_run(fixture, stop_after=fixture[-1], capture=capture, restore=restore)
        resumed, report = _q1_run(fixture, resume=saved, capture=capture, restore=restore)
        _q1_diagnose(fixture, state, report)
        if not _same(resumed, straight):
            raise Wrong(f"with {fixture[0]} and a {fixture[1]} schedule, stopped after batch {fixture[-1]}, the resumed "
                        "run ends with different weights from the one that never stopped, although every part "
                        "checked was restored: does restore draw random numbers after putting the generators back?")
    return ("the resumed runs end with exactly the same weights as runs never stopped, on four set-ups "
            "(Adam and SGD with momentum, two schedules, stopped mid-epoch, at an epoch's end and between the "
            "batches of one optimizer step, with their gradients pending).")


q1 = Exercise("ep11.q1", _check_resume,
              hint=("Reading the loop line by line, which things change from one batch to the next, counting the "
                    "generators that only draw random numbers?",
                    "Keep the state of each: the model, optimizer and scheduler each have one, each of the three "
                    "random generators can report its own, and the gradients summed since the last optimizer step "
                    "live on the parameters. Restore loads each back into the fresh objects, the generators last, "
                    "and hands back where the loop continues."),
              solution=solution_link(NOTEBOOK))


# --- q2: an atomic save ---------------------------------------------------------------------

class _Pause:
    """Pickled in the middle of a save: tells the parent and waits to be killed."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        os.write(self.fd, b"x")
        time.sleep(30)
        return (int, (0,))


_SAVES = 3          # saves in a row: the first into an empty folder, the others over a checkpoint
_SYNCS = ("fsync", "fdatasync")   # fdatasync flushes a new file's data and size too (Linux)
_FILE_OPS = tuple(name for name in _SYNCS if hasattr(os, name)) + ("replace", "rename", "unlink", "remove")


def _identity(stat) -> tuple:
    return stat.st_dev, stat.st_ino


def _file_identity(path):
    try:
        return _identity(os.stat(path))
    except (OSError, TypeError, ValueError):
        return None


@contextlib.contextmanager
def _recording():
    """Record the file operations of a save, in order (and make them).

    Each event is ``(name, args, target)``: for ``fsync`` the file or folder synced, for a rename
    the file renamed, as (device, inode), so that a sync can be matched with the rename it protects.
    """
    events = []
    real = {name: getattr(os, name) for name in _FILE_OPS}

    def wrap(name):
        def call(*args, **kwargs):
            if name in _SYNCS:
                try:
                    stat = os.fstat(args[0] if isinstance(args[0], int) else args[0].fileno())
                    target = (_identity(stat), "folder" if S_ISDIR(stat.st_mode) else "file")
                except (OSError, AttributeError, IndexError):
                    target = None
            else:
                target = _file_identity(args[0]) if args else None
            events.append((name, args, target))
            return real[name](*args, **kwargs)
        return call

    for name in real:
        setattr(os, name, wrap(name))
    try:
        yield events
    finally:
        for name, fn in real.items():
            setattr(os, name, fn)


def _same_file(a, b) -> bool:
    try:
        return os.path.abspath(os.fspath(a)) == os.path.abspath(os.fspath(b))
    except TypeError:
        return False


def _q2_state(number: int) -> dict:
    return {"weights": torch.arange(50_000, dtype=torch.float32) * number, "step": 100 * number}


def _holds(path: Path, state: dict) -> bool:
    try:
        back = torch.load(path, weights_only=True)
    except Exception:
        return False
    return isinstance(back, dict) and back.get("step") == state["step"] and \
        torch.equal(back.get("weights", torch.empty(0)), state["weights"])


def _check_atomic(save_checkpoint):
    require_function(save_checkpoint, "save_checkpoint")
    with tempfile.TemporaryDirectory(prefix="ep11-q2-") as folder:
        path = Path(folder) / "checkpoint.pt"
        operations = 0
        for number in range(1, _SAVES + 1):                 # a later save may differ from the first
            which = "the first save" if number == 1 else f"save number {number} (over a checkpoint)"
            state = _q2_state(number)
            with _recording() as events:
                _call(save_checkpoint, state, path, what="save_checkpoint(state, path)", none_ok=True)
            if not path.exists():
                raise Wrong(f"after {which}, save_checkpoint(state, path) left no file at path; found "
                            f"{sorted(p.name for p in Path(folder).iterdir()) or 'nothing'} in the folder.")
            try:
                torch.load(path, weights_only=True)
            except Exception as exc:
                raise Wrong(f"torch.load cannot read what save_checkpoint wrote ({type(exc).__name__}): write it "
                            "with torch.save(state, temporary_path).") from None
            if not _holds(path, state):
                raise Wrong(f"after {which} the file at path does not hold the state save_checkpoint was given.")
            _q2_events(events, path, which)
            left = sorted(p.name for p in Path(folder).iterdir() if p.name != path.name)
            if left:
                raise Wrong(f"after {which}, which went well, the folder still holds {left}: rename the "
                            "temporary file onto path, do not copy it.")
            operations = [_describe_operation(name, args, path) for name, args, _ in events]
        kept = _q2_kill_at_every_step(save_checkpoint, path, _q2_state(_SAVES), operations)
        _q2_kill(save_checkpoint, path, kept)
    return (f"killed before each of its {len(operations)} file operations and in the middle of writing, over "
            f"{_SAVES} saves in a row, your save left a whole checkpoint every time: a temporary file in the "
            "same folder, flushed to disk, then renamed over the old one.")


def _q2_events(events, path, which: str):
    renames = [e for e in events if e[0] in ("replace", "rename") and len(e[1]) >= 2]
    into = [e for e in renames if _same_file(e[1][1], path)]
    if not into:
        raise Wrong(f"in {which}, save_checkpoint never renames a file onto path (os.replace(tmp, path) or "
                    "Path(tmp).replace(path)). Writing path directly, or copying onto it, means a kill "
                    "mid-write leaves half a file; only a rename swaps the old file for the new one in one step.")
    rename = into[-1]
    src = rename[1][0]
    if not _same_file(os.path.dirname(os.path.abspath(os.fspath(src))), path.parent):
        raise Wrong(f"the temporary file {src} is not in the checkpoint's folder. A rename is atomic only "
                    "within one file system; across two it fails (or becomes a copy). Put the temporary next "
                    "to path, e.g. path.with_name(path.name + '.tmp').")
    before = events[:events.index(rename)]
    if any(name in ("unlink", "remove") and args and _same_file(args[0], path) for name, args, _ in before):
        raise Wrong(f"{which} deletes the old checkpoint before the new one is in place: a kill between "
                    "the two leaves no checkpoint at all. os.replace(tmp, path) replaces the old file in one "
                    "step, whether or not it exists; do not remove it first.")
    synced = [target for name, _, target in before if name in _SYNCS]
    if rename[2] is not None and any(t is not None and t[0] == rename[2] for t in synced):
        return
    if rename[2] is None and synced:
        return                           # the renamed file could not be identified: trust the sync
    if any(t is not None and t[1] == "folder" for t in synced):
        raise Wrong(f"in {which} you fsync the folder but not the temporary file before renaming it: the "
                    "folder's sync makes the rename last, not the data. After a power cut the new name can "
                    "point at an empty or partial file. Call f.flush() and os.fsync(f.fileno()) on the "
                    "temporary file itself before the rename (a folder sync after it is a good extra).")
    if synced:
        raise Wrong(f"in {which} you fsync a file, but not the temporary file you rename onto path: after a "
                    "power cut its data may not be on the disk. Call f.flush() and os.fsync(f.fileno()) on "
                    "the temporary file itself before renaming it.")
    raise Wrong("nothing is fsync-ed before the rename: after a crash or power cut the rename can reach the "
                "disk before the data, leaving an empty or partial file under the final name. Call "
                "f.flush() and os.fsync(f.fileno()) on the temporary file before renaming it.")


def _killed_before(save_checkpoint, path: Path, state: dict, step: int) -> None:
    """Run the save in a forked child that kills itself just before its file operation number ``step``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)     # "process is multi-threaded, fork() may ..."
        pid = os.fork()
    if pid == 0:                                                  # the child
        try:
            count = [0]

            def wrap(fn):
                def call(*args, **kwargs):
                    if count[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    count[0] += 1
                    return fn(*args, **kwargs)
                return call

            for name in _FILE_OPS:
                setattr(os, name, wrap(getattr(os, name)))
            save_checkpoint(state, path)
        finally:
            os._exit(0)
    # The same save ran to the end in this process (under its deadline) before; a child that does not end
    # now waits for something a killed save left behind. Its deadline is the one every answer has.
    deadline = time.monotonic() + _exercises.DEADLINE_S
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            left = sorted(p.name for p in path.parent.iterdir() if p != path)
            raise Wrong(f"save_checkpoint(state, path), run again after a save killed just before its file "
                        f"operation {step + 1}, did not return within {_exercises.DEADLINE_S:g} s. The folder held "
                        f"{left or 'no other file'}: does your save wait for (or loop on) a file that a killed save "
                        "leaves behind, such as its temporary or a lock? A kill can come at any moment, so a save "
                        "must not depend on what an earlier one left: write your own temporary and replace it.")
        time.sleep(0.01)


def _describe_operation(name: str, args: tuple, path: Path) -> str:
    def show(arg):
        if isinstance(arg, int):
            return "a file descriptor"
        try:
            return "path" if _same_file(arg, path) else os.path.basename(os.fspath(arg))
        except TypeError:
            return type(arg).__name__
    return f"os.{name}({', '.join(show(a) for a in args[:2])})"


def _q2_kill_at_every_step(save_checkpoint, path: Path, old: dict, operations: list) -> dict:
    """Kill a save just before each of its file ``operations`` in turn; return the checkpoint now at path."""
    if not hasattr(os, "fork"):
        return old                       # _q2_kill says why this system cannot run the kills
    new = _q2_state(_SAVES + 1)
    for step, operation in enumerate(operations):
        _killed_before(save_checkpoint, path, new, step)
        if _holds(path, new):
            old = new                    # the new checkpoint is in place: it is the one to keep now
            continue
        if not path.exists():
            raise Wrong(f"killed just before {operation} (file operation {step + 1} of {len(operations)}), "
                        "your save_checkpoint left no checkpoint at all: the old one was gone before the new one "
                        "was in place. os.replace(tmp, path) swaps them in one step.")
        if not _holds(path, old):
            raise Wrong(f"killed just before {operation} (file operation {step + 1} of {len(operations)}), "
                        "your save_checkpoint left a file at path that is neither the previous checkpoint nor "
                        "the new one.")
    for leftover in path.parent.iterdir():         # temporaries of the killed saves: not the next test's business
        if leftover != path and leftover.is_file():
            leftover.unlink()
    return old


def _q2_kill(save_checkpoint, path: Path, old: dict) -> None:
    if not hasattr(os, "fork"):
        raise NotDone("this check kills a save with SIGKILL in a forked process, which this system (Windows) "
                      "cannot do; run it on Linux, macOS or Colab.")
    new = {"weights": torch.zeros(50_000), "step": -1, "pause": None}
    read_fd, write_fd = os.pipe()
    new["pause"] = _Pause(write_fd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)     # "process is multi-threaded, fork() may ..."
        pid = os.fork()
    if pid == 0:                                                  # the child: save, and wait to be killed
        try:
            os.close(read_fd)
            save_checkpoint(new, path)
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        import select

        ready, _, _ = select.select([read_fd], [], [], 20)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_fd)
    if not ready:
        raise Wrong("save_checkpoint(state, path) in a child process never started writing the state with "
                    "torch.save (the check waited 20 s): save the dict you are given with torch.save.")
    if not path.exists():
        raise Wrong("killed mid-save, your save_checkpoint left no checkpoint at all: the old one was gone "
                    "before the new one was complete.")
    try:
        back = torch.load(path, weights_only=False)
    except Exception as exc:
        raise Wrong(f"killed mid-save, your save_checkpoint left a half-written file at path: torch.load fails "
                    f"({type(exc).__name__}). Write to a temporary file first and rename it onto path when it is "
                    "complete.") from None
    if not (isinstance(back, dict) and back.get("step") == old["step"]):
        raise Wrong("killed mid-save, the file at path is not the previous checkpoint.")


q2 = Exercise("ep11.q2", _check_atomic,
              hint=("A kill can come between any two lines. Which single file operation swaps an old file for a new one, "
                    "so that a reader sees one or the other, never half?",
                    "Write the whole state to a temporary file in the same folder, flush it and force it to the disk, "
                    "and only then rename it over the checkpoint. Never delete or overwrite the old file first."),
              solution=solution_link(NOTEBOOK))


# --- q3: how often to checkpoint --------------------------------------------------------------

# (seconds per step, seconds per save, interruptions per day)
_Q3_CASES = [(0.5, 20.0, 2.0), (0.05, 2.0, 24.0), (2.0, 120.0, 0.5), (1.0, 0.1, 1000.0), (10.0, 1.0, 1e4),
             (0.25, 8.0, 3.0)]


def _young_steps(step_s, save_s, per_day):
    mtbi = 86_400 / per_day
    return max(1, round(math.sqrt(2 * save_s * mtbi) / step_s))


def _check_interval(fn):
    require_function(fn, "checkpoint_every")
    for step_s, save_s, per_day in _Q3_CASES:
        what = f"checkpoint_every({step_s}, {save_s}, {per_day})"
        got = as_number(what, _call(fn, step_s, save_s, per_day, what=what))
        want = _young_steps(step_s, save_s, per_day)
        if got == want or (got == int(got) and got >= 1 and abs(got - want) <= max(1, 0.01 * want)):
            continue
        mtbi = 86_400 / per_day
        alternatives = {
            "sqrt(save × MTBI) without the 2": math.sqrt(save_s * mtbi) / step_s,
            "MTBI in hours": math.sqrt(2 * save_s * mtbi / 3600) / step_s,
            "MTBI in days (the rate's own unit)": math.sqrt(2 * save_s / per_day) / step_s,
            "the interruption rate used as if it were the time between interruptions": math.sqrt(2 * save_s * per_day) / step_s,
            "seconds, not steps": math.sqrt(2 * save_s * mtbi),
            "2 × save × MTBI without the square root": 2 * save_s * mtbi / step_s,
        }
        for mistake, value in alternatives.items():
            if math.isclose(got, value, rel_tol=0.02) or (value >= 0.5 and abs(got - round(value)) <= 1
                                                          and abs(round(value) - want) > 1):
                raise Wrong(f"{what} is {got:g}: {mistake}. Young's interval is √(2 × save time × mean time between "
                            f"interruptions), with the mean time in seconds (86 400 / interruptions per day), "
                            f"then divided by the step time: {want} steps.")
        if got != int(got):
            raise Wrong(f"{what} is {got:g}; return a whole number of steps (round it).")
        if got < 1:
            raise Wrong(f"{what} is {got:g}: at least one step must pass between checkpoints (use max(1, ...)).")
        raise Wrong(f"{what} is {got:g}, expected {want} steps: √(2 × {save_s:g} s × {mtbi:g} s) / {step_s:g} s.")
    return ("Young's first-order interval √(2δM): save less often when saving is slow or interruptions rare, "
            "more often when they are frequent. Daly (2006) adds higher-order terms that matter when δ is not small against M.")


q3 = Exercise("ep11.q3", _check_interval,
              hint=("What is the mean time between interruptions in seconds, when there are interruptions_per_day of them "
                    "a day?",
                    "Put the save time and that mean time into Young's formula from the episode's section 3, which gives "
                    "seconds between saves; divide by the step time and round to a whole number of steps, at "
                    "least one."),
              solution=solution_link(NOTEBOOK))


# --- q4: is the GPU waiting for the host? ---------------------------------------------------------

def _traces():
    """Named fixtures: (trace, host-bound?, what a wrong verdict on it means)."""
    rng = np.random.default_rng(9)

    def noisy(level, n, spread=3):
        return np.clip(level + rng.normal(0, spread, n), 1, 100)

    idle = np.zeros
    saw = np.tile([100, 100, 100, 100, 0, 0, 0], 20).astype(float)        # median 100, mean 57
    dips = noisy(96, 120)
    dips[::30] = 0
    dips[1::30] = 0
    return [
        ("fed, with idle seconds before the first step and after the last",
         np.concatenate([idle(40), noisy(95, 80), idle(30)]), False,
         "the run was busy about 95 % of the time while it trained; the idle samples before the first step and "
         "after the last are not training. Look only from the first busy sample to the last"),
        ("starved: busy in bursts, idle while it waits for each batch",
         saw, True, "most samples read 100 %, but the median and the maximum hide the waits. Use the mean over "
                    "the training window"),
        ("starved at a steady 45 %", np.concatenate([idle(5), noisy(45, 100), idle(5)]), True,
         "busy 45 % of the time while training: the GPU waits for the host more than half the time"),
        ("fed, with short dips for checkpoints", dips, False,
         "short dips (checkpoints being saved) do not make a run host-bound: its mean is above 80 %. "
         "Do not judge by the lowest sample"),
        ("starved at 70 %", noisy(70, 100), True,
         "70 % is below the 80 % line: the GPU waits 30 % of the time"),
        ("fed at 88 %, starting at once", np.concatenate([noisy(88, 60), idle(3)]), False,
         "88 % is above the 80 % line"),
        # the three below tell the rules of _Q4_RULES apart: the median from the mean of the busy samples
        # and from the maximum, and a line at 0.8 from a function that always answers False
        ("starved: fully busy most of the time, at 20 % while it waits", np.tile([100.0] * 4 + [20.0] * 3, 15),
         True, "more than half the samples read 100 %, but the mean over training is 66 %. Use the mean"),
        ("starved at 60 %, with a few peaks at 100 %",
         np.concatenate([noisy(60, 50), [100.0, 100.0], noisy(60, 50)]), True,
         "a few peaks at 100 % do not feed a run that is busy 60 % of the time: use the mean"),
        ("starved almost completely: a short burst every 15 s", np.concatenate([np.tile([60.0] + [0.0] * 149, 4),
                                                                              [60.0]]), True,
         "the device waited nearly all the time between the first and the last burst"),
        # the two boundaries the prompt states, each with a trace on it: busy exactly 80 % ("less than 80 %"
        # is a strict <), and an idle device that reads exactly 5 % ("the first sample above 5 %")
        ("busy exactly 80 % of the training time", np.tile([100.0, 0.0, 100.0, 100.0, 100.0], 20), False,
         "a run busy exactly 80 % of its training time is not busy LESS than 80 %: the line itself is fed, so the "
         "comparison is a strict <"),
        ("fed at 84 %, the idle device reading 5 % before and after", np.concatenate([[5.0] * 30, [84.0] * 60,
                                                                                      [5.0] * 30]), False,
         "samples at 5 % are idle, not training: training starts at the first sample ABOVE 5 % and ends at the "
         "last one"),
    ]


def _window(trace):
    """The training window: the rule Monitor.training_mean_util applies in episode 11."""
    return np.asarray(trace, dtype=float)[training_window(list(trace))]


def _window_from(trace, busy):
    """The samples from the first one that ``busy`` accepts to the last: a window with another edge."""
    marks = [i for i, u in enumerate(trace) if busy(u)]
    return np.asarray(trace, dtype=float)[marks[0]: marks[-1] + 1]


#: Rules a learner may have written instead of "mean over the training window < 80", each with what it
#: gets wrong. The check computes every rule's verdicts on all traces and names the rule whose verdicts
#: are the learner's on every trace, rather than describing the first trace it got wrong.
_Q4_RULES = {
    "your verdicts are backwards: host_bound must be True when the device was busy less than 80 % of the "
    "training time (it waited for the host), False when it was busy more. Flip the comparison.":
        lambda t: not float(np.mean(_window(t))) < 80,
    "your verdicts are backwards: host_bound must be True when the device was busy less than 80 % of the "
    "training time (it waited for the host), False when it was busy 80 % or more. Use mean < 80.":
        lambda t: float(np.mean(_window(t))) > 80,
    "your line seems to be 0.8 (or the mean divided by 100): the samples are percent, from 0 to 100, so "
    "the line is 80, not 0.8.": lambda t: float(np.mean(_window(t))) < 0.8,
    "you averaged the whole trace, idle samples before the first step and after the last included; "
    "average only from the first busy sample (above 5 %) to the last.": lambda t: float(np.mean(t)) < 80,
    "you averaged only the samples above 5 %, which drops the waits inside training that make a run "
    "host-bound; average every sample from the first busy one to the last.":
        lambda t: float(np.mean(np.asarray(t)[np.asarray(t) > 5])) < 80,
    "you compared the median with 80 %: most samples of a run busy in bursts read 100 %, so the median "
    "hides the waits. Use the mean over the training window.":
        lambda t: float(np.median(_window(t))) < 80,
    "you compared the lowest sample with 80 %: a short dip (a checkpoint being saved) does not make a run "
    "host-bound. Use the mean over the training window.": lambda t: float(np.min(_window(t))) < 80,
    "you compared the highest sample with 80 %: the maximum hides the waits. Use the mean over the "
    "training window.": lambda t: float(np.max(t)) < 80,
    "a run busy exactly 80 % of its training time is not busy LESS than 80 %: it is fed. Use a strict "
    "< 80, not <= 80.": lambda t: float(np.mean(_window(t))) <= 80,
    "your training window starts at a sample of exactly 5 %: training starts at the first sample ABOVE "
    "5 % (an idle device can read 5 %). Use > 5, not >= 5.":
        lambda t: float(np.mean(_window_from(t, lambda u: u >= 5))) < 80,
}


def _check_trace(fn):
    require_function(fn, "host_bound")
    traces, verdicts = _traces(), []
    for name, trace, truth, why in traces:
        what = f"host_bound(<{name}>)"
        got = _call(fn, list(trace), what=what)
        if isinstance(got, (np.bool_,)):
            got = bool(got)
        if not isinstance(got, bool):
            raise Wrong(f"{what} returned {describe(got)}; return True (host-bound: the GPU waited) or False.")
        verdicts.append(got)
    if verdicts == [truth for _, _, truth, _ in traces]:
        return (f"you read {len(traces)} traces right: the mean utilisation from the first busy sample to the last, "
                "against the 80 % line, ignoring the idle start and end.")
    for rule, verdict_of in _Q4_RULES.items():
        if all(verdict_of(trace) == got for (_, trace, _, _), got in zip(traces, verdicts)):
            wrong = sum(got != truth for (_, _, truth, _), got in zip(traces, verdicts))
            raise Wrong(f"{rule} (Your verdicts are that rule's on all {len(traces)} traces, and wrong on "
                        f"{wrong}.)")
    if len(set(verdicts)) == 1:
        starved = sum(truth for _, _, truth, _ in traces)
        raise Wrong(f"host_bound returned {verdicts[0]} for every one of the {len(traces)} traces, but "
                    f"{starved} of them are starved runs (host-bound) and {len(traces) - starved} fed ones: "
                    "compute the mean utilisation from the first busy sample to the last and compare it "
                    "with the 80 % line.")
    name, trace, truth, why = next(t for t, got in zip(traces, verdicts) if got != t[2])
    mean = float(np.mean(_window(trace)))
    verdict = "fed" if truth else "host-bound"
    raise Wrong(f"you called the trace '{name}' {verdict}: {why} (busy {mean:.0f} % of the time while "
                "training; the line is 80 %).")


q4 = Exercise("ep11.q4", _check_trace,
              hint=("Which samples belong to the training itself, and which single number says what share of that time "
                    "the device was busy: the mean, the median or the smallest sample?",
                    "Keep the samples from the first one above 5 % to the last one above 5 %, average them, and compare "
                    "the average with the 80 % line: below it, the GPU waits for the host."),
              solution=solution_link(NOTEBOOK))
