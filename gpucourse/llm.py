"""A small language model for episodes 10 and 14: from the Hugging Face Hub, or built offline.

The real model is SmolLM2-135M (``HuggingFaceTB/SmolLM2-135M``, Apache-2.0; Allal et al. 2025,
https://arxiv.org/abs/2502.02737), downloaded at one pinned revision into the course's data cache.
Where the download is not possible (``GPUCOURSE_OFFLINE=1``, no network), ``load_model`` builds
the same architecture from its configuration (``SMOLLM2_135M``, the numbers of its ``config.json``)
with random weights: memory and speed depend on the shapes and dtypes, not on the values. The
notebook prints which one it uses.

The other configurations (``CONFIGS``) are the published shapes of larger models, used only to
count parameters and cache bytes on PyTorch's ``meta`` device, where no memory is allocated.

``lora_model`` is peft's ``get_peft_model`` with one work-around: peft 0.19.0 and later refuse to
add plain LoRA layers when a torchao older than 0.16 is installed (they raise ``ImportError`` from
``is_torchao_available`` even for models that hold no torchao weights; peft 0.18.x asks only for
torchao >= 0.4, ``src/peft/import_utils.py`` at v0.18.1 and v0.19.0), and Google Colab's image has
shipped peft 0.20 with torchao 0.10. The course never replaces what Colab has, so for that one
error it tells peft, for this call only, that torchao is absent; plain LoRA does not use it
(in LoRA the only call is ``dispatch_torchao`` in ``peft/tuners/lora/torchao.py``). peft's
message is printed once per session. ``plain_lora`` is the same step as a ``with`` block, silent,
for episode 14, which calls ``get_peft_model`` in its own cell.

``TokenClock`` takes ``model.generate``'s tokens as a streamer and gives the
serving metrics by their usual names: time to first token (TTFT), inter-token latency (ITL)
and output tokens per second. ``load_chat_model`` fetches SmolLM2-135M-Instruct, whose
tokenizer has a chat template, at a pinned revision.

``attention_implementation`` chooses how the model calls attention. transformers 5.15 calls
``scaled_dot_product_attention`` with ``enable_gqa=True`` for SmolLM2's 9 query and 3 key/value
heads; in torch 2.11 only the Flash and cuDNN backends accept that, and both need compute
capability 8.0. On an older GPU (a T4) every such call would run on the math backend, whose
float32 scores grow with the square of the sequence. There the course registers ``sdpa_repeat_kv``:
the key/value heads are repeated first, so the call has equal head counts and the
memory-efficient kernel takes it. ``sdpa_backend_problem`` says, in PyTorch's own words, why a
backend cannot run a call.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import time
import warnings

from . import settings

REPO_ID = "HuggingFaceTB/SmolLM2-135M"
# The Hub commit the course pins (https://huggingface.co/HuggingFaceTB/SmolLM2-135M/tree/<REVISION>):
# config, tokenizer and model.safetensors (269 MB).
REVISION = "4e53f736cbb20a9a0f56b4c4bf378d9f306ff915"
LICENCE = "Apache-2.0"
MODEL_FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"]

# SmolLM2-135M's architecture, from its config.json at REVISION (a Llama-type decoder with
# grouped-query attention: 9 query heads share 3 key/value heads).
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                    rope_theta=100000.0, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=True,
                    bos_token_id=0, eos_token_id=0)

# Published shapes of larger Llama-type models (config.json on the Hub; the Llama 2 and Llama 3 papers,
# Touvron et al. 2023, https://arxiv.org/abs/2307.09288, and Grattafiori et al. 2024, Table 3,
# https://arxiv.org/abs/2407.21783). Llama 2 7B has no grouped-query attention (32 KV heads = 32 heads).
CONFIGS = {
    "SmolLM2-135M": SMOLLM2_135M,
    "Llama-3.2-1B": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True),
    "Llama-2-7B": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False),
    "Llama-3.1-70B": dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                          num_attention_heads=64, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
}

# The GPUs of episode 10's fit tables: {column name: (key in the course's one GPU table,
# gpucourse/references/capabilities.json, read through feasibility.gpu_models(); model name in
# references/bands.json for the datasheet bandwidth, or None where the course has none)}.
# Their memory is what torch reports for each card (see capabilities.json's sources).
FIT_GPUS = {"T4": ("T4", "Tesla T4"), "L4": ("L4", "NVIDIA L4"),
            "A100 80GB": ("A100 80GB", "NVIDIA A100 80GB SXM"),
            "H100 SXM": ("H100 80GB", "NVIDIA H100 SXM"), "H200": ("H200", "NVIDIA H200"),
            "GH200": ("GH200", None), "B200": ("B200", None),
            "RTX PRO 6000": ("G4", None)}

# SmolLM2-135M-Instruct: the same architecture tuned to chat, with a chat template in its
# tokenizer (https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/tree/<INSTRUCT_REVISION>).
INSTRUCT_REPO_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
INSTRUCT_REVISION = "12fd25f77366fa6b3b4b768ec3050bf629380bac"

# What int4 weights can still fail with where the installed torchao lacks a kernel for this device:
# ImportError (a format that needs a separate package: torchao 0.14's default "plain" int4 format
# needs fbgemm-gpu-genai in 0.14-0.15 and `mslk` from 0.16), NotImplementedError and ValueError
# (no packing for this device or layout) and RuntimeError.
INT4_UNAVAILABLE = (ImportError, NotImplementedError, ValueError, RuntimeError)


def int4_config(group_size: int = 64):
    """torchao's int4 weight-only config with the tinygemm kernel's layout, in any torchao version.

    From torchao 0.14 the config defaults to version 2 with a "plain" format whose kernels need a
    separate package (fbgemm-gpu-genai in 0.14 and 0.15, ``mslk`` from 0.16) and Hopper;
    ``tile_packed_to_4d`` is tinygemm there (``quant_api.py`` at v0.13.0 and v0.14.1). Older
    versions (Colab's 0.10) use tinygemm by default.
    ``set_inductor_config=False`` (a field in torchao 0.10 and 0.17) keeps float32 matmuls in FP32.
    """
    import dataclasses

    from torchao.quantization import Int4WeightOnlyConfig

    # set_inductor_config=False: the default (True) makes quantize_ call
    # torch.set_float32_matmul_precision("high"), TF32 for every later float32 matmul.
    options = dict(group_size=group_size, set_inductor_config=False)
    if "int4_packing_format" in {f.name for f in dataclasses.fields(Int4WeightOnlyConfig)}:
        options["int4_packing_format"] = "tile_packed_to_4d"
    return Int4WeightOnlyConfig(**options)


def why_no_int4(device) -> str | None:
    """Why tinygemm's int4 kernel cannot run on ``device``, or None where it can.

    Asked before trying: on a GPU older than Ampere the kernel is not compiled in, and the failure
    arrives as an asynchronous CUDA error that can break the rest of the session.
    """
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return "torchao's int4 kernel (tinygemm) runs on CUDA GPUs only"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 0):
        return (f"torchao's int4 kernel (tinygemm) needs compute capability 8.0 (Ampere) or newer; "
                f"{torch.cuda.get_device_name(device)} is {major}.{minor}")
    return None


def gpus() -> dict:
    """``{name: {"memory_bytes", "bandwidth_gbs", "model"}}`` for the GPUs of ``FIT_GPUS``.

    ``memory_bytes`` is the card's memory as torch reports it, from the course's one GPU table
    (``feasibility.gpu_models()``); ``bandwidth_gbs`` is the datasheet bandwidth in GB/s from
    the bands file, or None where the course has no datasheet figure for that card.
    """
    from .feasibility import gpu_models
    from .reference import bands

    table, datasheets = gpu_models(), bands()["models"]
    return {name: {"memory_bytes": table[key]["total_memory"], "model": table[key]["name"],
                   "bandwidth_gbs": datasheets[sheet]["memory_gbs"] if sheet else None}
            for name, (key, sheet) in FIT_GPUS.items()}


@contextlib.contextmanager
def _quiet_imports():
    """Hide the log lines torchao and transformers print while importing (not errors)."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree", "transformers")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def import_libraries() -> dict:
    """Import transformers, peft and torchao once, quietly; return their versions."""
    with _quiet_imports():
        import peft
        import torchao
        import transformers

    # after the quiet block, which restores the loggers' levels on leaving: generate()'s
    # advice (e.g. on assisted decoding's own arguments) would otherwise reach the learner
    transformers.logging.set_verbosity_error()
    # torchao 0.13 and later warn that Int8WeightOnlyConfig's "version 1" is deprecated; version 2
    # does not exist in Colab's torchao 0.10, so the course keeps the default and hides that notice
    # (only that one). torchao 0.18 removes version 1; its int8 path still dequantizes the whole
    # matrix without torch.compile (int8_tensor.py at v0.18.0), as episode 14 says.
    warnings.filterwarnings("ignore", message=r"(Config )?Deprecation", category=UserWarning, module=r"torchao\.")
    return {"transformers": transformers.__version__, "peft": peft.__version__, "torchao": torchao.__version__}


