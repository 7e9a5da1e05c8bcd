"""Serve MathJax with the site, so that formulas render without internet.

Sphinx loads MathJax from a CDN by default: a site built or read offline then
shows raw LaTeX such as ``\\[\\text{bytes per token} ...\\]``. Here MathJax 3
comes from npm at the version pinned in ``package.json`` and
``package-lock.json`` (repository root). ``npm ci`` installs it once into
``_build/mathjax/`` (kept while the version matches the lock file), and the
CommonHTML bundle with what it loads on demand (fonts, TeX extensions, the
menu and its accessibility components) is copied into the built site's
``_static/mathjax/``, where ``mathjax_path`` points.

Without npm and without an installed copy the build goes on with the CDN and
says so: the formulas then need internet to show (``tests/test_book.py`` reads
the site offline and fails in that case).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Where in the built site MathJax goes (under ``_static``), and the page's script.
SITE_FOLDER = "mathjax"
BUNDLE = "tex-chtml.js"
#: What the bundle fetches itself, relative to it: fonts, \require'd or autoloaded TeX
#: packages, and the menu's accessibility options (explorer, speech rules).
ON_DEMAND = ("output/chtml/fonts/woff-v2", "input/tex/extensions", "a11y", "sre", "ui")
NPM_TIMEOUT_S = 300


def pinned_version(root: Path) -> str:
    """MathJax's version in ``package-lock.json``."""
    lock = json.loads((root / "package-lock.json").read_text())
    return lock["packages"]["node_modules/mathjax"]["version"]


def installed_es5(root: Path) -> Path | None:
    """MathJax's ``es5`` folder under ``_build/mathjax`` if it holds the pinned version."""
    package = root / "_build" / "mathjax" / "node_modules" / "mathjax"
    try:
        version = json.loads((package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return package / "es5" if version == pinned_version(root) else None


def npm_install(root: Path) -> Path | None:
    """Install the pinned MathJax with ``npm ci`` into ``_build/mathjax``; None if npm cannot."""
    npm = shutil.which("npm")
    if npm is None:
        logger.info("[mathjax] npm is not installed (it comes with Node.js): the site's formulas "
                    "will load MathJax from its CDN and need internet to show.")
        return None
    target = root / "_build" / "mathjax"
    target.parent.mkdir(parents=True, exist_ok=True)
    # Installed beside the target and renamed into place: a build that stops half-way, or
    # another build at the same time, never sees a half-installed copy.
    staging = Path(tempfile.mkdtemp(prefix="mathjax-", dir=target.parent))
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(root / name, staging / name)
    logger.info(f"[mathjax] npm ci: MathJax {pinned_version(root)} into {target}")
    try:
        done = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                              cwd=staging, capture_output=True, text=True, timeout=NPM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        done = None
    if done is None or done.returncode != 0:
        reason = f"it took over {NPM_TIMEOUT_S} s" if done is None else (done.stderr or done.stdout)[-600:]
        shutil.rmtree(staging, ignore_errors=True)
        logger.info(f"[mathjax] npm ci failed ({reason.strip()}): the site's formulas will load "
                    "MathJax from its CDN and need internet to show.")
        return None
    old = target.with_name(f"mathjax-old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return installed_es5(root)


def use_local_mathjax(app, config):
    """Point ``mathjax_path`` at the site's own copy when there is one to copy."""
    root = Path(app.srcdir)
    es5 = installed_es5(root) or npm_install(root)
    app.local_mathjax_es5 = es5
    if es5 is not None:
        config.mathjax_path = f"{SITE_FOLDER}/{BUNDLE}"


def copy_mathjax(app, exception):
    """Copy the bundle and what it loads on demand into ``_static/mathjax``."""
    es5 = getattr(app, "local_mathjax_es5", None)
    if exception is not None or es5 is None or app.builder.format != "html":
        return
    dest = Path(app.outdir) / "_static" / SITE_FOLDER
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(es5 / BUNDLE, dest / BUNDLE)
    for part in ON_DEMAND:
        shutil.copytree(es5 / part, dest / part, dirs_exist_ok=True)


def setup(app):
    app.connect("config-inited", use_local_mathjax)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
