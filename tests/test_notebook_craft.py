"""The notebook is the lesson (DESIGN §15): short cells of one idea within the page's width,
sizes off the first screen, the device episode 2 teaches, one prediction before a measurement,
and lessons in cells rather than in markdown fences (the few fences allowed are listed, with
why)."""

from __future__ import annotations

import ast
import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EPISODES = sorted((ROOT / "episodes").glob("[0-9][0-9]-*.ipynb"))
IDS = [p.name[:2] for p in EPISODES]
SETUP_TAG = "colab-setup"
MAX_LINES, MAX_MEDIAN, MAX_WIDTH = 15, 8, 88

# Shell commands (```bash) are for a terminal, and plain fences (``` or ```text) show printed
# output: neither is the notebook's Python, and both are allowed.
SHELL = ("bash", "sh", "console", "", "text")
# Python in markdown fences that is not the lesson's runnable code, and why it cannot be a cell.
# Key: (episode number, the fence's language, a phrase of its lines).
ALLOWED_FENCES = {
    ("09", "python", "# 1. one device per process, then join the others"): (
        "key lines of gpucourse/distributed/ddp_train.py, which runs in torchrun's worker "
        "processes; tests/test_taught_ep09.py keeps the listing equal to the script"),
    ("09", "python", "# 1. join (waiting up to 30 min), then a group of all ranks"): (
        "key lines of gpucourse/distributed/uneven.py (torchrun's workers; same test)"),
    ("09", "python", "# 1. the cluster and this worker's place in it"): (
        "key lines of gpucourse/distributed/tf_multiworker.py (TensorFlow's workers; same test)"),
    ("04", "python", "# ← no Flatten before Dense"): (
        "a published tutorial's listing, broken on purpose, that the episode repairs; "
        "tests/test_taught_ep04.py checks that it cannot run (SyntaxError)"),
    ("11", "python", "while epoch < args.epochs"): (
        "key lines of gpucourse/children/survive_train.py, which runs in child processes that are "
        "killed; tests/test_survive.py keeps each line equal to the module"),
    ("12", "python", "cp.RawKernel"): "CuPy has no CPU mode: nothing here can run it",
}


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _code(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in _cells(path) if c["cell_type"] == "code"
            and SETUP_TAG not in c.get("metadata", {}).get("tags", [])]


def _markdown(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in _cells(path) if c["cell_type"] == "markdown"]


def _lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip())


@pytest.mark.parametrize("path", EPISODES, ids=IDS)
def test_cells_are_short_and_fit_the_page(path):
    sizes = [_lines(source) for source in _code(path)]
    long = [(i, n) for i, n in enumerate(sizes) if n > MAX_LINES]
    assert not long, f"code cells (index among code cells, lines) over {MAX_LINES}: {long}"
    assert statistics.median(sizes) <= MAX_MEDIAN, (
        f"median code cell {statistics.median(sizes)} lines: split cells of two ideas")
    wide = [line for source in _code(path) for line in source.splitlines()
            if len(line) > MAX_WIDTH]
    assert not wide, f"{len(wide)} code lines wider than {MAX_WIDTH}, e.g. {wide[0]!r}"


@pytest.mark.parametrize("path", EPISODES, ids=IDS)
def test_sizes_come_from_the_episodes_file_not_a_table_on_the_first_screen(path):
    code = "\n".join(_code(path))
    assert not re.search(r"\}\s*\[MODE\]", code), "a {...}[MODE] table: use settings.sizes"
    assert f'settings.sizes("ep{path.name[:2]}"' in code or path.name.startswith("02"), (
        f'SIZES = settings.sizes("ep{path.name[:2]}", ...) and print(SIZES.describe())')


def _uses_torch(path: Path) -> bool:
    return any(re.search(r"^import torch\b", source, re.M) for source in _code(path))


@pytest.mark.parametrize("path", [p for p in EPISODES if _uses_torch(p)],
                         ids=[p.name[:2] for p in EPISODES if _uses_torch(p)])
def test_pytorch_episodes_choose_the_device_as_episode_2_teaches(path):
    code = "\n".join(_code(path))
    calls = [ast.unparse(node.func) for source in _code(path) if "%" not in source
             for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
    if not path.name.startswith("02"):       # episode 2 writes pick_device itself
        assert "course_device.pick_device" in calls, "device = course_device.pick_device()"
    assert not re.search(r"""torch\.device\(\s*["']cuda["']\s+if""", code), (
        'torch.device("cuda" if ... else "cpu") drops Apple\'s and Intel\'s GPUs')


@pytest.mark.parametrize("path", EPISODES, ids=IDS)
def test_one_prediction_before_a_measurement_and_its_answer_after(path):
    cells = _cells(path)
    asks = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
            and re.search(r"^\*\*Predict", "".join(c["source"]), re.M)]
    answers = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
               and "".join(c["source"]).lstrip().startswith("<details><summary>Answer")]
    assert len(asks) >= 1 and answers, "a **Predict:** question and a <details> answer"
    first, answer = asks[0], min(a for a in answers if a > asks[0])
    assert any(c["cell_type"] == "code" for c in cells[first + 1:answer]), (
        "the measurement runs between the question and its answer")
    assert "</details>" in "".join(cells[answer]["source"])


