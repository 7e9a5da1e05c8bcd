"""Episode 14's checks, three ways: right answers pass, stubs are "not done", wrong answers teach; and the
helpers episode 14 uses for LoRA, int8 weights and QLoRA.

The exercise has a list of plausible wrong answers named by their mistake: a full r × in × out matrix, A or B
alone, k_proj and v_proj without grouped-query attention, q_proj and o_proj sized by hidden_size, the layers
left out, the frozen base weights counted, and a constant; for q2, accepted draft tokens counted as
independent, the large model's own token forgotten, every draft accepted, the draft's cost left out or
charged once, the ratio upside down, and the closed form dividing by zero at alpha = 1. Every one must be
rejected with a message that names its mistake.
"""

from __future__ import annotations

import pytest
import torch

from gpucourse import llm
from gpucourse.checks import ep14
from gpucourse.exercises import ____

from checking import assert_two_step_hints, assert_wrong, outcome


# --- q1: LoRA's trainable parameters -----------------------------------------------------------------

def shapes(config):
    h, d, i = config.hidden_size, config.head_dim, config.intermediate_size
    q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def lora_trainable(config, r, targets):
    return config.num_hidden_layers * sum(r * sum(shapes(config)[t]) for t in targets)


def lora_from_modules(config, r, targets):
    """Another right way: count on a real model with the layers' own shapes."""
    with torch.device("meta"):
        from transformers import LlamaForCausalLM
        model = LlamaForCausalLM(config)
    return sum(r * (m.in_features + m.out_features) for name, m in model.named_modules()
               if name.split(".")[-1] in targets)


def lora_variant(rule, gqa=True, layers=True, attention="heads"):
    def fn(config, r, targets):
        s = shapes(config)
        if attention == "hidden":
            h = config.hidden_size
            s = dict(s, q_proj=(h, h), o_proj=(h, h))
        if attention == "derived":
            h, d = config.hidden_size, config.hidden_size // config.num_attention_heads
            q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
            s = dict(s, q_proj=(h, q), k_proj=(h, kv), v_proj=(h, kv), o_proj=(q, h))
        if not gqa:
            s = {k: (i, config.hidden_size if k in ("k_proj", "v_proj") else o) for k, (i, o) in s.items()}
        return (config.num_hidden_layers if layers else 1) * sum(rule(*s[t], r) for t in targets)
    return fn


Q1_WRONG = {
    "a full r × in × out matrix": (lora_variant(lambda i, o, r: r * i * o), ["r × (in + out)"]),
    "only A": (lora_variant(lambda i, o, r: r * i), ["only A"]),
    "only B": (lora_variant(lambda i, o, r: r * o), ["only B"]),
    "k and v without GQA": (lora_variant(lambda i, o, r: r * (i + o), gqa=False), ["grouped-query"]),
    "forgot the layers": (lora_variant(lambda i, o, r: r * (i + o), layers=False), ["layers are missing"]),
    "2 r hidden for every target": (lambda config, r, targets: config.num_hidden_layers * len(targets) * 2 * r
                                    * config.hidden_size, ["intermediate_size"]),
    "base weights counted": (lambda config, r, targets: lora_trainable(config, r, targets)
                             + lora_variant(lambda i, o, r: i * o)(config, r, targets), ["frozen base weights"]),
    "a constant": (lambda config, r, targets: 30720, ["for every case"]),
    # q_proj and o_proj sized hidden_size -> hidden_size: passes while heads × head_dim = hidden_size everywhere
    "q and o by hidden_size": (lora_variant(lambda i, o, r: r * (i + o), attention="hidden"),
                               ["q_proj", "num_attention_heads × head_dim"]),
    "head_dim from hidden_size // heads": (lora_variant(lambda i, o, r: r * (i + o), attention="derived"),
                                           ["hidden_size // num_attention_heads", "config.head_dim"]),
    "each adapter twice": (lambda config, r, targets: 2 * lora_trainable(config, r, targets), ["twice"]),
    "a bias per output": (lora_variant(lambda i, o, r: r * (i + o) + o), ["bias"]),
}


def test_q1_fixtures_separate_the_query_width_from_hidden_size():
    """Some model of the check has num_attention_heads × head_dim != hidden_size."""
    assert any(c.num_attention_heads * c.head_dim != c.hidden_size for _, c, _, _ in ep14._q1_cases())


