"""Mining triplets among the items a :class:`~oahu.learners.oahu.constraint_graph.ConstraintGraph`
holds (ours; docs/algorithms.md, "Mining"): an anchor drawn from the reservoir, its nearest
known-similar item and the nearest of ``candidates`` items known to be dissimilar to it, ranked
by the cached embeddings. Kept apart from the graph's knowledge (union-find, links, the
reservoir), which it reads but never changes.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["KEPT_SCANS", "RUN_ANCHORS", "GraphMining", "MiningRun"]

# A run of anchors of one component that share one draw of candidates: their positions among
# the draws, their slots, and the drawn (positives, negatives) slots.
MiningRun = tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]
# Anchors of one component that share one draw of candidates at most: a micro-batch mines
# hundreds of triplets from one component, and each RUN_ANCHORS of them meet candidates of their
# own, as many different ones as strict mining gives an anchor.
RUN_ANCHORS = 32
# Components whose scans are kept at most (the oldest forgotten first): each holds up to two
# arrays of the held items' slots, 128 KiB at 16,384 items, and a graph where nothing held moves
# for long would otherwise keep one per component it ever drew.
KEPT_SCANS = 64


class GraphMining:
    """The mining half of :class:`~oahu.learners.oahu.constraint_graph.ConstraintGraph`, which
    inherits it; its methods read the graph's held items, components and links."""

    # What the graph keeps and mining reads.
    rng: np.random.Generator
    size: int
    next_component: int
    component: np.ndarray
    keys: np.ndarray
    rows: np.ndarray
    embeddings: np.ndarray
    links: dict[int, set[int]]
    members: dict[int, int]
    held_links: dict[int, set[int]]
    held_revision: int

    def __init__(self) -> None:
        # Mining's own state: triplets mined and not taken yet (their slots, and the keys of the
        # items in them then), scratch flags by component id (all False between uses, see
        # _linked_mask) and the scans kept while ``held_revision`` stands (see _scan).
        self.waiting = np.zeros((0, 3), np.int64)
        self.waiting_keys = np.zeros((0, 3), np.int64)
        self._flags = np.zeros(1024, dtype=bool)
        self._scans: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._scans_revision = -1

    def mine(self, k: int, alpha: np.ndarray, candidates: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``k`` triplets (n, 3, d) mined as the module describes, with their items' slots
        (n, 3), in the order their anchors were drawn; nearness is Σ_l α(l) f(l)·f(l)' between
        the cached embeddings. Anchors without a known similar and a known dissimilar item are
        skipped, so fewer (or none) may come back.

        Anchors of one component share one scan of the reservoir for its positives and
        negatives, and up to ``RUN_ANCHORS`` of them one draw of candidates, ranked with one
        matrix product, so that a step mining hundreds of triplets (a micro-batch's) costs a few
        products per component rather than a pass of Python per triplet.
        """
        width = self.rows.shape[1]
        weights = np.asarray(alpha, np.float32)[:, None]  # (L, 1): α on the anchors' side
        drawn, found = [], []
        for group, anchors, pools in self.runs(k, candidates):
            triplets = self._nearest(anchors, *pools, weights)
            if triplets is not None:
                drawn.append(group[triplets[1]])
                found.append(triplets[0])
        if not found:
            return np.zeros((0, 3, width), np.float32), np.zeros((0, 3), np.int64)
        slots = np.concatenate(found)[np.argsort(np.concatenate(drawn))]
        return self.rows[slots], slots

    def runs(self, k: int, candidates: int) -> Iterator[MiningRun]:
        """What :meth:`mine` ranks, for ranking elsewhere too (on a device,
        :mod:`oahu.learners.oahu.device_mining`): draw ``k`` anchors and yield, run by run, the
        positions of a run's anchors among the draws, their slots, and the run's draw of
        candidates: at most ``candidates`` of the component's other held items and as many of
        its known-dissimilar ones. Anchors that cannot give a triplet are left out."""
        if k < 1 or self.size < 3 or not self.links:
            return
        held = self.component[: self.size]
        anchors = self.rng.integers(0, self.size, size=k)
        # Anchors by component, in the order each component's first anchor was drawn (not by
        # component id: ids are renumbered by a checkpoint, and the draws must not depend on
        # them).
        groups: dict[int, list[int]] = {}
        for position, root in enumerate(held[anchors].tolist()):
            groups.setdefault(root, []).append(position)
        members, held_links = self.members, self.held_links
        if self._scans_revision != self.held_revision:  # something held moved: scan afresh
            self._scans.clear()
            self._scans_revision = self.held_revision
        run_anchors: list[np.ndarray] = []  # each run's positions among the draws
        pools: list[tuple[np.ndarray, np.ndarray]] = []  # its positives and negatives
        for own, positions in groups.items():
            linked = held_links[own]
            # Without another held item of its component there is no positive: skip the scans.
            if not linked or members[own] < 2:
                continue
            positives, negatives = self._scan(own, linked, held)
            if not len(negatives):  # its known-dissimilar components are not held now
                continue
            # At most RUN_ANCHORS anchors share one draw of candidates, however many a
            # micro-batch mines from the component.
            for share in range(0, len(positions), RUN_ANCHORS):
                run_anchors.append(np.asarray(positions[share : share + RUN_ANCHORS]))
                pools.append((positives, negatives))
        for group, drawn in zip(run_anchors, self._draw(pools, candidates), strict=True):
            yield group, anchors[group], drawn

    def _scan(self, own: int, linked: set[int], held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The held slots of component ``own`` and of the components ``linked`` to it, in slot
        order: two passes over the held items, which late in a stream cost a strict update more
        than its ranking. They are kept until something held moves (``held_revision``): once
        the reservoir is full an item is placed ever more rarely, and most draws of anchors
        find their components as the last one left them. Read-only: every run shares them."""
        scan = self._scans.get(own)
        if scan is None:
            positives = np.flatnonzero(held == own)
            negatives = np.flatnonzero(self._linked_mask(linked, held))
            positives.flags.writeable = negatives.flags.writeable = False
            if len(self._scans) >= KEPT_SCANS:
                del self._scans[next(iter(self._scans))]
            scan = self._scans[own] = (positives, negatives)
        return scan

    def _draw(
        self, pools: list[tuple[np.ndarray, np.ndarray]], candidates: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """At most ``candidates`` of each run's positives and of its negatives (with
        replacement; all of them when fewer). The draws of every run are made in one call:
        ``Generator.integers`` with an array of bounds draws what one call per bound would, in
        order, and a call's ~10 µs of overhead was most of what a run's draws cost."""
        bounds = [
            len(pool) for pair in pools for pool in pair if candidates and len(pool) > candidates
        ]
        if not bounds:
            return pools
        draws = iter(self.rng.integers(0, np.repeat(bounds, candidates)).reshape(-1, candidates))
        return [
            tuple(
                pool[next(draws)] if candidates and len(pool) > candidates else pool
                for pool in pair
            )
            for pair in pools
        ]

    def _nearest(
        self,
        anchors: np.ndarray,
        positives: np.ndarray,
        negatives: np.ndarray,
        weights: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Triplets (n, 3) of slots for ``anchors`` of one component: the nearest of the drawn
        ``positives`` (the anchor itself excluded) and of the drawn ``negatives``, with which
        anchors got one (None when none did)."""
        queries = (self.embeddings[anchors] * weights).reshape(len(anchors), -1)
        pool = self.embeddings[np.concatenate([positives, negatives])]
        nearness = pool.reshape(len(pool), -1) @ queries.T  # (candidates, anchors)
        near_positive = nearness[: len(positives)]
        near_positive[positives[:, None] == anchors] = -np.inf  # not itself
        best = near_positive.argmax(0)
        has_positive = near_positive[best, np.arange(len(anchors))] > -np.inf
        if not has_positive.any():
            return None
        nearest_negative = negatives[nearness[len(positives) :].argmax(0)]
        triplets = np.stack([anchors, positives[best], nearest_negative], axis=1)
        return triplets[has_positive], has_positive

    def take(
        self, k: int, alpha: np.ndarray, candidates: int, ahead: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``k`` mined triplets (n, 3, d) and their slots (n, 3), fewer when the graph does not
        reveal enough: the oldest waiting ones first, after mining at least ``ahead`` anchors
        when too few wait. A waiting triplet whose slots changed hands since it was mined is
        dropped.

        Mining ahead is what keeps a strict update's mining cheap (it takes two or four
        triplets): most of mining's cost is per component scanned and per draw of candidates
        gathered, and one draw of ``ahead`` anchors pays it once for all of them, which wait,
        ranked by embeddings at most ``ahead / k`` updates older than mining on the spot would
        use (how many: ``UpdateStep.anchors_ahead``)."""
        if len(self.waiting) < k:
            _, slots = self.mine(max(k - len(self.waiting), ahead), alpha, candidates)
            self.waiting = np.concatenate([self.waiting, slots])
            self.waiting_keys = np.concatenate([self.waiting_keys, self.keys[slots]])
        slots, keys = self.waiting[:k], self.waiting_keys[:k]
        self.waiting, self.waiting_keys = self.waiting[k:], self.waiting_keys[k:]
        slots = slots[(self.keys[slots] == keys).all(1)]
        return self.rows[slots], slots

    def _linked_mask(self, linked: set[int], held: np.ndarray) -> np.ndarray:
        """Which held items are in a component of ``linked``: O(len(linked) + size), where
        ``np.isin`` would sort."""
        if self.next_component > len(self._flags):
            self._flags = np.zeros(2 * self.next_component, dtype=bool)
        ids = np.fromiter(linked, np.int64, len(linked))
        self._flags[ids] = True
        mask = self._flags[held]
        self._flags[ids] = False
        return mask

    def refresh(self, slots: np.ndarray, embeddings: np.ndarray) -> None:
        """Cache newer embeddings (n_depths, n, E) of held items ``slots`` (n,)."""
        self.embeddings[slots] = embeddings.swapaxes(0, 1)
