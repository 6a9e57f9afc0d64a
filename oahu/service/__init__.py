"""``oahu run``: the long-running service that learns from a constraint stream while it serves.

It is two processes (docs/architecture.md draws them):

* the **serving process** (:mod:`oahu.service.serving`) answers HTTP queries from immutable
  published snapshots and owns the item store and gallery;
* the **learner process** (:mod:`oahu.service.learning`), spawned by it, runs the consumer
  loop: it owns the learner and the source, learns every constraint, writes dead letters and
  checkpoints, and sends the serving process the learner when a new snapshot is due.

They talk through :mod:`oahu.service.messages`. Shared by both: :mod:`~oahu.service.config`
(the settings), :mod:`~oahu.service.catalog` (items and gallery, the learner keeping a replica),
:mod:`~oahu.service.checkpoints` (learner + stream progress in one file),
:mod:`~oahu.service.status` and :mod:`~oahu.service.metrics`. A checkpoint carries the learner,
the source offsets and the item-store version, so a restart applies every constraint exactly
once; see "The service" in README.md and docs/delivery.md.
"""
