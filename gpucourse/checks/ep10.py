"""Checks for episode 10, "A language model on one GPU".

``q1`` the bytes of a KV cache · ``q2`` the decode floor on a GPU of the table · ``q3`` the longest context
that fits beside the weights · ``q4`` the batch from which a decode step reads more KV cache than weights.
(Episode 14's LoRA exercise is checked in ``ep14``, which shares this module's ``_judge``.)

Every check calls the learner's function on several cases of its own, with different answers, so that a
constant or an answer right for one case only cannot pass, and recomputes or measures the right result:
``q1`` and ``q4`` also run a small Llama-type model and add up the bytes its cache really holds; ``q3`` and
``q4`` count the parameters of each configuration on the meta device. A wrong answer that matches a known
mistake on every case (or on the most of the cases it got wrong) is named.
"""
from __future__ import annotations

import math

from ..exercises import Exercise, NotDone, Wrong, as_number, call_answer, require_function, solution_link
from .diagnosis import best_fit

NOTEBOOK = "10-language-model.ipynb"
GIB, MIB = 2**30, 2**20


# --- shared ------------------------------------------------------------------------------------

def _same(got: float, value: float, whole: bool = False) -> bool:
    """Equal: to a millionth for measured quantities, exactly (to float rounding) for whole counts."""
    if math.isnan(value):
        return False
    return abs(got - value) <= (1e-9 if whole else 1e-6) * abs(value) + 1e-12


def _judge(results, alternatives, what_fn, unit: str, *, whole: bool, close=None):
    """``results``: (case, got, expected); ``alternatives(case)``: {message: value}. Raise Wrong or return.

    ``close``: (message, rel) named when no known mistake fits but every wrong number is within ``rel``
    of the right one.

    The mistake named is the one that gives the learner's numbers on the most of the cases they got
    wrong (see ``diagnosis.best_fit``), not whatever happens to match on the first of them.
    """
    wrong = [r for r in results if not _same(r[1], r[2], whole)]
    if not wrong:
        return
    # a known mistake that gives every number is named first, even where it gives one number for
    # every case (a ratio the other way up rounds to 1 everywhere): the constant is the symptom
    for message in alternatives(results[0][0]):
        if all(_same(got, alternatives(case)[message], whole) for case, got, _ in results):
            raise Wrong(message)
    if len(results) > 1 and len({r[1] for r in results}) == 1 and len({r[2] for r in results}) > 1:
        raise Wrong(f"your function returned {results[0][1]:,.6g} for every case, but the answers differ "
                    f"(from {min(r[2] for r in results):,.6g} to {max(r[2] for r in results):,.6g} {unit}): compute "
                    "it from the arguments, not from a number worked out once.")
    right_on = len(results) - len(wrong)
    where = f" (right for {right_on} of the {len(results)} cases)" if right_on else ""
    fit = best_fit(wrong, lambda r: r[1], lambda r: alternatives(r[0]), lambda got, v: _same(got, v, whole))
    if fit:
        message, explained, _ = fit
        case, got, _ = next(r for r in wrong if _same(r[1], alternatives(r[0])[message], whole))
        also = f" (this mistake gives your numbers on {explained} of the {len(wrong)} cases you got wrong)" \
            if explained < len(wrong) else ""
        raise Wrong(f"{what_fn(case)} returned {got:,.6g}{where}: {message}{also}")
    case, got, expected = wrong[0]
    if close and all(abs(g - e) <= close[1] * abs(e) for _, g, e in wrong):
        raise Wrong(f"{what_fn(case)} returned {got:,.6g}{where}; expected {expected:,.6g} {unit}: {close[0]}")
    if whole and not float(got).is_integer():
        raise Wrong(f"{what_fn(case)} returned {got!r}; it should be a whole number of {unit} "
                    f"(expected {expected:,.0f}).")
    raise Wrong(f"{what_fn(case)} returned {got:,.6g}{where}; expected {expected:,.6g} {unit}.")


