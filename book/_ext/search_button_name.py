"""Name the theme's search field button by what it shows.

pydata-sphinx-theme 0.17 labels its "Search Ctrl+K" button ``aria-label="Search"``,
which axe-core reports on every page (label-content-name-mismatch, serious).
``_static/search-button-name.js`` removes that label in the browser, where the
button exists at all; this extension adds the script to every page.
"""


def setup(app):
    app.add_js_file("search-button-name.js", loading_method="defer")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
