"""OAHU: Online metric learning with Adaptive Hedge Update (Algorithm 1 of the paper).

Per triplet (or micro-batch of triplets), in this order (docs/algorithms.md, "One update"):

1. embed the three items at every depth and compute the ABTL L(l) (Eq. 13) per depth;
2. one gradient-descent step with rate η on Σ_l α(l)·L(l), α held constant (Eq. 21-22);
3. the hedge step of Eq. 20 with the losses of step 1, then the floor s/(L+1) and renormalisation.

Strict mode (``batch_size=1``) is Algorithm 1. Micro-batch mode takes B triplets per step, the
batch-mean of Σα L as loss and the batch-mean per-depth losses for the hedge; with B = 1 it is the
same code path as strict mode, so the two agree bit for bit.
"""

from __future__ import annotations

import dataclasses
import inspect
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from sklearn.decomposition import PCA

from oahu.arrays import concat, namespace, row_norms
from oahu.config import PRESETS, OAHUConfig
from oahu.device import resolve_device
from oahu.hedge import hedge_update
from oahu.learner import Capabilities, Diagnostic, Learner
from oahu.loss import abtl_with_gradients
from oahu.network import MultiDepthNetwork
from oahu.threads import blas_threads

SKIP_NON_FINITE_LOSS = "non_finite_loss"
_EMBED_CHUNK = 8192
_DIST_EPS = 1e-12


