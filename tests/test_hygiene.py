"""House rules for every notebook: outputs, badges, devices, anatomy, table of contents."""
import ast
import re

import pytest

import coursetools
from conftest import ROOT

NOTEBOOKS = coursetools.notebooks()
EPISODES = [p for p in NOTEBOOKS if p.parent.name == "episodes"]
IDS = [p.relative_to(ROOT).as_posix() for p in NOTEBOOKS]
REPO, BRANCH = coursetools.repository()
HARD_CODED_DEVICE = re.compile(r"""(?<![\w.])['"](cuda(:\d+)?|/GPU:\d+)['"]""")
# Triton's compile target names a backend, not a device to compute on: GPUTarget("cuda", 75, 32).
NAMES_A_BACKEND = re.compile(r"GPUTarget\(")
CHOSEN_FROM_WHAT_EXISTS = re.compile(r"is_available\(\)|list_physical_devices|device_count\(\)|if tf_gpus|if gpus")
# Asking what a chosen device is (`device.type == "cuda"`, `device.type in ("cuda", "cpu")`)
# names no device: it is how a cell guards what only CUDA has.
ASKS_DEVICE_TYPE = re.compile(r"""\.type\s*(?:==|!=)\s*['"]\w+['"]|\.type\s+(?:not\s+)?in\s*\([^)]*\)""")


def _nb(path):
    return coursetools.read(path)


def test_there_are_notebooks():
    assert EPISODES, "no episodes found"
    for ep in EPISODES:
        for kind in ("solutions", "exercises"):
            assert (ROOT / kind / ep.name).exists(), f"{kind}/{ep.name} is missing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_outputs_unless_tagged(path):
    for i, cell in enumerate(_nb(path).cells):
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        if "nbval-check-output" not in tags:
            assert not cell.outputs, f"cell {i} has stored outputs; clear them or tag the cell nbval-check-output"
            assert cell.execution_count is None, f"cell {i} has an execution count; clear outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_colab_and_kaggle_badges_match_path_and_config(path):
    first = _nb(path).cells[0].source
    rel = path.relative_to(ROOT).as_posix()
    assert coursetools.badge(REPO, BRANCH, rel) in first, (
        f"the first cell needs the Colab and Kaggle badges for {rel} on {REPO}@{BRANCH}; run `make sync`")
    github = f"https://github.com/{REPO}/blob/{BRANCH}/{rel}"
    assert f"(https://www.kaggle.com/kernels/welcome?src={github})" in first
    assert f"(https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/{rel})" in first


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_setup_cell_is_the_synced_one(path):
    setup = [c for c in _nb(path).cells if coursetools.SETUP_TAG in c.metadata.get("tags", [])]
    assert len(setup) == 1, f"exactly one cell tagged {coursetools.SETUP_TAG}"
    assert setup[0].source == coursetools.setup_cell(REPO, BRANCH), "the setup cell differs; run `make sync`"


def test_setup_cell_installs_only_the_course_package_on_colab_and_kaggle():
    src = coursetools.setup_cell(REPO, BRANCH)
    assert '"google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ' in src
    assert f'"gpucourse @ {coursetools.pip_spec(REPO, BRANCH)}"' in src
    pip_args = re.search(r"subprocess\.run\(\[(.*?)\]", src, re.S)[1].replace(" ", "").split(",")
    assert f'spec = "gpucourse @ {coursetools.pip_spec(REPO, BRANCH)}"' in src
    assert pip_args == ["sys.executable", '"-m"', '"pip"', '"install"', '"--quiet"', "spec"], (
        "the setup cell installs the helper and nothing else (never a framework Colab or Kaggle has)")
    assert len(src.splitlines()) <= 12, "keep the setup cell short enough to read"
    assert max(len(line) for line in src.splitlines()) <= 88, "no line wider than the page"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_hard_coded_device(path):
    for i, cell in enumerate(_nb(path).cells):
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            if HARD_CODED_DEVICE.search(ASKS_DEVICE_TYPE.sub("", line.split("#")[0])):
                assert CHOSEN_FROM_WHAT_EXISTS.search(cell.source), (
                    f"cell {i} names a GPU device ({line.strip()!r}) without choosing it from what exists")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_kernel_and_tf_logging(path):
    nb = _nb(path)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    for i, src in enumerate(sources):
        if re.search(r"^\s*(import|from) (tensorflow|keras)\b", src, re.M):
            before = "\n".join(sources[: i + 1])
            assert "TF_CPP_MIN_LOG_LEVEL" in before or "import_tensorflow()" in before, (
                "quiet TensorFlow's logs before importing it (gpucourse.frameworks.import_tensorflow)")


