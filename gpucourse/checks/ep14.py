"""Checks for episode 14, "A language model made cheaper".

``q1`` LoRA's trainable parameters for a rank and a set of target modules.

The check calls the learner's function on several models, ranks and targets of its own, with different
answers, so that a constant or an answer right for one case only cannot pass; it builds each model with
peft and asks peft for its own count of trainable parameters. One model has num_attention_heads × head_dim
different from hidden_size, as in Gemma, so that sizing the query and output projections by hidden_size
is caught. A wrong answer that matches a known mistake on every case (or on the most of the cases it got
wrong) is named, with episode 10's ``_judge``.
"""

from __future__ import annotations

from ..exercises import Exercise, NotDone, as_number, call_answer, require_function, solution_link
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
                  query_by_hidden=False):
    shapes = _shapes(config)
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
    return [
        ("r=4 on q_proj and v_proj", tiny, 4, ["q_proj", "v_proj"]),
        ("r=8 on q, k, v and o", tiny, 8, ["q_proj", "k_proj", "v_proj", "o_proj"]),
        ("r=2 on the MLP (gate, up, down)", other, 2, ["gate_proj", "up_proj", "down_proj"]),
        ("r=16 on all seven linear layers", other, 16, list(LINEAR)),
        ("r=4 on q, k, v and o of a model whose heads × head_dim (64) is not its hidden_size (40)", wide, 4,
         ["q_proj", "k_proj", "v_proj", "o_proj"]),
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
    return {
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
        "you added the frozen base weights; only the adapters are trainable.":
            _lora_formula(config, r, targets) + _lora_formula(config, r, targets, rule=lambda i, o, r: i * o),
    }


def _check_lora(lora_trainable):
    require_function(lora_trainable, "lora_trainable")
    results = []
    for case in _q1_cases():
        description, config, r, targets = case
        what = f"lora_trainable(config, {r}, {targets}) for {description}"
        got = as_number(what, call_answer(lora_trainable, config, r, list(targets), what=what))
        results.append((case, got, _peft_count(config, r, targets)))
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


__all__ = ["q1", "NotDone"]
