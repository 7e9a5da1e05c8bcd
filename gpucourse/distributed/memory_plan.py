"""Plan the per-GPU memory of a sharded training job at 64 to 1,024 GPUs, in one CPU process.

PyTorch's own tests run FSDP at any world size in one process with a *fake* process group: a
backend, ``"fake"``, whose collectives return at once, and ``FakeTensorMode``, whose tensors have
shapes, dtypes and devices but no memory. FSDP2 then shards a 70-billion-parameter model as it
would on one rank of 64 or 1,024 GPUs, and ``count`` adds up the bytes that rank would hold
(torchtitan estimates memory this way). Episode 13 writes the sharding in a cell (``fully_shard``
on fake tensors, on a fake process group); ``count`` reads the shards it made, and
``plan`` falls back to the closed form FSDP's sharding implies, and says so, when the internal APIs
it uses (``torch.testing._internal.distributed.fake_pg``, ``torch._subclasses.fake_tensor``) fail.

Per GPU, with AdamW in float32 (episode 5's 16 bytes per parameter, sharded):

* parameters, gradients, two Adam moments: this rank's shard of each (``torch.chunk`` of dim 0);
* the root unit (embeddings, final norm, output layer) gathered in bfloat16 for the whole step: with
  the default ``reshard_after_forward``, FSDP2 does not reshard the root after forward, as backward
  needs it at once (``_fsdp_state.py``, ``_lazy_init``), and its bfloat16
  gradients live until the root's reduce-scatter at the end of backward (2 + 2 bytes);
* a decoder layer gathered while it computes, the next one gathered ahead (prefetch), and one
  layer's bfloat16 gradients before its reduce-scatter (3 x 2 bytes per parameter of a layer);
* activations, the CUDA context and fragmentation are left out: activations depend on the batch and
  sequence (episode 10), so a row that "fits" here is a lower bound, not a promise.
"""

from __future__ import annotations

import math

from torch import nn

MODELS = ("Llama-2-7B", "Llama-3.1-70B")
INTERNAL_API = ("torch.testing._internal.distributed.fake_pg.FakeStore with backend 'fake', and "
                "torch._subclasses.fake_tensor.FakeTensorMode")


class Layer(nn.Module):
    """The weights of one Llama decoder layer (attention and MLP projections, two norms)."""

    def __init__(self, c: dict):
        super().__init__()
        h, q, kv = c["hidden_size"], c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
        self.q_proj, self.k_proj = nn.Linear(h, q, bias=False), nn.Linear(h, kv, bias=False)
        self.v_proj, self.o_proj = nn.Linear(h, kv, bias=False), nn.Linear(q, h, bias=False)
        inter = c["intermediate_size"]
        self.gate_proj, self.up_proj = nn.Linear(h, inter, bias=False), nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)
        self.input_norm, self.post_norm = nn.Parameter(nn.init.ones_(nn.Linear(h, 1).weight[0])), None
        self.post_norm = nn.Parameter(self.input_norm.detach().clone())


def llama(c: dict, layers: int | None = None) -> nn.Module:
    """A Llama model's parameters with the shapes of ``c`` (an ``llm.CONFIGS`` entry), ``layers`` of its
    decoder layers (all of them by default)."""
    model = nn.Module()
    model.embed = nn.Embedding(c["vocab_size"], c["hidden_size"])
    model.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"] if layers is None else layers))
    model.norm = nn.Parameter(model.embed.weight[0].detach().clone())
    model.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
    return model


def closed_form(c: dict, world: int, rank: int = 0) -> dict:
    """The same bytes without building anything: each tensor's dim 0 chunked ``world`` ways."""
    from ..feasibility import llama_parameters

    h, q, kv, inter = c["hidden_size"], c["num_attention_heads"] * c["head_dim"], \
        c["num_key_value_heads"] * c["head_dim"], c["intermediate_size"]
    layer = [(q, h), (kv, h), (kv, h), (h, q), (inter, h), (inter, h), (h, inter), (h,), (h,)]
    shapes = [(c["vocab_size"], h)] + layer * c["num_hidden_layers"] + [(h,), (c["vocab_size"], h)]
    held = sum(_chunk_rows(s[0], world, rank) * math.prod(s[1:]) for s in shapes)
    per_layer = sum(math.prod(s) for s in layer)
    root = 2 * c["vocab_size"] * h + h                   # embeddings, output layer, final norm
    return _bytes(held, llama_parameters(c), root, per_layer, world, "closed form")


