"""Wheels that let ``tools/gpu_check.py`` run on a GPU node with a Python, torch and nothing else.

On a machine that reaches PyPI::

    make gpu-bundle                          # for the Python that runs make
    make gpu-bundle BUNDLE_PYTHON=3.12       # for the GPU node's Python
    python tools/gpu_bundle.py --python 3.12 --arch aarch64   # e.g. a GH200 node

writes ``gpu-bundle/``: the pinned wheels of ``tools/gpu-bundle.txt`` for that Python and
platform (``pip download --no-deps --only-binary=:all:``, so any Python may run it) and
``bundle.json``, which says what they are for. Copy the folder next to the checkout on the
node (or into it: ``gpu-bundle/`` is git-ignored).

On the node, ``tools/gpu_check.py`` calls :func:`use`: it finds the folder, picks the wheels
the node lacks, unpacks them once (``zipfile``; no pip, no venv) into a cache folder and puts
that folder first on ``sys.path`` and on ``PYTHONPATH`` (the notebook kernels). That side
uses the standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = Path(__file__).with_name("gpu-bundle.txt")
DEFAULT_DEST = ROOT / "gpu-bundle"
MANIFEST = "bundle.json"
# The device copy carries 64 MiB in all and the working tree takes about 2 MiB; 60 MiB for
# the wheels leaves room for it. CPython 3.11-3.13's bundle is 59.8 MiB (runner 9.6, course
# and common 7.1, plots 34.8, keras 8.8).
MAX_MIB = 60.0
RUNNER_MODULES = ("nbformat", "nbclient", "ipykernel")
HOW_TO_BUILD = ("run `make gpu-bundle BUNDLE_PYTHON={python}` in the checkout on a machine "
                "with internet and copy the gpu-bundle/ folder next to the checkout here")


class BundleError(Exception):
    """A problem with the bundle, said in one sentence that names what to do."""


def normalize(name: str) -> str:
    """A distribution name as PyPI compares them (``Jupyter_Client`` -> ``jupyter-client``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------- build side

def read_requirements(path: Path = REQUIREMENTS) -> list[dict]:
    """The pins of ``path``: name, version, marker (or None) and group, in file order.

    Raises
    ------
    ValueError
        For a line that is not ``name==version`` (with an optional ``; marker``), or a pin
        before the first ``# [group]`` line.
    """
    pins, group = [], None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        header = re.fullmatch(r"#\s*\[(\w+)\]\s*", raw.strip())
        if header:
            group = header.group(1)
            continue
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, _, marker = (part.strip() for part in line.partition(";"))
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", spec)
        if not match or group is None:
            raise ValueError(f"{path.name} line {number}: {raw!r} is not 'name==version' under a "
                             "'# [group]' line; pin every wheel exactly")
        pins.append({"name": normalize(match.group(1)), "version": match.group(2),
                     "marker": marker or None, "group": group})
    return pins


def _marker_holds(marker: str | None, python: str, arch: str) -> bool:
    """Whether ``marker`` holds on CPython ``python`` on Linux ``arch`` (not on this machine)."""
    if not marker:
        return True
    try:
        from packaging.markers import Marker
    except ImportError:  # pip always carries a copy
        from pip._vendor.packaging.markers import Marker
    return Marker(marker).evaluate({
        "python_version": python, "python_full_version": f"{python}.0",
        "implementation_name": "cpython", "platform_python_implementation": "CPython",
        "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
        "platform_machine": arch})


def platform_tags(arch: str) -> list[str]:
    """The manylinux tags pip may take wheels for (pure-Python wheels always qualify)."""
    return [f"manylinux{tag}_{arch}" for tag in ("2014", "_2_17", "_2_24", "_2_28")]


def wheel_name(filename: str) -> str:
    """The normalised distribution name of a wheel file."""
    return normalize(filename.split("-", 1)[0])


def build(dest: Path = DEFAULT_DEST, python: str | None = None, arch: str = "x86_64",
          requirements: Path = REQUIREMENTS, max_mib: float = MAX_MIB) -> dict:
    """Download the pinned wheels for CPython ``python`` on Linux ``arch`` into ``dest``.

    Nothing is downloaded when ``dest`` already holds this exact list for this Python and
    platform (its ``bundle.json`` says so and every wheel is there).

    Parameters
    ----------
    dest : Path
        The bundle folder; wheels not on the list are removed from it.
    python : str, optional
        ``"3.12"``; default the version of the Python running this.
    arch : str
        ``x86_64`` or ``aarch64``.
    requirements : Path
        The pin list.
    max_mib : float
        Refuse a bundle larger than this.

    Returns
    -------
    dict
        The manifest written to ``dest / "bundle.json"``.
    """
    python = python or "%d.%d" % sys.version_info[:2]
    if not re.fullmatch(r"3\.\d+", python):
        raise BundleError(f"BUNDLE_PYTHON={python!r} is not a Python version like 3.12")
    text = requirements.read_text()
    pins = [p for p in read_requirements(requirements) if _marker_holds(p["marker"], python, arch)]
    digest = hashlib.sha256(f"{python} {arch}\n{text}".encode()).hexdigest()
    dest.mkdir(parents=True, exist_ok=True)
    old = _read_json(dest / MANIFEST)
    if old.get("digest") == digest and all((dest / w["file"]).is_file() for w in old["wheels"]):
        print(f"{_relative(dest)} is up to date: {_summary(old)}")
        return old
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", "--dest", str(dest),
               "--quiet", "--disable-pip-version-check"]
    for tag in platform_tags(arch):
        command += ["--platform", tag]
    command += [f"{p['name']}=={p['version']}" for p in pins]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise BundleError(f"pip could not download the wheels for Python {python} ({last}); "
                          "this needs PyPI, and every pin in tools/gpu-bundle.txt must have a "
                          f"wheel for CPython {python} on manylinux {arch}")
    by_name = {p["name"]: p for p in pins}
    wheels = []
    for path in sorted(dest.glob("*.whl")):
        pin = by_name.get(wheel_name(path.name))
        if pin is None or f"-{pin['version']}-" not in path.name.replace("_", "-"):
            path.unlink()  # left from an earlier list or Python
            continue
        wheels.append({"file": path.name, "name": pin["name"], "version": pin["version"],
                       "group": pin["group"], "bytes": path.stat().st_size})
    missing = sorted(set(by_name) - {w["name"] for w in wheels})
    if missing:
        raise BundleError(f"pip gave no wheel for {', '.join(missing)}; check their pins in "
                          "tools/gpu-bundle.txt")
    manifest = {"python": python, "arch": arch, "platforms": platform_tags(arch),
                "made": dt.date.today().isoformat(), "digest": digest, "wheels": wheels}
    total = sum(w["bytes"] for w in wheels) / 2**20
    if total > max_mib:
        raise BundleError(f"the bundle is {total:.1f} MiB, more than {max_mib:g} MiB; drop a "
                          "wheel from tools/gpu-bundle.txt or raise --max-mib on purpose")
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {_relative(dest)}: {_summary(manifest)}")
    return manifest


