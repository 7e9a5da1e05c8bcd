"""Build the website as `make book` does (quick mode, separate output folder),
then open it in headless Chromium like a reader would: at desktop, tablet and
phone widths, with axe-core checking accessibility.

`make test` finds or installs a Chromium first (``tools/ensure_browser.py``);
``CHROMIUM=/path/to/chrome`` chooses one. Screenshots of every page at desktop
and phone width are saved in ``_build/test/screenshots/`` to be looked at.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

import coursetools
from conftest import ROOT

#: How long a menu, dialog or drawer may take to open on a busy machine: expect() polls until then,
#: so a fast machine does not wait (a fixed sleep followed by is_visible() fails when the browser is slow).
UI_WAIT_MS = 15_000

OUT = ROOT / "_build" / "test"
HTML = OUT / "_build" / "html"
SHOTS = OUT / "screenshots"
REPO, BRANCH = coursetools.repository()
# sphinx-book-theme logs this on a fresh browser profile (no stored theme); it is benign.
# External images (the Colab badge) are answered with this grey stand-in of the same size.
_PLACEHOLDER_SVG = ("<svg xmlns='http://www.w3.org/2000/svg' width='117' height='20'>"
                    "<rect width='117' height='20' rx='3' fill='#555'/></svg>")
ALLOWED_CONSOLE = {"Got invalid theme mode: . Resetting to auto."}
WIDTHS = {"desktop": 1280, "tablet": 800, "phone": 390}


#: Where the build keeps executed notebooks (jupyter-book's `_build/.jupyter_cache` under its output).
#: `make test` runs nbval with `--book-cache` pointing here, so the build finds every episode and
#: solution already executed, with the outputs nbval printed (conftest.py), and runs none again.
BOOK_CACHE = OUT / "_build" / ".jupyter_cache"


def _build_site(expect_cached: bool) -> str:
    """Build the site into OUT; its log. ``expect_cached``: fail if any notebook had to execute."""
    # No MPLBACKEND: figures must be drawn by the notebook's inline backend, as for learners.
    env = {k: v for k, v in os.environ.items() if k not in ("GPUCOURSE_CHECK_LOG", "MPLBACKEND")}
    # A data folder of the build's own: episode 11 empties its checkpoint folders before each run.
    env.update(GPUCOURSE_QUICK="1", GPUCOURSE_OFFLINE="1", GPUCOURSE_DATA=str(OUT / "data"))
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb), "build", str(ROOT), "--path-output", str(OUT), "--warningiserror", "--keep-going"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    log = done.stdout + done.stderr
    (OUT / "build.log").parent.mkdir(parents=True, exist_ok=True)
    (OUT / "build.log").write_text(log)
    assert done.returncode == 0, f"jupyter-book build failed (full log: {OUT / 'build.log'}):\n{log[-6000:]}"
    executed = re.findall(r"^(\S+\.ipynb): Executing notebook", log, re.M)
    assert not (expect_cached and executed), (
        f"the build executed {len(executed)} notebooks that nbval had run (--book-cache {BOOK_CACHE}): "
        f"{executed[:5]}; did their code change after nbval ran them, or did nbval store nothing?")
    return log


@pytest.fixture(scope="module")
def site(request, testrun_uid) -> Path:
    """The built site, once per test run however many test workers ask for it (the first builds,
    the others wait for it under a lock and read the same folder)."""
    from filelock import FileLock

    given = request.config.getoption("--book-cache")
    if given is not None:
        assert Path(given).resolve() == BOOK_CACHE.resolve(), (
            f"--book-cache {given}: the build reads {BOOK_CACHE.relative_to(ROOT)}; give that folder")
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = OUT / "built-in-run"
    with FileLock(str(OUT / "build.lock")):
        if not (stamp.exists() and stamp.read_text().split("\n")[0] == testrun_uid):
            stamp.unlink(missing_ok=True)
            try:
                _build_site(expect_cached=given is not None)
                stamp.write_text(f"{testrun_uid}\nok\n")
            except AssertionError as error:
                stamp.write_text(f"{testrun_uid}\nfailed\n{error}")
                raise
        result = stamp.read_text().split("\n", 2)
    if result[1] != "ok":
        pytest.fail(f"the site's build failed in another test worker:\n{result[2]}", pytrace=False)
    return HTML


def test_make_test_builds_the_site_from_the_notebooks_nbval_ran():
    """`make test` runs nbval with --book-cache first, then this file with the same folder, which
    `site` checks is where the build reads: every notebook executes once in `make test`."""
    done = subprocess.run(["make", "-n", "-B", "test"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    runs = [cmd for cmd in done.stdout.replace("\\\n", " ").splitlines() if " -m pytest " in cmd]
    option = f"--book-cache={BOOK_CACHE.relative_to(ROOT)}"
    assert len(runs) == 2 and all(option in cmd for cmd in runs), runs
    assert "--nbval-lax" in runs[0] and "episodes" in runs[0] and "--ignore=tests/test_book.py" in runs[0]
    assert runs[1].rstrip().endswith("tests/test_book.py"), runs[1]


def test_every_toc_page_is_built(site):
    for page in coursetools.toc_files():
        assert (site / f"{page}.html").exists(), f"{page}.html was not built"
    assert (site / "index.html").exists()


def test_moved_pages_redirect_to_where_they_went(site):
    import yaml

    redirects = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["redirects"]
    assert "episodes/06-faster-training" in redirects and "episodes/07-more-than-one-gpu" in redirects
    for old, new in redirects.items():
        target = (site / old).parent / new
        assert target.exists(), f"{old} redirects to {new}, which was not built"
        assert not (ROOT / f"{old}.ipynb").exists(), f"{old} is a page again: drop its redirect"
        html = (site / f"{old}.html").read_text()
        assert f'content="0; url={new}"' in html and f'<a href="{new}">' in html, f"{old}.html does not redirect"
        assert "has moved" in html


def test_episodes_and_solutions_were_executed(site):
    for page in coursetools.toc_files():
        if page.startswith(("episodes/", "solutions/")):
            html = (site / f"{page}.html").read_text()
            assert 'class="output' in html, f"{page} shows no cell outputs: was it executed?"
    for page in coursetools.toc_files():
        if page.startswith("solutions/"):
            html = (site / f"{page}.html").read_text()
            assert "✓ Correct" in html and "✗ Not yet" not in html, f"{page}: a solution check did not pass"


# ------------------------------------------------------------ front door --

def _episode_pages() -> list[str]:
    return [page for page in coursetools.toc_files() if page.startswith("episodes/")]


def _readme_rows() -> list[list[str]]:
    """The cells of each row of the README's episode table (rows that start with "| N. ")."""
    lines = (ROOT / "README.md").read_text().splitlines()
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for line in lines if re.match(r"\| \d+\. ", line)]


