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

import ast
import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from gpucourse import settings

CAPABILITIES_PATH = Path(__file__).parent / "references" / "capabilities.json"

# The math backend keeps the float32 scores, their softmax and the causal mask for every
# head: at most about 10 bytes per score element, measured on the CPU (not CUDA's allocator)
# with memory.TensorMeter on torch 2.13, float16 q, k, v and a grouped call: 10.8 bytes at
# 512 tokens, 9.6 at 1,024, 9.0 at 2,048, falling toward 8 + 4/9 (two float32 scores per head,
# one float mask per call) at the 4,096-8,192 tokens where episode 14 uses it, so there it
# overstates by up to about 15 %: a safe bound for "does not fit" (episode 14 §1 measures it).
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
    which materialises every score: episodes 10 and 14 then repeat the key/value heads
    themselves so that the memory-efficient kernel runs.

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


# ---- what runs: the data file, asked per architecture ------------------------------------

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def gpu_models() -> dict:
    """``{key: {"name", "compute_capability", "total_memory", "memory_basis", "source"}}``."""
    return capabilities()["gpu_models"]


def _dtypes_allowed(entry: dict, capability: tuple[int, int]) -> list[str]:
    return entry["dtypes"]["from_sm80" if tuple(capability) >= (8, 0) else "below_sm80"]


def sdpa_backend(capability: tuple[int, int], torch_version: str, dtype: str,
                 grouped: bool, cudnn_version: int | None = None) -> str:
    """The SDPA backend torch falls to for a call without a mask: a fused one, else ``"math"``.

    torch tries Flash, memory-efficient, then cuDNN; on sm90 and sm100 (H100, H200, B200) with a
    cuDNN newer than 9.15 it tries cuDNN first (``check_prefer_cudnn_attention`` in torch's
    ``sdp_utils.cpp``: ``cudnn_version > 91500`` and major 9 or 10). Pass
    ``torch.backends.cudnn.version()`` as ``cudnn_version``; without it the order is the default one.

    Parameters
    ----------
    capability, torch_version
        As for :func:`gqa_fused_backends`.
    dtype : {"float32", "float16", "bfloat16"}
        The dtype of q, k and v (flash and cuDNN take only 16-bit values).
    grouped : bool
        True for grouped-query attention (fewer key/value heads, ``enable_gqa=True``).
    """
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}.")
    backends = capabilities()["sdpa"]["backends"]
    candidates = (gqa_fused_backends(capability, torch_version) if grouped else
                  [name for name in ("flash", "cudnn", "efficient")
                   if _in_range(capability, backends[name]["compute_capability"])])
    if (cudnn_version is not None and cudnn_version > 91500 and tuple(capability)[0] in (9, 10)
            and "cudnn" in candidates):
        candidates = ["cudnn"] + [name for name in candidates if name != "cudnn"]
    return next((name for name in candidates
                 if dtype in _dtypes_allowed(backends[name], capability)), "math")


def feature_available(feature: str, capability: tuple[int, int],
                      versions: dict[str, str] | None = None) -> bool:
    """Whether ``feature`` (a key of ``capabilities.json``'s ``features``) runs on this GPU.

    ``versions`` maps package names to installed versions (e.g. ``{"tensorflow": "2.20.0"}``);
    a feature that needs a package version (Triton 3.3 for tensor-core dots, TensorFlow 2.21 on
    sm_120) is judged unavailable when that version is missing or older.
    """
    features = capabilities()["features"]
    if feature not in features:
        raise ValueError(f"unknown feature {feature!r}; choose from {sorted(features)}.")
    entry, versions = features[feature], versions or {}
    if not _in_range(capability, entry["compute_capability"]):
        return False
    since = entry.get("since")
    if since and since["package"] in versions and (
            torch_release(versions[since["package"]]) < torch_release(since["version"])):
        return False
    for need in entry.get("needs", []):
        if _in_range(capability, need["compute_capability"]):
            installed = versions.get(need["package"])
            if installed is None or torch_release(installed) < torch_release(need["version"]):
                return False
    return True


