"""Each episode states the time the course's own measure gives it (tools/episode_length.py),
and fits one sitting (DESIGN §15): about an hour of teaching, at most 4 objectives."""

from __future__ import annotations

import json
import re
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import episode_length  # noqa: E402 - a script in tools/, not a package

EPISODES = sorted((ROOT / "episodes").glob("*.ipynb"))


def _stated_minutes(path) -> int:
    first = path.read_text(encoding="utf-8")
    found = re.search(r"\*\*Teaching:\*\* (\d+) min", first)
    assert found, f"{path.name} states no teaching minutes"
    return int(found[1])


@pytest.mark.parametrize("path", EPISODES, ids=[p.name for p in EPISODES])
def test_the_stated_teaching_time_follows_the_courses_measure(path):
    """Stated minutes between 0.65 and 1.15 of the measure: the stated figures run a little
    under it (an instructor reads faster than a new learner), never half of it."""
    measured = episode_length.measure(path).minutes
    stated = _stated_minutes(path)
    assert 0.65 * measured <= stated <= 1.15 * measured, (
        f"{path.name} says {stated} min of teaching; the course's measure gives "
        f"{measured:.0f} (python tools/episode_length.py)")


@pytest.mark.parametrize("path", EPISODES, ids=[p.name for p in EPISODES])
def test_an_episode_fits_one_sitting(path):
    problems = episode_length.measure(path).problems()
    assert not problems, f"{path.name}: {'; '.join(problems)}"


def test_the_measure_flags_a_long_episode():
    """The measure the tests rely on can fail: twice an episode is over the limit."""
    nb = json.loads(EPISODES[0].read_text(encoding="utf-8"))
    one = episode_length.measure(EPISODES[0]).minutes
    nb["cells"] = nb["cells"] * 2
    doubled = ROOT / "_build" / "test-length" / EPISODES[0].name
    doubled.parent.mkdir(parents=True, exist_ok=True)
    doubled.write_text(json.dumps(nb), encoding="utf-8")
    assert episode_length.measure(doubled).minutes == pytest.approx(2 * one)
    assert any("min of teaching" in p for p in episode_length.measure(doubled).problems())