@pytest.mark.parametrize("path", EPISODES, ids=IDS)
def test_no_lesson_in_markdown_fences(path):
    for text in _markdown(path):
        for language, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            if language in SHELL:
                continue
            allowed = [why for (ep, lang, phrase), why in ALLOWED_FENCES.items()
                       if ep == path.name[:2] and lang == language and phrase in body]
            assert allowed, (f"a ```{language} fence starting {body[:60]!r}: make it a cell, or "
                             "add it to ALLOWED_FENCES with the reason it cannot run")


def test_every_allowed_fence_is_still_there():
    texts = {p.name[:2]: "\n".join(_markdown(p)) for p in EPISODES}
    gone = [key for key in ALLOWED_FENCES
            if f"```{key[1]}" not in texts.get(key[0], "") or key[2] not in texts[key[0]]]
    assert not gone, f"allowed fences no longer in the episodes: {gone}"


# --------------------------------------------------------------------------- printed figures
# A format that writes an exponent for ordinary magnitudes: "e"/"E" always (15 → 1.5e+01), and
# "g"/"G"/"n" or a bare precision (".3") from 10**precision up (1,240 → 1.24e+03 at ".3g") and
# below 1e-4. Fixed-point ("f", ",", "%", "d") cannot; gpucourse.numbers.readable writes figures
# as people do (1,240, 0.00012) and keeps an exponent only from 1e9 up and below 1e-6.
EXPONENT_SPEC = re.compile(r"(?:^|[^a-zA-Z])(?:[eEgGn]|\.\d+)$")
PERCENT_EXPONENT = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[eEgG]")
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]-*.ipynb"))
# Notebooks whose owners have not yet changed theirs to readable, and the exact change. Each is
# an expected failure that must fail (strict): once fixed, take it off this list.
EXPONENT_NOT_YET = {
    "episodes/04-keras-cnn.ipynb": "f\"{scale:g}\" and f\"{...initial_scale:g}\" → readable(...)",
}


def _format_specs(source: str) -> list[str]:
    """Every format a cell's code writes a value with: f-string specs, literal ``.format``
    strings' and ``%`` strings' conversions (IPython magics are left out)."""
    code = "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    specs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            specs.append("".join(part.value for part in node.format_spec.values
                                 if isinstance(part, ast.Constant)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "format" and isinstance(node.func.value, ast.Constant)
              and isinstance(node.func.value.value, str)):
            specs += re.findall(r"\{[^{}:]*:([^{}]*)\}", node.func.value.value)
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
              and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
            specs += PERCENT_EXPONENT.findall(node.left.value)
    return specs


def _exponent_formats(path: Path) -> list[str]:
    found = []
    for index, source in enumerate(_code(path)):
        found += [f"code cell {index}: {spec!r}" for spec in _format_specs(source)
                  if EXPONENT_SPEC.search(spec) or PERCENT_EXPONENT.fullmatch(spec)]
    return found


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=pytest.mark.xfail(
        strict=True, reason=EXPONENT_NOT_YET.get(p.relative_to(ROOT).as_posix(), "")))
    if p.relative_to(ROOT).as_posix() in EXPONENT_NOT_YET else p
    for p in EPISODES + SOLUTIONS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_printed_figure_is_formatted_with_an_exponent(path):
    found = _exponent_formats(path)
    assert not found, (f"formats that write 1,240 as 1.24e+03 (use "
                       f"gpucourse.numbers.readable): {found}")


@pytest.mark.parametrize("spec, exponent", [
    (".2e", True), ("e", True), (".3g", True), ("g", True), ("G", True), (">8.3g", True),
    (".3", True), ("n", True), (".1f", False), (",", False), (",.0f", False), (".0%", False),
    ("d", False), (">10", False), ("<19", False), ("6.1f", False), ("", False)])
def test_the_exponent_rule_tells_the_formats_apart(spec, exponent):
    assert bool(EXPONENT_SPEC.search(spec)) is exponent


def test_the_rule_finds_formats_in_f_strings_format_calls_and_percent_strings():
    source = ('x = 1240.0\nprint(f"{x:.3g} GB/s")\nprint("{:.2e}".format(x))\n'
              'print("%g" % x)\nprint(f"{x:,.0f} and {x:>8}")')
    found = [s for s in _format_specs(source)
             if EXPONENT_SPEC.search(s) or PERCENT_EXPONENT.fullmatch(s)]
    assert sorted(found) == ["%g", ".2e", ".3g"]


def test_the_size_lines_a_notebook_prints_say_nothing_of_tests_or_quick_mode():
    from gpucourse import settings

    lines = [settings.describe_mode(mode) for mode in settings.MODES]
    lines += [settings.Sizes("ep01", mode, {}).describe() for mode in settings.MODES]
    words = re.compile(r"quick|tests?\b|GPUCOURSE_", re.I)
    assert not [line for line in lines if words.search(line)], lines
