"""Replay a cross-modal stream through the cross-modal learner (or fit an offline reference on
its development split), then evaluate cross-modal retrieval on its test split.

What :func:`replay_cross_modal` reports (one dict, the keys of ``oahu replay --cross-modal
--json``):

* ``map_ab``, ``map_ba``: mAP@all of modality A's test items ranking B's, and B's ranking A's,
  by the learned distance; ``hamming_map_ab``, ``hamming_map_ba`` the same by Hamming distance
  of the binary codes at ``code_bits`` (the chosen length);
* ``recall_ab``, ``recall_ba``: Recall@1 and @10;
* ``link_auc``: ROC AUC of link prediction on 20,000 held-out cross-modal pairs, half linked;
* ``error``: kNN error of A's test items classified by their 5 nearest development items of B;
  None for linked objects, which have no labels to classify by;
* for linked objects (:mod:`oahu.streams.linked`), an item is relevant to a query when a
  link joins them, the queries and the gallery are the objects of the test links (the links
  between two test objects) of each modality, and ``link_auc`` is the AUC of those links
  against as many unlinked pairs of those objects (:class:`HeldOutRetrieval`);
* ``constraints``, ``constraints_per_s``, ``train_seconds``, ``alpha``, ``code_weights``,
  ``prequential_accuracy``, and with ``eval_every`` a ``curve`` of mAP against constraints.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from oahu.experiments.cross_modal_evaluation import (
    held_out_link_auc,
    link_auc,
    link_mean_average_precision,
    link_recall_at,
    link_relevance,
    mean_average_precision,
    nearest_labels,
    recall_at,
)
from oahu.learners.cross_modal.cca import CanonicalReference, choose_components
from oahu.learners.cross_modal.learner import CrossModalOAHU
from oahu.persistence import save_learner
from oahu.streams.cross_modal import PAIR, CrossModalStream

__all__ = [
    "CROSS_MODAL_LEARNERS",
    "HeldOutRetrieval",
    "evaluate_cross_modal",
    "fit_reference",
    "hamming_maps",
    "learn_constraint",
    "learn_row",
    "prepared_model",
    "replay_cross_modal",
]

#: What ``oahu replay --cross-modal --learner`` takes: the streaming learner and the offline
#: references.
CROSS_MODAL_LEARNERS = ("oahu", "cca", "pls")
_KNN = 5
REFERENCE_BITS = 64  # the CCA-sign codes' length
CODE_LENGTHS = (16, 32, 64, 128)  # the lengths compared
_VALIDATION_QUERIES = 2000


class HeldOutRetrieval:
    """What cross-modal retrieval is measured over in a stream's test split: each modality's
    test objects that take part (``objects``, (A's, B's)) and which items of the other modality
    are relevant to each.

    Labelled objects: every test object, relevant when of one class. Linked objects: the
    objects of the test links, A's and B's, relevant when a link joins them.
    """

    def __init__(self, stream: CrossModalStream) -> None:
        if not stream.is_linked:
            test = stream.test_idx
            self.objects = (test, test)
            assert stream.y is not None
            self._labels: np.ndarray | None = stream.y[test]
            return
        a, b, self.relevant = link_relevance(stream.test_links)
        self.objects = (a, b)
        self._labels = None

    def queries(self, m: int, seed: int, max_queries: int | None) -> np.ndarray:
        """Positions in ``objects[m]`` of modality m's queries: all, or a seeded sample."""
        return _queries(len(self.objects[m]), seed, max_queries)

    def mean_average_precision(self, points: tuple, m: int, q: np.ndarray, seed: int = 0) -> float:
        """mAP of modality m's queries ``q`` (positions) ranking the other modality's objects;
        ``points``: (queries' points or codes, the gallery's)."""
        if self._labels is None:
            relevant = self.relevant if m == 0 else self.relevant.T
            return link_mean_average_precision(points, relevant[q], seed)
        return mean_average_precision(points, self._labels[q], self._labels, seed)

    def recall_at(self, points: tuple, m: int, q: np.ndarray) -> dict[str, float]:
        if self._labels is None:
            return link_recall_at(points, (self.relevant if m == 0 else self.relevant.T)[q])
        return recall_at(points, self._labels[q], self._labels)

    def link_auc(self, ea: np.ndarray, eb: np.ndarray, seed: int) -> float:
        if self._labels is None:
            return held_out_link_auc(ea, eb, self.relevant, seed)
        return link_auc(ea, eb, self._labels, seed=seed)


