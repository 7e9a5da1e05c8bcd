"""Sharded data parallelism with FSDP2 (``fully_shard``), against DDP, ZeRO-1 and one process.

Launch it with torchrun, one process per GPU (or, without GPUs, per CPU process):

    python -m torch.distributed.run --standalone --nproc-per-node=2 \\
        -m gpucourse.distributed.fsdp_train --out runs/fsdp

Each strategy trains the same model (``sharded.make_model``) on the same global batches for
``--steps`` steps, every rank on its share of each batch:

* ``ddp``: every rank holds everything; gradients are all-reduced (episode 9);
* ``zero1``: DDP with ``ZeroRedundancyOptimizer``: each rank keeps the optimizer state of some
  parameters and broadcasts them after its step. It shards what the ZeRO paper's stage 1 shards, but
  sends more: DDP's whole all-reduce, then the broadcasts (the paper's stage 1 reduce-scatters the
  gradients and all-gathers the weights, DDP's bytes);
* ``zero2``: ``fully_shard(..., reshard_after_forward=False)``, FSDP's SHARD_GRAD_OP: gradients and
  optimizer state sharded; parameters sharded at rest but whole from a block's forward until its
  backward, so at the start of backward the rank holds the whole model, as the ZeRO paper's stage 2
  does throughout;
* ``zero3``: ``fully_shard(..., reshard_after_forward=True)``: the same, but a block's parameters are
  freed after its forward and gathered again for its backward;
* ``zero3-bf16``: ZeRO-3 with ``MixedPrecisionPolicy``: blocks compute in bfloat16 (all-gathered in
  bfloat16), gradients are reduced in float32.

For each, rank ``r`` writes ``result-rank{r}.json`` under ``--out``: its bytes of parameters,
gradients and optimizer state after backward, its most parameter bytes allocated from forward to the
start of backward (``params_peak``: the parameters the modules compute with, whole while their unit is
gathered, plus the padded shards, which stay allocated beside them), the collectives of one step with their bytes, the losses, and the
largest difference between its weights and those of a single process that trained on the whole
batch. With ``--save-at K`` the ``zero3`` run also writes a sharded checkpoint after step K
(``torch.distributed.checkpoint``, one file per rank) to ``--checkpoint``, and rank 0 writes the
final weights to ``final-weights.pt``; ``dcp_reshard`` resumes it with another number of ranks.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from . import sharded
from .sharded import CommCounter, finish, loss_fn, make_model, make_optimizer, reference_run

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "zero3-bf16")
WARMUP = 2    # steps before the collectives are counted


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the per-rank results")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help=f"comma-separated, of {STRATEGIES}")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="cpu keeps the run on CPU processes (Gloo) on a machine with GPUs")
    p.add_argument("--save-at", type=int, default=0, help="zero3: write a sharded checkpoint after this step")
    p.add_argument("--checkpoint", type=Path, help="folder of the sharded checkpoint (with --save-at)")
    p.add_argument("--timeout", type=float, default=120, help="seconds a collective may wait for the others")
    args = p.parse_args(argv)
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in args.strategies if s not in STRATEGIES]
    if unknown or not args.strategies:
        p.error(f"--strategies {unknown or '(none)'}: choose from {', '.join(STRATEGIES)}")
    if min(args.width, args.hidden, args.blocks) < 1 or args.steps <= WARMUP:
        p.error(f"--width, --hidden and --blocks must be at least 1, --steps more than {WARMUP}")
    if args.save_at and not (0 < args.save_at < args.steps and args.checkpoint):
        p.error(f"--save-at {args.save_at} needs 0 < K < --steps ({args.steps}) and a --checkpoint folder")
    world_size = sharded.ranks()[1]
    if sharded.GLOBAL_BATCH % world_size:
        p.error(f"{world_size} processes do not divide the global batch of {sharded.GLOBAL_BATCH}: "
                "use 1, 2, 4 or 8")
    return args


def shard(model, mesh, strategy: str):
    """Wrap ``model`` for ``strategy``; the FSDP2 lines are the lesson."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # >>> 2. shard each block, then the root   (single process: the model as it is)
    reshard = strategy != "zero2"    # ZeRO-3 frees a block's gathered weights after forward
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if strategy == "zero3-bf16" else MixedPrecisionPolicy()
    # one all-gather per block: only one block is whole at a time
    for block in model[1:-1]:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    # the rest: the input and output layers
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    # <<<
    return model


