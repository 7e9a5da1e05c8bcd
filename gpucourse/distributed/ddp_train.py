"""Data-parallel training with PyTorch DistributedDataParallel (DDP).

Launch it with torchrun, one process per GPU (or, without GPUs, per CPU process):

    python -m torch.distributed.run --standalone --nproc-per-node=2 \\
        -m gpucourse.distributed.ddp_train --out runs/ddp

torchrun starts the processes and gives each its RANK, LOCAL_RANK and WORLD_SIZE in the
environment. Every process holds the whole model and trains on its own shard of each global
batch; DDP averages the gradients across processes (an all-reduce) during backward(), so
every process takes the same optimiser step and the copies stay identical.

The global batch is fixed (--global-batch); each process takes global-batch / WORLD_SIZE
samples of it. So one process and two processes see the same batches and, up to rounding,
train the same weights.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from gpucourse.atomic import save_atomic, writable_folder
from gpucourse.device import cuda_usable


def make_data(n_samples: int, n_features: int = 16, seed: int = 0) -> TensorDataset:
    """A synthetic binary classification set, the same in every process (same seed)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_samples, n_features, generator=g)
    w = torch.randn(n_features, generator=g)
    y = ((X @ w + 0.5 * torch.randn(n_samples, generator=g)) > 0).float()
    return TensorDataset(X, y)


