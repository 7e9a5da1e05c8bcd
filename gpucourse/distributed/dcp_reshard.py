"""Resume a sharded checkpoint with another number of processes (resharding).

``fsdp_train --save-at K`` wrote a ``torch.distributed.checkpoint`` (DCP) folder from N ranks: each
rank its own shards, plus metadata saying which piece of which tensor is in which file. This
script starts M ranks (say 2 where the checkpoint has 4), shards a fresh model and optimizer over
them, and loads the checkpoint: DCP reads, for each rank, every saved piece that overlaps its new
shards, whole (``FileSystemReader.read_data`` loads the stored item, then narrows it to the rows
asked for), not only the overlapping rows. Then it trains the steps the first run trained after step K and compares the
final weights with the first run's (``final-weights.pt``) and with one process that never stopped.

    python -m torch.distributed.run --standalone --nproc-per-node=2 \\
        -m gpucourse.distributed.dcp_reshard --checkpoint runs/ckpt --out runs/fsdp4

Episode 11's resume was bit for bit; here the sums of the gradient reduce-scatter are split over
another number of ranks, so the weights agree to float32 rounding (about 1e-7), not bit for bit.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from . import sharded
from .fsdp_train import shard
from .sharded import finish, loss_fn, make_model, make_optimizer, reference_run


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, required=True, help="the folder fsdp_train --save-at wrote")
    p.add_argument("--out", type=Path, required=True, help="fsdp_train's --out: final-weights.pt is read there")
    p.add_argument("--steps", type=int, required=True, help="train until this step, as the first run did")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args(argv)
    position = args.checkpoint / "position.json"
    if not position.is_file():
        p.error(f"{position} does not exist: run fsdp_train with --save-at K --checkpoint {args.checkpoint} first")
    return args


def load_checkpoint(model, optimizer, folder: Path) -> int:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    # >>> 1. load into this run's shards, whatever the saving run's world size   (single process: torch.load)
    model_state, optim_state = get_state_dict(model, optimizer)  # *this* run's shards
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=folder)   # reads each saved piece its shards overlap
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])
    # <<<
    return json.loads((folder / "position.json").read_text())


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world_size, local_rank, local_world_size = sharded.ranks()
    from torch.distributed.device_mesh import init_device_mesh

    device, backend = sharded.pick_device(local_rank, local_world_size, args.device)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
    mesh = init_device_mesh(device, (world_size,))
    model = shard(make_model(args.width, args.hidden, args.blocks).to(device), mesh, "zero3")
    optimizer = make_optimizer(model.parameters())
    position = load_checkpoint(model, optimizer, args.checkpoint)
    losses = []
    for step in range(position["step"], args.steps):      # the batches the first run saw after saving
        optimizer.zero_grad()
        x, y = sharded.local_batch(step, rank, world_size)
        loss = loss_fn(model, x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().float())
    weights = {k: v.full_tensor().detach().cpu().float() for k, v in model.state_dict().items()}
    if rank == 0:
        _, reference = reference_run(args.steps, args.width, args.hidden, args.blocks)
        first_run = torch.load(args.out / "final-weights.pt")
        result = {"saved_world_size": position["world_size"], "world_size": world_size,
                  "resumed_at": position["step"], "steps": args.steps,
                  "vs_uninterrupted_sharded": sharded.max_difference(weights, first_run),
                  "vs_one_process": sharded.max_difference(weights, reference),
                  "shard_rows": {k: list(v.to_local().shape) for k, v in model.state_dict().items()}}
        sharded.write_json(args.out / f"resumed-{world_size}.json", result)
        print(f"[rank 0] saved by {position['world_size']} ranks at step {position['step']}, resumed by "
              f"{world_size}, trained to step {args.steps}: max |Δ| vs the {position['world_size']}-rank run "
              f"{result['vs_uninterrupted_sharded']:.1e}, vs one process {result['vs_one_process']:.1e}", flush=True)
    finish(0)


if __name__ == "__main__":
    main()
