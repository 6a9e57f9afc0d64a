"""The one interface every online metric learner in oahu implements.

A learner consumes constraints in stream order and maps items to one embedding per depth.
Single-depth learners (the Mahalanobis and bilinear baselines, plain Euclidean) have one depth
and ``alpha == [1.0]``; OAHU has ``L + 1`` depths and learned hedge weights. Everything
downstream (inference, evaluation, checkpoints, serving) talks only to this interface.

What a learner can do is declared, not guessed: its class sets
:class:`~oahu.capabilities.Capabilities`, and callers read them. Its parameters are its
constructor's (``get_params``, ``clone`` and the repr read them from the signature, as in
scikit-learn and river, unless the class declares them in ``_param_specs``), and rebuilding a
learner from a checkpoint calls the constructor with them, after the class's ``migrate_params``
(:mod:`oahu.persistence`); that half lives in :mod:`oahu.learner_params`, and combining copies
of a learner (a learning group's members) in :mod:`oahu.combinable`.

Input validation lives here, once, so that no learner can silently learn from bad data:

* a batch whose feature dimension is wrong raises ``ValueError`` naming the field and shape;
* a constraint with a non-finite value, or a degenerate one (anchor identical to the negative,
  a pair of identical items, a quadruplet whose second pair is one item twice or the first pair
  again), is skipped and counted in ``skipped`` by reason.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from oahu.capabilities import LEARN_HOOKS, Capabilities
from oahu.combinable import Combinable
from oahu.constraint_kinds import ROLES
from oahu.drift import COMBINED, DETECTORS, DriftEvent, DriftMonitor
from oahu.learner_params import LearnerParams
from oahu.preprocessing import InputScaler

MetricKind = Literal["l2", "ip"]

SKIP_NON_FINITE = "non_finite"
SKIP_DEGENERATE = "degenerate"

# The hooks Learner._learn_constraint_rows calls by default, preprocessed, one matrix per role.
_STACKED_HOOKS = ("_learn_triplets", "_learn_quadruplets")


def as_feature_matrix(x: Any, n_features: int, field: str) -> np.ndarray:
    """Return ``x`` as a C-contiguous float32 matrix of shape (n, n_features).

    A single vector is promoted to one row. Raises ``ValueError`` naming ``field`` when the
    shape is wrong, so a caller sees which input was bad and what it looked like.
    """
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n_features:
        raise ValueError(
            f"{field}: expected shape (n, {n_features}) with n_features={n_features}, "
            f"got shape {tuple(np.shape(x))}"
        )
    return np.ascontiguousarray(arr)


def depths_side_by_side(embeddings: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Per-depth embeddings (n_depths, n, dim) as the points of :meth:`Learner.transform`: depth
    l scaled by √α(l), the depths side by side, (n, n_depths · dim) float32 (for embeddings
    already at hand, e.g. a served gallery's).

    >>> emb = np.array([[[1.0, 2.0]], [[3.0, 4.0]]], dtype=np.float32)  # 2 depths, 1 item
    >>> depths_side_by_side(emb, np.array([0.25, 1.0])).tolist()
    [[0.5, 1.0, 3.0, 4.0]]
    """
    depths, n, dim = embeddings.shape
    weights = np.sqrt(alpha).astype(np.float32)
    out = np.empty((n, depths * dim), dtype=np.float32)
    for depth in range(depths):  # into place: no second copy of a large gallery
        np.multiply(embeddings[depth], weights[depth], out=out[:, depth * dim : (depth + 1) * dim])
    return out


