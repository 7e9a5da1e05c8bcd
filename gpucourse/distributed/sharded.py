"""What episode 13's sharding scripts share: the model, the data, the device, the counting.

``fsdp_train``, ``tp_mlp`` and ``dcp_reshard`` are started by torchrun, one process per rank. They
train the same small network on the same batches as one process would, so each can compare its
weights with a single-process run (``reference_run``) computed on the spot.

* ``Block`` / ``make_model``: a stack of residual MLP blocks (up-projection, ReLU, down-projection),
  the unit a transformer layer's MLP is made of; its last layer has one output row, so at world
  size 2 or 4 it does not divide by the number of ranks (FSDP pads it).
* ``batch``: the global batch of step ``t``, the same in every process (seeded by ``t``): a run
  resumed at step ``t`` sees the batches an uninterrupted run would.
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

import json
import os
import sys
from collections import defaultdict

import torch
import torch.distributed as dist
from torch import nn

from gpucourse.device import cuda_usable

N_FEATURES = 16
GLOBAL_BATCH = 64          # divisible by 1, 2 and 4 ranks


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


def make_optimizer(params, lr: float = 3e-3):
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)


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


def finish(code: int = 0) -> None:
    """Leave the process group and exit with ``code``, skipping interpreter finalisation (see above)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
