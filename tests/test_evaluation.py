"""The evaluation protocol: full and subsampled queries agree where they must."""

import numpy as np

from oahu.baselines.euclidean import Euclidean
from oahu.evaluation import evaluate
from oahu.streams.datasets import load_digits
from oahu.streams.protocol import split_dev_test


def test_subsampled_queries_match_the_same_queries_evaluated_in_full() -> None:
    ds = load_digits()
    dev, test = split_dev_test(ds.n_items, seed=0)
    learner = Euclidean(ds.n_features)
    full = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500)
    everything = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500, max_queries=len(test))
    assert everything == full  # asking for all of them is the full evaluation
    part = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500, max_queries=300)
    # An estimate of the same quantities: close, not equal.
    assert abs(part.error - full.error) < 0.03
    assert abs(part.recall_at[1] - full.recall_at[1]) < 0.03


def test_euclidean_digits_figures() -> None:
    ds = load_digits()
    dev, test = split_dev_test(ds.n_items, seed=0)
    report = evaluate(Euclidean(ds.n_features), ds.X, ds.y, dev, test, n_pairs=1000)
    assert report.error == 13 / 898  # measured, and the CLI's end-to-end test agrees
    assert 0.5 < report.auc < 1.0
    assert np.all(np.diff([report.recall_at[k] for k in (1, 2, 4, 8)]) >= 0)
