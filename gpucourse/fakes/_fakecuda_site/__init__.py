"""The ``sitecustomize`` that child processes of a ``fake_gpu`` block run (a package so that it installs)."""
