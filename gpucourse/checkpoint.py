"""Checkpoints that let a training run continue exactly where it stopped (episode 11).

A run continues *exactly* (the same weights, bit for bit, as a run that never stopped)
only if the checkpoint holds everything the next step depends on:

* the model's weights, and the optimizer's state (momentum, Adam's moment estimates);
* the GradScaler's scale (mixed precision) and the learning-rate scheduler's position;
* where the run was: the epoch, which is also the sampler's epoch (its shuffle), and the
  step within it;
* every random number generator the step draws from: Python's ``random``, NumPy's global
  generator, torch's CPU generator (dropout, ``randn``) and every CUDA generator.

The data order is not stored: :class:`EpochSampler` derives it from ``(seed, epoch)``, as
``DistributedSampler.set_epoch`` does, and the DataLoader's own generator, which seeds its
worker processes, is re-seeded the same way (:func:`loader_generator`).

``save`` writes with :func:`gpucourse.atomic.save_atomic` (a temporary file, then a rename),
so a run killed while saving leaves the previous checkpoint, never half of a new one. ``load``
maps every tensor to the device this run has (a checkpoint from a GPU loads on a laptop) and
uses ``weights_only=True``: loading a file runs no code from it.

Both say what went wrong in words a learner can act on (:mod:`gpucourse.checkpoint_faults`):
a save on a full disk names the sizes and that the previous checkpoint is intact; a file
that is empty, cut short or not a checkpoint at all is named with its size and the likely
cause. Episode 11 shows ``capture``, ``restore``, ``save`` and ``load`` as cells that define
them (tests/test_survive.py keeps the two equal).

A run that saves ``checkpoint-{step}.pt`` (:func:`numbered`) and keeps the last two
(:func:`prune`) resumes from the newest that loads (:func:`load_latest`): where the last may
arrive incomplete (Google Drive uploads in the background), the one before it is still there.
:func:`save_in_background` stops training only for a copy of the state to the CPU.
"""

from __future__ import annotations

import os
import random
import re
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Sampler

from .atomic import remove_stale_temporaries, save_atomic
from .checkpoint_faults import UnreadableCheckpoint, disk_full, load_error, not_a_checkpoint

__all__ = ["EpochSampler", "capture", "restore", "rng_state", "set_rng_state", "save", "load",
           "loader_generator", "where_to_keep", "UnreadableCheckpoint", "explained_save_errors",
           "explained_load_errors", "checked", "numbered", "saved_checkpoints", "prune",
           "load_latest", "cpu_copy", "state_bytes", "save_in_background"]


# --- random number generators ---------------------------------------------------------------

def rng_state() -> dict:
    """The state of every random number generator a training step may draw from."""
    np_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        # NumPy's state as plain numbers and a tensor, so that weights_only loading accepts it
        "numpy": {"bit_generator": np_state["bit_generator"], "pos": int(np_state["state"]["pos"]),
                  "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
                  "has_gauss": int(np_state["has_gauss"]), "gauss": float(np_state["gauss"])},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    """Put every generator back to ``state`` (from :func:`rng_state`)."""
    random.setstate(_as_tuple(state["python"]))
    n = state["numpy"]
    np.random.set_state({"bit_generator": n["bit_generator"],
                         "state": {"key": n["key"].cpu().numpy().astype(np.uint32), "pos": n["pos"]},
                         "has_gauss": n["has_gauss"], "gauss": n["gauss"]})
    torch.set_rng_state(state["torch"].cpu())
    cuda = state["cuda"]
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
        else:
            print(f"(the checkpoint has {len(cuda)} CUDA generator states and this machine "
                  f"{torch.cuda.device_count()} GPUs: the CUDA generators start afresh)")
    elif cuda:
        print("(the checkpoint was written on a GPU; on this CPU its CUDA generator states are unused)")


def _as_tuple(value):
    """``random.setstate`` wants tuples; a checkpoint may hand back lists."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


# --- the data order -------------------------------------------------------------------------

class EpochSampler(Sampler):
    """A new shuffle each epoch, derived from ``(seed, epoch)``, that can start mid-epoch.

    Like ``DistributedSampler.set_epoch``: the order of epoch ``e`` is the same in every run
    and every process, so a checkpoint needs only the epoch and the position in it.
    """

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed, self.epoch, self.start = n, seed, 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Shuffle for ``epoch`` and skip its first ``start`` samples (already trained on)."""
        self.epoch, self.start = epoch, start

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g)[self.start:].tolist())

    def __len__(self) -> int:
        return self.n - self.start