def test_q1_right_answers_pass_and_stub_is_not_done():
    for fn in (lora_trainable, lora_from_modules):
        result, message = outcome(ep14.q1, fn)
        assert result == "correct", message
    assert outcome(ep14.q1, ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q1_WRONG)
def test_q1_wrong_answers_are_named(name):
    fn, words = Q1_WRONG[name]
    assert_wrong(ep14.q1, (fn,), words)


# --- q2: what a draft model buys ----------------------------------------------------------------------

def speedup_sum(alpha, k, c):
    return sum(alpha ** i for i in range(k + 1)) / (1 + k * c)


def speedup_closed_form(alpha, k, c):
    """Another right way: the geometric sum's closed form, with alpha = 1 handled on its own."""
    tokens = k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (1 + k * c)


def speedup_simulated(alpha, k, c):
    """Another right way: the expected run worked out as a chain of probabilities, in numpy."""
    import numpy as np

    keep_first_i = np.cumprod(np.full(k, alpha))          # P(the first i drafts all accepted)
    return float((1 + keep_first_i.sum()) / (1 + k * c))


Q2_WRONG = {
    "k alpha independent tokens": (lambda a, k, c: (1 + k * a) / (1 + k * c), ["k × alpha", "alpha**i"]),
    "no token of its own": (lambda a, k, c: sum(a ** i for i in range(1, k + 1)) / (1 + k * c),
                            ["one token of its own"]),
    "every draft accepted": (lambda a, k, c: (k + 1) / (1 + k * c), ["every draft token is accepted"]),
    "draft free": (lambda a, k, c: sum(a ** i for i in range(k + 1)), ["draft's cost"]),
    "draft once": (lambda a, k, c: sum(a ** i for i in range(k + 1)) / (1 + c), ["once per pass"]),
    "upside down": (lambda a, k, c: (1 + k * c) / sum(a ** i for i in range(k + 1)), ["other way up"]),
    "closed form at alpha = 1": (lambda a, k, c: (1 - a ** (k + 1)) / (1 - a) / (1 + k * c),
                                 ["alpha = 1", "divided by zero", "k + 1"]),
    "a constant": (lambda a, k, c: 2.8, ["for every case"]),
    "the sum stops at alpha**(k - 1)": (lambda a, k, c: sum(a ** i for i in range(k)) / (1 + k * c),
                                        ["one term early"]),
    "the closed form with k, not k + 1": (lambda a, k, c: (k if a == 1 else (1 - a ** k) / (1 - a)) / (1 + k * c),
                                          ["one term early"]),
    "the series without end": (lambda a, k, c: (k + 1 if a == 1 else 1 / (1 - a)) / (1 + k * c),
                               ["without end"]),
    "k tokens at alpha = 1": (lambda a, k, c: (k if a == 1 else (1 - a ** (k + 1)) / (1 - a)) / (1 + k * c),
                              ["k + 1 tokens a pass, not k"]),
    "no large-model pass in the cost": (lambda a, k, c: sum(a ** i for i in range(k + 1)) / (k * c),
                                        ["large model's own pass is missing"]),
    "k + 1 draft steps": (lambda a, k, c: sum(a ** i for i in range(k + 1)) / (1 + (k + 1) * c), ["k + 1 steps"]),
}


def test_q2_fixtures_separate_what_the_prompt_distinguishes():
    """Every pair of the model's quantities differs on some case: a run vs independent drafts, k draft
    steps vs one, the large model's own token, and alpha = 1 is among them."""
    cases = ep14._q2_cases()
    forms = ["run", "run without its own", "independent", "all"]
    for i, a in enumerate(forms):
        for b in forms[i + 1:]:
            assert any(ep14._speedup(*x, tokens=a) != ep14._speedup(*x, tokens=b) for x in cases), (a, b)
    assert any(ep14._speedup(*x, draft="k") != ep14._speedup(*x, draft="once") for x in cases)
    assert any(alpha == 1 for alpha, _, _ in cases) and any(alpha == 0 for alpha, _, _ in cases)


