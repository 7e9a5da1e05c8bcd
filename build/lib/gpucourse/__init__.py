"""Helpers for the course *GPUs for Machine Learning*.

Small on purpose: the notebooks show the real PyTorch / TensorFlow calls; this
package only holds what would otherwise be copied into every episode.

* ``gpucourse.settings`` — run modes (quick / reduced / full), offline switch, cache dir
* ``gpucourse.device``   — what GPUs PyTorch and TensorFlow see; the no-GPU banner
* ``gpucourse.timing``   — timing that waits for the GPU (warm-up, synchronise, median)
* ``gpucourse.data``     — data sets, safe downloads, offline stand-ins
* ``gpucourse.exercises`` / ``gpucourse.checks`` — checked exercises
"""

__version__ = "0.1.0"