def make_model(n_features: int = 16, width: int = 64) -> nn.Module:
    """The MLP of episode 3: two hidden ReLU layers, one logit. Seeded: every process starts alike."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(n_features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 1))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the checkpoint and per-rank weights")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=256, help="samples per step, all processes together")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--bench-steps", type=int, default=0, help="after training, time this many steps")
    p.add_argument("--timeout", type=float, default=60, help="seconds a collective may wait for the others")
    args = p.parse_args(argv)
    for name in ("samples", "width", "epochs", "global_batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.timeout <= 0 or args.bench_steps < 0:
        p.error("--timeout must be positive and --bench-steps at least 0")
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if args.global_batch % world_size:
        p.error(f"--global-batch {args.global_batch} is not divisible by {world_size} processes: choose a "
                f"multiple of {world_size}, e.g. {args.global_batch // world_size * world_size or world_size}")
    if args.samples < args.global_batch:
        p.error(f"--samples {args.samples} is less than one global batch ({args.global_batch}): no full step to "
                "train; use more samples or a smaller --global-batch")
    return args


def pick_device(local_rank: int, local_world_size: int = 1) -> tuple[torch.device, str]:
    """The device and collectives backend of the process with this ``local_rank`` on its node.

    With CUDA, process ``local_rank`` takes GPU number ``local_rank`` of those this process sees
    (``CUDA_VISIBLE_DEVICES`` decides which they are) and NCCL; without CUDA, the CPU and Gloo.
    More processes on a node than visible GPUs is an error, not a silent move to the CPU: two
    processes on one GPU would compete for its memory, and a mix of GPU and CPU ranks cannot talk.
    """
    if not cuda_usable():                           # no GPU, or none this build has code for
        return torch.device("cpu"), "gloo"          # collectives over TCP between CPU processes
    visible, needed = torch.cuda.device_count(), max(local_rank + 1, local_world_size)
    if needed > visible:
        shown = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError(
            f"local rank {local_rank} of {max(local_world_size, local_rank + 1)} processes on this node needs GPU "
            f"{local_rank}, but this process sees {visible} GPU(s)"
            + (f" (CUDA_VISIBLE_DEVICES={shown!r})" if shown is not None else "")
            + f": start at most {visible} process(es) per node (--nproc-per-node={visible}), or set "
              "CUDA_VISIBLE_DEVICES= (empty) to train on CPU processes with gloo.")
    return torch.device("cuda", local_rank), "nccl"   # NVIDIA's collectives: GPU to GPU, NVLink, InfiniBand


def main(argv=None) -> None:
    args = parse_args(argv)
    writable_folder(args.out)
    # Who am I? torchrun sets these; without it we are a world of one.
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank, local_world_size = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    # >>> 1. one device per process, then join the others   (single process: the device only)
    # cuda:LOCAL_RANK and nccl, or the CPU and gloo
    device, backend = pick_device(local_rank, local_world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout),
                            device_id=device if device.type == "cuda" else None)
    # <<<
    try:
        train(args, rank, world_size, device)
    finally:
        # >>> 6. leave the group, even after an error   (single process: nothing)
        dist.destroy_process_group()
        # <<<


def train(args, rank: int, world_size: int, device: torch.device) -> None:
    per_rank = args.global_batch // world_size
    data = make_data(args.samples)
    # >>> 2. each process its own shard of every global batch   (single process: DataLoader(shuffle=True))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=0, drop_last=True)
    loader = DataLoader(data, batch_size=per_rank, sampler=sampler, drop_last=True)
    # <<<
    model = make_model(data.tensors[0].shape[1], args.width).to(device)
    # >>> 3. wrap the model: rank 0's weights to all, gradients averaged   (single process: no wrap)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    # <<<
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.BCEWithLogitsLoss()
    if rank == 0:
        print(f"[rank 0] {world_size} process(es), backend {dist.get_backend()}, device {device}; "
              f"global batch {args.global_batch} = {per_rank} per process × {world_size}", flush=True)
    for epoch in range(args.epochs):
        # >>> 4. a new shuffle each epoch, the same in every process   (single process: DataLoader does it)
        sampler.set_epoch(epoch)
        # <<<
        total = torch.zeros(2, device=device)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(xb).squeeze(1), yb)
            loss.backward()              # gradients are all-reduced (averaged) here
            optimizer.step()
            total += torch.stack([loss.detach() * len(xb), torch.tensor(float(len(xb)), device=device)])
        dist.all_reduce(total)           # only for the log line: the loss over all processes
        if rank == 0:
            print(f"[rank 0] epoch {epoch + 1}: mean loss {(total[0] / total[1]).item():.5f} "
                  f"over {int(total[1].item())} samples", flush=True)
    weights = {k: v.detach().cpu() for k, v in ddp.module.state_dict().items()}
    save_atomic(lambda f: torch.save(weights, f), args.out / f"weights-rank{rank}.pt")   # for the notebook only
    checksum = sum(float(v.double().sum()) for v in weights.values())
    print(f"[rank {rank}] trained on {len(sampler)} samples per epoch; weight checksum {checksum:.10f}\n",
          end="", flush=True)   # one write per line: the ranks share the output
    # >>> 5. one checkpoint, from rank 0: the copies are identical   (single process: save, no rank test)
    if rank == 0:
        checkpoint = {"model": ddp.module.state_dict(),          # not ddp.state_dict()
                      "optimizer": optimizer.state_dict(), "epochs": args.epochs,
                      "world_size": world_size, "global_batch": args.global_batch}
        save_atomic(lambda f: torch.save(checkpoint, f), args.out / "checkpoint.pt")
    dist.barrier()                   # nobody leaves before the checkpoint is written
    # <<<
    if args.bench_steps:
        bench(args, rank, world_size, device, ddp, optimizer, loss_fn, per_rank, data)


def bench(args, rank, world_size, device, ddp, optimizer, loss_fn, per_rank, data) -> None:
    """Median seconds per step, three ways, written to bench.json by rank 0.

    * ``step_s``: this process's share of the global batch (strong scaling: the global batch
      stays the same whatever the number of processes), with the gradient all-reduce;
    * ``no_sync_step_s``: the same step under ``ddp.no_sync()``, which skips the all-reduce;
    * ``weak_step_s``: a full global batch in every process (weak scaling: N processes take
      N times the samples per step), with the all-reduce.
    """
    xb, yb = data.tensors[0][:per_rank].to(device), data.tensors[1][:per_rank].to(device)
    xw, yw = data.tensors[0][:args.global_batch].to(device), data.tensors[1][:args.global_batch].to(device)

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss_fn(ddp(x).squeeze(1), y).backward()
        optimizer.step()

    def timed(no_sync: bool, x=xb, y=yb) -> float:
        times = []
        for i in range(args.bench_steps + 2):
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            if no_sync:
                with ddp.no_sync():
                    step(x, y)
            else:
                step(x, y)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i >= 2:                    # two warm-up steps
                times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]

    with_sync, without, weak = timed(False), timed(True), timed(False, xw, yw)
    if rank == 0:
        result = {"world_size": world_size, "step_s": with_sync, "no_sync_step_s": without, "weak_step_s": weak,
                  "per_rank_batch": per_rank, "global_batch": args.global_batch, "device": str(device)}
        save_atomic(lambda f: f.write_text(json.dumps(result)), args.out / "bench.json")
        print(f"[rank 0] median step {with_sync * 1e3:.2f} ms; without all-reduce {without * 1e3:.2f} ms; "
              f"with {args.global_batch} samples per process {weak * 1e3:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
