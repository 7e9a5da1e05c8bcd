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


def _table(headers, rows, widths, classes=()):
    table = nodes.table(classes=list(classes))
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    head += _row(*headers)
    group += head
    body = nodes.tbody()
    for cells in rows:
        body += _row(*cells)
    group += body
    return table


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "…" if isinstance(value, (list, dict)) else str(value)


def _device(record) -> str:
    return record["hardware"].get("gpu_name") or f"CPU only: {record['hardware']['cpu_model']}"


class ReferenceRecords(SphinxDirective):
    def run(self):
        from gpucourse import reference

        records = reference.records()
        for path in reference.record_paths():
            self.env.note_dependency(str(path))
        # and the folder: its time changes when a record is added, which no file above names
        self.env.note_dependency(str(reference.REFERENCE_DIR))
        if not records:
            return [nodes.paragraph(text="No reference record has been measured yet. Run `make gpu-check` "
                                         "on a machine with a GPU and commit the file it writes.")]
        summary = []
        for r in records:
            outcomes = [n["outcome"] for n in r["notebooks"]]
            done = ", ".join(f"{outcomes.count(o)} {o}" for o in ("ok", "incomplete", "skipped", "failed", "timeout")
                             if outcomes.count(o))
            software = ", ".join(f"{k} {r['software'][k]}" for k in ("torch", "tensorflow")
                                 if r.get("software", {}).get(k))
            size = r.get("mode", "")
            if size == reference.QUICK_MODE:
                size += " (a smoke run: never a reference)"
            summary.append((_device(r), r["date"], size, done, f"{r.get('total_seconds', 0):.0f} s",
                            software or "—"))
        out = [_table(("device", "measured", "size", "notebooks", "time", "software"), summary, (3, 2, 2, 2, 1, 3))]
        for r in records:   # one table of key figures per record: a figure per row reads on any screen
            out.append(nodes.rubric(text=f"Key figures: {_device(r)}, {r['date']}"))
            figures = [(name, f"{_shown(fig['value'])} {fig.get('unit', '')}".strip())
                       for name, fig in sorted(r["figures"].items())]
            if figures:
                out.append(_table(("figure", "value"), figures, (1, 1), classes=["reference-figures"]))
            else:
                out.append(nodes.paragraph(text="No key figure was recorded."))
        return out


def setup(app):
    app.add_directive("reference-records", ReferenceRecords)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