def llama_config(name: str = "SmolLM2-135M", **changes):
    """A ``transformers.LlamaConfig`` with the shapes of ``name`` (a key of ``CONFIGS``), changed by ``changes``."""
    if name not in CONFIGS:
        raise ValueError(f"unknown configuration {name!r}; choose one of {sorted(CONFIGS)}.")
    with _quiet_imports():
        from transformers import LlamaConfig
    return LlamaConfig(**{**CONFIGS[name], **changes})


def count_parameters(config) -> int:
    """Parameters of a Llama-type model with ``config``, counted on the meta device (no memory used)."""
    import torch

    with _quiet_imports():
        from transformers import LlamaForCausalLM
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    return sum(p.numel() for p in model.parameters())


def _download_errors() -> tuple:
    """What a failed download or load raises: OSError covers the Hub's HTTP errors, offline mode and
    missing files; httpx's errors are timeouts and refused connections; ValueError a corrupt file."""
    import httpx
    from huggingface_hub.errors import EntryNotFoundError

    return (OSError, ValueError, RuntimeError, EntryNotFoundError, httpx.HTTPError)


def download(repo_id: str = REPO_ID, revision: str = REVISION) -> str:
    """The local folder of ``repo_id`` at ``revision``, fetched into the course's data cache."""
    from huggingface_hub import snapshot_download

    from .data import cache

    return snapshot_download(repo_id, revision=revision, allow_patterns=MODEL_FILES,
                             cache_dir=cache.folder("huggingface"))