def evaluate_cross_modal(
    stream: CrossModalStream,
    embed: Callable[[np.ndarray, int], np.ndarray],
    codes: Callable[[np.ndarray, int], np.ndarray] | None,
    seed: int = 0,
    max_queries: int | None = None,
    test: HeldOutRetrieval | None = None,
) -> dict[str, Any]:
    """The cross-modal scores of a model given as ``embed(X, modality)`` (points whose squared
    Euclidean distance is the model's distance) and ``codes(X, modality)`` (packed bits).

    Every test item of one modality queries every test item of the other (for linked objects,
    the objects of the test links: :class:`HeldOutRetrieval`); with ``max_queries``, a seeded
    sample of that many queries does (the galleries stay whole). ``test``: the stream's
    :class:`HeldOutRetrieval`, for a caller that evaluates the same stream many times.
    """
    test = HeldOutRetrieval(stream) if test is None else test
    ea, eb = (embed(stream.X[m][test.objects[m]], m) for m in (0, 1))
    qa, qb = (test.queries(m, seed, max_queries) for m in (0, 1))
    out: dict[str, Any] = {
        "map_ab": test.mean_average_precision((ea[qa], eb), 0, qa),
        "map_ba": test.mean_average_precision((eb[qb], ea), 1, qb),
        "recall_ab": test.recall_at((ea[qa], eb), 0, qa),
        "recall_ba": test.recall_at((eb[qb], ea), 1, qb),
        "link_auc": test.link_auc(ea, eb, seed),
        "error": None,
    }
    if not stream.is_linked:
        # Classification across modalities: A's queries among B's labelled development items.
        assert stream.y is not None
        dev = stream.dev_idx
        votes = nearest_labels(ea[qa], embed(stream.X[1][dev], 1), stream.y[dev], _KNN)
        predicted = np.array([np.bincount(row).argmax() for row in votes])
        out["error"] = float((predicted != stream.y[test.objects[0]][qa]).mean())
    if codes is not None:
        out["hamming_map_ab"], out["hamming_map_ba"] = hamming_maps(
            stream, codes, seed, max_queries, test
        )
    return out


def _queries(n: int, seed: int, max_queries: int | None) -> np.ndarray:
    if max_queries is not None and max_queries < n:
        return np.sort(np.random.default_rng([seed, 0x51]).choice(n, max_queries, False))
    return np.arange(n)


def hamming_maps(
    stream: CrossModalStream,
    codes: Callable[[np.ndarray, int], np.ndarray],
    seed: int = 0,
    max_queries: int | None = None,
    test: HeldOutRetrieval | None = None,
) -> tuple[float, float]:
    """mAP@all A→B and B→A by Hamming ranking of ``codes(X, modality)`` over the test split
    (``test`` as in :func:`evaluate_cross_modal`)."""
    test = HeldOutRetrieval(stream) if test is None else test
    ca, cb = (codes(stream.X[m][test.objects[m]], m) for m in (0, 1))
    qa, qb = (test.queries(m, seed, max_queries) for m in (0, 1))
    return (
        test.mean_average_precision((ca[qa], cb), 0, qa, seed),
        test.mean_average_precision((cb[qb], ca), 1, qb, seed),
    )