def test_readme_table_lists_every_episode_with_its_links():
    """One row per episode, in the order of the table of contents: its title as the notebook's
    heading says it, the Colab badge of the lesson, and the exercises and solutions in Colab."""
    rows, pages = _readme_rows(), _episode_pages()
    listed = [row[0] for row in rows]
    assert len(rows) == len(pages), f"the README lists {len(rows)} episodes, the book has {len(pages)}: {listed}"
    for row, page in zip(rows, pages):
        name = page.removeprefix("episodes/")
        heading = coursetools.read(ROOT / f"{page}.ipynb").cells[0].source.splitlines()[0]
        assert row[0] == heading.removeprefix("# ").strip(), f"README row {row[0]!r}, notebook {heading!r}"
        badge = coursetools.badge(REPO, BRANCH, f"{page}.ipynb").split(" [![Open in Kaggle]")[0]
        assert row[1] == badge, f"{row[0]}: the lesson link is {row[1]!r}, not {badge!r}"
        for column, kind in ((2, "exercises"), (3, "solutions")):
            link = f"[{kind}]({coursetools.colab_url(REPO, BRANCH, f'{kind}/{name}.ipynb')})"
            assert row[column] == link, f"{row[0]}: {kind} link {row[column]!r}, not {link!r}"


_NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                 "fourteen fifteen sixteen seventeen eighteen nineteen twenty").split()


