"""Write a real ``index.html`` at the top of the site.

The book's root page is ``book/intro``, so Sphinx writes no ``index.html``;
sphinx-external-toc then writes one that is a bare redirect, with no title, no
language and no link, which a screen reader or a browser tab shows as blank.
This writes a small page with all three before sphinx-external-toc looks
(it leaves an existing ``index.html`` alone).
"""

from __future__ import annotations

import html
from pathlib import Path

PAGE = """<!DOCTYPE html>
<html lang="{lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<meta http-equiv="refresh" content="0; url={target}">
<link rel="canonical" href="{target}">
{favicon}</head>
<body>
<main><p><a href="{target}">{title}: go to the course</a></p></main>
</body>
</html>
"""


def _write_index(app, exception):
    if exception is not None or app.builder.format != "html" or app.config.root_doc == "index":
        return
    favicon = app.config.html_favicon
    link = f'<link rel="icon" href="_static/{Path(favicon).name}">\n' if favicon else ""
    Path(app.outdir, "index.html").write_text(PAGE.format(
        lang=app.config.language or "en",
        title=html.escape(app.config.html_title or app.config.project or "Home"),
        target=f"{app.config.root_doc}.html",
        favicon=link,
    ), encoding="utf-8")


def setup(app):
    # Before sphinx-external-toc's own build-finished handler (default priority 500).
    app.connect("build-finished", _write_index, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
