"""``oahu run``: the long-running service that learns from a constraint stream while it serves.

One training thread owns the learner and the source; queries read immutable published
snapshots; checkpoints carry the learner, the source offsets and the item-store version so that a
restart applies every constraint exactly once. See "The service" in README.md.
"""
