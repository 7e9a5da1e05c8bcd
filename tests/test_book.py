"""Build the website as `make book` does (quick mode, separate output folder),
then open it in headless Chromium like a reader would.

Needs Debian's `chromium` (``apt-get install chromium``; `.ci/run` installs it)
or another Chromium named by ``CHROMIUM=/path/to/chrome``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import coursetools
from conftest import ROOT

OUT = ROOT / "_build" / "test"
HTML = OUT / "_build" / "html"
SHOTS = OUT / "screenshots"
REPO, BRANCH = coursetools.repository()
# sphinx-book-theme logs this on a fresh browser profile (no stored theme); it is benign.
# External images (the Colab badge) are answered with this grey stand-in of the same size.
_PLACEHOLDER_SVG = ("<svg xmlns='http://www.w3.org/2000/svg' width='117' height='20'>"
                    "<rect width='117' height='20' rx='3' fill='#555'/></svg>")
ALLOWED_CONSOLE = {"Got invalid theme mode: . Resetting to auto."}


@pytest.fixture(scope="module")
def site() -> Path:
    env = {k: v for k, v in os.environ.items() if k != "GPUCOURSE_CHECK_LOG"}
    env.update(GPUCOURSE_QUICK="1", GPUCOURSE_OFFLINE="1", MPLBACKEND="Agg")
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb), "build", str(ROOT), "--path-output", str(OUT), "--warningiserror", "--keep-going"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    log = done.stdout + done.stderr
    (OUT / "build.log").parent.mkdir(parents=True, exist_ok=True)
    (OUT / "build.log").write_text(log)
    assert done.returncode == 0, f"jupyter-book build failed (full log: {OUT / 'build.log'}):\n{log[-6000:]}"
    return HTML


def test_every_toc_page_is_built(site):
    for page in coursetools.toc_files():
        assert (site / f"{page}.html").exists(), f"{page}.html was not built"
    assert (site / "index.html").exists()


def test_episodes_and_solutions_were_executed(site):
    for page in coursetools.toc_files():
        if page.startswith(("episodes/", "solutions/")):
            html = (site / f"{page}.html").read_text()
            assert 'class="output' in html, f"{page} shows no cell outputs: was it executed?"
    for page in coursetools.toc_files():
        if page.startswith("solutions/"):
            html = (site / f"{page}.html").read_text()
            assert "✓ Correct" in html and "✗ Not yet" not in html, f"{page}: a solution check did not pass"


# ---------------------------------------------------------------- browser --

def _chromium() -> str:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("No Chromium found: install it (Debian: `apt-get install chromium`) "
                "or set CHROMIUM=/path/to/chromium.")


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


def _open(browser, url: str, name: str):
    """Load ``url``; external requests get an empty answer (CI has no internet)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems = []
    page.on("console", lambda m: m.type == "error" and m.text not in ALLOWED_CONSOLE and problems.append(m.text))
    page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))

    def route(r):
        if r.request.url.startswith("http://127.0.0.1"):
            return r.continue_()
        is_svg = r.request.url.endswith(".svg")
        return r.fulfill(status=200, body=_PLACEHOLDER_SVG if is_svg else "",
                         content_type="image/svg+xml" if is_svg else "text/plain")

    page.route("**/*", route)
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, f"{url} answered {response and response.status}"
    page.wait_for_timeout(300)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)
    return page, problems


PAGES = ["index"] + [page for page in coursetools.toc_files() if page.startswith(("book/", "episodes/", "solutions/"))]


@pytest.mark.parametrize("page_name", PAGES)
def test_page_loads_without_console_errors(browser, server, page_name):
    page, problems = _open(browser, f"{server}/{page_name}.html", page_name.replace("/", "-"))
    assert page.title(), "page has no title"
    assert not problems, f"console errors on {page_name}: {problems}"
    missing_alt = page.eval_on_selector_all("img", "els => els.filter(e => !e.getAttribute('alt')).map(e => e.src)")
    assert not missing_alt, f"images without alt text on {page_name}: {missing_alt}"
    page.close()


NOTEBOOK_PAGES = [p for p in coursetools.toc_files() if p.startswith(("episodes/", "exercises/", "solutions/"))]


@pytest.mark.parametrize("page_name", NOTEBOOK_PAGES)
def test_notebook_page_has_colab_launch_button_and_badge(browser, server, page_name):
    rel = f"{page_name}.ipynb"
    page, problems = _open(browser, f"{server}/{page_name}.html", "launch-" + page_name.replace("/", "-"))
    colab = f"https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/{rel}"
    launch = page.locator(f'.bd-header-article a[href="{colab}"]')
    assert launch.count() >= 1, "the header has no Colab launch button pointing at this notebook"
    badge = page.locator(f'article a[href="{colab}"] img[alt="Open In Colab"]')
    assert badge.count() == 1, "the Colab badge in the text is missing or points elsewhere"
    page.locator(".bd-header-article .dropdown-launch-buttons button").first.click()
    page.wait_for_timeout(200)
    assert launch.first.is_visible(), "the Colab launch link is not shown when the launch menu opens"
    if page_name == NOTEBOOK_PAGES[0]:
        page.screenshot(path=str(SHOTS / "launch-menu-open.png"))
    assert not problems, f"console errors on {page_name}: {problems}"
    page.close()