def load_chat_model(*, device, dtype):
    """SmolLM2-135M-Instruct and its tokenizer (with a chat template), or why not.

    Returns
    -------
    model, tokenizer, description
        ``model`` and ``tokenizer`` are None where the download is not possible (offline, no
        network); ``description`` then says why, for the notebook to print.
    """
    import_libraries()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if settings.offline():
        return None, None, "no chat model: GPUCOURSE_OFFLINE=1"
    try:
        folder = download(INSTRUCT_REPO_ID, INSTRUCT_REVISION)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except _download_errors() as exc:
        return None, None, f"no chat model: {type(exc).__name__}: {str(exc)[:200]}"
    return model, tokenizer, (f"{INSTRUCT_REPO_ID} at revision {INSTRUCT_REVISION[:7]} "
                              f"({LICENCE}), {dtype} on {device}")


class TokenClock:
    """A ``generate(streamer=...)`` streamer that notes when each step's tokens arrive.

    ``generate`` first hands it the prompt, then the tokens of each step (one per sequence, or
    several accepted at once in assisted decoding) as a CPU tensor, which has waited for the GPU.

    Parameters
    ----------
    sync : callable, optional
        Waits for the device before each clock reading (``timing.synchronizer``).
    """

    def __init__(self, sync=None):
        self._sync = sync or (lambda: None)
        self.start = None
        self.arrivals = []            # (seconds since start, tokens of that step per sequence)

    def put(self, value):
        self._sync()
        now = time.perf_counter()
        if self.start is None:        # the prompt: the clock starts
            self.start = now
            return
        per_sequence = value.shape[-1] if value.dim() > 1 else 1
        self.arrivals.append((now - self.start, per_sequence))

    def end(self):
        """Called by ``generate`` at the end; nothing to do."""

    def metrics(self, batch: int = 1) -> dict:
        """TTFT, inter-token latency (median and 90th percentile) and output tokens per second.

        ``batch`` sequences decoded together share each step's time: tokens per second per user
        is one sequence's tokens over the time, in total it is that times ``batch``.
        """
        import statistics

        if len(self.arrivals) < 2:
            raise ValueError(f"{len(self.arrivals)} step(s) recorded; generate at least 2 new "
                             "tokens with streamer=this clock, then ask for the metrics.")
        times = [t for t, _ in self.arrivals]
        gaps = sorted(b - a for a, b in zip(times, times[1:]))
        tokens = sum(n for _, n in self.arrivals)
        return {"ttft_s": times[0], "itl_p50_s": statistics.median(gaps),
                "itl_p90_s": gaps[min(len(gaps) - 1, int(0.9 * len(gaps)))],
                "tokens_per_s_per_user": tokens / times[-1],
                "tokens_per_s_total": batch * tokens / times[-1]}