class Learner(LearnerParams, Combinable, ABC):
    """Base class of all online metric learners.

    Subclasses set the class attributes, take their parameters as constructor arguments stored
    under the same names (or say where they live in ``_param_value``), and implement
    ``_embed``, ``_get_state``, ``_set_state`` and a learning hook for each declared constraint
    kind (``_learn_triplets``, ``_learn_pairs``, ``_learn_quadruplets``; ``_learn_samples``
    with ``learns_samples``, ``_diagnostics`` with diagnostics). The hooks receive inputs
    already validated and preprocessed (see :mod:`oahu.preprocessing`; ``preprocess="none"``
    by default). A learner that takes triplets and quadruplets as one array overrides
    ``_learn_constraint_rows`` instead, which receives them validated and preprocesses them
    itself.

    Class attributes
    ----------------
    name : registry name used by the CLI and in checkpoints (``"oahu"``, ``"lego"``, ...).
    capabilities : what the learner can do (:class:`Capabilities`).
    metric : ``"l2"`` when items are compared by Euclidean distance between embeddings (smaller is
        closer), ``"ip"`` when they are compared by inner product (a bilinear similarity such as
        OASIS: larger is closer). For ``"ip"``, ``embed(x, role="query")`` and
        ``embed(x, role="gallery")`` may differ, so that ``S(p, q) = <embed_q(p), embed_g(q)>``.
    """

    name: ClassVar[str] = "learner"
    capabilities: ClassVar[Capabilities] = Capabilities()
    metric: ClassVar[MetricKind] = "l2"
    #: The reasons ``skipped`` counts constraints under (summed when copies are combined).
    skip_reasons: ClassVar[tuple[str, ...]] = (SKIP_NON_FINITE, SKIP_DEGENERATE)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A class must implement what it declares (checked once, when it is defined)."""
        super().__init_subclass__(**kwargs)
        caps = cls.capabilities
        needed = [LEARN_HOOKS[kind] for kind in caps.constraint_kinds]
        needed += ["_learn_samples"] * caps.learns_samples + ["_diagnostics"] * bool(
            caps.diagnostics
        )
        needed += ["_averaged_values", "_set_averaged_values"] * caps.combines_parameters
        # A class that takes triplets and quadruplets as one array implements both kinds there.
        if cls._learn_constraint_rows is not Learner._learn_constraint_rows:
            needed = [hook for hook in needed if hook not in _STACKED_HOOKS]
        missing = [hook for hook in needed if getattr(cls, hook) is getattr(Learner, hook)]
        if missing:
            raise TypeError(f"{cls.__name__}: declares capabilities without {', '.join(missing)}")

    def __init__(self, n_features: int, preprocess: str = "none") -> None:
        if int(n_features) < 1:
            raise ValueError(f"n_features: must be a positive integer, got {n_features!r}")
        self.n_features = int(n_features)
        self.preprocess = preprocess
        self.input_scaler = InputScaler(preprocess, self.n_features)
        self.constraints_seen = 0  # every constraint offered, valid or not
        self.constraints_used = 0  # constraints that changed the model (numerator of U)
        self.updates = 0  # parameter steps taken (a micro-batch step counts once)
        self.skipped: Counter[str] = Counter()
        self.queries_only = False  # rebuilt from get_state(queries_only=True): cannot learn
        self.drift: DriftMonitor | None = None  # set by _watch_for_drift

    # ----------------------------------------------------------------- drift
    def _watch_for_drift(self, detector: str) -> None:
        """Watch the prequential mistakes for drift with ``detector`` (``"none"``: do not):
        the combined metric's and, with several depths, each depth's."""
        if detector == "none":
            return
        if detector not in DETECTORS:
            raise ValueError(
                f"drift_detector: unknown {detector!r}; choose one of "
                f"{', '.join(('none', *DETECTORS))}"
            )
        depths = [f"depth:{depth}" for depth in range(self.n_depths)] if self.n_depths > 1 else []
        self.drift = DriftMonitor(detector, [COMBINED, *depths])

    def _observe_mistakes(
        self, mistakes: np.ndarray, update_sizes: Sequence[int] | None = None
    ) -> list[DriftEvent]:
        """Feed prequential outcomes (n, n_signals), True where a signal ranked a constraint
        wrongly before learning it (``update_sizes``: the updates that learned them, each
        ranked by the model before it, :meth:`DriftMonitor.update`); return the drifts of the
        combined metric they complete."""
        if self.drift is None:
            return []
        return [e for e in self.drift.update(mistakes, update_sizes) if e.signal == COMBINED]

    @property
    def drift_events(self) -> list[DriftEvent]:
        """Drifts detected so far (the latest 1,000), every signal, oldest first."""
        return list(self.drift.events) if self.drift is not None else []

    # ----------------------------------------------------------------- counters
    @property
    def constraints_learned(self) -> int:
        """Valid constraints the learner processed (seen minus skipped)."""
        return self.constraints_seen - sum(self.skipped.values())

    @property
    def utilization(self) -> float:
        """Constraint utilisation U: fraction of valid constraints that changed the model."""
        learned = self.constraints_learned
        return self.constraints_used / learned if learned else 0.0

    @property
    def n_depths(self) -> int:
        return 1

    @property
    def constraints_per_update(self) -> int:
        """New constraints one update takes (1: an update after every constraint). Whoever
        hands the learner blocks of constraints should hand at least this many at a time, so
        that its updates are whole."""
        return 1

    @property
    def alpha(self) -> np.ndarray:
        """Hedge weight per depth (sums to 1)."""
        return np.ones(1, dtype=np.float64)

    # ----------------------------------------------------------------- learning
    @property
    def needs_prepare(self) -> bool:
        """Whether ``prepare(X)`` has yet to run: something is fitted on items before learning."""
        return self.input_scaler.needs_fit

    def prepare(self, x: Any) -> None:
        """Fit input preprocessing on unlabelled items (e.g. the development split), once,
        before the stream starts, then hand the preprocessed items to ``_prepare``."""
        items = as_feature_matrix(x, self.n_features, "x")
        self.input_scaler.fit(items)
        self._prepare(self.input_scaler.transform(items))

    def _prepare(self, items: np.ndarray) -> None:
        """What a learner itself fits on the preprocessed items (nothing by default)."""

    def learn(self, kind: str, items: Any, similar: Any = None) -> np.ndarray:
        """Learn constraints of ``kind`` given as one array of items (n, n_roles, n_features)
        in role order (:data:`oahu.constraint_kinds.ROLES`), with ``similar`` (n,) for pairs;
        return a bool mask of those that changed the model (see ``learn_triplets``).

        >>> from oahu.learners.baselines.euclidean import Euclidean
        >>> Euclidean(n_features=1).learn("pair", [[[0.0], [1.0]]], similar=[True]).tolist()
        [False]
        """
        self._check_kind(kind)
        x = np.asarray(items)
        n_roles = len(ROLES[kind])
        if x.ndim != 3 or x.shape[1] != n_roles or x.shape[2] != self.n_features:
            raise ValueError(
                f"items: expected shape (n, {n_roles}, {self.n_features}) for {kind}s, got "
                f"{x.shape}"
            )
        if kind == "pair":
            return self.learn_pairs(x[:, 0], x[:, 1], similar)
        # The items stay one array from here on: a block of 256 triplets of 784 pixels is 2.4 MB,
        # and splitting it into roles to stack them again cost B = 256 learning several copies.
        return self._learn_stacked(kind, np.ascontiguousarray(x, dtype=np.float32))

    def _check_learnable(self, remedy: str = "it cannot learn") -> None:
        if self.queries_only:
            raise ValueError(
                f"{self.name!r} was rebuilt for queries only, without what learning keeps: "
                + remedy
            )

    def _check_kind(self, kind: str) -> None:
        self._check_learnable()
        if not self.capabilities.learns(kind):
            kinds = ", ".join(f"{k}s" for k in self.capabilities.constraint_kinds)
            raise ValueError(f"kind: {self.name!r} learns from {kinds}, not from {kind}s")

    def learn_triplets(self, anchors: Any, positives: Any, negatives: Any) -> np.ndarray:
        """Learn from triplets in stream order; return a bool mask of those that changed the model.

        Rows that are non-finite or degenerate (anchor identical to negative) are skipped,
        counted in ``skipped`` and reported as ``False``.
        """
        self._check_kind("triplet")
        a = as_feature_matrix(anchors, self.n_features, "anchors")
        p = as_feature_matrix(positives, self.n_features, "positives")
        n = as_feature_matrix(negatives, self.n_features, "negatives")
        if not (len(a) == len(p) == len(n)):
            raise ValueError(
                f"anchors, positives, negatives: lengths differ ({len(a)}, {len(p)}, {len(n)})"
            )
        return self._learn_stacked("triplet", np.stack([a, p, n], axis=1))

    def learn_pairs(self, u: Any, v: Any, similar: Any) -> np.ndarray:
        """Learn from labelled pairs in stream order; return a bool mask of those that changed
        the model. ``similar`` is truthy for a similar pair and falsy for a dissimilar one."""
        self._check_kind("pair")
        xu = as_feature_matrix(u, self.n_features, "u")
        xv = as_feature_matrix(v, self.n_features, "v")
        sim = np.atleast_1d(np.asarray(similar)).astype(bool)
        if not (len(xu) == len(xv) == len(sim)):
            raise ValueError(f"u, v, similar: lengths differ ({len(xu)}, {len(xv)}, {len(sim)})")
        valid = self._screen(np.isfinite(xu).all(1) & np.isfinite(xv).all(1), ~(xu == xv).all(1))
        used = np.zeros(len(xu), dtype=bool)
        if valid.any():
            idx = np.flatnonzero(valid)
            scale = self.input_scaler.transform
            used[idx] = self._learn_pairs(scale(xu[idx]), scale(xv[idx]), sim[idx])
        self.constraints_used += int(used.sum())
        return used

    def learn_quadruplets(self, a: Any, b: Any, c: Any, d: Any) -> np.ndarray:
        """Learn from quadruplets, each saying D(a, b) < D(c, d), in stream order; return a bool
        mask of those that changed the model.

        Degenerate rows are skipped: c identical to d (no distance can be below D(c, d) = 0),
        or {c, d} the same items as {a, b} (the constraint contradicts itself).
        """
        self._check_kind("quadruplet")
        rows = [
            as_feature_matrix(v, self.n_features, name)
            for v, name in zip((a, b, c, d), "abcd", strict=True)
        ]
        lengths = [len(r) for r in rows]
        if len(set(lengths)) != 1:
            raise ValueError(f"a, b, c, d: lengths differ {tuple(lengths)}")
        return self._learn_stacked("quadruplet", np.stack(rows, axis=1))

    def _learn_stacked(self, kind: str, x: np.ndarray) -> np.ndarray:
        """Learn triplets (n, 3, d) or quadruplets (n, 4, d), float32 in C order: skip (and
        count) the non-finite and degenerate ones, hand the rest to ``_learn_constraint_rows``.

        A degenerate triplet has its negative identical to its anchor; a degenerate quadruplet
        has c identical to d (no distance can be below D(c, d) = 0), or {c, d} the same items as
        {a, b} (it contradicts itself).
        """

        def same(i: int, j: int) -> np.ndarray:
            return (x[:, i] == x[:, j]).all(1)

        if kind == "triplet":
            degenerate = same(0, 2)
        else:
            degenerate = same(2, 3) | (same(0, 2) & same(1, 3)) | (same(0, 3) & same(1, 2))
        valid = self._screen(np.isfinite(x).all(axis=(1, 2)), ~degenerate)
        used = np.zeros(len(x), dtype=bool)
        if valid.any():
            idx = np.flatnonzero(valid)
            used[idx] = self._learn_constraint_rows(kind, x if len(idx) == len(x) else x[idx])
        self.constraints_used += int(used.sum())
        return used

    def _learn_constraint_rows(self, kind: str, rows: np.ndarray) -> np.ndarray:
        """Learn validated triplets or quadruplets (n, n_roles, d): preprocess them and hand them
        to their hook, one matrix per role. A learner that takes them as one array overrides
        this, and preprocesses them where its update needs them."""
        n, n_roles, d = rows.shape
        rows = self.input_scaler.transform(rows.reshape(n * n_roles, d)).reshape(n, n_roles, -1)
        roles = [np.ascontiguousarray(rows[:, r]) for r in range(n_roles)]
        if kind == "triplet":
            return self._learn_triplets(*roles)
        return self._learn_quadruplets(*roles)

    def _screen(self, finite: np.ndarray, non_degenerate: np.ndarray) -> np.ndarray:
        self.constraints_seen += len(finite)
        n_bad_values = int((~finite).sum())
        n_degenerate = int((finite & ~non_degenerate).sum())
        if n_bad_values:
            self.skipped[SKIP_NON_FINITE] += n_bad_values
        if n_degenerate:
            self.skipped[SKIP_DEGENERATE] += n_degenerate
        return finite & non_degenerate

    def learn_samples(self, x: Any, y: Any) -> np.ndarray:
        """Learn from labelled samples in order, the learner building its own constraints from
        them (``capabilities.learns_samples``); return a bool mask of the samples whose
        constraint changed the model."""
        if not self.capabilities.learns_samples:
            raise ValueError(f"{self.name!r} learns from constraints, not from labelled samples")
        self._check_learnable()
        items = as_feature_matrix(x, self.n_features, "X")
        labels = np.asarray(y)
        if labels.ndim != 1 or len(labels) != len(items):
            raise ValueError(f"y: expected {len(items)} labels, got shape {labels.shape}")
        return self._learn_samples(items, labels)

    # The hooks: overridden for what the class declares (see __init_subclass__).
    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _learn_pairs(self, u: np.ndarray, v: np.ndarray, similar: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _learn_quadruplets(
        self, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
    ) -> np.ndarray:
        raise NotImplementedError

    def _learn_samples(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _diagnostics(self) -> dict[str, Any]:
        raise NotImplementedError

    def diagnostics(self) -> dict[str, float | list[float]]:
        """The declared diagnostics (``capabilities.diagnostics``) by name, as plain floats."""
        if not self.capabilities.diagnostics:
            return {}
        values = self._diagnostics()
        return {d.name: values[d.name] for d in self.capabilities.diagnostics}

    # ----------------------------------------------------------------- inference
    def embed(self, x: Any, role: Literal["query", "gallery"] = "query") -> np.ndarray:
        """Embed items: float32 array of shape (n_depths, n_items, embedding_dim)."""
        if role not in ("query", "gallery"):
            raise ValueError(f"role: must be 'query' or 'gallery', got {role!r}")
        x = self.input_scaler.transform(as_feature_matrix(x, self.n_features, "x"))
        return self._embed(x, role)

    def transform(self, x: Any) -> np.ndarray:
        """Items as points of one Euclidean space: depth l's embedding scaled by √α(l), the
        depths side by side, (n_items, n_depths · embedding_dim) float32.

        Squared distances there are Σ_l α(l)·D(l)², the hedge-weighted combination of the
        depths' squared distances; for a one-depth learner, its learned metric itself. (The
        paper's kNN scores depths by Eq. 23-25 instead: :mod:`oahu.inference`.) A similarity
        learner (``metric == "ip"``) has no such space and raises ``ValueError``.

        >>> from oahu.learners.baselines.euclidean import Euclidean
        >>> Euclidean(n_features=2).transform([[3.0, 4.0]]).tolist()
        [[3.0, 4.0]]
        """
        if self.metric != "l2":
            raise ValueError(
                f"transform: {self.name!r} learns a similarity (inner product), not a distance, "
                "so items have no Euclidean embedding; compare them with embed() by role"
            )
        return depths_side_by_side(self.embed(x), self.alpha)

    @abstractmethod
    def _embed(self, x: np.ndarray, role: Literal["query", "gallery"]) -> np.ndarray:
        """Embed validated, preprocessed float32 items (n, n_features)."""

    # ----------------------------------------------------------------- state
    def get_state(self, queries_only: bool = False) -> dict[str, Any]:
        """Everything needed to continue exactly where this learner stands; with
        ``queries_only``, only what answering queries needs (the model without the memories of
        past constraints that learning keeps, ``_query_state``): a learner rebuilt from it
        embeds, classifies and retrieves the same, and refuses to learn or to be saved.

        Only tensors, numbers, strings, lists and dicts, so that ``torch.load(...,
        weights_only=True)`` can read it back.
        """
        if not queries_only:
            self._check_learnable("save or continue the learner it was taken from")
        return {
            "learner": self.name,
            "n_features": self.n_features,
            "counters": {
                "constraints_seen": self.constraints_seen,
                "constraints_used": self.constraints_used,
                "updates": self.updates,
                "skipped": dict(self.skipped),
            },
            "params": self.get_params(),
            "preprocess": self.input_scaler.get_state(),
            "model": self._query_state() if queries_only else self._get_state(),
            "queries_only": queries_only,
            # Queries need no detector: a snapshot does not carry its outcomes to the server.
            "drift": None if queries_only or self.drift is None else self.drift.get_state(),
        }

    def _query_state(self) -> dict[str, Any]:
        """The part of ``_get_state`` queries need: all of it unless a learner keeps memories
        for learning only."""
        return self._get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("learner") != self.name:
            raise ValueError(
                f"learner: checkpoint holds {state.get('learner')!r}, not {self.name!r}"
            )
        counters = state["counters"]
        self.constraints_seen = int(counters["constraints_seen"])
        self.constraints_used = int(counters["constraints_used"])
        self.updates = int(counters["updates"])
        self.skipped = Counter({k: int(v) for k, v in counters["skipped"].items()})
        self.input_scaler.set_state(state["preprocess"])
        self.queries_only = bool(state.get("queries_only", False))
        self._set_state(state["model"])
        if self.drift is not None and state.get("drift") is not None:
            self.drift.set_state(state["drift"])

    @abstractmethod
    def _get_state(self) -> dict[str, Any]: ...

    @abstractmethod
    def _set_state(self, state: dict[str, Any]) -> None: ...

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and ``copy.deepcopy``) through :mod:`oahu.persistence`: the parameters and
        ``get_state``, never the live attributes (OAHU's weights are tensors that numpy views
        share, and a pickled view would no longer share them)."""
        from oahu import persistence  # imported here: persistence imports this module

        return (persistence.restore, (persistence.learner_to_bytes(self),))

    def summary(self) -> dict[str, Any]:
        """Counters and hedge weights as plain JSON-able values."""
        return {
            "learner": self.name,
            "constraints_seen": self.constraints_seen,
            "constraints_learned": self.constraints_learned,
            "constraints_used": self.constraints_used,
            "updates": self.updates,
            "skipped": dict(self.skipped),
            "utilization": self.utilization,
            "alpha": [float(a) for a in self.alpha],
            "drift_detector": self.drift.detector if self.drift is not None else "none",
            "drift_detected": dict(self.drift.counts) if self.drift is not None else {},
            "drift_events": [e.to_dict() for e in self.drift_events],
        }
