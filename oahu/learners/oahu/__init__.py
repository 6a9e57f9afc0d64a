"""OAHU: an over-complete MLP with one embedding head per depth and hedge weights over depths.

One module per part, read in the order a constraint meets them:

* :mod:`~oahu.learners.oahu.learner`: :class:`OAHU`, the :class:`~oahu.learner.Learner`: builds
  the pieces below from its config, owns their state and the checkpoints;
* :mod:`~oahu.learners.oahu.config`: :class:`OAHUConfig`, its hyper-parameters, and ``PRESETS``;
* :mod:`~oahu.learners.oahu.update`: one update, stage by stage, each stage calling a piece;
* :mod:`~oahu.learners.oahu.replay_memory`, :mod:`~oahu.learners.oahu.constraint_graph`: past
  constraints replayed, and triplets mined from what the stream revealed;
* :mod:`~oahu.learners.oahu.network`: the multi-depth network, its forward pass and step;
* :mod:`~oahu.learners.oahu.loss`: a constraint's distances, the per-depth losses (ABTL,
  Eq. 6-13; the margin loss, ours) and the chain rule back to the embeddings;
* :mod:`~oahu.learners.oahu.prequential`: each depth scored before it learns;
* :mod:`~oahu.learners.oahu.hedge`: the hedge over depths (Eq. 20) and its signals (the
  training loss; the prequential mistakes, ours);
* :mod:`~oahu.learners.oahu.self_paced`: self-paced selection of the constraints to learn;
* :mod:`~oahu.learners.oahu.arrays`, :mod:`~oahu.learners.oahu.device`: the arithmetic shared
  by numpy and torch, and where the learner runs.
"""

from oahu.learners.oahu.config import PRESETS, OAHUConfig
from oahu.learners.oahu.learner import OAHU

__all__ = ["OAHU", "PRESETS", "OAHUConfig"]