# ---- how many bytes: closed forms for the big tensors of each episode --------------------

def matmul_bytes(n: int, dtype_bytes: int = 4) -> int:
    """``a @ b`` of two n × n matrices: a, b and the result."""
    return 3 * n * n * dtype_bytes


def mlp_parameters(width: int, depth: int, n_in: int) -> int:
    """Parameters of ``estimate.make_mlp(n_in, width, depth)``: depth hidden layers, one output."""
    return (n_in + 1) * width + (depth - 1) * (width + 1) * width + (width + 1)


def mlp_training_bytes(width: int, depth: int, batch: int, n_in: int = 15,
                       state_bytes_per_parameter: int = 16) -> int:
    """Peak of one training step of that MLP in float32 (episode 5's estimate).

    Weights, gradients and optimizer state (16 bytes per parameter with Adam, 8 with plain
    SGD: weights and gradients), plus what forward keeps for backward: the input, each hidden
    layer's output before and after ReLU, and the output, 4 bytes each per sample.
    """
    state = state_bytes_per_parameter * mlp_parameters(width, depth, n_in)
    return state + 4 * batch * (n_in + 2 * depth * width + 1)


def mlp_inference_bytes(width: int, depth: int, rows: int, n_in: int = 15) -> int:
    """``model(X)`` under ``no_grad`` over ``rows`` at once: input and two live layer outputs."""
    return 4 * mlp_parameters(width, depth, n_in) + 4 * rows * (n_in + 2 * width)


def cnn_parameters(width: int) -> int:
    """Parameters of ``estimate.make_cnn(width)``: six 3 × 3 convolutions without bias,
    two BatchNorm values per channel, and the last linear layer to 10 classes."""
    return 279 * width**2 + 27 * width + 28 * width + 40 * width + 10


def cnn_activation_bytes_per_sample(width: int) -> int:
    """Every layer's output of ``make_cnn(width)`` for one 3 × 32 × 32 image, in float32.

    Per block, conv, BatchNorm and ReLU twice at full resolution, then max-pooling: 6 outputs
    of width × 32², 2·width × 16², 4·width × 8², and the pooled ones; then the global
    average,
    flatten, dropout (4·width each) and 10 logits; plus the input (3072).
    """
    return 4 * (3082 + 11212 * width)


def cnn_training_bytes(width: int, batch: int, state_bytes_per_parameter: int = 16) -> int:
    """Peak of one Adam training step of ``make_cnn(width)`` at this batch, in float32."""
    return (state_bytes_per_parameter * cnn_parameters(width)
            + batch * cnn_activation_bytes_per_sample(width))


def llama_parameters(config: dict) -> int:
    """Parameters of a Llama-type decoder with ``config`` (a ``llm.CONFIGS`` dict).

    Embedding (shared with the output layer when tied), per layer q/k/v/o projections, the
    three MLP matrices and two RMSNorm weights, and the final norm.
    """
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    q_dim = config["num_attention_heads"] * config["head_dim"]
    kv_dim = config["num_key_value_heads"] * config["head_dim"]
    per_layer = 2 * hidden * q_dim + 2 * hidden * kv_dim + 3 * hidden * inter + 2 * hidden
    embeddings = config["vocab_size"] * hidden * (1 if config["tie_word_embeddings"] else 2)
    return embeddings + config["num_hidden_layers"] * per_layer + hidden


def lora_parameters(config: dict, rank: int) -> int:
    """Trainable parameters of LoRA with ``rank`` on q, k, v and o of every layer."""
    hidden = config["hidden_size"]
    q_dim = config["num_attention_heads"] * config["head_dim"]
    kv_dim = config["num_key_value_heads"] * config["head_dim"]
    per_layer = rank * ((hidden + q_dim) * 2 + (hidden + kv_dim) * 2)
    return config["num_hidden_layers"] * per_layer


