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
