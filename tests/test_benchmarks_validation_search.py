"""benchmarks/validation_search.py: settings compared on a split of the development items only."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.validation_search import (
    main,
    parse_candidate,
    run_one,
    summarise,
    validation_stream,
)
from oahu.learners.oahu.item_keys import row_keys
from oahu.streams.datasets import load_digits
from oahu.streams.protocol import split_dev_test


def test_the_validation_stream_halves_the_development_split_and_never_holds_a_test_item() -> None:
    ds = load_digits()
    dev, _ = split_dev_test(ds.n_items, seed=100)
    stream = validation_stream("digits", seed=100, n_constraints=200)
    assert len(stream.X) == len(dev) == 899
    assert (len(stream.dev_idx), len(stream.test_idx)) == (449, 450)
    # Its items are the development split's, each once (the digits rows are told apart by key
    # where their pixels differ).
    dev_keys = row_keys(ds.X[dev])
    assert np.isin(row_keys(stream.X), dev_keys).all()
    assert np.array_equal(np.sort(stream.y), np.sort(ds.y[dev]))
    # Constraints mention learning items only: the validation half stays unseen.
    assert np.isin(stream.constraints, stream.dev_idx).all()
    assert len(stream) == 200
    again = validation_stream("digits", seed=100, n_constraints=200)
    assert np.array_equal(again.X, stream.X) and np.array_equal(
        again.constraints, stream.constraints
    )
    other = validation_stream("digits", seed=101, n_constraints=200)
    assert not np.array_equal(other.X, stream.X)


def test_candidates_are_settings_of_the_learner_with_its_own_errors() -> None:
    assert parse_candidate("margin=0.1,replay_memory=10000") == {
        "margin": 0.1,
        "replay_memory": 10000,
    }
    assert parse_candidate("preprocess=none,residual_heads=false") == {
        "preprocess": "none",
        "residual_heads": False,
    }
    with pytest.raises(ValueError, match=r"margin: must be a number >= 0, got -1"):
        parse_candidate("margin=-1")
    with pytest.raises(ValueError, match=r"candidate: expected KEY=VALUE, got 'margin'"):
        parse_candidate("margin")


def test_a_run_scores_the_candidate_at_each_size_and_euclidean_once() -> None:
    spec = {"dataset": "digits", "seed": 100, "sizes": [50, 150]}
    run = run_one({**spec, "candidate": "default"})
    assert list(run["errors"]) == ["0", "50", "150"]
    assert all(0 <= e <= run["n_validation"] == 450 for e in run["errors"].values())
    assert run_one({**spec, "candidate": "default"})["errors"] == run["errors"]  # seeded
    assert run["learner_params"]["seed"] == 100  # what it learned with, for the cache check
    euclidean = run_one({**spec, "candidate": "euclidean"})
    assert list(euclidean["errors"]) == ["0"]


def test_summarise_pairs_each_candidate_with_the_default_and_euclidean_by_seed() -> None:
    runs = [
        {"candidate": "default", "seed": 100, "errors": {"0": 20, "10": 18}},
        {"candidate": "default", "seed": 101, "errors": {"0": 22, "10": 21}},
        {"candidate": "euclidean", "seed": 100, "errors": {"0": 17}},
        {"candidate": "euclidean", "seed": 101, "errors": {"0": 21}},
        {"candidate": "margin=0.1", "seed": 100, "errors": {"0": 20, "10": 15}},
        {"candidate": "margin=0.1", "seed": 101, "errors": {"0": 22, "10": 23}},
    ]
    summary = summarise(runs, sizes=[10])
    assert summary["margin=0.1"]["10"] == {
        "mean_errors": 19.0,
        "vs_default": {"mean_difference": -0.5, "below": 1, "equal": 0, "above": 1},
        "vs_euclidean": {"mean_difference": 0.0, "below": 1, "equal": 0, "above": 1},
    }
    # Euclidean learns nothing: its one figure stands at every size.
    assert summary["default"]["10"]["vs_euclidean"] == {
        "mean_difference": 0.5,
        "below": 0,
        "equal": 1,
        "above": 1,
    }
    assert summary["euclidean"]["10"]["mean_errors"] == 19.0


def test_reporting_seeds_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--seeds", "3", "100"])
    assert "use development seeds (100 and up)" in capsys.readouterr().err