def lm_forward_bytes(config: dict, batch: int, tokens: int, dtype_bytes: int,
                     backend: str) -> int:
    """A no-grad forward with a cache (prefill): the KV cache of every layer, plus the
    largest transient of one layer: its attention call or its MLP (gate, up and their product),
    whichever is larger. The weights are counted apart."""
    cache = kv_cache_bytes(batch, tokens, config["num_hidden_layers"],
                           config["num_key_value_heads"], config["head_dim"], dtype_bytes)
    attention = sdpa_peak_bytes(batch, config["num_attention_heads"],
                                config["num_key_value_heads"], tokens, config["head_dim"],
                                dtype_bytes, backend)
    mlp = 3 * batch * tokens * config["intermediate_size"] * dtype_bytes
    return cache + max(attention, mlp)


def lm_training_bytes(config: dict, batch: int, tokens: int, trainable: int,
                      backend: str) -> int:
    """One AdamW step in float32 beyond the weights: gradients and two moments for the
    trainable parameters (12 bytes each), and the activations backward needs.

    Per layer and token, about 10 hidden-sized values (norms, projections, residuals) and
    4 intermediate-sized ones (gate, up, activation, product); the attention's own peak per
    layer (the scores, on the math backend); and the logits with their softmax and gradient.
    """
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    layers = config["num_hidden_layers"]
    per_layer = 4 * batch * tokens * (10 * hidden + 4 * inter)
    attention = sdpa_peak_bytes(batch, config["num_attention_heads"],
                                config["num_key_value_heads"], tokens, config["head_dim"], 4,
                                backend)
    logits = 3 * 4 * batch * tokens * config["vocab_size"]
    return 12 * trainable + layers * (per_layer + attention) + logits


# ---- the episodes' full-size rows --------------------------------------------------------

NOTEBOOK_CONSTANTS = {"GIB": 2**30, "MIB": 2**20}
SMOLLM2 = {  # episodes 10 and 14's model (llm.SMOLLM2_135M, repeated: no import needed)
    "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
    "tie_word_embeddings": True}
DOES_NOT_STOP = math.inf   # a row that grows until it no longer fits (a search, a 1 EiB tensor)


@dataclass(frozen=True)
class Row:
    """One big allocation of an episode at full size.

    ``cell`` is a piece of source that names the code cell that runs it; where that cell (or
    a function of the notebook it calls) catches ``OutOfMemoryError``, not fitting is part
    of the lesson rather than a stop.
    """

    episode: str
    cell: str
    what: str
    nbytes: float


def code_cells(notebook: Path) -> list[str]:
    """The sources of a notebook's code cells."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _parsed_cells(notebook: Path):
    """``(source, tree)`` of each code cell that parses as Python (a cell with IPython syntax,
    such as a magic, holds nothing these readers look for)."""
    for source in code_cells(notebook):
        try:
            yield source, ast.parse(source)
        except SyntaxError:
            continue


def _full_value(node: ast.AST):
    """The ``"full"`` entry of ``{"full": ..., ...}[MODE]``, evaluated, or None if not that."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict)
            and isinstance(node.slice, ast.Name) and node.slice.id == "MODE"):
        return None
    for key, value in zip(node.value.keys, node.value.values):
        if isinstance(key, ast.Constant) and key.value == "full":
            code = compile(ast.Expression(value), "<SIZES>", "eval")
            return eval(code, {"__builtins__": {"dict": dict}, **NOTEBOOK_CONSTANTS})
    raise ValueError(f"a {{...}}[MODE] dict at line {node.lineno} has no 'full' entry.")