def load_model(*, device, dtype, layers: int | None = None, attn_implementation: str | None = None):
    """SmolLM2-135M on ``device`` in ``dtype``: the real one if it can be had, else its architecture.

    Parameters
    ----------
    device, dtype
        Where the model goes and its weights' dtype.
    layers : int, optional
        Keep only the first ``layers`` of the 30 decoder layers (reduced and quick modes on a CPU).
    attn_implementation : str, optional
        How its layers call attention, e.g. ``attention_implementation(device)``; None keeps
        transformers' default (``"sdpa"``).

    Returns
    -------
    model, tokenizer, description
        ``tokenizer`` is None for the random-weight stand-in (text is then read as bytes, see
        ``encode``); ``description`` says which model this is, for the notebook to print.
    """
    import torch

    import_libraries()
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    changes = {} if layers is None else {"num_hidden_layers": layers}
    if attn_implementation == REPEAT_KV:
        register_repeat_kv()            # a no-op once registered; a fresh kernel needs it again
    if attn_implementation is not None:
        changes["attn_implementation"] = attn_implementation
    cut = "" if layers is None else f", only its first {layers} of 30 layers"
    reason = "GPUCOURSE_OFFLINE=1" if settings.offline() else None
    if reason is None:
        try:
            folder = download()
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **changes).to(device).eval()
            tokenizer = AutoTokenizer.from_pretrained(folder)
            return model, tokenizer, (f"{REPO_ID} at revision {REVISION[:7]} ({LICENCE}), pretrained weights"
                                      f"{cut}, {dtype} on {device}")
        except _download_errors() as exc:   # no network, a timeout, a missing or corrupt file
            reason = f"the download failed: {type(exc).__name__}: {str(exc)[:200]}"
    settings.allow_stand_in(REPO_ID, reason)
    torch.manual_seed(0)
    config = llama_config("SmolLM2-135M", **changes)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    return model, None, (f"SmolLM2-135M's architecture from its configuration with RANDOM weights{cut}, "
                         f"{dtype} on {device} ({reason}); memory and speed are the real model's, its text is noise")


def encode(tokenizer, text: str):
    """Token ids of ``text``: the model's tokenizer, or the text's UTF-8 bytes when there is none."""
    import torch

    if tokenizer is None:
        return torch.tensor(list(text.encode("utf-8")))
    return torch.tensor(tokenizer(text)["input_ids"])


def tensor_bytes(tensor) -> int:
    """Bytes a tensor holds, also for quantized tensor subclasses (their inner tensors added up)."""
    if hasattr(tensor, "__tensor_flatten__"):
        names, _ = tensor.__tensor_flatten__()
        return sum(tensor_bytes(getattr(tensor, name)) for name in names)
    return tensor.numel() * tensor.element_size()


def model_bytes(model) -> int:
    """Bytes of a model's parameters and buffers (each shared tensor once), quantized ones included."""
    seen, total = set(), 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor_bytes(tensor)
    return total


def weight_dtype(device):
    """16 bits on a GPU (bfloat16 where CUDA runs it natively), float32 on a CPU.

    Episode 10 writes this function in a cell; episode 14, which loads the same model, calls it
    here (tests/test_taught_ep10.py keeps the two the same code).
    """
    import torch

    if device.type != "cuda":           # float16 runs on Apple's GPU on any macOS
        return torch.float32 if device.type == "cpu" else torch.float16
    native = torch.cuda.is_bf16_supported(including_emulation=False)   # Ampere on
    return torch.bfloat16 if native else torch.float16


def aten_calls(fn):
    """Call ``fn()`` and count the ATen operator calls it makes, by operator name.

    A ``TorchDispatchMode`` sees every call that reaches PyTorch's dispatcher below autograd:
    views, matrix products, additions, concatenations; composite operators arrive as the
    operators they are made of. Returns ``(fn's result, collections.Counter)``.
    """
    import collections

    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with _Count() as counter:
        result = fn()
    return result, counter.calls


