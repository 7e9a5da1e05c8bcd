"""Words instead of emoji in the execution-status table.

myst-nb's ``nb-exec-table`` marks each notebook ✅ or ❌. Without an emoji font
(common on Linux, and in this project's own test browser) both show as the same
empty box, so the table no longer says whether anything failed.
"""

from __future__ import annotations

from docutils import nodes

WORDS = {"✅": "succeeded", "❌": "FAILED"}


def _replace(app, doctree, docname):
    for entry in doctree.findall(nodes.entry):
        for text in list(entry.findall(nodes.Text)):
            if text.astext().strip() in WORDS:
                text.parent.replace(text, nodes.Text(WORDS[text.astext().strip()]))


def setup(app):
    app.connect("doctree-resolved", _replace)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
