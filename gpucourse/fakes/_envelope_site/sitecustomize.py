"""Kernels of ``tools/gpu_check.py --envelope t4`` see their GPU limited to a T4's envelope.

gpu_check puts this folder first on ``PYTHONPATH`` and sets ``GPUCOURSE_ENVELOPE=t4``; the
limits (``gpucourse.fakes.envelope``) are applied right after ``torch`` is imported. Any other
``sitecustomize`` further along the path (the fake CUDA runtime's, in the tests) runs first,
so that the envelope limits the machine that process sees.
"""

import importlib.machinery
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_other_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one hides, with this folder off the path meanwhile (that
    one may chain to the next in turn, and must not find this one again)."""
    saved = list(sys.path)
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        sys.path[:] = rest
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            sys.path[:] = saved


_chain_other_sitecustomize()
if os.environ.get("GPUCOURSE_ENVELOPE") == "t4":
    package_root = os.path.dirname(os.path.dirname(HERE))
    if importlib.util.find_spec("gpucourse") is None:
        sys.path.append(package_root)
    from gpucourse.fakes.envelope import install_on_import

    install_on_import()
