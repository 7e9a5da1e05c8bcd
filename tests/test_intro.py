"""The front page's figures come from the episodes: the total time is the sum of their stated minutes."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _episodes():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [ROOT / f"{f}.ipynb" for f in files if f.startswith("episodes/")]


def test_the_total_time_is_the_sum_of_the_episodes_minutes():
    minutes = 0
    for path in _episodes():
        found = re.search(r"\*\*Teaching:\*\* (\d+) min · \*\*Exercises:\*\* (\d+) min", path.read_text())
        assert found, f"{path.name} states no teaching/exercise minutes"
        minutes += int(found[1]) + int(found[2])
    stated = re.search(r"<!-- total-time -->(\d+) h (\d+) min<!-- /total-time -->",
                       (ROOT / "book" / "intro.md").read_text())
    assert stated, "book/intro.md lost its total-time marker"
    expected = f"{minutes // 60} h {minutes % 60} min"
    assert f"{stated[1]} h {stated[2]} min" == expected, f"book/intro.md should say {expected}"


def test_every_episode_is_in_the_intro_table():
    intro = (ROOT / "book" / "intro.md").read_text()
    for path in _episodes():
        assert f"../episodes/{path.name}" in intro, f"{path.name} is missing from book/intro.md's table"
