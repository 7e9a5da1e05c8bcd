"""Give pandas tables no empty header cells.

A DataFrame shown as HTML has an empty ``<th>`` in its top-left corner, and
one per column in the row that names the index (``batch``, with nothing
beside it). A screen reader announces an empty header for every cell of its
row or column; axe-core's rule ``empty-table-header`` found six in episode 10
alone. An empty cell that heads nothing is a data cell: each empty ``<th>`` of
a ``dataframe`` table in a cell output becomes an empty ``<td>``, which looks
the same. Notebooks in Jupyter and Colab keep pandas' own markup.
"""

from __future__ import annotations

import re

from docutils import nodes

EMPTY_HEADER = re.compile(r"<th>\s*</th>")


def fill_empty_headers(html: str) -> str:
    """``html`` with each empty ``<th>`` of a pandas table made an empty ``<td>``."""
    if 'class="dataframe' not in html:
        return html
    return EMPTY_HEADER.sub("<td></td>", html)


def _fix_tables(app, doctree, docname):
    for raw in list(doctree.findall(nodes.raw)):
        if raw.get("format") != "html":
            continue
        html = raw.astext()
        fixed = fill_empty_headers(html)
        if fixed != html:
            raw.replace_self(nodes.raw(fixed, fixed, format="html", classes=raw.get("classes", [])))


def setup(app):
    # After myst-nb has chosen each output's format, which it does after reading.
    app.connect("doctree-resolved", _fix_tables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
