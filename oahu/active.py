"""Active learning: which triplet questions to ask an annotator next.

A question names three pool items: *is ``anchor`` more similar to ``first`` or to ``second``?*
Its answer is the triplet (anchor, the closer one, the farther one). :func:`suggest` proposes a
batch of questions for a learner and a pool of unlabelled items; docs/active-learning.md has the
method and its equations (A1-A6).

Candidates (A1). ``anchors`` pool items are drawn (seeded); each gets its ``neighbours`` nearest
pool items in the learner's Euclidean space (:meth:`oahu.learner.Learner.transform`), found
exactly; the candidate questions are the pairs of an anchor's neighbours. Measured on
Fashion-MNIST (seed 0, default learner after 500 constraints), with a simulated annotator who
answers "neither" when both or neither option shares the anchor's class: 16% of these
candidates get an answer, 25% of a joint-entropy batch of 100, 31-32% over whole runs of
5,000 labels. Questions pairing a near neighbour with a random far item get an answer 75% of the
time, but the model already knows it: only 0.5% of them have any uncertainty (A3), so learning
them moves nothing.

Model uncertainty (A2-A3). The selection needs a distribution of plausible models. OAHU's depths
are an α-weighted ensemble, but oahu's default learner has two depths, so each candidate's
centred vector of per-depth margins is (δ, −δ): measured on the 14,336 candidates above, those
vectors have rank 1, no use for telling the members of a batch apart. Monte-Carlo dropout on the
coordinates of the embedding is used instead: S masks m_s drop each coordinate with probability
p = 0.5 and scale the others by 1/√(1 − p) (so expected squared distances are unchanged), and

    ξ_s(a, i, j) = ‖m_s ⊙ (a − j)‖² − ‖m_s ⊙ (a − i)‖²                          (A2)

is candidate t's margin under perturbation s (positive: the model finds ``i`` the closer). The
same candidates' dropout margins, S = 64, have rank 63 (= S − 1, the most centred vectors can).

Strategies (:data:`STRATEGIES`).

* ``"uncertainty"``: the K candidates of largest binary entropy of P(ξ > 0) over the
  perturbations (A3), no diversity.
* ``"joint-entropy"``: greedy maximisation of the Gaussian joint entropy of the batch's margins
  (A4-A5): over the :data:`SHORTLIST` candidates of largest entropy, repeatedly take the one whose
  centred margin vector u_t has the largest residual ‖ũ_t‖ after projection onto the span of
  those taken (modified Gram-Schmidt, i.e. QR with column pivoting). Centred vectors span at most
  S − 1 dimensions (and at most ``dim``: ξ is linear in the squared mask), so S defaults to
  max(64, K + 1); with fewer perturbations, or once residuals vanish, the rest of the batch is
  filled by entropy (A6).
* ``"random"``: K questions drawn uniformly from all valid questions over the pool.

Timing: K = 100 questions from a 35,000-item, 400-dimensional pool (Fashion-MNIST's development
split in oahu's default learner's space) take 0.31 s by joint entropy, 0.24 s by uncertainty
(median of 5 seeds, 2-core machine otherwise idle; 0.29 s on one BLAS thread; up to 1.2 s
measured while other jobs loaded both cores). docs/active-learning.md, "Cost".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from oahu.checks import check_choice, check_int, check_number
from oahu.learner import Learner

STRATEGIES: tuple[str, ...] = ("joint-entropy", "uncertainty", "random")

# Probability that dropout removes a coordinate (A2).
DROPOUT = 0.5
# Candidates of largest entropy the joint-entropy greedy search runs over (A5).
SHORTLIST = 2000
# Minimum perturbations by default: enough samples for P(ξ > 0) to take 65 values.
MIN_PERTURBATIONS = 64
# A residual below this share of the first one is numerically zero: its candidate lies in the
# span of those already taken (A6).
RESIDUAL_TOLERANCE = 1e-6
# Anchor rows per block of the exact nearest-neighbour search: a block's distances to a
# 35,000-item pool are 256 x 35,000 float32, 36 MB.
_KNN_BLOCK = 256


@dataclass(frozen=True)
class Suggestion:
    """One question for the annotator: is ``pool[anchor]`` more similar to ``pool[first]`` or to
    ``pool[second]``? The answer is the triplet (anchor, the closer one, the farther one).

    ``anchor``, ``first`` and ``second`` are positions in the pool; ``score`` is how informative
    the selection thought the question: the residual norm ‖ũ‖ of joint entropy (A5), the binary
    entropy in bits of uncertainty (A3), 0 for random.

    >>> s = Suggestion(anchor=4, first=9, second=2, score=0.7)
    >>> s.triplet(closer=2)
    (4, 2, 9)
    """

    anchor: int
    first: int
    second: int
    score: float

    def triplet(self, closer: int) -> tuple[int, int, int]:
        """The answer as a triplet (anchor, closer, farther), given the option the annotator
        found closer (``first`` or ``second``)."""
        if closer not in (self.first, self.second):
            raise ValueError(
                f"closer: must be one of the options {self.first} or {self.second}, got {closer}"
            )
        farther = self.second if closer == self.first else self.first
        return (self.anchor, closer, farther)


@dataclass(frozen=True)
class Candidates:
    """Candidate questions and their dropout margins (A1-A2), for :func:`suggest_from_embeddings`
    and for measurements: ``questions`` (C, 3) pool positions (anchor, i, j) with i nearer to the
    anchor than j in the unperturbed space, ``margins`` (C, S) float64 ξ_s."""

    questions: np.ndarray
    margins: np.ndarray

    @property
    def probability(self) -> np.ndarray:
        """P(ξ > 0) over the perturbations, per candidate."""
        return (self.margins > 0).mean(axis=1)

    @property
    def entropy(self) -> np.ndarray:
        """Binary entropy (bits) of P(ξ > 0) per candidate (A3)."""
        return binary_entropy(self.probability)


def binary_entropy(p: np.ndarray) -> np.ndarray:
    """H(p) = −p log₂ p − (1 − p) log₂(1 − p), with 0 log 0 = 0.

    >>> binary_entropy(np.array([0.0, 0.5, 1.0])).tolist()
    [0.0, 1.0, 0.0]
    """
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return np.nan_to_num(h, nan=0.0)


def suggest(
    learner: Learner,
    pool_x: np.ndarray,
    batch: int,
    strategy: str = "joint-entropy",
    **kw: Any,
) -> list[Suggestion]:
    """The next ``batch`` questions for ``learner`` over the unlabelled items ``pool_x``:
    :func:`suggest_from_embeddings` of ``learner.transform(pool_x)`` (keywords pass through).

    A similarity learner (``metric == "ip"``, OASIS) has no Euclidean space to perturb and raises
    ``ValueError``.

    >>> from oahu.learners.baselines.euclidean import Euclidean
    >>> pool = np.random.default_rng(0).normal(size=(50, 3))
    >>> [len(suggest(Euclidean(n_features=3), pool, 4, s)) for s in STRATEGIES]
    [4, 4, 4]
    """
    if learner.metric != "l2":
        raise ValueError(
            f"learner: {learner.name!r} learns a similarity (inner product, metric "
            f"{learner.metric!r}), so its items have no Euclidean embedding whose distance "
            "margins active learning could perturb; use a distance learner (e.g. oahu)"
        )
    return suggest_from_embeddings(learner.transform(pool_x), batch, strategy, **kw)


def suggest_from_embeddings(
    points: np.ndarray,
    batch: int,
    strategy: str = "joint-entropy",
    *,
    seed: int = 0,
    anchors: int = 512,
    neighbours: int = 8,
    perturbations: int | None = None,
    exclude: set | None = None,
) -> list[Suggestion]:
    """The next ``batch`` questions over a pool given as points of a Euclidean space, (n, dim)
    (the learner's: :meth:`oahu.learner.Learner.transform`), by ``strategy`` (:data:`STRATEGIES`).

    ``anchors`` pool items are drawn, each with its ``neighbours`` nearest items; ``perturbations``
    is S, the dropout masks (default max(64, batch + 1)). ``exclude`` holds questions not to ask
    again, as (anchor, first, second) tuples of pool positions; the order of the two options does
    not matter. The two options of each question come in a seeded random order, so that
    ``first`` does not give away the model's guess. Fewer than ``batch`` questions come back only
    when the candidates run out (a tiny pool). Deterministic for a given ``seed``.

    >>> pts = np.array([[0.0, 0], [1, 0], [0, 1], [5, 5], [5, 6], [6, 5]], dtype=np.float32)
    >>> qs = suggest_from_embeddings(pts, 3, "uncertainty", anchors=6, neighbours=3)
    >>> len(qs), len({(q.anchor, *sorted((q.first, q.second))) for q in qs})
    (3, 3)
    >>> all(q.anchor not in (q.first, q.second) and q.first != q.second for q in qs)
    True
    """
    points = _check_points(points)
    batch = check_int(batch, "batch")
    check_choice(strategy, "strategy", STRATEGIES)
    anchors = check_int(anchors, "anchors")
    neighbours = check_int(neighbours, "neighbours", minimum=2)
    n_perturb = max(MIN_PERTURBATIONS, batch + 1) if perturbations is None else perturbations
    n_perturb = check_int(n_perturb, "perturbations", minimum=2)
    excluded = _exclusion_keys(exclude, len(points))
    rng = np.random.default_rng(seed)
    if strategy == "random":
        questions = random_questions(len(points), batch, rng, excluded)
        return _as_suggestions(questions, np.zeros(len(questions)), rng)
    cands = candidates(points, rng, anchors, neighbours, n_perturb, DROPOUT)
    keep = ~np.isin(_keys(cands.questions, len(points)), excluded)
    cands = Candidates(cands.questions[keep], cands.margins[keep])
    order = entropy_order(cands)
    if strategy == "uncertainty":
        picked = order[:batch]
        scores = cands.entropy[picked]
    else:
        picked, scores = joint_entropy_batch(cands.margins, order, batch, SHORTLIST)
    return _as_suggestions(cands.questions[picked], scores, rng)


# ---------------------------------------------------------------------------- candidates


def candidates(
    points: np.ndarray,
    rng: np.random.Generator,
    anchors: int,
    neighbours: int,
    perturbations: int,
    dropout: float = DROPOUT,
) -> Candidates:
    """The candidate questions (A1) and their margins under ``perturbations`` dropout masks (A2).

    >>> pts = np.random.default_rng(1).normal(size=(20, 4)).astype(np.float32)
    >>> c = candidates(pts, np.random.default_rng(0), anchors=5, neighbours=3, perturbations=8)
    >>> c.questions.shape, c.margins.shape  # 5 anchors x 3 pairs of 3 neighbours
    ((15, 3), (15, 8))
    """
    n = len(points)
    anchor_idx = np.sort(rng.choice(n, size=min(anchors, n), replace=False))
    near = nearest_neighbours(points, anchor_idx, min(neighbours, n - 1))
    # Every pair (i, j), i nearer than j, of an anchor's neighbours.
    first, second = np.triu_indices(near.shape[1], k=1)
    questions = np.stack(
        [
            np.repeat(anchor_idx, len(first)),
            near[:, first].ravel(),
            near[:, second].ravel(),
        ],
        axis=1,
    )
    masks = dropout_masks(points.shape[1], perturbations, rng, dropout)
    return Candidates(questions, margins(points, questions, masks))


def nearest_neighbours(points: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` nearest pool items of each of ``rows`` (positions in ``points``), nearest first,
    the item itself left out: exact squared Euclidean distances, a block of rows at a time.

    >>> pts = np.array([[0.0], [1.0], [3.0], [7.0]], dtype=np.float32)
    >>> nearest_neighbours(pts, np.array([0, 3]), 2).tolist()
    [[1, 2], [2, 1]]
    """
    points = np.asarray(points, dtype=np.float32)
    sq = np.einsum("ij,ij->i", points, points)
    out = np.empty((len(rows), k), dtype=np.int64)
    for start in range(0, len(rows), _KNN_BLOCK):
        block = rows[start : start + _KNN_BLOCK]
        d = sq[block, None] - 2.0 * (points[block] @ points.T) + sq[None, :]
        d[np.arange(len(block)), block] = np.inf  # an item is not its own neighbour
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        # Nearest first; ties broken by position, so the result does not depend on the BLAS.
        dist = np.take_along_axis(d, part, axis=1)
        order = np.lexsort((part, dist), axis=1)
        out[start : start + len(block)] = np.take_along_axis(part, order, axis=1)
    return out


def dropout_masks(
    dim: int, perturbations: int, rng: np.random.Generator, dropout: float = DROPOUT
) -> np.ndarray:
    """S squared dropout masks m_s², (S, dim): each coordinate 0 with probability ``dropout``,
    else 1/(1 − dropout), so that E[m²] = 1 and expected squared distances are unchanged (A2).

    >>> m = dropout_masks(1000, 4, np.random.default_rng(0), 0.5)
    >>> sorted(set(m.ravel().tolist())), bool(abs(m.mean() - 1) < 0.05)
    ([0.0, 2.0], True)
    """
    check_number(dropout, "dropout", low=0.0, high=1.0, closed="left")
    keep = rng.random((perturbations, dim)) >= dropout
    return keep / (1.0 - dropout)


def margins(points: np.ndarray, questions: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """ξ_s(a, i, j) = Σ_d m_sd² ((a − j)_d² − (a − i)_d²) for every question and mask (A2),
    (C, S) float64: linear in the mask, so one matrix product for all of them.

    >>> pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> margins(pts, np.array([[0, 1, 2]]), np.array([[1.0, 1.0], [2.0, 0.0]])).tolist()
    [[3.0, -2.0]]
    """
    p = np.asarray(points, dtype=np.float32)
    a, i, j = (p[questions[:, k]] for k in range(3))
    per_coordinate = np.square(a - j) - np.square(a - i)
    return (per_coordinate @ masks.T.astype(np.float32)).astype(np.float64)


# ---------------------------------------------------------------------------- selection


def entropy_order(cands: Candidates) -> np.ndarray:
    """Candidates from the most to the least uncertain (A3): by binary entropy of P(ξ > 0),
    ties (P takes only S + 1 values) broken by the smaller |mean ξ| / std ξ, then by position.

    >>> c = Candidates(np.zeros((3, 3), int), np.array([[1.0, 2], [5, -1], [1, -1]]))
    >>> entropy_order(c).tolist()  # 1 and 2 have p = 1/2; 2's mean margin is 0
    [2, 1, 0]
    """
    mean = cands.margins.mean(axis=1)
    std = cands.margins.std(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(std > 0, np.abs(mean) / std, np.inf)
    return np.lexsort((np.arange(len(mean)), z, -cands.entropy))


def joint_entropy_batch(
    margins: np.ndarray, order: np.ndarray, batch: int, shortlist: int = SHORTLIST
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy joint-entropy selection (A4-A6): positions of the chosen candidates and their
    scores (residual norms ‖ũ‖; 0 for those filled in by entropy).

    Over the ``shortlist`` first candidates of ``order`` (most uncertain first), QR with column
    pivoting of the centred margin vectors picks, at each step, the one with the largest residual
    after projection onto the span of those picked. Centred vectors span at most S − 1
    dimensions: after that many picks, or once a residual is numerically zero, the batch is
    filled in ``order``.

    Two identical candidates are never both picked before a different one:

    >>> m = np.array([[1.0, -1, 0], [1, -1, 0], [0, 1, -1]])
    >>> picked, scores = joint_entropy_batch(m, np.array([0, 1, 2]), 2)
    >>> picked.tolist()
    [0, 2]
    """
    short = order[: max(shortlist, 0)]
    u = margins[short] - margins[short].mean(axis=1, keepdims=True)
    picked: list[int] = []
    scores: list[float] = []
    if len(short):
        # QR of (S, C): column pivoting is the greedy largest-residual order (modified
        # Gram-Schmidt); |R_kk| is the k-th pick's residual norm.
        r, pivots = scipy.linalg.qr(u.T, mode="r", pivoting=True)
        residual = np.abs(np.diag(r))
        tolerance = RESIDUAL_TOLERANCE * (residual[0] if len(residual) else 0.0)
        for k, res in enumerate(residual[:batch]):
            if res <= tolerance:
                break
            picked.append(int(short[pivots[k]]))
            scores.append(float(res))
    if len(picked) < batch:  # the rank pitfall: fill by entropy
        taken = set(picked)
        fill = [int(c) for c in order if int(c) not in taken][: batch - len(picked)]
        picked.extend(fill)
        scores.extend([0.0] * len(fill))
    return np.asarray(picked, dtype=np.int64), np.asarray(scores, dtype=np.float64)


def distinct_questions(n: int) -> int:
    """How many different questions ``n`` pool items make: an anchor and an unordered pair of
    the others.

    >>> distinct_questions(3), distinct_questions(5)
    (3, 30)
    """
    return n * (n - 1) * (n - 2) // 2


def random_questions(
    n: int, batch: int, rng: np.random.Generator, excluded: np.ndarray | None = None
) -> np.ndarray:
    """``batch`` distinct questions (anchor, i, j), uniform over all valid ones (three distinct
    items, the two options unordered) not in ``excluded`` (keys, :func:`_keys`): drawn in rounds
    of rejection sampling; fewer only if the pool has fewer questions.

    >>> q = random_questions(10, 5, np.random.default_rng(0))
    >>> q.shape, bool((q[:, 0] != q[:, 1]).all() and (q[:, 1] != q[:, 2]).all())
    ((5, 3), True)
    """
    total = distinct_questions(n)
    excluded = np.empty(0, np.int64) if excluded is None else excluded
    want = min(batch, max(total - len(np.unique(excluded)), 0))
    chosen = np.empty((0, 3), dtype=np.int64)
    if want == 0:
        return chosen
    if total <= 50_000 or want > total // 2:
        # A small pool: enumerate and shuffle rather than reject (and terminate).
        a, i, j = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
        ok = (a != i) & (a != j) & (i < j)
        every = np.stack([a[ok], i[ok], j[ok]], axis=1)
        every = every[~np.isin(_keys(every, n), excluded)]
        return every[rng.permutation(len(every))[:want]]
    seen = set(excluded.tolist())
    while len(chosen) < want:
        draw = rng.integers(0, n, size=(2 * (want - len(chosen)) + 8, 3))
        ok = (draw[:, 0] != draw[:, 1]) & (draw[:, 0] != draw[:, 2]) & (draw[:, 1] != draw[:, 2])
        draw = draw[ok]
        keys = _keys(draw, n)
        _, first = np.unique(keys, return_index=True)
        first = np.sort(first)  # keep draw order: the result depends on the seed only
        new = [k for k in first if int(keys[k]) not in seen]
        seen.update(int(keys[k]) for k in new)
        chosen = np.concatenate([chosen, draw[new]])[:want]
    return chosen


# ---------------------------------------------------------------------------- helpers


def _keys(questions: np.ndarray, n: int) -> np.ndarray:
    """One int64 per question, the same whichever order its two options come in: a·n² +
    min(i, j)·n + max(i, j) (pools of up to 2,097,151 items, whose n³ fits 63 bits)."""
    q = np.asarray(questions, dtype=np.int64).reshape(-1, 3)
    lo, hi = np.minimum(q[:, 1], q[:, 2]), np.maximum(q[:, 1], q[:, 2])
    return (q[:, 0] * n + lo) * n + hi


def _exclusion_keys(exclude: set | None, n: int) -> np.ndarray:
    if not exclude:
        return np.empty(0, dtype=np.int64)
    try:
        q = np.array(sorted(tuple(int(v) for v in e) for e in exclude), dtype=np.int64)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"exclude: expected (anchor, first, second) tuples of pool positions, got {e}"
        ) from e
    if q.ndim != 2 or q.shape[1] != 3:
        raise ValueError(
            f"exclude: expected (anchor, first, second) tuples, got entries of shape {q.shape[1:]}"
        )
    outside = (q < 0) | (q >= n)
    if outside.any():
        bad = tuple(int(v) for v in q[outside.any(axis=1)][0])
        raise ValueError(
            f"exclude: {bad} names an item outside the pool of {n} (positions 0-{n - 1})"
        )
    return _keys(q, n)


def _check_points(points: np.ndarray) -> np.ndarray:
    p = np.ascontiguousarray(points, dtype=np.float32)
    if p.ndim != 2:
        raise ValueError(f"points: expected shape (n_items, dim), got {p.shape}")
    if len(p) < 3:
        raise ValueError(f"points: a question needs 3 pool items, got {len(p)}")
    if len(p) >= 1 << 21:
        raise ValueError(f"points: at most {(1 << 21) - 1} pool items, got {len(p)}")
    if not np.isfinite(p).all():
        raise ValueError("points: every coordinate must be finite")
    return p


def _as_suggestions(
    questions: np.ndarray, scores: np.ndarray, rng: np.random.Generator
) -> list[Suggestion]:
    swap = rng.random(len(questions)) < 0.5  # options in random order: first is no hint
    first = np.where(swap, questions[:, 2], questions[:, 1])
    second = np.where(swap, questions[:, 1], questions[:, 2])
    return [
        Suggestion(int(a), int(f), int(s), float(sc))
        for a, f, s, sc in zip(questions[:, 0], first, second, scores, strict=True)
    ]
