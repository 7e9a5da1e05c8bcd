"""Checks for episode 14, "A language model made cheaper".

``q1`` LoRA's trainable parameters for a rank and a set of target modules.
``q2`` the expected speed-up of speculative decoding for an acceptance rate, a draft length and a
draft's cost.

The check calls the learner's function on several models, ranks and targets of its own, with different
answers, so that a constant or an answer right for one case only cannot pass; it builds each model with
peft and asks peft for its own count of trainable parameters. One model has num_attention_heads × head_dim
different from hidden_size, as in Gemma, so that sizing the query and output projections by hidden_size
is caught. A wrong answer that matches a known mistake on every case (or on the most of the cases it got
wrong) is named, with episode 10's ``_judge``.

q2's cases separate what its prompt distinguishes: a run of accepted tokens from k independent
ones (α between 0 and 1, k ≥ 2), the draft's k steps from one (c > 0, k ≥ 2), the large model's
own token (α = 0 gives 1 token, not 0), and α = 1, where the closed form divides by zero.
"""

from __future__ import annotations

import math

from ..exercises import Exercise, NotDone, Wrong, as_number, call_answer, require_function, solution_link
from .ep10 import _config, _head_dim, _judge

NOTEBOOK = "14-cheaper-language-model.ipynb"


# --- q1: LoRA's trainable parameters --------------------------------------------------------------

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _shapes(config) -> dict:
    """(in, out) of each linear layer of a Llama-type decoder layer."""
    h, i, d = config.hidden_size, config.intermediate_size, _head_dim(config)
    return {"q_proj": (h, config.num_attention_heads * d), "k_proj": (h, config.num_key_value_heads * d),
            "v_proj": (h, config.num_key_value_heads * d), "o_proj": (config.num_attention_heads * d, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def _lora_formula(config, r, targets, *, rule=lambda i, o, r: r * (i + o), gqa=True, layers=None,
                  query_by_hidden=False, head_dim=None, shapes=None):
    """LoRA's trainable parameters, or what a mistake gives: ``shapes`` replaces some layers' (in, out)."""
    shapes = dict(_shapes(config), **(shapes or {}))
    if head_dim is not None:
        h, d = config.hidden_size, head_dim
        q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
        shapes = dict(shapes, q_proj=(h, q), k_proj=(h, kv), v_proj=(h, kv), o_proj=(q, h))
    if query_by_hidden:
        h = config.hidden_size
        shapes = dict(shapes, q_proj=(h, h), o_proj=(h, h))
    if not gqa:
        shapes = {k: (i, config.hidden_size if k in ("k_proj", "v_proj") else o) for k, (i, o) in shapes.items()}
    layers = config.num_hidden_layers if layers is None else layers
    return layers * sum(rule(*shapes[t], r) for t in targets)


def _q1_cases():
    tiny = _config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16)
    other = _config(vocab_size=128, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
                    num_key_value_heads=1, head_dim=8)
    # heads × head_dim (4 × 16 = 64) is not hidden_size (40), as in Gemma: q_proj and o_proj sized by hidden_size
    # are told apart from the right ones only here
    wide = _config(vocab_size=128, hidden_size=40, intermediate_size=72, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16)
    distinct = _config(vocab_size=128, hidden_size=36, intermediate_size=88, num_hidden_layers=3,
                       num_attention_heads=6, num_key_value_heads=2, head_dim=8)
    return [
        ("r=4 on q_proj and v_proj", tiny, 4, ["q_proj", "v_proj"]),
        ("r=8 on q, k, v and o", tiny, 8, ["q_proj", "k_proj", "v_proj", "o_proj"]),
        ("r=2 on the MLP (gate, up, down)", other, 2, ["gate_proj", "up_proj", "down_proj"]),
        ("r=16 on all seven linear layers", other, 16, list(LINEAR)),
        ("r=4 on q, k, v and o of a model whose heads × head_dim (64) is not its hidden_size (40)", wide, 4,
         ["q_proj", "k_proj", "v_proj", "o_proj"]),
        # every width differs here: heads × head_dim 48, KV heads × head_dim 16, group size × head_dim 24,
        # hidden_size 36, intermediate_size 88, hidden_size // heads 6 (not head_dim 8); one or two targets
        # at a time, so that widths exchanged between q and v, between q/o and k/v, or moved inside the MLP
        # no longer add up to the right total
        ("r=4 on q_proj alone of a model whose widths all differ", distinct, 4, ["q_proj"]),
        ("r=8 on k_proj and o_proj of a model whose widths all differ", distinct, 8, ["k_proj", "o_proj"]),
        ("r=2 on down_proj alone of a model whose widths all differ", distinct, 2, ["down_proj"]),
        # k_proj + o_proj adds the same widths whether q/o and k/v are exchanged or only q and v: o_proj
        # alone tells them apart
        ("r=4 on o_proj alone of a model whose widths all differ", distinct, 4, ["o_proj"]),
    ]


def _peft_count(config, r, targets) -> int:
    import torch

    from ..llm import _quiet_imports, lora_model

    with _quiet_imports():
        from peft import LoraConfig
        from transformers import LlamaForCausalLM
    torch.manual_seed(84)
    model = lora_model(LlamaForCausalLM(config), LoraConfig(r=r, target_modules=list(targets), task_type="CAUSAL_LM"))
    return model.get_nb_trainable_parameters()[0]


def _q1_mistakes(case) -> dict:
    _, config, r, targets = case
    h, d = config.hidden_size, _head_dim(config)
    q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
    group = config.num_attention_heads // config.num_key_value_heads * d
    return {
        "you exchanged the widths of the query and the key/value projections: q_proj maps hidden_size to "
        "num_attention_heads × head_dim and o_proj maps that back; k_proj and v_proj map hidden_size to "
        "num_key_value_heads × head_dim.":
            _lora_formula(config, r, targets, shapes=dict(q_proj=(h, kv), k_proj=(h, q), v_proj=(h, q),
                                                          o_proj=(kv, h))),
        "you sized q_proj to the key/value width and v_proj to the query width, the two rows exchanged: "
        "q_proj maps hidden_size to num_attention_heads × head_dim, v_proj to num_key_value_heads × head_dim.":
            _lora_formula(config, r, targets, shapes=dict(q_proj=(h, kv), v_proj=(h, q))),
        "you sized o_proj's input by the key/value heads; o_proj takes the concatenated query heads, "
        "num_attention_heads × head_dim, back to hidden_size.":
            _lora_formula(config, r, targets, shapes=dict(o_proj=(kv, h))),
        "you sized k_proj and v_proj by the group size (num_attention_heads // num_key_value_heads) × "
        "head_dim; they map hidden_size to num_key_value_heads × head_dim.":
            _lora_formula(config, r, targets, shapes=dict(k_proj=(h, group), v_proj=(h, group))),
        "you counted q, k, v and o whatever target_modules says; count only the layers it names.":
            _lora_formula(config, r, ["q_proj", "k_proj", "v_proj", "o_proj"]),
        "you counted one layer too few (num_hidden_layers - 1); every decoder layer gets its own adapters.":
            _lora_formula(config, r, targets, layers=config.num_hidden_layers - 1),
        "you limited the rank to the layer's smaller side, min(r, in, out); peft does not: A is r × in and "
        "B out × r whatever r is.": _lora_formula(config, r, targets, rule=lambda i, o, r: min(r, i, o) * (i + o)),
        "you sized the MLP's projections hidden_size → hidden_size; gate_proj and up_proj map hidden_size "
        "to intermediate_size and down_proj maps it back.":
            _lora_formula(config, r, targets, shapes=dict(gate_proj=(h, h), up_proj=(h, h), down_proj=(h, h))),

        "you counted a full r × in × out matrix; LoRA learns two thin ones, A (r × in) and B (out × r): "
        "r × (in + out) parameters per layer.": _lora_formula(config, r, targets, rule=lambda i, o, r: r * i * o),
        "you counted only A (r × in); B (out × r) is trained too.":
            _lora_formula(config, r, targets, rule=lambda i, o, r: r * i),
        "you counted only B (out × r); A (r × in) is trained too.":
            _lora_formula(config, r, targets, rule=lambda i, o, r: r * o),
        "you treated k_proj and v_proj as hidden_size → hidden_size; with grouped-query attention they map to "
        "num_key_value_heads × head_dim.": _lora_formula(config, r, targets, gqa=False),
        "you sized q_proj and o_proj by hidden_size; q_proj maps hidden_size to num_attention_heads × head_dim "
        "and o_proj maps that back, which is not hidden_size in every model.":
            _lora_formula(config, r, targets, query_by_hidden=True),
        "the layers are missing: every decoder layer gets its own adapters.":
            _lora_formula(config, r, targets, layers=1),
        "you counted r × 2 × hidden_size for every target; the MLP layers have intermediate_size on one side.":
            _lora_formula(config, r, targets, rule=lambda i, o, r: 2 * r * config.hidden_size),
        "you computed head_dim as hidden_size // num_attention_heads; this configuration sets "
        "config.head_dim to something else: use config.head_dim.":
            _lora_formula(config, r, targets, head_dim=config.hidden_size // config.num_attention_heads),
        "you counted each adapter twice: one pair A (r × in) and B (out × r) per layer, r × (in + out) "
        "parameters, not twice that.": 2 * _lora_formula(config, r, targets),
        "you counted r × in × out per layer plus the thin matrices; LoRA adds only A (r × in) and B (out × r).":
            _lora_formula(config, r, targets, rule=lambda i, o, r: r * (i + o) + r * i * o),
        "you added a bias per output; LoRA's A and B have none (peft's default bias='none').":
            _lora_formula(config, r, targets, rule=lambda i, o, r: r * (i + o) + o),
        "you added the frozen base weights; only the adapters are trainable.":
            _lora_formula(config, r, targets) + _lora_formula(config, r, targets, rule=lambda i, o, r: i * o),
    }


def _check_lora(lora_trainable):
    require_function(lora_trainable, "lora_trainable")
    # peft's own counts first: importing peft, transformers and torchao can take tens of seconds on a
    # loaded machine, and must not run inside the learner's deadline, which starts with their call
    cases = _q1_cases()
    expected = [_peft_count(config, r, targets) for _, config, r, targets in cases]
    results = []
    for case, count in zip(cases, expected):
        description, config, r, targets = case
        what = f"lora_trainable(config, {r}, {targets}) for {description}"
        got = as_number(what, call_answer(lora_trainable, config, r, list(targets), what=what))
        results.append((case, got, count))
    _judge(results, _q1_mistakes, lambda c: f"lora_trainable(config, {c[2]}, {c[3]}) for {c[0]}", "parameters",
           whole=True)
    from ..llm import llama_config

    smol = _lora_formula(llama_config("SmolLM2-135M"), 8, ["q_proj", "k_proj", "v_proj", "o_proj"])
    return (f"right on {len(results)} models, ranks and targets, each counted by peft itself. With r=8 on q, k, v "
            f"and o, SmolLM2-135M trains {smol:,} of its 134,515,008 parameters ({smol / 134_515_008:.2%}).")


q1 = Exercise("ep14.q1", _check_lora,
              hint=("For one linear layer of out × in, what shapes do LoRA's two matrices have at rank r, and so how "
                    "many numbers do they add?",
                    "Add that count for each targeted projection, with its own in and out read from the configuration "
                    "(the query and output projections use the query heads, the key and value projections the "
                    "key/value heads, the MLP's projections its intermediate size), then multiply by the layers."),
              solution=solution_link(NOTEBOOK))


# --- q2: what a draft model buys ------------------------------------------------------------------

def _speedup(alpha, k, c, *, tokens="run", draft="k"):
    """Leviathan et al. (2023), arXiv:2211.17192, Theorem 3.8: the tokens a pass gives over its cost.

    A pass: the draft proposes k tokens (k steps of cost c), the large model checks them in one pass
    of cost 1, keeps the longest accepted run and adds one token of its own. The run reaches i tokens
    with probability alpha**i, so a pass gives 1 + alpha + ... + alpha**k tokens.
    """
    given = {"run": sum(alpha ** i for i in range(k + 1)),
             "run to k - 1": sum(alpha ** i for i in range(k)),
             "endless run": 1 / (1 - alpha) if alpha < 1 else float("nan"),
             "k at one": k if alpha == 1 else sum(alpha ** i for i in range(k + 1)),
             "run without its own": sum(alpha ** i for i in range(1, k + 1)),
             "own only after a full run": sum(alpha ** i for i in range(1, k + 1)) + alpha ** k,
             "percent": sum((alpha / 100) ** i for i in range(k + 1)),
             "independent": 1 + k * alpha,
             "all": k + 1}[tokens]
    cost = {"k": 1 + k * c, "once": 1 + c, "free": 1, "draft only": k * c, "k + 1": 1 + (k + 1) * c,
            "k - 1": 1 + (k - 1) * c, "k / c": 1 + k / c if c else math.inf}[draft]
    return given / cost


def _q2_cases():
    return [(0.8, 4, 0.05), (0.6, 2, 0.1), (0.9, 7, 0.02), (0.0, 3, 0.1), (1.0, 3, 0.05), (0.5, 1, 0.3)]


def _q2_mistakes(case) -> dict:
    alpha, k, c = case
    return {
        "you counted k × alpha accepted tokens, as if each draft token stood on its own; a draft token is "
        "kept only if every one before it was accepted too, so the pass keeps i of them with probability "
        "alpha**i: 1 + alpha + alpha**2 + … + alpha**k tokens.": _speedup(alpha, k, c, tokens="independent"),
        "you counted only the draft's accepted tokens; every pass of the large model also gives one token of "
        "its own (its correction, or one more after a fully accepted run), so even alpha = 0 gives 1 token.":
            _speedup(alpha, k, c, tokens="run without its own"),
        "you assumed every draft token is accepted; each is accepted with probability alpha.":
            _speedup(alpha, k, c, tokens="all"),
        "you left out the draft's cost: the draft runs k steps per pass, each costing c of a large-model "
        "pass, so a pass costs 1 + k × c.": _speedup(alpha, k, c, draft="free"),
        "you charged the draft once per pass; it proposes its k tokens one at a time, k steps of cost c: "
        "a pass costs 1 + k × c.": _speedup(alpha, k, c, draft="once"),
        "that is the ratio the other way up: the speed-up is the tokens a pass gives over what the pass "
        "costs, in passes of the large model alone.": 1 / _speedup(alpha, k, c),
        "your tokens per pass are 1 + alpha + … + alpha**(k - 1): either the sum stops one term early (with "
        "k draft tokens the run can reach all k), or the large model's own token is counted only after a "
        "rejection (it adds one after a fully accepted run too). Either way the tokens are 1 + alpha + … + "
        "alpha**k, (1 - alpha**(k + 1)) / (1 - alpha) in closed form.":
            _speedup(alpha, k, c, tokens="run to k - 1"),
        "you gave the large model's own token only after a fully accepted run; it adds one after a "
        "rejection too (its correction), so every pass gives 1 token of its own: 1 + alpha + … + alpha**k.":
            _speedup(alpha, k, c, tokens="own only after a full run"),
        "you charged the draft k - 1 steps; it proposes k tokens, one step each: a pass costs 1 + k × c.":
            _speedup(alpha, k, c, draft="k - 1"),
        "you divided k by c; c is one draft step's cost as a fraction of a large-model pass (0.05: 5 %), "
        "so the draft's k steps cost k × c: a pass costs 1 + k × c.": _speedup(alpha, k, c, draft="k / c"),
        "you treated alpha as a percentage; it is a probability between 0 and 1 (0.8, not 80 %): use it "
        "as it is.": _speedup(alpha, k, c, tokens="percent"),
        "your function reads its arguments as (alpha, c, k); they come as (alpha, k, c): k draft tokens, "
        "then c, one draft step's cost.": sum(alpha ** i for i in range(int(c) + 1)) / (1 + k * c),
        "you summed the series without end, 1 / (1 - alpha); the draft proposes only k tokens, so the run "
        "stops at alpha**k: 1 + alpha + … + alpha**k.": _speedup(alpha, k, c, tokens="endless run"),
        "at alpha = 1 every draft token is kept and the large model adds one of its own: k + 1 tokens a "
        "pass, not k.": _speedup(alpha, k, c, tokens="k at one"),
        "the large model's own pass is missing from the cost: a pass costs 1 (the large model) + k × c "
        "(the draft's k steps).": _speedup(alpha, k, c, draft="draft only") if k * c else math.nan,
        "you charged the draft k + 1 steps; it proposes k tokens, one step each: a pass costs 1 + k × c.":
            _speedup(alpha, k, c, draft="k + 1"),
        **{f"you rounded the speed-up to {n} decimal{'s' * (n != 1)}; return it as computed.":
           round(_speedup(alpha, k, c), n) for n in range(4)},
    }


def _is_nan(value) -> bool:
    if isinstance(value, str | bytes | bool):
        return False
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def _explain_q2(exc, case):
    if isinstance(exc, ZeroDivisionError) and case[0] == 1:
        return (f"speculative_speedup{case} divided by zero: at alpha = 1 every draft token is "
                "accepted, and (1 - alpha**(k + 1)) / (1 - alpha) is 0 / 0. There the sum "
                "1 + alpha + … + alpha**k is simply k + 1: add the terms, or treat alpha = 1 on its own.")
    return None


# what a near miss on every case (a simulation, a rounding) is told
CLOSE = ("within 1 % of the right speed-up on every case but not equal to it: an estimate (a "
         "simulation of passes carries sampling noise) or a rounded figure; the expected tokens per "
         "pass have an exact sum, 1 + alpha + … + alpha**k.", 0.01)


def _check_speedup(speculative_speedup):
    require_function(speculative_speedup, "speculative_speedup")
    results, at_one = [], None
    for case in _q2_cases():
        what = f"speculative_speedup{case}"
        try:
            raw = call_answer(speculative_speedup, *case, what=what, explain=lambda exc: _explain_q2(exc, case))
            if case[0] == 1 and _is_nan(raw):
                raise Wrong(f"{what} is nan: at alpha = 1 every draft token is accepted, and "
                            "(1 - alpha**(k + 1)) / (1 - alpha) is 0 / 0, which numpy turns into nan. There the "
                            "sum 1 + alpha + … + alpha**k is simply k + 1: add the terms, or treat alpha = 1 on "
                            "its own.")
            got = as_number(what, raw)
        except Wrong as exc:
            if case[0] != 1:
                raise
            at_one = exc      # judged after the other cases: a mistake there may explain this one too
            continue
        results.append((case, got, _speedup(*case)))
    try:
        _judge(results, _q2_mistakes, lambda c: f"speculative_speedup{c}", "× faster", whole=False,
               close=CLOSE)
    except Wrong as exc:
        if at_one is not None and "did not return" in str(at_one):   # the endless sum's loop, say
            raise Wrong(f"{exc} And at alpha = 1, {at_one}") from None
        raise
    if at_one is not None:
        raise at_one
    good, poor = _speedup(0.8, 4, 0.05), _speedup(0.5, 4, 0.05)
    return (f"right on {len(results)} cases. A draft that agrees 80 % of the time, 4 tokens a pass at 5 % of "
            f"the large model's cost each, makes decoding {good:.2f}× faster; at 50 % only {poor:.2f}×, and "
            f"a draft that never agrees makes it {_speedup(0.0, 4, 0.05):.2f}×, slower than alone.")


q2 = Exercise("ep14.q2", _check_speedup,
              hint=("In one pass, what is the chance that the large model keeps the first draft token, the first "
                    "two, the first i, and what else does the pass always give?",
                    "The expected tokens of a pass are one of the large model's own plus, for each i from 1 to k, "
                    "the chance alpha to the power i that the first i draft tokens are all accepted; the pass costs "
                    "one large-model pass plus k draft steps of c each; the speed-up is the first over the second."),
              solution=solution_link(NOTEBOOK))


__all__ = ["q1", "q2", "NotDone"]
