"""Cross-modal streams: the two-view datasets (streams/views.py), the CSLP protocol that draws
pairs and triplets across the views, the stream's validation, and both file formats, each
refusing the other family's files by name."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_support import save_npz

from oahu.streams import packaged_datasets as packaged
from oahu.streams import views as views_module
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.cross_modal import (
    PAIR,
    TRIPLET,
    CrossModalStream,
    load_cross_modal_stream,
    read_cross_modal_jsonl,
    write_cross_modal_jsonl,
)
from oahu.streams.cross_modal_protocol import build_cross_modal_stream
from oahu.streams.dataset import Dataset
from oahu.streams.datasets import FASHION_MNIST_ROOT, load_dataset
from oahu.streams.stream_file import ConstraintStream, load_stream, write_jsonl
from oahu.streams.views import (
    DEFAULT_VIEWS,
    HOG_CACHE_NAME,
    VIEWS,
    TwoViews,
    cache_fashion_mnist_hog,
    hog_features,
    load_paired,
    load_views,
)

# Where each mfeat view starts among the joined matrix's 649 columns: the running sums of the
# widths fou 76, fac 216, kar 64, pix 240, zer 47, mor 6.
MFEAT_COLUMNS = {
    "fou": (0, 76),
    "fac": (76, 292),
    "kar": (292, 356),
    "pix": (356, 596),
    "zer": (596, 643),
    "mor": (643, 649),
}
ARRAYS = ("y", "dev_idx", "test_idx", "constraints", "modality", "kinds", "similar")


def _mfeat_or_skip() -> None:
    if not packaged.is_cached("mfeat"):
        pytest.skip(
            f"mfeat is not in the data cache ({packaged.cache_dir()}): run "
            "`oahu datasets fetch mfeat` (./scripts/bootstrap.sh does)"
        )


def _fashion_or_skip() -> None:
    if not Path(FASHION_MNIST_ROOT).is_dir():
        pytest.skip(
            f"Fashion-MNIST is not installed ({FASHION_MNIST_ROOT}): run ./scripts/bootstrap.sh"
        )


def _toy_views(n: int = 40, classes: int = 4, seed: int = 0) -> TwoViews:
    rng = np.random.default_rng(seed)
    X = (rng.random((n, 3)).astype(np.float32), rng.random((n, 5)).astype(np.float32))
    return TwoViews(("img", "txt"), X, np.arange(n) % classes, dataset="toy")


def assert_same(a: CrossModalStream, b: CrossModalStream, arrays: tuple[str, ...] = ARRAYS) -> None:
    """``a`` and ``b`` hold the same modalities, meta, objects and ``arrays``."""
    assert a.modalities == b.modalities and a.meta == b.meta
    for left, right in zip(a.X, b.X, strict=True):
        assert left.dtype == right.dtype == np.float32
        np.testing.assert_array_equal(left, right)
    for name in arrays:
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype and left.shape == right.shape, name
        np.testing.assert_array_equal(left, right, err_msg=name)


# ---------------------------------------------------------------------- views
def test_mfeat_views_are_the_documented_slices_of_the_joined_matrix():
    _mfeat_or_skip()
    assert [(name, v.width) for name, v in VIEWS["mfeat"].items()] == [
        (name, hi - lo) for name, (lo, hi) in MFEAT_COLUMNS.items()
    ]
    joined = load_dataset("mfeat")
    names = list(MFEAT_COLUMNS)
    for a, b in zip(names, names[1:] + names[:1], strict=True):
        views = load_views("mfeat", (a, b))
        assert views.names == (a, b) and views.dataset == "mfeat" and not views.derived
        for name, X in zip((a, b), views.X, strict=True):
            lo, hi = MFEAT_COLUMNS[name]
            assert X.dtype == np.float32 and X.shape == (2000, hi - lo)
            np.testing.assert_array_equal(X, joined.X[:, lo:hi])
        np.testing.assert_array_equal(views.y, joined.y)
        assert views.y.dtype == np.int64


def test_mfeat_default_views_are_pixels_and_fourier():
    _mfeat_or_skip()
    views = load_views("mfeat")
    assert views.names == DEFAULT_VIEWS["mfeat"] == ("pix", "fou")
    assert views.dims == (240, 76) and views.n_objects == 2000
    assert np.bincount(views.y).tolist() == [200] * 10


@pytest.mark.parametrize(
    ("dataset", "views", "message"),
    [
        ("digits", None, "dataset: 'digits' has no two views; choose one of mfeat, fashion-mnist"),
        (
            "mfeat",
            ("pix", "pixels"),
            "views: mfeat has no view 'pixels'; choose from fou, fac, kar, pix, zer, mor",
        ),
        (
            "fashion-mnist",
            ("pixels", "fou"),
            "views: fashion-mnist has no view 'fou'; choose from pixels, hog",
        ),
        ("mfeat", ("fou", "fou"), "views: the two views must differ, got 'fou' twice"),
        ("mfeat", ("fou",), "views: expected two view names, got ('fou',)"),
    ],
)
def test_load_views_refuses_what_it_does_not_have(dataset, views, message):
    with pytest.raises(ValueError) as e:
        load_views(dataset, views)
    assert message in str(e.value)


def test_hog_features_are_scikit_images_for_real_fashion_images():
    _fashion_or_skip()
    from skimage.feature import hog

    images = load_dataset("fashion-mnist").X[[0, 1, 69_999]]
    features = hog_features(images)
    assert features.shape == (3, 324) and features.dtype == np.float32
    for image, row in zip(images, features, strict=True):
        expected = hog(
            image.reshape(28, 28), orientations=9, pixels_per_cell=(7, 7), cells_per_block=(2, 2)
        )
        np.testing.assert_array_equal(row, expected)
    # L2-Hys block normalisation: every block of 36 is a unit vector (up to its clipping at
    # 0.2 and renormalising), so the values lie in [0, 1].
    assert 0.0 <= features.min() and features.max() <= 1.0


def test_hog_features_refuse_other_image_shapes():
    with pytest.raises(ValueError, match=r"images: expected shape \(n, 784\) or \(n, 28, 28\)"):
        hog_features(np.zeros((2, 64)))


@pytest.fixture
def tiny_fashion(monkeypatch, tmp_path):
    """Fashion-MNIST replaced by its first 5 images (their labels 0..4), the cache by tmp_path."""
    rng = np.random.default_rng(3)
    X = rng.random((5, 784)).astype(np.float32)
    tiny = Dataset("fashion-mnist", X, np.arange(5, dtype=np.int64), image_shape=(28, 28))
    monkeypatch.setattr(views_module, "load_fashion_mnist", lambda: tiny)
    monkeypatch.setenv("OAHU_CACHE", str(tmp_path))
    views_module._cached_hog.cache_clear()
    yield tiny
    views_module._cached_hog.cache_clear()


def test_fashion_views_compute_hog_once_into_the_cache(tiny_fashion, tmp_path):
    logged: list[str] = []
    path = cache_fashion_mnist_hog(log=logged.append)
    assert path == tmp_path / "datasets" / HOG_CACHE_NAME and path.is_file()
    assert logged[0].startswith("computing HOG descriptors of 5 Fashion-MNIST images once")
    logged.clear()
    assert cache_fashion_mnist_hog(log=logged.append) == path and logged == []  # cached
    views = load_views("fashion-mnist")
    assert views.names == ("pixels", "hog") and views.derived and views.dims == (784, 324)
    np.testing.assert_array_equal(views.X[0], tiny_fashion.X)
    np.testing.assert_array_equal(views.X[1], hog_features(tiny_fashion.X))
    assert views.y.tolist() == [0, 1, 2, 3, 4]


def test_a_hog_cache_of_other_settings_is_computed_again(tiny_fashion, tmp_path):
    path = tmp_path / "datasets" / HOG_CACHE_NAME
    path.parent.mkdir(parents=True)
    np.savez(path, X=np.zeros((5, 324), np.float32), parameters=np.array('{"orientations": 8}'))
    logged: list[str] = []
    cache_fashion_mnist_hog(log=logged.append)
    assert logged and logged[0].startswith("computing HOG")
    with np.load(path) as z:
        np.testing.assert_array_equal(z["X"], hog_features(tiny_fashion.X))


def test_the_cached_fashion_hog_view_is_scikit_images():
    _fashion_or_skip()
    path = packaged.cache_dir() / HOG_CACHE_NAME
    if not path.is_file():
        pytest.skip(
            f"{path} is absent: compute it once with ./scripts/bootstrap.sh (python -c 'from "
            "oahu.streams.views import cache_fashion_mnist_hog; cache_fashion_mnist_hog()')"
        )
    views = load_views("fashion-mnist", ("hog", "pixels"))
    assert views.names == ("hog", "pixels") and views.dims == (324, 784)
    assert views.X[0].shape == (70_000, 324) and not views.X[0].flags.writeable
    rows = [0, 12_345, 69_999]
    np.testing.assert_array_equal(views.X[0][rows], hog_features(views.X[1][rows]))


# ---------------------------------------------------------------------- the user's paired data
def test_load_paired_reads_aligned_views_and_codes_labels(tmp_path):
    XA, XB = np.arange(12.0).reshape(4, 3), np.arange(8.0).reshape(4, 2)
    path = save_npz(tmp_path / "drugs.npz", XA=XA, XB=XB, y=["b", "a", "b", "c"])
    views = load_paired(path)
    assert views.names == ("a", "b") and views.dataset == "drugs" and not views.derived
    assert views.y.tolist() == [1, 0, 1, 2] and views.class_names == ("a", "b", "c")
    np.testing.assert_array_equal(views.X[0], XA.astype(np.float32))
    np.testing.assert_array_equal(views.X[1], XB.astype(np.float32))
    named = load_paired(save_npz(tmp_path / "n.npz", XA=XA, XB=XB, y=[0, 1, 0, 1],
                                names=np.array(["drug", "protein"])))  # fmt: skip
    assert named.names == ("drug", "protein") and named.class_names == ()


_GOOD = {"XA": np.zeros((3, 2)), "XB": np.ones((3, 4)), "y": np.array([0, 1, 1])}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"XB": None}, "missing array 'XB'; paired data needs XA, XB"),
        ({"y": None, "XA": None}, "missing array 'XA' and 'y'"),
        (
            {"XB": np.ones((4, 4))},
            "arrays 'XA' and 'XB' must have one row per object, the same number; they have 3 and 4",
        ),
        (
            {"XA": np.zeros(3)},
            "array 'XA': expected a 2-d array (n_objects, n_features), got shape (3,)",
        ),
        (
            {"XB": np.array([[1.0, 2, 3, 4], [1, 2, 3, 4], [1, 2, np.inf, 4]])},
            "array 'XB': non-finite value inf at row 2, column 2",
        ),
        (
            {"XA": np.array([[0.0, 0], [np.nan, 0], [0, 0]])},
            "array 'XA': non-finite value nan at row 1, column 0",
        ),
        ({"y": np.array([5, 5, 5])}, "array 'y': a single class (5); metric learning needs"),
        (
            {"y": np.array([0, 1])},
            "array 'y': expected one label per object, shape (3,) as the "
            "rows of XA and XB, got shape (2,)",
        ),
        (
            {"names": np.array(["a", "a"])},
            "array 'names': expected the two views' names, two "
            "distinct non-empty strings, got ['a', 'a']",
        ),
        ({"names": np.array(["a", "b", "c"])}, "array 'names': expected the two views' names"),
        ({"XA": np.array([["x", "y"]] * 3)}, "array 'XA': non-numeric value 'x' at row 0"),
    ],
)
def test_load_paired_errors_name_the_file_and_the_array(tmp_path, change, message):
    arrays = {k: v for k, v in {**_GOOD, **change}.items() if v is not None}
    path = save_npz(tmp_path / "p.npz", **arrays)
    with pytest.raises(ValueError) as e:
        load_paired(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_load_paired_refuses_missing_files_and_other_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no\.npz: no such file"):
        load_paired(tmp_path / "no.npz")
    with pytest.raises(ValueError, match=r"p.csv: expected a .npz archive of arrays XA, XB"):
        load_paired(tmp_path / "p.csv")
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ValueError, match=r"bad.npz: not a readable .npz archive"):
        load_paired(tmp_path / "bad.npz")
    objects = np.array([{"a": 1}] * 3, dtype=object)
    np.savez(tmp_path / "o.npz", XA=np.zeros((3, 1)), XB=np.zeros((3, 1)), y=objects)
    with pytest.raises(ValueError, match=r"o.npz: array 'y' holds Python objects"):
        load_paired(tmp_path / "o.npz")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(2, 6),
    widths=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    bad=st.sampled_from([np.nan, np.inf, -np.inf, 1e300]),
    where=st.tuples(st.sampled_from(["XA", "XB"]), st.integers(0, 5), st.integers(0, 3)),
    rows_b=st.integers(1, 7),
)
def test_load_paired_names_the_array_and_cell_of_any_bad_value(n, widths, bad, where, rows_b):
    rng = np.random.default_rng(0)
    arrays = {"XA": rng.random((n, widths[0])), "XB": rng.random((n, widths[1]))}
    arrays["y"] = np.arange(n) % 2
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.npz"
        np.savez(path, **arrays)
        views = load_paired(path)  # the clean arrays load, as given
        np.testing.assert_array_equal(views.X[1], arrays["XB"].astype(np.float32))
        key, row, col = where
        row, col = row % n, col % arrays[key].shape[1]
        arrays[key][row, col] = bad
        np.savez(path, **arrays)
        with pytest.raises(ValueError) as e:
            load_paired(path)
        kind = "is outside the float32 range" if bad == 1e300 else "non-finite value"
        assert str(e.value).startswith(f"{path}: array {key!r}: ")
        assert kind in str(e.value) and f"at row {row}, column {col}" in str(e.value)
        if rows_b != n:
            arrays["XB"] = rng.random((rows_b, widths[1]))
            np.savez(path, **arrays)
            with pytest.raises(ValueError, match=f"they have {n} and {rows_b}"):
                load_paired(path)


# ---------------------------------------------------------------------- the protocol
def test_the_split_is_build_streams_for_the_same_seed():
    _mfeat_or_skip()
    views = load_views("mfeat")
    for seed in (0, 7):
        s = build_cross_modal_stream(views, 50, seed)
        single = build_stream("mfeat", 10, seed)
        np.testing.assert_array_equal(s.dev_idx, np.sort(single.dev_idx))
        np.testing.assert_array_equal(s.test_idx, np.sort(single.test_idx))
        assert len(s.dev_idx) == len(s.test_idx) == 1000


def _check_protocol(s: CrossModalStream) -> None:
    """Label consistency and the modality rules, for every constraint of ``s``."""
    y, c, m = s.y, s.constraints, s.modality
    pair, triplet = s.kinds == PAIR, s.kinds == TRIPLET
    assert np.all(pair | triplet)
    np.testing.assert_array_equal(s.similar[pair], y[c[pair, 0]] == y[c[pair, 1]])
    assert not s.similar[triplet].any()
    assert np.all(y[c[triplet, 0]] == y[c[triplet, 1]])
    assert np.all(y[c[triplet, 0]] != y[c[triplet, 2]])
    assert np.all(c[pair, 2] == -1) and np.all(m[pair, 2] == -1)
    assert np.all(m[triplet, 1] == m[triplet, 2])  # positive and negative in one modality
    assert np.isin(c[c >= 0], s.dev_idx).all()
    within = m[:, 0] == m[:, 1]
    # The same object in the same modality says nothing: never within one modality.
    assert np.all(c[within, 0] != c[within, 1])
    assert np.all(c[pair & ~s.similar, 0] != c[pair & ~s.similar, 1])


@pytest.mark.parametrize(
    ("n", "pair_share", "within_share", "pairs", "within"),
    [
        (1000, 0.5, 0.0, 500, 0),
        (5, 0.5, 0.0, 2, 0),  # round(2.5) == 2: Python rounds half to even
        (7, 0.5, 0.0, 4, 0),  # round(3.5) == 4
        (1000, 0.2, 0.3, 200, 300),
        (400, 1.0, 1.0, 400, 400),
        (400, 0.0, 0.0, 0, 0),
        (0, 0.5, 0.5, 0, 0),
    ],
)
def test_counts_of_pairs_triplets_cross_and_within(n, pair_share, within_share, pairs, within):
    s = build_cross_modal_stream(_toy_views(), n, 3, pair_share, within_share)
    assert len(s) == n
    assert int((s.kinds == PAIR).sum()) == s.meta["n_pairs"] == pairs
    assert int((s.kinds == TRIPLET).sum()) == s.meta["n_triplets"] == n - pairs
    is_within = s.modality[:, 0] == s.modality[:, 1]
    assert int(is_within.sum()) == s.meta["n_within"] == within
    assert s.meta["n_cross"] == n - within and s.meta["n_linked"] == int(s.similar.sum())
    assert s.meta["protocol"] == "cslp" and s.meta["views"] == ["img", "txt"]
    assert (s.meta["pair_share"], s.meta["within_share"]) == (pair_share, within_share)
    _check_protocol(s)


def test_the_draws_have_the_documented_rates():
    s = build_cross_modal_stream(_toy_views(n=400, classes=10), 20_000, 1, within_share=0.25)
    _check_protocol(s)
    pair = s.kinds == PAIR
    # Positions are random, not pairs first: the first 10,000 hold about half of the pairs.
    assert 4_700 < pair[:10_000].sum() < 5_300
    # Linked with probability 1/2: 10,000 pairs, sd 50.
    assert 4_800 < s.similar[pair].sum() < 5_200
    # The first item in A with probability 1/2: 20,000 constraints, sd 71.
    assert 9_700 < (s.modality[:, 0] == 0).sum() < 10_300
    within = s.modality[:, 0] == s.modality[:, 1]
    assert 2_300 < (within & (s.modality[:, 0] == 1)).sum() < 2_700  # half of 5,000 in B
    # A linked cross pair may be one object seen in both modalities: with 20 development
    # objects per class, about 1 in 20 of the 3,750 such pairs.
    cross_linked = pair & s.similar & ~within
    same_object = (s.constraints[:, 0] == s.constraints[:, 1]) & cross_linked
    assert 100 < same_object.sum() < 300


def test_the_stream_is_deterministic_per_seed():
    views = _toy_views()
    a, b = (build_cross_modal_stream(views, 300, 5, 0.4, 0.1) for _ in range(2))
    assert_same(a, b)
    c = build_cross_modal_stream(views, 300, 6, 0.4, 0.1)
    assert not np.array_equal(a.constraints, c.constraints)
    assert not np.array_equal(a.dev_idx, c.dev_idx)


def test_within_one_modality_needs_a_class_with_two_development_objects():
    views = TwoViews(("a", "b"), (np.eye(4), np.eye(4)), np.array([0, 1, 2, 3]))
    s = build_cross_modal_stream(views, 20, 0)  # cross-modal: an object links to itself
    assert s.similar.any()
    assert np.all(s.constraints[s.similar, 0] == s.constraints[s.similar, 1])
    with pytest.raises(ValueError, match="within_share: a linked pair or a triplet within one"):
        build_cross_modal_stream(views, 20, 0, within_share=0.5)
    one_class = TwoViews(("a", "b"), (np.eye(4), np.eye(4)), np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="y: the development objects are all of one class"):
        build_cross_modal_stream(one_class, 5, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_constraints": -1}, "n_constraints: must be an integer >= 0, got -1"),
        ({"seed": -2}, "seed: must be an integer >= 0, got -2"),
        ({"pair_share": 1.5}, "pair_share: must be a number in [0, 1], got 1.5"),
        ({"within_share": -0.1}, "within_share: must be a number in [0, 1], got -0.1"),
    ],
)
def test_build_refuses_bad_arguments(kwargs, message):
    args = {"n_constraints": 10, "seed": 0, **kwargs}
    with pytest.raises(ValueError) as e:
        build_cross_modal_stream(_toy_views(), **args)
    assert message in str(e.value)


def test_a_large_stream_builds_in_well_under_seconds():
    rng = np.random.default_rng(0)
    views = TwoViews(("a", "b"), (np.zeros((70_000, 2)), np.zeros((70_000, 3))),
                     rng.integers(10, size=70_000))  # fmt: skip
    started = time.perf_counter()
    s = build_cross_modal_stream(views, 100_000, 0, within_share=0.2)
    assert time.perf_counter() - started < 2.0
    assert len(s) == 100_000
    _check_protocol(s)


# ---------------------------------------------------------------------- the stream and files
def _valid() -> dict:
    XA, XB = np.eye(4, dtype=np.float32), np.ones((4, 2), dtype=np.float32)
    return {
        "modalities": ("img", "txt"),
        "X": (XA, XB),
        "y": np.array([0, 0, 1, 1]),
        "dev_idx": np.array([2, 0, 1]),
        "test_idx": np.array([3]),
        "constraints": np.array([[0, 0, -1], [1, 0, 2]]),
        "modality": np.array([[0, 1, -1], [1, 0, 0]]),
        "kinds": np.array([PAIR, TRIPLET]),
        "similar": np.array([True, False]),
        "meta": {"dataset": "toy"},
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"modalities": ("img", "img")},
            "modalities: expected two distinct non-empty names, got ('img', 'img')",
        ),
        (
            {"modalities": ("img",)},
            "modalities: expected two distinct non-empty names, got ('img',)",
        ),
        ({"X": (np.eye(4),)}, "X: expected one array per modality (2), got 1"),
        (
            {"X": (np.eye(4), np.ones((3, 2)))},
            "X: modality 'txt' must have shape (n_objects, d) with the 4 rows of 'img', got (3, 2)",
        ),
        ({"y": np.array([0, 0, 1])}, "y: expected shape (4,), got (3,)"),
        ({"y": np.array([0.0, 0, 1, 1])}, "y: expected integers, got dtype float64"),
        (
            {"dev_idx": np.array([0, 1, 2, 9])},
            "dev_idx: object indices must lie in [0, 4), got [0, 9]",
        ),
        (
            {"dev_idx": np.array([0, 1, 2, 3])},
            "dev_idx/test_idx: must partition range(n_objects), but object 3 is listed 2 times",
        ),
        (
            {"constraints": np.array([[0, 0, 2], [1, 0, 2]])},
            "constraints: a pair holds -1 in column 2, constraint 0 holds 2",
        ),
        (
            {"constraints": np.array([[0, 0, -1], [1, 0, 7]])},
            "constraints: object indices must lie in [0, 4), constraint 1 holds [1, 0, 7]",
        ),
        (
            {"constraints": np.array([[0, 3, -1], [1, 0, 2]])},
            "constraints: object 3 (constraint 0) is not a development object (dev_idx)",
        ),
        (
            {"constraints": np.array([[0, 0], [1, 0]])},
            "constraints: expected shape (N, 3), got (2, 2)",
        ),
        (
            {"modality": np.array([[0, 2, -1], [1, 0, 0]])},
            "modality: expected 0 (img) or 1 (txt) "
            "per item and -1 in a pair's column 2, constraint 0 (pair) holds [0, 2, -1]",
        ),
        (
            {"modality": np.array([[0, 1, 0], [1, 0, 0]])},
            "modality: expected 0 (img) or 1 (txt) "
            "per item and -1 in a pair's column 2, constraint 0 (pair) holds [0, 1, 0]",
        ),
        (
            {"modality": np.array([[0, 1, -1], [1, 0, -1]])},
            "modality: expected 0 (img) or 1 "
            "(txt) per item and -1 in a pair's column 2, constraint 1 (triplet) holds [1, 0, -1]",
        ),
        (
            {"kinds": np.array([0, 2])},
            "kinds: expected 0 (pair) or 1 (triplet), got 2 at constraint 1",
        ),
        ({"kinds": np.array([0])}, "kinds: expected shape (2,), got (1,)"),
        ({"similar": np.array([1, 0])}, "similar: expected a bool array of shape (2,), got int64"),
        (
            {"similar": np.array([True, True])},
            "similar: a triplet's flag is False, constraint 1 holds True",
        ),
        ({"meta": {"x": object()}}, "meta: must be a JSON-serialisable dict"),
    ],
)
def test_validation_names_the_field_and_the_value(change, message):
    with pytest.raises(ValueError) as e:
        CrossModalStream(**{**_valid(), **change})
    assert str(e.value).startswith(message)


def test_a_valid_stream_is_normalised():
    s = CrossModalStream(**_valid())
    assert s.dev_idx.tolist() == [0, 1, 2] and s.dims == (4, 2) and len(s) == 2
    assert s.kinds.dtype == s.modality.dtype == np.int8 and s.constraints.dtype == np.int64


def test_npz_and_jsonl_round_trips_are_exact(tmp_path):
    s = build_cross_modal_stream(_toy_views(), 200, 2, 0.3, 0.2)
    s.save(tmp_path / "s.npz")
    write_cross_modal_jsonl(s, tmp_path / "s.jsonl")
    for name in ("s.npz", "s.jsonl"):
        assert_same(s, load_cross_modal_stream(tmp_path / name))
    assert_same(s, CrossModalStream.load(tmp_path / "s.npz"))
    assert_same(s, read_cross_modal_jsonl(tmp_path / "s.jsonl"))
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    header, item = json.loads(lines[0]), json.loads(lines[1])
    assert header["format"] == "oahu-cross-modal-stream" and header["dims"] == [3, 5]
    assert item["modality"] == "img" and json.loads(lines[2])["modality"] == "txt"
    assert len(lines) == 1 + 2 * 40 + 200
    record = json.loads(lines[-1])
    kind = record["type"]
    roles = ("u", "v") if kind == "pair" else ("anchor", "positive", "negative")
    assert all(record[f"{role}_modality"] in ("img", "txt") for role in roles)


def _cross_modal(path: Path) -> None:
    s = build_cross_modal_stream(_toy_views(), 20, 0)
    s.save(path) if path.suffix == ".npz" else write_cross_modal_jsonl(s, path)


def _single(path: Path) -> None:
    s = ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet", [[0, 1, 2]])
    s.save(path) if path.suffix == ".npz" else write_jsonl(s, path)


@pytest.mark.parametrize("suffix", [".npz", ".jsonl"])
@pytest.mark.parametrize(
    ("write", "read", "refusal"),
    [
        (_cross_modal, load_stream, "a cross-modal stream: read it with oahu.streams."
         "cross_modal.load_cross_modal_stream (or CrossModalStream.load), not load_stream"),
        (_single, load_cross_modal_stream, "a single-modality constraint stream: read it with "
         "oahu.streams.load_stream, not load_cross_modal_stream"),
    ],
)  # fmt: skip
def test_each_family_refuses_the_others_files_by_name(tmp_path, suffix, write, read, refusal):
    path = tmp_path / f"s{suffix}"
    write(path)
    with pytest.raises(ValueError) as e:
        read(path)
    assert str(e.value) == f"{path}: {refusal}"


def test_an_unknown_format_version_is_refused_by_number(tmp_path):
    s = build_cross_modal_stream(_toy_views(), 5, 0)
    s.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = dict(z)
    arrays["meta"] = np.array(json.dumps({**s.meta, "format_version": 3}))
    np.savez(tmp_path / "v3.npz", **arrays)
    with pytest.raises(
        ValueError, match=r"format_version: .*v3.npz has 3, this version reads 1 and 2"
    ):
        CrossModalStream.load(tmp_path / "v3.npz")
    arrays["format"] = np.array("something-else")
    np.savez(tmp_path / "f.npz", **arrays)
    with pytest.raises(ValueError, match=r"format: .*f.npz announces 'something-else'"):
        CrossModalStream.load(tmp_path / "f.npz")
    write_cross_modal_jsonl(s, tmp_path / "s.jsonl")
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace('"version": 1', '"version": 3')
    (tmp_path / "v3.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(
        ValueError, match=r"v3.jsonl:1: field 'version': this reader reads 1 and 2, got 3"
    ):
        read_cross_modal_jsonl(tmp_path / "v3.jsonl")


_STREAM = build_cross_modal_stream(_toy_views(n=6, classes=2), 8, 0, within_share=0.25)


def assert_a_corrupted_line_is_named(stream: CrossModalStream, data: st.DataObject) -> None:
    """Written as JSON Lines, ``stream`` with one line dropped, or one field of a line set to
    a value of another type, is a ValueError naming that line."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.jsonl"
        write_cross_modal_jsonl(stream, path)
        lines = path.read_text().splitlines()
        k = data.draw(st.integers(0, len(lines) - 1), label="line")
        if data.draw(st.booleans(), label="drop the line"):
            del lines[k]
            expected = None  # dropped: what breaks depends on the line
        else:
            record = json.loads(lines[k])
            key = data.draw(st.sampled_from(sorted(record)), label="field")
            record[key] = data.draw(st.sampled_from([None, "garbage"]), label="value")
            lines[k] = json.dumps(record)
            expected = f"{path}:{k + 1}: "
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(ValueError) as e:
            read_cross_modal_jsonl(path)
        if expected is not None and k > 0:  # a broken header may read as another family's
            assert str(e.value).startswith(expected)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_corrupted_jsonl_line_is_a_value_error_naming_it(data):
    assert_a_corrupted_line_is_named(_STREAM, data)