def _summary(manifest: dict) -> str:
    total = sum(w["bytes"] for w in manifest["wheels"]) / 2**20
    return (f"{len(manifest['wheels'])} wheels, {total:.1f} MiB, for CPython "
            f"{manifest['python']} on Linux {manifest['arch']}")


def _relative(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd()).as_posix() + "/"
    except ValueError:
        return f"{path}/"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- node side

def find(explicit: Path | None = None, root: Path | None = None) -> Path | None:
    """The bundle folder: ``explicit``, else ``$GPUCOURSE_BUNDLE``, else ``gpu-bundle/`` in or
    next to the checkout; None when there is none.

    Raises
    ------
    BundleError
        When a folder was named (``explicit`` or the variable) but holds no ``bundle.json``.
    """
    named = explicit or (Path(os.environ["GPUCOURSE_BUNDLE"])
                         if os.environ.get("GPUCOURSE_BUNDLE") else None)
    if named is not None:
        if (named / MANIFEST).is_file():
            return named
        raise BundleError(f"{named} holds no gpu-bundle ({MANIFEST} is missing): "
                          + HOW_TO_BUILD.format(python="%d.%d" % sys.version_info[:2]) + ".")
    root = root or ROOT
    for folder in (root / "gpu-bundle", root.parent / "gpu-bundle"):
        if (folder / MANIFEST).is_file():
            return folder
    return None


def fits_here(manifest: dict) -> str | None:
    """Why the bundle's wheels cannot load in this Python, or None when they can."""
    here = "%d.%d" % sys.version_info[:2]
    if manifest.get("python") != here:
        return f"it was made for Python {manifest.get('python')}, and this is Python {here}"
    if sys.platform != "linux" or platform.machine() != manifest.get("arch"):
        return (f"it was made for Linux {manifest.get('arch')}, and this is "
                f"{sys.platform} {platform.machine()}")
    return None


def is_installed(name: str) -> bool:
    """Whether distribution ``name`` is installed for this Python (metadata, not an import)."""
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def runner_missing(has_module) -> list[str]:
    """The notebook-runner modules this Python cannot import."""
    return [m for m in RUNNER_MODULES if not has_module(m)]


def choose(manifest: dict, need_runner: bool, installed=is_installed) -> list[dict]:
    """The wheels to use: the whole runner group if it is needed, and every other wheel
    whose distribution the node lacks (the node's own versions win)."""
    chosen = []
    for wheel in manifest["wheels"]:
        if wheel["group"] == "runner":
            if need_runner:
                chosen.append(wheel)
        elif not installed(wheel["name"]):
            chosen.append(wheel)
    return chosen