def test_readme_first_paragraph_counts_every_episode():
    """The README's first paragraph says how many episodes the course has, as the book has them."""
    text = (ROOT / "README.md").read_text().split("\n\n")[1]
    n = len(_episode_pages())
    assert re.search(rf"\b({n}|{_NUMBER_WORDS[n]})\b", text, re.IGNORECASE), (
        f"the README's first paragraph does not say the course has {n} episodes:\n{text}")


# ---------------------------------------------------------------- browser --

def _chromium() -> str | None:
    """The browser `tools/ensure_browser.py` chose (None: Playwright's own), else one on PATH."""
    record = ROOT / "_build" / "chromium-path"
    chosen = os.environ.get("CHROMIUM") or (record.read_text().strip() if record.exists() else "")
    if chosen == "playwright":
        return None
    for candidate in (chosen, "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("No Chromium found: run `make test` (it finds or installs one), or set "
                "CHROMIUM=/path/to/chromium.")


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=_chromium(), headless=True,
            args=["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )
        yield browser
        browser.close()


#: Problems that start with this are requests to the site itself that failed (a 404, a refused file).
FAILED_REQUEST = "request to the site failed: "


def _is_site(url: str) -> bool:
    return url.startswith("http://127.0.0.1")


def _open(browser, url: str, name: str, width: int = WIDTHS["desktop"], shot: str | None = None,
          wait_until: str = "load"):
    """Load ``url``; external requests get an empty answer (CI has no internet).

    Requests to other hosts are not the site's fault offline; a request to the site itself that
    fails, or is answered 400 or more, is a problem (``FAILED_REQUEST``), at any time the page lives.
    """
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems = []
    page.on("console", lambda m: m.type == "error" and m.text not in ALLOWED_CONSOLE and problems.append(m.text))
    page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
    # Aborted is not failed: a page that moves on (index.html's redirect) cancels what it started.
    page.on("requestfailed", lambda r: _is_site(r.url) and r.failure != "net::ERR_ABORTED" and problems.append(
        f"{FAILED_REQUEST}{r.method} {r.url} ({r.failure})"))
    page.on("response", lambda r: _is_site(r.url) and r.status >= 400 and problems.append(
        f"{FAILED_REQUEST}{r.request.method} {r.url} answered {r.status} ({r.request.resource_type})"))

    def route(r):
        if _is_site(r.request.url):
            return r.continue_()
        is_svg = r.request.url.endswith(".svg")
        return r.fulfill(status=200, body=_PLACEHOLDER_SVG if is_svg else "",
                         content_type="image/svg+xml" if is_svg else "text/plain")

    page.route("**/*", route)
    response = page.goto(url, wait_until=wait_until)
    assert response is not None and response.ok, f"{url} answered {response and response.status}"
    if wait_until != "networkidle":           # that waited for 500 ms without a request already
        page.wait_for_timeout(300)
    path = SHOTS / (shot or "") / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=False)
    return page, problems


PAGES = ["index"] + coursetools.toc_files()
ALL_PAGES = coursetools.toc_files()
NOTEBOOK_PAGES = [p for p in ALL_PAGES if p.startswith(("episodes/", "exercises/", "solutions/"))]

# ------------------------------------------------- every page, as a reader opens it --
# Each page is loaded once, at desktop width, and every check below reads that one load (loading it
# once per check took twice as long); then the window is narrowed to a phone's. A failure names the check.

def _axe_violations(page) -> list[dict]:
    """axe-core's violations on ``page``, its experimental rules included.

    axe skips rules tagged "experimental" unless asked; label-content-name-mismatch
    (WCAG 2.5.3) is one, and it found the theme's search button on every page.
    """
    axe = Axe()
    page.evaluate(axe.axe_script)
    experimental = page.evaluate("axe.getRules(['experimental']).map(rule => rule.ruleId)")
    assert "label-content-name-mismatch" in experimental, "this axe-core no longer tags the rule experimental"
    options = {"resultTypes": ["violations"], "rules": {rule: {"enabled": True} for rule in experimental}}
    return axe.run(page, options=options).response["violations"]


