"""Install the helper into the Colab-like environment as a notebook's setup cell
does, and fail if that upgraded, downgraded or removed any package Colab has.

Run by ``make test-colab`` with the runtime's environment's own Python
(``.venv-colab-current``, or ``.venv-colab-kaggle`` for ``RUNTIME=kaggle``):

    .venv-colab-current/bin/python tools/colab_install_check.py baseline   # right after creating it
    .venv-colab-current/bin/python tools/colab_install_check.py install    # every test run

``baseline`` records ``pip freeze`` of the fresh environment (Colab's stack).
``install`` runs ``pip install "gpucourse @ file://<this checkout>"`` — the
setup cell's ``pip install "gpucourse @ git+https://...@main"`` without the
network — and compares ``pip freeze`` with the baseline. Packages the helper
adds are listed; any package of the baseline that changed is an error.

An environment is kept between runs (CI keeps one per runtime while its
constraints stay the same), so ``install`` first puts it back to the baseline:
what an earlier run's install added is removed, what it changed is reinstalled
at the baseline's version. Every run then starts from the platform's stack.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = Path(sys.prefix) / "colab-baseline.txt"


def freeze() -> dict[str, str]:
    """``{normalised name: version or URL}`` of every installed package."""
    out = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all"],
                         check=True, capture_output=True, text=True).stdout
    packages = {}
    for line in out.splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
        elif " @ " in line:
            name, version = line.split(" @ ", 1)
        else:
            continue
        packages[name.strip().lower().replace("_", "-")] = version.strip()
    return packages


def changes(before: dict[str, str], after: dict[str, str], ignore=("gpucourse", "pip")):
    """(changed, removed, added): what happened to ``before`` in ``after``."""
    changed = {n: (v, after[n]) for n, v in before.items() if n in after and after[n] != v and n not in ignore}
    removed = sorted(n for n in before if n not in after and n not in ignore)
    added = sorted(n for n in after if n not in before and n not in ignore)
    return changed, removed, added


def reset(baseline: dict[str, str]) -> None:
    """Put this environment back to ``baseline``: remove what was added, reinstall what changed."""
    changed, removed, added = changes(baseline, freeze(), ignore=("pip",))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    if added:
        subprocess.run([*pip, "uninstall", "--yes", "--quiet", *added], check=True)
    back = [f"{n}=={baseline[n]}" for n in sorted({*changed, *removed}) if "://" not in baseline[n]]
    if back:
        subprocess.run([*pip, "install", "--quiet", "--no-deps", *back], check=True)
    if added or back:
        print(f"put back the baseline: removed {', '.join(added) or 'nothing'}; "
              f"reinstalled {', '.join(back) or 'nothing'}")


def main(action: str) -> int:
    if action == "baseline":
        BASELINE.write_text("".join(f"{n}=={v}\n" for n, v in sorted(freeze().items())))
        print(f"recorded {BASELINE}")
        return 0
    if not BASELINE.exists():
        print(f"{BASELINE} is missing: recreate the environment (rm -rf {sys.prefix}; make test-colab).")
        return 1
    before = dict(line.split("==", 1) for line in BASELINE.read_text().splitlines())
    reset(before)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    f"gpucourse @ {ROOT.as_uri()}"], check=True)
    changed, removed, added = changes(before, freeze())
    print(f"installing the helper added {len(added)} packages: {', '.join(added) or 'none'}")
    if changed or removed:
        for name, (old, new) in sorted(changed.items()):
            print(f"  CHANGED {name}: Colab has {old}, the helper's install made it {new}")
        for name in removed:
            print(f"  REMOVED {name} (Colab has it)")
        print("The setup cell must never replace what Colab already has: relax the helper's "
              "requirement in pyproject.toml so that Colab's version satisfies it.")
        return 1
    print("nothing Colab already has was upgraded, downgraded or removed.")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("baseline", "install"):
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