def _config(**shape):
    from ..llm import _quiet_imports

    with _quiet_imports():
        from transformers import LlamaConfig
    return LlamaConfig(**shape)


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _element_size(dtype) -> int:
    import torch

    return torch.empty(0, dtype=dtype).element_size()


def _kv_bytes(config, tokens, batch, dtype, *, kv_heads=None, head_dim=None, factor=2, size=None, layers=None):
    kv_heads = config.num_key_value_heads if kv_heads is None else kv_heads
    head_dim = _head_dim(config) if head_dim is None else head_dim
    size = _element_size(dtype) if size is None else size
    layers = config.num_hidden_layers if layers is None else layers
    return factor * layers * kv_heads * head_dim * size * tokens * batch


def _kv_mistakes(config, tokens, batch, dtype) -> dict:
    """What common mistakes give for the KV cache: {message: bytes}."""
    right = _kv_bytes(config, tokens, batch, dtype)
    return {
        "the 2 is missing: the cache holds keys *and* values, one tensor of each per layer.":
            _kv_bytes(config, tokens, batch, dtype, factor=1),
        "you multiplied by 2 twice: the cache holds two tensors per layer (keys and values), each of "
        "num_key_value_heads × head_dim values per token, at the dtype's bytes per value.":
            _kv_bytes(config, tokens, batch, dtype, factor=4),
        "one token too many: the cache of `tokens` tokens holds exactly `tokens` keys and values per layer.":
            _kv_bytes(config, tokens + 1, batch, dtype),
        "you used the query heads (num_attention_heads); with grouped-query attention the cache has only "
        "num_key_value_heads heads.": _kv_bytes(config, tokens, batch, dtype, kv_heads=config.num_attention_heads),
        "you used hidden_size per layer; the cache stores num_key_value_heads × head_dim values per token and "
        "layer, which hidden_size is not (it is not even query heads × head_dim in every model).":
            _kv_bytes(config, tokens, batch, dtype, kv_heads=1, head_dim=config.hidden_size),
        "you used num_attention_heads // num_key_value_heads, the group size (query heads that share one "
        "key/value head); the cache holds num_key_value_heads heads per layer.":
            _kv_bytes(config, tokens, batch, dtype,
                      kv_heads=config.num_attention_heads // config.num_key_value_heads),
        "you computed the head dimension as hidden_size // num_attention_heads, but this configuration sets "
        "config.head_dim to something else: use config.head_dim.":
            _kv_bytes(config, tokens, batch, dtype, head_dim=config.hidden_size // config.num_attention_heads),
        "the bytes per value are wrong: use the dtype's own size (torch.empty(0, dtype=dtype).element_size(), "
        "or dtype.itemsize), not 4 for every dtype.": _kv_bytes(config, tokens, batch, dtype, size=4),
        "the bytes per value are wrong: use the dtype's own size, not 2 for every dtype.":
            _kv_bytes(config, tokens, batch, dtype, size=2),
        "that is in bits: divide by 8.": 8 * right,
        "you counted values, not bytes: multiply by the dtype's bytes per value.": right / _element_size(dtype),
        "the batch is missing: every sequence of the batch has its own cache.":
            _kv_bytes(config, tokens, 1, dtype),
        "the layers are missing: every layer keeps its own keys and values.":
            _kv_bytes(config, tokens, batch, dtype, layers=1),
        "that is in GiB; return bytes (1 GiB = 2**30 bytes).": right / GIB,
        "that is in MiB; return bytes.": right / MIB,
        "that is in GB; return bytes.": right / 1e9,
        "that is in MB (10**6 bytes); return bytes.": right / 1e6,
        "you counted three tensors per layer; the cache keeps two, keys and values (the queries are not "
        "kept: each new token's query is used once).": _kv_bytes(config, tokens, batch, dtype, factor=3),
    }


# --- q1: the bytes of a KV cache ---------------------------------------------------------------------

def _q1_cases():
    import torch

    return [
        ("a Mistral-7B-like model (32 layers, 32 query heads, 8 KV heads, head_dim 128), float16, 4096 tokens, "
         "batch 1", _config(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                            head_dim=128, intermediate_size=14336), 4096, 1, torch.float16),
        ("a Qwen2.5-0.5B-like model (24 layers, 14 query heads, 2 KV heads, head_dim 64), bfloat16, 32768 tokens, "
         "batch 2", _config(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                            head_dim=64, intermediate_size=4864), 32768, 2, torch.bfloat16),
        ("Llama 2 7B (32 layers, 32 heads and 32 KV heads: no GQA), float32, 100 tokens, batch 3",
         _config(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                 head_dim=128, intermediate_size=11008), 100, 3, torch.float32),
        ("a Gemma-7B-like model (28 layers, 16 heads, 16 KV heads, hidden_size 3072 but head_dim 256), "
         "float8_e4m3fn, 8192 tokens, batch 4",
         _config(hidden_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=16,
                 head_dim=256, intermediate_size=24576), 8192, 4, torch.float8_e4m3fn),
    ]


def _measured_cache(config, tokens, batch, dtype) -> int:
    """Run a small model with ``config`` and add up the bytes of its cache."""
    import torch

    from ..llm import _quiet_imports, cache_bytes

    with _quiet_imports():
        from transformers import LlamaForCausalLM
    torch.manual_seed(81)
    model = LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, config.vocab_size, (batch, tokens)), use_cache=True,
                      logits_to_keep=1).past_key_values
    return cache_bytes(cache)