#: axe-core's impacts that fail the test: all but "minor" (a moderate one is `region`, text
#: outside every landmark, which a screen-reader user skipping from landmark to landmark misses).
FAILING_IMPACTS = ("moderate", "serious", "critical")


FIGURE_CALL = re.compile(r"plt\.(show|subplots|figure)\(")

# Text left as LaTeX source after MathJax ran would show these outside `.math` elements.
_RAW_MATH_JS = """() => {
  const article = document.querySelector('article').cloneNode(true);
  article.querySelectorAll('.math, pre, code, script').forEach(e => e.remove());
  return article.innerText;
}"""

# Waits until MathJax has typeset the page (or 20 s), then says how each formula came out.
_TYPESET_JS = """async () => {
  for (let waited = 0; !window.MathJax?.startup?.promise && waited < 20000; waited += 100) {
    await new Promise(done => setTimeout(done, 100));
  }
  if (window.MathJax?.startup?.promise) await window.MathJax.startup.promise;
  const formulas = [...document.querySelectorAll('article .math')];
  return {
    loaded: !!window.MathJax?.version, version: window.MathJax?.version || null,
    unrendered: formulas.filter(f => !f.querySelector('mjx-container')).map(f => f.textContent.slice(0, 80)),
    errors: [...document.querySelectorAll('article mjx-merror')].map(e => e.textContent.slice(0, 80)),
    containers: document.querySelectorAll('article .math mjx-container').length,
  };
}"""


def _request_problems(problems: list[str]) -> list[str]:
    """Every request the page makes to the site succeeds, those its scripts make later included
    (a theme script once asked for /basic.css on every page and got a 404; axe fetches the
    stylesheets again to read them), and the console shows no error."""
    return [p if p.startswith(FAILED_REQUEST) else f"console error: {p}" for p in problems]


def _image_problems(page) -> list[str]:
    missing_alt = page.eval_on_selector_all("img", "els => els.filter(e => !e.getAttribute('alt')).map(e => e.src)")
    return [f"images without alt text: {missing_alt}"] if missing_alt else []


def _formula_problems(page, page_name: str) -> list[str]:
    """MathJax comes with the site (book/_ext/local_mathjax.py) and typesets every formula.

    The browser reaches no other host (a CDN is answered with an empty file), so a site that
    loads MathJax from anywhere else shows raw LaTeX here, as it would to a reader offline.
    """
    n_math = page.locator("article .math").count()
    scripts = page.eval_on_selector_all('script[src*="mathjax"]', "els => els.map(e => e.src)")
    result = page.evaluate(_TYPESET_JS) if n_math else None
    page.wait_for_load_state("networkidle")     # the fonts MathJax asks for
    text = page.evaluate(_RAW_MATH_JS)
    found = [f"shows raw LaTeX {raw!r} outside a formula" for raw in ("\\(", "\\[", "$$") if raw in text]
    if not n_math:
        return found
    shot = SHOTS / "maths" / f"{page_name.replace('/', '-')}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.locator("article .math").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shot))
    page.evaluate("window.scrollTo(0, 0)")
    if not (scripts and all(_is_site(src) and "/_static/mathjax/" in src for src in scripts)):
        return found + [f"{n_math} formulas, but MathJax is loaded from {scripts or 'nowhere'}, not from the site"]
    if not result["loaded"]:
        return found + [f"MathJax did not start ({scripts}); its formulas show as raw LaTeX"]
    found += [f"formulas left as LaTeX: {result['unrendered'][:5]}"] if result["unrendered"] else []
    found += [f"formulas MathJax could not read: {result['errors'][:5]}"] if result["errors"] else []
    if result["containers"] != n_math:
        found.append(f"{n_math} formulas but {result['containers']} typeset")
    return found


