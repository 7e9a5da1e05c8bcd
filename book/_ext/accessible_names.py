"""Name two of the theme's buttons by what they show.

pydata-sphinx-theme 0.17 labels its "Search Ctrl+K" button ``aria-label="Search"``
and its colour-mode button, which shows the current mode's icon titled "Light",
"Dark" or "System Settings", ``aria-label="Color mode"``; axe-core reports both on
every page (label-content-name-mismatch, serious). ``_static/accessible-names.js``
renames them in the browser, where the buttons exist at all; this extension adds
the script to every page.
"""


def setup(app):
    app.add_js_file("accessible-names.js", loading_method="defer")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