def full_sizes(notebook: Path) -> dict:
    """Every ``NAME = {...}[MODE]`` of the notebook, at full size: ``{"SIZES": {...}, ...}``,
    and every ``NAME = settings.sizes("epNN", ...)``, read from that episode's sizes file.

    Tuple assignments (``A, B = {...}[MODE], 256``) are read element by element.
    """
    found = {}
    for source, tree in _parsed_cells(notebook):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            episode = _sizes_call(value)
            if episode and isinstance(target, ast.Name):
                table = json.loads((settings.SIZES_DIR / f"{episode}.json").read_text())
                found[target.id] = table["full"]
                continue
            pairs = ([(target, value)] if isinstance(target, ast.Name) else
                     list(zip(target.elts, value.elts))
                     if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) else [])
            for name, expr in pairs:
                full = _full_value(expr) if isinstance(name, ast.Name) else None
                if full is not None:
                    found[name.id] = full
    return found


def _sizes_call(value: ast.AST) -> str | None:
    """``"ep05"`` for ``settings.sizes("ep05", ...)``, else None."""
    if (isinstance(value, ast.Call) and ast.unparse(value.func) in ("settings.sizes", "sizes")
            and value.args and isinstance(value.args[0], ast.Constant)):
        return value.args[0].value
    return None


def passes_attn_implementation(notebook: Path) -> bool:
    """Whether a ``load_model(...)`` call of the notebook passes ``attn_implementation=``."""
    for source, tree in _parsed_cells(notebook):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if called == "load_model" and any(kw.arg == "attn_implementation"
                                              for kw in node.keywords):
                return True
    return False


def prefill_backend(capability: tuple[int, int], torch_version: str, dtype: str,
                    repeats_kv: bool) -> str:
    """Episode 10's prefill attention: a fused backend that takes GQA, else the memory-efficient
    kernel on repeated heads where the notebook registers that (``repeats_kv``), else math."""
    backend = sdpa_backend(capability, torch_version, dtype, grouped=True)
    if backend == "math" and repeats_kv and sdpa_backend(
            capability, torch_version, dtype, grouped=False) == "efficient":
        return "repeat_kv+efficient"
    return backend


def _ep01(sizes, gpu, torch_version, notebook):
    """The float32 matmul sweep (its largest n), ``c = a + b`` and the pinned copy."""
    s = sizes["SIZES"]
    stream = s["stream_mib"] * NOTEBOOK_CONSTANTS["MIB"]
    return [Row("01", "def matmul_sweep", f"matmul n={max(s['matmul_n'])}, float32",
                matmul_bytes(max(s["matmul_n"]))),
            Row("01", "def add_bandwidth", f"c = a + b, 3 × {s['stream_mib']} MiB", 3 * stream),
            Row("01", "host.pin_memory()", f"copy of {s['stream_mib']} MiB to the GPU", stream)]


def _ep03(sizes, gpu, torch_version, notebook):
    """The width sweep: the widest MLP with Adam, the sweep's events resident on the GPU."""
    s = sizes["SIZES"]
    data = 4 * s["sweep_events"] * 16            # 15 features and a label
    return [Row("03", 'for width in tqdm(SIZES["widths"]', f"MLP width {max(s['widths'])}, "
                f"batch {s['batch']}, Adam", mlp_training_bytes(max(s["widths"]), 2, s["batch"])
                + data)]


def _ep04(sizes, gpu, torch_version, notebook):
    """The Keras CNN (episode 5's ``make_cnn`` counts it) trained at full width and batch."""
    s = sizes["SIZES"]
    return [Row("04", "history = model.fit(train_ds",
                f"CNN width {s['width']}, batch {s['batch']}, AdamW",
                cnn_training_bytes(s["width"], s["batch"]))]


def _ep05(sizes, gpu, torch_version, notebook):
    """The memory curves' largest MLP and CNN batches, and §2's wide MLP at batch 8."""
    s = sizes["SIZES"]
    return [Row("05", "peaks = [measure_step(task, batch)", f"MLP width {s['mlp_width']}, batch "
                f"{max(s['mlp_batches'])}, Adam",
                mlp_training_bytes(s["mlp_width"], 2, max(s["mlp_batches"]))),
            Row("05", "peaks = [measure_step(task, batch)", f"CNN width {s['cnn_width']}, batch "
                f"{max(s['cnn_batches'])}, Adam", cnn_training_bytes(s["cnn_width"],
                                                                 max(s["cnn_batches"]))),
            Row("05", "wide_mlp = dict(", f"MLP width {s['wide']}, batch 8, Adam",
                mlp_training_bytes(s["wide"], 2, 8))]