def _check_kv_cache(kv_cache_bytes):
    import torch

    require_function(kv_cache_bytes, "kv_cache_bytes")
    tiny = _config(vocab_size=256, hidden_size=96, intermediate_size=128, num_hidden_layers=3, num_attention_heads=6,
                   num_key_value_heads=2, head_dim=32)
    cases = [("a small model that the check runs (3 layers, 6 query heads, 2 KV heads, head_dim 32, hidden_size 96), "
              "float32, 20 tokens, batch 3", tiny, 20, 3, torch.float32), *_q1_cases()]
    results = []
    for case in cases:
        description, config, tokens, batch, dtype = case
        what = f"kv_cache_bytes(config, {tokens}, {batch}, {dtype}) for {description}"
        got = as_number(what, call_answer(kv_cache_bytes, config, tokens, batch, dtype, what=what))
        expected = (_measured_cache(config, tokens, batch, dtype) if config is tiny
                    else _kv_bytes(config, tokens, batch, dtype))
        results.append((case, got, expected))
    _judge(results, lambda c: _kv_mistakes(c[1], c[2], c[3], c[4]),
           lambda c: f"kv_cache_bytes(config, {c[2]}, {c[3]}, {c[4]}) for {c[0]}", "bytes", whole=True)
    mistral = results[1]
    return (f"right on {len(results)} configurations, the first measured on a model the check ran. A Mistral-7B-like "
            f"model keeps {mistral[2] / GIB:.2f} GiB of cache for one 4,096-token sequence in float16.")


q1 = Exercise("ep10.q1", _check_kv_cache,
              hint=("What does one attention layer keep for one token of one sequence, and for how many heads: the query "
                    "heads or the key/value heads?",
                    "Multiply two (keys and values) by the layers, the key/value heads, the head dimension and the bytes "
                    "of one value in the dtype; that is one token of one sequence. Then scale by the tokens and the "
                    "batch. Read every size from the configuration, not from the hidden size."),
              solution=solution_link(NOTEBOOK))


# --- q2: the decode floor ----------------------------------------------------------------------------

def _q2_cases():
    import torch

    return [(6_738_415_616, torch.float16, "T4"), (1_235_814_400, torch.bfloat16, "H100 SXM"),
            (70_553_706_496, torch.int8, "A100 80GB"), (134_515_008, torch.float32, "L4")]


