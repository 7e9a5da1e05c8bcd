"""Child processes of a fake-GPU run see the same fake machine (``gpucourse.fakes.fakecuda``).

``fake_gpu`` puts this folder first on ``PYTHONPATH`` and describes its machine in
``GPUCOURSE_FAKE_GPU`` (e.g. ``T4x2``) while it is active, so every Python process started
meanwhile (torchrun's workers, episode 11's training run, the memory demonstrations) runs
this file at start-up. It only waits for ``torch`` (and ``tensorflow``) to be imported, then
fakes them as the parent did: a child that never imports torch pays nothing.

Any other ``sitecustomize`` further along the path still runs afterwards.
"""

import importlib.machinery
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_other_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one hides (a distribution's or a virtualenv's), if any."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("GPUCOURSE_FAKE_GPU"):
    package_root = os.path.dirname(os.path.dirname(HERE))   # the folder that holds gpucourse/
    if importlib.util.find_spec("gpucourse") is None:
        sys.path.append(package_root)
    from gpucourse.fakes.fakecuda import install_on_import

    install_on_import(os.environ["GPUCOURSE_FAKE_GPU"])

_chain_other_sitecustomize()
