"""Streams from a user's own data (arrays, CSV files) and the paper's class-disjoint retrieval
protocol, from the split to ``oahu replay``'s report."""

from __future__ import annotations

import json

import numpy as np
import pytest

import oahu
from oahu.cli.main import main
from oahu.experiments.evaluation import evaluate
from oahu.learners.baselines.euclidean import Euclidean
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.dataset_writing import write_dataset_csv
from oahu.streams.datasets import load_digits
from oahu.streams.protocol import split_classes
from tests.stream_support import round_trip_both_formats


def test_class_split_is_disjoint_seeded_and_gives_the_extra_class_to_development():
    labels = np.repeat(np.arange(5), 3)  # 5 classes of 3 items
    dev, test = split_classes(labels, seed=4)
    seen, unseen = set(labels[dev].tolist()), set(labels[test].tolist())
    assert len(seen) == 3 and len(unseen) == 2 and not seen & unseen
    assert sorted(np.concatenate([dev, test]).tolist()) == list(range(15))
    again = split_classes(labels, seed=4)
    assert dev.tolist() == again[0].tolist() and test.tolist() == again[1].tolist()
    other = {frozenset(labels[split_classes(labels, seed=s)[0]].tolist()) for s in range(20)}
    assert len(other) > 1  # the seed chooses the seen classes


def test_class_split_needs_four_classes():
    with pytest.raises(ValueError, match=r"at least 4 classes .* the labels have 3"):
        split_classes(np.array([0, 1, 2, 0]), seed=0)


def test_class_disjoint_stream_learns_only_seen_classes_and_evaluates_the_unseen():
    ds = load_digits()
    stream = build_stream(ds, 500, seed=1, split="classes")
    seen = set(stream.meta["seen_classes"])
    assert len(seen) == 5 and stream.meta["split"] == "classes"
    assert set(stream.y[stream.constraints.ravel()].tolist()) <= seen
    assert not set(stream.y[stream.test_idx].tolist()) & seen
    # The unseen classes' items are both gallery and queries; evaluation leaves each out.
    assert stream.eval_gallery_idx.tolist() == stream.eval_query_idx.tolist()
    for loaded in round_trip_both_formats(stream).values():
        assert loaded.meta["split"] == "classes"
        assert loaded.eval_gallery_idx.tolist() == stream.test_idx.tolist()


def test_leave_one_out_error_is_the_error_of_the_nearest_other_item():
    # Four items on a line: each one's nearest other item belongs to the other class.
    X = np.array([[0.0], [1.0], [10.0], [11.0]], dtype=np.float32)
    y = np.array([0, 1, 0, 1])
    everyone = np.arange(4)
    report = evaluate(Euclidean(1), X, y, everyone, everyone, k=1, n_pairs=8, leave_one_out=True)
    assert report.error == 1.0  # counting itself, each item would be right: error 0
    assert report.recall_at[1] == 0.0


def test_build_stream_from_arrays_matches_the_same_dataset():
    ds = load_digits()
    from_arrays = oahu.build_stream(np.array(ds.X), ds.y, 300, 2)
    from_name = build_stream("digits", 300, 2)
    assert np.array_equal(from_arrays.constraints, from_name.constraints)
    assert from_arrays.meta["dataset"] == "arrays"
    with pytest.raises(TypeError, match="y is missing"):
        oahu.build_stream(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="y: a single class"):
        oahu.build_stream(np.zeros((4, 2)), [3, 3, 3, 3], 2)


