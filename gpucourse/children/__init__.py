"""Scripts an episode runs in a process of its own (``python -m gpucourse.children.NAME``), so that
a crash, a grabbed GPU or a kill cannot end the learner's kernel; the episode shows their key lines.

``tf_memory_child`` and ``fragmentation_child`` (episode 6), ``survive_train`` (episode 11). The
scripts of episodes 9 and 13 live with their launcher in ``gpucourse.distributed``.
"""
