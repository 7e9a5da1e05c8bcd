"""What episode 13's sharding scripts share: the model, the data, the device, the counting.

Episode 13 writes its scripts from its cells (``%%writefile``): the mesh, ``fully_shard``, ZeRO-1,
the tensor-parallel plan and the checkpoint's save and load are the lesson, in the notebook. torchrun
starts them, one process per rank; what they share, and every measurement, is here. They train the
same small network on the same batches as one process would, so each compares its weights with a
single-process run (``reference_run``) computed on the spot.

* ``Block`` / ``make_model``: a stack of residual MLP blocks (up-projection, ReLU, down-projection),
  the unit a transformer layer's MLP is made of; its last layer has one output row, so at world
  size 2 or 4 it does not divide by the number of ranks (FSDP pads it).
* ``batch``: the global batch of step ``t``, the same in every process (seeded by ``t``): a run
  resumed at step ``t`` sees the batches an uninterrupted run would.
* ``arguments``: the options every script takes (sizes, steps, device, output folder).
* ``train``: episode 9's training loop on this rank's share of each batch, measured: bytes held,
  the peak of parameter bytes in forward, the collectives of a step, the losses and the weights'
  difference from one process.
* ``pick_device``: CUDA and NCCL when every local rank has a GPU of its own, otherwise the CPU and
  Gloo. It never leaves the choice to FSDP: on a machine with one GPU, ``fully_shard`` without a
  mesh moves the parameters to that GPU while the group is Gloo, and the run fails
  (pytorch/pytorch#132471); the scripts always pass a mesh built for the device chosen here.
* ``worker_env``: the environment of the processes a run starts. CPU ranks get
  ``CUDA_VISIBLE_DEVICES=""``: torch's ``FileSystemWriter`` (``dcp.save``) uses CUDA streams whenever
  ``torch.cuda.is_available()``, so without it every "CPU" rank would open the GPU to save a checkpoint
  (four contexts on Colab's T4; a failure on a GPU in exclusive-process mode).
* ``held_param_bytes`` / ``PeakParams``: the parameter bytes a rank has allocated *now*, and their
  largest value from the start of forward to the start of backward. Between a unit's all-gather and
  its reshard FSDP2 points the module at the whole (unsharded) parameter, while the sharded one,
  which the optimizer holds, stays allocated beside it (torch 2.13
  ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``, ``to_unsharded``): both are counted, the
  shard at its padded size, each storage once.
* ``CommCounter``: every collective a rank issues (all-gather, reduce-scatter, all-reduce,
  broadcast), counted with its bytes by a dispatch mode that sees the c10d operators.
* ``finish``: leave the process group and exit. torch 2.13's CPU build can abort at interpreter
  exit after a Gloo run (``terminate called without an active exception``, exit -6, in about 3
  of 10 runs of a minimal DDP script); a worker that has written its results and left the group
  therefore ends with ``os._exit(0)``, which skips the interpreter's finalisation.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from gpucourse.device import cuda_usable

N_FEATURES = 16
GLOBAL_BATCH = 64          # divisible by 1, 2 and 4 ranks
ADAMW = {"lr": 3e-3, "weight_decay": 0.0}    # every run's AdamW, the single process's too
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "zero3-bf16")
WARMUP = 2                 # steps before the collectives are counted


class Block(nn.Module):
    """One MLP block of a transformer layer: ``x + down(relu(up(x)))``."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def make_model(width: int = 64, hidden: int = 256, blocks: int = 2) -> nn.Sequential:
    """Input layer, ``blocks`` MLP blocks, one output: the same weights in every process (seeded)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(N_FEATURES, width), *(Block(width, hidden) for _ in range(blocks)),
                         nn.Linear(width, 1))


def new_model(args) -> nn.Sequential:
    """``make_model`` at the sizes a script was given: the weights one process starts from too."""
    return make_model(args.width, args.hidden, args.blocks)


def batch(step: int, size: int = GLOBAL_BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of step ``step``: inputs and a smooth target to regress."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, N_FEATURES, generator=g)
    return x, torch.sin(x[:, :4].sum(1, keepdim=True))


def local_batch(step: int, rank: int, world_size: int):
    """This rank's share of step ``step``'s global batch."""
    x, y = batch(step)
    return x.chunk(world_size)[rank], y.chunk(world_size)[rank]


def loss_fn(model, x, y):
    return ((model(x) - y) ** 2).mean()


def make_optimizer(params):
    return torch.optim.AdamW(params, **ADAMW)


def reference_run(steps: int, width: int, hidden: int, blocks: int, start: int = 0, model=None):
    """One process, the whole global batch each step: the losses and the final weights."""
    model = make_model(width, hidden, blocks) if model is None else model
    optimizer = make_optimizer(model.parameters())
    losses = []
    for step in range(start, steps):
        optimizer.zero_grad()
        loss = loss_fn(model, *batch(step))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def pick_device(local_rank: int, local_world_size: int, wanted: str = "auto") -> tuple[str, str]:
    """``("cuda", "nccl")`` when every local rank has a GPU of its own (and ``wanted`` allows it),
    else ``("cpu", "gloo")``.

    ``wanted="cpu"`` keeps a run on the CPU on a machine with GPUs (Colab's one T4: two processes
    cannot share it); ``wanted="cuda"`` refuses to fall back.
    """
    if wanted not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device {wanted!r} is not one of 'auto', 'cpu', 'cuda'")
    gpus = torch.cuda.device_count() if cuda_usable() else 0
    if wanted == "cpu" or (wanted == "auto" and gpus < local_world_size):
        return "cpu", "gloo"
    if gpus < local_world_size:
        raise RuntimeError(f"--device cuda needs one GPU per process: {local_world_size} processes on this "
                           f"node, {gpus} GPU(s) visible. Use --device cpu (Gloo) or fewer processes.")
    torch.cuda.set_device(local_rank)
    return "cuda", "nccl"


def worker_env(device: str) -> dict:
    """Extra environment for the ranks of a run on ``device``: CPU ranks see no GPU at all."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device {device!r} is not one of 'auto', 'cpu', 'cuda'")
    return {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}


