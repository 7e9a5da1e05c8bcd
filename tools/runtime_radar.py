"""Keep the course's copies of the platforms' runtimes in step with the platforms.

Google Colab publishes what its runtimes have preinstalled in
https://github.com/googlecolab/backend-info (``pip-freeze.gpu.txt``, and the
Python version in ``os-info-gpu.txt``). Kaggle's GPU image is Colab's image of
one date plus Kaggle's own list (https://github.com/Kaggle/docker-python,
``Dockerfile.tmpl`` and ``kaggle_requirements.txt``). Each runtime the course
tests has a folder ``colab/<runtime>/`` with the files it was made from and the
``constraints.txt`` that ``make test-colab RUNTIME=<runtime>`` installs with.

    python tools/runtime_radar.py current                 # regenerate from the stored freeze; report drift
    python tools/runtime_radar.py current --backend-info ../backend-info            # its newest commit
    python tools/runtime_radar.py kaggle --docker-python ../docker-python --backend-info ../backend-info
    python tools/runtime_radar.py current --freeze pip-freeze.gpu.txt --commit a724079 \\
        --date 2026-08-19 --python 3.13.15                # a downloaded file instead of a checkout

It prints what changed against the committed pins (the packages the course
installs first), which episodes import a changed package (their notebooks and
the gpucourse modules those import), and whether Colab's other selectable
runtimes still lie between the tested ones. ``--write`` stores the new sources
in ``colab/<runtime>/`` and rewrites its ``constraints.txt``.

Changed from a freeze: local build labels (``+cu128``) dropped, since PyPI
serves the same release under its plain version; CUDA library packages
(``nvidia-*``, ``cuda-*``) left out, since Colab's torch is a CUDA 12.8 build and
PyPI's torch another CUDA's, each needing its own; packages installed from URLs
left out.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLAB = ROOT / "colab"

PIN_RE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^+\s]+)(?:\+(?P<label>\S+))?")
URL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\s+@\s+\S+")
CUDA_LIBRARY_RE = re.compile(r"(nvidia|cuda)[-_.]", re.I)
WHEEL_TAG_RE = re.compile(r"-cp(\d)(\d+)-cp\d+-")
CONSTRAINT_RE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<spec>(?:[=<>!~]=?[^,\s]+,?)+)")
FROM_RE = re.compile(r"^FROM\s+\S*colab-images/public/runtime:\S*?_(\d{4})(\d\d)(\d\d)-\S+", re.M)
FORCE_RE = re.compile(r"^RUN\s+uv pip install\b[^\n]*--force-reinstall[^\n]*$", re.M)
COMMIT_RE = re.compile(r"[0-9a-f]{7,40}")
DATE_RE = re.compile(r"20\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])")
PYTHON_RE = re.compile(r"3\.\d+\.\d+")

FREEZE = "pip-freeze.gpu.txt"
OS_INFO = "os-info-gpu.txt"
KAGGLE_FILES = ("kaggle_requirements.txt", "Dockerfile.tmpl")

# Import names whose distribution is called something else (others: the name, normalised).
DISTRIBUTION_OF = {"sklearn": "scikit-learn", "yaml": "pyyaml", "PIL": "pillow", "mpl_toolkits": "matplotlib",
                   "google.protobuf": "protobuf", "IPython": "ipython"}


class FreezeError(ValueError):
    """The input is not a usable pip-freeze.gpu.txt (or Kaggle file)."""


def normalise(name: str) -> str:
    """PEP 503's form of a distribution name: ``Jupyter_Client`` -> ``jupyter-client``."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ------------------------------------------------------------------ runtimes --

@dataclass(frozen=True)
class Runtime:
    name: str                 # its folder, colab/<name>/
    platform: str             # "colab" or "kaggle"
    title: str                # what a learner gets, for the header


RUNTIMES = {
    "current": Runtime("current", "colab", "Google Colab's preinstalled Python packages: GPU runtime, "
                                           "the one Colab gives by default."),
    "kaggle": Runtime("kaggle", "kaggle", "Kaggle's preinstalled Python packages: the GPU image "
                                          "(\"GPU T4 x2\", Kaggle's default GPU)."),
}


