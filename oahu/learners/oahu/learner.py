"""OAHU: Online metric learning with Adaptive Hedge Update (Algorithm 1 of the paper), and the
extensions that make oahu's default learner improve as constraints arrive.

:class:`OAHU` is the :class:`~oahu.learner.Learner`: it builds the pieces of an update from its
configuration (the network, the loss, the hedge signal, the replay reservoir and constraint
graph, the self-paced selector), hands each block of new constraints to the update step
(:mod:`oahu.learners.oahu.update`, which says what one update does, in order), counts what the
step reports, adapts to the drifts its prequential mistakes reveal, and owns the checkpoints.

Strict mode (``batch_size=1``) updates after every constraint. Micro-batch mode takes B new
triplets per step (the replayed and mined ones stay ``replay`` and ``mined`` per step); with
B = 1 it is the same code path as strict mode, so the two agree bit for bit.
``OAHU(preset="paper")`` is Algorithm 1 exactly: ABTL, α-weighted gradient, hedge on the loss,
no replay or mining, constant η.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from oahu.capabilities import Capabilities, Diagnostic
from oahu.generator_state import generator_state, restore_generator
from oahu.learner import Learner
from oahu.learners.oahu.combine import combinable_values, set_combinable_values
from oahu.learners.oahu.config import AUTO, PRESETS, OAHUConfig, adaptation_steps
from oahu.learners.oahu.constraint_graph import ConstraintGraph
from oahu.learners.oahu.device import resolve_device
from oahu.learners.oahu.device_steps import DeviceResidentSteps
from oahu.learners.oahu.hedge import HEDGE_SIGNALS
from oahu.learners.oahu.loss import LOSSES
from oahu.learners.oahu.network import MultiDepthNetwork
from oahu.learners.oahu.prequential import PrequentialAccuracy
from oahu.learners.oahu.replay_memory import ReplayReservoir
from oahu.learners.oahu.self_paced import SelfPacedSelector
from oahu.learners.oahu.update import StepResult, UpdateStep
from oahu.threads import blas_threads

__all__ = ["OAHU"]

SKIP_NON_FINITE_LOSS = "non_finite_loss"
_EMBED_CHUNK = 8192
# Seed tags: the network draws from torch's generator seeded with ``seed``; replay and mining draw
# from a numpy generator seeded with [seed, _MEMORY_SEED], independent of it.
_MEMORY_SEED = 0x4D45
# Self-paced learning clusters constraints by this many leading coordinates of their first item's
# depth-0 embedding (E0 starts as the principal axes: the leading ones carry most of the spread).
_PACE_COORDINATES = 8
_CONFIG_FIELDS = {f.name: f for f in dataclasses.fields(OAHUConfig)}
# OAHUConfig's fields that came with oahu's own default learner. A checkpoint whose OAHU params
# hold none of them was written when every OAHU was the paper's Algorithm 1.
_FIELDS_OF_THE_DEFAULT_LEARNER = frozenset(
    {
        "lr_decay",
        "loss",
        "margin",
        "hedge_signal",
        "depth_weighting",
        "residual_heads",
        "replay",
        "replay_memory",
        "mined",
        "item_memory",
        "mining_candidates",
        "graph_memory",
        "prequential_window",
    }
)
# OAHUConfig's fields added to the default learner since, with the value that reproduces how a
# checkpoint written before them learned.
_FIELDS_ADDED_LATER = {"lr_floor": 0.0, "early_item_memory": 0, "max_update_size": 0,
                       "mine_ahead": 32, "early_mine_ahead": 0}  # fmt: skip


class OAHU(Learner):
    """The OAHU learner: a multi-depth network, a per-depth loss and hedge weights over depths.

    Parameters
    ----------
    n_features : input dimension d.
    preset : a named configuration of :data:`oahu.learners.oahu.config.PRESETS` (``"paper"``:
        the published algorithm); None for oahu's defaults (:class:`OAHUConfig`).
    **fields : any field of :class:`OAHUConfig` (``hidden_width``, ``learning_rate``,
        ``batch_size``, ``device``, ...), overriding the preset's or the default value. They are
        the learner's parameters (``OAHU.param_names()`` lists them), and ``get_params`` returns
        each as the learner uses it. :meth:`from_config` takes a whole :class:`OAHUConfig`.

    Each update is an :class:`~oahu.learners.oahu.update.UpdateStep` (``update_step``), built
    from the configuration with its pieces: the loss (``loss``: a
    :class:`~oahu.learners.oahu.loss.DepthLoss`) and the hedge signal (``hedge_signal``: a
    :class:`~oahu.learners.oahu.hedge.HedgeSignal`).

    The default preprocessing (``"auto"``) projects items onto their principal axes, fitted by
    ``prepare(X)`` on unlabelled items (the development split, the service's gallery) before the
    first constraint, and keeps the norm of items of at most 200 features as one more coordinate
    (:mod:`oahu.preprocessing`).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> model = OAHU(n_features=8, hidden_width=16, device="cpu")
    >>> model.prepare(rng.random((50, 8), dtype=np.float32))
    >>> a, p, n = rng.random((3, 20, 8), dtype=np.float32)
    >>> used = model.learn_triplets(a, p, n)
    >>> model.updates, model.embed(a).shape  # 8 features and their norm: 9 coordinates
    (20, (3, 20, 9))
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
        combines_parameters=True,
        torch_device=True,
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
    skip_reasons: ClassVar[tuple[str, ...]] = (*Learner.skip_reasons, SKIP_NON_FINITE_LOSS)

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
        self._head0_prepared = self.config.head0_init != "pca"
        self._rng = np.random.default_rng([self.config.seed, _MEMORY_SEED])
        self.prequential = PrequentialAccuracy(self.config.n_depths, self.config.prequential_window)
        # The step learns with "auto" settled by the items' own dimension and the batch size;
        # the learner's parameters keep "auto", so that a checkpoint rebuilds the same choice.
        settled = {"mined": self.config.mined_for(n_features), "replay": self.config.replay_count}
        self.update_step = UpdateStep(
            self.config.replace(**settled),
            self.network,
            self.input_scaler,
            LOSSES[self.config.loss].from_config(self.config),
            HEDGE_SIGNALS[self.config.hedge_signal](),
            self.prequential,
            self._new_replay(),
            self._new_graph(),
            self._new_pacer() if self.config.self_paced else None,
        )
        self._watch_for_drift(self.config.drift_detector)
        self._adaptation = adaptation_steps(self.config.drift_adaptation)
        self._device_steps: DeviceResidentSteps | None = None

    @property
    def device_steps(self) -> DeviceResidentSteps | None:
        """The device-resident updates, when they are on (``_steps_on_device``): made at
        first use, so that a model that only answers queries (a serving snapshot) holds none of
        their buffers."""
        if self._device_steps is None and self._steps_on_device():
            self._device_steps = DeviceResidentSteps(self.update_step, self.config.device_block)
        return self._device_steps

    def _steps_on_device(self) -> bool:
        """Whether updates of triplets run as device-resident blocks: as
        ``step_engine`` says, "auto" on a GPU where the configuration fits them."""
        c = self.config
        if c.step_engine == "auto":
            return self.device.type != "cpu" and c.fits_device_steps
        return c.step_engine == "device"

    @classmethod
    def _param_specs(cls) -> tuple[inspect.Parameter, ...]:
        """``preset``, then every field of :class:`OAHUConfig` with oahu's default: the
        constructor takes the fields as keywords, so that each is declared once, in the config."""
        keyword = inspect.Parameter.KEYWORD_ONLY
        return (
            inspect.Parameter("preset", keyword, default=None, annotation="str | None"),
            *(
                inspect.Parameter(name, keyword, default=f.default, annotation=f.type)
                for name, f in _CONFIG_FIELDS.items()
            ),
        )

    @classmethod
    def settled_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with ``replay="auto"`` written out as the count it settles to by the batch
        size (:attr:`OAHUConfig.replay_count`): a strict learner saved with ``replay=1`` learns
        as one built with ``"auto"``. (``mined="auto"`` settles by the items' dimension, which
        the parameters do not hold, and stays.)

        >>> OAHU.settled_params({"replay": "auto", "batch_size": 256})
        {'replay': 0, 'batch_size': 256}
        >>> OAHU.settled_params({"replay": "auto"})["replay"]
        1
        """
        if params.get("replay") != AUTO:
            return dict(params)
        batch_size = params.get("batch_size", OAHUConfig.batch_size)
        return {**params, "replay": OAHUConfig(batch_size=batch_size).replay_count}

    @classmethod
    def migrate_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The constructor arguments that rebuild an OAHU saved with ``params``.

        An OAHU saved before oahu's default learner existed ran the paper's algorithm (ABTL,
        hedge on the loss, no residual heads, replay or mining) with the fields its params
        record (all of its configuration then, with or without a ``preset`` key, and ``"tuned"``
        was a preset of those fields): it is rebuilt as ``preset="paper"`` with them, so that
        the fields it predates take the paper's values rather than the new defaults. A default
        learner saved before a field was added gets the value it learned with, not the field's
        new default.

        >>> old = {"hidden_width": 8, "learning_rate": 0.3, "preprocess": "none"}
        >>> OAHU.migrate_params(old)["preset"]
        'paper'
        >>> OAHU.migrate_params({"preset": None, "loss": "margin", "lr_floor": 0.5})
        ... # doctest: +NORMALIZE_WHITESPACE
        {'preset': None, 'loss': 'margin', 'lr_floor': 0.5, 'early_item_memory': 0,
         'max_update_size': 0, 'mine_ahead': 32, 'early_mine_ahead': 0}
        >>> OAHU.migrate_params({"preset": None, "loss": "margin"})["lr_floor"]
        0.0
        """
        if not _FIELDS_OF_THE_DEFAULT_LEARNER & set(params):
            return {**params, "preset": "paper"}
        missing = {k: v for k, v in _FIELDS_ADDED_LATER.items() if k not in params}
        return {**params, **missing}

    # ---------------------------------------------------------------- interface
    @property
    def n_depths(self) -> int:
        return self.config.n_depths

    @property
    def constraints_per_update(self) -> int:
        return self.config.largest_update

    @property
    def alpha(self) -> np.ndarray:
        return np.asarray(_as_tensor(self.update_step.alpha).cpu(), dtype=np.float64)

    @property
    def last_losses(self) -> torch.Tensor:
        """Mean loss per depth of the new triplets at the last update (before its step), on the
        CPU."""
        return _as_tensor(self.update_step.last_losses).cpu()

    @classmethod
    def from_config(cls, n_features: int, config: OAHUConfig) -> OAHU:
        """An OAHU learner with every hyper-parameter from ``config``."""
        return cls(n_features, **config.to_dict())

    def _param_value(self, name: str) -> Any:
        return self.preset if name == "preset" else getattr(self.config, name)

    def _diagnostics(self) -> dict[str, Any]:
        step = self.update_step
        return {
            "prequential_accuracy": self.prequential.combined,
            "depth_prequential_accuracy": self.prequential.per_depth,
            "depth_loss": [float(v) for v in self.last_losses],
            "learning_rate": float(step.learning_rate),
            "graph_components": float(step.graph.n_components),
            "graph_contradictions": float(step.graph.contradictions),
            "self_paced_held_back": float(step.pacer.held_back if step.pacer else 0),
            "self_paced_threshold": float(step.pacer.thresholds()[0] if step.pacer else 0.0),
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
        from sklearn.decomposition import PCA  # only fitting needs scikit-learn

        pca = PCA(n_components=k, svd_solver="covariance_eigh").fit(items)
        self.network.set_head0(pca.components_)
        self._head0_prepared = True

    @property
    def needs_prepare(self) -> bool:
        return super().needs_prepare or not self._head0_prepared

    def _learn_constraint_rows(self, kind: str, rows: np.ndarray) -> np.ndarray:
        """Learn validated triplets (N, 3, d) or quadruplets (N, 4, d) in update steps of
        ``batch_size``; the step preprocesses each block itself (:meth:`UpdateStep.project`)."""
        if not self._head0_prepared:
            raise ValueError(
                "head0_init: 'pca' takes E0 from items; call learner.prepare(X) with unlabelled "
                "items (e.g. the development split) before the first constraint"
            )
        used = np.zeros(len(rows), dtype=bool)
        device_steps = self.device_steps if kind == "triplet" else None
        if device_steps is None and self._device_steps is not None:
            self._device_steps.pull_graph()  # per-update steps mine from the host's graph
        # Overflow is expected on hostile input and handled (the row is skipped and counted).
        with self._step_threads(), np.errstate(over="ignore", invalid="ignore"):
            updates = self._updates(rows) if device_steps is None else device_steps.learn(rows)
            for first, result in updates:
                used[first : first + len(result.used)] = result.used
                self._account(result)  # before the next update: a drift adapts in between
        return used

    def _updates(self, rows: np.ndarray) -> Iterator[tuple[int, StepResult]]:
        """One update after the other (:class:`UpdateStep`), each of
        :meth:`UpdateStep.update_size`, with the first row of each."""
        start = 0
        while start < len(rows):
            stop = start + self.update_step.update_size()
            yield start, self.update_step(rows[start:stop])
            start = stop

    def _account(self, result: StepResult) -> None:
        """Count what an update did, and feed its prequential mistakes to the drift detector: a
        drift adapts before the next update."""
        if result.non_finite is not None:
            self.skipped[SKIP_NON_FINITE_LOSS] += result.non_finite
        if result.correct is None:  # no update was taken
            return
        self.updates += result.updates
        # A learner that does not detect does not pay for the mistake matrix either. With one
        # depth the combined metric is that depth, and it is watched once.
        if self.drift is None:
            return
        correct, combined = result.correct, result.combined
        outcomes = (
            np.concatenate([combined[:, None], correct], axis=1) if self.n_depths > 1 else correct
        )
        sizes = [len(outcomes)] if result.update_sizes is None else result.update_sizes
        if self._observe_mistakes(~outcomes, sizes) and self._adaptation:
            self._adapt_to_drift()

    def _step_threads(self) -> AbstractContextManager[Any]:
        """At most ``cpu_threads`` threads for the BLAS calls of a CPU step (see the config)."""
        on_host = self.update_step.on_host
        threads = self.config.cpu_threads if on_host and self.config.cpu_threads else None
        return blas_threads(threads)

    def _adapt_to_drift(self) -> None:
        """What a detected drift changes (``drift_adaptation``, ours; docs/algorithms.md,
        "Concept drift"): the hedge may re-choose depths from uniform weights, the step size
        starts its decay again so the weights can move to the new concept, and the memories of
        the old concept stop being replayed and mined."""
        step = self.update_step
        if "alpha" in self._adaptation:
            step.alpha = step.uniform_alpha()
        if "step" in self._adaptation:
            step.decay_origin = step.learned
        if "memory" in self._adaptation:
            step.replay = self._new_replay()
            step.replay_quadruplets = None
            step.graph = self._new_graph()

    def _new_replay(self) -> ReplayReservoir:
        return ReplayReservoir(self.config.replay_memory, self.input_scaler.n_outputs, self._rng)

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
            held=self.config.early_item_memory or None,
        )

    # ---------------------------------------------------------------- combining
    def _averaged_values(self) -> torch.Tensor:
        """The network's tensors, then log α and the last losses, flat in float64
        (:mod:`oahu.learners.oahu.combine`)."""
        return combinable_values(self.network, self.update_step)

    def _set_averaged_values(self, values: torch.Tensor) -> None:
        set_combinable_values(self.network, self.update_step, values)

    def _summed_values(self) -> np.ndarray:
        # the step-size clock counts the new constraints the whole group learned
        return np.array([self.update_step.learned], np.float64)

    def _set_summed_values(self, values: np.ndarray) -> None:
        step = self.update_step
        step.learned = int(values[0])
        step.learning_rate = step.step_size()

    # ---------------------------------------------------------------- state
    def _get_state(self) -> dict[str, Any]:
        step = self.update_step
        if self._device_steps is not None:
            self._device_steps.pull_graph()
        return {
            **self._query_state(),
            "rng": generator_state(self._rng),
            "replay": step.replay.get_state(),
            "replay_quadruplets": None
            if step.replay_quadruplets is None
            else step.replay_quadruplets.get_state(),
            "graph": step.graph.get_state(),
            "prequential": self.prequential.get_state(),
            "decay_origin": step.decay_origin,
            "self_paced": None if step.pacer is None else step.pacer.get_state(),
        }

    def _query_state(self) -> dict[str, Any]:
        # Without the replay and mined memories and the prequential windows: most of a
        # checkpoint's size, and they only serve learning.
        return {
            "network": self.network.state_dict(),
            "alpha": _as_tensor(self.update_step.alpha).detach().cpu().clone(),
            "last_losses": self.last_losses.clone(),
            "head0_prepared": self._head0_prepared,
            "learned": self.update_step.learned,
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        step = self.update_step
        self.network.load_state_dict(state["network"])
        alpha = state["alpha"]
        if tuple(alpha.shape) != (self.n_depths,):
            raise ValueError(f"alpha: expected shape ({self.n_depths},), got {tuple(alpha.shape)}")
        step.alpha = step.per_depth(alpha.to(self.device, torch.float32).clone())
        step.last_losses = step.per_depth(
            state["last_losses"].to(self.device, torch.float32).clone()
        )
        self._head0_prepared = bool(state.get("head0_prepared", True))
        # Checkpoints of the first release hold none of what follows: they start empty.
        step.learned = int(state.get("learned", self.constraints_learned))
        step.decay_origin = int(state.get("decay_origin", 0))
        step.learning_rate = step.step_size()
        if "rng" in state:
            restore_generator(self._rng, state["rng"])
        if "replay" in state:
            step.replay.set_state(state["replay"])
        step.replay_quadruplets = None
        if state.get("replay_quadruplets") is not None:
            step.replay_for(4).set_state(state["replay_quadruplets"])
        if "graph" in state:
            step.graph.set_state(state["graph"])
        if "prequential" in state:
            self.prequential.set_state(state["prequential"])
        if step.pacer is not None and state.get("self_paced") is not None:
            step.pacer.set_state(state["self_paced"])


def _as_tensor(a: Any) -> torch.Tensor:
    return torch.from_numpy(a) if isinstance(a, np.ndarray) else a
