"""Episode 10's checks, three ways: right answers pass, stubs are "not done", wrong answers teach.

Each exercise has a list of plausible wrong answers named by their mistake: forgetting the 2 for keys and
values, query heads instead of KV heads, GiB for GB, bits for bytes, seconds for milliseconds, the weights or
the batch left out, rounding up or down, answers right on one case only, and constants. Every one must be
rejected with a message that names its mistake.
"""

from __future__ import annotations

import math

import pytest
import torch

from gpucourse import llm
from gpucourse.checks import ep10
from gpucourse.exercises import ____

from checking import assert_two_step_hints, assert_wrong, outcome

GIB = 2**30


def size_of(dtype):
    return torch.empty(0, dtype=dtype).element_size()


# --- q1: KV-cache bytes ------------------------------------------------------------------------

def kv_cache_bytes(config, tokens, batch, dtype):
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * size_of(dtype) * tokens * batch


def kv_cache_bytes_itemsize(config, tokens, batch, dtype):
    per_layer = 2 * config.num_key_value_heads * config.head_dim * dtype.itemsize
    return float(per_layer * config.num_hidden_layers * tokens * batch)


def kv_formula(factor=2, heads="kv", head_dim="config", size=None, batch=True, layers=True, scale=1.0):
    def fn(config, tokens, b, dtype):
        h = {"kv": config.num_key_value_heads, "q": config.num_attention_heads}[heads]
        d = config.head_dim if head_dim == "config" else config.hidden_size // config.num_attention_heads
        s = size_of(dtype) if size is None else size
        return factor * (config.num_hidden_layers if layers else 1) * h * d * s * tokens * (b if batch else 1) * scale
    return fn


def kv_hidden(config, tokens, batch, dtype):
    return 2 * config.num_hidden_layers * config.hidden_size * size_of(dtype) * tokens * batch


def kv_right_once(config, tokens, batch, dtype):
    return kv_cache_bytes(config, tokens, batch, dtype) if tokens == 20 else 12345


