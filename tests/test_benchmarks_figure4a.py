"""benchmarks/figure4a.py: the paper's way of getting N < 10,000 constraints (a uniform subsample
of the 10,000-constraint stream, footnote 7) and what the figure's rows are."""

from __future__ import annotations

import numpy as np

from benchmarks.figure4a import figure_stem, subsample, subsample_file
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.stream_file import ConstraintStream


def test_subsample_keeps_stream_order_and_pair_labels():
    full = build_stream("digits", 400, seed=3, kind="pair")
    part = subsample(full, 50, seed=3)
    positions = [
        int(np.flatnonzero((full.constraints == c).all(axis=1))[0]) for c in part.constraints
    ]
    assert len(part) == 50 and positions == sorted(positions)  # a subset, in stream order
    np.testing.assert_array_equal(part.similar, full.similar[positions])
    np.testing.assert_array_equal(part.dev_idx, full.dev_idx)  # same split: same test set
    assert part.meta["subsample_of"] == 400 and "n_seeds" not in part.meta


def test_subsample_is_seeded_and_differs_across_sizes_and_seeds():
    full = build_stream("digits", 400, seed=0)
    again = subsample(full, 100, seed=0).constraints
    np.testing.assert_array_equal(subsample(full, 100, seed=0).constraints, again)
    assert not np.array_equal(subsample(full, 100, seed=1).constraints, again)
    assert not np.array_equal(subsample(full, 101, seed=0).constraints[:100], again)


def test_subsample_file_is_written_once_and_reads_back(tmp_path):
    path = subsample_file("digits", "triplet", 30, 200, 0, tmp_path)
    assert path.name == "digits-triplet-n30-of200-seed0.npz"
    written = path.stat().st_mtime_ns
    assert subsample_file("digits", "triplet", 30, 200, 0, tmp_path).stat().st_mtime_ns == written
    loaded = ConstraintStream.load(path)
    expected = subsample(build_stream("digits", 200, seed=0), 30, seed=0)
    np.testing.assert_array_equal(loaded.constraints, expected.constraints)


def test_figure_file_names():
    assert figure_stem("fashion-mnist", "subsample") == "figure4a"
    assert figure_stem("fashion-mnist", "fresh") == "figure4a-fresh"
    assert figure_stem("digits", "subsample") == "figure4a-digits"
