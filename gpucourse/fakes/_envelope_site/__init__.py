"""The ``sitecustomize`` that notebook kernels of ``tools/gpu_check.py --envelope t4`` run."""
