"""Self-paced selection of constraints in a stream, after LEAP (ours: its adaptation to one pass).

LEAP (Thangarasa and Taylor, "Self-paced learning with adaptive deep visual embeddings", BMVC
2018, Algorithm 2) learns from the easy samples first and admits harder ones as the model matures,
which keeps wrong labels (hard by nature: the model disagrees with them) out of the early model.
Its self-paced regulariser, −λ Σ w − γ ‖w‖₂,₁ over clusters of the current embedding, is solved in
closed form: sample i of a cluster, ranked by its loss within that cluster, is selected (w = 1)
when

    ℓ < λ + γ (√i − √(i−1))                                                          (SP1)

and λ, γ grow by factors β₁, β₂ each round, so that harder samples are admitted later.

One pass over a stream has no rounds and no dataset to rank; here (docs/algorithms.md,
"Self-paced learning"):

* a *round* is ``round_length`` constraints: after r rounds λ = λ₀ β^r and γ = γ₀ β^r;
* a constraint's loss ℓ is its loss under the current model, before it is learned;
* its cluster is that of its first item's position, assigned by river's online k-means
  (``river.cluster.KMeans``) over the leading ``n_coordinates`` coordinates of that item's
  embedding, learned as the stream goes;
* a constraint with ℓ < λ is easy and selected; otherwise its rank i is its place among the hard
  ones (ℓ ≥ λ) of the last ``round_length`` constraints of its cluster, and (SP1) decides; so
  each cluster admits its easiest hard constraints first (LEAP's diversity term), and a burst of
  hard constraints in one cluster is mostly held back;
* a held-back constraint is not learned and does not enter the learner's memories; one pass
  does not come back to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from river import cluster


class SelfPacedSelector:
    """Which new constraints to learn now (LEAP's selection adapted to a stream, see module).

    Parameters
    ----------
    start : λ₀, the loss below which a constraint is easy at first.
    diversity : γ₀, the extra allowance of a cluster's easiest hard constraint.
    growth : β, the factor λ and γ grow by each round.
    round_length : constraints per round, and the window hard constraints are ranked in.
    n_clusters, n_coordinates : the online k-means, over that many leading coordinates.
    seed : the k-means's seed (its initial centres).

    >>> pace = SelfPacedSelector(start=0.1, diversity=0.2, growth=2.0, round_length=4,
    ...                          n_clusters=1, n_coordinates=2, seed=0)
    >>> where = np.zeros((1, 2))
    >>> # easy; the first hard one; the second, ranked after it: 0.9 > 0.1 + 0.2 (√2 − 1)
    >>> [bool(pace.select(np.array([loss]), where)[0]) for loss in (0.05, 0.25, 0.9)]
    [True, True, False]
    >>> pace.held_back, pace.thresholds()
    (1, (0.1, 0.2))
    >>> _ = pace.select(np.zeros(1), where[:1])  # the 4th constraint ends the first round
    >>> pace.thresholds()
    (0.2, 0.4)
    """

    def __init__(
        self,
        start: float,
        diversity: float,
        growth: float,
        round_length: int,
        n_clusters: int,
        n_coordinates: int,
        seed: int,
    ) -> None:
        self.start = start
        self.diversity = diversity
        self.growth = growth
        self.round_length = round_length
        self.n_coordinates = n_coordinates
        self.kmeans = cluster.KMeans(n_clusters=n_clusters, halflife=0.05, sigma=0.1, seed=seed)
        # The hard constraints of the last round_length: their losses and clusters (ring).
        self._losses = np.full(round_length, np.inf)
        self._clusters = np.full(round_length, -1, dtype=np.int64)
        self.seen = 0
        self.held_back = 0

    def thresholds(self) -> tuple[float, float]:
        """(λ, γ) now: λ₀ β^r and γ₀ β^r after r whole rounds."""
        factor = self.growth ** (self.seen // self.round_length)
        return self.start * factor, self.diversity * factor

    def select(self, losses: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """For new constraints in stream order, their losses (n,) and their first items'
        embeddings (n, ≥ n_coordinates): a bool mask of those to learn now.

        The constraints of one call (one update's) are judged together, against the window as
        it stood before them, with λ and γ of the call's start: one at a time for a strict
        learner, at a flat cost per constraint for a micro-batch. The k-means learns the call's
        first item and assigns all of them to their nearest centre.
        """
        n = len(losses)
        keep = np.ones(n, dtype=bool)
        if not n:
            return keep
        lam, gamma = self.thresholds()
        points = np.asarray(positions, dtype=np.float64)[:, : self.n_coordinates]
        self.kmeans.learn_one(dict(enumerate(points[0].tolist())))
        centres = self.kmeans.centers
        dims = points.shape[1]
        table = np.array([[centres[c][k] for k in range(dims)] for c in sorted(centres)])
        where = ((points[:, None, :] - table[None]) ** 2).sum(-1).argmin(1)
        window = min(n, self.round_length)  # a call longer than the window keeps its last ones
        slots = (self.seen + np.arange(n - window, n)) % self.round_length
        self._losses[slots], self._clusters[slots] = np.inf, -1
        hard = np.flatnonzero(losses >= lam)
        if len(hard):
            # Rank among the window's hard constraints of the same cluster (1 = the easiest).
            same = self._clusters[None, :] == where[hard, None]
            below = same & (self._losses[None, :] < losses[hard, None])
            rank = 1 + below.sum(1)
            keep[hard] = losses[hard] < lam + gamma * (np.sqrt(rank) - np.sqrt(rank - 1))
            recent = hard[hard >= n - window]
            at = (self.seen + recent) % self.round_length
            self._losses[at], self._clusters[at] = losses[recent], where[recent]
        self.seen += n
        self.held_back += int(np.count_nonzero(~keep))
        return keep

    def get_state(self) -> dict[str, Any]:
        centers = self.kmeans.centers
        return {
            "centers": [[float(centers[c][k]) for k in sorted(centers[c])] for c in centers],
            "losses": self._losses.tolist(),
            "clusters": self._clusters.tolist(),
            "seen": self.seen,
            "held_back": self.held_back,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        for c, values in enumerate(state["centers"]):
            # Centres are made whole at the first point; an unused k-means keeps its seeded ones.
            self.kmeans.centers[c].update(enumerate(values))
        self._losses = np.asarray(state["losses"], dtype=np.float64)
        self._clusters = np.asarray(state["clusters"], dtype=np.int64)
        self.seen = int(state["seen"])
        self.held_back = int(state["held_back"])
