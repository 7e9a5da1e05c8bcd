"""Inline the theme's relative CSS ``@import``, so that no tool fetches it from the wrong place.

pydata-sphinx-theme 0.17's ``_static/styles/theme.css`` starts with
``@import "../basic.css";``. A browser resolves that against the stylesheet and
loads ``_static/basic.css``; axe-core 4.12.1 resolves it against the page while
it preloads the CSS object model for its rules, and asked for ``/basic.css`` on
every page of the site, which does not exist (a 404; and its
css-orientation-lock rule then ran without that sheet). That is axe-core's bug
(dequelabs/axe-core#5268, fix proposed in #5269), but it made "no request to the
site fails" untestable. With the imported sheet written in place of its
``@import`` the cascade is the same (an ``@import`` comes first, as its text now
does) and a reader's browser makes one request fewer; relative ``url(...)``
references in the inlined text are rewritten to point where they pointed before.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

IMPORT = re.compile(r"""@import\s+(?:url\(\s*)?(["']?)([^"')\s;]+)\1\s*\)?\s*;""")
URL = re.compile(r"""url\(\s*(["']?)([^"')]+)\1\s*\)""")


def _is_relative(target: str) -> bool:
    return not (target.startswith(("/", "#", "data:")) or "://" in target)


def rebase_urls(css: str, source_dir: Path, dest_dir: Path) -> str:
    """Rewrite relative ``url(...)`` in ``css`` (written for ``source_dir``) for ``dest_dir``."""
    def rebase(match):
        quote, target = match.groups()
        if not _is_relative(target):
            return match.group(0)
        moved = os.path.relpath(source_dir / target, dest_dir)
        return f"url({quote}{Path(moved).as_posix()}{quote})"
    return URL.sub(rebase, css)


def inline_imports(css_path: Path) -> bool:
    """Replace each plain relative ``@import`` in ``css_path`` by the imported text.

    Returns True if the file changed. An import of another host, or with a
    media query, is left as it is.
    """
    text = css_path.read_text(encoding="utf-8")

    def inline(match):
        target = match.group(2)
        imported = css_path.parent / target
        if not _is_relative(target) or not imported.is_file():
            return match.group(0)
        body = rebase_urls(imported.read_text(encoding="utf-8"), imported.parent, css_path.parent)
        return f"/* {target}, written out here instead of imported */\n{body}\n"

    new = IMPORT.sub(inline, text)
    if new != text:
        css_path.write_text(new, encoding="utf-8")
    return new != text


def inline_site_imports(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for css_path in sorted((Path(app.outdir) / "_static").rglob("*.css")):
        if "@import" in css_path.read_text(encoding="utf-8", errors="replace"):
            inline_imports(css_path)


def setup(app):
    app.connect("build-finished", inline_site_imports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
