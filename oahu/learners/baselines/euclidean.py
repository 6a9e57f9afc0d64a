"""The fixed Euclidean metric: the reference every learned metric has to beat."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np

from oahu.capabilities import Capabilities
from oahu.learner import Learner, MetricKind


class Euclidean(Learner):
    """No learning: items embed as themselves and constraints leave the model unchanged.

    It accepts triplets and pairs so that it can sit in any stream; every returned mask is
    all False and ``constraints_used`` stays 0.

    >>> eu = Euclidean(n_features=2)
    >>> eu.learn_triplets([[0.0, 0.0]], [[1.0, 0.0]], [[0.0, 3.0]]).tolist()
    [False]
    >>> eu.embed([[3.0, 4.0]]).tolist()
    [[[3.0, 4.0]]]
    """

    name: ClassVar[str] = "euclidean"
    capabilities: ClassVar[Capabilities] = Capabilities(
        constraint_kinds=("triplet", "pair", "quadruplet")
    )
    metric: ClassVar[MetricKind] = "l2"

    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        return np.zeros(len(a), dtype=bool)

    def _learn_pairs(self, u: np.ndarray, v: np.ndarray, similar: np.ndarray) -> np.ndarray:
        return np.zeros(len(u), dtype=bool)

    def _learn_quadruplets(
        self, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
    ) -> np.ndarray:
        return np.zeros(len(a), dtype=bool)

    def _embed(self, x: np.ndarray, role: Literal["query", "gallery"]) -> np.ndarray:
        return x.copy()[None]  # a copy: never hand back a view of the caller's input

    def _get_state(self) -> dict[str, Any]:
        return {}

    def _set_state(self, state: dict[str, Any]) -> None:
        return None
