"""Episodes 10 and 14's attention on GPUs without fused grouped-query attention, and their last
defences.

* ``llm.attention_implementation``: plain ``"sdpa"`` where a fused kernel takes grouped heads
  (an A100, an H100, the CPU), the registered ``"sdpa_repeat_kv"`` on a T4; the registered
  function gives the model's own outputs and hands SDPA equal head counts.
* ``llm.sdpa_backend_problem``: PyTorch's reason for the backend asked about, parsed from the
  header-then-reasons warnings a T4 gives, or from ``can_use_<backend>``, or the error.
* torchao's configs leave float32 matmuls in FP32 (``set_inductor_config=False``).
* The out-of-memory handlers of episode 10 (prefill, time to first token) and episode 14
  (attention peaks): the cells have them, and the prefill one reports a row that does not fit
  and goes on.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from gpucourse import llm
from gpucourse.fakes.fakecuda import MODELS, fake_gpu
from gpucourse.memory import format_bytes

ROOT = Path(__file__).resolve().parents[1]
EPISODE_10 = ROOT / "episodes" / "10-language-model.ipynb"
EPISODE_14 = ROOT / "episodes" / "14-cheaper-language-model.ipynb"
TRIGGER = " (Triggered internally at /pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:{}.)"


def _small_models(layers=2):
    """Two SmolLM2-shaped models with the same random weights: "sdpa" and the repeat-kv one."""
    llm.import_libraries()
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    plain = LlamaForCausalLM(llm.llama_config(num_hidden_layers=layers)).eval()
    name = llm.register_repeat_kv()
    repeated = LlamaForCausalLM(llm.llama_config(num_hidden_layers=layers,
                                                 attn_implementation=name)).eval()
    repeated.load_state_dict(plain.state_dict())
    return plain, repeated


# --- the registered attention function ---------------------------------------------------


def test_repeat_kv_attention_gives_the_sdpa_outputs_with_and_without_padding():
    plain, repeated = _small_models()
    assert plain.config._attn_implementation == "sdpa"
    assert repeated.config._attn_implementation == llm.REPEAT_KV
    ids = torch.randint(0, 1000, (2, 48))
    padding = torch.ones_like(ids)
    padding[0, :9] = 0                       # the first sequence is left-padded
    with torch.no_grad():
        for mask in (None, padding):
            a = plain(ids, attention_mask=mask).logits
            b = repeated(ids, attention_mask=mask).logits
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_repeat_kv_attention_decodes_like_sdpa_from_its_cache():
    plain, repeated = _small_models()
    ids = torch.randint(0, 1000, (2, 32))
    with torch.no_grad():
        outputs = []
        for model in (plain, repeated):
            out = model(ids, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
            step = model(token, past_key_values=out.past_key_values, use_cache=True)
            outputs.append(step.logits)
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


def test_repeat_kv_attention_hands_sdpa_equal_heads_and_no_enable_gqa(monkeypatch):
    plain, repeated = _small_models(layers=1)
    calls, real = [], F.scaled_dot_product_attention

    def spy(query, key, value, **kwargs):
        calls.append((query.shape[1], key.shape[1], value.shape[1], kwargs.get("enable_gqa", False)))
        return real(query, key, value, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        plain(torch.randint(0, 1000, (1, 16)))
        assert calls == [(9, 3, 3, True)], "transformers' own sdpa no longer passes grouped heads"
        calls.clear()
        repeated(torch.randint(0, 1000, (1, 16)))
    assert calls == [(9, 9, 9, False)]


def test_register_repeat_kv_registers_once_with_sdpas_mask():
    llm.import_libraries()
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    assert llm.register_repeat_kv() == llm.register_repeat_kv() == llm.REPEAT_KV
    assert AttentionInterface._global_mapping[llm.REPEAT_KV] is llm.sdpa_repeat_kv_attention
    assert AttentionMaskInterface._global_mapping[llm.REPEAT_KV] is sdpa_mask


# --- the decision ------------------------------------------------------------------------


@pytest.mark.parametrize("model, expected", [("T4", llm.REPEAT_KV), ("A100", "sdpa"),
                                             ("H100", "sdpa"), ("L4", "sdpa")])
@pytest.mark.parametrize("torch_version", ["2.11.0+cu128", "2.13.0+cu130"])
def test_attention_implementation_repeats_heads_only_without_a_fused_gqa_kernel(
        monkeypatch, model, expected, torch_version):
    monkeypatch.setattr(torch, "__version__", torch_version)
    with fake_gpu(model):
        assert llm.attention_implementation(torch.device("cuda")) == expected
        backend = llm.prefill_backend(torch.device("cuda"), torch.float16, expected)
    assert backend == ("repeat_kv+efficient" if expected == llm.REPEAT_KV else "flash")


def test_attention_implementation_on_the_cpu_is_sdpa_whose_flash_kernel_takes_gqa():
    assert llm.attention_implementation("cpu") == "sdpa"
    assert llm.prefill_backend("cpu", torch.float32, "sdpa") == "flash"
    q = torch.randn(1, 9, 32, 64)
    k = torch.randn(1, 3, 32, 64)
    assert llm.sdpa_backend_problem(SDPBackend.FLASH_ATTENTION, q, k, k, enable_gqa=True) is None


def test_a_t4_without_the_repeat_would_prefill_on_math():
    with fake_gpu("T4"):
        assert llm.prefill_backend(torch.device("cuda"), torch.float16, "sdpa") == "math"


def test_prefill_backend_rejects_an_implementation_it_does_not_know():
    with pytest.raises(ValueError, match="'eager'.*attention_implementation"):
        llm.prefill_backend("cpu", torch.float32, "eager")


def test_load_model_passes_the_attention_implementation():
    model, tokenizer, about = llm.load_model(device="cpu", dtype=torch.float32, layers=1,
                                             attn_implementation=llm.REPEAT_KV)
    assert tokenizer is None and "RANDOM" in about          # offline: the stand-in
    assert model.config._attn_implementation == llm.REPEAT_KV
    default, _, _ = llm.load_model(device="cpu", dtype=torch.float32, layers=1)
    assert default.config._attn_implementation == "sdpa"


# --- PyTorch's reason for one backend (G4-4) ----------------------------------------------

# What select_sdp_backend warns on a T4 (sm75) when only the requested backend is allowed, in
# its order (sdp_utils.cpp): a header per backend, then that backend's reasons.
T4_FLASH = [
    "Memory efficient kernel not used because:" + TRIGGER.format(915),
    "Memory Efficient attention has been runtime disabled." + TRIGGER.format(602),
    "Flash attention kernel not used because:" + TRIGGER.format(917),
    "Flash attention only supports gpu architectures in the range [sm80, sm121]. "
    "Attempting to run on a sm 7.5 gpu." + TRIGGER.format(382),
    "cuDNN attention kernel not used because:" + TRIGGER.format(919),
    "cuDNN attention has been runtime disabled." + TRIGGER.format(640),
]
T4_CUDNN = [
    "Memory efficient kernel not used because:" + TRIGGER.format(915),
    "Memory Efficient attention has been runtime disabled." + TRIGGER.format(602),
    "Flash attention kernel not used because:" + TRIGGER.format(917),
    "Flash attention has been runtime disabled." + TRIGGER.format(596),
    "CuDNN attention kernel not used because:" + TRIGGER.format(919),     # older spelling
    "cuDNN MHA only supports gpu architectures in the range [sm80, sm121]. "
    "Attempting to run on a sm 7.5 gpu." + TRIGGER.format(533),
]
T4_EFFICIENT_GQA = [
    "Memory efficient kernel not used because:" + TRIGGER.format(915),
    "For dense input, both fused kernels require query, key and value to have the same "
    "num_heads. Query.sizes(): [1, 9, 256, 64], Key sizes(): [1, 3, 256, 64], Value sizes(): "
    "[1, 3, 256, 64] instead. To broadcast dense inputs, try using unsqueeze and expand_to "
    "before passing them into the kernel." + TRIGGER.format(412),
    "Flash attention kernel not used because:" + TRIGGER.format(917),
    "Flash attention has been runtime disabled." + TRIGGER.format(596),
    "cuDNN attention kernel not used because:" + TRIGGER.format(919),
    "cuDNN attention has been runtime disabled." + TRIGGER.format(640),
]


@pytest.mark.parametrize("backend, messages, expected", [
    ("FLASH_ATTENTION", T4_FLASH, "Flash attention only supports gpu architectures in the "
     "range [sm80, sm121]. Attempting to run on a sm 7.5 gpu."),
    ("CUDNN_ATTENTION", T4_CUDNN, "cuDNN MHA only supports gpu architectures in the range "
     "[sm80, sm121]. Attempting to run on a sm 7.5 gpu."),
    ("EFFICIENT_ATTENTION", T4_EFFICIENT_GQA, "For dense input, both fused kernels require "
     "query, key and value to have the same num_heads."),
    ("EFFICIENT_ATTENTION", T4_FLASH, "Memory Efficient attention has been runtime disabled."),
])
def test_the_reason_is_the_one_under_the_requested_backends_header(backend, messages,
                                                                   expected):
    reason = llm.reason_after_header(backend, messages)
    assert reason.startswith(expected)
    assert "Triggered internally" not in reason and "not used because" not in reason


def test_a_backend_without_reasons_under_its_header_has_none():
    assert llm.reason_after_header("FLASH_ATTENTION", T4_FLASH[:3]) is None
    assert llm.reason_after_header("FLASH_ATTENTION", []) is None
    with pytest.raises(ValueError, match="'MATH'"):
        llm.reason_after_header("MATH", T4_FLASH)


def test_strip_trigger_keeps_the_message_only():
    assert llm.strip_trigger(T4_FLASH[0]) == "Memory efficient kernel not used because:"
    assert llm.strip_trigger("no suffix here ") == "no suffix here"


def _fails_with_warnings(messages):
    def failing_sdpa(*args, **kwargs):
        for message in messages:
            warnings.warn(message, UserWarning)
        raise RuntimeError("No available kernel. Aborting execution.")
    return failing_sdpa


def test_sdpa_backend_problem_reports_a_t4s_reason_for_flash(monkeypatch):
    monkeypatch.setattr(F, "scaled_dot_product_attention", _fails_with_warnings(T4_FLASH))
    q = torch.randn(1, 9, 16, 64)
    why = llm.sdpa_backend_problem(SDPBackend.FLASH_ATTENTION, q, q, q)
    assert why.startswith("Flash attention only supports gpu architectures")
    assert "sm 7.5" in why and "Triggered" not in why


def test_sdpa_backend_problem_asks_can_use_when_the_call_gave_no_reason(monkeypatch):
    monkeypatch.setattr(F, "scaled_dot_product_attention", _fails_with_warnings([]))
    asked = []

    def can_use(params, debug=False):
        asked.append((params.enable_gqa, params.is_causal, debug))
        warnings.warn("cuDNN MHA only supports gpu architectures in the range [sm80, sm121]."
                      + TRIGGER.format(533), UserWarning)
        return False

    monkeypatch.setattr(torch.backends.cuda, "can_use_cudnn_attention", can_use)
    q, k = torch.randn(1, 9, 16, 64), torch.randn(1, 3, 16, 64)
    why = llm.sdpa_backend_problem(SDPBackend.CUDNN_ATTENTION, q, k, k, enable_gqa=True)
    assert why == "cuDNN MHA only supports gpu architectures in the range [sm80, sm121]."
    assert asked == [(True, True, True)]


def test_a_probe_that_needs_the_missing_driver_leaves_the_error(monkeypatch):
    """PyPI's CUDA build without a driver: can_use_cudnn_attention raises for CPU tensors."""
    monkeypatch.setattr(F, "scaled_dot_product_attention", _fails_with_warnings([]))

    def can_use(params, debug=False):
        raise RuntimeError("CUDA error: CUDA driver version is insufficient for CUDA runtime version")

    monkeypatch.setattr(torch.backends.cuda, "can_use_cudnn_attention", can_use)
    q = torch.randn(1, 9, 16, 64)
    why = llm.sdpa_backend_problem(SDPBackend.CUDNN_ATTENTION, q, q, q)
    assert why == "No available kernel. Aborting execution."


