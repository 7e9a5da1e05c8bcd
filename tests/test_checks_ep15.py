"""Episode 15's checks, tried right, blank and wrong.

``tests/data/ep15_answers/`` holds answers written by a reviewer who had not seen these checks:
each file's docstring names the mistake it makes ("right ..." for a right answer written another
way). Every right one must pass, every wrong one must be refused, and none may take long.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from gpucourse.checks import ep15
from gpucourse.exercises import ____

ANSWERS = sorted((Path(__file__).parent / "data" / "ep15_answers").glob("ep15_q*.py"))
NAMES = {"q1": ("continuous_steps",), "q2": ("PrefixPagedCache",), "q3": ("prefix_hits",),
         "q4": ("slo_report",), "q5": ("max_users", "max_rate")}


def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", ANSWERS, ids=[p.stem for p in ANSWERS])
def test_answers_of_a_class(path):
    module = _load(path)
    question = path.stem.split("_")[1]
    outcome, message = getattr(ep15, question).outcome(*[getattr(module, n) for n in NAMES[question]])
    right = (module.__doc__ or "").strip().lower().startswith("right")
    if right:
        assert outcome == "correct", message
    else:
        assert outcome == "wrong", f"{path.stem}: {outcome}: {message}"
        assert NAMED[path.stem[len("ep15_"):]] in message, message     # its own mistake, by name


def test_there_are_fifteen_wrong_answers_per_exercise():
    for question in NAMES:
        wrong = [p for p in ANSWERS if p.stem.split("_")[1] == question
                 and not _load(p).__doc__.strip().lower().startswith("right")]
        assert len(wrong) >= 15, (question, len(wrong))


@pytest.mark.parametrize("question", sorted(NAMES))
def test_blank_is_not_done(question):
    outcome, _ = getattr(ep15, question).outcome(*[____ for _ in NAMES[question]])
    assert outcome == "not-done"


# --- the mistakes the prompts name, and the boundaries, each separated by a case ------------------

def test_q1_named_mistakes_each_differ_from_the_right_count_somewhere():
    for message in ep15._q1_mistakes(ep15.Q1_CASES[0]):
        values = [(ep15._q1_mistakes(c)[message], ep15._continuous(*c)) for c in ep15.Q1_CASES]
        assert any(abs(a - b) > 1e-9 for a, b in values), message


def test_q3_a_chain_is_needed():
    assert any(ep15._hits(*c) != ep15._hits(*c, chain=False) for c in ep15._q3_cases())


def test_q4_has_records_exactly_at_both_limits():
    strict = [ep15._report(*c, strict=("ttft", "tpot")) != ep15._report(*c) for c in ep15._q4_cases()]
    assert sum(strict) >= 2


def test_q4_a_count_of_good_requests_is_named_as_not_a_rate():
    records, ttft, tpot, duration = ep15._q4_cases()[0]
    p99_ttft, p99_tpot, goodput = ep15._report(records, ttft, tpot, duration)

    def slo_report(*_):
        return p99_ttft, p99_tpot, goodput * duration
    outcome, message = ep15.q4.outcome(slo_report)
    assert outcome == "wrong" and "rate" in message


def test_q5_head_dim_apart_from_hidden_size():
    assert any(c["num_attention_heads"] * c["head_dim"] != c["hidden_size"] for c in ep15.Q5_CONFIGS.values())


# --- every wrong answer is told its own mistake --------------------------------------------------
# Words of the message each wrong answer must get: the mistake its docstring names, not another one
# and not only the numbers. (On the checks reviewed first, 59 of 118 wrong answers were named.)
NAMED = {
    "q1_as_text": "drop the quotes", "q1_batch_not_capped": "averaged the slots' end steps",
    "q1_ceil_ratio": "⌈total / batch⌉", "q1_fewest_requests": "slots in turn",
    "q1_hang_idle_slots": "loop that never ends", "q1_hardcoded_32": "for every case",
    "q1_ideal_ratio": "ideal total / batch", "q1_idle_step": "no idle step",
    "q1_last_request_end": "request that started last", "q1_max_only": "longest request alone",
    "q1_min_slot": "first slot frees", "q1_one_short": "one step short", "q1_prefill_step": "a prefill",
    "q1_refill_one_per_step": "at most one waiting request join per step", "q1_round_robin": "slots in turn",
    "q1_same_step_refill": "in the step its slot's last request ended", "q1_sort_longest": "longest first",
    "q1_sort_shortest": "shortest first", "q1_static": "static batching",
    "q1_static_then_continuous": "whole first group", "q1_sum_only": "one request at a time",
    "q2_always_plus_one": "'d' holds 7 pages", "q2_cached_before_unused": "from unused first",
    "q2_cached_by_hash": "cached is keyed by page", "q2_double_free_silent": "double free",
    "q2_evict_held": "but 'e' holds it", "q2_evict_oldest_hash": "'e' had just taken it",
    "q2_floor_pages": "a partial last page counts", "q2_forward_free": "from its last page to its first",
    "q2_found_stays_cached": "page 1 is in cached while a table holds it",
    "q2_free_ignores_refs": "page 1 is in cached while a table holds it",
    "q2_free_keeps_table": "free removes it", "q2_free_to_front": "at the end, from its last page",
    "q2_keeps_stale_hash": "forget its hash", "q2_memerror_counts_found": "as pages to evict too",
    "q2_memerror_ge": ">, not >=", "q2_memerror_unused_only": "count them as available too",
    "q2_mru_popitem": "least recently freed first", "q2_never_records_hash": "by_hash has no hash for it",
    "q2_no_chain": "page_hash(None, tokens)", "q2_no_rollback": "changed the cache first",
    "q2_partial_hashed": "partial last page of 'a'", "q2_refs_counter": "one count per page",
    "q2_refs_not_decremented_cached": "every free takes 1 away", "q2_refs_set_one": "adds 1",
    "q2_returns_pages": "the pages found", "q2_unhashed_to_cached": "which has no hash",
    "q2_unhashed_to_cached_get": "else to unused", "q2_unused_appendleft": "without a hash at its end",
    "q2_unused_from_back": "from its front",
    "q3_add_before_lookup": "before looking them up", "q3_against_first": "only the first prompt's pages",
    "q3_against_previous": "the one just before it", "q3_episode_formula": "(n − 1)·⌊P/S⌋·S",
    "q3_full_minus_one": "last full page out", "q3_hardcoded_episode": "for every case",
    "q3_hit_rate": "a hit rate", "q3_lcp_tokens": "longest common prefix in tokens",
    "q3_list_hash": "a list cannot be", "q3_mutates_prompts": "changed the prompts",
    "q3_no_chain": "by their tokens alone", "q3_no_chain_no_break": "also after a page that missed",
    "q3_off_by_one_pages": "len // page_size + 1", "q3_only_hits_added": "only the first prompt's pages",
    "q3_pages_not_tokens": "pages, not tokens", "q3_partial_as_full": "partial last page as a whole page",
    "q3_partial_pages": "partial pages too", "q3_sum_over_earlier": "once for every earlier prompt",
    "q3_vllm_last_token": "last prompt token out",
    "q4_duration_from_trace": "the trace's own span", "q4_e2e_not_ttft": "you took the last token's",
    "q4_failed_in_percentiles_only": "failed requests in the percentiles (and rightly out of goodput)",
    "q4_goodput_count": "the count of good requests", "q4_goodput_fraction": "the fraction of the requests",
    "q4_goodput_fraction_ok": "fraction of completed requests", "q4_itl_p99": "every gap between tokens",
    "q4_mean": "that is the mean", "q4_median": "the median", "q4_milliseconds": "milliseconds",
    "q4_nearest_method": "method='nearest'", "q4_nearest_rank_ceil": "⌈0.99·n⌉-th smallest",
    "q4_nearest_rank_lower": "method='lower'",
    "q4_ok_key_truthy_sent": "failed requests, in the percentiles and in goodput",
    "q4_one_token_bad": "as missing the TPOT SLO", "q4_one_token_in_p99": "out of the TPOT percentile",
    "q4_or_slo": "either", "q4_p95": "95th percentile", "q4_quantile_099": "np.percentile takes percent",
    "q4_returns_dict": "return three numbers", "q4_strict_both": "< for both",
    "q4_strict_tpot": "TPOT is exactly slo_tpot", "q4_strict_ttft": "TTFT is exactly slo_ttft",
    "q4_throughput": "that is throughput", "q4_tpot_by_tokens": "not by the tokens",
    "q4_tpot_since_sent": "whole time since sending",
    "q4_with_failed": "failed requests, in the percentiles and in goodput",
    "q5_as_text": "drop the quotes", "q5_bits": "for bits", "q5_ceil": "rounded up",
    "q5_context_plus_one": "context + 1", "q5_floor_minus_one_eps": "ceil − 1",
    "q5_fraction": "fraction of a user", "q5_gb_not_gib": "GB (10⁹ bytes)",
    "q5_hardcoded_2bytes": "2 bytes per number whatever", "q5_head_dim_from_hidden": "hidden_size / num_attention_heads",
    "q5_hidden_size": "by hidden_size", "q5_little_inverse": "latency / users",
    "q5_little_times": "users × latency", "q5_no_context": "left out the context",
    "q5_no_dtype": "bytes per number", "q5_no_factor_2": "factor 2", "q5_no_layers": "left out the layers",
    "q5_query_heads": "query heads", "q5_rate_floor": "rounded the rate down", "q5_rate_round": "you rounded the rate;",
    "q5_rate_half": "twice the latency", "q5_rate_hardcoded": "the episode's latency",
    "q5_rate_ms": "milliseconds", "q5_rate_per_minute": "per minute", "q5_round": "round down",
    "q5_strict_loop": "a loop that adds a user while the next fits with <",
}
WRONG = [p for p in ANSWERS if not (_load(p).__doc__ or "").strip().lower().startswith("right")]


def test_every_wrong_answer_has_its_words():
    assert sorted(NAMED) == sorted(p.stem[len("ep15_"):] for p in WRONG)


@pytest.mark.parametrize("mistakes, cases, right", [
    (ep15._q1_mistakes, ep15.Q1_CASES, lambda c: ep15._continuous(*c)),
    (ep15._q3_mistakes, ep15._q3_cases(), lambda c: ep15._hits(*c)),
    (ep15._q4_mistakes, ep15._q4_cases(), lambda c: ep15._report(*c)),
    (ep15._q5_mistakes, ep15.Q5_CASES, lambda c: ep15._users(c[0], ep15.Q5_CONFIGS[c[1]], *c[2:])),
], ids=["q1", "q3", "q4", "q5"])
def test_named_mistakes_are_told_apart_by_the_cases(mistakes, cases, right):
    """Every mistake a message names differs from the right answer, and from every other named
    mistake, on at least one case: otherwise a message could name a mistake the answer did not make."""
    def key(value):
        return tuple(round(v, 9) for v in value) if isinstance(value, tuple) else round(value, 9)
    table = {m: [key(mistakes(c)[m]) for c in cases] for m in mistakes(cases[0])}
    assert all(values != [key(right(c)) for c in cases] for values in table.values())
    assert len(set(map(tuple, table.values()))) == len(table)
