"""Episode 10's taught line, its sizes, its two-GPU answer and its cells on every device.

The KV-cache measurement is written in a cell (``cache_bytes``: the bytes of the keys and values
each layer of transformers' cache holds); later cells and the exercises' checks call
``llm.cache_bytes``, and the two must stay the same code; so must the timed-generation
functions and ``gpucourse.generation``, which episode 14 calls. The device-map cells plan Llama 2 7B
across two T4s on the meta device, with no GPU. The predict-then-reveal
on the decode floor quotes the H100 record; each figure it quotes is worked out here from
the record. Episode 14's cells are tested in ``tests/test_taught_ep14.py``, the first screen the
two share in ``tests/test_taught_llm_first_screen.py``.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from gpucourse import feasibility, generation, llm, reference, settings
from taught import (ROOT, assert_same_function, code_cell, code_cells, prediction,
                    run_marked)

EPISODE = "episodes/10-language-model.ipynb"


def cell(marker: str) -> str:
    return code_cell(EPISODE, marker)


def run(markers, namespace: dict | None = None) -> tuple[dict, str]:
    return run_marked(EPISODE, markers, namespace)


# --------------------------------------------------------------------------- the KV cache, taught

def test_the_cache_measurement_is_written_in_a_cell_and_is_llms_helper():
    assert_same_function(EPISODE, "cache_bytes", llm.cache_bytes)
    taught = cell("def cache_bytes(")
    assert "cache.layers" in taught and "layer.keys" in taught and "layer.values" in taught


def test_the_weight_dtype_is_written_in_a_cell_and_is_llms_helper():
    """Episode 10 teaches the choice in a cell; episode 14 calls llm.weight_dtype."""
    assert_same_function(EPISODE, "weight_dtype", llm.weight_dtype)
    assert "dtype = llm.weight_dtype(device)" in code_cell(
        "episodes/14-cheaper-language-model.ipynb", "llm.weight_dtype(")


GENERATION = ["generate_timed", "generate_clocked", "show_metrics"]


@pytest.mark.parametrize("name", GENERATION)
def test_the_timed_generation_is_written_in_cells_and_is_generations_helper(name):
    """Episode 10 teaches timing generation in cells; episode 14 calls gpucourse.generation."""
    assert_same_function(EPISODE, name, getattr(generation, name))
    later = "\n".join(code_cells("episodes/14-cheaper-language-model.ipynb"))
    assert f"def {name}(" not in later
    assert f"{name}(" in later


def test_the_prefill_rows_are_measured_with_the_taught_function():
    source = cell("def prefill_cache_bytes(")
    assert re.search(r"return cache_bytes\(cache\)", source)
    assert "llm.cache_bytes" not in source


def test_the_cell_and_the_helper_measure_a_real_cache_as_the_formula_says():
    ns, _ = run(["def cache_bytes("], {"torch": torch})
    config = llm.llama_config("SmolLM2-135M", num_hidden_layers=2)
    llm.import_libraries()
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 100, (3, 5)), use_cache=True).past_key_values
    formula = 2 * 2 * config.num_key_value_heads * config.head_dim * 4 * 5 * 3
    assert ns["cache_bytes"](cache) == llm.cache_bytes(cache) == formula


# --------------------------------------------------------------------------- sizes

def test_the_sizes_come_from_the_episodes_file_and_no_mode_table_is_left():
    table = json.loads((settings.SIZES_DIR / "ep10.json").read_text(encoding="utf-8"))
    assert set(table) == set(settings.MODES)
    keys = {mode: set(row) for mode, row in table.items()}
    assert keys["full"] == keys["reduced"] == keys["quick"]
    assert feasibility.full_sizes(ROOT / EPISODE)["SIZES"] == table["full"]
    assert not any(re.search(r"\}\s*\[MODE\]", source) for source in code_cells(EPISODE))


# --------------------------------------------------------------------------- every device

def test_cuda_only_parts_say_so_or_take_another_way_elsewhere():
    assert cell("reference.gpu_model(gpu_name)").startswith('if device.type == "cuda":')


# --------------------------------------------------------------------------- two GPUs

def plan_namespace() -> tuple[dict, str]:
    return run(["with torch.device(\"meta\"):", "infer_auto_device_map(llama_7b",
                "first = device_map["], {"torch": torch, "llm": llm, "logging": __import__("logging")})


def test_llama_7b_is_planned_across_two_t4s_without_a_gpu():
    ns, out = plan_namespace()
    plan = ns["device_map"]
    assert plan["model.embed_tokens"] == 0 and plan["lm_head"] == 1
    layers = [plan[f"model.layers.{i}"] for i in range(32)]
    assert layers == sorted(layers) and set(layers) == {0, 1}        # one cut, in order
    lines = out.splitlines()
    assert lines[1].startswith("cuda:0 ← model.embed_tokens, model.layers.0-")
    assert lines[2].startswith("cuda:1 ← model.layers.") and lines[2].endswith("lm_head")
    assert "ids.to(model.device), which is cuda:0 here" in out
    assert "made on cuda:1" in out
    assert "is not available" not in out


def test_the_plan_is_printed_in_a_few_lines():
    ns, out = plan_namespace()
    assert len(llm.device_map_lines(ns["device_map"])) == 2 and len(out.splitlines()) <= 5


def test_device_map_lines_joins_consecutive_layers_only():
    plan = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 0,
            "model.layers.3": 0, "model.layers.4": 1, "lm_head": "cpu"}
    assert llm.device_map_lines(plan) == [
        "cuda:0 ← model.embed_tokens, model.layers.0-1, model.layers.3",
        "cuda:1 ← model.layers.4", "cpu ← lm_head"]
    assert llm.device_map_lines({"": 0}) == ["cuda:0 ← the whole model"]


def test_the_two_gpu_run_sends_inputs_to_the_models_device_and_says_when_it_cannot_run():
    source = cell("dispatch_model(")
    assert source.startswith("if torch.cuda.device_count() >= 2:")
    assert "device=split.device" in source and "split.hf_device_map" in source
    assert '"cuda"' not in source
    _, out = run(["dispatch_model("], {"torch": torch})
    assert out == "0 CUDA GPU(s): the map above is a plan, no run\n"


# --------------------------------------------------------------------------- predict, then reveal

def test_the_prediction_comes_before_the_decode_floor_and_its_answer_after_the_key_figures():
    between, _ = prediction(EPISODE)
    assert any("benchmark(lambda: target.copy_(source)" in text for text in between)
    assert any("floor = (weight_bytes + cache_read) / bandwidth" in text for text in between)
    assert '"ep10.decode_ms_per_token"' in between[-1]
    assert '"ep10.decode_weight_gbs"' in between[-1]
    measured = code_cells(EPISODE).index(cell("ttft, tpot = generate_timed(model, prompt"))
    asked = code_cells(EPISODE).index(between[0])
    assert measured < asked           # the time per token it compares is measured before


def recorded_decode_figures() -> dict:
    """The figures the answer quotes, each worked out from the H100 record as the answer
    says: weights = GB/s × ms, cache = bytes per token × 4,096 tokens, and the floor."""
    record, ms = reference.gpu_reference("ep10.decode_ms_per_token")
    gpu = record["hardware"]["gpu_name"]
    figures = {"record": record, "gpu": gpu, "ms": ms}
    for key, name in [("gbs", "ep10.decode_weight_gbs"), ("copy_gbs", "ep01.bandwidth_gbs"),
                      ("per_token", "ep10.kv_cache_bytes_per_token")]:
        same_record, figures[key] = reference.gpu_reference(name)
        assert same_record["hardware"]["gpu_name"] == gpu, name   # one card's figures
    figures["weights"] = figures["gbs"] * 1e9 * ms / 1e3                  # bytes
    figures["cache"] = figures["per_token"] * 4096                         # bytes
    figures["floor_ms"] = (figures["weights"] + figures["cache"]) / (
        figures["copy_gbs"] * 1e9) * 1e3
    figures["ratio"] = ms / figures["floor_ms"]
    return figures


def test_the_answer_quotes_the_recorded_figures():
    _, answer = prediction(EPISODE)
    text = " ".join(answer.split())
    f = recorded_decode_figures()
    assert f"{f['gpu']} (course record, {f['record']['date']})" in text
    assert f"**{f['ms']:.1f} ms** per token after a 4,096-token prompt" in text
    assert f"**{f['gbs']:.2f} GB/s** (`ep10.decode_weight_gbs`)" in text
    assert f"{f['copy_gbs']:,.0f} GB/s in episode 1 (`ep01.bandwidth_gbs`)" in text
    assert f"{f['weights'] / 1e6:.0f} MB of weights and {f['cache'] / 1e6:.0f} MB of cache" in text
    assert f"is {f['floor_ms']:.2f} ms" in text
    assert f"about {round(f['ratio'], -1):.0f} × as long" in text


def test_the_answers_summary_follows_the_recorded_ratio():
    _, answer = prediction(EPISODE)
    summary = answer.splitlines()[0]
    ratio = recorded_decode_figures()["ratio"]
    assert ("more than 100 ×" in summary) == (ratio > 100), (summary, ratio)


def test_the_weights_table_has_no_empty_header_cell():
    """The built page's tables are read by screen readers: pandas' Styler heads its index with
    an empty corner cell (axe-core: empty-table-header), so the names are a column instead."""
    import pandas as pd

    namespace = {"llm": llm, "pd": pd}
    exec(cell('set_caption("weights in GB'), namespace)
    html = namespace["table"].style.hide(axis="index").to_html()
    source = cell('set_caption("weights in GB')
    assert 'hide(axis="index")' in source
    headers = re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", html, re.S)
    assert headers and all(h.replace("&nbsp;", "").strip() for h in headers), headers
    assert "model" in headers