class OAHU(Learner):
    """The OAHU learner: a multi-depth network, the ABTL and hedge weights over depths.

    Parameters
    ----------
    n_features : input dimension d.
    preset : a named configuration of :data:`oahu.config.PRESETS` (``"paper"``, ``"tuned"``);
        None for the paper's defaults.
    **fields : any field of :class:`OAHUConfig` (``hidden_width``, ``learning_rate``,
        ``batch_size``, ``device``, ...), overriding the preset's or the default value. They are
        the constructor's keyword parameters (``inspect.signature(OAHU)`` lists them), and
        ``get_params`` returns each as the learner uses it. :meth:`from_config` takes a whole
        :class:`OAHUConfig`.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> model = OAHU(n_features=8, hidden_width=16, embedding_dim=4, device="cpu")
    >>> a, p, n = rng.random((3, 20, 8), dtype=np.float32)
    >>> used = model.learn_triplets(a, p, n)
    >>> int(used.sum()), model.updates, model.utilization
    (20, 20, 1.0)
    >>> model.embed(a).shape
    (6, 20, 4)
    >>> round(float(model.alpha.sum()), 6)
    1.0
    """

    name = "oahu"
    capabilities: ClassVar[Capabilities] = Capabilities(
        constraint_kinds=("triplet",),
        diagnostics=(
            Diagnostic("depth_loss", "Latest ABTL loss of each depth (Eq. 13).", per_depth=True),
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
        self.network = MultiDepthNetwork(n_features, self.config, self.device)
        # Where the per-depth arithmetic (ABTL, gradient coefficients, hedge) runs: numpy views
        # on the CPU, where its few dozen tiny operations cost a third of torch's dispatch;
        # torch on a GPU, so that nothing leaves the device. See oahu.arrays.
        self._on_host = self.device.type == "cpu"
        depths = self.config.n_depths
        self._alpha = self._small(torch.full((depths,), 1.0 / depths, device=self.device))
        self._last_losses = self._small(torch.zeros(depths, device=self.device))
        self._head0_prepared = self.config.head0_init != "pca"

    # ---------------------------------------------------------------- interface
    @property
    def n_depths(self) -> int:
        return self.config.n_depths

    @property
    def alpha(self) -> np.ndarray:
        return np.asarray(self._as_tensor(self._alpha).cpu(), dtype=np.float64)

    @property
    def last_losses(self) -> torch.Tensor:
        """Batch-mean ABTL per depth at the last update (before its step), on the CPU."""
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
        return {"depth_loss": [float(v) for v in self.last_losses]}

    def _embed(self, arr: np.ndarray, role: Literal["query", "gallery"]) -> np.ndarray:
        out = np.empty((self.n_depths, len(arr), self.config.embedding_dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(arr), _EMBED_CHUNK):
                chunk = torch.from_numpy(arr[start : start + _EMBED_CHUNK]).to(self.device)
                out[:, start : start + len(chunk)] = self.network.embed(chunk).cpu().numpy()
        return out

    # ---------------------------------------------------------------- learning
    def prepare(self, x: Any) -> None:
        """Fit input preprocessing on unlabelled items and, with ``head0_init="pca"``, set E0 to
        their top principal axes. Call it once, before the first constraint."""
        if self.config.head0_init == "pca" and self.updates:
            raise ValueError(
                f"prepare: head0_init='pca' sets E0 before learning, but {self.updates} "
                "updates were already made"
            )
        super().prepare(x)

    def _prepare(self, items: np.ndarray) -> None:
        if self.config.head0_init != "pca":
            return
        # At most as many axes as the items span (a preset serves 64-d digits and 784-d images).
        k = min(self.config.head0_components or self.config.embedding_dim, *items.shape)
        pca = PCA(n_components=k, svd_solver="covariance_eigh").fit(items)
        self.network.set_head0(pca.components_)
        self._head0_prepared = True

    @property
    def needs_prepare(self) -> bool:
        return super().needs_prepare or not self._head0_prepared

    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        if not self._head0_prepared:
            raise ValueError(
                "head0_init: 'pca' takes E0 from items; call learner.prepare(X) with unlabelled "
                "items (e.g. the development split) before the first constraint"
            )
        triplets = np.stack([a, p, n], axis=1)  # (N, 3, d)
        if not self._on_host:
            triplets = torch.from_numpy(triplets).to(self.device)
        used = np.zeros(len(triplets), dtype=bool)
        size = self.config.batch_size
        # Overflow is expected on hostile input and handled (the triplet is skipped and counted).
        with self._step_threads(), np.errstate(over="ignore", invalid="ignore"):
            for start in range(0, len(triplets), size):
                block = triplets[start : start + size]
                used[start : start + len(block)] = self._as_numpy(self._step(block))
        return used

    def _step_threads(self) -> AbstractContextManager[Any]:
        """At most ``cpu_threads`` threads for the BLAS calls of a CPU step (see the config)."""
        threads = self.config.cpu_threads if self._on_host and self.config.cpu_threads else None
        return blas_threads(threads)

    def _step(self, block: Any) -> Any:
        """One update on a block of triplets (B, 3, d); returns which changed the model.

        ``block`` is a numpy array on the CPU and a tensor on a GPU; the arithmetic is the same
        (:mod:`oahu.arrays`).
        """
        n_triplets = block.shape[0]
        # Rows ordered [anchors; positives; negatives] so one forward pass embeds all of them.
        rows = block.swapaxes(0, 1).reshape(3 * n_triplets, self.n_features)
        cache = self.network.forward(rows)
        f = cache.embeddings.reshape(self.n_depths, 3, n_triplets, -1)
        # Both sides at once: [anchor − positive, anchor − negative], (L+1, 2, B, E).
        diffs = f[:, :1] - f[:, 1:]
        # Pre-update distances D_orig, (L+1, 2, B, 1).
        dists = row_norms(diffs)
        xp = namespace(dists)
        d_pos, d_neg = dists[:, 0, :, 0], dists[:, 1, :, 0]
        loss, g_pos, g_neg = abtl_with_gradients(d_pos, d_neg, self.config.tau)
        # An overflowing norm turns an embedding into a silent zero vector rather than a NaN, so
        # it is checked with the loss: either one makes the triplet unlearnable.
        norms = cache.norms.reshape(self.n_depths, 3, n_triplets).sum((0, 1))
        finite = xp.isfinite(loss.sum(0) + norms)
        if not bool(finite.all()):
            return self._step_finite_only(block, finite)
        # ∂(mean_b Σ_l α(l) L(l)_b)/∂D, times ∂D/∂f: the unit difference vectors.
        scale = (self._alpha / n_triplets)[:, None, None, None]
        coef = scale * xp.stack([g_pos, g_neg], 1)[..., None] / dists.clip(min=_DIST_EPS)
        towards = coef * diffs  # on the anchor, from each side
        grad = concat([towards.sum(1)[:, None], -towards], axis=1)
        self.network.step(cache, grad.reshape(cache.embeddings.shape), self.config.learning_rate)
        self._last_losses = loss.mean(1)
        self._alpha = hedge_update(
            self._alpha, self._last_losses, self.config.beta, self.config.smoothing
        )
        self.updates += 1
        return (loss > 0).any(0)

    def _step_finite_only(self, block: Any, finite: Any) -> Any:
        """A non-finite loss never reaches the weights: learn from the rest, count the others."""
        used = np.zeros(len(finite), dtype=bool)
        self.skipped[SKIP_NON_FINITE_LOSS] += int((~finite).sum())
        if finite.any():
            used[self._as_numpy(finite)] = self._as_numpy(self._step(block[finite]))
        return used

    @staticmethod
    def _as_numpy(a: Any) -> np.ndarray:
        return a.cpu().numpy() if isinstance(a, torch.Tensor) else a

    # ---------------------------------------------------------------- state
    def _get_state(self) -> dict[str, Any]:
        return {
            "network": self.network.state_dict(),
            "alpha": self._as_tensor(self._alpha).detach().cpu().clone(),
            "last_losses": self.last_losses.clone(),
            "head0_prepared": self._head0_prepared,
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        alpha = state["alpha"]
        if tuple(alpha.shape) != (self.n_depths,):
            raise ValueError(f"alpha: expected shape ({self.n_depths},), got {tuple(alpha.shape)}")
        self._alpha = self._small(alpha.to(self.device, torch.float32).clone())
        self._last_losses = self._small(state["last_losses"].to(self.device, torch.float32).clone())
        self._head0_prepared = bool(state.get("head0_prepared", True))


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
