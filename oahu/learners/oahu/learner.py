"""OAHU: Online metric learning with Adaptive Hedge Update (Algorithm 1 of the paper), and the
extensions that make oahu's default learner improve as constraints arrive.

Per update, in this order (docs/algorithms.md, "One update"):

1. the new triplet(s), plus ``replay`` triplets drawn from a reservoir of past ones and ``mined``
   triplets mined from the revealed constraint graph (ours; none in the paper's preset), are
   embedded at every depth and each depth's loss is computed: the margin loss (ours) or ABTL
   (Eq. 13);
2. before anything changes, each depth and the α-combined metric are scored on whether they
   ranked the new triplet(s) right: the prequential accuracy
   (:mod:`oahu.learners.oahu.prequential`);
3. one gradient-descent step on the mean over triplets of the depths' losses, weighted by α
   (Eq. 21-22) or uniformly (ours), with step size η or η · max(1/sqrt(1 + t/T), φ) (ours);
4. the hedge step of Eq. 20, discounting each depth by its training loss (the paper) or by its
   prequential mistakes (ours), then the floor s/(L+1) and renormalisation;
5. the new triplet(s) enter the replay reservoir and the constraint graph.

Strict mode (``batch_size=1``) updates after every constraint. Micro-batch mode takes B new
triplets per step (the replayed and mined ones stay ``replay`` and ``mined`` per step); with
B = 1 it is the same code path as strict mode, so the two agree bit for bit.
``OAHU(preset="paper")`` is Algorithm 1 exactly: ABTL, α-weighted gradient, hedge on the loss,
no replay or mining, constant η.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from sklearn.decomposition import PCA

from oahu.constraint_kinds import TRIPLET_AS_QUADRUPLET
from oahu.learner import Capabilities, Diagnostic, Learner
from oahu.learners.oahu.arrays import concat, namespace, row_norms
from oahu.learners.oahu.config import PRESETS, OAHUConfig, adaptation_steps
from oahu.learners.oahu.constraint_graph import ConstraintGraph
from oahu.learners.oahu.device import resolve_device
from oahu.learners.oahu.hedge import hedge_update
from oahu.learners.oahu.loss import abtl_with_gradients, margin_with_gradients
from oahu.learners.oahu.network import MultiDepthNetwork
from oahu.learners.oahu.prequential import PrequentialAccuracy
from oahu.learners.oahu.replay_memory import ReplayReservoir
from oahu.learners.oahu.self_paced import SelfPacedSelector
from oahu.threads import blas_threads

SKIP_NON_FINITE_LOSS = "non_finite_loss"
_EMBED_CHUNK = 8192
_DIST_EPS = 1e-12
# Seed tags: the network draws from torch's generator seeded with ``seed``; replay and mining draw
# from a numpy generator seeded with [seed, _MEMORY_SEED], independent of it.
_MEMORY_SEED = 0x4D45
# Self-paced learning clusters constraints by this many leading coordinates of their first item's
# depth-0 embedding (E0 starts as the principal axes: the leading ones carry most of the spread).
_PACE_COORDINATES = 8


class OAHU(Learner):
    """The OAHU learner: a multi-depth network, a per-depth loss and hedge weights over depths.

    Parameters
    ----------
    n_features : input dimension d.
    preset : a named configuration of :data:`oahu.learners.oahu.config.PRESETS` (``"paper"``: the
    published
        algorithm); None for oahu's defaults (:class:`OAHUConfig`).
    **fields : any field of :class:`OAHUConfig` (``hidden_width``, ``learning_rate``,
        ``batch_size``, ``device``, ...), overriding the preset's or the default value. They are
        the constructor's keyword parameters (``inspect.signature(OAHU)`` lists them), and
        ``get_params`` returns each as the learner uses it. :meth:`from_config` takes a whole
        :class:`OAHUConfig`.

    The default preprocessing projects items onto their principal axes, fitted by ``prepare(X)``
    on unlabelled items (the development split, the service's gallery) before the first
    constraint.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> model = OAHU(n_features=8, hidden_width=16, device="cpu")
    >>> model.prepare(rng.random((50, 8), dtype=np.float32))
    >>> a, p, n = rng.random((3, 20, 8), dtype=np.float32)
    >>> used = model.learn_triplets(a, p, n)
    >>> model.updates, model.embed(a).shape
    (20, (2, 20, 8))
    >>> round(float(model.alpha.sum()), 6), 0.0 <= model.prequential.combined <= 1.0
    (1.0, True)
    >>> paper = OAHU(n_features=8, preset="paper", device="cpu")
    >>> _ = paper.learn_triplets(a, p, n)
    >>> paper.utilization, paper.embed(a).shape
    (1.0, (6, 20, 50))
    """

    name = "oahu"
    capabilities: ClassVar[Capabilities] = Capabilities(
        constraint_kinds=("triplet", "quadruplet"),
        detects_drift=True,
        diagnostics=(
            Diagnostic(
                "prequential_accuracy",
                "Rolling share of new constraints the alpha-combined metric ranked right before "
                "learning them.",
            ),
            Diagnostic(
                "depth_prequential_accuracy",
                "Rolling share of new constraints each depth ranked right before learning them.",
                per_depth=True,
            ),
            Diagnostic("depth_loss", "Latest training loss of each depth.", per_depth=True),
            Diagnostic("learning_rate", "Step size of the latest update."),
            Diagnostic(
                "graph_components",
                "Components of known-similar items among the items held for mining.",
            ),
            Diagnostic(
                "graph_contradictions",
                "Constraints that contradicted what earlier ones revealed (not applied to the "
                "graph).",
            ),
            Diagnostic(
                "self_paced_held_back",
                "New constraints self-paced learning held back as too hard (not learned; 0 "
                "when self_paced is off).",
            ),
            Diagnostic(
                "self_paced_threshold",
                "Self-paced learning's loss threshold lambda now (0 when self_paced is off).",
            ),
        ),
    )
    metric = "l2"

    def __init__(self, n_features: int, *, preset: str | None = None, **fields: Any) -> None:
        unknown = set(fields) - set(_CONFIG_FIELDS)
        if unknown:
            raise TypeError(f"OAHU: unexpected keyword argument(s) {', '.join(sorted(unknown))}")
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"preset: unknown {preset!r}; choose one of {', '.join(PRESETS)}")
        config = PRESETS[preset] if preset is not None else OAHUConfig()
        self.preset = preset
        self.config = config.replace(**fields) if fields else config
        super().__init__(n_features, preprocess=self.config.preprocess)
        self.device = resolve_device(self.config.device)
        width = self.input_scaler.n_outputs  # the network's input: d, or K with "pca:K"
        self.network = MultiDepthNetwork(width, self.config, self.device)
        # Where the per-depth arithmetic (loss, gradient coefficients, hedge) runs: numpy views
        # on the CPU, where its few dozen tiny operations cost a third of torch's dispatch;
        # torch on a GPU, so that nothing leaves the device. See oahu.learners.oahu.arrays.
        self._on_host = self.device.type == "cpu"
        depths = self.config.n_depths
        self._alpha = self._small(torch.full((depths,), 1.0 / depths, device=self.device))
        self._last_losses = self._small(torch.zeros(depths, device=self.device))
        self._head0_prepared = self.config.head0_init != "pca"
        self._rng = np.random.default_rng([self.config.seed, _MEMORY_SEED])
        self._replay = ReplayReservoir(self.config.replay_memory, width, self._rng)
        # Quadruplets replay quadruplets; made at the first one, so triplet streams pay nothing.
        self._replay_quadruplets: ReplayReservoir | None = None
        self._graph = self._new_graph()
        self.prequential = PrequentialAccuracy(depths, self.config.prequential_window)
        self._watch_for_drift(self.config.drift_detector)
        self._adaptation = adaptation_steps(self.config.drift_adaptation)
        self._drift_pending = False  # a drift detected in this step: adapt at its end
        self._learned = 0  # new (stream) triplets learned: t of the step-size decay
        self._decay_origin = 0  # t when the decay (re)started: 0, or the latest adapted drift
        self._learning_rate = self.config.learning_rate
        self._mistakes = self._last_losses  # the hedge's signal, set by each update
        self._pacer = self._new_pacer() if self.config.self_paced else None

    # ---------------------------------------------------------------- interface
    @property
    def n_depths(self) -> int:
        return self.config.n_depths

    @property
    def alpha(self) -> np.ndarray:
        return np.asarray(self._as_tensor(self._alpha).cpu(), dtype=np.float64)

    @property
    def last_losses(self) -> torch.Tensor:
        """Mean loss per depth of the new triplets at the last update (before its step), on the
        CPU."""
        return self._as_tensor(self._last_losses).cpu()

    def _small(self, t: torch.Tensor) -> Any:
        """A per-depth array where the step's small arithmetic runs (see ``__init__``)."""
        return t.numpy() if self._on_host else t

    def _as_tensor(self, a: Any) -> torch.Tensor:
        return torch.from_numpy(a) if isinstance(a, np.ndarray) else a

    @classmethod
    def from_config(cls, n_features: int, config: OAHUConfig) -> OAHU:
        """An OAHU learner with every hyper-parameter from ``config``."""
        return cls(n_features, **config.to_dict())

    def _param_value(self, name: str) -> Any:
        return self.preset if name == "preset" else getattr(self.config, name)

    def _diagnostics(self) -> dict[str, Any]:
        return {
            "prequential_accuracy": self.prequential.combined,
            "depth_prequential_accuracy": self.prequential.per_depth,
            "depth_loss": [float(v) for v in self.last_losses],
            "learning_rate": float(self._learning_rate),
            "graph_components": float(self._graph.n_components),
            "graph_contradictions": float(self._graph.contradictions),
            "self_paced_held_back": float(self._pacer.held_back if self._pacer else 0),
            "self_paced_threshold": float(self._pacer.thresholds()[0] if self._pacer else 0.0),
        }

    def _embed(self, arr: np.ndarray, role: Literal["query", "gallery"]) -> np.ndarray:
        out = np.empty((self.n_depths, len(arr), self.network.embedding_dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(arr), _EMBED_CHUNK):
                chunk = torch.from_numpy(arr[start : start + _EMBED_CHUNK]).to(self.device)
                out[:, start : start + len(chunk)] = self.network.embed(chunk).cpu().numpy()
        return out

    # ---------------------------------------------------------------- learning
    def prepare(self, x: Any) -> None:
        """Fit input preprocessing on unlabelled items and, with ``head0_init="pca"``, set E0 to
        their top principal axes. Call it once, before the first constraint."""
        if self.updates:
            raise ValueError(
                f"prepare: fits what learning starts from, but {self.updates} updates were "
                "already made"
            )
        super().prepare(x)

    def _prepare(self, items: np.ndarray) -> None:
        if self.config.head0_init != "pca":
            return
        # At most as many axes as the items span (a preset serves 64-d digits and 784-d images).
        k = min(self.config.head0_components or self.network.embedding_dim, *items.shape)
        pca = PCA(n_components=k, svd_solver="covariance_eigh").fit(items)
        self.network.set_head0(pca.components_)
        self._head0_prepared = True

    @property
    def needs_prepare(self) -> bool:
        return super().needs_prepare or not self._head0_prepared

    def _learning_rows(self, x: np.ndarray) -> np.ndarray:
        # Each update projects its own rows (InputScaler.project): the rounding of a projection
        # depends on how many rows go through it at once, and a strict update always has the
        # same three, so the model does not depend on how the stream was chunked.
        return self.input_scaler.transform(x, defer_projection=True)

    def _learn_constraint_rows(self, kind: str, rows: np.ndarray) -> np.ndarray:
        return self._learn_constraints(rows)  # the roles already side by side, as a step wants

    def _learn_constraints(self, constraints: np.ndarray) -> np.ndarray:
        """Learn triplets (N, 3, d) or quadruplets (N, 4, d), before their projection, in steps
        of ``batch_size``."""
        if not self._head0_prepared:
            raise ValueError(
                "head0_init: 'pca' takes E0 from items; call learner.prepare(X) with unlabelled "
                "items (e.g. the development split) before the first constraint"
            )
        used = np.zeros(len(constraints), dtype=bool)
        size = self.config.batch_size
        # Overflow is expected on hostile input and handled (the row is skipped and counted).
        with self._step_threads(), np.errstate(over="ignore", invalid="ignore"):
            for start in range(0, len(constraints), size):
                block = constraints[start : start + size]
                used[start : start + len(block)] = self._step(block)
        return used

    def _step_threads(self) -> AbstractContextManager[Any]:
        """At most ``cpu_threads`` threads for the BLAS calls of a CPU step (see the config)."""
        threads = self.config.cpu_threads if self._on_host and self.config.cpu_threads else None
        return blas_threads(threads)

    def _step_size(self) -> float:
        """η, or η / sqrt(1 + t / T) after t learned triplets with ``lr_decay`` T, never below
        ``lr_floor`` · η (ours, S1); after a drift adapted with the "step" adaptation t counts
        from the drift, and the step is raised B-fold at first, back to 1-fold over
        ``drift_boost_span`` constraints (ours, D2).

        Past the floor the step is η · φ; before it, η / sqrt(...) exactly as with no floor, so
        that a floor the decay has not reached changes no model bit.
        """
        decay = self.config.lr_decay
        eta = self.config.learning_rate
        since = self._learned - self._decay_origin
        span = self.config.drift_boost_span
        if self._decay_origin and since < span:
            eta *= 1.0 + (self.config.drift_step_boost - 1.0) * (1.0 - since / span)
        if not decay:
            return eta
        root = math.sqrt(1.0 + since / decay)
        floor = self.config.lr_floor
        if floor and root * floor > 1.0:
            return eta * floor
        return eta / root

    def _adapt_to_drift(self) -> None:
        """What a detected drift changes (``drift_adaptation``, ours; docs/algorithms.md,
        "Concept drift"): the hedge may re-choose depths from uniform weights, the step size
        starts its decay again so the weights can move to the new concept, and the memories of
        the old concept stop being replayed and mined."""
        self._drift_pending = False
        if "alpha" in self._adaptation:
            depths = self.n_depths
            self._alpha = self._small(torch.full((depths,), 1.0 / depths, device=self.device))
        if "step" in self._adaptation:
            self._decay_origin = self._learned
        if "memory" in self._adaptation:
            self._replay = ReplayReservoir(
                self.config.replay_memory, self._replay.rows.shape[2], self._rng
            )
            self._replay_quadruplets = None
            self._graph = self._new_graph()

    def _new_pacer(self) -> SelfPacedSelector:
        c = self.config
        return SelfPacedSelector(
            c.pace_start,
            c.pace_diversity,
            c.pace_growth,
            c.pace_round,
            c.pace_clusters,
            min(_PACE_COORDINATES, self.network.embedding_dim),
            c.seed,
        )

    def _new_graph(self) -> ConstraintGraph:
        return ConstraintGraph(
            self.config.item_memory,
            self.input_scaler.n_outputs,
            self.n_depths,
            self.network.embedding_dim,
            self._rng,
            knowledge=self.config.graph_memory,
        )

    def _replay_for(self, n_roles: int) -> ReplayReservoir:
        """The reservoir that replays constraints of ``n_roles`` items (3 or 4)."""
        if n_roles == 3:
            return self._replay
        if self._replay_quadruplets is None:
            width = self._replay.rows.shape[2]
            self._replay_quadruplets = ReplayReservoir(
                self.config.replay_memory, width, self._rng, n_roles=4
            )
        return self._replay_quadruplets

    def _step(self, block: np.ndarray, extras: bool = True) -> np.ndarray:
        """One update on a block of new triplets (B, 3, d) or quadruplets (B, 4, d), before
        their projection, plus, with ``extras``, the replayed and mined ones; returns which of
        the new constraints changed the model (a positive loss at some depth).

        A triplet's two distances are D(anchor, positive) and D(anchor, negative), a
        quadruplet's D(a, b) and D(c, d); everything after them is the same (docs/algorithms.md,
        "Quadruplets"). Mined triplets join a quadruplet step as (a, p, a, n).

        The rows are numpy on the host; on a GPU they go to the device for the network, and the
        arithmetic is the same (:mod:`oahu.learners.oahu.arrays`).
        """
        n_new, n_roles = block.shape[:2]
        new = self.input_scaler.project(block.reshape(n_roles * n_new, -1)).reshape(
            n_new, n_roles, -1
        )
        parts, slots = [new], np.zeros((0, 3), np.int64)
        if extras and self.config.replay:
            parts.append(self._replay_for(n_roles).sample(self.config.replay))
        if extras and self.config.mined:
            alpha = self._alpha if self._on_host else self.alpha
            mined, slots = self._graph.mine(self.config.mined, alpha, self.config.mining_candidates)
            parts.append(mined if n_roles == 3 else mined[:, TRIPLET_AS_QUADRUPLET])
        rows = concat(parts, axis=0) if len(parts) > 1 else new
        n_rows = rows.shape[0]
        # Rows ordered role by role ([anchors; positives; negatives]) so one forward pass embeds
        # all of them.
        x = rows.swapaxes(0, 1).reshape(n_roles * n_rows, -1)
        if not self._on_host:
            x = torch.from_numpy(x).to(self.device)
        cache = self.network.forward(x)
        f = cache.embeddings.reshape(self.n_depths, n_roles, n_rows, -1)
        # Both sides at once, (L+1, 2, T, E): [anchor − positive, anchor − negative] or
        # [a − b, c − d].
        diffs = f[:, :1] - f[:, 1:] if n_roles == 3 else f[:, 0::2] - f[:, 1::2]
        # Pre-update distances D_orig, (L+1, 2, T, 1).
        dists = row_norms(diffs)
        xp = namespace(dists)
        d_pos, d_neg = dists[:, 0, :, 0], dists[:, 1, :, 0]
        if self.config.loss == "abtl":
            loss, g_pos, g_neg = abtl_with_gradients(d_pos, d_neg, self.config.tau)
        else:
            loss, g_pos, g_neg = margin_with_gradients(d_pos, d_neg, self.config.margin)
        # An overflowing norm turns an embedding into a silent zero vector rather than a NaN, so
        # it is checked with the loss: either one makes the triplet unlearnable.
        norms = cache.norms.reshape(self.n_depths, n_roles, n_rows).sum((0, 1))
        finite = xp.isfinite(loss.sum(0) + norms)
        if not bool(finite.all()):
            # Replayed and mined triplets were finite when they were stored; should one not be
            # now, the update goes on without them rather than retrying.
            return self._step_finite_only(block, self._as_numpy(finite[:n_new]))
        self._record_prequential(d_pos[:, :n_new], d_neg[:, :n_new])
        # How the step weighs each depth's loss: by α (Eq. 21-22) or uniformly (ours).
        weights = self._alpha if self.config.depth_weighting == "alpha" else 1.0 / self.n_depths
        kept = None
        if self._pacer is not None:
            kept = self._pace(loss, weights, f, n_new)
            if not kept.all():  # the held-back constraints leave the step: no loss, no gradient
                mask = np.ones(n_rows, dtype=np.float32)
                mask[:n_new] = kept
                mask = mask if self._on_host else torch.from_numpy(mask).to(self.device)
                loss, g_pos, g_neg = loss * mask, g_pos * mask, g_neg * mask
        self._learning_rate = self._step_size()
        # With the margin loss most triplets are inactive (zero loss, zero gradient); when all of
        # them are, there is nothing to step (the paper's ABTL is never all zero).
        if self.config.loss == "abtl" or bool(loss.any()):
            # ∂(mean_t Σ_l w(l) L(l)_t)/∂D, times ∂D/∂f: the unit difference vectors.
            scale = (weights / n_rows) * xp.ones_like(self._alpha)
            coef = scale[:, None, None, None] * xp.stack([g_pos, g_neg], 1)[..., None]
            coef = coef / dists.clip(min=_DIST_EPS)
            towards = coef * diffs  # on the first item of each side
            if n_roles == 3:  # the anchor is the first item of both sides
                grad = concat([towards.sum(1)[:, None], -towards], axis=1)
            else:
                grad = concat(
                    [towards[:, :1], -towards[:, :1], towards[:, 1:], -towards[:, 1:]], axis=1
                )
            self.network.step(cache, grad.reshape(cache.embeddings.shape), self._learning_rate)
        new_loss = loss[:, :n_new]
        self._last_losses = (
            np.add.reduce(new_loss, axis=1) / np.float32(n_new)
            if self._on_host
            else new_loss.mean(1)
        )
        if self.config.hedge_signal == "loss":
            self._alpha = hedge_update(
                self._alpha, self._last_losses, self.config.beta, self.config.smoothing
            )
        elif bool(self._mistakes.any()):  # no depth erred: Eq. 20 leaves α as it is
            self._alpha = hedge_update(
                self._alpha, self._mistakes, self.config.beta, self.config.smoothing
            )
        self.updates += 1
        self._learned += n_new
        self._remember(new, f, slots, kept)
        if self._drift_pending:
            self._adapt_to_drift()
        return self._as_numpy((new_loss > 0).any(0))

    def _record_prequential(self, d_pos: Any, d_neg: Any) -> None:
        """Score the new triplets before the update: each depth, and Σ_l α(l) D(l) (Eq. 26)."""
        correct = d_pos < d_neg  # (L+1, B)
        combined = (self._alpha[:, None] * (d_neg - d_pos)).sum(0) > 0
        # The hedge's signal with hedge_signal="mistakes": each depth's share of wrong rankings
        # (float32, like α, so that the step's arithmetic stays in float32).
        if self._on_host:
            # What correct.mean(1, dtype=np.float32) gives, without its Python-level wrapper.
            self._mistakes = 1.0 - np.add.reduce(correct, axis=1, dtype=np.float32) / np.float32(
                correct.shape[1]
            )
        else:
            self._mistakes = 1.0 - correct.float().mean(1)
        correct, combined = self._as_numpy(correct).T, self._as_numpy(combined)
        self.prequential.update(correct, combined)
        # A learner that does not detect does not pay for the mistake matrix either. With one
        # depth the combined metric is that depth, and it is watched once.
        if self.drift is None:
            return
        outcomes = (
            np.concatenate([combined[:, None], correct], axis=1) if self.n_depths > 1 else correct
        )
        if self._observe_mistakes(~outcomes):
            self._drift_pending = self._adaptation != ()

    def _pace(self, loss: Any, weights: Any, f: Any, n_new: int) -> np.ndarray:
        """Which of the new constraints self-paced learning lets the step learn: each one's loss
        Σ_l w(l) L(l) with the step's depth ``weights``, and where its first item sits in
        depth 0."""
        per_depth = loss[:, :n_new]
        # Uniform weights are a float: their weighted sum is the mean over depths.
        uniform = isinstance(weights, float)
        combined = per_depth.mean(0) if uniform else (weights[:, None] * per_depth).sum(0)
        positions = self._as_numpy(f[0, 0, :n_new])
        return self._pacer.select(np.asarray(self._as_numpy(combined), np.float64), positions)

    def _remember(
        self, block: np.ndarray, f: Any, slots: np.ndarray, kept: np.ndarray | None = None
    ) -> None:
        """Keep the new constraints for replay and, triplets, for mining, with this step's
        embeddings (L+1, n_roles, T, E) of them, and refresh the cached embeddings of the mined
        ones (the last rows). Quadruplets reveal no classes, so the graph learns nothing from
        them."""
        n_new, n_roles = block.shape[:2]
        embeddings = self._as_numpy(f)
        fresh = embeddings[:, :, :n_new]
        if kept is not None and not kept.all():  # held back: kept out of the memories too
            block, fresh = block[kept], fresh[:, :, kept]
        if self.config.replay and len(block):
            self._replay_for(n_roles).add(block)
        if not self.config.mined:
            return
        if n_roles == 3:
            self._graph.observe(block, fresh)
        else:  # the mined triplets sat in the step as (a, p, a, n)
            embeddings = embeddings[:, [0, 1, 3]]
        mined = embeddings[:, :, embeddings.shape[2] - len(slots) :]  # (L+1, 3, q, E)
        for role in range(3):
            self._graph.refresh(slots[:, role], mined[:, role])

    def _step_finite_only(self, block: np.ndarray, finite: np.ndarray) -> np.ndarray:
        """A non-finite loss never reaches the weights: learn from the rest, count the others."""
        used = np.zeros(len(finite), dtype=bool)
        self.skipped[SKIP_NON_FINITE_LOSS] += int((~finite).sum())
        if finite.any():
            used[finite] = self._step(block[finite], extras=False)
        return used

    @staticmethod
    def _as_numpy(a: Any) -> np.ndarray:
        return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a

    # ---------------------------------------------------------------- state
    def _get_state(self) -> dict[str, Any]:
        return {
            **self._query_state(),
            "rng": _rng_state(self._rng),
            "replay": self._replay.get_state(),
            "replay_quadruplets": None
            if self._replay_quadruplets is None
            else self._replay_quadruplets.get_state(),
            "graph": self._graph.get_state(),
            "prequential": self.prequential.get_state(),
            "decay_origin": self._decay_origin,
            "self_paced": None if self._pacer is None else self._pacer.get_state(),
        }

    def _query_state(self) -> dict[str, Any]:
        # Without the replay and mined memories and the prequential windows: most of a
        # checkpoint's size, and they only serve learning.
        return {
            "network": self.network.state_dict(),
            "alpha": self._as_tensor(self._alpha).detach().cpu().clone(),
            "last_losses": self.last_losses.clone(),
            "head0_prepared": self._head0_prepared,
            "learned": self._learned,
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        alpha = state["alpha"]
        if tuple(alpha.shape) != (self.n_depths,):
            raise ValueError(f"alpha: expected shape ({self.n_depths},), got {tuple(alpha.shape)}")
        self._alpha = self._small(alpha.to(self.device, torch.float32).clone())
        self._last_losses = self._small(state["last_losses"].to(self.device, torch.float32).clone())
        self._head0_prepared = bool(state.get("head0_prepared", True))
        # Checkpoints of the first release hold none of what follows: they start empty.
        self._learned = int(state.get("learned", self.constraints_learned))
        self._decay_origin = int(state.get("decay_origin", 0))
        self._learning_rate = self._step_size()
        if "rng" in state:
            self._rng.bit_generator.state = _rng_from_state(state["rng"])
        if "replay" in state:
            self._replay.set_state(state["replay"])
        self._replay_quadruplets = None
        if state.get("replay_quadruplets") is not None:
            self._replay_for(4).set_state(state["replay_quadruplets"])
        if "graph" in state:
            self._graph.set_state(state["graph"])
        if "prequential" in state:
            self.prequential.set_state(state["prequential"])
        if self._pacer is not None and state.get("self_paced") is not None:
            self._pacer.set_state(state["self_paced"])


def _rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy generator's state as checkpointable plain values (its 128-bit integers as
    strings, which ``torch.load(weights_only=True)`` reads back)."""
    state = rng.bit_generator.state
    return {
        "bit_generator": state["bit_generator"],
        "state": str(state["state"]["state"]),
        "inc": str(state["state"]["inc"]),
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def _rng_from_state(saved: dict[str, Any]) -> dict[str, Any]:
    return {
        "bit_generator": saved["bit_generator"],
        "state": {"state": int(saved["state"]), "inc": int(saved["inc"])},
        "has_uint32": saved["has_uint32"],
        "uinteger": saved["uinteger"],
    }


_CONFIG_FIELDS = {f.name: f for f in dataclasses.fields(OAHUConfig)}
# The constructor's signature lists the config's fields as keyword parameters (with the paper's
# defaults), so that get_params, clone, the repr and rebuilding from a checkpoint read OAHU's
# parameters from its signature like any learner's, and each field is declared once, in
# OAHUConfig.
OAHU.__init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        *list(inspect.signature(OAHU.__init__).parameters.values())[:3],
        *(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type
            )
            for name, f in _CONFIG_FIELDS.items()
        ),
    ]
)
