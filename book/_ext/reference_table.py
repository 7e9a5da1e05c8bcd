"""``{reference-records}``: a table of every GPU reference record, for the status page.

Records are written by ``make gpu-check`` into ``gpucourse/references/``; this
directive lists each one (device, date, size, notebooks and their outcomes,
key figures). With no record it says so, rather than showing an empty table.
"""

from __future__ import annotations

import sys
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _row(*cells):
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text=str(cell))
        row += entry
    return row


def _figures(record) -> str:
    parts = []
    for name, fig in sorted(record["figures"].items()):
        value = fig["value"]
        shown = f"{value:.3g}" if isinstance(value, float) else (str(value) if not isinstance(value, (list, dict)) else "…")
        parts.append(f"{name} = {shown} {fig['unit']}".strip())
    return "; ".join(parts) or "none"


class ReferenceRecords(SphinxDirective):
    def run(self):
        from gpucourse import reference

        records = reference.records()
        for path in reference.reference_dir().glob("*.json"):
            self.env.note_dependency(str(path))
        if not records:
            return [nodes.paragraph(text="No reference record has been measured yet. Run `make gpu-check` "
                                         "on a machine with a GPU and commit the file it writes.")]
        headers = ("device", "measured", "size", "notebooks", "time", "key figures")
        table = nodes.table()
        group = nodes.tgroup(cols=len(headers))
        table += group
        for _ in headers:
            group += nodes.colspec(colwidth=1)
        head = nodes.thead()
        head += _row(*headers)
        group += head
        body = nodes.tbody()
        for r in records:
            outcomes = [n["outcome"] for n in r["notebooks"]]
            summary = ", ".join(f"{outcomes.count(o)} {o}" for o in ("ok", "skipped", "failed", "timeout")
                                if outcomes.count(o))
            device = r["hardware"].get("gpu_name") or f"CPU only: {r['hardware']['cpu_model']}"
            body += _row(device, r["date"], r.get("mode", ""), summary, f"{r.get('total_seconds', 0):.0f} s",
                         _figures(r))
        group += body
        return [table]


def setup(app):
    app.add_directive("reference-records", ReferenceRecords)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
