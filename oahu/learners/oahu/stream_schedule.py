"""What changes with the number of constraints learned (ours, docs/algorithms.md, "Micro-batches"
and "OAHU's learning extensions"): how many new constraints an update takes (B3, B4), its step
size (S1, D2), how many items are held for mining (G2) and how many anchors a draw mines ahead.

Every count starts from the latest adapted drift (``decay_origin``), as the step-size decay
counts. :class:`~oahu.learners.oahu.update.UpdateStep` inherits it; the device-resident engine
and the learner read it from there.
"""

from __future__ import annotations

import math

from oahu.learners.oahu.config import OAHUConfig

__all__ = ["StreamSchedule"]


class StreamSchedule:
    """The counts of :class:`~oahu.learners.oahu.update.UpdateStep` that follow the stream: each
    method answers for ``learned`` constraints (default: those learned so far).

    >>> from oahu.learners.oahu.learner import OAHU
    >>> step = OAHU(n_features=2, batch_size=256, device="cpu").update_step
    >>> step.update_size(100_000), round(step.step_size(100_000), 4), step.items_held(100_000)
    (100, 0.025, 16384)
    """

    # What the update keeps and the schedule reads.
    config: OAHUConfig
    learned: int  # new (stream) constraints learned: t of the step-size decay
    decay_origin: int  # t when the decay (re)started: 0, or the latest adapted drift

    def since_origin(self, learned: int | None = None) -> int:
        """Constraints learned since the latest adapted drift (or the start): ``learned``, or
        ``self.learned``, less ``decay_origin``; t of the step-size decay (S1)."""
        return (self.learned if learned is None else learned) - self.decay_origin

    def update_size(self, learned: int | None = None) -> int:
        """New constraints the next update takes: ``batch_size`` up to ``max_update_size``
        (B4), but at most a ``batch_ramp``-th of the constraints learned so far (or
        ``learned``), counted as the step-size decay counts them (at least one), so that a
        stream's first updates, where nearly every constraint pulls the same way, are small
        (ours, B3).

        >>> from oahu.learners.oahu.learner import OAHU
        >>> step = OAHU(n_features=2, batch_size=64, batch_ramp=10, device="cpu").update_step
        >>> step.update_size(0), step.update_size(25), step.update_size(10_000)
        (1, 3, 64)
        >>> OAHU(n_features=2, batch_size=1024, device="cpu").update_step.update_size(10**7)
        256
        """
        config = self.config
        since = self.since_origin(learned)
        return max(1, min(config.largest_update, -(-since // config.batch_ramp)))

    def step_size(self, learned: int | None = None) -> float:
        """η, or η / sqrt(1 + t / T) after t learned constraints with ``lr_decay`` T, never below
        ``lr_floor`` · η (ours, S1); after a drift adapted with the "step" adaptation t counts
        from the drift, and the step is raised B-fold at first, back to 1-fold over
        ``drift_boost_span`` constraints (ours, D2). ``learned``: after that many learned
        constraints rather than ``self.learned``.

        Past the floor the step is η · φ; before it, η / sqrt(...) exactly as with no floor, so
        that a floor the decay has not reached changes no model bit.
        """
        config = self.config
        decay = config.lr_decay
        eta = config.learning_rate
        since = self.since_origin(learned)
        span = config.drift_boost_span
        if self.decay_origin and since < span:
            eta *= 1.0 + (config.drift_step_boost - 1.0) * (1.0 - since / span)
        if not decay:
            return eta
        root = math.sqrt(1.0 + since / decay)
        floor = config.lr_floor
        if floor and root * floor > 1.0:
            return eta * floor
        return eta / root

    def items_held(self, learned: int | None = None) -> int:
        """How many items the constraint graph holds for mining after ``learned`` (or
        ``self.learned``) constraints: ``early_item_memory`` until the step-size decay has
        halved the step (3 · ``lr_decay`` constraints after the latest adapted drift, as S1
        counts them), ``item_memory`` from then on, and from the start without a decay or with
        ``early_item_memory`` 0 (ours, G2 in docs/algorithms.md, "Capacity for long streams").

        >>> from oahu.learners.oahu.learner import OAHU
        >>> step = OAHU(n_features=2, device="cpu").update_step
        >>> step.items_held(29_999), step.items_held(30_000)
        (8192, 16384)
        """
        config = self.config
        return min(self._early_then(config.early_item_memory, config.item_memory, learned),
                   config.item_memory)  # fmt: skip

    def anchors_ahead(self, learned: int | None = None) -> int:
        """How many anchors an update that takes fewer mined triplets draws at once after
        ``learned`` (or ``self.learned``) constraints: ``early_mine_ahead`` until the step-size
        decay has halved the step, as :meth:`items_held` counts, ``mine_ahead`` from then on,
        and from the start without a decay or with ``early_mine_ahead`` 0 (ours,
        docs/algorithms.md, "Mining").

        >>> from oahu.learners.oahu.learner import OAHU
        >>> step = OAHU(n_features=2, device="cpu").update_step
        >>> step.anchors_ahead(29_999), step.anchors_ahead(30_000)
        (32, 128)
        """
        return self._early_then(self.config.early_mine_ahead, self.config.mine_ahead, learned)

    def _early_then(self, early: int, later: int, learned: int | None) -> int:
        """``early`` while :meth:`early_in_stream`, ``later`` from then on, and from the start
        when ``early`` is 0 (no early setting)."""
        return early if early and self.early_in_stream(learned) else later

    def early_in_stream(self, learned: int | None = None) -> bool:
        """Whether the step-size decay has yet to halve the step after ``learned`` (or
        ``self.learned``) constraints: fewer than 3 · ``lr_decay`` since the latest adapted
        drift, as S1 counts them; never without a decay."""
        config = self.config
        since = self.since_origin(learned)
        return bool(config.lr_decay) and since < 3 * config.lr_decay
