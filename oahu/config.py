"""OAHU's configuration: one typed place, with the paper's defaults.

``OAHUConfig()`` is the paper's setting (Section 4.3.2: L = 5, S_hidden = 100, S_emb = 50, β = 0.99,
s = 0.1, η = 0.3, τ = 0.1). ``PRESETS`` names the settings the benchmarks use; benchmarks/README.md
("Defaults and presets") has why each differs from the paper and what it was measured to do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from oahu.preprocessing import parse_preprocess

Init = Literal["kaiming", "orthogonal"]


@dataclass(frozen=True)
class OAHUConfig:
    """Hyper-parameters of the OAHU learner.

    >>> cfg = OAHUConfig()
    >>> (cfg.n_hidden_layers, cfg.hidden_width, cfg.embedding_dim, cfg.beta, cfg.smoothing)
    (5, 100, 50, 0.99, 0.1)
    >>> cfg.n_depths
    6
    >>> OAHUConfig(tau=0.9)
    Traceback (most recent call last):
    ...
    ValueError: tau: must be in (0, 2/3) (Section 3.5), got 0.9
    """

    n_hidden_layers: int = 5  # L
    hidden_width: int = 100  # S_hidden
    embedding_dim: int = 50  # S_emb
    beta: float = 0.99  # hedge discount β (Eq. 20)
    smoothing: float = 0.1  # s: α floor is s / (L + 1)
    learning_rate: float = 0.3  # η (Eq. 21-22)
    tau: float = 0.1  # τ, the ABTL bound width (Eq. 9-10)
    batch_size: int = 1  # 1 = strict Algorithm 1; B > 1 = micro-batch
    init: Init = "kaiming"  # weight initialisation of hidden layers and heads
    head0_init_scale: float = 1.0  # multiplies E0's initial weights
    # "pca": ``prepare(X)`` sets E0 to the top principal axes of the (preprocessed, unlabelled)
    # items it is given, so E0 starts as the cosine metric of their PCA projection; its other
    # rows are zero and stay zero (ABTL's gradient on E0 lies in the span of its embeddings).
    head0_init: Literal["random", "pca"] = "random"
    # At most this many principal axes for head0_init="pca" (fewer if the items span fewer);
    # 0 = embedding_dim.
    head0_components: int = 0
    preprocess: str = "none"  # input preprocessing, see oahu.preprocessing
    # BLAS threads for learning steps on the CPU (0: the libraries' own setting). One by
    # default: a step's matrices are small, and the fork/join of every parallel region stalls
    # when another process holds a core (oahu/threads.py).
    cpu_threads: int = 1
    seed: int = 0
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"

    def __post_init__(self) -> None:
        _check_int(self, "n_hidden_layers", 0)
        _check_int(self, "hidden_width", 1)
        _check_int(self, "embedding_dim", 1)
        _check_int(self, "batch_size", 1)
        _check_int(self, "seed", 0)
        _check_int(self, "cpu_threads", 0)
        if not 0.0 < self.beta < 1.0:
            raise ValueError(f"beta: must be in (0, 1), got {self.beta}")
        if not 0.0 <= self.smoothing < 1.0:
            raise ValueError(f"smoothing: must be in [0, 1), got {self.smoothing}")
        if not self.learning_rate > 0.0:
            raise ValueError(f"learning_rate: must be > 0, got {self.learning_rate}")
        if not 0.0 < self.tau < 2.0 / 3.0:
            raise ValueError(f"tau: must be in (0, 2/3) (Section 3.5), got {self.tau}")
        if self.init not in ("kaiming", "orthogonal"):
            raise ValueError(f"init: must be 'kaiming' or 'orthogonal', got {self.init!r}")
        parse_preprocess(self.preprocess)
        if self.head0_init not in ("random", "pca"):
            raise ValueError(f"head0_init: must be 'random' or 'pca', got {self.head0_init!r}")
        _check_int(self, "head0_components", 0)
        if self.head0_components > self.embedding_dim:
            raise ValueError(
                f"head0_components: must be <= embedding_dim ({self.embedding_dim}), "
                f"got {self.head0_components}"
            )
        if not self.head0_init_scale > 0.0:
            raise ValueError(f"head0_init_scale: must be > 0, got {self.head0_init_scale}")
        if not isinstance(self.device, str) or not (
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")
        ):
            raise ValueError(
                f"device: must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}"
            )

    @property
    def n_depths(self) -> int:
        """Number of embedding heads, L + 1 (E0 on the input plus one per hidden layer)."""
        return self.n_hidden_layers + 1

    def replace(self, **changes: Any) -> OAHUConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_int(cfg: OAHUConfig, field: str, minimum: int) -> None:
    value = getattr(cfg, field)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field}: must be an integer >= {minimum}, got {value!r}")


PRESETS: dict[str, OAHUConfig] = {
    # Section 4.3.2 of the paper, as published.
    "paper": OAHUConfig(),
    # Centred inputs, E0 from the top 200 principal axes of the development items, one hidden
    # layer as wide as the input with an orthogonal 784-d head, η = 0.003: what reaches the
    # issue's Fashion-MNIST targets in one pass (benchmarks/README.md, "Defaults and presets").
    "tuned": OAHUConfig(
        n_hidden_layers=1,
        hidden_width=784,
        embedding_dim=784,
        init="orthogonal",
        head0_init="pca",
        head0_components=200,
        preprocess="center",
        learning_rate=0.003,
    ),
}