def fit_reference(stream: CrossModalStream, method: str, seed: int = 0) -> CanonicalReference:
    """CCA or PLS on the development split's paired rows, its number of components chosen on a
    seeded half of those rows by mean A→B / B→A mAP on the other half.

    The rows pair an object of A with one of B: each development object's two views, or for
    linked objects each development link's two objects (so an object with several links is
    several rows, and one without any is none).
    """
    if stream.is_linked:
        links = stream.dev_links
        xa, xb, rows = stream.X[0][links[:, 0]], stream.X[1][links[:, 1]], np.arange(len(links))
        score = _link_score(stream, links, seed)
    else:
        assert stream.y is not None
        dev = stream.dev_idx
        xa, xb, rows = stream.X[0][dev], stream.X[1][dev], stream.y[dev]
        score = _label_score(seed)
    k = choose_components(xa, xb, rows, score, method=method, seed=seed)
    # One bit per canonical component: views narrower than 64 give shorter codes.
    bits = min(REFERENCE_BITS, xa.shape[1], xb.shape[1], len(rows) - 1)
    return CanonicalReference(k, method, code_bits=bits).fit(xa, xb)


# At most _VALIDATION_QUERIES queries each way: a choice among a few values of k needs no more,
# and a large development split would make each score a minute long.
def _label_score(seed: int) -> Callable[..., float]:
    def score(ref: CanonicalReference, a: np.ndarray, b: np.ndarray, labels: np.ndarray) -> float:
        q = _queries(len(labels), seed, _VALIDATION_QUERIES)
        ea, eb = ref.embed(a, 0), ref.embed(b, 1)
        return mean_average_precision((ea[q], eb), labels[q], labels) + mean_average_precision(
            (eb[q], ea), labels[q], labels
        )

    return score


def _link_score(stream: CrossModalStream, links: np.ndarray, seed: int) -> Callable[..., float]:
    """The validation score of linked objects: the objects of the validation rows (development
    links) of each modality rank the other's, relevant when a development link joins them."""

    def score(ref: CanonicalReference, a: np.ndarray, b: np.ndarray, rows: np.ndarray) -> float:
        held = [np.unique(links[rows, m]) for m in (0, 1)]
        *objects, relevant = link_relevance(
            links[np.isin(links[:, 0], held[0]) & np.isin(links[:, 1], held[1])]
        )
        points = [ref.embed(stream.X[m][objects[m]], m) for m in (0, 1)]
        total = 0.0
        for m, rel in ((0, relevant), (1, relevant.T)):
            q = _queries(len(objects[m]), seed, _VALIDATION_QUERIES)
            total += link_mean_average_precision((points[m][q], points[1 - m]), rel[q])
        return total

    return score


def prepared_model(
    stream: CrossModalStream, seed: int = 0, params: dict[str, Any] | None = None
) -> CrossModalOAHU:
    """A new cross-modal model for ``stream``'s modalities, each modality's preprocessing
    fitted on its development items (unlabelled), as before the stream starts."""
    names = stream.modalities
    model = CrossModalOAHU(dict(zip(names, stream.dims, strict=True)), seed=seed, **(params or {}))
    for m, name in enumerate(names):
        model.prepare(name, stream.X[m][stream.dev_objects(m)])
    return model


def learn_constraint(
    model: CrossModalOAHU,
    stream: CrossModalStream,
    objects: Sequence[int],
    modalities: Sequence[int],
    kind: int,
    similar: bool,
) -> bool:
    """Learn one constraint over ``stream``'s objects (a row of its ``constraints``, with its
    ``modality`` codes, kind and flag); whether the model changed."""
    names = stream.modalities
    if kind == PAIR:
        return model.learn_pair(
            stream.X[modalities[0]][objects[0]],
            stream.X[modalities[1]][objects[1]],
            (names[modalities[0]], names[modalities[1]]),
            similar,
        )
    return model.learn_triplet(
        *(stream.X[modalities[j]][objects[j]] for j in range(3)),
        tuple(names[m] for m in modalities),
    )


def learn_row(model: CrossModalOAHU, stream: CrossModalStream, i: int) -> bool:
    """Learn ``stream``'s constraint ``i``; whether the model changed."""
    return learn_constraint(
        model,
        stream,
        stream.constraints[i],
        stream.modality[i],
        stream.kinds[i],
        bool(stream.similar[i]),
    )


