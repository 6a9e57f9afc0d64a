"""Cross-modal OAHU (ours, after CSLP): one OAHU tower per modality into one shared space.

Each modality (a name, e.g. ``"pix"`` and ``"fou"``) has its own input dimension, its own
preprocessing and its own tower, an OAHU :class:`~oahu.learners.oahu.network.MultiDepthNetwork`
(one embedding head per depth, residual heads); all towers embed into one space of
``embedding_dim`` dimensions, so items of different modalities are compared directly. One hedge
α over depths (Eq. 20 of the OAHU paper, driven by prequential mistakes as in oahu's default
learner) weighs depth l's distance D(l)(u, v) = ‖f(l)_{m(u)}(u) − f(l)_{m(v)}(v)‖², whatever
the modalities of u and v: the combined distance is Σ_l α(l) D(l).

It learns, one constraint at a time (strict mode), from the constraint kinds of CSLP (Zhen and
Zha, AAAI 2015, Section 3): a pair "u and v are linked" (or not) and a preference "the anchor is
closer to the positive than to the negative", with items of any modalities; a cross-modal pair
has one item in each. The per-depth losses (docs/cross-modal.md, Eq. CM1-CM2) are the margin
triplet loss of oahu's default learner and a pair loss with the threshold b = 1 (60° between
unit embeddings), averaged over depths; their gradients with respect to the embeddings are
written out and handed to each tower's own step (Eq. 21-22 of the OAHU paper). Each update also
replays ``replay`` constraints from a reservoir of past ones, as the default learner does.

Every embedding also has binary codes (:mod:`oahu.learners.cross_modal.codes`) of several
lengths, learned beside the metric, with the length chosen by a hedge over lengths.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from oahu.capabilities import Capabilities, Diagnostic
from oahu.checks import check_int, check_number
from oahu.generator_state import generator_state, restore_generator
from oahu.learner import MetricKind
from oahu.learners.cross_modal.codes import BinaryCodes
from oahu.learners.cross_modal.loss import constraint_gradients
from oahu.learners.oahu.config import OAHUConfig
from oahu.learners.oahu.hedge import hedge_update
from oahu.learners.oahu.network import MultiDepthNetwork
from oahu.preprocessing import InputScaler, check_preprocess
from oahu.threads import blas_threads

__all__ = ["CrossModalOAHU"]

_MEMORY_SEED = 0x4D4D
# The roles of each constraint kind's items, in order (their names in input errors).
_ROLES = {"pair": ("u", "v"), "triplet": ("anchor", "positive", "negative")}
# A constraint as the learner holds it: preprocessed items, their modalities, a pair's flag.
_Held = tuple[tuple[np.ndarray, ...], tuple[int, ...], bool | None]


class CrossModalOAHU:
    """OAHU with one tower per modality, binary codes and a hedge over code lengths.

    Parameters
    ----------
    n_features : input dimension of each modality, by name, e.g. ``{"pix": 240, "fou": 76}``
        (the first named is modality A).
    embedding_dim : dimension of the shared space.
    n_hidden_layers, hidden_width : each tower's MLP (L hidden layers, L + 1 depths).
    learning_rate : η of the towers' SGD steps, decaying as η · max(1 / √(1 + t / lr_decay),
        lr_floor) after t constraints.
    margin : of the triplet and pair losses.
    beta, smoothing : the hedge over depths (Eq. 20; α floor s / (L + 1)).
    replay, replay_memory : past constraints relearned per update, from a reservoir this large.
    code_bits : the binary code lengths the hedge chooses among.
    preprocess : each modality's input preprocessing (:mod:`oahu.preprocessing`), fitted by
        :meth:`prepare` on that modality's unlabelled items.
    seed : seeds the towers, the codes and the replay draws.

    >>> rng = np.random.default_rng(0)
    >>> model = CrossModalOAHU({"img": 6, "txt": 4}, embedding_dim=4, hidden_width=8)
    >>> model.prepare("img", rng.normal(size=(50, 6)))
    >>> model.prepare("txt", rng.normal(size=(50, 4)))
    >>> changed = model.learn_pair(rng.normal(size=6), rng.normal(size=4), ("img", "txt"), True)
    >>> model.embed(rng.normal(size=(3, 4)), "txt").shape  # 3 depths of 4, side by side
    (3, 12)
    >>> model.codes(rng.normal(size=(3, 6)), "img", bits=32).shape
    (3, 4)
    """

    name: ClassVar[str] = "oahu-cross-modal"
    # What the service reads to learn, report and export it, as it reads a Learner's.
    capabilities: ClassVar[Capabilities] = Capabilities(
        constraint_kinds=("pair", "triplet"),
        diagnostics=(
            Diagnostic(
                "prequential_accuracy",
                "Share of constraints the combined metric ranked rightly before learning them.",
            ),
            Diagnostic("code_bits", "The binary code length the hedge over lengths chooses."),
        ),
        cross_modal=True,
    )
    metric: ClassVar[MetricKind] = "l2"
    drift = None  # no drift detector watches a cross-modal model

    def __init__(
        self,
        n_features: dict[str, int],
        embedding_dim: int = 64,
        n_hidden_layers: int = 2,
        hidden_width: int = 128,
        learning_rate: float = 0.05,
        lr_decay: float = 10_000.0,
        lr_floor: float = 0.5,
        margin: float = 0.1,
        beta: float = 0.99,
        smoothing: float = 0.1,
        replay: int = 1,
        replay_memory: int = 2000,
        code_bits: Sequence[int] = (16, 32, 64, 128),
        preprocess: str = "standardize+pca:64+unit",
        seed: int = 0,
    ) -> None:
        if not isinstance(n_features, dict) or len(n_features) < 2:
            raise ValueError(
                f"n_features: a dimension for each of two or more modalities by name, got "
                f"{n_features!r}"
            )
        for modality, dim in n_features.items():
            if not isinstance(modality, str) or not modality:
                raise ValueError(f"n_features: a modality is named by a string, got {modality!r}")
            if not isinstance(dim, int | np.integer) or dim < 1:
                raise ValueError(f"n_features[{modality!r}]: a positive integer, got {dim!r}")
        self.n_features = {m: int(d) for m, d in n_features.items()}
        self.modalities = tuple(self.n_features)
        self.embedding_dim = check_int(embedding_dim, "embedding_dim")
        self.n_hidden_layers = check_int(n_hidden_layers, "n_hidden_layers", minimum=0)
        self.hidden_width = check_int(hidden_width, "hidden_width")
        self.learning_rate = check_number(learning_rate, "learning_rate", 0.0, None, "neither")
        self.lr_decay = check_number(lr_decay, "lr_decay", 0.0)
        self.lr_floor = check_number(lr_floor, "lr_floor", 0.0, 1.0)
        self.margin = check_number(margin, "margin", 0.0)
        self.beta = check_number(beta, "beta", 0.0, 1.0, "neither")
        self.smoothing = check_number(smoothing, "smoothing", 0.0, 1.0, "left")
        self.replay = check_int(replay, "replay", minimum=0)
        self.replay_memory = check_int(replay_memory, "replay_memory")
        self.code_bits = tuple(int(c) for c in code_bits)
        check_preprocess(preprocess)
        self.preprocess = preprocess
        self.seed = check_int(seed, "seed", minimum=0)
        self.scalers = {m: InputScaler(preprocess, d) for m, d in self.n_features.items()}
        self.towers = {
            m: MultiDepthNetwork(
                self.scalers[m].n_outputs,
                OAHUConfig(
                    n_hidden_layers=self.n_hidden_layers,
                    hidden_width=self.hidden_width,
                    embedding_dim=self.embedding_dim,
                    # Towers of different inputs share no axes: an identity start would pair
                    # input coordinates at random, a random orthogonal one at least spreads them.
                    head0_init="random",
                    preprocess="none",
                    seed=self.seed + k,
                ),
            )
            for k, m in enumerate(self.modalities)
        }
        n_depths = self.n_hidden_layers + 1
        self.alpha = np.full(n_depths, 1.0 / n_depths)
        self.binary_codes = BinaryCodes(
            n_depths * self.embedding_dim, self.code_bits, margin=self.margin, seed=self.seed
        )
        self._rng = np.random.default_rng([self.seed, _MEMORY_SEED])
        # The reservoir: preprocessed items of past constraints, with their modalities.
        self._memory: list[_Held] = []
        self.constraints_seen = 0
        self.constraints_used = 0
        self.mistakes = 0.0  # prequential mistakes of the combined metric
        self.queries_only = False  # rebuilt from get_state(queries_only=True): cannot learn

    # ------------------------------------------------------------------ inputs
    def _modality_index(self, modality: str) -> int:
        if modality not in self.n_features:
            raise ValueError(f"modality: one of {self.modalities}, got {modality!r}")
        return self.modalities.index(modality)

    def _features(self, x: Any, modality: str, field: str = "x") -> np.ndarray:
        self._modality_index(modality)
        arr = np.asarray(x, dtype=np.float32)
        if arr.ndim == 1:
            arr = arr[None, :]
        dim = self.n_features[modality]
        if arr.ndim != 2 or arr.shape[1] != dim:
            raise ValueError(
                f"{field}: expected shape (n, {dim}) for modality {modality!r}, got {np.shape(x)}"
            )
        if not np.isfinite(arr).all():
            raise ValueError(f"{field}: non-finite values in items of modality {modality!r}")
        return arr

    def prepare(self, modality: str, x: Any) -> None:
        """Fit ``modality``'s preprocessing on its unlabelled items, once, before learning."""
        features = self._features(x, modality)
        self.scalers[modality].fit(features)

    @property
    def needs_prepare(self) -> bool:
        return any(s.needs_fit for s in self.scalers.values())

    def _check_prepared(self) -> None:
        missing = [m for m, s in self.scalers.items() if s.needs_fit]
        if missing:
            raise ValueError(f"prepare: call prepare(modality, X) first for {missing}")

    # ------------------------------------------------------------------ queries
    @property
    def n_depths(self) -> int:
        return self.n_hidden_layers + 1

    @property
    def chosen_bits(self) -> int:
        """The code length the hedge over lengths currently chooses."""
        return self.binary_codes.chosen_bits

    def embed(self, x: Any, modality: str) -> np.ndarray:
        """Items of ``modality`` as points of the shared space, (n, n_depths · embedding_dim):
        depth l's embedding scaled by √α(l), so that squared Euclidean distance between any two
        points, of any modalities, is the combined distance Σ_l α(l) D(l)."""
        features = self._features(x, modality)  # names a bad modality before any lookup
        self._check_prepared()
        items = self.scalers[modality].transform(features)
        with blas_threads(1):
            f = self.towers[modality].embed(items)  # (n_depths, n, E)
        weights = np.sqrt(self.alpha).astype(np.float32)
        return np.ascontiguousarray((f * weights[:, None, None]).transpose(1, 0, 2)).reshape(
            len(items), -1
        )

    def codes(self, x: Any, modality: str, bits: int | None = None) -> np.ndarray:
        """Packed binary codes (n, bits / 8) of items of ``modality`` (the chosen length by
        default)."""
        return self.binary_codes.encode(self.embed(x, modality), bits)

    # ------------------------------------------------------------------ learning
    def learn_many(
        self,
        kind: str,
        items: Sequence[Sequence[Any]],
        modalities: Sequence[Sequence[str]],
        similar: Sequence[bool] | None = None,
    ) -> np.ndarray:
        """Learn constraints of one ``kind`` in order ("pair": ``similar[i]`` says whether the
        two items of constraint i are linked; "triplet": anchor, positive, negative), each with
        its ``items`` in role order and the modality of each, one update each as
        :meth:`learn_pair` and :meth:`learn_triplet` learn them, under one limit of the BLAS
        threads rather than one per constraint (a limit costs ~50 µs here, a tenth of an
        update); whether each changed the model.

        >>> rng = np.random.default_rng(1)
        >>> model = CrossModalOAHU({"a": 3, "b": 2}, embedding_dim=2, hidden_width=4)
        >>> model.prepare("a", rng.normal(size=(20, 3)))
        >>> model.prepare("b", rng.normal(size=(20, 2)))
        >>> pairs = [([1, 0, 0], [0, 1]), ([0, 1], [0, 0, 1])]
        >>> model.learn_many("pair", pairs, [("a", "b"), ("b", "a")], [True, False]).shape
        (2,)
        >>> model.constraints_seen, model.updates
        (2, 2)
        """
        if kind not in _ROLES:
            raise ValueError(f"kind: one of {tuple(_ROLES)}, got {kind!r}")
        changed = np.zeros(len(items), dtype=bool)
        with blas_threads(1):
            for i, (row, names) in enumerate(zip(items, modalities, strict=True)):
                flag = None if kind == "triplet" else bool(similar[i])  # type: ignore[index]
                changed[i] = self._learn(*self._prepared(row, names, _ROLES[kind]), flag)
        return changed

    def _step_size(self) -> float:
        decay = 1.0
        if self.lr_decay:
            decay = max(1.0 / math.sqrt(1.0 + self.constraints_seen / self.lr_decay), self.lr_floor)
        return self.learning_rate * decay

    def learn_pair(self, u: Any, v: Any, modalities: tuple[str, str], similar: bool) -> bool:
        """Learn "u and v are linked" (``similar``) or not; return whether the model changed."""
        with blas_threads(1):
            return self._learn(*self._prepared((u, v), modalities, _ROLES["pair"]), bool(similar))

    def learn_triplet(
        self, anchor: Any, positive: Any, negative: Any, modalities: tuple[str, str, str]
    ) -> bool:
        """Learn "anchor is closer to positive than to negative"; return whether the model
        changed."""
        items = (anchor, positive, negative)
        with blas_threads(1):
            return self._learn(*self._prepared(items, modalities, _ROLES["triplet"]), None)

    def _prepared(
        self, xs: Sequence[Any], modalities: Sequence[str], roles: tuple[str, ...]
    ) -> tuple[tuple[np.ndarray, ...], tuple[int, ...]]:
        """One constraint's items, each checked and preprocessed in its modality, and the
        index of each modality."""
        self._check_prepared()
        mods = tuple(self._modality_index(m) for m in modalities)
        if len(mods) != len(roles):
            kind = "pair" if len(roles) == 2 else "triplet"
            raise ValueError(f"modalities: one per item of a {kind}, got {tuple(modalities)!r}")
        items = tuple(
            self.scalers[m].transform(self._features(x, m, role))[0]
            for x, m, role in zip(xs, modalities, roles, strict=True)
        )
        return items, mods

    def _learn(
        self, items: tuple[np.ndarray, ...], mods: tuple[int, ...], similar: bool | None
    ) -> bool:
        if self.queries_only:
            raise ValueError(
                f"{self.name!r} was rebuilt for queries only, without its replay reservoir: it "
                "cannot learn"
            )
        batch = [(items, mods, similar)]
        if self._memory and self.replay:
            picks = self._rng.choice(len(self._memory), min(self.replay, len(self._memory)), False)
            batch += [self._memory[i] for i in picks]
        changed = self._update(batch)  # within the caller's limit of the BLAS threads
        self._remember(batch[0])
        self.constraints_seen += 1
        self.constraints_used += int(changed)
        return changed

    def _remember(self, constraint: tuple) -> None:
        # Reservoir sampling: every constraint seen has the same chance to be held.
        if len(self._memory) < self.replay_memory:
            self._memory.append(constraint)
            return
        j = int(self._rng.integers(self.constraints_seen + 1))
        if j < self.replay_memory:
            self._memory[j] = constraint

    def _update(self, batch: list[_Held]) -> bool:
        """One SGD step on the new constraint (the batch's first) and its replayed ones."""
        # Rows of each tower: every item of its modality in the batch, in order.
        rows: list[list[np.ndarray]] = [[] for _ in self.modalities]
        where: list[list[tuple[int, int]]] = []
        for items, mods, _ in batch:
            places = []
            for x, m in zip(items, mods, strict=True):
                places.append((m, len(rows[m])))
                rows[m].append(x)
            where.append(places)
        caches = {
            m: self.towers[name].forward(np.stack(rows[m]))
            for m, name in enumerate(self.modalities)
            if rows[m]
        }
        grads = {m: np.zeros_like(c.embeddings) for m, c in caches.items()}
        alpha = self.alpha
        lr = self._step_size()
        changed = False
        for i, ((_, _, similar), places) in enumerate(zip(batch, where, strict=True)):
            f = [caches[m].embeddings[:, r] for m, r in places]  # each (n_depths, E)
            parts, active, wrong, combined_wrong = constraint_gradients(
                f, similar, self.margin, alpha
            )
            for (m, r), part in zip(places, parts, strict=True):
                grads[m][:, r] += part
            if i == 0:  # prequential: the new constraint, ranked before it is learned
                changed = bool(active.any())
                self.mistakes += combined_wrong
                self.alpha = hedge_update(
                    alpha, wrong.astype(np.float64), self.beta, self.smoothing
                )
                self._learn_codes(similar, caches, places, lr / self.learning_rate)
        for m, cache in caches.items():
            if grads[m].any():
                self.towers[self.modalities[m]].step(cache, grads[m], lr)
        return changed

    def _learn_codes(
        self, similar: bool | None, caches: dict, places: list, lr_scale: float
    ) -> None:
        """Rank the new constraint by every code length, then learn it, on the embeddings as
        :meth:`embed` gives them (each depth scaled by √α)."""
        weights = np.sqrt(self.alpha).astype(np.float32)
        z = np.stack(
            [(caches[m].embeddings[:, r] * weights[:, None]).reshape(-1) for m, r in places]
        )
        self.binary_codes.update(z, similar, lr_scale)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_features={self.n_features!r}, seed={self.seed})"

    # ------------------------------------------------------------------ state
    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters but ``n_features``, as given."""
        names = list(inspect.signature(type(self).__init__).parameters)[2:]
        return {name: getattr(self, name) for name in names}

    def get_state(self, queries_only: bool = False) -> dict[str, Any]:
        """Everything the model is, as plain containers and tensors (what
        :mod:`oahu.persistence` saves). ``queries_only``: without the replay reservoir and the
        random state, enough to embed and code items but not to go on learning exactly."""
        params = self.get_params()
        params["code_bits"] = list(params["code_bits"])
        state: dict[str, Any] = {
            "learner": self.name,
            "n_features": dict(self.n_features),
            "params": params,
            "scalers": {m: s.get_state() for m, s in self.scalers.items()},
            "towers": {m: t.state_dict() for m, t in self.towers.items()},
            "alpha": torch.from_numpy(self.alpha.copy()),
            "codes": self.binary_codes.get_state(),
            "counters": {
                "constraints_seen": self.constraints_seen,
                "constraints_used": self.constraints_used,
                "mistakes": float(self.mistakes),
            },
            "queries_only": queries_only,
        }
        if not queries_only:
            state["memory"] = [
                {
                    "items": [torch.from_numpy(np.array(x)) for x in items],
                    "modalities": list(mods),
                    "similar": similar,
                }
                for items, mods, similar in self._memory
            ]
            state["rng"] = generator_state(self._rng)
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CrossModalOAHU:
        """A model holding ``state`` (:meth:`get_state`), built from its parameters."""
        if state.get("learner") != cls.name:
            raise ValueError(
                f"learner: a {cls.name!r} state expected, got {state.get('learner')!r}"
            )
        model = cls(state["n_features"], **state["params"])
        model.set_state(state)
        return model

    def set_state(self, state: dict[str, Any]) -> None:
        if dict(state["n_features"]) != self.n_features:
            raise ValueError(
                f"n_features: the state has {state['n_features']}, this model {self.n_features}"
            )
        for m, scaler in self.scalers.items():
            scaler.set_state(state["scalers"][m])
        for m, tower in self.towers.items():
            tower.load_state_dict(state["towers"][m])
        self.alpha = state["alpha"].numpy().astype(np.float64).copy()
        self.binary_codes.set_state(state["codes"])
        counters = state["counters"]
        self.constraints_seen = int(counters["constraints_seen"])
        self.constraints_used = int(counters["constraints_used"])
        self.mistakes = float(counters["mistakes"])
        self.queries_only = bool(state.get("queries_only", False))
        self._memory = [
            (
                tuple(x.numpy().astype(np.float32) for x in held["items"]),
                tuple(int(m) for m in held["modalities"]),
                held["similar"],
            )
            for held in state.get("memory", [])
        ]
        if "rng" in state:
            restore_generator(self._rng, state["rng"])

    # ------------------------------------------------------------------ report
    @property
    def prequential_accuracy(self) -> float:
        """Share of constraints the combined metric ranked rightly before learning them."""
        return 1.0 - self.mistakes / self.constraints_seen if self.constraints_seen else 0.0

    # One constraint, one update (strict mode): the counters the service reports for every
    # learner, with nothing ever skipped (inputs are checked before they are learned).
    @property
    def skipped(self) -> Counter[str]:
        return Counter()

    @property
    def updates(self) -> int:
        return self.constraints_seen

    @property
    def constraints_learned(self) -> int:
        return self.constraints_seen

    @property
    def utilization(self) -> float:
        return self.constraints_used / self.constraints_seen if self.constraints_seen else 0.0

    def diagnostics(self) -> dict[str, float | list[float]]:
        """The declared diagnostics (``capabilities.diagnostics``) by name."""
        return {
            "prequential_accuracy": self.prequential_accuracy,
            "code_bits": float(self.chosen_bits),
        }

    def summary(self) -> dict[str, Any]:
        """Counters, hedge weights and modalities as plain JSON-able values.

        >>> CrossModalOAHU({"a": 3, "b": 2}).summary()["modalities"]
        {'a': 3, 'b': 2}
        """
        return {
            "learner": self.name,
            "modalities": dict(self.n_features),
            "constraints_seen": self.constraints_seen,
            "constraints_learned": self.constraints_learned,
            "constraints_used": self.constraints_used,
            "updates": self.updates,
            "skipped": {},
            "utilization": self.utilization,
            "alpha": [float(a) for a in self.alpha],
            "code_bits": self.chosen_bits,
            "code_weights": self.binary_codes.weights.tolist(),
            "drift_detector": "none",
            "drift_detected": {},
            "drift_events": [],
        }
