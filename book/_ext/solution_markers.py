"""Hide the exercise generator's markers on the solution pages.

Solution notebooks mark answers with ``### BEGIN SOLUTION``, ``### STUB: ...``
and ``### END SOLUTION`` lines (in markdown cells ``<!-- BEGIN SOLUTION -->``,
``<!-- STUB: ... -->`` and ``<!-- END SOLUTION -->``), from which
``tools/make_exercises.py`` builds the exercise notebooks. They mean nothing to
a reader of the website, so ``solutions/`` pages are shown without them.
"""

from __future__ import annotations

from docutils import nodes

MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### STUB:")
MARKDOWN_MARKERS = ("<!-- BEGIN SOLUTION", "<!-- END SOLUTION", "<!-- STUB:")


def strip_markers(text: str) -> str:
    lines = [line for line in text.split("\n") if not line.strip().startswith(MARKERS)]
    return "\n".join(lines)


def strip_markdown_markers(text: str) -> str:
    """Drop the generator's HTML comments (a STUB comment may span lines) from raw HTML."""
    import re

    return re.sub(r"<!--\s*(BEGIN SOLUTION|END SOLUTION|STUB:).*?-->\n?", "", text, flags=re.S)


def _strip(app, doctree):
    if not app.env.docname.startswith("solutions/"):
        return
    for raw in list(doctree.findall(nodes.raw)):
        text = raw.astext()
        if any(marker in text for marker in MARKDOWN_MARKERS):
            cleaned = strip_markdown_markers(text)
            if cleaned.strip():
                raw.children = [nodes.Text(cleaned)]
                raw.rawsource = cleaned
            else:
                raw.parent.remove(raw)
    for block in doctree.findall(nodes.literal_block):
        parent = block.parent
        if parent is None or "cell_input" not in parent.get("classes", []):
            continue
        text = block.astext()
        cleaned = strip_markers(text)
        if cleaned != text:
            block.children = [nodes.Text(cleaned)]
            block.rawsource = cleaned


def setup(app):
    app.connect("doctree-read", _strip)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
