"""The gallery indexes: the matrix-product index finds exactly what faiss's flat index finds, the
IVF index approximates it, and make_index builds each by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oahu.inference import GalleryIndex, classify, make_index
from oahu.inference.flat import FlatIndex
from oahu.inference.ivf import IVFIndex
from oahu.inference.matmul import QUERY_BLOCK, MatmulIndex
from oahu.inference.shortlist import smallest_k


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("n_queries", [1, 2, 3, 4, 7, 64, QUERY_BLOCK + 5])  # each product path
def test_same_neighbours_and_distances_as_the_flat_index(metric: str, n_queries: int):
    rng = np.random.default_rng(n_queries)
    gallery = rng.normal(size=(3, 12_000, 16)).astype(np.float32)  # 24 blocks for k = 10
    queries = rng.normal(size=(3, n_queries, 16)).astype(np.float32)
    d_flat, p_flat = FlatIndex(gallery, metric=metric).search(queries, k=10)
    d_fast, p_fast = MatmulIndex(gallery, metric=metric).search(queries, k=10)
    # The same dissimilarity at every rank; positions differ only where two gallery items are
    # as near as float rounding (2 of 30,870 with 1,029 queries)
    np.testing.assert_allclose(d_fast, d_flat, rtol=1e-4, atol=1e-4)
    assert (p_fast != p_flat).mean() < 1e-3
    if n_queries < 100:
        np.testing.assert_array_equal(p_fast, p_flat)


@pytest.mark.parametrize("k", [1, 5, 40])
def test_blocked_smallest_k_equals_a_full_sort(k: int):
    values = torch.from_numpy(np.random.default_rng(k).normal(size=(9, 64 * 32)))
    values[0, 100:105] = torch.arange(-15.0, -10.0)  # a row's smallest crowded into one block
    found, columns = smallest_k(values, k, block=32)
    expected = torch.sort(values, dim=1)
    assert torch.equal(found, expected.values[:, :k])
    assert torch.equal(columns, expected.indices[:, :k])


def test_small_galleries_pad_and_classification_agrees():
    rng = np.random.default_rng(0)
    gallery = rng.normal(size=(2, 3, 4)).astype(np.float32)
    labels = np.array([5, 7, 5])
    fast = MatmulIndex(gallery, labels=labels)
    dissim, pos = fast.search(gallery[:, :2], k=5)
    assert pos[:, :, 3:].tolist() == [[[-1, -1]] * 2] * 2  # k > n_items: -1 pads
    assert np.isinf(dissim[:, :, 3:]).all()
    assert pos[:, :, 0].tolist() == [[0, 1], [0, 1]]  # each item is its own nearest
    alpha = np.array([0.3, 0.7])
    expected = classify(FlatIndex(gallery, labels=labels), gallery[:, :2], alpha, k=5)
    got = classify(fast, gallery[:, :2], alpha, k=5)
    assert got.labels.tolist() == expected.labels.tolist()
    # Eq. 24 divides by d_max − d_min of three items: float rounding of the distances (1e-7
    # relative) grows to ~2e-5 in a score here
    np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-4)


def test_ivf_finds_most_true_neighbours_and_small_galleries_stay_exact():
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(40, 8)) * 4.0
    gallery = (centres[rng.integers(0, 40, 6000)] + rng.normal(size=(6000, 8)))[None]
    queries = gallery[:, :200].astype(np.float32)
    _, exact = FlatIndex(gallery.astype(np.float32)).search(queries, k=5)
    ivf = IVFIndex(gallery.astype(np.float32), nprobe=8)
    _, approx = ivf.search(queries, k=5)
    assert ivf.nlist == 77
    recall = np.mean([len(set(a) & set(e)) / 5 for a, e in zip(approx[0], exact[0], strict=True)])
    assert recall > 0.9
    small = IVFIndex(gallery[:, :60].astype(np.float32))  # 60 // 39 = 1 cluster: exact
    assert small.nlist == 0
    _, flat_small = FlatIndex(gallery[:, :60].astype(np.float32)).search(queries[:, :5], k=3)
    np.testing.assert_array_equal(small.search(queries[:, :5], k=3)[1], flat_small)


@pytest.mark.parametrize(
    ("kind", "cls"), [("exact", MatmulIndex), ("flat", FlatIndex), ("ivf", IVFIndex)]
)
def test_make_index_builds_each_kind(kind: str, cls: type[GalleryIndex]):
    gallery = np.random.default_rng(2).normal(size=(2, 50, 3)).astype(np.float32)
    index = make_index(kind, gallery, labels=np.arange(50) % 4, ids=np.arange(50).astype(str))
    assert type(index) is cls and index.n_items == 50 and index.classes.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="index: must be one of exact, flat, ivf, got 'hnsw'"):
        make_index("hnsw", gallery)


def test_bad_shapes_are_refused_naming_the_argument():
    gallery = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="labels: expected 3 entries"):
        MatmulIndex(gallery, labels=np.zeros(2))
    with pytest.raises(ValueError, match="queries: expected"):
        MatmulIndex(gallery).search(np.zeros((1, 1, 4), np.float32), k=1)
    with pytest.raises(ValueError, match="embeddings: expected"):
        FlatIndex(np.zeros((3, 4), np.float32))