def replay_cross_modal(
    stream: CrossModalStream,
    learner: str = "oahu",
    seed: int = 0,
    params: dict[str, Any] | None = None,
    eval_every: Sequence[int] = (),
    progress: Callable[[int], None] | None = None,
    max_queries: int | None = None,
    save_to: str | None = None,
) -> dict[str, Any]:
    """Learn ``stream`` with ``learner`` (one of :data:`CROSS_MODAL_LEARNERS`) and evaluate.

    ``params`` go to :class:`CrossModalOAHU`; ``eval_every`` lists constraint counts at which
    the test mAP is also taken (the ``curve``); ``progress(n)`` is called every 1,000
    constraints; ``max_queries`` as in :func:`evaluate_cross_modal`; ``save_to``: a path to
    save the learned model to (:func:`oahu.persistence.save_learner`'s checked format).
    """
    if learner not in CROSS_MODAL_LEARNERS:
        raise ValueError(
            f"learner: one of {CROSS_MODAL_LEARNERS} with --cross-modal, got {learner!r}"
        )
    report: dict[str, Any] = {
        "learner": learner,
        "modalities": list(stream.modalities),
        "seed": seed,
        "constraints": len(stream),
    }
    test = HeldOutRetrieval(stream)  # every evaluation below is of the same test split
    if learner != "oahu":
        start = time.perf_counter()
        ref = fit_reference(stream, learner, seed)
        report["train_seconds"] = time.perf_counter() - start
        report.update(evaluate_cross_modal(stream, ref.embed, ref.codes, seed, max_queries, test))
        report["constraints"] = 0  # offline: fitted on paired items, no constraint used
        report["n_components"] = ref.n_components
        report["code_bits"] = ref.code_bits
        if learner == "cca":  # CCA-sign codes at every length the views allow, as for oahu
            report["hamming_by_bits"] = {
                str(bits): hamming_maps(
                    stream, lambda x, m, b=bits: ref.codes(x, m, b), seed, max_queries, test
                )
                for bits in CODE_LENGTHS
                if bits <= ref.max_bits
            }
        return report
    names = stream.modalities
    model = prepared_model(stream, seed, params)

    def embed(x: np.ndarray, m: int) -> np.ndarray:
        return model.embed(x, names[m])

    def codes(x: np.ndarray, m: int) -> np.ndarray:
        return model.codes(x, names[m])

    checkpoints = sorted({int(n) for n in eval_every if 0 < int(n) <= len(stream)})
    curve, elapsed = [], 0.0
    start = time.perf_counter()
    for i in range(len(stream)):
        learn_row(model, stream, i)
        done = i + 1
        if progress is not None and done % 1000 == 0:
            progress(done)
        if checkpoints and done == checkpoints[0]:
            checkpoints.pop(0)
            elapsed += time.perf_counter() - start
            scores = evaluate_cross_modal(stream, embed, codes, seed, max_queries, test)
            curve.append(
                {
                    "constraints": done,
                    **{k: scores[k] for k in ("map_ab", "map_ba")},
                    "hamming_map_ab": scores["hamming_map_ab"],
                    "hamming_map_ba": scores["hamming_map_ba"],
                    "code_bits": model.chosen_bits,
                }
            )
            start = time.perf_counter()
    elapsed += time.perf_counter() - start
    if save_to is not None:
        save_learner(model, save_to, {"stream_meta": json.dumps(stream.meta)})
    report["train_seconds"] = elapsed
    report["constraints_per_s"] = len(stream) / elapsed if elapsed else 0.0
    report.update(evaluate_cross_modal(stream, embed, codes, seed, max_queries, test))
    report["code_bits"] = model.chosen_bits
    # Every length's Hamming mAP, so that a reference's codes can be met at equal length.
    report["hamming_by_bits"] = {
        str(bits): hamming_maps(
            stream, lambda x, m, b=bits: model.codes(x, names[m], b), seed, max_queries, test
        )
        for bits in model.binary_codes.lengths
    }
    report["code_weights"] = dict(
        zip(map(str, model.binary_codes.lengths), model.binary_codes.weights.tolist(), strict=True)
    )
    report["alpha"] = model.alpha.tolist()
    report["prequential_accuracy"] = model.prequential_accuracy
    report["utilization"] = model.constraints_used / max(model.constraints_seen, 1)
    if eval_every:
        report["curve"] = curve
    return report
