"""Episode 2's device-mismatch demo: the module runs, and the lines the episode shows are its own."""
import json
import re
import subprocess
import sys

from conftest import ROOT


def test_the_demo_raises_the_mismatch_and_shows_the_fix():
    done = subprocess.run([sys.executable, "-m", "gpucourse.mismatch_demo", "meta"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RuntimeError:" in done.stdout and "after .to(): meta with shape (16, 2)" in done.stdout


def test_the_demo_without_a_device_says_how_to_call_it():
    done = subprocess.run([sys.executable, "-m", "gpucourse.mismatch_demo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "usage: python -m gpucourse.mismatch_demo DEVICE" in done.stderr


def test_the_lines_episode_2_shows_are_the_modules():
    source = (ROOT / "gpucourse" / "mismatch_demo.py").read_text()
    marked = re.search(r"# >>> the mismatch and its fix\n(.*?)\n\s*# <<<", source, re.S)[1]
    shown_in_module = "\n".join(line[4:] for line in marked.splitlines())
    notebook = json.loads((ROOT / "episodes" / "02-finding-your-gpu.ipynb").read_text())
    markdown = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
    assert f"```python\n{shown_in_module}\n```" in markdown