def _output_problems(page, page_name: str) -> list[str]:
    """A figure drawn is a figure shown, described in words and not shrunk; no cell floods stderr."""
    per_cell = page.eval_on_selector_all(
        "div.cell", "cells => cells.map(c => c.querySelectorAll('.cell_output .output.stderr').length)")
    images = page.eval_on_selector_all(".cell_output img", """imgs => imgs.map(i => ({
        alt: i.getAttribute('alt') || '', src: i.getAttribute('src'),
        shown: i.getBoundingClientRect().width, natural: i.naturalWidth}))""")
    notebook = coursetools.read(ROOT / f"{page_name}.ipynb")
    n_figures = sum(1 for c in notebook.cells if c.cell_type == "code" and FIGURE_CALL.search(c.source))
    found = [f"draws {n_figures} figures but shows {len(images)}"] if len(images) < n_figures else []
    if max(per_cell, default=0) > 2:
        found.append(f"a cell shows {max(per_cell)} separate stderr blocks (progress-bar frames?)")
    for img in images:
        alt = img["alt"]
        if len(alt.split()) < 6 or alt.endswith((".png", ".svg", ".jpg")) or "/" in alt[:40]:
            found.append(f"output figure {img['src']} has alt text {alt!r}, not a description")
        if not (img["natural"] and img["shown"] / img["natural"] >= 0.75):
            found.append(f"figure {img['src']} is {img['natural']} px wide but shown at {img['shown']:.0f} px; "
                         "its text shrinks below legible size (make the figure narrower, about 7 inches)")
    return found


def _width_problems(page, width: int) -> list[str]:
    overflow = page.evaluate("document.documentElement.scrollWidth")
    return [f"{overflow} px wide at {width} px: the page scrolls sideways"] if overflow > width + 1 else []


def _axe_problems(page) -> list[str]:
    """No moderate, serious or critical axe-core violation, none allowed."""
    return [f"{v['id']} ({v['impact']}): {n['target']} {n.get('failureSummary', '')[:160]!r}"
            for v in _axe_violations(page) if v["impact"] in FAILING_IMPACTS for n in v["nodes"]][:15]


def _launch_problems(page, page_name: str) -> list[str]:
    """The header's launch menu opens on a Colab link to this notebook; the text has both badges."""
    rel = f"{page_name}.ipynb"
    colab = f"https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/{rel}"
    launch = page.locator(f'.bd-header-article a[href="{colab}"]')
    if launch.count() < 1:
        return ["the header has no Colab launch button pointing at this notebook"]
    found = []
    if page.locator(f'article a[href="{colab}"] img[alt="Open In Colab"]').count() != 1:
        found.append("the Colab badge in the text is missing or points elsewhere")
    kaggle = page.locator(f'article a[href="{coursetools.kaggle_url(REPO, BRANCH, rel)}"] img[alt="Open in Kaggle"]')
    if kaggle.count() != 1:
        found.append("the Kaggle badge in the text is missing or points elsewhere")
    page.locator(".bd-header-article .dropdown-launch-buttons button").first.click()
    try:
        expect(launch.first).to_be_visible(timeout=UI_WAIT_MS)
    except AssertionError:
        found.append("the Colab launch link is not shown when the launch menu opens")
    if page_name == NOTEBOOK_PAGES[0]:
        page.screenshot(path=str(SHOTS / "launch-menu-open.png"))
    return found


# After a resize: the next frame, then every finite CSS transition or animation it started (the
# theme slides its sidebars away; a screenshot taken at once caught them half-way), 5 s at most.
_SETTLED_JS = """async () => {
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
  const running = document.getAnimations().filter(a => a.effect?.getComputedTiming().endTime !== Infinity);
  await Promise.race([Promise.all(running.map(a => a.finished.catch(() => null))),
                      new Promise(done => setTimeout(done, 5000))]);
}"""


def _phone_problems(page, page_name: str) -> list[str]:
    """The page at a phone's width: the window narrowed to 390 px (the layout is CSS media queries,
    which a narrowed window applies as a phone's does), a screenshot, and back to the desktop."""
    width = WIDTHS["phone"]
    page.set_viewport_size({"width": width, "height": 900})
    page.evaluate(_SETTLED_JS)
    page.evaluate("window.scrollTo(0, 0)")
    found = _width_problems(page, width)
    path = SHOTS / "phone" / f"{page_name.replace('/', '-')}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path))
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    return found


