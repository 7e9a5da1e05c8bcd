"""Shared logic for the maintenance scripts in ``tools/``.

The repository URL and branch are set once, in ``_config.yml``
(``repository.url`` and ``repository.branch``). Notebooks carry copies that
must follow it: the "Open in Colab" and "Open in Kaggle" badges of the first
cell and the setup cell's pip install of the helper. ``sync_repo_url.py``
rewrites them; the tests check them.

Exercise notebooks are generated from ``solutions/`` by removing what lies
between solution markers:

* code cells: lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
  are replaced by the block's ``### STUB: ...`` lines (without the prefix),
  or by ``____  # your code here`` when the block declares none;
* markdown cells: text between ``<!-- BEGIN SOLUTION -->`` and
  ``<!-- END SOLUTION -->`` is replaced by the block's ``<!-- STUB: ... -->``
  text, or by *Write your answer here.*;
* the word "Solutions" in the first heading becomes "Exercises".
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = ("episodes", "exercises", "solutions")

# The Colab badge, optionally followed by the Kaggle one: both are rewritten together.
BADGE_RE = re.compile(
    r"\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\]"
    r"\(https://colab\.research\.google\.com/github/(?P<repo>[^/]+/[^/]+)/blob/(?P<branch>[^/]+)/(?P<path>[^)]+)\)"
    r"(?:[ \t]*\[!\[Open in Kaggle\]\([^)]*\)\]\(https://www\.kaggle\.com/kernels/welcome\?src=[^)]+\))?"
)

CODE_BEGIN, CODE_END, CODE_STUB = "### BEGIN SOLUTION", "### END SOLUTION", "### STUB:"
MD_BEGIN, MD_END = "<!-- BEGIN SOLUTION -->", "<!-- END SOLUTION -->"
MD_STUB_RE = re.compile(r"<!--\s*STUB:\s*(.*?)\s*-->", re.S)


def repository(config_path: Path = ROOT / "_config.yml") -> tuple[str, str]:
    """``("owner/name", "branch")`` from ``_config.yml``."""
    config = yaml.safe_load(config_path.read_text())
    url = config["repository"]["url"].rstrip("/")
    match = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)(?:\.git)?", url)
    if not match:
        raise ValueError(f"repository.url in {config_path} must look like https://github.com/OWNER/NAME, got {url!r}")
    return match.group(1), config["repository"].get("branch", "main")


def toc_files(toc_path: Path = ROOT / "_toc.yml") -> list[str]:
    """Every file named in ``_toc.yml`` (root first), without extension."""
    toc = yaml.safe_load(toc_path.read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return files


def github_url(repo: str, branch: str, path: str) -> str:
    """The notebook's page on GitHub, which Colab and Kaggle open."""
    return f"https://github.com/{repo}/blob/{branch}/{path}"


def colab_url(repo: str, branch: str, path: str) -> str:
    return f"https://colab.research.google.com/github/{repo}/blob/{branch}/{path}"


def kaggle_url(repo: str, branch: str, path: str) -> str:
    return f"https://www.kaggle.com/kernels/welcome?src={github_url(repo, branch, path)}"


def badge(repo: str, branch: str, path: str) -> str:
    """Markdown for the "Open in Colab" and "Open in Kaggle" badges of the notebook at ``path``."""
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(repo, branch, path)}) "
        f"[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]({kaggle_url(repo, branch, path)})"
    )


def pip_spec(repo: str, branch: str) -> str:
    return f"git+https://github.com/{repo}@{branch}"


SETUP_TAG = "colab-setup"


def setup_cell(repo: str, branch: str) -> str:
    """The setup cell (tagged ``colab-setup``) of every notebook: on Colab or Kaggle, install the helper.

    Plain Python, not ``%pip``, so that a failed install is noticed: on Kaggle it
    most often means the notebook's Internet switch is off, and the cell says so.
    """
    return f"""\
# On Colab or Kaggle: install the course helper (the frameworks are there already).
import os, subprocess, sys
if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    spec = "gpucourse @ {pip_spec(repo, branch)}"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", spec],
                         capture_output=True, text=True)
    if pip.returncode and "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
        sys.exit("pip could not install the course helper. On Kaggle, turn Internet on "
                 "(Settings → Internet, or the right panel's Session options; it needs "
                 "a phone-verified account), then run this cell again.")
    if pip.returncode:
        sys.exit(pip.stderr)"""


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in NOTEBOOK_DIRS for p in (root / d).glob("*.ipynb"))


def sync_notebook(nb, rel_path: str, repo: str, branch: str) -> bool:
    """Point the badges of ``nb`` at ``repo``/``branch`` and write its setup cell. True if changed."""
    changed = False
    for cell in nb.cells:
        src = cell.source
        if cell.cell_type == "markdown":
            src = BADGE_RE.sub(lambda m: badge(repo, branch, rel_path), src)
        elif cell.cell_type == "code" and SETUP_TAG in cell.metadata.get("tags", []):
            src = setup_cell(repo, branch)
        if src != cell.source:
            cell.source = src
            changed = True
    return changed


def _strip_code(source: str, where: str) -> str:
    out, block, stubs = [], None, []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == CODE_BEGIN:
            if block is not None:
                raise ValueError(f"{where}: nested {CODE_BEGIN}")
            block, stubs = line[: len(line) - len(line.lstrip())], []
        elif stripped == CODE_END:
            if block is None:
                raise ValueError(f"{where}: {CODE_END} without {CODE_BEGIN}")
            out.extend(stubs or [block + "____  # your code here"])
            block = None
        elif block is not None:
            if stripped.startswith(CODE_STUB):
                indent = line[: len(line) - len(line.lstrip())]
                stubs.append(indent + stripped[len(CODE_STUB):].lstrip())
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"{where}: {CODE_BEGIN} without {CODE_END}")
    return "\n".join(out)


def _strip_markdown(source: str, where: str) -> str:
    pattern = re.compile(re.escape(MD_BEGIN) + r"(.*?)" + re.escape(MD_END), re.S)
    if source.count(MD_BEGIN) != source.count(MD_END):
        raise ValueError(f"{where}: unbalanced solution markers")

    def repl(match):
        stubs = MD_STUB_RE.findall(match.group(1))
        return "\n".join(stubs) if stubs else "*Write your answer here.*"

    return pattern.sub(repl, source)


def has_solution_markers(nb) -> bool:
    return any(CODE_BEGIN in c.source or MD_BEGIN in c.source for c in nb.cells)


def make_exercise(solution_nb, exercise_rel_path: str, repo: str, branch: str):
    """The exercise notebook generated from a solution notebook."""
    nb = copy.deepcopy(solution_nb)
    for i, cell in enumerate(nb.cells):
        where = f"{exercise_rel_path} cell {i}"
        if cell.cell_type == "code":
            cell.source = _strip_code(cell.source, where)
            cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            cell.source = _strip_markdown(cell.source, where)
            if i == 0:
                cell.source = re.sub(r"^(#.*?)\bSolutions\b", r"\1Exercises", cell.source, count=1, flags=re.M)
    sync_notebook(nb, exercise_rel_path, repo, branch)
    return nb


def read(path: Path):
    return nbformat.read(path, as_version=4)


def dumps(nb) -> str:
    return nbformat.writes(nb) + "\n"
