"""A training run that can be killed at any moment and resumed exactly (episode 11).

Run it as a script, as one would on a cluster::

    python -m gpucourse.children.survive_train --out FOLDER [--epochs 3 --every 10 ...]

It trains a small MLP with dropout, AdamW, a cosine learning-rate schedule and (on a GPU)
mixed precision, writes ``FOLDER/checkpoint-{step}.pt`` every ``--every`` steps (keeping the
last ``--keep``, 2 by default), and at the end the weights to ``FOLDER/final.pt``. Started again
with the same arguments, it continues from the newest checkpoint that loads. On SIGUSR1 or
SIGTERM (what Slurm sends before the wall time with ``--signal``, and at pre-emption) it
finishes the current step, writes a checkpoint and exits with 128 + the signal's number.

In a notebook, ``main(argv, functions={...})`` runs it with the notebook's own ``capture``,
``restore``, ``save`` and ``load`` (episode 11 defines them in cells).

Every step prints ``step N loss L``, which the launcher in :mod:`gpucourse.survive` reads.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .. import checkpoint
from ..atomic import save_atomic
from ..device import cuda_usable


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True,
                   help="folder for checkpoint-STEP.pt and final.pt")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads; keep it the same when resuming (a sum split differently rounds differently)")
    p.add_argument("--every", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=2,
                   help="checkpoints kept: the newest and the ones before it")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu or cuda")
    p.add_argument("--deterministic", action="store_true",
                   help="torch.use_deterministic_algorithms(True), for exact resumes on a GPU")
    p.add_argument("--stop-after", type=int, default=None,
                   help="save a checkpoint after this many steps and stop (an interruption, in-process)")
    p.add_argument("--forget", default="",
                   help="on resuming, leave out these parts of the checkpoint, comma-separated: "
                        "optimizer, scheduler, rng, position (to see what each is for)")
    p.add_argument("--quiet", action="store_true", help="print nothing (for runs inside a notebook)")
    p.add_argument("--slow-save", type=float, default=0.0,
                   help="(tests) pause this many seconds halfway through writing each checkpoint")
    p.add_argument("--pause-at", type=int, default=None,
                   help="after printing this step, wait for a signal as long as the process that "
                        "started this one lives, so that a kill sent on reading the step lands there "
                        "and not a few steps later, however busy the machine (survive.run sets it to "
                        "its kill_at)")
    args = p.parse_args(argv)
    sizes = (args.epochs, args.samples, args.batch, args.width, args.every, args.threads, args.keep)
    if min(sizes) < 1 or args.samples < args.batch:
        p.error("--epochs, --samples, --batch, --width, --every, --threads and --keep must be >= 1, "
                "and --samples >= --batch")
    args.forget = [part for part in args.forget.split(",") if part]
    unknown = sorted(set(args.forget) - set(FORGETTABLE))
    if unknown:
        p.error(f"--forget: unknown part(s) {unknown}; choose from {', '.join(FORGETTABLE)}")
    return args


FORGETTABLE = ("optimizer", "scheduler", "rng", "position")


def make_data(n: int, seed: int) -> TensorDataset:
    """A fixed data set: 20 features, a label from a noisy linear rule (its own generator)."""
    g = torch.Generator().manual_seed(seed + 12345)
    X = torch.randn(n, 20, generator=g)
    y = ((X[:, :5].sum(1) + 0.5 * torch.randn(n, generator=g)) > 0).float()
    return TensorDataset(X, y)


def make_model(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(20, width), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(width, width), nn.ReLU(), nn.Dropout(0.2), nn.Linear(width, 1))


_stop = []   # the signal that asked us to stop, if any


def _ask_to_stop(signum, frame):   # a handler only notes the request; the loop acts on it
    _stop.append(signum)


CHECKPOINT_FUNCTIONS = ("capture", "restore", "save", "load")


def main(argv=None, functions: dict | None = None) -> None:
    """Train as the command line ``argv`` says.

    ``functions`` replaces some of :mod:`gpucourse.checkpoint`'s ``capture``, ``restore``,
    ``save`` and ``load`` (a notebook's own, with the same arguments).
    """
    args = parse_args(argv)
    unknown = sorted(set(functions or {}) - set(CHECKPOINT_FUNCTIONS))
    if unknown:
        raise ValueError(f"functions: unknown name(s) {unknown}; give any of "
                         f"{', '.join(CHECKPOINT_FUNCTIONS)}")
    functions = {**{name: getattr(checkpoint, name) for name in CHECKPOINT_FUNCTIONS},
                 **(functions or {})}
    deterministic = torch.are_deterministic_algorithms_enabled()
    if args.deterministic:
        # read when cuBLAS starts: it takes effect in a fresh process (survive.run), not in a kernel
        # that has already used the GPU
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    use_cuda = cuda_usable() if args.device == "auto" else args.device == "cuda"
    device = torch.device("cuda" if use_cuda else "cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        train(args, device, functions)
    finally:
        torch.set_num_threads(threads)   # called in a notebook: give the kernel its threads back
        torch.use_deterministic_algorithms(deterministic)


def _wait_for_a_signal() -> None:
    """Sleep until a stop is asked for (SIGKILL needs no asking) or the process that started this
    one has gone (then this one has a new parent): no fixed number of seconds, which a busy
    machine could outlast before the signal comes."""
    parent = os.getppid()
    while not _stop and os.getppid() == parent:
        time.sleep(0.01)


def _saving_slowly(pause: float):
    """``checkpoint.save`` with a pause halfway through writing the file (tests kill the run there)."""
    def save(ckpt: dict, path: Path) -> None:
        def slowly(tmp):         # the same bytes as checkpoint.save writes, with a pause in the middle
            buffer = io.BytesIO()
            torch.save(ckpt, buffer)
            data = buffer.getvalue()
            with open(tmp, "wb") as fh:
                fh.write(data[: len(data) // 2])
                fh.flush()
                print("saving: half written", flush=True)
                time.sleep(pause)
                fh.write(data[len(data) // 2:])
        save_atomic(slowly, path)
    return save


def _leave_out(ckpt: dict, parts, optimizer, scheduler) -> dict:
    """``ckpt`` with ``parts`` replaced by what a fresh start would have (for the demonstration)."""
    fresh = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "rng": checkpoint.rng_state()}
    for part in parts:
        if part == "position":
            ckpt["step"] = 0         # "we know the epoch": start it again from its first batch
        else:
            ckpt[part] = fresh[part]
    return ckpt


def train_step(model, optimizer, scaler, scheduler, loss_fn, xb, yb) -> float:
    """One optimiser step, in mixed precision on a GPU (float16 with a GradScaler)."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(xb.device.type, dtype=torch.float16, enabled=scaler.is_enabled()):
        loss = loss_fn(model(xb).squeeze(1), yb)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    return loss.item()


def train(args, device: torch.device, functions: dict) -> None:
    def say(text):
        if not args.quiet:
            print(text, flush=True)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    data = make_data(args.samples, args.seed)
    sampler = checkpoint.EpochSampler(len(data), seed=args.seed)
    generator = torch.Generator()        # the loader's own: it leaves the global generator alone
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, drop_last=True,
                        num_workers=args.workers, generator=generator)
    model = make_model(args.width).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    steps_per_epoch = len(data) // args.batch
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch)
    scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
    loss_fn = nn.BCEWithLogitsLoss()

    capture, restore, load = (functions[name] for name in ("capture", "restore", "load"))
    save = _saving_slowly(args.slow_save) if args.slow_save else functions["save"]
    epoch, step = 0, 0
    ckpt, path = checkpoint.load_latest(args.out, load)    # the newest checkpoint that loads
    if ckpt is not None:                 # resume from it
        ckpt = _leave_out(ckpt, args.forget, optimizer, scheduler)    # --forget: the demonstration only
        epoch, step = restore(ckpt, model, optimizer, scaler, scheduler)
        say(f"resumed from {path.name}: epoch {epoch}, step {step} of {steps_per_epoch}")
    else:
        say(f"starting: {args.epochs} epochs of {steps_per_epoch} steps on {device}")
    model.train()
    while epoch < args.epochs:
        sampler.set_epoch(epoch, start=step * args.batch)     # skip what this epoch already trained on
        checkpoint.loader_generator(generator, args.seed, epoch)
        for xb, yb in loader:
            loss = train_step(model, optimizer, scaler, scheduler, loss_fn, xb.to(device), yb.to(device))
            step += 1
            done = epoch * steps_per_epoch + step
            say(f"step {done} loss {loss:.5f}")
            if done == args.pause_at:
                _wait_for_a_signal()
            stopping = done == args.stop_after or bool(_stop)
            if done % args.every == 0 or stopping:
                save(capture(model, optimizer, scaler, scheduler, epoch, step),
                     checkpoint.numbered(args.out, done))             # checkpoint-{done}.pt
                checkpoint.prune(args.out, keep=args.keep)      # this one and the one before
            if stopping:
                say(f"stopped after step {done}, checkpoint saved" + (f" (signal {_stop[0]})" if _stop else ""))
                if _stop:
                    sys.exit(128 + _stop[0])   # as a killed process would, so that a job script can tell
                return
        epoch, step = epoch + 1, 0
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_atomic(lambda tmp: torch.save(weights, tmp), args.out / "final.pt")
    say(f"finished: weights in {args.out / 'final.pt'}")


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _ask_to_stop)      # as a script only: a notebook keeps its own handlers
    signal.signal(signal.SIGTERM, _ask_to_stop)
    main()