@pytest.mark.parametrize("page_name", PAGES)
def test_page_reads_well_in_a_browser(browser, server, page_name):
    """One desktop load of the page, every check on it: requests and console, alt text, formulas,
    figures and stderr, width, axe-core, the width of a phone, the launch menu (the last, as it
    opens a menu)."""
    page, problems = _open(browser, f"{server}/{page_name}.html", page_name.replace("/", "-"),
                           shot="desktop", wait_until="networkidle")
    found = {"title": [] if page.title() else ["the page has no title"], "images": _image_problems(page)}
    if page_name in ALL_PAGES:
        found["formulas"] = _formula_problems(page, page_name)
        if page_name.startswith(("episodes/", "solutions/")):
            found["outputs"] = _output_problems(page, page_name)
        found["width"] = _width_problems(page, WIDTHS["desktop"])
        found["axe-core"] = _axe_problems(page)
        page.wait_for_load_state("networkidle")
        found["phone width"] = _phone_problems(page, page_name)
        if page_name in NOTEBOOK_PAGES:
            found["launch"] = _launch_problems(page, page_name)
    found["requests"] = _request_problems(problems)
    page.close()
    failed = {check: messages for check, messages in found.items() if messages}
    assert not failed, f"on {page_name}:\n" + "\n".join(
        f"  {check}: {message}" for check, messages in failed.items() for message in messages)


# ------------------------------------------------------ reading the site --

def test_index_is_a_real_page(site):
    html = (site / "index.html").read_text()
    assert '<html lang="en">' in html and "<title>GPUs for Machine Learning</title>" in html
    assert 'href="book/intro.html"' in html, "index.html does not link to the first page"
    assert 'rel="icon"' in html and (site / "_static" / "favicon.svg").exists(), "no favicon"


def test_solution_pages_hide_generator_markers_and_status_uses_words(site):
    for page in ALL_PAGES:
        html = (site / f"{page}.html").read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "### STUB"):
            assert marker not in html, f"{page} shows the exercise generator's marker {marker!r}"
        assert "✅" not in html and "❌" not in html, f"{page} relies on an emoji glyph"



def test_no_table_has_an_empty_header_cell(site):
    """pandas' empty corner and index-name cells are data cells on the site (book/_ext/table_headers.py):
    a screen reader would announce an empty header for each cell they head (axe: empty-table-header)."""
    empty = re.compile(r"<th(\s[^>]*)?>\s*</th>")
    found = [f"{page}: {len(empty.findall(html))}" for page in ALL_PAGES
             if empty.search(html := (site / f"{page}.html").read_text())]
    assert not found, "empty table header cells on " + ", ".join(found)


