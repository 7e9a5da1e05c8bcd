"""Naming the mistake behind a wrong answer: recompute each candidate mistake, keep the one that fits.

A check that stops at the first difference it finds and blames whatever differs there names a mistake
the learner may not have made: two mistakes can give the same number on one fixture, and a right
step can differ only because a later one is wrong. These helpers instead compute what every known
mistake would have given on every case the check tried, and keep the mistake that agrees with the
learner's answers on the most cases (on every case it got wrong, when one does).
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable


def best_fit(cases: Iterable, answer_of: Callable, candidates_of: Callable, same: Callable) -> tuple | None:
    """The candidate mistake that explains the most of the cases the answer got wrong.

    Parameters
    ----------
    cases : iterable
        The cases the check tried, each one it got wrong or right.
    answer_of : callable
        ``answer_of(case)``: what the learner's answer gave on ``case``.
    candidates_of : callable
        ``candidates_of(case)``: ``{mistake: value}``, what each known mistake gives on ``case``; the
        first key is preferred when two mistakes fit equally well.
    same : callable
        ``same(got, value)``: True when the answer agrees with a candidate's value.

    Returns
    -------
    tuple or None
        ``(mistake, cases_it_explains, cases_tried)``, or None when no mistake explains any case.
    """
    cases = list(cases)
    scores: dict[Hashable, int] = {}
    for case in cases:
        got = answer_of(case)
        for mistake, value in candidates_of(case).items():
            scores.setdefault(mistake, 0)
            if same(got, value):
                scores[mistake] += 1
    if not scores:
        return None
    mistake = max(scores, key=lambda m: scores[m])      # max keeps the first of equal scores
    return (mistake, scores[mistake], len(cases)) if scores[mistake] else None