def cache_bytes(cache) -> int:
    """Bytes of the keys and values a transformers cache holds, added up layer by layer.

    Episode 10 writes this function out in a cell (tests/test_taught_ep10.py keeps the two
    equal); later cells and the exercises' checks call it from here.
    """
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


_LAYER = re.compile(r"(?P<stack>.+\.layers)\.(?P<index>\d+)")


def device_map_lines(device_map: dict) -> list[str]:
    """One line per device of an accelerate ``device_map``, consecutive layers as one range.

    ``{"model.embed_tokens": 0, "model.layers.0": 0, ..., "lm_head": 1}`` gives
    ``["cuda:0 ← model.embed_tokens, model.layers.0-15", "cuda:1 ← model.layers.16-31, …"]``.
    Integer devices are CUDA GPUs (accelerate's convention); "cpu" and "disk" stay as named.
    """
    grouped: dict = {}
    for name, where in device_map.items():
        grouped.setdefault(where, []).append(name)
    lines = []
    for where, names in grouped.items():
        parts: list = []              # module names, or [stack, first, last] for a run of layers
        for name in names:
            layer = _LAYER.fullmatch(name)
            if (layer and parts and isinstance(parts[-1], list) and parts[-1][0] == layer["stack"]
                    and parts[-1][2] + 1 == int(layer["index"])):
                parts[-1][2] += 1
            elif layer:
                parts.append([layer["stack"], int(layer["index"]), int(layer["index"])])
            else:
                parts.append(name or "the whole model")     # "" is the root module
        shown = [part if isinstance(part, str) else
                 f"{part[0]}.{part[1]}" + (f"-{part[2]}" if part[2] > part[1] else "")
                 for part in parts]
        label = f"cuda:{where}" if isinstance(where, int) else str(where)
        lines.append(f"{label} ← {', '.join(shown)}")
    return lines


# --- Attention: which implementation, and why a backend cannot run ---------------------------

REPEAT_KV = "sdpa_repeat_kv"


def sdpa_repeat_kv_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                             **kwargs):
    """SDPA with each key/value head repeated for its group of query heads.

    Episode 14 writes this function in a cell (``sdpa_repeat_kv``) and registers it; episode 10
    registers this copy through ``attention_implementation`` (tests/test_llm_attention.py keeps
    the two the same code). The call SDPA then sees has equal head counts and no
    ``enable_gqa``, which the memory-efficient kernel accepts on GPUs older than Ampere; the
    result is the same attention as ``"sdpa"`` (tested, with padding and from a cache). The
    repeat runs on every call, decode steps included: each step writes and reads the layer's
    whole cache with the query heads' count of heads, a fix for prefill memory that costs
    decode bytes. ``is_causal`` follows transformers' rule for SDPA: causal only in a prefill
    without a mask (``sdpa_mask`` leaves the mask out when causality alone is enough).
    """
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import repeat_kv

    groups = module.num_key_value_groups
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    is_causal = attention_mask is None and query.shape[2] > 1   # a prefill, no padding
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                         dropout_p=dropout, scale=scaling,
                                         is_causal=is_causal)
    return out.transpose(1, 2).contiguous(), None


def register_repeat_kv() -> str:
    """Register ``REPEAT_KV`` with transformers (once) and return its name.

    The attention function is ``sdpa_repeat_kv_attention``; its mask is SDPA's own, so padded
    batches are masked exactly as with ``"sdpa"``.
    """
    with _quiet_imports():
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    if REPEAT_KV not in AttentionInterface._global_mapping:
        AttentionInterface.register(REPEAT_KV, sdpa_repeat_kv_attention)
        AttentionMaskInterface.register(REPEAT_KV, sdpa_mask)
    return REPEAT_KV


def attention_implementation(device) -> str:
    """The ``attn_implementation`` to load SmolLM2 with on ``device``.

    ``"sdpa"`` where a fused backend accepts grouped-query attention: a CUDA GPU for which
    ``feasibility.gqa_fused_backends`` lists one, and the CPU (its Flash kernel takes
    ``enable_gqa``). Elsewhere (a T4 with torch 2.11) it registers and returns ``REPEAT_KV``.
    """
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return "sdpa"
    from .feasibility import gqa_fused_backends

    capability = torch.cuda.get_device_capability(device)
    if gqa_fused_backends(tuple(capability), torch.__version__):
        return "sdpa"
    return register_repeat_kv()