def _site_extension(name: str):
    """One of the site's Sphinx extensions in book/_ext/, imported as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"book_ext_{name}", ROOT / "book" / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_empty_dataframe_headers_become_data_cells():
    fill_empty_headers = _site_extension("table_headers").fill_empty_headers

    frame = '<table class="dataframe"><thead><tr><th></th><th>T4</th></tr><tr><th>batch</th><th> </th></tr>'
    assert fill_empty_headers(frame) == (
        '<table class="dataframe"><thead><tr><td></td><th>T4</th></tr><tr><th>batch</th><td></td></tr>')
    other = "<table><tr><th></th></tr></table>"      # not pandas': left alone
    assert fill_empty_headers(other) == other


def test_a_relative_css_import_is_written_in_place_with_its_urls_rebased(tmp_path):
    inline_imports = _site_extension("inline_css_imports").inline_imports

    (tmp_path / "styles").mkdir()
    (tmp_path / "basic.css").write_text("li { background-image: url(file.png); }\n"
                                        "a { background: url('https://example.org/x.png'); }\n")
    theme = tmp_path / "styles" / "theme.css"
    theme.write_text('/* theme */\n@import "../basic.css";\nbody { color: red; }\n')
    assert inline_imports(theme)
    text = theme.read_text()
    assert "@import" not in text and "url(../file.png)" in text and "url('https://example.org/x.png')" in text
    assert text.index("li {") < text.index("body {"), "the imported rules must come first, as an @import does"
    assert not inline_imports(theme), "a second pass changes nothing"


def test_mathjax_comes_from_npm_at_the_locked_version():
    """package.json pins MathJax 3 exactly and the lock file agrees: the site serves that copy."""
    import json

    pinned_version = _site_extension("local_mathjax").pinned_version

    wanted = json.loads((ROOT / "package.json").read_text())["dependencies"]["mathjax"]
    assert re.fullmatch(r"3\.\d+\.\d+", wanted), f"pin MathJax 3 exactly in package.json, not {wanted!r}"
    assert pinned_version(ROOT) == wanted, "package-lock.json is out of step with package.json: run npm install"


def test_mathjax_is_served_by_the_site(site):
    mathjax = site / "_static" / "mathjax"
    assert (mathjax / "tex-chtml.js").is_file(), (
        "the site has no MathJax of its own: is npm installed? (book/_ext/local_mathjax.py)")
    assert list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff")), "MathJax's fonts are missing"


def test_status_page_lists_every_reference_record_and_its_figures(site):
    from gpucourse import reference

    html = (site / "book" / "status.html").read_text()
    records = reference.records()
    if not records:
        assert "No reference record has been measured yet" in html
    for record in records:
        device = record["hardware"].get("gpu_name") or record["hardware"]["cpu_model"]
        assert "Key figures: " in html and device in html, f"the status page does not list {device}"
        for name in record["figures"]:
            assert f"<p>{name}</p>" in html, f"the status page does not show {name} of {device}"

def test_search_button_is_named_by_what_it_shows_and_opens_search(browser, server):
    """The theme's "Search Ctrl+K" button: its accessible name contains its visible text, and it works."""
    page, problems = _open(browser, f"{server}/episodes/01-what-is-a-gpu.html", "search-button")
    button = page.locator("button.search-button-field").first
    assert button.is_visible()
    assert button.get_attribute("aria-label") is None, "the theme's aria-label='Search' is back"
    name = page.evaluate("""() => {
        const b = document.querySelector('button.search-button-field');
        return b.innerText.replace(/\\s+/g, ' ').trim(); }""")
    assert name.startswith("Search") and "K" in name, name
    button.click()
    field = page.locator("#pst-search-dialog input[type=search]").first
    expect(field, "the search button no longer opens the search field").to_be_visible(timeout=UI_WAIT_MS)
    page.screenshot(path=str(SHOTS / "search-open.png"))
    assert not problems, problems
    page.close()


_SHOWN_MODE_TITLE = """() => [...document.querySelectorAll('.theme-switch-button .theme-switch')]
    .filter(icon => icon.getBoundingClientRect().width > 0)
    .map(icon => icon.querySelector('title')?.textContent || icon.getAttribute('title'))"""


def test_color_mode_button_is_named_by_the_mode_it_shows(browser, server):
    page, problems = _open(browser, f"{server}/book/intro.html", "color-mode")
    button = page.locator(".theme-switch-button").first
    names = []
    for _ in range(3):                     # the button cycles through the three modes
        shown = page.evaluate(_SHOWN_MODE_TITLE)
        assert len(shown) == 1, f"the colour-mode button shows {shown}, not one icon"
        label = button.get_attribute("aria-label")
        assert label == f"Color mode: {shown[0]}", f"named {label!r} but shows {shown[0]!r}"
        names.append(label)
        button.click()
        expect(button, f"the colour-mode button still says {label!r} after a click").not_to_have_attribute(
            "aria-label", label, timeout=UI_WAIT_MS)
    assert len(set(names)) == 3, names
    assert not problems, problems
    page.close()


# One line of each kind of coloured terminal output myst-nb can render: the eight colours, bold,
# on a coloured background, 256-colour codes; once as stdout and once in the reddish stderr box.
_ANSI_LINES = [f"-Color -Color-{c}" for c in (
    "Black", "Red", "Green", "Yellow", "Blue", "Magenta", "Cyan", "White")] + [
    "-Color -Color-Bold -Color-Bold-Red", "-Color -Color-Bold -Color-Bold-Yellow",
    "-Color -Color-BGYellow", "-Color -Color-Red -Color-Red-BGBlack", "-Color -Color-Cyan-BGBlue",
    "-Color -Color-C226", "-Color -Color-C21", "-Color -Color-C196-BGC236", "-Color -Color-BGC21"]