def _csv(tmp_path, n=10_000, d=50, seed=0):
    """A generated CSV of n rows x d features: 10 classes, each a Gaussian around its centre."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(10, size=n)
    centres = rng.normal(size=(10, d)) * 2
    X = centres[labels] + rng.normal(size=(n, d))
    names = np.array([f"class-{c}" for c in range(10)])
    path = tmp_path / "user.csv"
    header = ",".join([*(f"x{j}" for j in range(d)), "kind"])
    rows = [",".join([*(f"{v:.5f}" for v in X[i]), names[labels[i]]]) for i in range(n)]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_a_users_csv_replays_end_to_end_with_one_command(tmp_path, capsys):
    path = _csv(tmp_path)
    argv = ["replay", "--dataset", str(path), "--label-column", "kind", "--constraints", "2000"]
    assert main([*argv, "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dataset"] == "user" and report["constraints"] == 2000
    assert report["error"] < 0.05  # well-separated Gaussians: kNN gets them right
    assert report["split"] == "items"


def test_a_real_set_exported_to_csv_replays_like_the_set_itself(tmp_path, capsys):
    path = tmp_path / "digits.csv"
    write_dataset_csv(load_digits(), path)
    common = ["--constraints", "500", "--learner", "euclidean", "--json", "--no-progress"]
    assert main(["replay", "--dataset", str(path), *common]) == 0
    from_csv = json.loads(capsys.readouterr().out)
    assert main(["replay", "--dataset", "digits", *common]) == 0
    builtin = json.loads(capsys.readouterr().out)
    for key in ("error", "macro_f1", "auc", "recall_at"):
        assert from_csv[key] == builtin[key], key


def test_make_stream_with_a_class_split_from_a_csv(tmp_path, capsys):
    path = _csv(tmp_path, n=400, d=5)
    out = tmp_path / "s.npz"
    argv = ["make-stream", "--dataset", str(path), "--label-column", "kind", "--split", "classes"]
    assert main([*argv, "--constraints", "200", "--out", str(out)]) == 0
    assert "class-disjoint" in capsys.readouterr().out
    stream = oahu.load_stream(out)
    assert stream.meta["split"] == "classes" and len(stream) == 200
    assert main(["replay", "--stream", str(out), "--learner", "euclidean", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["split"] == "classes" and 0.0 <= report["recall_at"]["1"] <= 1.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--label-column", "kind"], "label_column: only for a dataset file"),
        (["--split", "classes", "--drift", "abrupt", "--drift-at", "5"], "--split classes: only"),
    ],
)
def test_make_stream_refuses_options_that_cannot_apply(tmp_path, capsys, argv, message):
    out = str(tmp_path / "s.npz")
    base = ["make-stream", "--dataset", "digits", "--constraints", "10", "--out", out]
    assert main([*base, *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["make-stream", "replay"])
@pytest.mark.parametrize("value, shown", [("-3", "-3"), ("ten", "'ten'")])
def test_a_bad_constraint_count_is_named_as_the_option(tmp_path, capsys, command, value, shown):
    # The option the user wrote, not the library's parameter (n_constraints).
    argv = [command, "--dataset", "digits", "--constraints", value, "--out", str(tmp_path / "s")]
    with pytest.raises(SystemExit) as exit_:
        main(argv if command == "make-stream" else argv[:-2])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --constraints: must be an integer >= 0, got {shown}" in err


def test_replay_errors_name_the_file_line_and_column(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("a,b,label\n1,2,x\n3,oops,y\n")
    assert main(["replay", "--dataset", str(path), "--constraints", "10"]) == 2
    err = capsys.readouterr().err
    assert "bad.csv: line 3, column 'b': 'oops' is not a number" in err


@pytest.mark.parametrize(
    "rows, argv, message",
    [
        # Two items: the 1:1 split leaves one to learn from.
        (
            "1,x\n2,y\n",
            [],
            "holds 1 item of 1 class, at most 1 of one class: a constraint needs at least 2",
        ),
        # Four items, two classes: seed 0's split keeps one of each, so no triplet exists.
        (
            "1,x\n2,y\n3,y\n4,x\n",
            ["--seed", "0"],
            "holds 2 items of 2 classes, at most 1 of one class: labels: triplets need a class",
        ),
        # Enough for some triplets, fewer than asked.
        (
            "1,x\n2,y\n3,y\n4,x\n5,x\n6,z\n",
            ["--seed", "1", "--constraints", "5"],
            "holds 3 items of 2 classes, at most 2 of one class: n_constraints: the development "
            "items' labels allow 2 distinct triplets, asked for 5",
        ),
    ],
)
def test_a_dataset_too_small_for_the_protocol_is_refused_with_what_its_split_holds(
    tmp_path, capsys, rows, argv, message
):
    path = tmp_path / "small.csv"
    path.write_text("a,label\n" + rows)
    out = str(tmp_path / "s.npz")
    assert main(["make-stream", "--dataset", str(path), "--out", out, *argv]) == 2
    err = capsys.readouterr().err
    assert f"{path}: the development half (items split, seed " in err and message in err


def test_arrays_too_few_for_the_protocol_are_refused_with_what_their_split_holds():
    split = r"the development half \(items split, seed 4\) holds 1 item of 1 class"
    with pytest.raises(ValueError, match=split):
        build_stream(np.zeros((2, 1)), ["x", "y"], 1, seed=4)
