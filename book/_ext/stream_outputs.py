"""Show a cell's printed output as one block, and progress bars as their final state.

A running notebook receives stdout and stderr in many small pieces: every
refresh of a tqdm progress bar is a new piece starting with a carriage return,
and Keras prints each epoch separately. Rendered one by one, a single training
loop becomes dozens of boxes of half-finished bars. Here consecutive pieces of
the same stream in one cell are joined and then read the way a terminal shows
them: of each line, only what was written after its last carriage return stays
(backspaces erase the character before them); blocks left blank are dropped.
"""

from __future__ import annotations

import re

from docutils import nodes

_BACKSPACE = re.compile(r"[^\n]\x08")
STREAM_CLASSES = ("stream", "stderr")


def terminal_text(text: str) -> str:
    """What a terminal would show after printing ``text``."""
    while True:
        shorter = _BACKSPACE.sub("", text)
        if shorter == text:
            break
        text = shorter
    lines = []
    for line in text.split("\n"):
        parts = [part for part in line.split("\r") if part]
        lines.append(parts[-1] if parts else "")
    return "\n".join(lines)


def _kind(node) -> str | None:
    if isinstance(node, nodes.literal_block) and "output" in node.get("classes", []):
        for cls in STREAM_CLASSES:
            if cls in node["classes"]:
                return cls
    return None


def _merge(app, doctree):
    for container in doctree.findall(nodes.container):
        if "cell_output" not in container.get("classes", []):
            continue
        merged = []
        for child in list(container.children):
            kind = _kind(child)
            if kind and merged and _kind(merged[-1]) == kind:
                text = merged[-1].astext() + child.astext()
                merged[-1].children = [nodes.Text(text)]
                merged[-1].rawsource = text
                container.remove(child)
            else:
                merged.append(child)
        for child in merged:
            if _kind(child):
                text = terminal_text(child.astext()).strip("\n")
                if not text.strip():  # a bar's closing newline, printed after other output
                    container.remove(child)
                    continue
                child.children = [nodes.Text(text)]
                child.rawsource = text


def setup(app):
    app.connect("doctree-read", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