def test_q2_right_answers_pass_and_stub_is_not_done():
    for fn in (speedup_sum, speedup_closed_form, speedup_simulated):
        result, message = outcome(ep14.q2, fn)
        assert result == "correct", message
    assert "2.80×" in outcome(ep14.q2, speedup_sum)[1]
    assert outcome(ep14.q2, ____)[0] == "not-done"
    assert outcome(ep14.q2, lambda a, k, c: ____)[0] == "not-done"


@pytest.mark.parametrize("name", Q2_WRONG)
def test_q2_wrong_answers_are_named(name):
    fn, words = Q2_WRONG[name]
    assert_wrong(ep14.q2, (fn,), words)


def test_q2_a_division_by_zero_elsewhere_is_not_blamed_on_alpha_one():
    message = assert_wrong(ep14.q2, (lambda a, k, c: 1 / a,), ["speculative_speedup(0.0, 3, 0.1)"])
    assert "alpha = 1" not in message


# --- the helpers ------------------------------------------------------------------------------------

def test_lora_model_survives_peft_refusing_an_old_torchao(monkeypatch, capsys):
    """Colab's peft 0.20 with torchao 0.10 raises this ImportError for plain LoRA; the helper goes on."""
    import peft.tuners.lora.torchao as lora_torchao
    from peft import LoraConfig

    def refuse():
        raise ImportError("Found an incompatible version of torchao. Found version 0.10.0, but only versions "
                          "above 0.16.0 are supported")

    monkeypatch.setattr(lora_torchao, "is_torchao_available", refuse)
    config = llm.llama_config("SmolLM2-135M", num_hidden_layers=1, hidden_size=64, intermediate_size=64,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=64)
    from transformers import LlamaForCausalLM

    monkeypatch.setattr(llm, "_PEFT_NOTICE_SHOWN", [])       # as in a fresh session
    model = llm.lora_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules=["q_proj"]))
    assert model.get_nb_trainable_parameters()[0] == 2 * (64 + 64)
    llm.lora_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules=["q_proj"]))
    printed = capsys.readouterr().out
    assert printed.count("incompatible version of torchao") == 1, printed   # once, not per model


def test_tensor_bytes_counts_quantized_weights():
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    llm.import_libraries()
    layer = torch.nn.Sequential(torch.nn.Linear(64, 32))
    quantize_(layer, Int8WeightOnlyConfig())
    assert 64 * 32 <= llm.tensor_bytes(layer[0].weight) < 64 * 32 * 2     # int8 values and a scale per row


def test_qlora_says_why_it_cannot_run(monkeypatch):
    import importlib.util

    assert "CUDA GPU" in llm.bitsandbytes_status(on_gpu=False)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "bitsandbytes" else real_find_spec(name, *a))
    assert "pip install bitsandbytes" in llm.bitsandbytes_status(on_gpu=True)


# --- hints ------------------------------------------------------------------------------------------

CODE = ("()", " = ", "==", "return ", "import", "[", "]", "**", "//", "sqrt", "√", "86_400", "86400", "os.", "torch.",
        "np.", "llm.", "math.", "state_dict", "getstate", "get_state", "fsync", "replace(", "config.", "_proj ")


@pytest.mark.parametrize("exercise", [ep14.q1, ep14.q2], ids=lambda q: q.name)
def test_hints_come_in_two_steps_without_the_code(exercise, capsys):
    assert_two_step_hints(exercise, capsys, CODE)


# --- answers written by an independent review, each named by its own mistake ----------------------

def lora_shapes(**changed):
    """A lora_trainable whose layers have the shapes ``changed(h, q, kv, i)`` returns in place of the right."""
    def fn(config, r, targets):
        h, i = config.hidden_size, config.intermediate_size
        q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
        s = dict(shapes(config), **{k: v(h, q, kv, i) for k, v in changed.items()})
        return config.num_hidden_layers * sum(r * sum(s[t]) for t in targets)
    return fn


def group_kv(config, r, targets):
    g = config.num_attention_heads // config.num_key_value_heads * config.head_dim
    s = dict(shapes(config), k_proj=(config.hidden_size, g), v_proj=(config.hidden_size, g))
    return config.num_hidden_layers * sum(r * sum(s[t]) for t in targets)