def unpack(folder: Path, wheels: list[dict], cache: Path) -> Path:
    """Unpack ``wheels`` of bundle ``folder`` into one folder under ``cache``, once.

    The folder's name depends on the Python version and the wheel files, so a second run
    (or a second chunk) reuses it; it appears only complete (unpacked beside it, renamed).
    """
    files = sorted(w["file"] for w in wheels)
    key = hashlib.sha256(("%d.%d\n" % sys.version_info[:2] + "\n".join(files)).encode())
    target = cache / f"py{sys.version_info[0]}{sys.version_info[1]}-{key.hexdigest()[:12]}"
    if (target / ".complete").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=cache))
    try:
        for name in files:
            with zipfile.ZipFile(folder / name) as wheel:
                wheel.extractall(work)
        # A wheel may keep its modules under name.data/purelib or platlib.
        for data in work.glob("*.data"):
            for lib in ("purelib", "platlib"):
                for item in (data / lib).glob("*") if (data / lib).is_dir() else ():
                    shutil.move(str(item), str(work / item.name))
        (work / ".complete").write_text("\n".join(files) + "\n")
        try:
            work.rename(target)
        except OSError:  # another process finished the same folder first
            if not (target / ".complete").is_file():
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target


def activate(path: Path) -> None:
    """Put ``path`` first on ``sys.path`` and on ``PYTHONPATH`` (child processes, kernels)."""
    sys.path.insert(0, str(path))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(path), os.environ.get("PYTHONPATH")]))
    importlib.invalidate_caches()


def default_cache() -> Path:
    """Where unpacked bundles live: ``_build/`` of the checkout, or the user's cache."""
    build = ROOT / "_build"
    try:
        build.mkdir(exist_ok=True)
        if os.access(build, os.W_OK):
            return build / "gpu-bundle-unpacked"
    except OSError:
        pass
    return Path.home() / ".cache" / "gpucourse" / "gpu-bundle-unpacked"


def use(has_module, explicit: Path | None = None, cache: Path | None = None,
        root: Path | None = None) -> list[dict]:
    """Make this Python able to run notebooks, with the bundle where the node lacks a piece.

    Parameters
    ----------
    has_module : callable
        ``has_module(name) -> bool``, whether this Python can import ``name``.
    explicit : Path, optional
        The bundle folder (``--bundle``); default: see :func:`find`.
    cache : Path, optional
        Where to unpack (default :func:`default_cache`).
    root : Path, optional
        The checkout to look in and beside (default this one).

    Returns
    -------
    list of dict
        The wheels now used from the bundle (empty when none was needed or found).

    Raises
    ------
    BundleError
        When the notebook runner is missing and no usable bundle is there; its message is
        one sentence saying what to do.
    """
    missing = runner_missing(has_module)
    folder = find(explicit, root)
    here = "%d.%d" % sys.version_info[:2]
    if folder is None:
        if missing:
            raise BundleError(f"This Python ({sys.executable}) cannot run notebooks (no "
                              f"{', '.join(missing)}) and there is no gpu-bundle/: "
                              + HOW_TO_BUILD.format(python=here) + ".")
        return []
    manifest = _read_json(folder / MANIFEST)
    chosen = choose(manifest, need_runner=bool(missing))
    if not chosen:
        return []
    why_not = fits_here(manifest)
    if why_not:
        if missing:
            raise BundleError(f"{folder} cannot be used here: {why_not}; "
                              + HOW_TO_BUILD.format(python=here) + ".")
        print(f"({folder} is not used: {why_not}.)")
        return []
    activate(unpack(folder, chosen, cache or default_cache()))
    still = runner_missing(has_module)
    if still:
        raise BundleError(f"{folder} was unpacked but {', '.join(still)} still cannot be "
                          "imported; rebuild it with " + HOW_TO_BUILD.format(python=here) + ".")
    return chosen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write gpu-bundle/ for a GPU node's Python.")
    parser.add_argument("--python", default=None,
                        help="the node's Python version, e.g. 3.12 (default: this Python's)")
    parser.add_argument("--arch", default="x86_64", choices=("x86_64", "aarch64"),
                        help="the node's CPU architecture (default x86_64)")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="default gpu-bundle/")
    parser.add_argument("--max-mib", type=float, default=MAX_MIB,
                        help=f"refuse a larger bundle (default {MAX_MIB:g})")
    args = parser.parse_args(argv)
    try:
        build(args.dest, args.python or None, args.arch, max_mib=args.max_mib)
    except BundleError as exc:
        print(f"make gpu-bundle: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
