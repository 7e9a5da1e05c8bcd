"""Find a Chromium for the browser tests, or obtain one, and record where it is.

``make test`` runs this before pytest. In order, it uses:

1. ``CHROMIUM=/path/to/chrome`` if set (it must exist);
2. a Chromium already installed: ``chromium``, ``chromium-browser`` or
   ``google-chrome`` on PATH, or Debian's ``/usr/bin/chromium``;
3. Playwright's own browser, if it was downloaded before;
4. Playwright's download (``python -m playwright install chromium``);
5. as root (or with password-less sudo) on Debian or Ubuntu, the
   distribution's ``chromium`` package (``apt-get install chromium``).

The path it settles on is written to ``_build/chromium-path`` (the word
``playwright`` for Playwright's own browser), where the tests read it. If none
of these works it says what to do and exits with status 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "_build" / "chromium-path"
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DOWNLOAD_TIMEOUT_S = 600


def say(message: str) -> None:
    print(f"[browser] {message}", flush=True)


def installed_chromium() -> str | None:
    """A Chromium already on this machine (PATH or Debian's location)."""
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def playwright_chromium() -> str | None:
    """Playwright's downloaded headless Chromium, if it is there."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as pw:
        path = pw.chromium.executable_path
    return path if path and Path(path).exists() else None


def launches(executable: str | None) -> bool:
    """True if Playwright can start this browser (None: Playwright's own)."""
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=executable, headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])
            browser.close()
        return True
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable"
        say(f"could not start {executable or 'Playwright Chromium'}: {str(exc).splitlines()[0]}")
        return False


def download_with_playwright() -> bool:
    say("no Chromium found; trying Playwright's download "
        "(python -m playwright install chromium, about 170 MB) ...")
    try:
        done = subprocess.run([sys.executable, "-m", "playwright", "install", "chromium"],
                              timeout=DOWNLOAD_TIMEOUT_S, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        say(f"Playwright's download did not finish in {DOWNLOAD_TIMEOUT_S} s.")
        return False
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[:1]
        say(f"Playwright's download failed: {last[0] if last else 'no reason given'}")
        return False
    return True


def install_with_apt() -> bool:
    """As root (or with password-less sudo) on Debian/Ubuntu: apt-get install chromium."""
    if not shutil.which("apt-get"):
        return False
    if os.geteuid() == 0:
        prefix = []
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        prefix = ["sudo", "-n"]
    else:
        return False
    say("installing the distribution's chromium package (apt-get install chromium) ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        done = subprocess.run(prefix + cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            say(f"`{' '.join(cmd)}` failed:\n{done.stderr.strip()[-800:]}")
            return False
    return True


def find_or_install() -> str | None:
    """The browser to use: a path, or "playwright" for Playwright's own."""
    wanted = os.environ.get("CHROMIUM")
    if wanted:
        if Path(wanted).exists():
            return wanted
        say(f"CHROMIUM={wanted} does not exist.")
        return None
    found = installed_chromium()
    if found and launches(found):
        return found
    if playwright_chromium() or (download_with_playwright() and playwright_chromium()):
        if launches(None):
            return "playwright"
    if install_with_apt():
        found = installed_chromium()
        if found and launches(found):
            return found
    return None


def main() -> int:
    choice = find_or_install()
    if choice is None:
        say("No usable Chromium. Install one and run again: Debian/Ubuntu `sudo apt-get install "
            "chromium`; elsewhere `.venv/bin/python -m playwright install chromium`; or point "
            "CHROMIUM=/path/to/chrome at any Chromium or Chrome.")
        return 1
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(choice + "\n")
    say(f"using {'Playwright Chromium' if choice == 'playwright' else choice}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