@dataclass
class Source:
    """Where one runtime's pins come from."""

    commit: str               # backend-info commit of the freeze
    date: str                 # its date, YYYY-MM-DD
    python: str               # os-info-gpu.txt's Python version
    freeze: str               # the text of pip-freeze.gpu.txt
    kaggle_commit: str = ""   # Kaggle/docker-python commit (kaggle only)
    kaggle_date: str = ""
    kaggle_requirements: str = ""
    dockerfile: str = ""


# -------------------------------------------------------------- freeze -> pins --

def freeze_pins(freeze_text: str, python: str) -> tuple[dict[str, str], dict[str, int]]:
    """``{name: version}`` kept from a Colab freeze, and how many lines each rule left out."""
    pins, left_out = {}, {"cuda": 0, "url": 0}
    torch_label = None
    for number, raw in enumerate(freeze_text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if URL_RE.fullmatch(line):
            tag = WHEEL_TAG_RE.search(line)
            if tag and f"{tag[1]}.{tag[2]}" != ".".join(python.split(".")[:2]):
                raise FreezeError(f"line {number} is a wheel for Python {tag[1]}.{tag[2]}, not {python}: "
                                  f"{line[:100]!r}; is --python the one of os-info-gpu.txt at the same commit?")
            if line.lower().startswith("torch @"):
                torch_label = "url"
            left_out["url"] += 1
            continue
        pin = PIN_RE.fullmatch(line)
        if not pin:
            raise FreezeError(f"line {number} is not a `name==version` line of pip freeze: {line[:100]!r}; "
                              "download the raw pip-freeze.gpu.txt, not the GitHub page")
        if CUDA_LIBRARY_RE.match(pin["name"]):
            left_out["cuda"] += 1
            continue
        if pin["name"].lower() == "torch":
            torch_label = pin["label"] or ""
        pins[pin["name"]] = pin["version"]
    if not pins:
        raise FreezeError("no `name==version` line found: is this a pip freeze?")
    if torch_label is None:
        raise FreezeError("the freeze has no torch: use pip-freeze.gpu.txt (Colab's GPU runtime)")
    if not torch_label.startswith("cu"):
        raise FreezeError(f"torch is {'a URL install' if torch_label == 'url' else 'not a CUDA build'} in this "
                          "freeze: it is the CPU or TPU runtime's; use pip-freeze.gpu.txt")
    return pins, left_out


def python_of(os_info: str) -> str:
    """The Python version an ``os-info-gpu.txt`` names."""
    found = re.search(r"^Python (3\.\d+\.\d+)\s*$", os_info, re.M)
    if not found:
        raise FreezeError(f"{OS_INFO} names no `Python 3.x.y` line")
    return found[1]


# ------------------------------------------------------------ Kaggle's layer --

@dataclass
class KaggleLayer:
    """What Kaggle's Dockerfile and list do to the Colab image's packages."""

    base_date: str                                        # the Colab image's date, YYYY-MM-DD
    pins: dict[str, str] = field(default_factory=dict)    # name -> exact version or a specifier
    notes: list[str] = field(default_factory=list)        # one line per change, for the header


def _requirements(text: str) -> list[tuple[str, str]]:
    """``(name, specifier)`` of each plain requirement line (no URLs, no comments)."""
    from packaging.requirements import InvalidRequirement, Requirement

    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or "://" in line or line.startswith("-"):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement as error:
            raise FreezeError(f"kaggle_requirements.txt: {line!r} is not a requirement ({error})") from None
        # the specifier as Kaggle wrote it (packaging sorts its parts)
        spec = re.sub(r"\s+", "", re.sub(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?", "", line).split(";", 1)[0])
        found.append((requirement.name, spec))
    return found


def kaggle_layer(colab: dict[str, str], kaggle_requirements: str, dockerfile: str) -> KaggleLayer:
    """Kaggle's changes to the Colab pins ``colab``.

    ``uv pip install -r`` keeps an installed version that meets a requirement, so a pin
    (``jiter==0.10.0``) or a range Colab's version falls outside changes the version, and a
    ``--force-reinstall`` line (``"protobuf==5.29.5" "setuptools>=70.0,<82"``) replaces it
    whatever Colab has. Where the version Kaggle's build chose is not written anywhere (a
    range), the range itself is the constraint.
    """
    from packaging.specifiers import SpecifierSet

    base = FROM_RE.search(dockerfile)
    if not base:
        raise FreezeError("Dockerfile.tmpl has no `FROM ...colab-images/public/runtime:..._YYYYMMDD-...` line")
    layer = KaggleLayer(f"{base[1]}-{base[2]}-{base[3]}")
    by_key = {normalise(name): name for name in colab}
    forced = []
    for line in FORCE_RE.findall(dockerfile):
        args = [a.strip("\"'") for a in line.split()[4:] if not a.startswith("-")]
        if "--no-deps" in line:
            continue                                   # a reinstall of the same package (torchtune)
        forced += [(n, s) for n, s in _requirements("\n".join(args)) if s]
    for (name, spec), where in ([(r, "kaggle_requirements.txt") for r in _requirements(kaggle_requirements) if r[1]]
                                + [(r, "Dockerfile.tmpl, reinstalled") for r in forced]):
        key = normalise(name)
        colab_name = by_key.get(key, name)
        have = colab.get(colab_name)
        specifier = SpecifierSet(spec)
        exact = spec[2:] if spec.startswith("==") and "," not in spec and "*" not in spec else None
        if exact is not None:
            if have != exact:
                layer.pins[colab_name] = exact
                layer.notes.append(f"{colab_name} {have or '(not in Colab)'} -> {exact} ({where})")
        elif where.startswith("Dockerfile") or (have is not None and not specifier.contains(have, prereleases=True)):
            layer.pins[colab_name] = spec
            why = "reinstalled whatever Colab has" if where.startswith("Dockerfile") else f"excludes Colab's {have}"
            layer.notes.append(f"{colab_name} {have or '(not in Colab)'} -> {spec} ({where.split(',')[0]}: "
                               f"{why}; the version the build chose is not recorded)")
    return layer


# ------------------------------------------------------------- constraints --

CHANGES = """\
# Changed from the freeze:
# - local build labels (+cu128) dropped: PyPI serves the same release under its
#   plain version;
# - CUDA library packages (nvidia-*, cuda-*) left out: Colab's torch is a CUDA 12.8
#   build, PyPI's torch another CUDA's, and each needs its own;
# - packages installed from URLs left out.
"""


def header(runtime: Runtime, source: Source, layer: KaggleLayer | None = None) -> str:
    make = "make test-colab" + ("" if runtime.name == "current" else f" RUNTIME={runtime.name}")
    lines = [f"# {runtime.title}",
             f"# Python {source.python}; googlecolab/backend-info {FREEZE} at commit {source.commit} ({source.date})."]
    if layer is not None:
        lines += [f"# Kaggle/docker-python at commit {source.kaggle_commit} ({source.kaggle_date}): Dockerfile.tmpl "
                  f"builds FROM Colab's",
                  f"# image of {layer.base_date} (the freeze above), keeps its torch, TensorFlow, Keras and JAX, "
                  "and lays",
                  "# kaggle_requirements.txt and its reinstalls over it. Kaggle's changes to Colab's versions:"]
        lines += [f"# - {note}" for note in layer.notes] or ["# - none"]
    lines += [f"# Made by tools/runtime_radar.py from the files beside this one; used as pip constraints by",
              f"# `{make}`: whatever the course's environment installs gets this runtime's version."]
    return "\n".join(lines) + "\n" + CHANGES


def render(runtime: Runtime, source: Source) -> tuple[str, dict[str, str], dict[str, int]]:
    """The text of ``colab/<runtime>/constraints.txt``, its pins and what was left out."""
    pins, left_out = freeze_pins(source.freeze, source.python)
    layer = None
    if runtime.platform == "kaggle":
        layer = kaggle_layer(pins, source.kaggle_requirements, source.dockerfile)
        pins = {**pins, **layer.pins}
    body = "".join(f"{name}{v if v[0] in '<>=!~' else '==' + v}\n" for name, v in pins.items())
    return header(runtime, source, layer) + body, pins, left_out


HEADER_RE = re.compile(r"^# Python (?P<python>3\.\d+\.\d+); googlecolab/backend-info \S+ at commit "
                       r"(?P<commit>[0-9a-f]+) \((?P<date>[\d-]+)\)\.$", re.M)
KAGGLE_HEADER_RE = re.compile(r"^# Kaggle/docker-python at commit (?P<commit>[0-9a-f]+) \((?P<date>[\d-]+)\)", re.M)


def read_constraints(path: Path) -> dict[str, str]:
    """``{name: version or specifier}`` of a constraints file."""
    return read_constraints_text(path.read_text())


def read_constraints_text(text: str) -> dict[str, str]:
    """``{name: version or specifier}`` of the text of a constraints file."""
    pins = {}
    for line in text.splitlines():
        found = CONSTRAINT_RE.fullmatch(line.strip())
        if found:
            spec = found["spec"]
            pins[found["name"]] = spec[2:] if spec.startswith("==") and "," not in spec else spec
    return pins


def stored_source(runtime: Runtime) -> Source:
    """The sources kept in ``colab/<runtime>/``, with the commits and dates its header names."""
    folder = COLAB / runtime.name
    text = (folder / "constraints.txt").read_text()
    found = HEADER_RE.search(text)
    if not found:
        raise FreezeError(f"{folder / 'constraints.txt'} has no header naming its backend-info commit")
    source = Source(found["commit"], found["date"], python_of((folder / OS_INFO).read_text()),
                    (folder / FREEZE).read_text())
    if runtime.platform == "kaggle":
        kaggle = KAGGLE_HEADER_RE.search(text)
        if not kaggle:
            raise FreezeError(f"{folder / 'constraints.txt'} has no header naming its docker-python commit")
        source.kaggle_commit, source.kaggle_date = kaggle["commit"], kaggle["date"]
        source.kaggle_requirements, source.dockerfile = ((folder / f).read_text() for f in KAGGLE_FILES)
    return source


def stored_python_and_pins(name: str) -> tuple[str, dict[str, str]]:
    """The Python version and pins of a tested runtime, as committed."""
    text = (COLAB / name / "constraints.txt").read_text()
    found = HEADER_RE.search(text)
    return (found["python"] if found else ""), read_constraints(COLAB / name / "constraints.txt")


def _git(checkout: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
    if done.returncode:
        raise FreezeError(f"git {' '.join(args)} in {checkout}: {done.stderr.strip()}")
    return done.stdout


def checkout_source(runtime: Runtime, backend_info: Path, commit: str | None,
                    docker_python: Path | None, kaggle_commit: str | None) -> Source:
    """The sources read from git checkouts of backend-info (and docker-python for Kaggle).

    Kaggle's freeze is Colab's last commit on or before the date of the image Kaggle's
    Dockerfile builds from, unless ``commit`` names one.
    """
    kaggle = {}
    if runtime.platform == "kaggle":
        if docker_python is None:
            raise FreezeError("the kaggle runtime needs --docker-python (a Kaggle/docker-python checkout) too")
        kc = kaggle_commit or "HEAD"
        kaggle = dict(kaggle_commit=_git(docker_python, "rev-parse", "--short=7", kc).strip(),
                      kaggle_date=_git(docker_python, "log", "-1", "--format=%cs", kc).strip(),
                      kaggle_requirements=_git(docker_python, "show", f"{kc}:{KAGGLE_FILES[0]}"),
                      dockerfile=_git(docker_python, "show", f"{kc}:{KAGGLE_FILES[1]}"))
        if commit is None:
            base = FROM_RE.search(kaggle["dockerfile"])
            if not base:
                raise FreezeError("Dockerfile.tmpl names no Colab image date")
            commit = _git(backend_info, "rev-list", "-1", f"--before={base[1]}-{base[2]}-{base[3]} 23:59:59 -0700",
                          "HEAD").strip()
    commit = commit or "HEAD"
    return Source(commit=_git(backend_info, "rev-parse", "--short=7", commit).strip(),
                  date=_git(backend_info, "log", "-1", "--format=%cs", commit).strip(),
                  python=python_of(_git(backend_info, "show", f"{commit}:{OS_INFO}")),
                  freeze=_git(backend_info, "show", f"{commit}:{FREEZE}"), **kaggle)


def store(runtime: Runtime, source: Source, text: str) -> Path:
    """Write the sources and the constraints into ``colab/<runtime>/``."""
    folder = COLAB / runtime.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FREEZE).write_text(source.freeze)
    (folder / OS_INFO).write_text(f"Python {source.python}\n")
    if runtime.platform == "kaggle":
        (folder / KAGGLE_FILES[0]).write_text(source.kaggle_requirements)
        (folder / KAGGLE_FILES[1]).write_text(source.dockerfile)
    (folder / "constraints.txt").write_text(text)
    return folder / "constraints.txt"


# ------------------------------------------------------------------- drift --

def course_packages(root: Path = ROOT) -> set[str]:
    """Normalised names of what ``colab/requirements.txt`` lists: what the course installs."""
    names = set()
    for line in (root / "colab" / "requirements.txt").read_text().splitlines():
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
        if found:
            names.add(normalise(found[1]))
    return names


def drift(old: dict[str, str], new: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """``{normalised name: (old, new)}`` for every pin added, removed or changed."""
    o = {normalise(k): v for k, v in old.items()}
    n = {normalise(k): v for k, v in new.items()}
    return {k: (o.get(k), n.get(k)) for k in sorted(o.keys() | n.keys()) if o.get(k) != n.get(k)}


def _top_modules(source: str) -> set[str]:
    """Top-level names of every module ``source`` imports (cells with magics and shell lines too)."""
    names = set()
    for line in source.splitlines():
        found = re.match(r"\s*(?:from\s+([A-Za-z_][\w.]*)\s+import\b|import\s+([A-Za-z_][\w., ]*))", line)
        if found:
            names.update(n.strip().split(" ")[0] for n in (found[1] or found[2]).split(",") if n.strip())
    return names


def _gpucourse_imports(root: Path) -> dict[str, set[str]]:
    """For each gpucourse module (dotted name), the modules its code imports (absolute, dotted)."""
    result = {}
    for path in (root / "gpucourse").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if parts[-1] == "__init__" else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                found.add(prefix)
                found.update(f"{prefix}.{alias.name}" for alias in node.names)
        # `python -m gpucourse.x` and other child scripts named in strings
        found.update(re.findall(r"\bgpucourse(?:\.\w+)+", path.read_text()))
        result[module] = found
    return result


def _notebook_source(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def episode_packages(root: Path = ROOT) -> dict[str, set[str]]:
    """``{"NN-slug": normalised distribution names}`` that each episode imports.

    An episode is its lesson and its solutions notebook; what they import directly,
    and what every gpucourse module they import imports, module by module, counts.
    """
    graph = _gpucourse_imports(root)

    def closure(names: set[str]) -> set[str]:
        seen, todo, outside = set(), list(names), set()
        while todo:
            name = todo.pop()
            if name.split(".")[0] != "gpucourse":
                outside.add(name)
                continue
            # `gpucourse.llm.load` is module gpucourse.llm; `from gpucourse import llm` names it too
            while name not in graph and "." in name:
                name = name.rpartition(".")[0]
            if name in graph and name not in seen:
                seen.add(name)
                todo.extend(graph[name])
        return outside

    result = {}
    for lesson in sorted((root / "episodes").glob("[0-9][0-9]-*.ipynb")):
        text = _notebook_source(lesson)
        solution = root / "solutions" / lesson.name
        if solution.exists():
            text += "\n" + _notebook_source(solution)
        direct = _top_modules(text)
        direct |= set(re.findall(r"\bgpucourse(?:\.\w+)+", text))
        direct |= {f"gpucourse.checks.ep{lesson.name[:2]}"}
        names = closure({m for m in direct if m.startswith("gpucourse")} | {m for m in direct})
        packages = set()
        for name in names:
            if name.split(".")[0] == "gpucourse":
                continue
            top = "google.protobuf" if name.startswith("google.protobuf") else name.split(".")[0]
            packages.add(normalise(DISTRIBUTION_OF.get(top, top)))
        result[lesson.stem] = packages
    return result


def affected_episodes(changed: set[str], root: Path = ROOT) -> dict[str, list[str]]:
    """``{normalised package: [episodes that import it]}`` for the changed packages any episode imports."""
    uses = episode_packages(root)
    return {p: [e for e, used in uses.items() if p in used] for p in sorted(changed)
            if any(p in used for used in uses.values())}


def _release(version: str):
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version)
    except InvalidVersion:
        return None


def outside_bracket(other: dict[str, str], tested: list[dict[str, str]], names: set[str]) -> dict[str, str]:
    """Packages of ``names`` whose version in ``other`` is not equal to, or between, the tested runtimes'.

    A runtime no leg tests is covered as far as each package it has is one a tested runtime
    has, or lies between two tested versions. Returns ``{name: why}``.
    """
    result = {}
    for name in sorted(names):
        have = {normalise(k): v for k, v in other.items()}.get(name)
        seen = [v for pins in tested if (v := {normalise(k): x for k, x in pins.items()}.get(name))]
        if have is None or have in seen:
            continue
        versions = [_release(v) for v in seen if v[0].isdigit()]
        mine = _release(have)
        if mine is None or not versions or None in versions:
            result[name] = f"{have}, tested: {', '.join(seen) or 'none'}"
        elif not min(versions) <= mine <= max(versions):
            result[name] = f"{have}, tested {min(versions)} to {max(versions)}"
    return result


def untested_runtimes(root: Path = ROOT) -> dict[str, tuple[str, dict[str, str]]]:
    """Runtimes Colab offers that no leg tests: ``colab/<name>/`` with a freeze and no constraints.

    ``{name: (its source line, its pins with "python" for the Python version)}``.
    """
    found = {}
    for folder in sorted((root / "colab").iterdir()):
        if (folder / FREEZE).is_file() and not (folder / "constraints.txt").exists():
            python = python_of((folder / OS_INFO).read_text())
            pins, _ = freeze_pins((folder / FREEZE).read_text(), python)
            source = (folder / "source.txt").read_text().strip() if (folder / "source.txt").exists() else ""
            found[folder.name] = (source, {**pins, "python": python})
    return found


def coverage(tested: dict[str, tuple[str, dict[str, str]]], root: Path = ROOT) -> str:
    """Whether each untested runtime lies between the tested ones (``{name: (python, pins)}``),
    for Python and every package ``colab/requirements.txt`` lists."""
    lines = []
    pins = [{**p, "python": python} for python, p in tested.values()]
    for name, (source, other) in untested_runtimes(root).items():
        outside = outside_bracket(other, pins, course_packages(root) | {"python"})
        where = f"{name} ({source})" if source else name
        if outside:
            lines.append(f"{where} is NOT covered by the tested runtimes ({', '.join(tested)}): "
                         + "; ".join(f"{p} {why}" for p, why in outside.items())
                         + ". Test it as a runtime of its own, or move a tested one.")
        else:
            lines.append(f"{where}: Python and every package colab/requirements.txt lists are at a tested "
                         f"version or between two ({', '.join(tested)}).")
    return "\n".join(lines)


def report(runtime: Runtime, old: dict[str, str], new: dict[str, str], root: Path = ROOT) -> str:
    """What changed against the committed pins, and which episodes import a changed package."""
    changes = drift(old, new)
    if not changes:
        return f"{runtime.name}: no pin changed ({len(new)} pins)."
    course = course_packages(root)

    def line(name):
        before, after = changes[name]
        return f"  {name}: {before or '(none)'} -> {after or '(removed)'}"

    touched = [line(n) for n in changes if n in course]
    others = [n for n in changes if n not in course]
    text = [f"{runtime.name}: {len(changes)} pins changed, {len(touched)} of them packages colab/requirements.txt "
            "lists:"] + (touched or ["  none"])
    if others:
        text.append(f"  and {len(others)} others: " + ", ".join(others[:30]) + (" ..." if len(others) > 30 else ""))
    uses = affected_episodes(set(changes), root)
    text.append("Episodes that import a changed package (run them first):")
    text += [f"  {p} ({changes[p][0] or 'none'} -> {changes[p][1] or 'removed'}): {', '.join(e)}"
             for p, e in uses.items()] or ["  none"]
    return "\n".join(text)


# --------------------------------------------------------------------- CLI --

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runtime", choices=sorted(RUNTIMES))
    parser.add_argument("--freeze", type=Path, help="a downloaded pip-freeze.gpu.txt (with --commit, --date, --python)")
    parser.add_argument("--backend-info", type=Path, help="a git checkout of googlecolab/backend-info")
    parser.add_argument("--commit", help="backend-info commit (default: newest; for kaggle: the image's date)")
    parser.add_argument("--date", help="with --freeze: the commit's date, YYYY-MM-DD")
    parser.add_argument("--python", help="with --freeze: os-info-gpu.txt's Python version, e.g. 3.13.15")
    parser.add_argument("--docker-python", type=Path, help="kaggle: a git checkout of Kaggle/docker-python")
    parser.add_argument("--kaggle-commit", help="kaggle: docker-python commit (default: newest)")
    parser.add_argument("--kaggle-files", type=Path,
                        help="kaggle, with --freeze: a folder with kaggle_requirements.txt and Dockerfile.tmpl")
    parser.add_argument("--kaggle-date", help="kaggle, with --freeze: the docker-python commit's date")
    parser.add_argument("--write", action="store_true", help="store the sources and rewrite colab/RUNTIME/")
    parser.add_argument("--output", help="write the constraints here instead (- for stdout); stores nothing else")
    args = parser.parse_args(argv)
    runtime = RUNTIMES[args.runtime]
    for option, pattern, example in (("commit", COMMIT_RE, "a git commit (7 to 40 hex digits)"),
                                     ("kaggle_commit", COMMIT_RE, "a git commit (7 to 40 hex digits)"),
                                     ("date", DATE_RE, "YYYY-MM-DD"), ("kaggle_date", DATE_RE, "YYYY-MM-DD"),
                                     ("python", PYTHON_RE, "a version like 3.13.15")):
        value = getattr(args, option)
        if value is not None and not pattern.fullmatch(value) and value != "HEAD":
            parser.error(f"--{option.replace('_', '-')} {value!r} is not {example}")
    try:
        if args.freeze:
            missing = [o for o in ("commit", "date", "python") if getattr(args, o) is None]
            if runtime.platform == "kaggle":
                missing += [o for o in ("kaggle_files", "kaggle_commit", "kaggle_date") if getattr(args, o) is None]
            if missing:
                parser.error("--freeze needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
            if not args.freeze.is_file():
                parser.error(f"{args.freeze} does not exist")
            source = Source(args.commit, args.date, args.python, args.freeze.read_text())
            if runtime.platform == "kaggle":
                source.kaggle_commit, source.kaggle_date = args.kaggle_commit, args.kaggle_date
                source.kaggle_requirements, source.dockerfile = (
                    (args.kaggle_files / f).read_text() for f in KAGGLE_FILES)
        elif args.backend_info:
            source = checkout_source(runtime, args.backend_info, args.commit, args.docker_python, args.kaggle_commit)
        else:
            source = stored_source(runtime)
        text, pins, left_out = render(runtime, source)
    except (FreezeError, OSError) as error:
        print(f"{runtime.name}: {error}", file=sys.stderr)
        return 1
    committed = COLAB / runtime.name / "constraints.txt"
    old = read_constraints(committed) if committed.exists() else {}
    print(f"{runtime.name}: backend-info {source.commit} ({source.date}), Python {source.python}"
          + (f"; docker-python {source.kaggle_commit} ({source.kaggle_date})" if source.kaggle_commit else "")
          + f": {len(pins)} pins; left out {left_out['cuda']} CUDA library packages and {left_out['url']} "
          "URL installs.", file=sys.stderr)
    print(report(runtime, old, pins))
    tested = {name: stored_python_and_pins(name) for name in RUNTIMES if name != runtime.name
              and (COLAB / name / "constraints.txt").exists()}
    tested[runtime.name] = (source.python, pins)
    print(coverage(tested))
    if args.output == "-":
        sys.stdout.write(text)
    elif args.output:
        Path(args.output).write_text(text)
    elif args.write:
        print(f"wrote {store(runtime, source, text).relative_to(ROOT)} and its sources; now run "
              f"`make test-colab RUNTIME={runtime.name}`.", file=sys.stderr)
    elif committed.exists() and committed.read_text() != text:
        print(f"{committed.relative_to(ROOT)} differs from what these sources give: --write to rewrite it.",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
