"""Binary codes of embeddings, with the code length chosen by a hedge over lengths (ours).

Each code length c of ``lengths`` (16, 32, 64 and 128 bits by default) has its own projection
P_c, shared by every modality (the embeddings of all modalities lie in one space):
``code_c(z) = [P_c z > 0]``, packed eight bits to a byte. Items are ranked by Hamming distance,
computed with a popcount of the XOR of the packed codes.

Learning (docs/cross-modal.md, Eq. CM3-CM5): the sign is relaxed to t = tanh(P_c z), and the
normalised Hamming distance of two codes to δ(u, v) = (1 − t_u·t_v / c) / 2, which equals the
share of differing bits when t is ±1. A triplet (a, p, n) costs max(0, δ(a, p) − δ(a, n) + m)
and a pair costs max(0, δ − θ + m) when linked, max(0, θ − δ + m) when not, θ = 1/3 (the
Hamming share of two random hyperplane codes of embeddings at 60°, which is the real-valued
metric's pair threshold). The projections learn by SGD on these losses with the embeddings held
fixed: codes follow the metric and never pull it.

The hedge (Eq. CM6) weighs the lengths as OAHU's hedge weighs depths: before each update, every
length ranks the new constraint with its sign codes, and a length that ranked it wrongly is
discounted by β (a tie counts half a mistake). The chosen length is the one of largest weight,
the shorter on a tie, so a longer code is chosen only while it makes fewer mistakes.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import torch

__all__ = ["BinaryCodes", "hamming_distances", "pack_codes"]

#: Normalised Hamming distance at which a pair counts as linked (random hyperplanes: 60°).
PAIR_THRESHOLD = 1.0 / 3.0


def pack_codes(bits: np.ndarray) -> np.ndarray:
    """Boolean codes (n, c) as bytes (n, ceil(c / 8)), first bit the most significant.

    >>> pack_codes(np.array([[True, False, False, False, False, False, False, True]])).tolist()
    [[129]]
    """
    return np.packbits(np.asarray(bits, dtype=bool), axis=1)


def hamming_distances(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """Hamming distance of every packed query code to every packed gallery code, (m, n) int.

    >>> a = pack_codes(np.array([[1, 1, 0, 0, 0, 0, 0, 0]], dtype=bool))
    >>> b = pack_codes(np.array([[1, 0, 0, 0, 0, 0, 0, 1], [1, 1, 0, 0, 0, 0, 0, 0]], dtype=bool))
    >>> hamming_distances(a, b).tolist()
    [[2, 0]]
    """
    q = np.ascontiguousarray(queries, dtype=np.uint8)
    g = np.ascontiguousarray(gallery, dtype=np.uint8)
    if q.ndim != 2 or g.ndim != 2 or q.shape[1] != g.shape[1]:
        raise ValueError(f"codes: expected (m, k) and (n, k) bytes, got {q.shape} and {g.shape}")
    out = np.zeros((len(q), len(g)), dtype=np.int32)
    # Bytes one column at a time: memory stays (m, n), whatever the code length.
    for j in range(q.shape[1]):
        out += np.bitwise_count(q[:, j, None] ^ g[None, :, j])
    return out


class BinaryCodes:
    """Projections to binary codes of several lengths, and the hedge that chooses among them.

    Parameters
    ----------
    n_inputs : dimension of the embeddings coded.
    lengths : the code lengths, in bits (each a multiple of 8).
    learning_rate : SGD step of the projections.
    margin : m of the relaxed Hamming losses.
    beta : the hedge's discount per mistake.
    seed : seeds the initial projections (Gaussian: random hyperplane codes to start from).

    >>> codes = BinaryCodes(4, lengths=(8, 16), seed=0)
    >>> z = np.eye(4, dtype=np.float32)
    >>> codes.encode(z).shape, codes.encode(z, bits=16).shape, codes.chosen_bits
    ((4, 1), (4, 2), 8)
    """

    def __init__(
        self,
        n_inputs: int,
        lengths: tuple[int, ...] = (16, 32, 64, 128),
        learning_rate: float = 0.05,
        margin: float = 0.1,
        beta: float = 0.99,
        seed: int = 0,
    ) -> None:
        lengths = tuple(int(c) for c in lengths)
        if not lengths or any(c < 8 or c % 8 for c in lengths) or len(set(lengths)) < len(lengths):
            raise ValueError(f"code_bits: distinct multiples of 8, at least 8, got {lengths!r}")
        self.lengths = tuple(sorted(lengths))
        self.n_inputs = int(n_inputs)
        self.learning_rate = float(learning_rate)
        self.margin = float(margin)
        self.beta = float(beta)
        rng = np.random.default_rng([seed, 0xC0DE])
        # One matrix of every length's rows, so that a step codes all lengths in one product;
        # ``projections`` are views of it, one per length.
        self._stacked = (
            rng.standard_normal((sum(self.lengths), self.n_inputs)) / math.sqrt(self.n_inputs)
        ).astype(np.float32)
        # Prequential mistakes per length; the hedge weights are β^mistakes, normalised.
        self.mistakes = np.zeros(len(self.lengths))

    # ------------------------------------------------------------------ use
    @property
    def projections(self) -> list[np.ndarray]:
        """P_c for each length, (c, n_inputs), views of one matrix."""
        return [self._stacked[part] for part in self._slices()]

    @property
    def weights(self) -> np.ndarray:
        """Hedge weight per length (sums to 1)."""
        log_weights = self.mistakes * math.log(self.beta)
        w = np.exp(log_weights - log_weights.max())
        return w / w.sum()

    @property
    def chosen_bits(self) -> int:
        """The length of largest hedge weight (the shorter on a tie)."""
        return self.lengths[int(np.argmin(self.mistakes))]  # the first minimum: the shortest

    def _index(self, bits: int | None) -> int:
        bits = self.chosen_bits if bits is None else int(bits)
        if bits not in self.lengths:
            raise ValueError(f"bits: one of {self.lengths}, got {bits!r}")
        return self.lengths.index(bits)

    def encode(self, z: np.ndarray, bits: int | None = None) -> np.ndarray:
        """Packed codes (n, bits / 8) uint8 of embeddings ``z`` (n, n_inputs); the chosen
        length by default."""
        return pack_codes(z @ self.projections[self._index(bits)].T > 0)

    # ------------------------------------------------------------------ learning
    def _slices(self) -> list[slice]:
        edges = np.cumsum((0, *self.lengths))
        return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]

    def update(self, z: np.ndarray, similar: bool | None, lr_scale: float = 1.0) -> np.ndarray:
        """:meth:`observe` then :meth:`learn` one constraint, projecting it once."""
        pre = z @ self._stacked.T
        mistakes = self.observe(z, similar, pre)
        self.learn(z, similar, lr_scale, pre)
        return mistakes

    def observe(
        self, z: np.ndarray, similar: bool | None, pre: np.ndarray | None = None
    ) -> np.ndarray:
        """Rank one constraint with every length's sign codes before learning it, discount the
        lengths that ranked it wrongly; return the mistakes (one per length, 0, 0.5 or 1).

        ``z`` holds the constraint's item embeddings in role order (2 for a pair, 3 for a
        triplet); ``similar`` is the pair's flag (None for a triplet).
        """
        # Every length at once: (k, Σ c).
        signs = (z @ self._stacked.T if pre is None else pre) > 0
        out = np.empty(len(self.lengths))
        for k, part in enumerate(self._slices()):
            s = signs[:, part]
            if similar is None:
                d_pos = np.count_nonzero(s[0] != s[1])
                d_neg = np.count_nonzero(s[0] != s[2])
                out[k] = 1.0 if d_pos > d_neg else 0.5 if d_pos == d_neg else 0.0
            else:
                share = np.count_nonzero(s[0] != s[1]) / s.shape[1]
                out[k] = float((share > PAIR_THRESHOLD) == bool(similar))
        self.mistakes += out
        return out

    def learn(
        self,
        z: np.ndarray,
        similar: bool | None,
        lr_scale: float = 1.0,
        pre: np.ndarray | None = None,
    ) -> None:
        """One SGD step of every length's projection on one constraint (``z`` as in
        :meth:`observe`; ``pre``: z's projections, when already at hand)."""
        t = np.tanh(z @ self._stacked.T if pre is None else pre)  # (k, Σ c)
        grad_t = np.zeros_like(t)
        for part, c in zip(self._slices(), self.lengths, strict=True):
            tc = t[:, part]
            if similar is None:
                delta_pos = 0.5 * (1.0 - tc[0] @ tc[1] / c)
                delta_neg = 0.5 * (1.0 - tc[0] @ tc[2] / c)
                if delta_pos - delta_neg + self.margin <= 0:
                    continue
                # ∂δ(u, v)/∂t_u = −t_v / 2c, and each length's gradient is scaled by c, so that
                # every length learns at the same pace per bit.
                grad_t[0, part] = 0.5 * (tc[2] - tc[1])
                grad_t[1, part] = -0.5 * tc[0]
                grad_t[2, part] = 0.5 * tc[0]
            else:
                delta = 0.5 * (1.0 - tc[0] @ tc[1] / c)
                sign = 1.0 if similar else -1.0
                if sign * (delta - PAIR_THRESHOLD) + self.margin <= 0:
                    continue
                grad_t[0, part] = -0.5 * sign * tc[1]
                grad_t[1, part] = -0.5 * sign * tc[0]
        if grad_t.any():
            grad_pre = grad_t * (1.0 - t * t)
            self._stacked -= (self.learning_rate * lr_scale) * (grad_pre.T @ z)

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """Plain containers and tensors (what :mod:`oahu.persistence` saves)."""
        return {
            "lengths": list(self.lengths),
            "projections": torch.from_numpy(self._stacked.copy()),
            "mistakes": torch.from_numpy(self.mistakes.copy()),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if tuple(state["lengths"]) != self.lengths:
            raise ValueError(
                f"codes state: lengths {tuple(state['lengths'])}, expected {self.lengths}"
            )
        self._stacked = state["projections"].numpy().astype(np.float32).copy()
        self.mistakes = state["mistakes"].numpy().astype(np.float64).copy()
