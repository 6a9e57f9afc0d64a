"""A micro-batch update sends each distinct row through the network once: the grouping itself
(exact, never merging rows that differ), and a learner that learns what it learned when every
row went through."""

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

import oahu.learners.oahu.distinct_rows as distinct_rows_module
import oahu.learners.oahu.update as update_module
from oahu.learners.oahu.distinct_rows import distinct_rows
from oahu.learners.oahu.learner import OAHU


@given(st.lists(st.integers(0, 6), min_size=1, max_size=40), st.integers(1, 5))
def test_the_groups_rebuild_the_rows_in_order_of_first_occurrence(picks, width) -> None:
    table = np.random.default_rng(width).standard_normal((7, width)).astype(np.float32)
    x = table[picks]
    found = distinct_rows(x)
    if len(set(picks)) == len(picks):
        assert found is None  # nothing to merge
        return
    first, row_of = found
    assert np.array_equal(x[first][row_of], x)
    # Each distinct row at its first occurrence, in order.
    assert first.tolist() == sorted({p: i for i, p in reversed(list(enumerate(picks)))}.values())
    assert len(first) == len(set(picks))


def test_rows_that_share_a_fingerprint_but_differ_are_not_merged(monkeypatch) -> None:
    # A probe blind to the first column: [1, 2] and [5, 2] share a fingerprint.
    monkeypatch.setattr(distinct_rows_module, "_probe", lambda width: np.array([0, 1], np.float32))
    x = np.array([[1, 2], [5, 2], [3, 4], [3, 4]], np.float32)
    assert distinct_rows(x) is None
    same = np.array([[1, 2], [1, 2], [3, 4]], np.float32)
    assert distinct_rows(same)[1].tolist() == [0, 0, 1]


def test_rows_that_are_not_finite_are_not_merged() -> None:
    x = np.array([[np.nan, 1.0], [np.nan, 2.0], [3.0, 4.0]], np.float32)
    assert distinct_rows(x) is None  # NaN fingerprints group, and NaN rows never compare equal
    one_nan = np.array([[np.nan, 1.0], [3.0, 4.0], [3.0, 4.0]], np.float32)
    assert distinct_rows(one_nan)[1].tolist() == [0, 1, 1]


def _model() -> OAHU:
    model = OAHU(5, n_hidden_layers=2, hidden_width=6, batch_size=16, seed=3, preprocess="none")
    model.prepare(np.random.default_rng(11).random((60, 5), dtype=np.float32))
    model.update_step.learned = 100_000  # past the ramp: one update takes all sixteen
    return model


def _triplets(seed: int) -> np.ndarray:
    """Sixteen triplets of three different items among ten: most items come back in one
    update."""
    items = np.random.default_rng(0).random((10, 5), dtype=np.float32)
    rng = np.random.default_rng(seed)
    return items[[rng.choice(10, 3, replace=False) for _ in range(16)]]


def _forwarded_rows(model: OAHU) -> list[int]:
    rows: list[int] = []
    forward = model.network.forward
    model.network.forward = lambda x: rows.append(len(x)) or forward(x)
    return rows


def test_a_learner_forwarding_distinct_rows_learns_what_one_forwarding_all_does(
    monkeypatch,
) -> None:
    merged, every = _model(), _model()
    rows_merged, rows_every = _forwarded_rows(merged), _forwarded_rows(every)
    for seed in range(4):
        t = _triplets(seed)
        merged.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
        with monkeypatch.context() as patch:
            patch.setattr(update_module, "distinct_rows", lambda x: None)
            every.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
    assert len(rows_merged) == len(rows_every) == 4
    assert rows_every[0] == 3 * 16  # nothing replayed or mined in the first update
    # Ten items at most in the first update; later ones add replayed and mined rows.
    assert rows_merged[0] <= 10 and all(m < e for m, e in zip(rows_merged, rows_every, strict=True))
    for name, value in merged.network.tensors().items():
        assert torch.allclose(value, every.network.tensors()[name], atol=1e-6), name
    assert np.array_equal(merged.alpha, every.alpha)
    assert merged.prequential.combined == every.prequential.combined
