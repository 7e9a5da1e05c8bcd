"""Timing a language model as it writes: the functions episode 10 writes in its cells.

Episode 10 teaches them in cells (a prefill, then one token per decode step, each clock reading
after a synchronisation; ``model.generate`` with a ``TokenClock``); episode 14, which times the
same model made cheaper, calls them from here. tests/test_taught_ep10.py keeps each cell and
its function here the same code.
"""

from __future__ import annotations

import time

import torch

from . import llm


@torch.no_grad()
def generate_timed(model, ids, new_tokens, sync):
    sync(); start = time.perf_counter()
    out = model(ids, use_cache=True, logits_to_keep=1)   # prefill: the whole prompt
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    sync(); ttft = time.perf_counter() - start
    steps = []
    for _ in range(new_tokens - 1):                       # decode: one token at a time
        start = time.perf_counter()
        out = model(token, past_key_values=out.past_key_values, use_cache=True)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        sync(); steps.append(time.perf_counter() - start)
    return ttft, sorted(steps)[len(steps) // 2]          # TTFT and the median TPOT


def generate_clocked(model, ids, new_tokens, sync, **decoding):
    """model.generate with a TokenClock: the new token ids and the serving metrics."""
    clock = llm.TokenClock(sync)
    # at least 2 tokens, for an inter-token latency; assisted decoding (episode 14)
    # refuses that floor in transformers 5.0 (Kaggle), and makes 2 or more anyway
    floor = {} if "assistant_model" in decoding else {"min_new_tokens": 2}
    out = model.generate(ids, max_new_tokens=new_tokens, streamer=clock,
                         pad_token_id=model.config.eos_token_id, **floor, **decoding)
    return out[0, ids.shape[1]:], clock.metrics()


def show_metrics(name, m):
    print(f"{name:9} TTFT {m['ttft_s'] * 1e3:7.1f} ms · ITL median "
          f"{m['itl_p50_s'] * 1e3:6.1f} ms, p90 {m['itl_p90_s'] * 1e3:6.1f} ms · "
          f"{m['tokens_per_s_per_user']:6.1f} tokens/s")


def acceptance(rounds, tokens):
    """α of Leviathan et al. (2023), eq. 1, estimated from a greedy assisted run.

    ``rounds``: for each pass of the large model, the draft tokens it checked (in order);
    ``tokens``: the new tokens the run wrote. A round keeps its draft tokens up to the first one
    that differs from what the run wrote there, then the large model adds one of its own. The
    tokens after a rejection are never tested, so kept ÷ drafted understates α; under eq. 1's
    model (each tested token accepted with probability α) the estimate is
    accepted ÷ (accepted + rejections): the tokens tested, each an accept or a reject.
    """
    tokens = [int(t) for t in tokens]
    position = accepted = rejected = 0
    for proposed in rounds:
        n = 0
        while n < len(proposed) and position + n < len(tokens) and int(proposed[n]) == tokens[position + n]:
            n += 1
        accepted += n
        rejected += position + n < len(tokens) and n < len(proposed)
        position += n + 1
    return accepted / max(accepted + rejected, 1)