def _floor_ms(n, dtype, gpu, *, size=None, bandwidth=None, scale=1e3):
    from ..llm import gpus

    size = _element_size(dtype) if size is None else size
    bandwidth = gpus()[gpu]["bandwidth_gbs"] * 1e9 if bandwidth is None else bandwidth
    return n * size / bandwidth * scale


def _floor_mistakes(n, dtype, gpu) -> dict:
    from ..llm import gpus

    spec = gpus()[gpu]
    right = _floor_ms(n, dtype, gpu)
    return {
        "you read the bandwidth as GiB/s: the table's GB/s are 10**9 bytes per second, not 2**30.":
            _floor_ms(n, dtype, gpu, bandwidth=spec["bandwidth_gbs"] * GIB),
        "you left out the bytes per weight: the floor is parameters × bytes per value ÷ bandwidth.":
            _floor_ms(n, dtype, gpu, size=1),
        "the bytes per weight are wrong: use the dtype's own size (2 for float16, 1 for int8), not 4.":
            _floor_ms(n, dtype, gpu, size=4),
        "the bytes per weight are wrong: use the dtype's own size (4 for float32, 1 for int8), not 2.":
            _floor_ms(n, dtype, gpu, size=2),
        "that is in seconds; return milliseconds (× 1000).": right / 1e3,
        "that is in microseconds; return milliseconds.": right * 1e3,
        "that is tokens per second, the inverse: the floor is a time per token, in milliseconds.": 1e3 / right,
        "you divided by the GPU's memory size; divide by its bandwidth (llm.gpus()[gpu]['bandwidth_gbs']).":
            n * _element_size(dtype) / spec["memory_bytes"] * 1e3,
        "you used bits per weight, not bytes: divide by 8.": right * 8,
        "you counted each weight twice: two operations per weight, or a read and a write (as in a copy); "
        "a decode step only reads each weight once, and the floor is set by bytes read: parameters × bytes "
        "per value ÷ bandwidth.": right * 2,
        "you divided by the bandwidth in GB/s as it stands; turn it into bytes per second first (× 10**9).":
            right * 1e9,
        **{f"you assumed {p} % of the bandwidth; the floor is at the datasheet's whole bandwidth (real decoding "
           "reaches only part of it, which is why this is a floor).": right / (p / 100) for p in (95, 90, 85, 80,
                                                                                              75, 70)},
        **{f"you used the {other}'s bandwidth for every GPU; read the bandwidth of the GPU asked for, "
           "llm.gpus()[gpu]['bandwidth_gbs'].": _floor_ms(n, dtype, gpu, bandwidth=g["bandwidth_gbs"] * 1e9)
           for other, g in gpus().items() if other != gpu and g.get("bandwidth_gbs")},
        **{f"you rounded the result to {d} decimal{'s' * (d != 1)}; return it as computed.": round(right, d)
           for d in range(4)},
    }


def _check_floor(decode_floor_ms):
    require_function(decode_floor_ms, "decode_floor_ms")
    results = []
    for case in _q2_cases():
        n, dtype, gpu = case
        what = f"decode_floor_ms({n:_}, {dtype}, {gpu!r})"
        got = as_number(what, call_answer(decode_floor_ms, n, dtype, gpu, what=what))
        results.append((case, got, _floor_ms(n, dtype, gpu)))
    _judge(results, lambda c: _floor_mistakes(*c), lambda c: f"decode_floor_ms({c[0]:_}, {c[1]}, {c[2]!r})",
           "ms", whole=False)
    t4 = results[0]
    return (f"right on {len(results)} models and GPUs. Llama 2 7B in float16 cannot decode faster than "
            f"{t4[2]:.1f} ms per token on a T4 at batch 1: {1e3 / t4[2]:.0f} tokens/s at most.")


q2 = Exercise("ep10.q2", _check_floor,
              hint=("At batch 1, what must the GPU read from its memory to write one new token, and how fast can it read?",
                    "Count the weight bytes (parameters times bytes per value) and divide them by the GPU's bandwidth from "
                    "the course's GPU table, turned from GB/s (10⁹ bytes per second) into bytes per second. "
                    "The result is in seconds; the answer is in milliseconds."),
              solution=solution_link(NOTEBOOK))