Q1_REVIEWED = {
    # passed before: the cases targeted q with v, q/k/v/o together, or the whole MLP
    "q and o by the KV heads, k and v by the query heads": (
        lora_shapes(q_proj=lambda h, q, kv, i: (h, kv), k_proj=lambda h, q, kv, i: (h, q),
                    v_proj=lambda h, q, kv, i: (h, q), o_proj=lambda h, q, kv, i: (kv, h)),
        ["exchanged the widths"]),
    "q_proj and v_proj rows swapped": (
        lora_shapes(q_proj=lambda h, q, kv, i: (h, kv), v_proj=lambda h, q, kv, i: (h, q)),
        ["q_proj to the key/value width", "v_proj to the query width"]),
    "the MLP's sum kept, its split wrong": (
        lora_shapes(gate_proj=lambda h, q, kv, i: (h, h), up_proj=lambda h, q, kv, i: (h, 3 * i - 2 * h),
                    down_proj=lambda h, q, kv, i: (h, h)), ["down_proj", "hidden_size → hidden_size"]),
    # named by another mistake before
    "targets ignored": (lambda config, r, targets: lora_trainable(config, r, ["q_proj", "k_proj", "v_proj",
                                                                               "o_proj"]),
                        ["whatever target_modules says"]),
    "one layer too few": (lambda config, r, targets: lora_trainable(config, r, targets)
                          // config.num_hidden_layers * (config.num_hidden_layers - 1), ["num_hidden_layers - 1"]),
    "o_proj's input as the KV width": (lora_shapes(o_proj=lambda h, q, kv, i: (kv, h)), ["o_proj's input"]),
    "k and v by the group size": (group_kv, ["group size"]),
    "rank clamped": (lambda config, r, targets: config.num_hidden_layers * sum(
        min(r, *shapes(config)[t]) * sum(shapes(config)[t]) for t in targets), ["min(r, in, out)"]),
    # named by their own mistake before too
    "the MLP as hidden → hidden": (lora_shapes(gate_proj=lambda h, q, kv, i: (h, h), up_proj=lambda h, q, kv, i: (h, h),
                                               down_proj=lambda h, q, kv, i: (h, h)), ["MLP's projections"]),
    "short names": (lambda config, r, targets: {"q": 1}[targets[0]], ["KeyError", "not in the dictionary"]),
    "as text": (lambda config, r, targets: f"{lora_trainable(config, r, targets):,}", ["should be a number"]),
    "q and o by hidden": (lora_shapes(q_proj=lambda h, q, kv, i: (h, h), o_proj=lambda h, q, kv, i: (h, h)),
                          ["sized q_proj and o_proj by hidden_size"]),
}


@pytest.mark.parametrize("name", Q1_REVIEWED)
def test_q1_reviewed_answers_are_named_by_their_own_mistake(name):
    fn, words = Q1_REVIEWED[name]
    assert_wrong(ep14.q1, (fn,), words)


def test_q1_cases_separate_every_width():
    """One configuration of the check has all its widths different, and is targeted one or two layers
    at a time (q_proj alone, k_proj with o_proj, down_proj alone)."""
    distinct = [(c, t) for _, c, _, t in ep14._q1_cases()
                if len({c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, c.hidden_size,
                        c.intermediate_size, c.num_attention_heads // c.num_key_value_heads * c.head_dim}) == 5]
    assert {tuple(t) for _, t in distinct} >= {("q_proj",), ("k_proj", "o_proj"), ("down_proj",)}


def test_q1_imports_peft_before_the_answers_deadline_starts():
    """An answer that imports peft itself must not pay the check's own cold imports inside its deadline:
    in a fresh process, peft is already imported when the learner's function is first called."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from gpucourse.checks import ep14\n"
            "seen = []\n"
            "def answer(config, r, targets):\n"
            "    seen.append('peft' in sys.modules and 'transformers.models.llama' in sys.modules)\n"
            "    return 0\n"
            "ep14.q1.outcome(answer)\n"
            "print('IMPORTED' if seen and seen[0] else 'NOT IMPORTED')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         cwd=str(__import__("pathlib").Path(ep14.__file__).resolve().parents[2]))
    assert "IMPORTED" in out.stdout and "NOT" not in out.stdout, out.stdout + out.stderr[-2000:]


Q2_REVIEWED = {
    # named by another mistake, or by none, before
    "the series without end (raises at alpha = 1)": (lambda a, k, c: 1 / (1 - a) / (1 + k * c), ["without end"]),
    "the closed form in numpy": (lambda a, k, c: float(__import__("numpy").float64(1 - a ** (k + 1))
                                                       / __import__("numpy").float64(1 - a)) / (1 + k * c)
                                 if a != 1 else float("nan"), ["alpha = 1", "nan", "k + 1"]),
    "own token only after a full run": (lambda a, k, c: (sum(a ** i for i in range(1, k + 1)) + a ** k)
                                        / (1 + k * c), ["only after a fully accepted run"]),
    "own token only after a rejection": (lambda a, k, c: (sum(a ** i for i in range(1, k + 1)) + 1 - a ** k)
                                         / (1 + k * c), ["one term early", "only after a rejection"]),
    "c read as a speed ratio": (lambda a, k, c: sum(a ** i for i in range(k + 1)) / (1 + k / c), ["divided k by c"]),
    "alpha as a percentage": (lambda a, k, c: sum((a / 100) ** i for i in range(k + 1)) / (1 + k * c),
                              ["percentage"]),
    "k - 1 draft steps": (lambda a, k, c: sum(a ** i for i in range(k + 1)) / (1 + (k - 1) * c), ["k - 1 steps"]),
    "a simulation": (lambda a, k, c: speedup_sum(a, k, c) * (1 + 0.003 * (0 < a < 1)), ["simulation"]),
    "rounded": (lambda a, k, c: round(speedup_sum(a, k, c), 2), ["rounded the speed-up to 2 decimals"]),
    "arguments in another order": (lambda a, c, k: sum(a ** i for i in range(int(k) + 1)) / (1 + k * c),
                                   ["(alpha, c, k)"]),
    # named by their own mistake before too
    "a tuple": (lambda a, k, c: (sum(a ** i for i in range(k + 1)), 1 + k * c), ["should be a number"]),
    "k + 1 steps": (lambda a, k, c: sum(a ** i for i in range(k + 1)) / (1 + (k + 1) * c), ["k + 1 steps"]),
    "independent": (lambda a, k, c: (1 + k * a) / (1 + k * c), ["stood on its own"]),
    "upside down": (lambda a, k, c: (1 + k * c) / sum(a ** i for i in range(k + 1)), ["other way up"]),
}


@pytest.mark.parametrize("name", Q2_REVIEWED)
def test_q2_reviewed_answers_are_named_by_their_own_mistake(name):
    fn, words = Q2_REVIEWED[name]
    message = assert_wrong(ep14.q2, (fn,), words)
    if name.startswith("the series"):
        assert "divided by zero" not in message


# --- α from an assisted run ------------------------------------------------------------------------

def test_acceptance_counts_the_tested_tokens():
    """A run written by hand: round 1 keeps 2 of 3 (reject), round 2 keeps both (no reject), round 3
    keeps 1 of 2 (reject): 5 accepted, 2 rejections, α = 5/7, while kept ÷ proposed is 5/7 too only by
    chance of this run; an empty round is a pass without a draft."""
    from gpucourse.generation import acceptance

    tokens = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    rounds = [[10, 11, 99], [13, 14], [16, 98], []]
    assert acceptance(rounds, tokens) == pytest.approx(5 / 7)


def test_acceptance_recovers_alpha_where_kept_over_drafted_does_not():
    """Under eq. 1's model (each tested token accepted with probability α, γ drafted a round), the
    estimate comes back to α = 0.8, while kept ÷ drafted is (α - α**(γ+1)) / ((1 - α) γ) = 0.54."""
    import random

    from gpucourse.generation import acceptance

    rng, alpha, gamma = random.Random(3), 0.8, 5
    tokens, rounds, kept, drafted = [], [], 0, 0
    for _ in range(20_000):
        n = 0
        while n < gamma and rng.random() < alpha:
            n += 1
        proposal = list(range(len(tokens), len(tokens) + n)) + [-1] * (gamma - n)   # -1: a rejected one
        rounds.append(proposal)
        tokens += list(range(len(tokens), len(tokens) + n + 1))
        kept, drafted = kept + n, drafted + gamma
    assert acceptance(rounds, tokens) == pytest.approx(alpha, abs=0.01)
    assert kept / drafted == pytest.approx((alpha - alpha ** (gamma + 1)) / ((1 - alpha) * gamma), abs=0.01)