def test_sdpa_backend_problem_on_the_cpu_is_none_or_the_error():
    q = torch.randn(1, 9, 16, 64)
    assert llm.sdpa_backend_problem(SDPBackend.MATH, q, q, q) is None
    why = llm.sdpa_backend_problem(SDPBackend.EFFICIENT_ATTENTION, q, q, q)
    assert why.startswith("No viable backend")        # a CPU gives no warnings
    assert "\n" not in why


# --- torchao keeps float32 in FP32 (G4-5) ------------------------------------------------


@pytest.fixture
def highest_precision():
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def _quantize_int8(**options):
    llm.import_libraries()
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    quantize_(model, Int8WeightOnlyConfig(**options))
    return model


def test_int8_without_inductor_config_leaves_float32_matmuls_in_fp32(highest_precision):
    _quantize_int8(set_inductor_config=False)
    assert torch.get_float32_matmul_precision() == "highest"


def test_torchaos_default_would_switch_float32_matmuls_to_tf32(highest_precision):
    """The control: without the option quantize_ changes the precision, so the test above can fail."""
    _quantize_int8()
    assert torch.get_float32_matmul_precision() == "high"


def test_int4_config_leaves_the_inductor_config_alone():
    pytest.importorskip("torchao")
    assert llm.int4_config(group_size=64).set_inductor_config is False