def loader_generator(generator: torch.Generator, seed: int, epoch: int) -> torch.Generator:
    """Re-seed the DataLoader's own generator for ``epoch``; return it.

    Each new DataLoader iterator (even with ``num_workers=0``) draws a seed for its worker
    processes from the generator it was given, or else from torch's global CPU generator, the one
    CPU dropout, augmentations and samplers draw from. Given its own generator, it leaves that
    one alone, and the workers' seeds follow from ``(seed, epoch)``.
    """
    return generator.manual_seed(seed * 1_000_003 + epoch + 1)


# --- capture and restore --------------------------------------------------------------------

def capture(model, optimizer, scaler, scheduler, epoch: int, step: int) -> dict:
    """Everything needed to continue exactly after ``step`` batches of ``epoch``."""
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(), "scheduler": scheduler.state_dict(),
            "epoch": epoch, "step": step,     # the sampler's epoch, and the place in it
            "rng": rng_state()}


def restore(ckpt: dict, model, optimizer, scaler, scheduler) -> tuple[int, int]:
    """Load ``ckpt`` into fresh objects; return ``(epoch, step)`` to continue from."""
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])   # state goes to the model's device
    scaler.load_state_dict(ckpt["scaler"])
    scheduler.load_state_dict(ckpt["scheduler"])
    set_rng_state(ckpt["rng"])                     # last: nothing may draw after this
    return ckpt["epoch"], ckpt["step"]


def save(ckpt: dict, path) -> Path:
    """Write ``ckpt`` to ``path`` atomically: the old file stays until the new is whole.

    On a full disk the error says so, with the sizes, and that the old file is intact.
    """
    path = Path(path)
    with explained_save_errors(path, ckpt):   # a full disk: say so, and the sizes
        save_atomic(lambda tmp: torch.save(ckpt, tmp), path)
    return path


def load(path) -> dict:
    """Read a checkpoint into CPU memory, running no code from it.

    ``restore`` then copies each part to the device its object lives on, whatever device
    this run has. (Mapped straight to a GPU, Adam's step counts would land there too,
    where PyTorch expects them on the CPU, and every optimizer step would wait to read
    them back.)
    """
    path = Path(path)
    with explained_load_errors(path):   # empty, cut short, not a checkpoint: say which
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    return checked(path, ckpt)          # a dict of the parts capture stores


# --- errors a learner can act on ------------------------------------------------------------

@contextmanager
def explained_save_errors(path: Path, ckpt: dict):
    """Raise :class:`CheckpointDiskFull` (sizes, the old file intact) when a save runs out of disk.

    Any other failure is raised as it is.
    """
    try:
        yield
    except (OSError, RuntimeError) as exc:
        full = disk_full(exc, path, ckpt)        # None: some other failure, raised as it is
        if full is None:
            raise
        raise full from None                     # in place of PyTorch's cryptic error


@contextmanager
def explained_load_errors(path: Path):
    """Name a file that is missing, empty, cut short or not a PyTorch file, with its size and why.

    Never PyTorch's advice to load it again with ``weights_only=False``, which would run
    code from the file.
    """
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - each cause is named in the error raised instead
        raise load_error(path, exc) from None


def checked(path: Path, ckpt) -> dict:
    """``ckpt`` if it is a checkpoint from :func:`capture`; else :class:`UnreadableCheckpoint`."""
    problem = not_a_checkpoint(path, ckpt)
    if problem:
        raise UnreadableCheckpoint(problem)
    return ckpt


# --- numbered checkpoints: keep the last few ------------------------------------------------

_NUMBERED = re.compile(r"checkpoint-(\d+)\.pt")


def numbered(folder, step: int) -> Path:
    """``folder/checkpoint-{step}.pt``: the checkpoint written after ``step`` steps."""
    return Path(folder) / f"checkpoint-{step}.pt"