def _ep06(sizes, gpu, torch_version, notebook):
    """§1's run inside its budget, the 1 EiB request, §3's deep MLP (four copies at once
    when timing the four ways) and §4's searches, which grow until a step fails."""
    s = sizes["SIZES"]
    fit = s["fit"]
    deep = mlp_training_bytes(fit["width"], fit["depth"], fit["batch"])
    deep_state = 16 * mlp_parameters(fit["width"], fit["depth"], 15)
    return [Row("06", "2**60", "one tensor of 1 EiB", DOES_NOT_STOP),
            Row("06", "step(too_big)", f"a step that outgrows the {s['budget']:,} B budget",
                DOES_NOT_STOP),
            Row("06", "def gradients(model, chunks)", f"MLP depth {fit['depth']} width "
                f"{fit['width']}, batch {fit['batch']}, Adam", deep),
            Row("06", "steps[how] = lambda", "the same, four models and optimizers at once",
                deep + 3 * deep_state),
            Row("06", "searches = {", f"depth and width searches (hsf width "
                f"{s['check']['hsf_width']})", DOES_NOT_STOP)]


def _mlp_speed_rows(episode, sizes):
    """Episodes 7 and 8: the events × width MLP, SGD, with all events resident."""
    s = sizes["SIZES"]
    data = 4 * s["events"] * 16
    return [Row(episode, "def make_model():", f"MLP width {s['width']}, batch {s['batch']}, SGD, "
                f"{s['events']:,} events resident",
                mlp_training_bytes(s["width"], 2, s["batch"], state_bytes_per_parameter=8) + data),
            Row(episode, "def accuracy(model)" if episode == "07" else "def make_model():",
                f"forward over all {s['events']:,} events at once",
                mlp_inference_bytes(s["width"], 2, s["events"]) + data)]


def _ep07(sizes, gpu, torch_version, notebook):
    """The MLP rows, and the element-wise chain (input, output and eager temporaries)."""
    n = sizes["SIZES"]["fusion_elements"]
    return _mlp_speed_rows("07", sizes) + [
        Row("07", "x_big = torch.randn", f"element-wise chain on {n:,} floats", 4 * 4 * n)]


def _ep08(sizes, gpu, torch_version, notebook):
    """The MLP rows (the profiled steps use the same model and data)."""
    return _mlp_speed_rows("08", sizes)


def _smollm2_resident(gpu, torch_version, notebook):
    """Episodes 10 and 14 load SmolLM2-135M first, in 16 bits, and keep it to the end: its
    weight bytes, its prefill's attention backend (:func:`prefill_backend`) and its dtype."""
    capability = tuple(gpu["compute_capability"])
    dtype = "bfloat16" if feature_available("bf16_hardware", capability) else "float16"
    backend = prefill_backend(capability, torch_version, dtype,
                              passes_attn_implementation(notebook))
    return 2 * llama_parameters(SMOLLM2), backend


def _ep10(sizes, gpu, torch_version, notebook):
    """SmolLM2-135M: the KV-cache grid and time to first token (prefill; attention backend from
    :func:`prefill_backend`) and the decoding batches. The 16-bit model loaded first stays
    resident throughout."""
    s, cfg = sizes["SIZES"], SMOLLM2
    resident, backend = _smollm2_resident(gpu, torch_version, notebook)
    rows = [Row("10", 'SIZES["batches"]', f"prefill batch {b} × {t} tokens, "
                f"{backend}", resident + lm_forward_bytes(cfg, b, t, 2, backend))
            for b in s["batches"] for t in s["contexts"]]
    rows.append(Row("10", "generate_timed(model, prompt,",
                    f"time to first token, {max(s['contexts'])} tokens, {backend}",
                    resident + lm_forward_bytes(cfg, 1, max(s["contexts"]) + s["new_tokens"],
                                                2, backend)))
    rows += [Row("10", 'SIZES["decode_batches"]', f"decode batch {b}, {backend}",
                 resident + lm_forward_bytes(cfg, b, 64 + s["new_tokens"], 2, backend))
             for b in s["decode_batches"]]
    return rows