def test_episode_14s_int8_cell_passes_set_inductor_config_false():
    int8_cells = [s for s in _code_cells(EPISODE_14) if "Int8WeightOnlyConfig(" in s]
    assert int8_cells and all("set_inductor_config=False" in s for s in int8_cells)


# --- the last defence against OutOfMemoryError ---------------------------------------------


def _code_cells(episode: Path) -> list[str]:
    cells = json.loads(episode.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _cell_with(text, episode: Path = EPISODE_10):
    found = [s for s in _code_cells(episode) if text in s]
    assert len(found) == 1, (f"expected one code cell of {episode.name} with {text!r}, "
                             f"found {len(found)}")
    return found[0]


@pytest.mark.parametrize("episode, marker", [
    (EPISODE_10, "def prefill_cache_bytes("),                      # episode 10's prefill rows
    (EPISODE_10, "ttft, tpot = generate_timed(model, prompt"),     # its time to first token
    (EPISODE_14, "def attention_peak("),                           # episode 14's peaks
], ids=["10-prefill", "10-ttft", "14-attention"])
def test_the_full_size_cells_catch_out_of_memory(episode, marker):
    source = _cell_with(marker, episode)
    assert "except torch.OutOfMemoryError:" in source
    assert "llm.does_not_fit(" in source


def test_episode_10_loads_the_model_with_the_attention_implementation():
    first = _cell_with("model, tokenizer, about = llm.load_model(", EPISODE_10)
    assert "attention = llm.attention_implementation(device)" in first
    assert "attn_implementation=attention" in first


def test_episode_14_registers_its_attention_function_in_a_cell_and_switches_the_model():
    source = _cell_with('AttentionInterface.register("sdpa_repeat_kv", sdpa_repeat_kv)', EPISODE_14)
    assert 'AttentionMaskInterface.register("sdpa_repeat_kv", sdpa_mask)' in source
    assert "model.set_attn_implementation(attention)" in source
    assert "llm.attention_implementation" not in "".join(_code_cells(EPISODE_14))


def test_episode_14s_attention_function_is_the_helpers():
    """The function episode 14 writes and registers is the one episode 10 registers."""
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    from taught import assert_same_function

    assert_same_function(EPISODE_14, "sdpa_repeat_kv", llm.sdpa_repeat_kv_attention)


def _cell_choice(device_type: str, usable_grouped: list) -> str:
    """What episode 14's registration cell chooses, given the probe's grouped-heads column."""
    source = _cell_with('AttentionInterface.register("sdpa_repeat_kv", sdpa_repeat_kv)', EPISODE_14)
    lines = [line for line in source.splitlines()
             if line.startswith(("grouped_fused = ", "attention = "))]
    namespace = {"usable": {"grouped (GQA)": usable_grouped}, "SDPBackend": SDPBackend,
                 "device": torch.device(device_type)}
    exec("\n".join(lines), namespace)
    return namespace["attention"]


BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}