# --- q3: the longest context beside the weights ---------------------------------------------------

def _q3_cases():
    import torch

    from ..llm import llama_config

    return [
        ("Llama 3.2 1B in float16 on a T4 (16 GB), batch 8", llama_config("Llama-3.2-1B"), torch.float16,
         16 * 10**9, 8),
        ("Llama 2 7B in bfloat16 on an L4 (24 GB), batch 1", llama_config("Llama-2-7B"), torch.bfloat16,
         24 * 10**9, 1),
        ("SmolLM2-135M in float32 within 1 GiB, batch 32", llama_config("SmolLM2-135M"), torch.float32, GIB, 32),
        ("Llama 2 7B in float32 on a T4 (16 GB), batch 1: the weights alone do not fit", llama_config("Llama-2-7B"),
         torch.float32, 16 * 10**9, 1),
        # the room beside the weights holds a whole number of tokens exactly: a cache that fills the memory to
        # the byte fits, so ceil - 1 (or a strict <) is one token short only here
        ("Llama 3.2 1B in float16 in a budget of 3,782,348,800 bytes, batch 4", llama_config("Llama-3.2-1B"),
         torch.float16, 3_782_348_800, 4),
        # the one model here whose head_dim is not hidden_size // num_attention_heads (256, not 192)
        ("a Gemma-7B-like model (28 layers, 16 heads and KV heads, head_dim 256) in bfloat16 on an L4 (24 GB), "
         "batch 2", _config(hidden_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=16,
                            head_dim=256, intermediate_size=24576, vocab_size=256000), torch.bfloat16, 24 * 10**9, 2),
    ]


def _max_context(config, dtype, memory_bytes, batch, *, params, weights=True, per_token=None,
                 rounding=math.floor):
    size = _element_size(dtype)
    per_token = _kv_bytes(config, 1, 1, dtype) if per_token is None else per_token
    room = memory_bytes - (params * size if weights else 0)
    return rounding(room / (per_token * batch))