def prefill_backend(device, dtype, attn_implementation: str) -> str:
    """The SDPA backend a prefill with ``attn_implementation`` runs on, as ``feasibility`` names it.

    On a CUDA GPU this is ``feasibility.prefill_backend`` for its compute capability and the
    installed torch; on the CPU it is ``"flash"`` (its Flash kernel takes grouped-query attention).
    """
    import torch

    if attn_implementation not in ("sdpa", REPEAT_KV):
        raise ValueError(f"attn_implementation {attn_implementation!r} is neither 'sdpa' nor "
                         f"{REPEAT_KV!r}; pass what attention_implementation(device) returned.")
    device = torch.device(device)
    if device.type != "cuda":
        return "flash"
    from . import feasibility

    capability = tuple(torch.cuda.get_device_capability(device))
    return feasibility.prefill_backend(capability, torch.__version__, str(dtype).removeprefix("torch."),
                                       repeats_kv=attn_implementation == REPEAT_KV)


def does_not_fit(what: str, predicted_bytes: int, device) -> str:
    """Free what an ``OutOfMemoryError`` left behind and say, in a line, what did not fit.

    Call it after the ``except`` block, not inside: the exception's traceback holds the
    tensors of the failed call until the block ends.
    """
    import torch

    from .memory import format_bytes

    gc.collect()
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        props = torch.cuda.get_device_properties(device)
        gpu = f"{props.name} has {format_bytes(props.total_memory)}"
    else:
        gpu = "this device ran out of memory"
    return (f"{what}: does not fit on this GPU (predicted at least {format_bytes(predicted_bytes)}; "
            f"{gpu}); going on with the next row")


# What select_sdp_backend warns before each backend's reasons when no allowed backend can run
# (sdp_utils.cpp; older versions write "CuDNN"), keyed by the SDPBackend name.
SDPA_WARNING_HEADERS = {"EFFICIENT_ATTENTION": "memory efficient kernel not used because:",
                        "FLASH_ATTENTION": "flash attention kernel not used because:",
                        "CUDNN_ATTENTION": "cudnn attention kernel not used because:"}
_TRIGGERED = re.compile(r"\s*\(Triggered internally at .*?\)\s*$", re.DOTALL)


def strip_trigger(message: str) -> str:
    """A C++ warning's text without PyTorch's " (Triggered internally at file:line.)" suffix."""
    return _TRIGGERED.sub("", str(message)).strip()


def reason_after_header(backend_name: str, messages) -> str | None:
    """The first reason ``select_sdp_backend`` gave for ``backend_name``, or None.

    Parameters
    ----------
    backend_name : str
        An ``SDPBackend`` name with a header, e.g. ``"FLASH_ATTENTION"``.
    messages : iterable of str
        The warnings of one failed call, in order: a header per backend, then its reasons.
    """
    if backend_name not in SDPA_WARNING_HEADERS:
        raise ValueError(f"no warning header for backend {backend_name!r}; "
                         f"use one of {sorted(SDPA_WARNING_HEADERS)}.")
    headers = set(SDPA_WARNING_HEADERS.values())
    inside = False
    for text in map(strip_trigger, messages):
        if text.lower() in headers:
            inside = text.lower() == SDPA_WARNING_HEADERS[backend_name]
        elif inside and text:
            return text
    return None


def _own_reason(backend_name: str, query, key, value, is_causal: bool, enable_gqa: bool):
    """What ``torch.backends.cuda.can_use_<backend>(params, debug=True)`` warns, if anything."""
    import torch

    ask = {"FLASH_ATTENTION": torch.backends.cuda.can_use_flash_attention,
           "EFFICIENT_ATTENTION": torch.backends.cuda.can_use_efficient_attention,
           "CUDNN_ATTENTION": torch.backends.cuda.can_use_cudnn_attention}.get(backend_name)
    if ask is None:
        return None
    params = torch.backends.cuda.SDPAParams(query, key, value, None, 0.0, is_causal, enable_gqa)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            ask(params, debug=True)
        except RuntimeError:   # PyTorch's CUDA build asks the driver even for CPU tensors, and
            return None        # fails where there is none: the exception's text is the reason
    return next((strip_trigger(w.message) for w in seen if strip_trigger(w.message)), None)