def _profile_calls(source):
    """The ``profile(...)`` calls (torch.profiler's) in a cell; IPython magics are skipped."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("profile", "torch.profiler.profile"):
            yield node


def test_every_profile_keeps_its_events_so_pytorch_does_not_warn_about_cycles():
    """PyTorch 2.10 and 2.11 warn "Profiler clears events at the end of each cycle" on every
    profile made with acc_events=False (pytorch/pytorch#180348; seen in episode 7 on an H100),
    so every profile a learner runs sets it: in every notebook and in the package."""
    found, missing = 0, []
    sources = [(p.relative_to(ROOT).as_posix(), c.source)
               for p in NOTEBOOKS for c in _nb(p).cells if c.cell_type == "code"]
    sources += [(p.relative_to(ROOT).as_posix(), p.read_text())
                for p in (ROOT / "gpucourse").rglob("*.py")]
    for where, source in sources:
        for call in _profile_calls(source):
            found += 1
            flags = {k.arg: ast.unparse(k.value) for k in call.keywords}
            # A profile built only to hold recorded events (never entered) cannot warn.
            if flags.get("acc_events") != "True" and "prof.profiler = " not in source:
                missing.append(f"{where}: {ast.unparse(call)}")
    assert found >= 8, found
    assert not missing, "set acc_events=True:\n" + "\n".join(missing)


@pytest.mark.parametrize("path", EPISODES, ids=[p.name for p in EPISODES])
def test_episode_anatomy(path):
    nb = _nb(path)
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    text = "\n".join(md)
    number = int(path.name[:2])
    assert re.match(rf"# {number}\. \S", md[0]), f"first cell must start with '# {number}. Title'"
    assert re.search(r"\*\*Teaching:\*\* \d+ min · \*\*Exercises:\*\* \d+ min", md[0])
    order = [text.find(h) for h in ("## Questions", "## Objectives", "## Key points")]
    assert -1 not in order and order == sorted(order), "need Questions, Objectives … Key points, in that order"
    assert "## Key points" in md[-1], "Key points must be the last cell"
    assert re.search(r"settings\.(run_mode|sizes)\(", "\n".join(c.source for c in nb.cells if c.cell_type == "code")), (
        "pick the sizes visibly with SIZES = settings.sizes(\"epNN\", ...) and print SIZES.describe()")


def test_every_notebook_and_page_is_in_the_toc():
    files = coursetools.toc_files()
    for path in NOTEBOOKS:
        assert path.relative_to(ROOT).with_suffix("").as_posix() in files, f"{path.name} missing from _toc.yml"
    for entry in files:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), f"_toc.yml names missing {entry}"
    assert len(files) == len(set(files)), "a file is listed twice in _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_images_show_in_colab_and_match_their_source(path):
    """Colab cannot follow relative image paths, so diagrams are embedded as data URIs
    generated from the SVG files in book/images/ (the editable sources)."""
    import base64

    for i, cell in enumerate(_nb(path).cells):
        if cell.cell_type != "markdown":
            continue
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", cell.source):
            assert target.startswith(("http://", "https://", "data:")), (
                f"cell {i} links image {target!r} by a relative path, which Colab cannot show")
        for source, data in re.findall(r"editable source is (book/images/\S+) -->\s*<img[^>]*base64,([A-Za-z0-9+/=]+)",
                                       cell.source):
            assert base64.b64decode(data) == (ROOT / source).read_bytes(), (
                f"cell {i}: the embedded image differs from {source}; re-embed it")


FIGURE_CALL = re.compile(r"plt\.(show|subplots|figure)\(|\.plot\(ax=")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_figure_cell_has_alt_text(path):
    """The website shows output figures with the cell's `mystnb.image.alt` as alt text."""
    for i, cell in enumerate(_nb(path).cells):
        if cell.cell_type == "code" and FIGURE_CALL.search(cell.source):
            alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
            assert len(alt.split()) >= 6, (f"cell {i} draws a figure but has no alt text saying what it shows: "
                                           "set metadata mystnb.image.alt")


@pytest.mark.parametrize("path", EPISODES, ids=[p.name for p in EPISODES])
def test_episode_links_to_its_exercises_and_solutions(path):
    text = "\n".join(c.source for c in _nb(path).cells if c.cell_type == "markdown")
    for kind in ("exercises", "solutions"):
        assert f"](../{kind}/{path.name})" in text, f"{path.name} does not link to ../{kind}/{path.name}"


EPISODE_REF = re.compile(r"\b[Ee]pisodes? (\d+)(?:\s*(?:[–-]|and|or|to)\s*(\d+))?")


def _texts():
    """(name, text) of every notebook's markdown and every book page, README and CONTRIBUTING."""
    for path in NOTEBOOKS:
        yield path.relative_to(ROOT).as_posix(), "\n".join(
            c.source for c in _nb(path).cells if c.cell_type == "markdown")
    for path in [*sorted((ROOT / "book").glob("*.md")), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]:
        yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_cross_episode_references_resolve():
    """"see episode 7" must point at an episode that exists."""
    existing = {int(p.name[:2]) for p in EPISODES}
    dangling = []
    for name, text in _texts():
        for match in EPISODE_REF.finditer(text):
            numbers = {int(n) for n in match.groups() if n}
            if numbers - existing:
                dangling.append(f"{name}: {match.group(0)!r}")
    assert not dangling, "references to episodes that do not exist:\n  " + "\n  ".join(dangling)