def saved_checkpoints(folder) -> list[Path]:
    """The numbered checkpoints in ``folder``, oldest first (by step, not by name)."""
    found = [(int(m.group(1)), p) for p in Path(folder).glob("checkpoint-*.pt")
             if (m := _NUMBERED.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def prune(folder, keep: int = 2) -> list[Path]:
    """Remove all but the newest ``keep`` numbered checkpoints in ``folder``; return the removed.

    Keeping the one before the last matters where the last may not be whole when the machine
    goes: a synced folder (Google Drive) uploads in the background. Temporaries left by
    writers that were killed mid-save are removed too.
    """
    if keep < 1:
        raise ValueError(f"keep={keep}: keep at least the newest checkpoint (keep >= 1)")
    old = saved_checkpoints(folder)[:-keep]
    for path in old:
        path.unlink(missing_ok=True)
    for name in {t.name.split(".pt.")[0] + ".pt" for t in Path(folder).glob("checkpoint-*.pt.*")}:
        old += remove_stale_temporaries(Path(folder) / name)
    return old


def load_latest(folder, load=load) -> tuple[dict | None, Path | None]:
    """The newest numbered checkpoint in ``folder`` that loads, and its path; ``(None, None)``.

    One that cannot be read (cut short by a lost machine, say) is named and skipped, and the
    one before it is used.
    """
    for path in reversed(saved_checkpoints(folder)):
        try:
            return load(path), path
        except UnreadableCheckpoint as exc:
            print(f"(skipping {path.name}: {exc})")
    return None, None


# --- asynchronous saves ---------------------------------------------------------------------

def cpu_copy(state):
    """A copy of ``state`` (nested dicts, lists, tuples) with every tensor copied to the CPU.

    Training goes on changing its tensors in place; a background writer needs a copy that
    stays as it was. This is an asynchronous save's memory cost: one more checkpoint in RAM.
    """
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {key: cpu_copy(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(cpu_copy(value) for value in state)
    return state     # numbers, strings, None: immutable


def state_bytes(state) -> int:
    """The bytes of every tensor in ``state``: what :func:`cpu_copy` holds in memory."""
    if isinstance(state, torch.Tensor):
        return state.nbytes
    if isinstance(state, dict):
        return sum(state_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(value) for value in state)
    return 0


def save_in_background(ckpt: dict, path, save=save) -> Future:
    """Copy ``ckpt`` to the CPU now, write it to ``path`` in a background thread.

    Training stops only for the copy. Call ``.result()`` on the returned future before the
    next save (it re-raises the writer's error, e.g. a full disk), so that at most one copy
    is held at a time. ``torch.distributed.checkpoint.async_save`` does the same for
    sharded models.
    """
    snapshot = cpu_copy(ckpt)
    return _WRITER.submit(save, snapshot, path)


_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")


# --- where to keep it -----------------------------------------------------------------------

DRIVE = Path("/content/drive/MyDrive")
KAGGLE = Path("/kaggle/working")


def where_to_keep(name: str, chosen=None) -> Path:
    """A folder for checkpoints that outlives this session where the platform allows; made.

    ``chosen`` (a folder the learner picked) wins. Otherwise: Google Drive when it is mounted in
    Colab; ``/kaggle/working`` on Kaggle (kept only with the session's file persistence on, or
    as the output of a saved version); else a folder in the course's cache. A message says what
    survives where.
    """
    import sys

    from .data import cache

    if chosen is not None:
        folder, why = Path(chosen).expanduser(), "the folder you chose"
    elif "google.colab" in sys.modules and DRIVE.is_dir():
        folder = DRIVE / "gpucourse-checkpoints" / name
        why = ("Google Drive: survives the end of this Colab session. Drive uploads in the background: "
               "when you stop a run yourself, call drive.flush_and_unmount() before the runtime ends")
    elif "google.colab" in sys.modules:
        folder = cache.root() / "checkpoints" / name
        why = ("the course's cache on Colab's local disk, which is WIPED when the runtime ends. To keep "
               "checkpoints, mount Google Drive first (from google.colab import drive; "
               "drive.mount('/content/drive')) and run this cell again")
    elif os.environ.get("KAGGLE_KERNEL_RUN_TYPE") or KAGGLE.is_dir():
        folder = KAGGLE / "checkpoints" / name
        why = ("/kaggle/working: LOST when this interactive session ends unless Session options > "
               "Persistence keeps files (best effort; turn it on before the session ends). A version saved "
               "with Save & Run All re-runs the notebook from the start and keeps what that run leaves here")
    else:
        folder, why = cache.root() / "checkpoints" / name, "the course's cache folder on this machine"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"Checkpoints go to {folder} ({why}).")
    return folder