def sdpa_backend_problem(backend, query, key, value, *, is_causal: bool = True,
                         enable_gqa: bool = False) -> str | None:
    """None where ``backend`` runs this attention call; otherwise PyTorch's reason for it.

    The reason is, in this order: the first one PyTorch warned under that backend's own
    header while the call failed; what ``can_use_<backend>(..., debug=True)`` warns; the
    first line of the exception (a CPU gives no warnings).
    """
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(query, key, value, is_causal=is_causal,
                                               enable_gqa=enable_gqa)
            return None
        except RuntimeError as exc:         # "No available kernel" and its CPU twin
            error = str(exc).strip().splitlines()[0]
    reason = None
    if backend.name in SDPA_WARNING_HEADERS:
        reason = reason_after_header(backend.name, [str(w.message) for w in seen])
    return reason or _own_reason(backend.name, query, key, value, is_causal, enable_gqa) or error


_PEFT_NOTICE_SHOWN: list = []    # non-empty once peft's torchao message has been printed


@contextlib.contextmanager
def _torchao_hidden_from_peft():
    from unittest import mock

    import peft.tuners.lora.torchao as lora_torchao

    with mock.patch.object(lora_torchao, "is_torchao_available", lambda: False):
        yield


@contextlib.contextmanager
def plain_lora():
    """Inside, peft adds plain LoRA layers even beside a torchao it refuses (module docstring).

    peft 0.19 and later raise ``ImportError("Found an incompatible version of torchao ...")``
    from ``is_torchao_available`` when torchao is older than 0.16 (Colab: peft 0.20, torchao
    0.10), even for a model without torchao weights. Inside this block that one error reads as
    "torchao is absent", for LoRA's dispatch only; every other answer and error is peft's own.
    """
    from unittest import mock

    import peft.tuners.lora.torchao as lora_torchao

    asked = lora_torchao.is_torchao_available

    def available():
        try:
            return asked()
        except ImportError as exc:
            if "incompatible version of torchao" in str(exc):
                return False
            raise

    with mock.patch.object(lora_torchao, "is_torchao_available", available):
        yield


def lora_model(model, config):
    """``peft.get_peft_model(model, config)``, working around peft's refusal of an old torchao (module docstring)."""
    import_libraries()
    from peft import get_peft_model

    try:
        return get_peft_model(model, config)
    except ImportError as exc:
        if "incompatible version of torchao" not in str(exc):
            raise
        if not _PEFT_NOTICE_SHOWN:        # once per session, not once per model
            print(f"peft says: {exc}. Plain LoRA does not use torchao, so the course hides it "
                  "from peft for each LoRA model it makes.")
            _PEFT_NOTICE_SHOWN.append(True)
    with _torchao_hidden_from_peft():
        return get_peft_model(model, config)


def bitsandbytes_status(on_gpu: bool) -> str | None:
    """None when QLoRA's 4-bit weights can be tried here; otherwise why not, in a sentence."""
    import importlib.util

    if not on_gpu:
        return ("QLoRA's 4-bit base weights come from bitsandbytes, whose 4-bit kernels run on a CUDA GPU; "
                "there is none here, so only the configuration is shown.")
    if importlib.util.find_spec("bitsandbytes") is None:
        return ("bitsandbytes is not installed. On a GPU runtime, `%pip install bitsandbytes` adds it "
                "(it replaces nothing Colab has), then run this cell again.")
    return None


__all__ = ["REPO_ID", "REVISION", "LICENCE", "SMOLLM2_135M", "CONFIGS", "FIT_GPUS", "INT4_UNAVAILABLE",
           "INSTRUCT_REPO_ID", "INSTRUCT_REVISION", "load_chat_model", "TokenClock", "weight_dtype",
           "int4_config", "why_no_int4", "REPEAT_KV", "SDPA_WARNING_HEADERS", "sdpa_repeat_kv_attention",
           "register_repeat_kv", "attention_implementation", "plain_lora", "prefill_backend",
           "does_not_fit", "strip_trigger", "reason_after_header", "sdpa_backend_problem",
           "gpus", "import_libraries", "llama_config", "count_parameters", "load_model", "encode",
           "tensor_bytes", "model_bytes", "aten_calls", "cache_bytes", "device_map_lines", "lora_model", "bitsandbytes_status"]