Q1_WRONG = {
    "forgot the 2 for K and V": (kv_formula(factor=1), ["keys *and* values"]),
    "query heads instead of KV heads": (kv_formula(heads="q"), ["query heads", "num_key_value_heads"]),
    "hidden_size per layer": (kv_hidden, ["hidden_size"]),
    "head dim from hidden_size // heads": (kv_formula(head_dim="derived"), ["config.head_dim"]),
    "4 bytes for every dtype": (kv_formula(size=4), ["dtype's own size"]),
    "2 bytes for every dtype": (kv_formula(size=2), ["dtype's own size"]),
    "bits instead of bytes": (kv_formula(scale=8), ["bits"]),
    "GiB instead of bytes": (kv_formula(scale=1 / GIB), ["GiB"]),
    "GB instead of bytes": (kv_formula(scale=1e-9), ["in GB"]),
    "forgot the batch": (kv_formula(batch=False), ["batch"]),
    "forgot the layers": (kv_formula(layers=False), ["layers"]),
    "a constant": (lambda config, tokens, batch, dtype: 1_000_000, ["for every case"]),
    "right on one case only": (kv_right_once, ["right for 1 of the 5"]),
    "text": (lambda config, tokens, batch, dtype: "1 GB", ["should be a number"]),
    "half a byte": (lambda config, tokens, batch, dtype: kv_cache_bytes(config, tokens, batch, dtype) + 0.5,
                    ["whole number"]),
    # on the small model 3 query heads per KV head × head_dim 32 = hidden_size 96: the group size must still be
    # named, not hidden_size
    "the group size for the KV heads": (
        lambda config, tokens, batch, dtype: 2 * config.num_hidden_layers * config.head_dim * size_of(dtype)
        * (config.num_attention_heads // config.num_key_value_heads) * tokens * batch, ["group"]),
    "the 2 twice": (kv_formula(factor=4), ["2 twice"]),
    "one token too many": (lambda config, tokens, batch, dtype: kv_cache_bytes(config, tokens + 1, batch, dtype),
                           ["one token too many"]),
}


def test_q1_right_answers_pass_and_stubs_are_not_done():
    for fn in (kv_cache_bytes, kv_cache_bytes_itemsize):
        result, message = outcome(ep10.q1, fn)
        assert result == "correct", message
    assert outcome(ep10.q1, ____)[0] == "not-done"
    assert outcome(ep10.q1, lambda config, tokens, batch, dtype: ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q1_WRONG)
def test_q1_wrong_answers_are_named(name):
    fn, words = Q1_WRONG[name]
    assert_wrong(ep10.q1, (fn,), words)


def test_q1_measures_a_real_cache():
    """The first case's expected value is the cache a model really holds, not the check's own formula."""
    config = llm.llama_config("SmolLM2-135M", num_hidden_layers=2, hidden_size=64, intermediate_size=64,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=64)
    assert ep10._measured_cache(config, 7, 2, torch.float32) == kv_cache_bytes(config, 7, 2, torch.float32)


# --- q2: the decode floor --------------------------------------------------------------------------

def decode_floor_ms(n_params, dtype, gpu):
    return n_params * size_of(dtype) / (llm.gpus()[gpu]["bandwidth_gbs"] * 1e9) * 1e3


def floor_variant(size=None, bandwidth_unit=1e9, scale=1e3, memory=False, invert=False):
    def fn(n, dtype, gpu):
        spec = llm.gpus()[gpu]
        s = size_of(dtype) if size is None else size
        denominator = spec["memory_bytes"] if memory else spec["bandwidth_gbs"] * bandwidth_unit
        value = n * s / denominator * scale
        return 1e3 / value if invert else value
    return fn


Q2_WRONG = {
    "GiB/s instead of GB/s": (floor_variant(bandwidth_unit=GIB), ["GiB/s"]),
    "GB/s not turned into bytes/s": (floor_variant(bandwidth_unit=1), ["bytes per second first"]),
    "two operations per weight": (floor_variant(scale=2e3), ["two operations per weight"]),
    "forgot the bytes per weight": (floor_variant(size=1), ["bytes per weight"]),
    "4 bytes always": (floor_variant(size=4), ["dtype's own size"]),
    "2 bytes always": (floor_variant(size=2), ["dtype's own size"]),
    "seconds instead of ms": (floor_variant(scale=1), ["seconds"]),
    "microseconds instead of ms": (floor_variant(scale=1e6), ["microseconds"]),
    "tokens per second": (floor_variant(invert=True), ["tokens per second"]),
    "memory size instead of bandwidth": (floor_variant(memory=True), ["memory size"]),
    "bits": (floor_variant(scale=8e3), ["bits"]),
    "a constant": (lambda n, dtype, gpu: 42.1, ["for every case"]),
    "a wrong GPU table": (lambda n, dtype, gpu: n * size_of(dtype) / 320e9 * 1e3, ["right for 1 of the 4"]),
}


def test_q2_right_answer_passes_and_stub_is_not_done():
    result, message = outcome(ep10.q2, decode_floor_ms)
    assert result == "correct", message
    assert outcome(ep10.q2, ____)[0] == "not-done"
    assert outcome(ep10.q2, lambda n, dtype, gpu: ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q2_WRONG)
def test_q2_wrong_answers_are_named(name):
    fn, words = Q2_WRONG[name]
    assert_wrong(ep10.q2, (fn,), words)


# --- q3: the longest context -------------------------------------------------------------------------

def max_context(config, dtype, memory_bytes, batch):
    size = size_of(dtype)
    weights = llm.count_parameters(config) * size
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * size
    return max(0, (memory_bytes - weights) // (per_token * batch))


def context_variant(weights=True, batch=True, factor=2, heads="kv", rounding=math.floor, clamp=True,
                    head_dim="config", size=None, cache_size=None, layers=True):
    def fn(config, dtype, memory_bytes, b):
        w_size = size or size_of(dtype)
        c_size = cache_size or size or size_of(dtype)
        h = config.num_key_value_heads if heads == "kv" else config.num_attention_heads
        d = config.head_dim if head_dim == "config" else config.hidden_size // config.num_attention_heads
        per_token = factor * (config.num_hidden_layers if layers else 1) * h * d * c_size
        room = memory_bytes - (llm.count_parameters(config) * w_size if weights else 0)
        value = rounding(room / (per_token * (b if batch else 1)))
        return max(0, value) if clamp else value
    return fn


Q3_WRONG = {
    "forgot the weights": (context_variant(weights=False), ["weights are missing"]),
    "forgot the batch": (context_variant(batch=False), ["batch is missing"]),
    "rounded up": (context_variant(rounding=math.ceil), ["one token too many"]),
    "forgot the 2": (context_variant(factor=1), ["keys and values"]),
    "query heads": (context_variant(heads="q"), ["query heads"]),
    "negative when the weights do not fit": (context_variant(clamp=False), ["return 0"]),
    "negative, truncated with int()": (context_variant(clamp=False, rounding=int), ["return 0"]),
    "a float with a fraction": (lambda *args: max_context(*args) + 0.25, ["whole number"]),
    "a constant": (lambda config, dtype, memory_bytes, batch: 4096, ["for every case"]),
    "head dim from hidden_size // heads": (context_variant(head_dim="derived"), ["config.head_dim"]),
    # a boundary: passed on the check before its case whose room holds a whole number of tokens
    "rounded up, then 1 taken away": (context_variant(rounding=lambda x: math.ceil(x) - 1),
                                      ["one token short", "to the byte"]),
    "a strict < in a loop": (lambda config, dtype, memory_bytes, b: context_loop(config, dtype, memory_bytes, b,
                                                                                 strict=True),
                             ["one token short", "strict <"]),
    "the exact ratio": (context_variant(rounding=lambda x: x), ["exact ratio", "round down"]),
    "2 bytes for every dtype": (context_variant(size=2), ["2 bytes per value", "dtype's own"]),
    "the cache in 2 bytes": (context_variant(cache_size=2), ["cache's bytes per value"]),
    "forgot the layers": (context_variant(layers=False), ["layers are missing"]),
}


def context_loop(config, dtype, memory_bytes, batch, strict=False):
    """Grow the context a token at a time (in steps of 1,024 first) while the weights and cache fit."""
    size = size_of(dtype)
    weights = llm.count_parameters(config) * size
    fits = (lambda t: weights + kv_cache_bytes(config, t, batch, dtype) < memory_bytes) if strict else (
        lambda t: weights + kv_cache_bytes(config, t, batch, dtype) <= memory_bytes)
    if not fits(0):
        return 0
    tokens = 0
    for step in (1024, 1):
        while fits(tokens + step):
            tokens += step
    return tokens


def test_q3_a_loop_that_fills_the_memory_to_the_byte_passes():
    result, message = outcome(ep10.q3, context_loop)
    assert result == "correct", message


def test_q3_has_a_case_at_its_boundary():
    """One case's room beside the weights holds a whole number of tokens (ceil - 1 and a strict <
    are one short only there); the others do not, so rounding up and down differ."""
    exact = []
    for description, config, dtype, memory_bytes, batch in ep10._q3_cases():
        room = memory_bytes - llm.count_parameters(config) * size_of(dtype)
        if room > 0:
            exact.append(float(room / kv_cache_bytes(config, 1, batch, dtype)).is_integer())
    assert exact.count(True) == 1 and len(exact) >= 4


def test_q3_right_answer_passes_and_stub_is_not_done():
    result, message = outcome(ep10.q3, max_context)
    assert result == "correct", message
    assert outcome(ep10.q3, ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q3_WRONG)
def test_q3_wrong_answers_are_named(name):
    fn, words = Q3_WRONG[name]
    assert_wrong(ep10.q3, (fn,), words)


# --- q4: the batch from which a step reads more cache than weights ---------------------------------

def cache_read_batch(config, weight_dtype, cache_dtype, context):
    weights = llm.count_parameters(config) * size_of(weight_dtype)
    per_sequence = (2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim
                    * size_of(cache_dtype) * context)
    return math.ceil(weights / per_sequence)


def cache_read_batch_loop(config, weight_dtype, cache_dtype, context, strict=False):
    """Another right way: grow the batch until the cache read reaches the weights."""
    weights, batch = llm.count_parameters(config) * size_of(weight_dtype), 1
    while (kv_cache_bytes(config, context, batch, cache_dtype) <= weights if strict
           else kv_cache_bytes(config, context, batch, cache_dtype) < weights):
        batch += 1
    return batch


def batch_variant(rounding=math.ceil, factor=2, heads="kv", head_dim="config", layers=True, context=True,
                  weight_dtype="own", cache_dtype="own", weight_size=None):
    def fn(config, wdt, cdt, n):
        w_size = weight_size or size_of(cdt if weight_dtype == "cache" else wdt)
        c_size = size_of(wdt if cache_dtype == "weights" else cdt)
        h = config.num_key_value_heads if heads == "kv" else config.num_attention_heads
        d = config.head_dim if head_dim == "config" else config.hidden_size // config.num_attention_heads
        per = factor * (config.num_hidden_layers if layers else 1) * h * d * c_size * (n if context else 1)
        return rounding(llm.count_parameters(config) * w_size / per)
    return fn


Q4_WRONG = {
    "rounded down": (batch_variant(rounding=math.floor), ["round up"]),
    "the exact ratio": (batch_variant(rounding=lambda x: x), ["round up", "ratio"]),
    "forgot the 2": (batch_variant(factor=1), ["keys *and* the values"]),
    "query heads": (batch_variant(heads="q"), ["query heads"]),
    "head dim from hidden_size // heads": (batch_variant(head_dim="derived"), ["config.head_dim"]),
    "forgot the layers": (batch_variant(layers=False), ["layers are missing"]),
    "forgot the context": (batch_variant(context=False), ["context is missing"]),
    "weights in the cache's dtype": (batch_variant(weight_dtype="cache"), ["one dtype for both"]),
    "cache in the weights' dtype": (batch_variant(cache_dtype="weights"), ["one dtype for both"]),
    "a constant": (lambda config, wdt, cdt, n: 8, ["for every case"]),
    "text": (lambda config, wdt, cdt, n: "batch 8", ["should be a number"]),
    # a boundary: passed on the check before its case where one sequence's cache divides the weights exactly
    "rounded down, then 1 added": (batch_variant(rounding=lambda x: math.floor(x) + 1),
                                   ["one batch too many", "divides the weights' bytes exactly"]),
    "a strict > in a loop": (lambda *args: cache_read_batch_loop(*args, strict=True),
                             ["one batch too many", "strict >"]),
    "rounded up, then 1 added": (lambda *args: cache_read_batch(*args) + 1, ["do not add 1"]),
    # gives 1 on every case: named as the ratio upside down, not as a constant
    "the ratio upside down": (lambda config, wdt, cdt, n: math.ceil(
        kv_cache_bytes(config, n, 1, cdt) / (llm.count_parameters(config) * size_of(wdt))), ["other way up"]),
    "weights in 2 bytes": (batch_variant(weight_size=2), ["weight_dtype's size"]),
}


def test_q4_right_answers_pass_and_stubs_are_not_done():
    for fn in (cache_read_batch, cache_read_batch_loop):
        result, message = outcome(ep10.q4, fn)
        assert result == "correct", message
    assert outcome(ep10.q4, ____)[0] == "not-done"
    assert outcome(ep10.q4, lambda config, wdt, cdt, n: ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q4_WRONG)
def test_q4_wrong_answers_are_named(name):
    fn, words = Q4_WRONG[name]
    assert_wrong(ep10.q4, (fn,), words)


def test_q4_fixtures_separate_the_quantities_the_prompt_names():
    """Weight and cache dtypes differ somewhere; so do KV and query heads, and head_dim and hidden // heads;
    one case's ratio is a whole number (floor + 1 and a strict > are one too many only there), and
    the others' are not, so rounding down and up differ."""
    cases = ep10._q4_cases()
    assert any(w != c for _, _, w, c, _ in cases)
    assert any(c.num_key_value_heads != c.num_attention_heads for _, c, _, _, _ in cases)
    assert any(c.head_dim != c.hidden_size // c.num_attention_heads for _, c, _, _, _ in cases)
    whole = [float(llm.count_parameters(config) * size_of(wdt) / kv_cache_bytes(config, n, 1, cdt)).is_integer()
             for _, config, wdt, cdt, n in cases]
    assert whole.count(True) == 1 and len(whole) >= 5


# --- the helper --------------------------------------------------------------------------------------

def test_token_clock_gives_ttft_itl_and_tokens_per_second():
    from transformers import LlamaForCausalLM

    config = llm.llama_config("SmolLM2-135M", num_hidden_layers=1, hidden_size=64, intermediate_size=64,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=64)
    model = LlamaForCausalLM(config).eval()
    clock = llm.TokenClock()
    ids = torch.randint(1, 64, (1, 5))
    out = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False, streamer=clock,
                         pad_token_id=0)
    assert out.shape[1] - ids.shape[1] == 6 and len(clock.arrivals) == 6      # one arrival per step
    m = clock.metrics()
    assert 0 < m["ttft_s"] <= clock.arrivals[-1][0]
    assert 0 < m["itl_p50_s"] <= m["itl_p90_s"]
    assert m["tokens_per_s_per_user"] == pytest.approx(6 / clock.arrivals[-1][0])
    assert clock.metrics(batch=4)["tokens_per_s_total"] == pytest.approx(4 * m["tokens_per_s_per_user"])


def test_token_clock_counts_several_tokens_accepted_in_one_step():
    clock = llm.TokenClock()
    clock.put(torch.zeros(1, 7))                  # the prompt
    clock.put(torch.zeros(1))                     # one token
    clock.put(torch.zeros(1, 3))                  # three accepted at once (assisted decoding)
    assert [n for _, n in clock.arrivals] == [1, 3]
    with pytest.raises(ValueError, match="at least 2 new tokens"):
        llm.TokenClock().metrics()


def test_chat_model_offline_says_why(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    model, tokenizer, about = llm.load_chat_model(device="cpu", dtype=torch.float32)
    assert model is None and tokenizer is None and "GPUCOURSE_OFFLINE=1" in about


def test_chat_model_download_is_pinned(monkeypatch):
    seen = {}

    def fake_download(repo_id=llm.REPO_ID, revision=llm.REVISION):
        seen.update(repo_id=repo_id, revision=revision)
        raise OSError("no network here")

    monkeypatch.delenv("GPUCOURSE_OFFLINE", raising=False)
    monkeypatch.setattr(llm, "download", fake_download)
    model, _, about = llm.load_chat_model(device="cpu", dtype=torch.float32)
    assert model is None and "OSError: no network here" in about
    assert seen == {"repo_id": llm.INSTRUCT_REPO_ID, "revision": llm.INSTRUCT_REVISION}
    assert len(llm.INSTRUCT_REVISION) == 40


def test_parameter_counts_match_the_published_sizes():
    assert llm.count_parameters(llm.llama_config("SmolLM2-135M")) == 134_515_008
    assert llm.count_parameters(llm.llama_config("Llama-2-7B")) == 6_738_415_616


def test_offline_model_is_the_architecture_with_random_weights(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    monkeypatch.delenv("GPUCOURSE_REQUIRE_REAL_DATA", raising=False)
    model, tokenizer, about = llm.load_model(device="cpu", dtype=torch.float32, layers=1)
    assert tokenizer is None and "RANDOM weights" in about and "1 of 30 layers" in about
    assert model.config.hidden_size == 576 and model.config.num_key_value_heads == 3


def test_offline_model_is_refused_when_real_data_is_required(monkeypatch):
    from gpucourse.settings import StandInRefused

    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    monkeypatch.setenv("GPUCOURSE_REQUIRE_REAL_DATA", "1")
    with pytest.raises(StandInRefused):
        llm.load_model(device="cpu", dtype=torch.float32, layers=1)


def test_a_failed_download_falls_back_with_its_reason(monkeypatch):
    import httpx

    monkeypatch.delenv("GPUCOURSE_OFFLINE", raising=False)
    monkeypatch.delenv("GPUCOURSE_REQUIRE_REAL_DATA", raising=False)

    def no_network():
        raise httpx.ConnectTimeout("timed out")

    monkeypatch.setattr(llm, "download", no_network)
    model, tokenizer, about = llm.load_model(device="cpu", dtype=torch.float32, layers=1)
    assert tokenizer is None and "the download failed: ConnectTimeout: timed out" in about


def test_gpu_table_takes_memory_from_the_course_table_and_bandwidth_from_datasheets():
    from gpucourse import feasibility

    gpus, table = llm.gpus(), feasibility.gpu_models()
    assert gpus["T4"] == {"memory_bytes": table["T4"]["total_memory"], "model": "Tesla T4",
                          "bandwidth_gbs": 320}
    assert gpus["H100 SXM"]["bandwidth_gbs"] == 3350 and gpus["H200"]["bandwidth_gbs"] == 4800
    for name, (key, _) in llm.FIT_GPUS.items():
        assert gpus[name]["memory_bytes"] == table[key]["total_memory"], name
    assert gpus["B200"]["bandwidth_gbs"] is None          # no datasheet figure in the course


def test_the_141_to_192_gb_cards_change_the_fit_conclusions():
    """A 7B model's 16 B/param state fits an H200 and a B200, not an H100; 70B bf16 fits a B200."""
    gpus = llm.gpus()
    state_7b = 16 * llm.count_parameters(llm.llama_config("Llama-2-7B"))
    weights_70b = 2 * llm.count_parameters(llm.llama_config("Llama-3.1-70B"))
    fits = lambda nbytes, gpu: nbytes <= 0.9 * gpus[gpu]["memory_bytes"]   # noqa: E731
    assert not fits(state_7b, "H100 SXM") and fits(state_7b, "H200") and fits(state_7b, "B200")
    assert fits(weights_70b, "B200") and not fits(weights_70b, "H200")


# --- hints ------------------------------------------------------------------------------------------

CODE = ("()", " = ", "==", "return ", "import", "[", "]", "**", "//", "sqrt", "√", "86_400", "86400", "os.", "torch.",
        "np.", "llm.", "math.", "state_dict", "getstate", "get_state", "fsync", "replace(", "config.", "_proj ")


@pytest.mark.parametrize("exercise", [ep10.q1, ep10.q2, ep10.q3, ep10.q4], ids=lambda q: q.name)
def test_hints_come_in_two_steps_without_the_code(exercise, capsys):
    assert_two_step_hints(exercise, capsys, CODE)


# --- answers written by an independent review, each named by its own mistake ----------------------
# (each helper below is one reviewer's answer; the first ones of each exercise were named by another
# mistake, or by none, before the candidates they now meet were added)

def _kv(config, tokens, batch, dtype, factor=2, heads=None):
    heads = config.num_key_value_heads if heads is None else heads
    return factor * config.num_hidden_layers * heads * config.head_dim * size_of(dtype) * tokens * batch


def _floor(n, dtype, gpu, scale=1e3, bandwidth=None):
    return n * dtype.itemsize / (bandwidth or llm.gpus()[gpu]["bandwidth_gbs"] * 1e9) * scale


def _context(config, dtype, memory_bytes, batch, memory=None, params=None, cache_size=None, rounding=None):
    size = size_of(dtype)
    params = llm.count_parameters(config) if params is None else params(config)
    per_token = _kv(config, 1, 1, dtype) // size * (cache_size or size)
    room = (memory or (lambda m: m))(memory_bytes) - params * size
    return max(0, (rounding or (lambda x: x // 1))(room / (per_token * batch)))


def _untied(config):
    h, layers, d = config.hidden_size, config.num_hidden_layers, config.head_dim
    q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
    return 2 * config.vocab_size * h + layers * (2 * h * q + 2 * h * kv + 3 * h * config.intermediate_size
                                                 + 2 * h) + h


def _batch(config, wdt, cdt, context, params=None, per=None, weights=None):
    weights = (llm.count_parameters(config) if params is None else params(config)) * size_of(wdt)
    sequence = _kv(config, context, 1, cdt) if per is None else per(config, cdt, context)
    return math.ceil(weights / sequence)


REVIEWED = [
    # q1
    (ep10.q1, lambda c, t, b, d: _kv(c, t, b, d) / 1e6, ["in MB"]),
    (ep10.q1, lambda c, t, b, d: _kv(c, t, b, d, factor=3), ["three tensors", "keys and values"]),
    (ep10.q1, lambda c, t, b, d: _kv(c, t, b, d) / 2**30, ["in GiB"]),
    (ep10.q1, lambda c, t, b, d: _kv(c, t, b, d, factor=4), ["2 twice"]),
    (ep10.q1, lambda c, t, b, d: _kv(c, t, b, d, heads=c.num_attention_heads // c.num_key_value_heads),
     ["group size"]),
    (ep10.q1, lambda c, t, b, d: _kv(c, t + 1, b, d), ["one token too many"]),
    # q2
    (ep10.q2, lambda n, d, g: _floor(n, d, g) / 0.9, ["90 % of the bandwidth"]),
    (ep10.q2, lambda n, d, g: _floor(n, d, g, bandwidth=llm.gpus()[g]["bandwidth_gbs"] * 1e9 / 2),
     ["a read and a write"]),
    (ep10.q2, lambda n, d, g: round(_floor(n, d, g), 1), ["rounded the result to 1 decimal"]),
    (ep10.q2, lambda n, d, g: _floor(n, d, g, bandwidth=320e9), ["T4's bandwidth for every GPU"]),
    (ep10.q2, lambda n, d, g: _floor(n, d, g, scale=1e6), ["microseconds"]),
    (ep10.q2, lambda n, d, g: _floor(n, d, g, bandwidth=llm.gpus()[g]["bandwidth_gbs"]), ["× 10**9"]),
    (ep10.q2, lambda n, d, g: n * d.itemsize / llm.gpus()[g]["memory_bytes"] * 1e3, ["memory size"]),
    (ep10.q2, lambda n, d, g: 1e3 / _floor(n, d, g), ["tokens per second"]),
    # q3
    (ep10.q3, lambda c, d, m, b: _context(c, d, m, b, memory=lambda m: m / 1e9 * 2**30), ["as GB", "GiB"]),
    (ep10.q3, lambda c, d, m, b: _context(c, d, m, b, memory=lambda m: 0.9 * m), ["10 % of the memory free"]),
    (ep10.q3, lambda c, d, m, b: _context(c, d, m, b, params=_untied), ["tie_word_embeddings"]),
    (ep10.q3, lambda c, d, m, b: _context(c, d, m, b, rounding=lambda x: math.ceil(x) - 1), ["one token short"]),
    (ep10.q3, lambda c, d, m, b: _context(c, d, m, b, cache_size=2), ["cache's bytes per value"]),
    (ep10.q3, lambda c, d, m, b: _context(c, d, m, b, memory=lambda m: m + llm.count_parameters(c) * size_of(d)),
     ["weights are missing"]),
    (ep10.q3, lambda c, d, m, b: int((m - llm.count_parameters(c) * size_of(d)) // (_kv(c, 1, b, d))),
     ["return 0"]),
    # q4
    (ep10.q4, lambda c, w, k, n: _batch(c, w, k, n, params=_untied), ["tie_word_embeddings"]),
    (ep10.q4, lambda c, w, k, n: math.ceil(_kv(c, n, 1, k) / (llm.count_parameters(c) * size_of(w))),
     ["other way up"]),
    (ep10.q4, lambda c, w, k, n: _batch(c, w, k, n, per=lambda c, k, n: _kv(c, 1, 1, k)), ["context is missing"]),
    (ep10.q4, lambda c, w, k, n: _batch(c, w, k, n) + 1, ["do not add 1"]),
    (ep10.q4, lambda c, w, k, n: math.ceil(llm.count_parameters(c) * size_of(k) / _kv(c, n, 1, k)),
     ["one dtype for both"]),
]


@pytest.mark.parametrize("index", range(len(REVIEWED)))
def test_reviewed_wrong_answers_are_named_by_their_own_mistake(index):
    exercise, fn, words = REVIEWED[index]
    assert_wrong(exercise, (fn,), words)
