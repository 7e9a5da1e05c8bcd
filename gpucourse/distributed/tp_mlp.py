"""Tensor parallelism for an MLP block on a ``DeviceMesh``, and a 2-D mesh (FSDP × TP).

    python -m torch.distributed.run --standalone --nproc-per-node=2 \\
        -m gpucourse.distributed.tp_mlp --out runs/tp

Every block's up-projection is split by columns (each rank computes half of the hidden units)
and its down-projection by rows (each rank multiplies its half of the hidden units by its half of
the weight, giving a partial sum of the output); one all-reduce adds the partial sums. Every
rank sees the whole batch. Rank ``r`` writes ``tp-rank{r}.json``: the local shapes of the weights
and of the activations, the collectives of one forward and of one backward of a block, the
largest difference between one block's output and the dense block's, and, after ``--steps``
training steps of the whole model, the largest difference from a single process.

With ``--dp 2`` and 4 processes the mesh is 2 × 2: tensor parallel within each pair of ranks
(``mesh["tp"]``), and each TP pair's shards sharded again by FSDP across the pairs (``mesh["dp"]``),
which split the batch between them.
"""

from __future__ import annotations

import argparse
import logging
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from . import sharded
from .sharded import CommCounter, finish, loss_fn, make_model, make_optimizer, reference_run


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dp", type=int, default=1, help="data-parallel (FSDP) size; tensor-parallel = world / dp")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args(argv)
    world_size = sharded.ranks()[1]
    if args.dp < 1 or world_size % args.dp or sharded.GLOBAL_BATCH % args.dp:
        p.error(f"--dp {args.dp} must divide the {world_size} processes and the batch of {sharded.GLOBAL_BATCH}")
    if args.hidden % (world_size // args.dp):
        p.error(f"--hidden {args.hidden} must divide by the tensor-parallel size {world_size // args.dp}")
    return args


def tensor_parallel(block, tp_mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    # >>> 2. split the block: up by columns, down by rows   (single process: the block as it is)
    plan = {"up": ColwiseParallel(),      # each rank: hidden / TP units
            "down": RowwiseParallel()}    # partial sums, then all-reduce
    return parallelize_module(block, tp_mesh, plan)
    # <<<


def block_report(block, width: int, device: str) -> dict:
    """One forward and backward of one TP block on the whole batch, against the dense block."""
    dense = make_model(width, block.up.weight.shape[0], 1)[1].to(device)     # the same seeded weights
    g = torch.Generator().manual_seed(5)
    x = torch.randn(sharded.GLOBAL_BATCH, width, generator=g).to(device).requires_grad_(True)
    shapes = {}
    hook = block.up.register_forward_hook(lambda m, i, out: shapes.update(hidden=list(out.shape)))
    forward, backward = CommCounter(), CommCounter()
    with forward:
        out = block(x)
    with backward:
        out.sum().backward()
    hook.remove()
    expected = dense(x.detach())
    return {"up_weight": list(block.up.weight.to_local().shape), "down_weight": list(block.down.weight.to_local().shape),
            "input": list(x.shape), "hidden_activation": shapes["hidden"], "output": list(out.shape),
            "forward": forward.as_dict(), "backward": backward.as_dict(),
            "output_difference": float((out - expected).detach().abs().max())}


@contextmanager
def _quiet_redistribution():
    """Gathering a 2-D (FSDP × TP) weight whole for the comparison takes one all-gather per mesh
    dimension, and torch 2.13 logs that on every rank as "suboptimal" (four 300-character lines in
    the notebook). It is a one-off gather after training, and an all-gather adds nothing up, so the
    result is exact either way: only that logger is quieted, and only here."""
    log = logging.getLogger("torch.distributed.tensor._redistribute")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def main(argv=None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rank, world_size, local_rank, local_world_size = sharded.ranks()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    device, backend = sharded.pick_device(local_rank, local_world_size, args.device)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
    tp_size = world_size // args.dp
    # >>> 1. a mesh of dp × tp ranks: (1, 2) is plain tensor parallelism   (single process: nothing)
    mesh = init_device_mesh(device, (args.dp, tp_size), mesh_dim_names=("dp", "tp"))
    # <<<
    torch.manual_seed(0)
    one = tensor_parallel(make_model(args.width, args.hidden, 1)[1].to(device), mesh["tp"])
    report = block_report(one, args.width, device)
    model = make_model(args.width, args.hidden, args.blocks).to(device)
    for block in model[1:-1]:
        tensor_parallel(block, mesh["tp"])
        if args.dp > 1:
            # >>> 3. 2-D: shard the TP shards again across the data-parallel ranks   (single process: nothing)
            fully_shard(block, mesh=mesh["dp"])
            # <<<
    if args.dp > 1:
        fully_shard(model, mesh=mesh["dp"])
    optimizer = make_optimizer(model.parameters())
    dp_rank = mesh["dp"].get_local_rank()
    for step in range(args.steps):
        optimizer.zero_grad()
        x, y = sharded.local_batch(step, dp_rank, args.dp)     # the TP ranks of a pair share a batch
        loss_fn(model, x.to(device), y.to(device)).backward()
        optimizer.step()
    with _quiet_redistribution():
        weights = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().float()
                   for k, v in model.state_dict().items()}
    _, reference = reference_run(args.steps, args.width, args.hidden, args.blocks)
    report.update(dp=args.dp, tp=tp_size, rank=rank, max_weight_difference=sharded.max_difference(weights, reference),
                  state=sharded.state_bytes(model, optimizer),
                  full_params_bytes=sum(v.numel() * 4 for v in reference.values()))
    sharded.write_json(args.out / f"tp-rank{rank}.json", report)
    if rank == 0:
        print(f"[rank 0] mesh dp={args.dp} × tp={tp_size}: block output max |Δ| vs dense "
              f"{report['output_difference']:.1e}; after {args.steps} steps max |Δ| vs one process "
              f"{report['max_weight_difference']:.1e}", flush=True)
    finish(0)


if __name__ == "__main__":
    main()
