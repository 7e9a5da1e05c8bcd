"""A collective that one rank never reaches: what a distributed hang looks like, with a timeout.

Every collective (all_reduce, barrier, broadcast, DDP's gradient all-reduce in backward())
must be called by every rank, the same number of times, in the same order. Here the data
do not split evenly: rank 0 gets one batch more than rank 1. With ``--bug`` each rank loops
over its own batches, so rank 0 calls all_reduce once more than rank 1 and waits for a
partner that never comes, until the group's timeout (--timeout seconds) ends it. Without
``--bug`` the ranks first agree on the number of steps, the smallest shard's.

The processes join with Gloo's default timeout (30 minutes) and run their collectives in a
group of all ranks with the short one: a process group's timeout also bounds the joining, and
on a busy machine two processes that import torch at once may reach it seconds apart, which
would end a 3 s demonstration before its first collective.

    python -m torch.distributed.run --standalone --nproc-per-node=2 -m gpucourse.distributed.uneven --bug
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import torch
import torch.distributed as dist


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bug", action="store_true", help="loop over this rank's own batches (hangs)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds a collective may wait")
    args = p.parse_args(argv)
    # >>> 1. join (waiting up to 30 min), then a group of all ranks with a short timeout
    dist.init_process_group("gloo")                  # CPU tensors: gloo
    group = dist.new_group(timeout=timedelta(seconds=args.timeout))
    # <<<
    rank = dist.get_rank()
    try:
        # >>> 2. uneven shards: with --bug, rank 0 calls all_reduce once more than rank 1
        n_batches = 5 if rank == 0 else 4       # 9 batches do not split evenly over 2 ranks
        steps = torch.tensor(n_batches)
        if not args.bug:                        # the fix: every rank takes the smallest count
            dist.all_reduce(steps, op=dist.ReduceOp.MIN, group=group)
        for step in range(int(steps)):
            grad = torch.full((3,), float(rank + 1))
            dist.all_reduce(grad, group=group)  # every rank must get here, each step
        # <<<
        print(f"[rank {rank}] done after {int(steps)} steps; summed gradient {grad.tolist()}\n", end="", flush=True)
        dist.barrier(group=group)                          # wait for the others before leaving (a collective too)
        print(f"[rank {rank}] passed the final barrier\n", end="", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