def replicate(model, device: str, strategy: str, counter: CommCounter):
    """DDP (and ZeRO-1's optimizer), with a hook that counts DDP's gradient all-reduces."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, device_ids=[torch.cuda.current_device()] if device == "cuda" else None)

    def counted(state, bucket):      # the reducer calls this from C++, maybe on another thread
        counter.add("all-reduce", bucket.buffer().numel() * bucket.buffer().element_size())
        counter.paused = True
        try:
            return default_hooks.allreduce_hook(dist.group.WORLD, bucket)
        finally:
            counter.paused = False

    ddp.register_comm_hook(None, counted)
    if strategy == "zero1":
        # >>> 3. ZeRO-1: each rank keeps the optimizer state of its share   (single process: AdamW)
        optimizer = ZeroRedundancyOptimizer(ddp.parameters(),
                                            optimizer_class=torch.optim.AdamW,
                                            lr=3e-3, weight_decay=0.0)
        # <<<
    else:
        optimizer = make_optimizer(ddp.parameters())
    return ddp, optimizer


def full_weights(model, strategy: str) -> dict:
    """The whole model's weights on every rank (gathered from the shards for FSDP)."""
    state = (model.module if strategy in ("ddp", "zero1") else model).state_dict()
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().float() for k, v in state.items()}


def save_checkpoint(model, optimizer, step: int, folder: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    # >>> 4. a sharded checkpoint: every rank writes its own shards   (single process: torch.save)
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=folder)
    # <<<
    if dist.get_rank() == 0:
        sharded.write_json(folder / "position.json", {"step": step, "world_size": dist.get_world_size()})
    dist.barrier()


def train(args, strategy: str, mesh, device: str, rank: int, world_size: int) -> dict:
    counter = CommCounter()
    model = make_model(args.width, args.hidden, args.blocks).to(device)
    if strategy in ("ddp", "zero1"):
        model, optimizer = replicate(model, device, strategy, counter)
    else:
        model = shard(model, mesh, strategy)
        optimizer = make_optimizer(model.parameters())
    losses = []
    with counter:
        for step in range(args.steps):
            counter.counting = step >= WARMUP       # count the steady state: DDP rebuilds its buckets
            optimizer.zero_grad()
            x, y = sharded.local_batch(step, rank, world_size)
            with sharded.PeakParams(model) as peak:     # gathered parameters and shards, in forward
                loss = loss_fn(model, x.to(device), y.to(device))
            loss.backward()                   # FSDP: all-gathers (ZeRO-3), reduce-scatters the gradients
            if step == 0:                     # gradients exist now, optimizer state after the step
                memory = sharded.state_bytes(model, getattr(optimizer, "optim", optimizer))
                memory["params_peak"] = peak.bytes     # from forward to the start of backward
            optimizer.step()
            losses.append(loss.detach().float())
            if strategy == "zero3" and args.save_at and step + 1 == args.save_at:
                counter.paused = True         # the checkpoint's own collectives are not a step's
                save_checkpoint(model, optimizer, step + 1, args.checkpoint)
                counter.paused = False
    memory["optimizer"] = sharded.state_bytes(model, getattr(optimizer, "optim", optimizer))["optimizer"]
    mean_losses = torch.stack(losses).to(device)
    dist.all_reduce(mean_losses)              # each rank's loss is over its share: average them
    weights = full_weights(model, strategy)
    reference_losses, reference = reference_run(args.steps, args.width, args.hidden, args.blocks)
    if strategy == "zero3" and args.save_at and rank == 0:
        torch.save(weights, args.out / "final-weights.pt")
    return {"bytes": memory, "comm": counter.as_dict(args.steps - WARMUP), "losses": (mean_losses / world_size).tolist(),
            "reference_losses": reference_losses, "max_weight_difference": sharded.max_difference(weights, reference)}


def main(argv=None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rank, world_size, local_rank, local_world_size = sharded.ranks()
    from torch.distributed.device_mesh import init_device_mesh

    # >>> 1. one device per process, and a mesh over them all   (single process: nothing)
    device, backend = sharded.pick_device(local_rank, local_world_size, args.device)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
    # never let FSDP choose the device itself
    mesh = init_device_mesh(device, (world_size,))
    # <<<
    full = make_model(args.width, args.hidden, args.blocks)
    results = {"world_size": world_size, "rank": rank, "device": device, "backend": backend,
               "full_params_bytes": sum(p.numel() * p.element_size() for p in full.parameters()),
               "param_shapes": {k: list(p.shape) for k, p in full.named_parameters()}, "strategies": {}}
    for strategy in args.strategies:
        results["strategies"][strategy] = train(args, strategy, mesh, device, rank, world_size)
        if rank == 0:
            r = results["strategies"][strategy]
            print(f"[rank 0] {strategy:10s} loss {r['losses'][0]:.5f} → {r['losses'][-1]:.5f}; "
                  f"max |Δ| vs one process {r['max_weight_difference']:.1e}", flush=True)
    sharded.write_json(args.out / f"result-rank{rank}.json", results)
    finish(0)


if __name__ == "__main__":
    main()
