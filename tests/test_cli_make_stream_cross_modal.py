"""``oahu make-stream --cross-modal``: the file it writes is the stream the API builds, and the
options that make no sense for a cross-modal stream are refused before anything is written."""

from __future__ import annotations

import numpy as np
import pytest
from test_streams_cross_modal import assert_same

from oahu.cli.main import main
from oahu.streams import packaged_datasets as packaged
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.cross_modal import load_cross_modal_stream
from oahu.streams.cross_modal_protocol import build_cross_modal_stream
from oahu.streams.stream_file import load_stream
from oahu.streams.views import load_paired, load_views


def _mfeat_or_skip() -> None:
    if not packaged.is_cached("mfeat"):
        pytest.skip(
            f"mfeat is not in the data cache ({packaged.cache_dir()}): run "
            "`oahu datasets fetch mfeat` (./scripts/bootstrap.sh does)"
        )


@pytest.fixture
def paired(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "pairs.npz"
    np.savez(path, XA=rng.random((30, 4)), XB=rng.random((30, 6)), y=np.arange(30) % 3,
             names=np.array(["drug", "protein"]))  # fmt: skip
    return path


@pytest.mark.parametrize("suffix", ["npz", "jsonl"])
def test_writes_the_mfeat_stream_the_api_builds(tmp_path, capsys, suffix):
    _mfeat_or_skip()
    out = tmp_path / f"s.{suffix}"
    args = ["make-stream", "--cross-modal", "--dataset", "mfeat", "--views", "zer,kar",
            "--constraints", "300", "--seed", "4", "--pair-share", "0.25", "--within-share",
            "0.1", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    assert capsys.readouterr().out == (
        "wrote 300 cross-modal constraints (75 pairs, 225 triplets; 270 across the views, 30 "
        "within one) over 2000 mfeat objects in views zer (47 features) and kar (64) (1000 "
        f"development, 1000 test) to {out}\n"
    )
    expected = build_cross_modal_stream(load_views("mfeat", ("zer", "kar")), 300, 4, 0.25, 0.1)
    assert_same(expected, load_cross_modal_stream(out))


def test_the_defaults_are_the_datasets_views_half_pairs_all_across(tmp_path, capsys):
    _mfeat_or_skip()
    out = tmp_path / "s.npz"
    assert main(["make-stream", "--cross-modal", "--dataset", "mfeat", "--out", str(out)]) == 0
    s = load_cross_modal_stream(out)
    assert s.modalities == ("pix", "fou") and len(s) == 10_000
    assert (s.meta["n_pairs"], s.meta["n_within"], s.meta["seed"]) == (5_000, 0, 0)


def test_a_paired_file_is_read_with_its_view_names(tmp_path, capsys, paired):
    out = tmp_path / "s.npz"
    args = ["make-stream", "--cross-modal", "--dataset", str(paired), "--constraints", "40",
            "--seed", "2", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    assert "over 30 pairs objects in views drug (4 features) and protein (6)" in (
        capsys.readouterr().out
    )
    assert_same(build_cross_modal_stream(load_paired(paired), 40, 2), load_cross_modal_stream(out))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--kind", "pair"],
            "--kind: not with --cross-modal (a cross-modal stream mixes pairs "
            "and triplets; --pair-share sets the mix), got pair",
        ),
        (["--kind", "quadruplet", "--hierarchy", "parity"], "--kind: not with --cross-modal"),
        (["--hierarchy", "parity"], "--hierarchy: not with --cross-modal"),
        (
            ["--drift", "abrupt", "--drift-at", "5"],
            "--drift: not with --cross-modal (cross-modal streams do not drift), got abrupt",
        ),
        (["--drift-at", "5"], "--drift-at: not with --cross-modal"),
        (["--drift-width", "5"], "--drift-width: not with --cross-modal"),
        (["--grouping", "shape"], "--grouping: not with --cross-modal"),
        (
            ["--noise", "0.1"],
            "--noise: not with --cross-modal (cross-modal streams carry no label noise), got 0.1",
        ),
        (["--noise-model", "uniform"], "--noise-model: not with --cross-modal"),
        (
            ["--protocol", "random"],
            "--protocol: not with --cross-modal (every cross-modal "
            "constraint is drawn, there is no closure), got random",
        ),
        (["--split", "classes"], "--split classes: not with --cross-modal"),
        (["--label-column", "y"], "--label-column: not with --cross-modal"),
        (["--views", "drug,protein"], "--views: not with a paired file"),
        (["--pair-share", "1.5"], "--pair-share: must be a number in [0, 1], got 1.5"),
        (["--within-share", "-0.5"], "--within-share: must be a number in [0, 1], got -0.5"),
    ],
)
def test_refuses_options_that_make_no_sense_with_cross_modal(tmp_path, capsys, paired, extra,
                                                             message):  # fmt: skip
    out = tmp_path / "s.npz"
    args = ["make-stream", "--cross-modal", "--dataset", str(paired), *extra, "--out", str(out)]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("dataset", "extra", "message"),
    [
        ("digits", [], "dataset: 'digits' has no two views; choose one of mfeat, fashion-mnist"),
        (
            "mfeat",
            ["--views", "pix"],
            "--views: expected two view names separated by a comma (A,B), got 'pix'",
        ),
        (
            "mfeat",
            ["--views", "pix,pixels"],
            "views: mfeat has no view 'pixels'; choose from fou, fac, kar, pix, zer, mor",
        ),
        ("mfeat", ["--views", "pix,pix"], "views: the two views must differ, got 'pix' twice"),
    ],
)
def test_refuses_datasets_and_views_it_does_not_have(tmp_path, capsys, dataset, extra, message):
    out = tmp_path / "s.npz"
    args = ["make-stream", "--cross-modal", "--dataset", dataset, *extra, "--out", str(out)]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "extra", [["--views", "pix,fou"], ["--pair-share", "0.3"], ["--within-share", "0.2"]]
)
def test_cross_modal_options_without_cross_modal_are_refused(tmp_path, capsys, extra):
    out = tmp_path / "s.npz"
    assert main(["make-stream", "--dataset", "digits", *extra, "--out", str(out)]) == 2
    assert f"{extra[0]}: only with --cross-modal, got {extra[1]}" in capsys.readouterr().err
    assert not out.exists()


def test_the_single_modality_command_is_unchanged(tmp_path, capsys):
    out = tmp_path / "s.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "60", "--seed", "1",
            "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    assert capsys.readouterr().out == (
        f"wrote 60 triplet constraints over 1797 digits items (899 development, 898 test) to "
        f"{out}\n"
    )
    s, expected = load_stream(out), build_stream("digits", 60, 1)
    assert s.kind == "triplet" and s.meta == expected.meta
    np.testing.assert_array_equal(s.constraints, expected.constraints)


def test_help_explains_the_protocol_and_lists_the_views(capsys):
    with pytest.raises(SystemExit):
        main(["make-stream", "--help"])
    out = capsys.readouterr().out
    assert "cross-modal streams (--cross-modal; the CSLP protocol, streams/FORMAT.md):" in out
    assert "mfeat          fou, fac, kar, pix, zer, mor (default: pix,fou)" in out
    assert "fashion-mnist  pixels, hog (default: pixels,hog)" in out
    assert "PATH.npz       your own paired data: arrays XA, XB (rows aligned objects), y" in out
