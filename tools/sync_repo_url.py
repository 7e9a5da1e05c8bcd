"""Point every notebook's Colab and Kaggle badges at the repository named in
_config.yml (repository.url, repository.branch), and write its setup cell (the
cell tagged colab-setup: on Colab or Kaggle, pip install the helper from there).

    python tools/sync_repo_url.py          # rewrite notebooks in place
    python tools/sync_repo_url.py --check  # exit 1 if any notebook disagrees

A fork edits _config.yml, runs this, then `make exercises`, and commits.
"""

from __future__ import annotations

import argparse
import sys

from coursetools import ROOT, dumps, notebooks, read, repository, sync_notebook


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report notebooks that disagree")
    args = parser.parse_args(argv)
    repo, branch = repository()
    changed = []
    for path in notebooks():
        nb = read(path)
        rel = path.relative_to(ROOT).as_posix()
        if sync_notebook(nb, rel, repo, branch):
            changed.append(path)
            if not args.check:
                tmp = path.with_suffix(".ipynb.tmp")
                tmp.write_text(dumps(nb))
                tmp.replace(path)
    for path in changed:
        print(("disagrees: " if args.check else "updated: ") + str(path.relative_to(ROOT)))
    if args.check and changed:
        return 1
    print(f"{len(notebooks()) - len(changed) if args.check else len(notebooks())} notebooks point at {repo}@{branch}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