@pytest.mark.parametrize("model", ["T4", "A100", "H100", "L4"])
@pytest.mark.parametrize("torch_version", ["2.11.0+cu128", "2.13.0+cu130"])
def test_episode_14s_choice_from_its_probe_is_episode_10s_from_the_table(monkeypatch, model,
                                                                         torch_version):
    """Where the probe finds what the feasibility table says, the cell and
    llm.attention_implementation choose the same attention."""
    from gpucourse import feasibility

    monkeypatch.setattr(torch, "__version__", torch_version)
    with fake_gpu(model):
        capability = tuple(torch.cuda.get_device_capability())
        helper = llm.attention_implementation(torch.device("cuda"))
    probe = [SDPBackend.MATH] + [BACKENDS[b] for b in
                                 feasibility.gqa_fused_backends(capability, torch_version)]
    assert _cell_choice("cuda", probe) == helper


@pytest.mark.parametrize("device_type", ["cpu", "mps"])
def test_episode_14_keeps_sdpa_off_cuda_as_episode_10_does(device_type):
    assert _cell_choice(device_type, [SDPBackend.MATH]) == "sdpa"
    assert llm.attention_implementation(device_type) == "sdpa"


def test_episode_14_calls_get_peft_model_in_its_cell():
    source = _cell_with("get_peft_model(student, lora_config)", EPISODE_14)
    assert "with llm.plain_lora():" in source and "llm.lora_model" not in source


