"""OAHU's configuration: one typed place, with our defaults and the paper's preset.

``OAHUConfig()`` is oahu's default learner: OAHU's structure (one embedding head per depth of an
MLP, hedge weights over depths, strict per-constraint updates) with the extensions that make it
improve as constraints arrive (docs/algorithms.md, "OAHU's learning extensions (ours)"): a
principal-axes input projection and an identity start, residual heads, the margin triplet loss,
a hedge driven by prequential mistakes, a decaying step size with a floor, replay of past
constraints and triplets mined from the revealed constraint graph.

``PRESETS["paper"]`` is Section 4.3.2 of the paper as published (L = 5, S_hidden = 100,
S_emb = 50, β = 0.99, s = 0.1, η = 0.3, τ = 0.1, ABTL, hedge on the training loss, no replay):
it reproduces the paper's algorithm, and with it the collapse of its deep heads that
benchmarks/README.md ("Defaults and presets") measures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from oahu.checks import check_bool, check_choice, check_int, check_number
from oahu.drift import DETECTORS
from oahu.learners.oahu.hedge import HEDGE_SIGNALS
from oahu.learners.oahu.loss import LOSSES
from oahu.preprocessing import AUTO, AUTO_COMPONENTS, check_preprocess

Init = Literal["kaiming", "orthogonal"]
Loss = Literal["margin", "abtl"]
HedgeSignal = Literal["mistakes", "loss"]
DepthWeighting = Literal["uniform", "alpha"]
Head0Init = Literal["identity", "random", "pca"]
STEP_ENGINES: tuple[str, ...] = ("auto", "update", "device")
# mined="auto" (ours): triplets mined per new constraint, by whether the items have at most
# AUTO_COMPONENTS features (the line at which "auto" preprocessing keeps the items' norm). On
# validation splits of the sets of at most 200 features, four had fewer errors than two on five
# of six (benchmarks/README.md, "The packaged sets"); above the line two stay, which every
# Fashion-MNIST figure was measured with.
AUTO_MINED: dict[bool, int] = {True: 4, False: 2}
# replay="auto" (ours): constraints replayed per new one, by whether updates are strict
# (batch_size 1) or micro-batches. A strict step on one constraint gains from a second, older
# one beside it; a micro-batch already averages B new ones, and its replayed rows, drawn from
# the same stream, cost a quarter of an update's rows for no fewer errors on validation
# splits (docs/algorithms.md, "Micro-batches", B5).
AUTO_REPLAY: dict[bool, int] = {True: 1, False: 0}


@dataclass(frozen=True)
class OAHUConfig:
    """Hyper-parameters of the OAHU learner (defaults: ours; ``PRESETS["paper"]``: the paper's).

    >>> cfg = OAHUConfig()
    >>> (cfg.n_hidden_layers, cfg.hidden_width, cfg.loss, cfg.hedge_signal, cfg.preprocess)
    (2, 128, 'margin', 'mistakes', 'auto')
    >>> paper = PRESETS["paper"]
    >>> (paper.n_hidden_layers, paper.hidden_width, paper.embedding_dim, paper.learning_rate)
    (5, 100, 50, 0.3)
    >>> paper.n_depths
    6
    >>> OAHUConfig(tau=0.9)
    Traceback (most recent call last):
    ...
    ValueError: tau: must be a number in (0, 0.666667), got 0.9
    """

    n_hidden_layers: int = 2  # L
    hidden_width: int = 128  # S_hidden
    # S_emb; 0 = the dimension of the (preprocessed) input, which residual heads and an identity
    # E0 need.
    embedding_dim: int = 0
    beta: float = 0.99  # hedge discount β (Eq. 20)
    smoothing: float = 0.1  # s: α floor is s / (L + 1)
    learning_rate: float = 0.05  # η (Eq. 21-22)
    # Step-size decay (ours, S1): η_t = η · max(1 / sqrt(1 + t / lr_decay), lr_floor) after t
    # constraints; lr_decay 0 = constant.
    lr_decay: float = 10_000.0
    # So that a long-running learner keeps learning (ours); 0 = no floor. The decay reaches 0.5
    # after 3 · lr_decay constraints, and until then learns as if there were none.
    lr_floor: float = 0.5
    # Per-depth loss: "margin" = max(0, D+ − D− + margin) (ours), "abtl" = Eq. 9-13.
    loss: Loss = "margin"
    margin: float = 0.1
    tau: float = 0.1  # τ, the ABTL bound width (Eq. 9-10; loss="abtl" only)
    # What the hedge (Eq. 20) discounts each depth by: "mistakes" = whether the depth ranked the
    # new constraints wrongly before the update (ours), "loss" = its training loss (the paper).
    hedge_signal: HedgeSignal = "mistakes"
    # How each depth's loss enters the gradient: "alpha" = Σ α(l) L(l) (Eq. 21-22), "uniform" =
    # the mean over depths (ours: every depth learns, whatever the hedge currently thinks of it).
    depth_weighting: DepthWeighting = "uniform"
    # Residual heads (ours): f(l) = normalize(E0 x + Θ(l) h(l)) with Θ(l) starting at zero, so
    # every depth starts at E0's metric and learns a nonlinear correction of it.
    residual_heads: bool = True
    batch_size: int = 1  # 1 = strict Algorithm 1; B > 1 = micro-batch
    # An update takes at most 1/batch_ramp of the constraints learned before it (ours,
    # docs/algorithms.md B3): a stream's first updates are small, and grow to batch_size.
    batch_ramp: int = 1000
    # An update takes at most this many new constraints (ours, docs/algorithms.md B4): a larger
    # micro-batch is learned as consecutive updates of this size, which learn per constraint
    # what strict steps do where larger ones fall behind late in a stream; 0 = no limit.
    max_update_size: int = 256
    # A micro-batch update moves the parameters by at most this fraction of their norm (ours,
    # docs/algorithms.md B2): B summed gradients taken at one point overshoot where B strict
    # steps would have turned, early in a stream above all.
    max_step_change: float = 0.05
    init: Init = "orthogonal"  # weight initialisation of hidden layers (and non-residual heads)
    head0_init_scale: float = 1.0  # multiplies E0's initial weights
    # "identity": E0 starts as the identity, i.e. the (preprocessed) input's own cosine metric;
    # "random": as the hidden layers; "pca": ``prepare(X)`` sets E0 to the top principal axes of
    # the items it is given (its other rows are zero and stay zero under ABTL).
    head0_init: Head0Init = "identity"
    # At most this many principal axes for head0_init="pca"; 0 = embedding_dim.
    head0_components: int = 0
    preprocess: str = "auto"  # input preprocessing, see oahu.preprocessing
    # Replay (ours): each update also learns this many constraints per new one, drawn from a
    # reservoir of ``replay_memory`` past ones (one pass over the stream, bounded memory).
    # "auto": ``AUTO_REPLAY`` by whether updates are strict (``replay_count``).
    replay: int | Literal["auto"] = "auto"
    replay_memory: int = 2000
    # Mining (ours): each update also learns this many triplets per new constraint, mined from
    # the constraint graph the stream has revealed, among a reservoir of ``item_memory`` items: a
    # random anchor, its nearest known-similar item, and the nearest of ``mining_candidates``
    # known-dissimilar ones. "auto": ``AUTO_MINED`` by the items' dimension (``mined_for``).
    mined: int | Literal["auto"] = "auto"
    item_memory: int = 16384
    # The reservoir holds only this many items until the step-size decay has halved the step
    # (3 · lr_decay constraints; at once without a decay), then grows to ``item_memory`` (ours,
    # G2 in docs/algorithms.md, "Capacity for long streams"): a held item's cached embedding, which
    # mining ranks by, is refreshed only when the item is in a triplet, and while the step is
    # large a reservoir twice as large leaves it too old. 0 = ``item_memory`` from the start.
    early_item_memory: int = 8192
    mining_candidates: int = 128
    # Anchors mined at once when an update takes fewer triplets (a strict one takes two or
    # four; ours, docs/algorithms.md "Mining"): the rest wait for the next updates, so that the
    # scans and the gathered candidates of a draw serve many updates. ``early_mine_ahead`` until
    # the step-size decay has halved the step (3 · lr_decay constraints, as ``early_item_memory``
    # counts), while the model still moves fast; 0 = ``mine_ahead`` from the start.
    mine_ahead: int = 128
    early_mine_ahead: int = 32
    # Items whose component the constraint graph remembers, so that similarity carries over
    # through items that are not among the ``item_memory`` held for mining.
    graph_memory: int = 200_000
    # Constraints in the rolling prequential accuracy (docs/algorithms.md, "Prequential").
    prequential_window: int = 1000
    # Concept drift (ours, docs/algorithms.md "Concept drift"): the river detector watching the
    # prequential mistakes ("adwin", "page-hinkley", "kswin"; "none" = no watch), and what a
    # detected rise of the combined metric's mistakes does: any of "alpha" (hedge weights back
    # to uniform), "step" (the step size raised ``drift_step_boost``-fold, back to the decay
    # over ``drift_boost_span`` constraints, and the decay restarted), "memory" (replay reservoir
    # and constraint graph emptied) joined by "+", or "none" (detect and report only).
    drift_detector: str = "adwin"
    drift_adaptation: str = "alpha+step+memory"
    drift_step_boost: float = 5.0
    drift_boost_span: int = 2000
    # Self-paced learning (ours, after LEAP; docs/algorithms.md "Self-paced learning",
    # oahu/learners/oahu/self_paced.py): learn a new constraint only when its loss is below λ, or,
    # within its
    # cluster of recent hard constraints, below λ + γ(√i − √(i−1)) for its rank i; λ = λ0·β^r and
    # γ = γ0·β^r after r rounds of ``pace_round`` constraints; ``pace_clusters`` clusters of
    # river's online k-means. λ0 and γ0 were chosen on development seed 100 (Fashion-MNIST,
    # 10,000 constraints, clean and 20% flipped; λ0 in {0.05, 0.2, 0.4}). Off by default: on
    # clean streams it ties (Fashion-MNIST and digits), and it costs 13-18% of the throughput;
    # on noisy digits streams it cuts what 20-40% wrong constraints cost in three settings of
    # four (benchmarks/README.md, "Label noise").
    self_paced: bool = False
    pace_start: float = 0.4
    pace_diversity: float = 0.1
    pace_growth: float = 1.1
    pace_round: int = 1000
    pace_clusters: int = 8
    # BLAS threads for learning steps on the CPU (0: the libraries' own setting). One by
    # default: a step's matrices are small, and the fork/join of every parallel region stalls
    # when another process holds a core (oahu/threads.py).
    cpu_threads: int = 1
    seed: int = 0
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    # How updates of triplets run (ours, docs/algorithms.md "Device-resident steps"): "update" =
    # one update at a time, the host deciding between its stages; "device" = blocks of up to
    # ``device_block`` updates with everything on the device, captured as CUDA graphs
    # on a GPU; "auto" = "device" on a GPU, "update" on the CPU (where numpy's few-microsecond
    # calls make the per-update step the fast one).
    step_engine: str = "auto"
    device_block: int = 256

    def __post_init__(self) -> None:
        for field, minimum in (
            ("n_hidden_layers", 0),
            ("hidden_width", 1),
            ("embedding_dim", 0),
            ("mining_candidates", 0),
            ("mine_ahead", 1),
            ("early_mine_ahead", 0),
            ("replay_memory", 1),
            ("item_memory", 1),
            ("early_item_memory", 0),
            ("prequential_window", 1),
            ("pace_round", 1),
            # The items held for mining stay known, and a triplet's three items must fit beside
            # them: with fewer, remembering one of them forgets another before it is linked.
            ("graph_memory", self.item_memory + 3),
            ("batch_size", 1),
            ("batch_ramp", 1),
            ("max_update_size", 0),
            ("seed", 0),
            ("cpu_threads", 0),
            ("pace_clusters", 1),
            ("drift_boost_span", 1),
            ("head0_components", 0),
            ("device_block", 8),
        ):
            check_int(getattr(self, field), field, minimum)
        for field, low, high, closed in (
            ("pace_start", 0.0, None, "both"),
            ("pace_diversity", 0.0, None, "both"),
            ("pace_growth", 1.0, None, "both"),
            ("beta", 0.0, 1.0, "neither"),
            ("smoothing", 0.0, 1.0, "left"),
            ("learning_rate", 0.0, None, "neither"),
            # ABTL's bound τ < 2/3 keeps its adaptive margin positive (Section 3.5).
            ("tau", 0.0, 2.0 / 3.0, "neither"),
            ("lr_decay", 0.0, None, "both"),
            ("lr_floor", 0.0, 1.0, "both"),
            ("margin", 0.0, None, "both"),
            ("drift_step_boost", 1.0, None, "both"),
            ("head0_init_scale", 0.0, None, "neither"),
            ("max_step_change", 0.0, None, "neither"),
        ):
            check_number(getattr(self, field), field, low, high, closed)
        for field, choices in (
            ("drift_detector", ("none", *DETECTORS)),
            ("loss", tuple(LOSSES)),
            ("hedge_signal", tuple(HEDGE_SIGNALS)),
            ("depth_weighting", ("uniform", "alpha")),
            ("init", ("kaiming", "orthogonal")),
            ("head0_init", ("identity", "random", "pca")),
            ("step_engine", STEP_ENGINES),
        ):
            check_choice(getattr(self, field), field, choices)
        for field in ("residual_heads", "self_paced"):
            check_bool(getattr(self, field), field)
        for field in ("replay", "mined"):
            value = getattr(self, field)
            if value != AUTO:
                try:
                    check_int(value, field, 0)
                except ValueError:
                    raise ValueError(
                        f"{field}: must be 'auto' or an integer >= 0, got {value!r}"
                    ) from None
        adaptation_steps(self.drift_adaptation)
        check_preprocess(self.preprocess)
        if self.embedding_dim and self.head0_components > self.embedding_dim:
            raise ValueError(
                f"head0_components: must be <= embedding_dim ({self.embedding_dim}), "
                f"got {self.head0_components}"
            )
        if self.step_engine == "device" and not self.fits_device_steps:
            raise ValueError(
                "step_engine: 'device' runs updates without self-paced learning, which decides "
                "per constraint on the host; got self_paced=True"
            )
        if not isinstance(self.device, str) or not (
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")
        ):
            raise ValueError(
                f"device: must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}"
            )

    @property
    def fits_device_steps(self) -> bool:
        """Whether device-resident steps can learn as this configuration says: without
        self-paced learning (which decides per constraint on the host)."""
        return not self.self_paced

    @property
    def largest_update(self) -> int:
        """The most new constraints one update takes: ``batch_size``, but at most
        ``max_update_size`` (when set).

        >>> OAHUConfig(batch_size=1024).largest_update, OAHUConfig(batch_size=64).largest_update
        (256, 64)
        >>> OAHUConfig(batch_size=1024, max_update_size=0).largest_update
        1024
        """
        limit = self.max_update_size
        return min(self.batch_size, limit) if limit else self.batch_size

    @property
    def replay_count(self) -> int:
        """Replayed constraints per new constraint: ``replay``, or with ``"auto"`` one in
        strict mode (``batch_size`` 1) and none in micro-batch mode (``AUTO_REPLAY``).

        >>> OAHUConfig().replay_count, OAHUConfig(batch_size=256).replay_count
        (1, 0)
        >>> OAHUConfig(batch_size=256, replay=2).replay_count
        2
        """
        if self.replay != AUTO:
            return self.replay
        return AUTO_REPLAY[self.batch_size == 1]

    def mined_for(self, n_features: int) -> int:
        """Mined triplets per new constraint for items of ``n_features`` features: ``mined``,
        or with ``"auto"`` four for at most 200 features and two above (``AUTO_MINED``).

        >>> auto = OAHUConfig()
        >>> auto.mined_for(16), auto.mined_for(200), auto.mined_for(784)
        (4, 4, 2)
        >>> auto.replace(mined=3).mined_for(16)
        3
        """
        if self.mined != AUTO:
            return self.mined
        return AUTO_MINED[n_features <= AUTO_COMPONENTS]

    @property
    def n_depths(self) -> int:
        """Number of embedding heads, L + 1 (E0 on the input plus one per hidden layer)."""
        return self.n_hidden_layers + 1

    def replace(self, **changes: Any) -> OAHUConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


ADAPTATIONS: tuple[str, ...] = ("alpha", "step", "memory")


def adaptation_steps(spec: str) -> tuple[str, ...]:
    """The adaptation steps of a ``drift_adaptation`` value, in the order they run.

    >>> adaptation_steps("memory+alpha"), adaptation_steps("none")
    (('alpha', 'memory'), ())
    >>> adaptation_steps("alpha+lr")
    Traceback (most recent call last):
    ...
    ValueError: drift_adaptation: 'lr' is not alpha, step, memory (joined by +) or none
    """
    if not isinstance(spec, str):
        raise ValueError(f"drift_adaptation: expected a string, got {spec!r}")
    if spec == "none":
        return ()
    steps = spec.split("+")
    for step in steps:
        if step not in ADAPTATIONS:
            raise ValueError(
                f"drift_adaptation: {step!r} is not {', '.join(ADAPTATIONS)} (joined by +) or none"
            )
    return tuple(a for a in ADAPTATIONS if a in steps)


PRESETS: dict[str, OAHUConfig] = {
    # Section 4.3.2 of the paper, as published: Algorithm 1 exactly.
    "paper": OAHUConfig(
        n_hidden_layers=5,
        hidden_width=100,
        embedding_dim=50,
        learning_rate=0.3,
        lr_decay=0.0,
        lr_floor=0.0,
        loss="abtl",
        hedge_signal="loss",
        depth_weighting="alpha",
        residual_heads=False,
        init="kaiming",
        head0_init="random",
        preprocess="none",
        replay=0,
        mined=0,
        drift_detector="none",
    ),
}