def _chunk_rows(rows: int, world: int, rank: int) -> int:
    """Rows of ``torch.chunk(tensor, world)[rank]`` (0 where torch.chunk gives fewer chunks)."""
    size = math.ceil(rows / world)
    return max(0, min(size, rows - rank * size))


def _bytes(held: int, total: int, root: int, layer: int, world: int, how: str, gathered_size: int = 2) -> dict:
    """``gathered_size``: the bytes of a gathered value, bfloat16's 2 under section 1's policy (the fake
    plan reads it from the policy FSDP was given)."""
    state = 16 * held                                     # fp32 weights + grads + 2 Adam moments
    root_bytes = 2 * gathered_size * root                 # the root whole all step: weights, grads
    layer_bytes = 3 * gathered_size * layer               # a layer, the prefetched next, one's grads
    gathered = root_bytes + layer_bytes
    return {"parameters": total, "world": world, "held": held, "state_bytes": state,
            "root_bytes": root_bytes, "layer_bytes": layer_bytes, "gathered_bytes": gathered,
            "gathered_size": gathered_size, "per_gpu_bytes": state + gathered, "how": how}


def activation_bytes(c: dict, tokens: int) -> int:
    """A floor for one sequence of ``tokens`` with every layer checkpointed: each layer's bfloat16 input
    kept for backward, and the float32 logits with their gradient."""
    return c["num_hidden_layers"] * tokens * c["hidden_size"] * 2 + 2 * tokens * c["vocab_size"] * 4


def smallest_world(c: dict, memory: float, worlds=None) -> int | None:
    """The fewest GPUs (powers of two up to 65,536, or ``worlds``) at which the closed form's bytes per
    GPU are at most ``memory``; None if none are."""
    for world in worlds or [2 ** k for k in range(17)]:
        if closed_form(c, world)["per_gpu_bytes"] <= memory:
            return world
    return None


def _gathered_sizes(model) -> set:
    """The bytes of a value each FSDP unit of ``model`` would all-gather: its policy's ``param_dtype``,
    or the parameter's own dtype where the policy sets none."""
    from .sharded import fsdp_param_groups

    sizes = set()
    for module in model.modules():
        if hasattr(module, "_get_fsdp_state"):
            for group in fsdp_param_groups(module._get_fsdp_state()):
                sizes |= {(group.mp_policy.param_dtype or fp.sharded_param.dtype).itemsize
                          for fp in group.fsdp_params}
    return sizes


def count(model, c: dict, world: int) -> dict:
    """The bytes per GPU of a Llama model of ``c``'s shapes, from ``model``: its root and one decoder
    layer (``llama(c, layers=1)``) as FSDP2 sharded them for one rank of ``world``, on fake tensors.

    Every decoder layer is sharded on its own and alike, so one layer's shard is counted and
    multiplied by the number of layers; the bytes of a gathered value are read from the policy each
    unit was given (bfloat16's 2 under section 1's policy). Which units are gathered at once comes
    from the closed form (``_bytes``): a fake process group moves no data.
    """
    held_layer = sum(p.to_local().numel() for p in model.layers.parameters())
    per_layer = sum(p.numel() for p in model.layers.parameters())
    root = sum(p.numel() for p in model.parameters()) - per_layer       # embeddings, norm, head
    held_root = sum(p.to_local().numel() for p in model.parameters()) - held_layer
    n = c["num_hidden_layers"]
    sizes = _gathered_sizes(model)
    if len(sizes) != 1:
        raise ValueError(f"the units would gather values of {sorted(sizes)} bytes; the plan counts one size")
    return _bytes(held_root + n * held_layer, root + n * per_layer, root, per_layer, world,
                  "fake process group", sizes.pop())


def plan(name: str, world: int, shard=None, rank: int = 0) -> dict:
    """The plan of ``name`` at ``world`` GPUs from ``shard(config, world, rank)``, which shards the
    model on a fake process group and returns ``count``'s bytes (episode 13 writes it in a cell);
    the closed form, with a note that says why, if it fails or is not given."""
    from ..llm import CONFIGS

    c = CONFIGS[name]
    if shard is None:
        return dict(closed_form(c, world, rank), model=name, rank=rank)
    try:
        result = shard(c, world, rank)
    except (ImportError, AttributeError, TypeError, RuntimeError, ValueError) as exc:
        result = closed_form(c, world, rank)
        result["note"] = (f"the fake process group failed ({type(exc).__name__}: {exc}); it uses internal APIs "
                          f"({INTERNAL_API}) that this torch may have changed. These figures are the closed form.")
    return dict(result, model=name, rank=rank)
