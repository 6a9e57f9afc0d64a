"""Active cross-modal queries (CSLP's active sampling, Zhen and Zha, AAAI 2015, Section 4),
through oahu's joint-entropy selector (docs/active-learning.md, A1-A6).

A question names an anchor in one modality and two items of the other: *is the anchor more
similar to ``first`` or to ``second``?* Candidates (A1, across modalities): anchors drawn from
the development objects, each in modality A or B with probability 1/2, and each anchor's
nearest development items of the *other* modality under the current model; the candidate
questions are the pairs of those neighbours. Their margins under dropout-perturbed copies of the
shared space (A2) give each candidate's uncertainty, and the batch is chosen by greedy joint
entropy (A4-A6), exactly as for single-modality questions.

A simulated annotator answers from the development labels: the option of the anchor's class;
"neither" when both or none share it (the label is spent, nothing is learned). The loop starts
from the first ``INITIAL`` constraints of the protocol stream (``INITIAL`` labels), then asks
``batch`` questions per round until ``budget`` labels are spent. The baseline ("random") is the
protocol stream's first ``budget`` constraints, one label each.

The result is a stream of what was learned, in order: relearning it with the same seed gives
the model the loop taught (the learner is deterministic).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from oahu.active import (
    DROPOUT,
    MIN_PERTURBATIONS,
    SHORTLIST,
    Candidates,
    dropout_masks,
    entropy_order,
    joint_entropy_batch,
    margins,
)
from oahu.checks import check_choice, check_int
from oahu.experiments.cross_modal_replay import learn_constraint, learn_row, prepared_model
from oahu.learners.cross_modal.loss import PAIR_THRESHOLD
from oahu.streams.cross_modal import PAIR, TRIPLET, CrossModalStream

__all__ = [
    "CROSS_MODAL_ORACLES",
    "INITIAL",
    "QUESTION_KINDS",
    "cross_modal_oracle",
    "cross_modal_questions",
]

CROSS_MODAL_ORACLES = ("active", "random")
QUESTION_KINDS = ("pairs", "triplets", "both")
INITIAL = 500  # protocol constraints the annotator loop starts from
# Chosen on development seeds 100 and 101 of mfeat (docs/cross-modal.md): a wide neighbourhood
# puts the confusable items of other classes among the candidates.
_ANCHORS = 64
_NEIGHBOURS = 128


def cross_modal_questions(
    points: tuple[np.ndarray, np.ndarray],
    batch: int,
    rng: np.random.Generator,
    anchors: int = _ANCHORS,
    neighbours: int = _NEIGHBOURS,
    kinds: str = "pairs",
) -> np.ndarray:
    """``batch`` questions as positions in the two pools stacked (A's points, then B's), each
    anchor's options in the other pool, chosen by joint entropy: (anchor, other, -1) asks
    whether the two are linked, (anchor, first, second) which of the two is closer.

    ``kinds``: ``"pairs"``, ``"triplets"`` or ``"both"`` (the candidates of both kinds compete).
    A pair question's margin under perturbation s is ξ_s = b − D_s(anchor, other), with b the
    learner's pair threshold (positive: the model says linked).

    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.normal(size=(30, 4)), rng.normal(size=(30, 4))
    >>> q = cross_modal_questions((a, b), 5, rng, anchors=10, neighbours=4, kinds="triplets")
    >>> q.shape, bool(((q[:, 0] < 30) == (q[:, 1] >= 30)).all())
    ((5, 3), True)
    >>> cross_modal_questions((a, b), 5, rng, anchors=10, neighbours=4)[:, 2].tolist()
    [-1, -1, -1, -1, -1]
    """
    check_choice(kinds, "kinds", QUESTION_KINDS)
    pa, pb = (np.asarray(p, dtype=np.float32) for p in points)
    stacked = np.concatenate([pa, pb])
    n_a, n_b = len(pa), len(pb)
    chosen = rng.choice(n_a + n_b, size=min(anchors, n_a + n_b), replace=False)
    rows = []
    for anchor in np.sort(chosen):
        other, offset = (pb, n_a) if anchor < n_a else (pa, 0)
        d = ((other - stacked[anchor]) ** 2).sum(1)
        k = min(neighbours, len(other))
        near = np.argsort(d, kind="stable")[:k] + offset
        if kinds != "triplets":
            rows.append(np.stack([np.full(k, anchor), near, np.full(k, -1)], axis=1))
        if kinds != "pairs":
            first, second = np.triu_indices(k, k=1)
            rows.append(np.stack([np.full(len(first), anchor), near[first], near[second]], axis=1))
    questions = np.concatenate(rows)
    masks = dropout_masks(stacked.shape[1], max(MIN_PERTURBATIONS, batch + 1), rng, DROPOUT)
    cands = Candidates(questions, _margins(stacked, questions, masks))
    picked, _ = joint_entropy_batch(cands.margins, entropy_order(cands), batch, SHORTLIST)
    return questions[picked]


def _margins(points: np.ndarray, questions: np.ndarray, masks: np.ndarray) -> np.ndarray:
    out = np.empty((len(questions), len(masks)))
    pairs = questions[:, 2] < 0
    if (~pairs).any():
        out[~pairs] = margins(points, questions[~pairs], masks)
    if pairs.any():
        a, j = points[questions[pairs, 0]], points[questions[pairs, 1]]
        out[pairs] = PAIR_THRESHOLD - np.square(a - j) @ masks.T.astype(np.float32)
    return out


def cross_modal_oracle(
    stream: CrossModalStream,
    oracle: str,
    budget: int,
    batch: int = 100,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    kinds: str = "pairs",
) -> CrossModalStream:
    """The stream of constraints an annotator loop teaches with ``budget`` labels (``oracle``
    "active" or "random"; ``kinds`` of questions as in :func:`cross_modal_questions`); its
    ``meta["oracle"]`` holds ``labels_used`` and ``answered``."""
    check_choice(oracle, "oracle", CROSS_MODAL_ORACLES)
    if stream.is_linked:
        raise ValueError(
            "oracle: the simulated annotator answers from class labels, and linked objects "
            "have none (their constraints come from the stream's own links)"
        )
    check_int(budget, "budget")
    check_int(batch, "batch")
    if oracle == "random" or budget <= INITIAL:
        n = min(budget, len(stream))
        return _with(stream, np.arange(n), [], {"labels_used": n, "answered": n})
    names = stream.modalities
    model = prepared_model(stream, seed, params)
    dev = stream.dev_idx
    for i in range(min(INITIAL, len(stream))):
        learn_row(model, stream, i)
    rng = np.random.default_rng([seed, 0xAC7])
    used, answered = min(INITIAL, len(stream)), []
    n_dev = len(dev)
    while used < budget:
        k = min(batch, budget - used)
        points = (model.embed(stream.X[0][dev], names[0]), model.embed(stream.X[1][dev], names[1]))
        questions = cross_modal_questions(points, k, rng, kinds=kinds)
        used += len(questions)
        for anchor, first, second in questions:
            if second < 0:  # "are these two linked?": always answered
                objects = [dev[p % n_dev] for p in (anchor, first)] + [-1]
                mods = [int(p >= n_dev) for p in (anchor, first)] + [-1]
                linked = bool(stream.y[objects[0]] == stream.y[objects[1]])
                row = (np.array(objects), np.array(mods), PAIR, linked)
                learn_constraint(model, stream, *row)
                answered.append(row)
                continue
            objects = [dev[p % n_dev] for p in (anchor, first, second)]
            mods = [int(p >= n_dev) for p in (anchor, first, second)]
            same = [stream.y[objects[j]] == stream.y[objects[0]] for j in (1, 2)]
            if same[0] == same[1]:
                continue  # "neither": the label is spent, nothing is learned
            if same[1]:
                objects[1], objects[2] = objects[2], objects[1]
                mods[1], mods[2] = mods[2], mods[1]
            row = (np.array(objects), np.array(mods), TRIPLET, False)
            learn_constraint(model, stream, *row)
            answered.append(row)
        if not len(questions):
            break
    n_initial = min(INITIAL, len(stream))
    return _with(
        stream,
        np.arange(n_initial),
        answered,
        {"labels_used": used, "answered": n_initial + len(answered)},
    )


def _with(
    stream: CrossModalStream, rows: np.ndarray, answered: list, oracle: dict
) -> CrossModalStream:
    """``stream`` with its constraints ``rows`` then the ``answered`` ones, and ``oracle``
    in its meta (the split and the items stay)."""
    objects, modality, kinds, similar = zip(*answered, strict=True) if answered else ([],) * 4
    return dataclasses.replace(
        stream,
        constraints=np.concatenate(
            [stream.constraints[rows], np.array(objects, np.int64).reshape(-1, 3)]
        ),
        modality=np.concatenate(
            [stream.modality[rows], np.array(modality, np.int8).reshape(-1, 3)]
        ),
        kinds=np.concatenate([stream.kinds[rows], np.array(kinds, np.int8)]),
        similar=np.concatenate([stream.similar[rows], np.array(similar, bool)]),
        meta={**stream.meta, "oracle": oracle},
    )