def ranks() -> tuple[int, int, int, int]:
    """``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` as torchrun sets them."""
    env = os.environ
    return (int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)),
            int(env.get("LOCAL_WORLD_SIZE", 1)))


def tensor_bytes(tensor) -> int:
    """The bytes of a tensor's elements; of this rank's shard for a DTensor."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def storage_bytes(tensor) -> int:
    """The bytes this rank allocates for a tensor: FSDP's shards are padded to equal sizes."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.untyped_storage().nbytes()


def state_bytes(model, optimizer) -> dict:
    """This rank's bytes of parameters (held and allocated), gradients and optimizer state."""
    params = list(model.parameters())
    moments = [v for p in params for k, v in optimizer.state.get(p, {}).items()
               if torch.is_tensor(v) and k != "step"]
    return {"params": sum(tensor_bytes(p) for p in params),
            "params_allocated": sum(storage_bytes(p) for p in params),
            "grads": sum(tensor_bytes(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(tensor_bytes(v) for v in moments)}


def fsdp_shards(model) -> list:
    """The local tensor of every FSDP2 parameter's shard, whether or not its unit is gathered now
    (a view of the padded shard FSDP allocated; empty for a model that is not sharded)."""
    shards = []
    for module in model.modules():
        if hasattr(module, "_get_fsdp_state"):         # fully_shard'ed: its own parameters' group
            for group in fsdp_param_groups(module._get_fsdp_state()):
                shards += [fp.sharded_param.to_local() for fp in group.fsdp_params]
    return shards


def fsdp_param_groups(state) -> list:
    """An FSDP state's parameter groups: a list from torch 2.13 (``_fsdp_param_groups``), one
    group or None before (``_fsdp_param_group``, torch 2.10 and 2.11: Kaggle and Colab)."""
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is not None:
        return list(groups)
    group = getattr(state, "_fsdp_param_group", None)
    return [group] if group is not None else []


def held_param_bytes(model) -> int:
    """The parameter bytes this rank has allocated at this moment: what the modules compute with (a
    shard, or the whole parameter FSDP2 gathered for a unit), plus every FSDP shard, which stays
    allocated while its unit is gathered. Each storage is counted once, at its allocated size (a
    freed gathered parameter has size 0; a shard its padding)."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    storages = {}
    for tensor in local + fsdp_shards(model):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


class PeakParams:
    """``with PeakParams(model) as peak: loss = ...``: the most parameter bytes the rank had allocated
    (``held_param_bytes``) while the forward ran (sampled after every leaf module's forward) and when it ended, just before backward."""

    def __init__(self, model):
        self.model, self.bytes, self._hooks = model, 0, []

    def sample(self, *_):
        self.bytes = max(self.bytes, held_param_bytes(self.model))

    def __enter__(self):
        leaves = [m for m in self.model.modules() if not list(m.children())]
        self._hooks = [m.register_forward_hook(self.sample) for m in leaves]
        return self

    def __exit__(self, *exc):
        for hook in self._hooks:
            hook.remove()
        self.sample()                    # forward done, backward not begun: ZeRO-2's whole weights
        return False


_KINDS = {"_allgather_base_": "all-gather", "allgather_": "all-gather", "allgather_into_tensor_coalesced_":
          "all-gather", "_reduce_scatter_base_": "reduce-scatter", "reduce_scatter_": "reduce-scatter",
          "reduce_scatter_tensor_coalesced_": "reduce-scatter", "allreduce_": "all-reduce",
          "allreduce_coalesced_": "all-reduce", "broadcast_": "broadcast",
          # the functional collectives DTensor issues (tensor parallelism)
          "all_reduce": "all-reduce", "all_gather_into_tensor": "all-gather",
          "reduce_scatter_tensor": "reduce-scatter", "broadcast": "broadcast"}
_GATHERED_OUTPUT = ("_allgather_base_", "allgather_", "allgather_into_tensor_coalesced_")


def _sized(value) -> int:
    if torch.is_tensor(value):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_sized(v) for v in value)
    return 0


class CommCounter:
    """Count the collectives issued inside ``with counter:``: ``{kind: {"calls", "bytes"}}``.

    ``bytes`` is the size of the whole tensor each collective is about: the gathered output of an
    all-gather, the input of a reduce-scatter, the tensors of an all-reduce or broadcast. What a
    rank sends over a ring follows from it: (N-1)/N of it for an all-gather or a reduce-scatter,
    2(N-1)/N for an all-reduce (episode 9).
    """

    def __init__(self):
        self.counts = defaultdict(lambda: {"calls": 0, "bytes": 0})
        self._mode = None
        self.paused = False              # True while a collective is counted by hand (DDP's hook)
        self.counting = True             # False during warm-up steps

    def add(self, kind: str, nbytes: int) -> None:
        if not self.counting:
            return
        self.counts[kind]["calls"] += 1
        self.counts[kind]["bytes"] += int(nbytes)

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.namespace in ("c10d", "_c10d_functional") and not counter.paused:
                    kind, name = _KINDS.get(func._opname), func._opname
                    if name in _GATHERED_OUTPUT:
                        counter.add(kind, _sized(args[0]))          # the gathered output
                    elif name in ("_reduce_scatter_base_", "reduce_scatter_"):
                        counter.add(kind, _sized(args[1]))          # the input being reduced
                    elif name == "all_gather_into_tensor":          # (shard, group size, group)
                        counter.add(kind, _sized(args[0]) * args[1])
                    elif kind:
                        counter.add(kind, _sized(args[0]))
                return func(*args, **(kwargs or {}))

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        return False

    def as_dict(self, steps: int = 1) -> dict:
        """Per training step: calls and bytes of each kind."""
        return {k: {"calls": v["calls"] / steps, "bytes": v["bytes"] / steps} for k, v in sorted(self.counts.items())}


def max_difference(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts with the same keys."""
    return max(float((a[k].float() - b[k].float()).abs().max()) if a[k].numel() else 0.0 for k in a)


def write_json(path, value) -> None:
    from ..atomic import save_atomic

    save_atomic(lambda f: f.write_text(json.dumps(value, indent=1)), path)


def finish(path=None, value=None, code: int = 0) -> None:
    """Write ``value`` as JSON to ``path`` (if given), leave the process group and exit with
    ``code``, skipping interpreter finalisation (see above)."""
    if path is not None:
        write_json(path, value)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def arguments(argv=None) -> argparse.Namespace:
    """The options of episode 13's scripts, checked; ``--out`` is created.

    ``--strategies`` (for the FSDP script) is returned as a list; ``--dp`` is the data-parallel
    size of a 2-D mesh (tensor-parallel = world / dp); ``--save-at K`` with ``--checkpoint``
    writes a sharded checkpoint after step K.
    """
    p = argparse.ArgumentParser(description="one of episode 13's sharding scripts")
    p.add_argument("--out", type=Path, required=True, help="folder for the per-rank results")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help=f"comma-separated, of {STRATEGIES}")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--dp", type=int, default=1, help="data-parallel size; tensor-parallel = world / dp")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="cpu keeps the run on CPU processes (Gloo) on a machine with GPUs")
    p.add_argument("--save-at", type=int, default=0, help="write a sharded checkpoint after this step")
    p.add_argument("--checkpoint", type=Path, help="folder of the sharded checkpoint")
    args = p.parse_args(argv)
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in args.strategies if s not in STRATEGIES]
    if unknown or not args.strategies:
        p.error(f"--strategies {unknown or '(none)'}: choose from {', '.join(STRATEGIES)}")
    if min(args.width, args.hidden, args.blocks, args.steps) < 1:
        p.error("--width, --hidden, --blocks and --steps must be at least 1")
    if args.save_at and not (0 < args.save_at < args.steps and args.checkpoint):
        p.error(f"--save-at {args.save_at} needs 0 < K < --steps ({args.steps}) and a --checkpoint folder")
    world = ranks()[1]
    if GLOBAL_BATCH % world:
        p.error(f"{world} processes do not divide the global batch of {GLOBAL_BATCH}: use 1, 2, 4 or 8")
    if args.dp < 1 or world % args.dp:
        p.error(f"--dp {args.dp} must divide the {world} processes")
    if args.hidden % (world // args.dp):
        p.error(f"--hidden {args.hidden} must divide by the tensor-parallel size {world // args.dp}")
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def _count_ddp_allreduces(ddp, counter: CommCounter) -> None:
    """DDP's reducer all-reduces from C++, out of the dispatch mode's sight: count its buckets."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def counted(state, bucket):      # the reducer calls this from C++, maybe on another thread
        counter.add("all-reduce", bucket.buffer().numel() * bucket.buffer().element_size())
        counter.paused = True
        try:
            return default_hooks.allreduce_hook(dist.group.WORLD, bucket)
        finally:
            counter.paused = False

    ddp.register_comm_hook(None, counted)


@contextmanager
def quiet_redistribution():
    """Gathering a 2-D (FSDP x TP) weight whole for a comparison takes one all-gather per mesh
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


def full_weights(model) -> dict:
    """The whole model's weights on every rank, as float32 on the CPU (gathered from the shards for
    FSDP and tensor parallelism; a collective: every rank must call it)."""
    inner = getattr(model, "module", model)              # DDP wraps the model
    with quiet_redistribution():
        return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().float()
                for k, v in inner.state_dict().items()}


def train(model, optimizer, args, data_mesh=None, after_step=None, first_step: int = 0) -> dict:
    """Episode 9's training loop, measured, from step ``first_step`` to ``args.steps``.

    Each rank trains on its share of each global batch: shares of the ranks of ``data_mesh`` (a
    mesh dimension: the tensor-parallel ranks of one pair share a batch), or of all ranks. With
    ``after_step`` and ``args.save_at``, ``after_step(model, optimizer, step, args.checkpoint)``
    runs after step ``args.save_at`` (its collectives are not counted), and rank 0 keeps the final
    weights in ``args.out / "final-weights.pt"`` for a resumed run to compare with.

    Returns
    -------
    dict
        ``bytes``: this rank's bytes of parameters (held and allocated), gradients and optimizer
        state after the first backward, and ``params_peak``, the most parameter bytes allocated from
        the start of forward to the start of backward; ``comm``: the collectives of one step, after
        ``WARMUP`` steps; ``losses`` (averaged over the ranks), ``reference_losses`` and
        ``max_weight_difference`` from one process that trained on the whole batch.
    """
    from torch.nn.parallel import DistributedDataParallel

    rank, world = dist.get_rank(), dist.get_world_size()
    data_rank, data_world = (data_mesh.get_local_rank(), data_mesh.size()) if data_mesh else (rank, world)
    device = next(model.parameters()).device    # a DTensor's: its local tensor's
    counter = CommCounter()
    if isinstance(model, DistributedDataParallel):
        _count_ddp_allreduces(model, counter)
    local = getattr(optimizer, "optim", optimizer)        # ZeroRedundancyOptimizer's own AdamW
    losses, memory = [], {}
    with counter:
        for step in range(first_step, args.steps):
            counter.counting = step >= first_step + WARMUP   # the steady state: DDP rebuilds its buckets
            optimizer.zero_grad()
            x, y = local_batch(step, data_rank, data_world)
            with PeakParams(model) as peak:             # gathered parameters and shards, in forward
                loss = loss_fn(model, x.to(device), y.to(device))
            loss.backward()              # FSDP: all-gathers (ZeRO-3), reduce-scatters the gradients
            if step == first_step:       # gradients exist now, optimizer state after the step
                memory = state_bytes(model, local)
                memory["params_peak"] = peak.bytes
            optimizer.step()
            losses.append(loss.detach().float())
            if after_step is not None and args.save_at and step + 1 == args.save_at:
                counter.paused = True    # the checkpoint's own collectives are not a step's
                after_step(model, optimizer, step + 1, args.checkpoint)
                counter.paused = False
    memory["optimizer"] = state_bytes(model, local)["optimizer"]
    mean_losses = torch.stack(losses).to(device)
    dist.all_reduce(mean_losses)         # each rank's loss is over its share: average them
    weights = full_weights(model)
    reference_losses, reference = reference_run(args.steps, args.width, args.hidden, args.blocks)
    if after_step is not None and args.save_at and rank == 0:
        torch.save(weights, args.out / "final-weights.pt")
    return {"bytes": memory, "comm": counter.as_dict(max(1, args.steps - first_step - WARMUP)),
            "losses": (mean_losses / world).tolist(), "reference_losses": reference_losses[first_step:],
            "max_weight_difference": max_difference(weights, reference)}


def summary(args, results: dict) -> dict:
    """What a rank of the FSDP script writes: its place, the whole model's bytes and shapes, and each
    strategy's ``train`` result; rank 0 prints one line per strategy."""
    from ..numbers import readable

    full = make_model(args.width, args.hidden, args.blocks)
    rank = dist.get_rank()
    if rank == 0:
        for name, r in results.items():
            print(f"[rank 0] {name:10s} loss {readable(r['losses'][0], digits=5)} → "
                  f"{readable(r['losses'][-1], digits=5)};"
                  f" max |Δ| vs one process {readable(r['max_weight_difference'])}", flush=True)
    return {"world_size": dist.get_world_size(), "rank": rank, "backend": dist.get_backend(),
            "device": "cuda" if dist.get_backend() == "nccl" else "cpu",
            "full_params_bytes": sum(p.numel() * p.element_size() for p in full.parameters()),
            "param_shapes": {k: list(p.shape) for k, p in full.named_parameters()},
            "strategies": results}


def block_report(split, tp_mesh, args) -> dict:
    """One MLP block split by ``split(block, tp_mesh)``, one forward and backward on the whole batch:
    the local shapes of its weights and activations, the collectives of each pass, and the largest
    difference between its output and the dense block's."""
    device = tp_mesh.device_type
    block = split(make_model(args.width, args.hidden, 1)[1].to(device), tp_mesh)
    dense = make_model(args.width, args.hidden, 1)[1].to(device)     # the same seeded weights
    g = torch.Generator().manual_seed(5)
    x = torch.randn(GLOBAL_BATCH, args.width, generator=g).to(device).requires_grad_(True)
    shapes = {}
    hook = block.up.register_forward_hook(lambda m, i, out: shapes.update(hidden=list(out.shape)))
    forward, backward = CommCounter(), CommCounter()
    with forward:
        out = block(x)
    with backward:
        out.sum().backward()
    hook.remove()
    expected = dense(x.detach())
    return {"up_weight": list(block.up.weight.to_local().shape),
            "down_weight": list(block.down.weight.to_local().shape),
            "input": list(x.shape), "hidden_activation": shapes["hidden"], "output": list(out.shape),
            "forward": forward.as_dict(), "backward": backward.as_dict(),
            "output_difference": float((out - expected).detach().abs().max()),
            "rank": dist.get_rank(), "world_size": dist.get_world_size()}


def report_resumed(model, args, step: int) -> None:
    """After a resumed run: its weights against the uninterrupted sharded run's (``final-weights.pt``)
    and one process's; rank 0 writes ``resumed-<world>.json`` under ``args.out`` and prints a line."""
    from ..numbers import readable

    weights = full_weights(model)                    # a collective: every rank
    if dist.get_rank() != 0:
        return
    saved = json.loads((args.checkpoint / "position.json").read_text())
    _, reference = reference_run(args.steps, args.width, args.hidden, args.blocks)
    first_run = torch.load(args.out / "final-weights.pt")
    world = dist.get_world_size()
    result = {"saved_world_size": saved["world_size"], "world_size": world, "resumed_at": step,
              "steps": args.steps, "vs_uninterrupted_sharded": max_difference(weights, first_run),
              "vs_one_process": max_difference(weights, reference),
              "shard_rows": {k: list(v.to_local().shape) for k, v in model.state_dict().items()}}
    write_json(args.out / f"resumed-{world}.json", result)
    print(f"[rank 0] saved by {saved['world_size']} ranks at step {step}, resumed by {world}, trained "
          f"to step {args.steps}: max |Δ| vs the {saved['world_size']}-rank run "
          f"{readable(result['vs_uninterrupted_sharded'])}, vs one process "
          f"{readable(result['vs_one_process'])}", flush=True)
