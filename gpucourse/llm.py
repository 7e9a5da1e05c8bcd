"""A small language model for episode 10: real from the Hugging Face Hub, or its architecture offline.

The real model is SmolLM2-135M (``HuggingFaceTB/SmolLM2-135M``, Apache-2.0; Allal et al. 2025,
https://arxiv.org/abs/2502.02737), downloaded at one pinned revision into the course's data cache.
Where the download is not possible (``GPUCOURSE_OFFLINE=1``, no network), ``load_model`` builds
the same architecture from its configuration (``SMOLLM2_135M``, the numbers of its ``config.json``)
with random weights: memory and speed depend on the shapes and dtypes, not on the values. The
notebook prints which one it uses.

The other configurations (``CONFIGS``) are the published shapes of larger models, used only to
count parameters and cache bytes on PyTorch's ``meta`` device, where no memory is allocated.

``lora_model`` is peft's ``get_peft_model`` with one work-around: peft 0.18.1 and later refuse to
add plain LoRA layers when a torchao older than 0.16 is installed (they raise ``ImportError`` from
``is_torchao_available`` even for models that hold no torchao weights), and Google Colab's image has
shipped peft 0.20 with torchao 0.10. The course never replaces what Colab has, so for that one
error it tells peft, for this call only, that torchao is absent; plain LoRA does not use it.
"""

from __future__ import annotations

import contextlib
import logging
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

# Memory of the GPUs in episode 1's datasheet table, in GB as NVIDIA states it and counted as 10**9 bytes, a
# cautious rule (the chips come in GiB, and ECC and the driver take some) (T4, L4,
# A100 and H100 datasheets; the links are in episode 1). Bandwidths come from the course's bands file.
GPU_MEMORY_GB = {"T4": 16, "L4": 24, "A100 80GB": 80, "H100 SXM": 80}
_BANDS_MODEL = {"T4": "Tesla T4", "L4": "NVIDIA L4", "A100 80GB": "NVIDIA A100 80GB SXM", "H100 SXM": "NVIDIA H100 SXM"}

# What int4 weights can still fail with where the installed torchao lacks a kernel for this device:
# ImportError (a format that needs a separate package, e.g. torchao >= 0.15's default "plain" one needs
# `mslk`), NotImplementedError and ValueError (no packing for this device or layout) and RuntimeError.
INT4_UNAVAILABLE = (ImportError, NotImplementedError, ValueError, RuntimeError)


def int4_config(group_size: int = 64):
    """torchao's int4 weight-only config with the tinygemm kernel's layout, in any torchao version.

    torchao >= 0.15 defaults to a "plain" format whose kernels need the separate ``mslk`` package and
    Hopper; ``tile_packed_to_4d`` is tinygemm there. Older versions (Colab's 0.10) use tinygemm by default.
    """
    import dataclasses

    from torchao.quantization import Int4WeightOnlyConfig

    if "int4_packing_format" in {f.name for f in dataclasses.fields(Int4WeightOnlyConfig)}:
        return Int4WeightOnlyConfig(group_size=group_size, int4_packing_format="tile_packed_to_4d")
    return Int4WeightOnlyConfig(group_size=group_size)


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
    """``{name: {"memory_bytes": ..., "bandwidth_gbs": ...}}`` for the GPUs of episode 1's table."""
    from .reference import bands

    models = bands()["models"]
    return {name: {"memory_bytes": gb * 10**9, "bandwidth_gbs": models[_BANDS_MODEL[name]]["memory_gbs"]}
            for name, gb in GPU_MEMORY_GB.items()}


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

        transformers.logging.set_verbosity_error()
    # torchao 0.13 and later warn that the configs episode 10 uses are "version 1"; version 2 does not exist in
    # Colab's torchao 0.10, so the course keeps version 1 and hides that deprecation notice (only that one).
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


def download() -> str:
    """The local folder of REPO_ID at REVISION, fetched into the course's data cache if needed."""
    from huggingface_hub import snapshot_download

    from .data import cache

    return snapshot_download(REPO_ID, revision=REVISION, allow_patterns=MODEL_FILES,
                             cache_dir=cache.folder("huggingface"))


def load_model(*, device, dtype, layers: int | None = None):
    """SmolLM2-135M on ``device`` in ``dtype``: the real one if it can be had, else its architecture.

    Parameters
    ----------
    device, dtype
        Where the model goes and its weights' dtype.
    layers : int, optional
        Keep only the first ``layers`` of the 30 decoder layers (reduced and quick modes on a CPU).

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


def cache_bytes(cache) -> int:
    """Bytes of the keys and values a transformers cache holds, added up layer by layer."""
    return sum(tensor_bytes(layer.keys) + tensor_bytes(layer.values) for layer in cache.layers)


@contextlib.contextmanager
def _torchao_hidden_from_peft():
    from unittest import mock

    import peft.tuners.lora.torchao as lora_torchao

    with mock.patch.object(lora_torchao, "is_torchao_available", lambda: False):
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
        print(f"peft says: {exc}. Plain LoRA does not use torchao, so it is hidden from peft for this call.")
    with _torchao_hidden_from_peft():
        return get_peft_model(model, config)


def bitsandbytes_status(on_gpu: bool) -> str | None:
    """None when QLoRA's 4-bit weights can be tried here; otherwise why not, in a sentence."""
    import importlib.util

    if not on_gpu:
        return ("QLoRA's 4-bit base weights come from bitsandbytes, whose 4-bit kernels run on a CUDA GPU; "
                "there is none here, so the cell below only shows the configuration.")
    if importlib.util.find_spec("bitsandbytes") is None:
        return ("bitsandbytes is not installed. On a GPU runtime, `%pip install bitsandbytes` adds it "
                "(it replaces nothing Colab has), then run this cell again.")
    return None


__all__ = ["REPO_ID", "REVISION", "LICENCE", "SMOLLM2_135M", "CONFIGS", "GPU_MEMORY_GB", "INT4_UNAVAILABLE",
           "int4_config", "why_no_int4",
           "gpus", "import_libraries", "llama_config", "count_parameters", "load_model", "encode",
           "tensor_bytes", "model_bytes", "cache_bytes", "lora_model", "bitsandbytes_status"]