def _ep14(sizes, gpu, torch_version, notebook):
    """SmolLM2-135M made cheaper: §1's forced math attention over the longest sequences, and
    §4's float32 full and LoRA fine-tuning steps. The 16-bit model loaded first stays
    resident throughout, as in episode 10; the int8 and int4 copies of §3 are deleted
    before §4 loads the float32 models."""
    s, cfg = sizes["SIZES"], SMOLLM2
    capability = tuple(gpu["compute_capability"])
    resident, _ = _smollm2_resident(gpu, torch_version, notebook)
    params = llama_parameters(cfg)
    heads, head_dim = cfg["num_attention_heads"], cfg["head_dim"]
    rows = [Row("14", "for backend in [SDPBackend.MATH, *fused]", f"math attention, {n} tokens",
                resident + 3 * heads * n * head_dim * 2
                + sdpa_peak_bytes(1, heads, heads, n, head_dim, 2, "math"))
            for n in s["attention"]]
    student = 4 * params                          # the float32 model LoRA trains
    train_backend = sdpa_backend(capability, torch_version, "float32", grouped=True)
    rows += [Row("14", "def step_peak", f"full fine-tuning, batch 4 × {s['seq']}, "
                 f"{train_backend}", resident + student + 4 * params
                 + lm_training_bytes(cfg, 4, s["seq"], params, train_backend)),
             Row("14", 'SIZES["steps"]', f"LoRA r=8, batch 4 × {s['seq']}",
                 resident + student
                 + lm_training_bytes(cfg, 4, s["seq"], lora_parameters(cfg, 8), train_backend))]
    return rows


def _ep11(sizes, gpu, torch_version, notebook):
    """§4's MLP (512 inputs, two layers of SIZES["loader_width"], SGD); its data stay in host
    memory."""
    width, batch = sizes["SIZES"]["loader_width"], 256
    return [Row("11", "def train_epoch", f"MLP 512 → {width} → {width}, batch {batch}, SGD",
                mlp_training_bytes(width, 2, batch, n_in=512, state_bytes_per_parameter=8))]


ROW_BUILDERS = {"01": _ep01, "03": _ep03, "04": _ep04, "05": _ep05, "06": _ep06, "07": _ep07,
                "08": _ep08, "10": _ep10, "11": _ep11, "14": _ep14}


def episode_rows(notebook: Path, gpu: dict, torch_version: str) -> list[Row]:
    """The full-size rows of one episode on one GPU model (an entry of :func:`gpu_models`).

    Episodes 2 and 9 have none: their GPU tensors are a few MB.
    """
    notebook = Path(notebook)
    if not re.match(r"\d\d-", notebook.name):
        raise ValueError(f"{notebook.name!r} does not start with an episode number ('10-...'); "
                         "the rows are chosen by it, so keep the episode's file name.")
    builder = ROW_BUILDERS.get(notebook.name[:2])
    if builder is None:
        return []
    return builder(full_sizes(notebook), gpu, torch_version, notebook)


FIT_FRACTION = 0.9   # leave a tenth for the CUDA context, cuBLAS workspaces and fragmentation
OOM_HANDLER = "OutOfMemoryError"


