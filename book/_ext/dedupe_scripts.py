"""Drop repeated <script> entries from every page.

With jupyter-book 1.0.4 and sphinx-thebe 0.3.1 each page gets sphinx-thebe's
inline configuration script twice (once with filename None, once with ''), and
its ``const THEBE_JS_URL = ...`` then fails in the browser with "Identifier
'THEBE_JS_URL' has already been declared". Removing exact duplicates fixes it
without patching either package.

The list is edited in place: extensions that run later in the same event
(MathJax adds its scripts there, on pages with maths) append to this very list,
and a replaced list would silently lose them.
"""


def _dedupe(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        filename = getattr(js, "filename", js) or ""
        key = (str(filename), repr(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def setup(app):
    # Early priority: html-page-context stops at the first handler that returns a template.
    app.connect("html-page-context", _dedupe, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
