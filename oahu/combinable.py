"""Combining copies of one learner (a learning group's members): what a learner hands over to
be averaged or summed, and how it continues from the result.

A learner that declares ``capabilities.combines_parameters`` implements ``_averaged_values`` and
``_set_averaged_values``; its counters (constraints seen, used, updates, skips by reason, and
its own through ``_summed_values``) are summed, so that the copies' totals count the group's
constraints once each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

if TYPE_CHECKING:
    from collections import Counter

    from oahu.capabilities import Capabilities

__all__ = ["Combinable", "CombineValues"]


@dataclass(frozen=True)
class CombineValues:
    """A learner's values as combining copies of it sees them: ``averaged``, a flat float64
    tensor (its parameters, on its device), and ``summed``, float64 counters.

    >>> CombineValues(torch.zeros(2, dtype=torch.float64), np.ones(3)).summed.tolist()
    [1.0, 1.0, 1.0]
    """

    averaged: torch.Tensor
    summed: np.ndarray


class Combinable:
    """The combining half of :class:`~oahu.learner.Learner`, which inherits it; it reads and
    sets the learner's counters."""

    # What the learner holds and combining reads and sets.
    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    skip_reasons: ClassVar[tuple[str, ...]]
    constraints_seen: int
    constraints_used: int
    updates: int
    skipped: Counter[str]

    def combine_values(self) -> CombineValues:
        """What combining copies of this learner works on (``capabilities.combines_parameters``):
        the values averaged (its parameters) and the counters summed.

        >>> from oahu.learners.oahu.learner import OAHU
        >>> values = OAHU(n_features=2, hidden_width=4, device="cpu").combine_values()
        >>> values.summed.tolist()  # seen, used, updates, skipped by reason, then OAHU's own
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        """
        if not self.capabilities.combines_parameters:
            raise ValueError(f"{self.name!r} declares no way to combine copies of its parameters")
        counters = [self.constraints_seen, self.constraints_used, self.updates]
        counters += [self.skipped[reason] for reason in self.skip_reasons]
        summed = np.concatenate([np.asarray(counters, np.float64), self._summed_values()])
        return CombineValues(self._averaged_values(), summed)

    def set_combined_values(self, values: CombineValues) -> None:
        """Continue from combined values (:meth:`combine_values`, each averaged or summed over the
        copies): every copy that sets the same values holds the same model and counters."""
        summed = np.rint(values.summed).astype(np.int64)
        self.constraints_seen, self.constraints_used, self.updates = (int(v) for v in summed[:3])
        reasons = len(self.skip_reasons)
        for reason, count in zip(self.skip_reasons, summed[3 : 3 + reasons], strict=True):
            if count or reason in self.skipped:
                self.skipped[reason] = int(count)
        self._set_summed_values(summed[3 + reasons :])
        self._set_averaged_values(values.averaged)

    def _averaged_values(self) -> torch.Tensor:
        """The values that combining averages, float64 and flat, on the learner's device."""
        raise NotImplementedError

    def _set_averaged_values(self, values: torch.Tensor) -> None:
        raise NotImplementedError

    def _summed_values(self) -> np.ndarray:
        """A learner's own counters that combining sums (none by default)."""
        return np.zeros(0, np.float64)

    def _set_summed_values(self, values: np.ndarray) -> None:
        """Set what ``_summed_values`` returned, summed over the copies."""