def _q3_mistakes(case, params) -> dict:
    _, config, dtype, memory_bytes, batch = case
    right = max(0, _max_context(config, dtype, memory_bytes, batch, params=params))
    per = lambda **kw: _kv_bytes(config, 1, 1, dtype, **kw)   # noqa: E731
    untied = params + (config.vocab_size * config.hidden_size if config.tie_word_embeddings else 0)
    return {
        "you read memory_bytes as GB and turned it into GiB-sized bytes (× 2**30 / 10**9); it is in bytes "
        "already: use it as it is.": max(0, _max_context(config, dtype, memory_bytes / 1e9 * GIB, batch,
                                                         params=params)),
        **{f"you kept {p} % of the memory free; the question asks what fills the memory given, all of it.":
           max(0, _max_context(config, dtype, memory_bytes * (1 - p / 100), batch, params=params))
           for p in (5, 10, 15, 20)},
        "you counted an output layer of vocab_size × hidden_size beside the input embedding; this model "
        "ties the two (config.tie_word_embeddings), so that matrix is stored once: count the parameters "
        "with llm.count_parameters(config).":
            max(0, _max_context(config, dtype, memory_bytes, batch, params=untied)),
        "the weights are missing: the cache gets only what the weights leave of the memory.":
            _max_context(config, dtype, memory_bytes, batch, params=params, weights=False),
        "the batch is missing: the memory holds one cache per sequence, so divide by the batch as well.":
            max(0, _max_context(config, dtype, memory_bytes, 1, params=params)),
        "one token too many: round down (a cache of a fraction of a token does not exist, and rounding up "
        "overflows the memory).": max(0, _max_context(config, dtype, memory_bytes, batch, params=params,
                                                        rounding=math.ceil)) if right else math.nan,
        "one token short where the room beside the weights holds a whole number of tokens exactly: a cache "
        "that fills the memory to the byte fits, so round down with // or math.floor, not math.ceil(...) - 1 "
        "or a strict < in a loop.": max(0, _max_context(config, dtype, memory_bytes, batch, params=params,
                                                         rounding=lambda x: math.ceil(x) - 1)),
        "you returned the exact ratio; the answer is a whole number of tokens: round down.":
            max(0, _max_context(config, dtype, memory_bytes, batch, params=params, rounding=lambda x: x)),
        "the weights' bytes per value are wrong: count the weights in the dtype given, not 2 bytes each.":
            max(0, _max_context(config, dtype, memory_bytes - params * (2 - _element_size(dtype)), batch,
                                params=params)),
        "the weights' bytes per value are wrong: count the weights in the dtype given, not 4 bytes each.":
            max(0, _max_context(config, dtype, memory_bytes - params * (4 - _element_size(dtype)), batch,
                                params=params)),
        "the cache's bytes per value are wrong: a cache in this dtype stores each value in the dtype's own "
        "size, not 2 bytes.": max(0, _max_context(config, dtype, memory_bytes, batch, params=params,
                                                  per_token=per(size=2))),
        "the layers are missing from the cache per token: every layer keeps its own keys and values.":
            max(0, _max_context(config, dtype, memory_bytes, batch, params=params, per_token=per(layers=1))),
        "you used 2 bytes per value for the weights and the cache whatever the dtype: use the dtype's own "
        "size (torch.empty(0, dtype=dtype).element_size()).":
            max(0, _max_context(config, dtype, memory_bytes - params * (2 - _element_size(dtype)), batch,
                                params=params, per_token=per(size=2))),
        "you used 4 bytes per value for the weights and the cache whatever the dtype: use the dtype's own "
        "size (torch.empty(0, dtype=dtype).element_size()).":
            max(0, _max_context(config, dtype, memory_bytes - params * (4 - _element_size(dtype)), batch,
                                params=params, per_token=per(size=4))),
        "the 2 is missing from the cache per token: keys and values.":
            max(0, _max_context(config, dtype, memory_bytes, batch, params=params, per_token=per(factor=1))),
        "you used the query heads; the cache keeps num_key_value_heads heads.":
            max(0, _max_context(config, dtype, memory_bytes, batch, params=params,
                                per_token=per(kv_heads=config.num_attention_heads))),
        "you computed the head dimension as hidden_size // num_attention_heads; this configuration sets "
        "config.head_dim to something else: use config.head_dim.":
            max(0, _max_context(config, dtype, memory_bytes, batch, params=params,
                                per_token=per(head_dim=config.hidden_size // config.num_attention_heads))),
    }


def _check_context(max_context):
    from ..llm import count_parameters

    require_function(max_context, "max_context")
    results, params = [], {}
    for case in _q3_cases():
        description, config, dtype, memory_bytes, batch = case
        params[description] = count_parameters(config)
        what = f"max_context(config, {dtype}, {memory_bytes:_}, {batch}) for {description}"
        raw = call_answer(max_context, config, dtype, memory_bytes, batch, what=what)
        got = as_number(what, raw)
        expected = max(0, _max_context(config, dtype, memory_bytes, batch, params=params[description]))
        if expected == 0 and got < 0:     # however it was rounded: math.floor, int() or //
            raise Wrong(f"{what} returned {got:,.6g}: when the weights alone do not fit, no context fits: "
                        "return 0, not a negative number.")
        results.append((case, got, expected))
    _judge(results, lambda c: _q3_mistakes(c, params[c[0]]),
           lambda c: f"max_context(config, {c[2]}, {c[3]:_}, {c[4]}) for {c[0]}", "tokens", whole=True)
    t4 = results[0]
    return (f"right on {len(results)} cases. Eight sequences of Llama 3.2 1B on a T4 can each hold {t4[2]:,.0f} "
            "tokens before the cache fills what the weights leave.")


q3 = Exercise("ep10.q3", _check_context,
              hint=("Once the weights are in memory, how many bytes are left, and what does one more token cost for the "
                    "whole batch?",
                    "Take the weight bytes (count the parameters of the configuration) from the memory, divide what is "
                    "left by the KV cache bytes of one token for the whole batch, and round down to whole tokens; "
                    "when the weights alone do not fit, no context fits."),
              solution=solution_link(NOTEBOOK))


# --- q4: the batch from which a step reads more cache than weights --------------------------------

def _q4_cases():
    import torch

    from ..llm import llama_config

    tiny = _config(vocab_size=256, hidden_size=96, intermediate_size=128, num_hidden_layers=3,
                   num_attention_heads=6, num_key_value_heads=2, head_dim=32)
    gemma = _config(hidden_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=16,
                    head_dim=256, intermediate_size=24576, vocab_size=256000)
    return [
        ("a small model that the check runs (3 layers, 6 query heads, 2 KV heads, head_dim 32), "
         "float32 weights and cache", tiny, torch.float32, torch.float32, 20),
        ("Llama 3.2 1B, bfloat16 weights and cache", llama_config("Llama-3.2-1B"), torch.bfloat16,
         torch.bfloat16, 4096),
        ("Llama 2 7B, int8 weights, float16 cache", llama_config("Llama-2-7B"), torch.int8, torch.float16, 4096),
        ("SmolLM2-135M, bfloat16 weights, float8_e4m3fn cache", llama_config("SmolLM2-135M"), torch.bfloat16,
         torch.float8_e4m3fn, 8192),
        ("Llama 3.1 70B, bfloat16 weights and cache", llama_config("Llama-3.1-70B"), torch.bfloat16,
         torch.bfloat16, 32768),
        # 297,120 float32 parameters are 1,188,480 bytes, exactly 5 sequences of 619 tokens of float8 cache
        # (237,696 bytes each): there batch 5 reads as many bytes as the weights, so floor + 1 (or a strict >)
        # gives 6 only here
        ("a tiny model (3 layers, 6 query heads, 2 KV heads, head_dim 32, a vocabulary of 200), float32 weights, "
         "float8_e4m3fn cache", _config(vocab_size=200, hidden_size=96, intermediate_size=128, num_hidden_layers=3,
                                        num_attention_heads=6, num_key_value_heads=2, head_dim=32),
         torch.float32, torch.float8_e4m3fn, 619),
        # head_dim 256 is not hidden_size // num_attention_heads (192)
        ("a Gemma-7B-like model (28 layers, 16 heads and KV heads, head_dim 256), bfloat16 weights and cache",
         gemma, torch.bfloat16, torch.bfloat16, 8192),
    ]


def _cache_batch(config, weight_dtype, cache_dtype, context, *, params, per_sequence=None,
                 weight_size=None, rounding=math.ceil, **kv):
    """The smallest batch whose cache read per step is at least the weights' bytes."""
    weight_size = _element_size(weight_dtype) if weight_size is None else weight_size
    if per_sequence is None:
        per_sequence = _kv_bytes(config, context, 1, cache_dtype, **kv)
    return rounding(params * weight_size / per_sequence)


def _q4_mistakes(case, params) -> dict:
    _, config, weight_dtype, cache_dtype, context = case
    batch = lambda **kw: _cache_batch(config, weight_dtype, cache_dtype, context, params=params, **kw)  # noqa: E731
    untied = params + (config.vocab_size * config.hidden_size if config.tie_word_embeddings else 0)
    return {
        "you counted an output layer of vocab_size × hidden_size beside the input embedding; this model "
        "ties the two (config.tie_word_embeddings), so that matrix is stored once: count the parameters "
        "with llm.count_parameters(config).":
            _cache_batch(config, weight_dtype, cache_dtype, context, params=untied),
        "round up: the answer is the smallest whole batch whose cache read reaches the weights' bytes, "
        "not the exact ratio.": batch(rounding=lambda x: x),
        "one batch too few: round up (rounding down gives a batch whose cache read is still below the "
        "weights').": batch(rounding=math.floor),
        "one batch too many where one sequence's cache divides the weights' bytes exactly: there that batch's "
        "cache reads as many bytes as the weights, which counts ('at least as many'), so round up with "
        "math.ceil, not math.floor(...) + 1 or a strict > in a loop.": batch(rounding=lambda x: math.floor(x) + 1),
        "one batch too many: math.ceil already gives the smallest batch whose cache reaches the weights' "
        "bytes; do not add 1 to it.": batch() + 1,
        "that is the ratio the other way up: divide the weights' bytes by one sequence's cache bytes.":
            math.ceil(_kv_bytes(config, context, 1, cache_dtype)
                      / (params * _element_size(weight_dtype))),
        "the weights' bytes per value are wrong: count them in weight_dtype's size, not 2 bytes each.":
            batch(weight_size=2),
        "the 2 is missing from the cache: every step reads the keys *and* the values.": batch(factor=1),
        "you used the query heads; the cache keeps num_key_value_heads heads.":
            batch(kv_heads=config.num_attention_heads),
        "you computed the head dimension as hidden_size // num_attention_heads; this configuration sets "
        "config.head_dim to something else: use config.head_dim.":
            batch(head_dim=config.hidden_size // config.num_attention_heads),
        "the layers are missing from the cache: a step reads every layer's keys and values.": batch(layers=1),
        "the context is missing: a step reads the cache of every earlier token, not of one.":
            batch(per_sequence=_kv_bytes(config, 1, 1, cache_dtype)),
        # the weights in the cache's dtype and the cache in the weights' give the same ratio
        "you used one dtype for both: the weights have weight_dtype's bytes per value and the cache "
        "cache_dtype's.": batch(weight_size=_element_size(cache_dtype)),
    }


def _check_cache_batch(cache_read_batch):
    from ..llm import count_parameters, gpus

    require_function(cache_read_batch, "cache_read_batch")
    results, params = [], {}
    for case in _q4_cases():
        description, config, weight_dtype, cache_dtype, context = case
        params[description] = count_parameters(config)
        what = f"cache_read_batch(config, {weight_dtype}, {cache_dtype}, {context}) for {description}"
        got = as_number(what, call_answer(cache_read_batch, config, weight_dtype, cache_dtype, context,
                                          what=what))
        measured = (_measured_cache(config, context, 1, cache_dtype) if description.startswith("a small")
                    else None)
        expected = _cache_batch(config, weight_dtype, cache_dtype, context, params=params[description],
                                per_sequence=measured)
        results.append((case, got, expected))
    _judge(results, lambda c: _q4_mistakes(c, params[c[0]]),
           lambda c: f"cache_read_batch(config, {c[2]}, {c[3]}, {c[4]}) for {c[0]}", "sequences", whole=True)
    case, _, batch = results[2]
    weights = params[case[0]] * _element_size(case[2])
    step = weights + _kv_bytes(case[1], case[4], batch, case[3])
    h100 = gpus()["H100 SXM"]["bandwidth_gbs"] * 1e9
    return (f"right on {len(results)} cases, the first measured on a model the check ran. Llama 2 7B in int8 "
            f"with a 16-bit cache at 4,096 tokens reads more cache than weights from batch {batch:.0f}; a "
            f"step then reads {step / 1e9:.1f} GB, at least {step / h100 * 1e3:.1f} ms on an H100 SXM "
            f"({h100 / 1e9:,.0f} GB/s): from there on, the cache is the larger part of what a step reads.")


q4 = Exercise("ep10.q4", _check_cache_batch,
              hint=("One decode step reads all the weights once, and the cache of every sequence of the batch. "
                    "How many bytes of cache does one sequence add to a step?",
                    "Divide the weight bytes (parameters × the weights' bytes per value) by the cache bytes of one "
                    "sequence at this context (in the cache's dtype), and round up to a whole batch."),
              solution=solution_link(NOTEBOOK))


__all__ = ["q1", "q2", "q3", "q4", "NotDone"]
