"""What makes one machine look like another; no lesson imports it.

``fakecuda`` (with ``fakecuda_smi`` and ``_fakecuda_site``): a fake CUDA runtime at torch's
lowest layer, so that tests run a notebook's GPU-only branches on a CPU. ``envelope`` (with
``_envelope_site``): a T4's limits on a bigger GPU, for ``tools/gpu_check.py --envelope t4``.
"""
