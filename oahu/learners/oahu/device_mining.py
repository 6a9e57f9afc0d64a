"""Mining ranked on the device, for device-resident steps (ours; docs/algorithms.md,
"Device-resident steps").

Mining (:mod:`oahu.learners.oahu.constraint_graph`) has two halves. Knowing which held items are
similar to an anchor and which are known dissimilar is union-find and set bookkeeping: the host's
constraint graph keeps it, and draws the anchors and each run's candidates
(:meth:`~oahu.learners.oahu.constraint_graph.ConstraintGraph.runs`), laid out for one batch
(:class:`MiningCandidates`). Ranking the candidates by Σ_l α(l) f(l)·f(l)' is arithmetic on
the cached embeddings of the held items: a few hundred kilobytes gathered per run, which on the
host cost more than a micro-batch's whole update on a GPU. :class:`DeviceMining` keeps a copy
of the held items (rows, embeddings, keys) on the device, ranks a block's candidates there in
one batch, writes the mined triplets straight into the block's inputs, and refreshes the held
items' embeddings from the updates that learn them, so that neither the mined rows nor their
embeddings cross to the host.

The host's graph stays the authority on which item a slot holds: the slots its ``observe``
writes are copied to the device (through pinned buffers, queued behind the block in flight), and
a refresh writes an embedding only where the slot still holds the item that was mined.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from oahu.learners.oahu.constraint_graph import ConstraintGraph
from oahu.learners.oahu.graph_mining import RUN_ANCHORS, MiningRun
from oahu.learners.oahu.host_transfers import HostBuffers

__all__ = ["DeviceMining", "MiningCandidates"]

# Candidates' embeddings gathered at once while ranking (floats): a block's runs are ranked in
# chunks of at most this many, about 256 MB.
_GATHERED = 1 << 26


@dataclass(frozen=True)
class MiningCandidates:
    """Anchors and candidates drawn for mining, laid out for ranking them in one batch: run r
    holds up to ``width`` anchors of one component (``anchors[r]``, slots; -1: none), each
    anchor's position among the draws (``positions[r]``), and the run's drawn candidates
    (``pool[r]``, slots, -1: none), its ``n_positive[r]`` positives first, then its negatives.

    >>> runs = [(np.array([1, 0]), np.array([5, 6]), (np.array([6, 5]), np.array([2])))]
    >>> c = MiningCandidates.from_runs(runs, width=3, pool=4)
    >>> c.anchors.tolist(), c.positions.tolist(), c.pool.tolist(), c.n_positive.tolist()
    ([[5, 6, -1]], [[1, 0, -1]], [[6, 5, 2, -1]], [2])
    """

    anchors: np.ndarray  # (runs, width)
    positions: np.ndarray  # (runs, width)
    pool: np.ndarray  # (runs, pool)
    n_positive: np.ndarray  # (runs,)

    @classmethod
    def from_runs(
        cls,
        runs: list[MiningRun],
        width: int,
        pool: int,
    ) -> MiningCandidates:
        """From :meth:`ConstraintGraph.runs`; ``pool`` at least every run's candidates (0: as
        many as the largest run has)."""
        pool = max([pool, *(len(p) + len(n) for _, _, (p, n) in runs)])
        anchors = np.full((len(runs), width), -1, np.int64)
        positions = np.full((len(runs), width), -1, np.int64)
        candidates = np.full((len(runs), pool), -1, np.int64)
        n_positive = np.zeros(len(runs), np.int64)
        for r, (group, slots, (positives, negatives)) in enumerate(runs):
            anchors[r, : len(slots)] = slots
            positions[r, : len(group)] = group
            candidates[r, : len(positives)] = positives
            candidates[r, len(positives) : len(positives) + len(negatives)] = negatives
            n_positive[r] = len(positives)
        return cls(anchors, positions, candidates, n_positive)


class DeviceMining:
    """The held items of a constraint graph on ``device``, and mining ranked there into
    ``mined_rows`` rows of triplets (the block's mined rows, one after the other).

    >>> import numpy as np
    >>> from oahu.learners.oahu.constraint_graph import ConstraintGraph
    >>> rng = np.random.default_rng(0)
    >>> graph = ConstraintGraph(capacity=8, n_features=1, n_depths=1, embedding_dim=2, rng=rng)
    >>> rows = np.array([[[0.0], [0.1], [5.0]], [[0.1], [0.2], [5.1]]], np.float32)
    >>> f = np.array([[[1, 0], [1, 0]], [[0.9, 0.1], [1, 0]], [[0, 1], [0, 1]]], np.float32)
    >>> written = graph.observe(rows, f[None])  # (depths, roles, triplets, E)
    >>> mining = DeviceMining(graph, mined_rows=6, device=torch.device("cpu"), pinned=False)
    >>> mining.mirror(graph)
    >>> mining.mine(graph, np.arange(6), torch.ones(1), candidates=8)
    >>> triplets = mining.slots[mining.valid]  # anchor, positive, negative: graph slots
    >>> len(triplets) > 0, all(graph.component[a] == graph.component[p] != graph.component[n]
    ...                        for a, p, n in triplets.tolist())
    (True, True)
    """

    def __init__(
        self, graph: ConstraintGraph, mined_rows: int, device: torch.device, pinned: bool
    ) -> None:
        capacity, features = graph.rows.shape
        depths, dim = graph.embeddings.shape[1:]
        self.device = device
        self.pinned = pinned
        self.spare = capacity  # the held items' row that takes writes that must go nowhere
        zeros = functools.partial(torch.zeros, device=device)
        self.rows = zeros(capacity + 1, features)
        self.embeddings = zeros(capacity + 1, depths, dim)
        self.keys = zeros(capacity + 1, dtype=torch.long)
        # Mined triplets of a block: rows, whether each is there, their items' slots and keys
        # then; one spare row last.
        self.mined_rows = mined_rows  # and the spare one's index
        self.mined = zeros(mined_rows + 1, 3, features)
        self.valid = zeros(mined_rows + 1, dtype=torch.bool)
        self.slots = zeros(mined_rows + 1, 3, dtype=torch.long)
        self.mined_keys = zeros(mined_rows + 1, 3, dtype=torch.long)
        # The slots a graph's observe wrote, on their way to the device.
        self._written = [
            zeros(capacity, dtype=torch.long),
            zeros(capacity, features),
            zeros(capacity, depths, dim),
            zeros(capacity, dtype=torch.long),
        ]
        self._written_staging = HostBuffers(self._written, pinned=pinned)
        self._candidates: list[torch.Tensor] = []
        self._candidates_staging: HostBuffers | None = None
        self.mirrored: tuple[int, int] | None = None  # (id, restores) of the graph held

    # ---------------------------------------------------------------- the held items
    def mirror(self, graph: ConstraintGraph) -> None:
        """Take every held item of ``graph`` (nothing may be in flight)."""
        n = graph.size
        self.keys.fill_(0)
        self.rows[:n].copy_(torch.from_numpy(graph.rows[:n]))
        self.embeddings[:n].copy_(torch.from_numpy(graph.embeddings[:n]))
        self.keys[:n].copy_(torch.from_numpy(graph.keys[:n]))
        self.mirrored = (id(graph), graph.restores)

    def written(self, graph: ConstraintGraph, slots: np.ndarray) -> None:
        """Take the items ``graph`` wrote into ``slots`` (a slot once per write: a block
        rewrites held items many times), queued behind the device's work."""
        slots = np.unique(slots)  # at most the graph's capacity, which the buffers hold
        n = len(slots)
        if not n:
            return
        values = [slots, graph.rows[slots], graph.embeddings[slots], graph.keys[slots]]
        self._written_staging.upload(self._written, values, n)
        where, rows, embeddings, keys = (t[:n] for t in self._written)
        self.rows.index_copy_(0, where, rows)
        self.embeddings.index_copy_(0, where, embeddings)
        self.keys.index_copy_(0, where, keys)

    def pull(self, graph: ConstraintGraph) -> None:
        """Give ``graph`` the embeddings the updates refreshed here (checkpoints and the
        per-update step read the graph's)."""
        if self.mirrored == (id(graph), graph.restores):
            graph.embeddings[: graph.size] = self.embeddings[: graph.size].cpu().numpy()

    # ---------------------------------------------------------------- mining
    def mine(
        self, graph: ConstraintGraph, into: np.ndarray, alpha: torch.Tensor, candidates: int
    ) -> None:
        """Mine ``len(into)`` triplets from ``graph``: the anchors and candidates drawn on the
        host, ranked here with the α-weighted nearness of the held items' embeddings; the i-th
        anchor's triplet goes to mined row ``into[i]``, and anchors without a triplet leave
        their row invalid."""
        self.valid.zero_()
        pool = 2 * candidates if candidates else 0  # 0: every run's whole draw
        drawn = MiningCandidates.from_runs(
            list(graph.runs(len(into), candidates)), RUN_ANCHORS, pool
        )
        if not len(drawn.anchors):
            return
        destination = np.where(drawn.positions >= 0, into[drawn.positions], self.mined_rows)
        anchors, destination, pool, n_positive = self._upload(drawn, destination)
        runs, width = anchors.shape
        table = self.embeddings.view(len(self.embeddings), -1)
        queries = (self.embeddings[anchors.clamp(min=0)] * alpha[:, None]).view(runs, width, -1)
        columns = torch.arange(pool.shape[1], device=self.device)
        positive = (columns < n_positive[:, None]) & (pool >= 0)  # (runs, pool)
        negative = (columns >= n_positive[:, None]) & (pool >= 0)
        chunk = max(1, _GATHERED // (pool.shape[1] * table.shape[1]))
        best_positive, best_negative, found = [], [], []
        for start in range(0, runs, chunk):
            part = slice(start, start + chunk)
            items = table[pool[part].clamp(min=0)]  # (runs, pool, D)
            nearness = items @ queries[part].transpose(1, 2)  # (runs, pool, width)
            own = positive[part, :, None] & (pool[part, :, None] != anchors[part, None, :])
            near_positive = nearness.masked_fill(~own, -torch.inf)
            best, index = near_positive.max(1)
            best_positive.append(index)
            found.append(best > -torch.inf)
            near_negative = nearness.masked_fill(~negative[part, :, None], -torch.inf)
            best_negative.append(near_negative.argmax(1))
        take = functools.partial(torch.gather, pool, 1)
        slots = torch.stack(
            [anchors, take(torch.cat(best_positive)), take(torch.cat(best_negative))], dim=2
        ).view(-1, 3)
        ok = (torch.cat(found) & (anchors >= 0)).view(-1)
        where = torch.where(ok, destination.view(-1), self.mined_rows)
        safe = slots.clamp(min=0)
        self.mined.index_copy_(0, where, self.rows[safe])
        self.valid.index_copy_(0, where, ok)
        self.slots.index_copy_(0, where, slots)
        self.mined_keys.index_copy_(0, where, self.keys[safe])

    def _upload(self, drawn: MiningCandidates, destination: np.ndarray) -> tuple[torch.Tensor, ...]:
        """The drawn candidates on the device, through buffers that grow to the largest block's
        (pinned on CUDA, so that the copy waits for nothing)."""
        runs, width = drawn.anchors.shape
        pool = drawn.pool.shape[1]
        have = self._candidates
        if not have or have[0].shape[0] < runs or have[2].shape[1] < pool:
            rows = max(runs, 2 * (have[0].shape[0] if have else 0))
            size = max(pool, have[2].shape[1] if have else 0)
            zeros = functools.partial(torch.zeros, dtype=torch.long, device=self.device)
            have = [zeros(rows, width), zeros(rows, width), zeros(rows, size), zeros(rows)]
            self._candidates = have
            self._candidates_staging = HostBuffers(have, pinned=self.pinned)
        padded = np.full((runs, have[2].shape[1]), -1, np.int64)
        padded[:, :pool] = drawn.pool
        values = [drawn.anchors, destination, padded, drawn.n_positive]
        self._candidates_staging.upload(have, values, runs)
        return tuple(t[:runs] for t in have)

    def refresh(
        self, slots: torch.Tensor, keys: torch.Tensor, learned: torch.Tensor, f: torch.Tensor
    ) -> None:
        """Inside an update: cache the embeddings ``f`` (L+1, 3, q, E) of its mined triplets'
        items (``slots``, ``keys``: (q, 3); ``learned``: (q,) the rows it learned) where the
        slot still holds the item that was mined."""
        current = (self.keys[slots.view(-1)].view(slots.shape) == keys) & learned[:, None]
        where = torch.where(current, slots, self.spare).view(-1)
        depths, _, _, dim = f.shape
        by_item = f.permute(2, 1, 0, 3).reshape(len(where), depths, dim)  # (q·3, L+1, E)
        self.embeddings.index_copy_(0, where, by_item)