def cell_with(notebook: Path, marker: str) -> str:
    """The one code cell of ``notebook`` whose source contains ``marker``."""
    matches = [source for source in code_cells(notebook) if marker in source]
    if len(matches) != 1:
        raise LookupError(f"{len(matches)} code cells of {Path(notebook).name} contain "
                          f"{marker!r}; a row must name exactly one: update its marker in "
                          "gpucourse/feasibility.py to the cell that now runs it.")
    return matches[0]


def _functions(notebook: Path) -> dict[str, str]:
    """``{name: source}`` of the functions the notebook's code cells define."""
    found = {}
    for source, tree in _parsed_cells(notebook):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                found[node.name] = ast.get_source_segment(source, node) or ""
    return found


def _called(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.func.id for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def catches_oom(notebook: Path, source: str) -> bool:
    """Whether ``source`` catches ``torch.OutOfMemoryError``, itself or in a function of the
    notebook that it calls (at any depth)."""
    functions, seen, todo = _functions(notebook), set(), [source]
    while todo:
        current = todo.pop()
        if OOM_HANDLER in current:
            return True
        for name in _called(current) - seen:
            seen.add(name)
            if name in functions:
                todo.append(functions[name])
    return False


def rows_over_the_limit(notebook: Path, gpu: dict, torch_version: str) -> list[Row]:
    """The rows of ``notebook`` that do not fit in ``FIT_FRACTION`` of ``gpu``'s memory, whether
    or not their cell catches ``torch.OutOfMemoryError``: a row the lesson says fits must fit
    without that last defence (G5-1: episode 10's prefill on a T4 runs on the memory-efficient
    kernel only because ``sdpa_repeat_kv`` repeats the key/value heads; on math it needs 26 GB)."""
    limit = FIT_FRACTION * gpu["total_memory"]
    return [row for row in episode_rows(notebook, gpu, torch_version) if row.nbytes >= limit]


def rows_that_stop(notebook: Path, gpu: dict, torch_version: str) -> list[Row]:
    """The rows of ``notebook`` that do not fit in ``FIT_FRACTION`` of ``gpu``'s memory and
    whose cell does not catch ``torch.OutOfMemoryError``: where "Run all" would stop."""
    limit = FIT_FRACTION * gpu["total_memory"]
    return [row for row in episode_rows(notebook, gpu, torch_version)
            if row.nbytes >= limit
            and not catches_oom(notebook, cell_with(notebook, row.cell))]


# --------------------------------------------------------------------------- serving (episode 15)

SERVING_GPUS = ("T4", "L4", "H100 80GB")


def serving_capacity(config: dict, context: int = 2048, output_tokens: int = 256,
                     gpus=SERVING_GPUS, dtype_bytes: int = 2) -> list[dict]:
    """How many users of ``context`` tokens each GPU serves a Llama-type model (``config``), by
    memory and by bandwidth.

    ``users`` (L_max): the users whose KV caches fit in :data:`FIT_FRACTION` of the GPU's memory
    after the 16-bit weights. ``step_ms``: the bandwidth floor of one decode step with all of them
    at full context (weights and every cache read once, at the datasheet bandwidth);
    ``tokens_per_s``: users / step. ``max_rate``: Little's law, λ_max = L_max / W, with W the
    time to write ``output_tokens`` at that step time.
    """
    from .reference import gpu_model

    per_token = kv_cache_bytes(1, 1, config["num_hidden_layers"], config["num_key_value_heads"],
                               config["head_dim"], dtype_bytes)
    weights = dtype_bytes * llama_parameters(config)
    rows = []
    for key in gpus:
        gpu = gpu_models()[key]
        bandwidth = gpu_model(gpu["name"])[1]["memory_gbs"] * 1e9
        users = max(0, int(gpu["total_memory"] * FIT_FRACTION - weights) // (per_token * context))
        step_s = (weights + users * context * per_token) / bandwidth
        rows.append({"gpu": key, "users": users, "kv_bytes_per_token": per_token,
                     "step_ms": step_s * 1e3, "tokens_per_s": users / step_s,
                     "max_rate": users / (output_tokens * step_s)})
    return rows