_ANSI_SAMPLE = "".join(
    f'<div class="cell_output docutils container"><div class="output {kind} highlight-myst-ansi notranslate">'
    '<div class="highlight"><pre><span></span>'
    + "".join(f'<span class="{cls}">coloured output ({cls})</span>\n' for cls in _ANSI_LINES)
    + "</pre></div></div></div>" for kind in ("stream", "stderr"))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_coloured_terminal_output_is_legible(browser, server, theme):
    """ANSI-coloured output (episode 9's logs on PyPI's CUDA build of PyTorch) meets WCAG AA
    contrast in both themes: book/_static/ansi-colours.css, measured by axe in the browser."""
    page, _ = _open(browser, f"{server}/episodes/09-more-than-one-gpu.html", f"ansi-{theme}")
    page.evaluate("""([theme, sample]) => {
        document.documentElement.dataset.theme = theme;
        document.documentElement.dataset.mode = theme;
        const box = document.createElement('div');
        box.id = 'ansi-sample';
        box.className = 'cell docutils container';
        box.innerHTML = sample;
        document.querySelector('article').prepend(box);
    }""", [theme, _ANSI_SAMPLE])
    page.locator("#ansi-sample").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / f"ansi-{theme}.png"))
    spans = page.locator("#ansi-sample span[class*='-Color']").count()
    assert spans == 2 * len(_ANSI_LINES)
    axe = Axe()
    page.evaluate(axe.axe_script)
    violations = axe.run(page, context="#ansi-sample",
                         options={"runOnly": ["color-contrast"], "resultTypes": ["violations"]}
                         ).response["violations"]
    page.close()
    found = [f"{n['target']}: {n.get('failureSummary', '')[:200]}" for v in violations for n in v["nodes"]]
    assert not found, f"coloured output below AA contrast in the {theme} theme:\n  " + "\n  ".join(found)


def _sidebar_link(page):
    return page.locator('.bd-sidebar-primary a[href*="01-what-is-a-gpu"], '
                        'dialog a[href*="01-what-is-a-gpu"]').first


def _sidebar_link_visible(page) -> bool:
    return _sidebar_link(page).is_visible()


@pytest.mark.parametrize("width_name", ["phone", "tablet"])
def test_navigation_drawer_opens_on_small_screens(browser, server, width_name):
    page, _ = _open(browser, f"{server}/episodes/03-pytorch-classifier.html", "nav-closed",
                    width=WIDTHS[width_name], shot=width_name)
    assert not _sidebar_link_visible(page), "the navigation is already open on a small screen"
    page.locator("button.primary-toggle").first.click()
    expect(_sidebar_link(page), f"the ☰ button does not open the navigation at {WIDTHS[width_name]} px"
           ).to_be_visible(timeout=UI_WAIT_MS)
    page.screenshot(path=str(SHOTS / width_name / "nav-open.png"))
    page.keyboard.press("Escape")
    page.wait_for_timeout(300)        # not a race: the click below waits until its button takes clicks
    page.locator("button.secondary-toggle").first.click()
    toc = page.locator('.bd-sidebar-secondary a[href="#key-points"], dialog a[href="#key-points"]').first
    expect(toc, f"the contents button does not open this page's table of contents at {WIDTHS[width_name]} px"
           ).to_be_visible(timeout=UI_WAIT_MS)
    page.screenshot(path=str(SHOTS / width_name / "toc-open.png"))
    page.close()


def test_sidebar_collapses_on_desktop(browser, server):
    page, _ = _open(browser, f"{server}/episodes/03-pytorch-classifier.html", "sidebar")
    assert _sidebar_link_visible(page), "the navigation sidebar is not shown on a desktop screen"
    page.locator("button.primary-toggle").first.click()
    expect(_sidebar_link(page), "the ☰ button does not hide the sidebar on a desktop screen").to_be_hidden(
        timeout=UI_WAIT_MS)
    page.close()
