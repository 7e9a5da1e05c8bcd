"""``{reference-records}``: a table of every GPU reference record, for the status page.

Records are written by ``make gpu-check`` into ``gpucourse/references/``; this
directive lists each one (device, date, size, notebooks and their outcomes,
key figures). With no record it says so, rather than showing an empty table.
Each figure shows the commit its run was made at and its age: how many commits
changed its notebook since ("current" when none did). A record made under
``--envelope t4`` is labelled "T4 envelope on <GPU>", never as a T4.
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
    from gpucourse.numbers import readable

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return readable(value)
    return "…" if isinstance(value, (list, dict)) else str(value)


def _device(record) -> str:
    from gpucourse import reference

    return (reference.envelope_label(record) or record["hardware"].get("gpu_name")
            or f"CPU only: {record['hardware']['cpu_model']}")


def _age(figure) -> str:
    """Where the figure comes from and how old it is: "episodes/10 at cde7a0a, 6 commits since"."""
    from gpucourse import reference

    notebook = figure.get("notebook", "")
    short = notebook.rsplit(".", 1)[0].split("-", 1)[0] if notebook else "?"
    if not figure.get("commit"):
        return f"{short}: no run log"
    age = reference.figure_age(figure)
    changed = "changed " + age if age not in ("current", "unknown") else age
    return f"{short} at {figure['commit'][:7]}: {changed}"


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
            if r.get("envelope"):
                size += " (a T4's limits on this GPU: never shown as a T4)"
            summary.append((_device(r), r["date"], size, done, f"{r.get('total_seconds', 0):.0f} s",
                            software or "—"))
        out = [_table(("device", "measured", "size", "notebooks", "time", "software"), summary, (3, 2, 2, 2, 1, 3))]
        for r in records:   # one table of key figures per record: a figure per row reads on any screen
            out.append(nodes.rubric(text=f"Key figures: {_device(r)}, {r['date']}"))
            figures = [(name, f"{_shown(fig['value'])} {fig.get('unit', '')}".strip(), _age(fig))
                       for name, fig in sorted(r["figures"].items())]
            if figures:
                out.append(_table(("figure", "value", "measured by, and its notebook since"), figures,
                                  (2, 2, 2), classes=["reference-figures"]))
            else:
                out.append(nodes.paragraph(text="No key figure was recorded."))
        return out


def setup(app):
    app.add_directive("reference-records", ReferenceRecords)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
