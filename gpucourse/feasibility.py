"""Will it fit, will it run: the course's GPU feasibility model, in closed forms and data.

Two questions decide whether a cell that is fine on a CPU stops "Run all" on a GPU:

* **what runs** on an architecture (attention backends and grouped-query support, bf16 in
  hardware, int4 kernels, Triton's tensor-core dot, FP8, TensorFlow's support), read from
  ``references/capabilities.json`` with a source for every entry;
* **how many bytes** the big tensors of a cell take at full size, in closed forms simple
  enough to quote in an episode ("this would not fit on a T4").

``tests/test_feasibility.py`` holds every full-size row of every episode against every GPU
model the course names.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

CAPABILITIES_PATH = Path(__file__).parent / "references" / "capabilities.json"

# The math backend keeps the float32 scores, their softmax and the causal mask for every
# head: about 10 bytes per score element, measured with memory.TensorMeter on torch 2.13
# (9.6 bytes at 1,024 tokens, 10.8 at 512; episode 10 §4 measures it again).
MATH_BYTES_PER_SCORE = 10


def sdpa_peak_bytes(batch: int, q_heads: int, kv_heads: int, tokens: int, head_dim: int,
                    dtype_bytes: int, backend: str) -> int:
    """Peak bytes one ``scaled_dot_product_attention`` call adds beyond q, k and v.

    Parameters
    ----------
    batch, q_heads, kv_heads, tokens, head_dim : int
        The shape of the call (``kv_heads < q_heads`` is grouped-query attention).
    dtype_bytes : int
        Bytes per value of q, k and v (2 for float16/bfloat16).
    backend : {"math", "efficient", "flash", "cudnn", "repeat_kv+efficient"}
        ``"math"`` materialises the scores (``batch × q_heads × tokens²``); the fused kernels
        keep only the output and one log-sum-exp per row; ``"repeat_kv+efficient"`` first
        copies k and v up to ``q_heads`` heads so the memory-efficient kernel accepts them.
    """
    output = batch * q_heads * tokens * (head_dim * dtype_bytes + 4)
    if backend == "math":
        return batch * q_heads * tokens * tokens * MATH_BYTES_PER_SCORE + output
    if backend in ("efficient", "flash", "cudnn"):
        return output
    if backend == "repeat_kv+efficient":
        repeated = 2 * batch * q_heads * tokens * head_dim * dtype_bytes
        return repeated + output
    raise ValueError(f"backend {backend!r} is not one of math, efficient, flash, cudnn, "
                     "repeat_kv+efficient")


def kv_cache_bytes(batch: int, tokens: int, layers: int, kv_heads: int, head_dim: int,
                   dtype_bytes: int) -> int:
    """Bytes of the key/value cache: 2 (k and v) × layers × kv_heads × head_dim per token."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes * batch * tokens


@functools.lru_cache(maxsize=1)
def capabilities() -> dict:
    """The parsed ``references/capabilities.json`` (read once)."""
    return json.loads(CAPABILITIES_PATH.read_text(encoding="utf-8"))


def torch_release(torch_version: str) -> tuple[int, int]:
    """``"2.11.0+cu128"`` → ``(2, 11)``: the release a version string belongs to."""
    match = re.match(r"\s*(\d+)\.(\d+)", str(torch_version))
    if match is None:
        raise ValueError(f"torch version {torch_version!r} does not start with "
                         "'major.minor'; pass torch.__version__, e.g. '2.11.0+cu128'.")
    return int(match[1]), int(match[2])


def _in_range(capability: tuple[int, int], bounds: list) -> bool:
    low, high = (tuple(bound) for bound in bounds)
    return low <= tuple(capability) <= high


def gqa_fused_backends(capability: tuple[int, int], torch_version: str) -> list[str]:
    """The fused SDPA backends that accept grouped-query attention on this GPU and torch.

    Grouped-query attention is ``scaled_dot_product_attention(..., enable_gqa=True)`` with
    fewer key/value heads than query heads, as transformers calls it for SmolLM2 (9 query,
    3 key/value heads). Where this list is empty, torch falls back to the math backend,
    which materialises every score: episode 10 then repeats the key/value heads itself so
    that the memory-efficient kernel runs.

    Parameters
    ----------
    capability : tuple of int
        ``torch.cuda.get_device_capability()``, e.g. ``(7, 5)`` for a T4.
    torch_version : str
        ``torch.__version__``, e.g. ``"2.11.0+cu128"``.

    Returns
    -------
    list of str
        Among ``"flash"``, ``"cudnn"``, ``"efficient"``, in that order; empty when none.

    Examples
    --------
    >>> gqa_fused_backends((7, 5), "2.11.0+cu128")
    []
    >>> gqa_fused_backends((9, 0), "2.11.0+cu128")
    ['flash', 'cudnn']
    """
    release = torch_release(torch_version)
    if release < (2, 5):
        raise ValueError(f"torch {torch_version} has no enable_gqa in "
                         "scaled_dot_product_attention (it came in 2.5); upgrade torch.")
    if len(tuple(capability)) != 2:
        raise ValueError(f"capability {capability!r} is not (major, minor); pass "
                         "torch.cuda.get_device_capability().")
    backends = capabilities()["sdpa"]["backends"]
    return [name for name in ("flash", "cudnn", "efficient")
            if _in_range(capability, backends[name]["compute_capability"])
            and release >= torch_release(backends[name]["gqa_since_torch"])]