def _refusing_peft(monkeypatch, message):
    import peft.tuners.lora.torchao as lora_torchao

    def refuse():
        raise ImportError(message)
    monkeypatch.setattr(lora_torchao, "is_torchao_available", refuse)


def _tiny_model():
    llm.import_libraries()
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(llm.llama_config(
        "SmolLM2-135M", num_hidden_layers=1, hidden_size=64, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=64))


def test_plain_lora_lets_peft_add_lora_beside_a_torchao_it_refuses(monkeypatch, capsys):
    """Colab's peft 0.20 with torchao 0.10: without plain_lora, get_peft_model fails."""
    from peft import LoraConfig, get_peft_model

    _refusing_peft(monkeypatch, "Found an incompatible version of torchao. Found version "
                                "0.10.0, but only versions above 0.16.0 are supported")
    config = LoraConfig(r=2, target_modules=["q_proj"])
    with pytest.raises(ImportError, match="incompatible version of torchao"):
        get_peft_model(_tiny_model(), config)
    with llm.plain_lora():
        model = get_peft_model(_tiny_model(), config)
    assert model.get_nb_trainable_parameters()[0] == 2 * (64 + 64)
    assert capsys.readouterr().out == ""


def test_plain_lora_leaves_other_import_errors_to_peft(monkeypatch):
    from peft import LoraConfig, get_peft_model

    _refusing_peft(monkeypatch, "No module named 'torchao.dtypes'")
    with pytest.raises(ImportError, match="torchao.dtypes"):
        with llm.plain_lora():
            get_peft_model(_tiny_model(), LoraConfig(r=2, target_modules=["q_proj"]))


def test_int4_copy_is_loaded_only_where_int4_can_run():
    source = _cell_with("why_not = llm.why_no_int4(device)", EPISODE_14)
    lines = source.splitlines()
    asked = next(i for i, line in enumerate(lines) if "llm.why_no_int4(device)" in line)
    guard = next(i for i, line in enumerate(lines) if line.startswith("if why_not is None"))
    load = next(i for i, line in enumerate(lines) if "model_int4, _, _ = llm.load_model(" in line)
    assert asked < guard < load and lines[load].startswith("    ")


class _OutOfMemoryModel:
    """Stands in for the model: every call raises what a GPU raises when a prefill is too big."""

    def __call__(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 21.48 GiB")


def test_the_prefill_row_that_does_not_fit_is_reported_and_skipped(capsys):
    from gpucourse import feasibility

    namespace = dict(torch=torch, llm=llm, feasibility=feasibility, device=torch.device("cpu"),
                     config=llm.llama_config(), bytes_per_value=2, prefill="math",
                     model=_OutOfMemoryModel())
    namespace["model"].config = llm.llama_config(num_hidden_layers=30)
    exec(_cell_with("def prefill_cache_bytes("), namespace)
    assert namespace["prefill_cache_bytes"](16, 256) is None
    printed = capsys.readouterr().out
    assert "prefill of 16 × 256 tokens: does not fit on this GPU" in printed
    need = feasibility.lm_forward_bytes(llm.SMOLLM2_135M, 16, 256, 2, "math")
    assert f"predicted at least {format_bytes(need)}" in printed


def test_does_not_fit_names_the_gpu_and_its_memory():
    with fake_gpu("T4"):
        line = llm.does_not_fit("prefill of 16 × 4096 tokens", 23 * 10**9, torch.device("cuda"))
    assert line.startswith("prefill of 16 × 4096 tokens: does not fit on this GPU")
    assert "21.42 GiB" in line and MODELS["T4"]["name"] in line and "14.74 GiB" in line
