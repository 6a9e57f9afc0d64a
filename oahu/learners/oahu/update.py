"""One update of OAHU (Algorithm 1 of the paper, with our extensions), stage by stage.

:class:`UpdateStep` reads top to bottom as docs/algorithms.md's "One update" does:

1. **project** the new constraints' items (the learner's preprocessing);
2. **add replayed and mined** constraints: drawn from a reservoir of past ones, and mined from
   the revealed constraint graph (ours; none in the paper's preset);
3. **forward**: every item embedded at every depth, in one pass;
4. **loss** on each depth's two distances (:class:`~oahu.learners.oahu.loss.DepthLoss`: the
   margin loss, ours, or ABTL, Eq. 6-13);
5. **prequential**: before anything changes, each depth and the α-combined metric scored on
   whether they ranked the new constraints right (:mod:`oahu.learners.oahu.prequential`);
6. **self-paced**: the new constraints too hard for now held back (ours);
7. **step size** η, or η · max(1/sqrt(1 + t/T), φ) (ours);
8. **gradient** of the mean over constraints of the depths' losses, weighted by α (Eq. 21-22)
   or uniformly (ours), back from the distances to the embeddings;
9. **network step** (:meth:`~oahu.learners.oahu.network.MultiDepthNetwork.step`);
10. **hedge** (Eq. 20), driven by a :class:`~oahu.learners.oahu.hedge.HedgeSignal`: the
    training loss (the paper) or the prequential mistakes (ours);
11. **remember**: the new constraints enter the replay reservoir and the constraint graph.

The pieces (network, loss, hedge signal, memories, self-paced selector) are built by the
learner (:class:`~oahu.learners.oahu.learner.OAHU`) from its configuration and passed in; the
step holds what it changes (α, the last losses, the step-size clock). Each stage is a method, so
that a subclass can replace one. How large an update is, how far it steps and how much it keeps
for mining, as the stream goes on, is :class:`~oahu.learners.oahu.stream_schedule.StreamSchedule`,
which it inherits.

The per-depth arithmetic runs on numpy views on the CPU, where its many tiny operations
cost a third of torch's dispatch, and in torch on a GPU, so that nothing leaves the device
(:mod:`oahu.learners.oahu.arrays`); float32 throughout.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from oahu.constraint_kinds import TRIPLET_AS_QUADRUPLET
from oahu.learners.oahu.arrays import Array, concat, namespace
from oahu.learners.oahu.config import OAHUConfig
from oahu.learners.oahu.constraint_graph import ConstraintGraph
from oahu.learners.oahu.distinct_rows import distinct_rows
from oahu.learners.oahu.hedge import HedgeSignal, hedge_update
from oahu.learners.oahu.item_keys import row_keys
from oahu.learners.oahu.loss import DepthLoss, constraint_distances, embedding_gradient
from oahu.learners.oahu.network import ForwardCache, MultiDepthNetwork
from oahu.learners.oahu.prequential import PrequentialAccuracy
from oahu.learners.oahu.projection_cache import ProjectionCache
from oahu.learners.oahu.replay_memory import ReplayReservoir
from oahu.learners.oahu.self_paced import SelfPacedSelector
from oahu.learners.oahu.stream_schedule import StreamSchedule
from oahu.preprocessing import InputScaler

__all__ = ["StepResult", "UpdateStep"]

_NO_SLOTS = np.zeros((0, 3), np.int64)  # no mined triplets: no graph slots to refresh


class StepResult(NamedTuple):
    """What one update did, for the learner's counters and its drift detector.

    >>> result = StepResult(np.array([False]), None, None, 1)  # its one constraint's loss was NaN
    >>> result.correct, result.non_finite, result.updates, result.update_sizes
    (None, 1, 1, None)
    """

    used: np.ndarray  # (B,) which new constraints changed the model
    # (B, L+1) and (B,): whether each depth, and the α-combined metric, ranked each new
    # constraint right before the update; None when no update was taken.
    correct: np.ndarray | None
    combined: np.ndarray | None
    # New constraints left out for a non-finite loss; None when every loss was finite.
    non_finite: int | None
    # Updates taken: one, or a device-resident block's (oahu.learners.oahu.device_steps).
    updates: int = 1
    # A block's: the constraints of each of its updates that ``correct`` holds, in order (the
    # drift detector tells apart what each update's model ranked); None for one update.
    update_sizes: np.ndarray | None = None


class UpdateStep(StreamSchedule):
    """One OAHU update on a block of new triplets (B, 3, d) or quadruplets (B, 4, d), as
    validated (before preprocessing): call it, and it returns a :class:`StepResult`.

    >>> from oahu.learners.oahu.learner import OAHU
    >>> model = OAHU(n_features=2, hidden_width=4, preprocess="none", device="cpu")
    >>> step = model.update_step
    >>> step.loss, step.hedge_signal
    (MarginLoss(margin=0.1), MistakeSignal())
    >>> block = np.array([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.1]]], np.float32)  # p far, n near
    >>> result = step(block)
    >>> result.used.tolist(), result.correct.tolist(), step.learned
    ([True], [[False, False, False]], 1)
    """

    def __init__(
        self,
        config: OAHUConfig,
        network: MultiDepthNetwork,
        input_scaler: InputScaler,
        loss: DepthLoss,
        hedge_signal: HedgeSignal,
        prequential: PrequentialAccuracy,
        replay: ReplayReservoir,
        graph: ConstraintGraph,
        pacer: SelfPacedSelector | None,
    ) -> None:
        self.config = config
        self.network = network
        self.input_scaler = input_scaler
        self.loss = loss
        self.hedge_signal = hedge_signal
        self.prequential = prequential
        self.replay = replay
        # Quadruplets replay quadruplets; made at the first one, so triplet streams pay nothing.
        self.replay_quadruplets: ReplayReservoir | None = None
        self.graph = graph
        self.pacer = pacer
        self.n_depths = config.n_depths
        self.on_host = network.device.type == "cpu"
        self.alpha = self.uniform_alpha()
        self.last_losses = self.per_depth(torch.zeros(self.n_depths, device=network.device))
        # (L+1, B): 1.0 where a depth ranked a new constraint wrongly; set by each update.
        self.mistakes = self.last_losses[:, None]
        self.learned = 0  # new (stream) constraints learned: t of the step-size decay
        self.decay_origin = 0  # t when the decay (re)started: 0, or the latest adapted drift
        self.learning_rate = config.learning_rate
        # Rows of items seen before (strict updates on the CPU), of the axes they came from;
        # ``keep_projections`` False projects every update's rows (to measure what it saves).
        self.keep_projections = True
        self.projections: ProjectionCache | None = None
        self._cached_axes: np.ndarray | None = None

    # ---------------------------------------------------------------- arrays
    def per_depth(self, t: torch.Tensor) -> Array:
        """A per-depth array where the step's small arithmetic runs: numpy on the CPU, the
        tensor on a GPU."""
        return t.numpy() if self.on_host else t

    def uniform_alpha(self) -> Array:
        """α = 1/(L+1) for every depth: where the hedge starts."""
        depths = self.n_depths
        return self.per_depth(torch.full((depths,), 1.0 / depths, device=self.network.device))

    def depth_weights(self, alpha: Array) -> Array | float:
        """How the gradient weighs each depth's loss: by ``alpha`` (Eq. 21-22) or uniformly
        (ours), as ``depth_weighting`` says."""
        return alpha if self.config.depth_weighting == "alpha" else 1.0 / self.n_depths

    @staticmethod
    def as_numpy(a: Any) -> np.ndarray:
        return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a

    # ---------------------------------------------------------------- the update
    def __call__(self, block: np.ndarray, extras: bool = True) -> StepResult:
        """One update on ``block``, plus, with ``extras``, the replayed and mined constraints.

        A triplet's two distances are D(anchor, positive) and D(anchor, negative), a
        quadruplet's D(a, b) and D(c, d); everything after them is the same (docs/algorithms.md,
        "Quadruplets"). Mined triplets join a quadruplet step as (a, p, a, n).
        """
        n_new, n_roles = block.shape[:2]
        # Items are known to the graph by the rows the stream gave: a projection's rounding
        # depends on the block's size, and the same item must be the same item in every block.
        keys = row_keys(block) if self.config.mined and n_roles == 3 else None
        new = self.project(block, keys)
        rows, slots = self.with_memories(new) if extras else (new, _NO_SLOTS)
        cache, f = self.forward(rows, n_new)
        diffs, dists = constraint_distances(f, n_roles)
        d_pos, d_neg = dists[:, 0, :, 0], dists[:, 1, :, 0]
        loss, g_pos, g_neg = self.loss(d_pos, d_neg)
        finite = self.finite(loss, cache)
        if not bool(finite.all()):
            # Replayed and mined constraints were finite when they were stored; should one not
            # be now, the update goes on without them rather than retrying.
            return self.finite_only(block, self.as_numpy(finite[:n_new]))
        correct, combined = self.score(d_pos[:, :n_new], d_neg[:, :n_new])
        weights = self.depth_weights(self.alpha)
        kept = None
        if self.pacer is not None:
            kept = self.pace(loss, weights, f, n_new)
            if not kept.all():  # the held-back constraints leave the step: no loss, no gradient
                loss, g_pos, g_neg = self.hold_back(kept, rows.shape[0], loss, g_pos, g_neg)
        self.learning_rate = self.step_size()
        # A loss that leaves most constraints inactive (zero loss, zero gradient) has nothing to
        # step when all of them are.
        if self.loss.always_active or bool(loss.any()):
            # ∂(B/T Σ_t Σ_l w(l) L(l)_t)/∂L(l)_t = w(l) B/T for B new constraints among T rows
            # (B1): each new constraint, with its share of the replayed and mined rows, moves the
            # weights as far as it would alone. Then back to the embeddings.
            scale = (weights * n_new / rows.shape[0]) * namespace(dists).ones_like(self.alpha)
            # A strict step never comes near the trust region (B2); it is not computed there.
            limit = self.config.max_step_change if n_new > 1 else None
            step_cache, grad = self.step_rows(
                cache, scale, g_pos, g_neg, diffs, dists, n_roles, n_new
            )
            if step_cache is not None:
                self.network.step(step_cache, grad, self.learning_rate, limit)
        new_loss = loss[:, :n_new]
        if self.on_host:
            self.last_losses = np.add.reduce(new_loss, axis=1) / np.float32(n_new)
        else:
            self.last_losses = new_loss.mean(1)
        self.hedge(new_loss)
        self.learned += n_new
        self.remember(new, f, slots, kept, keys)
        return StepResult(self.as_numpy((new_loss > 0).any(0)), correct, combined, None)

    # ---------------------------------------------------------------- its stages
    def project(self, block: np.ndarray, keys: np.ndarray | None = None) -> np.ndarray:
        """The learner's preprocessing of the block's items, (B, n_roles, width).

        On the CPU, an update whose items' ``keys`` (B, n_roles) are given takes the rows of
        the items it projected before from :class:`ProjectionCache` and projects the others in
        one block. A strict update projects its whole block when one of its items is new: a
        row projected alone goes through BLAS's matrix-vector kernel, which rounds it otherwise
        than a block of a few rows does, and a strict model stays the same whichever of its
        items were known.
        """
        n_new, n_roles, width = block.shape
        items = block.reshape(n_roles * n_new, width)
        cache = self._projection_cache() if keys is not None else None
        if cache is None:
            return self._projected(items).reshape(n_new, n_roles, -1)
        rows = cache.rows_of(items, keys.ravel(), self._projected, whole_block=n_new == 1)
        return rows.reshape(n_new, n_roles, -1)

    def _projected(self, items: np.ndarray) -> np.ndarray:
        """``items`` (n, d) preprocessed, in one block."""
        scaler = self.input_scaler
        return scaler.project(scaler.transform(items, defer_projection=True))

    def _projection_cache(self) -> ProjectionCache | None:
        """The cache of the current principal axes, on the CPU (None without axes: nothing to
        save); a new one when the axes were replaced."""
        axes = self.input_scaler.components
        if axes is None or not self.on_host or not self.keep_projections:
            return None
        if self._cached_axes is not axes:
            self._cached_axes = axes
            self.projections = ProjectionCache(self.input_scaler.n_outputs)
        return self.projections

    def with_memories(self, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The new constraints followed by ``replay`` replayed and ``mined`` mined ones, and the
        graph slots (q, 3) of the mined triplets' items."""
        n_roles = new.shape[1]
        parts, slots = [new], _NO_SLOTS
        n_new = new.shape[0]
        if self.config.replay:
            parts.append(self.replay_for(n_roles).sample(self.config.replay * n_new))
        if self.config.mined:
            # Mining ranks candidates with α as float32 on the CPU, float64 from a device.
            alpha = self.alpha if self.on_host else np.asarray(self.alpha.cpu(), np.float64)
            config = self.config
            mined, slots = self.graph.take(
                config.mined * n_new, alpha, config.mining_candidates, self.anchors_ahead()
            )
            parts.append(mined if n_roles == 3 else mined[:, TRIPLET_AS_QUADRUPLET])
        return (concat(parts, axis=0) if len(parts) > 1 else new), slots

    def forward(self, rows: np.ndarray, n_new: int) -> tuple[ForwardCache, Array]:
        """Every item of ``rows`` (T, n_roles, width) at every depth, and the embeddings as
        (L+1, n_roles, T, E), for an update of ``n_new`` new constraints.

        On the CPU a micro-batch update sends each distinct row through the network once
        (:func:`distinct_rows`; the cache then maps the update's rows to them): a quarter of a
        B = 256 update's rows repeat another. A strict update's dozen rows go as they are:
        finding repeats would cost more than it saves, and its sums stay the ones it had.
        """
        n_rows, n_roles = rows.shape[:2]
        # Rows ordered role by role ([anchors; positives; negatives]) so one forward pass embeds
        # all of them.
        x = rows.swapaxes(0, 1).reshape(n_roles * n_rows, -1)
        if not self.on_host:
            x = torch.from_numpy(x).to(self.network.device)
        distinct = distinct_rows(x) if self.on_host and n_new > 1 else None
        if distinct is None:
            cache = self.network.forward(x)
            return cache, cache.embeddings.reshape(self.n_depths, n_roles, n_rows, -1)
        first, row_of = distinct
        cache = self.network.forward(x[first])
        cache.row_of = row_of
        f = cache.embeddings[:, row_of]
        return cache, f.reshape(self.n_depths, n_roles, n_rows, -1)

    def step_rows(
        self,
        cache: ForwardCache,
        scale: Array,
        g_pos: Array,
        g_neg: Array,
        diffs: Array,
        dists: Array,
        n_roles: int,
        n_new: int,
    ) -> tuple[ForwardCache | None, Array | None]:
        """The cache of the rows the backward pass takes and their embedding gradients
        (L+1, rows, E), for an update of ``n_new`` new constraints whose loss has the
        derivatives ``g_pos`` and ``g_neg`` (L+1, T), with depth ``scale`` and the ``diffs``
        and ``dists`` of :func:`constraint_distances` of ``n_roles`` items; (None, None) when no
        constraint has a derivative.

        The rows are those of the constraints whose loss has a derivative at some depth: the
        backward pass over any other row would only add zeros to the weights' gradients, and
        the margin loss leaves most constraints of a micro-batch inactive (about 17% of a
        B = 256 update's had a derivative along a Fashion-MNIST stream, benchmarks/README.md,
        "Learning at scale"), so their embedding gradients are not even computed.

        Every row stays on a GPU, where picking them would wait for the device, and in a
        strict update, whose dozen rows cost their calls rather than their arithmetic: picking
        them saved nothing there (1,170 triplets/s with, 1,150 without, side by side), and a
        strict update keeps the exact sums it always had.
        """
        active: Any = slice(None)  # the constraints whose rows are taken
        if self.on_host and n_new > 1:
            n_rows = g_pos.shape[1]
            picked = np.flatnonzero(((g_pos != 0) | (g_neg != 0)).any(0))
            if not len(picked):
                return None, None
            if len(picked) < n_rows or cache.row_of is not None:
                # Rows are ordered role by role (see ``forward``): constraint t's are t, T + t, …
                cache = cache.rows((picked + n_rows * np.arange(n_roles)[:, None]).ravel())
                active = picked
        grad = embedding_gradient(
            scale, g_pos[:, active], g_neg[:, active], diffs[:, :, active], dists[:, :, active],
            n_roles,
        )  # (L+1, n_roles, constraints, E): as rows, the cache's order
        return cache, grad.reshape(self.n_depths, -1, grad.shape[-1])

    def finite(self, loss: Array, cache: ForwardCache) -> Array:
        """Which constraints (T,) have a finite loss and finite embeddings at every depth.

        An overflowing norm turns an embedding into a silent zero vector rather than a NaN, so
        it is checked with the loss: either one makes the constraint unlearnable.
        """
        n_rows = loss.shape[1]
        norms = cache.norms if cache.row_of is None else cache.norms[:, cache.row_of]
        norms = norms.reshape(self.n_depths, -1, n_rows).sum((0, 1))
        return namespace(loss).isfinite(loss.sum(0) + norms)

    def finite_only(self, block: np.ndarray, finite: np.ndarray) -> StepResult:
        """A non-finite loss never reaches the weights: learn from the rest, count the others."""
        used = np.zeros(len(finite), dtype=bool)
        non_finite = int((~finite).sum())
        if not finite.any():
            return StepResult(used, None, None, non_finite)
        inner = self(block[finite], extras=False)
        used[finite] = inner.used
        return StepResult(used, inner.correct, inner.combined, non_finite + (inner.non_finite or 0))

    def score(self, d_pos: Array, d_neg: Array) -> tuple[np.ndarray, np.ndarray]:
        """Score the new constraints before the update: each depth, and Σ_l α(l) D(l) (Eq. 26);
        record them in the prequential accuracy and set the mistakes the hedge may use. Returns
        whether each depth (B, L+1) and the combined metric (B,) ranked each one right."""
        correct = d_pos < d_neg  # (L+1, B)
        combined = (self.alpha[:, None] * (d_neg - d_pos)).sum(0) > 0
        # Each depth's wrong rankings, float32 like α, so that the hedge's arithmetic stays in
        # float32.
        if self.on_host:
            self.mistakes = np.float32(1.0) - correct.astype(np.float32)
        else:
            self.mistakes = 1.0 - correct.float()
        correct, combined = self.as_numpy(correct).T, self.as_numpy(combined)
        self.prequential.update(correct, combined)
        return correct, combined

    def pace(self, loss: Array, weights: Any, f: Array, n_new: int) -> np.ndarray:
        """Which of the new constraints self-paced learning lets the step learn: each one's loss
        Σ_l w(l) L(l) with the step's depth ``weights``, and where its first item sits in
        depth 0."""
        per_depth = loss[:, :n_new]
        # Uniform weights are a float: their weighted sum is the mean over depths.
        uniform = isinstance(weights, float)
        combined = per_depth.mean(0) if uniform else (weights[:, None] * per_depth).sum(0)
        positions = self.as_numpy(f[0, 0, :n_new])
        return self.pacer.select(np.asarray(self.as_numpy(combined), np.float64), positions)

    def hold_back(
        self, kept: np.ndarray, n_rows: int, loss: Array, g_pos: Array, g_neg: Array
    ) -> tuple[Array, Array, Array]:
        """The loss and its derivatives with the new constraints not ``kept`` zeroed."""
        mask = np.ones(n_rows, dtype=np.float32)
        mask[: len(kept)] = kept
        mask = mask if self.on_host else torch.from_numpy(mask).to(self.network.device)
        return loss * mask, g_pos * mask, g_neg * mask

    def hedge(self, new_loss: Array) -> None:
        """Eq. 20 on the hedge signal of each new constraint (their losses ``new_loss``, or the
        mistakes ``score`` set), then the floor s/(L+1) and renormalisation."""
        signal = self.hedge_signal(new_loss, self.mistakes)
        if signal is not None:
            self.alpha = hedge_update(self.alpha, signal, self.config.beta, self.config.smoothing)

    def remember(
        self,
        new: np.ndarray,
        f: Array,
        slots: np.ndarray,
        kept: np.ndarray | None = None,
        keys: np.ndarray | None = None,
    ) -> None:
        """Keep the new constraints for replay and, triplets, for mining, with this step's
        embeddings (L+1, n_roles, T, E) of them, and refresh the cached embeddings of the mined
        ones (the last rows); ``keys`` (B, 3) identify the new triplets' items to the graph.
        Quadruplets reveal no classes, so the graph learns nothing from them."""
        n_new, n_roles = new.shape[:2]
        embeddings = self.as_numpy(f)
        fresh = embeddings[:, :, :n_new]
        if kept is not None and not kept.all():  # held back: kept out of the memories too
            new, fresh = new[kept], fresh[:, :, kept]
            keys = None if keys is None else keys[kept]
        if self.config.replay and len(new):
            self.replay_for(n_roles).add(new)
        if not self.config.mined:
            return
        # The mined items first: observing the new ones may hand their slots to other items.
        mined = embeddings[:, :, embeddings.shape[2] - len(slots) :]  # (L+1, n_roles, q, E)
        if n_roles == 4:  # the mined triplets sat in the step as (a, p, a, n)
            mined = mined[:, [0, 1, 3]]
        for role in range(3):
            self.graph.refresh(slots[:, role], mined[:, role])
        if n_roles == 3:
            self.graph.hold_up_to(self.items_held())
            self.graph.observe(new, fresh, keys)

    def replay_for(self, n_roles: int) -> ReplayReservoir:
        """The reservoir that replays constraints of ``n_roles`` items (3 or 4)."""
        if n_roles == 3:
            return self.replay
        if self.replay_quadruplets is None:
            triplets = self.replay
            self.replay_quadruplets = ReplayReservoir(
                triplets.capacity, triplets.rows.shape[2], triplets.rng, n_roles=4
            )
        return self.replay_quadruplets
