"""The serving default index finds exactly what faiss's flat index finds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oahu.inference import GalleryIndex, classify
from oahu.service.matmul_index import MatmulGalleryIndex, smallest_k


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("n_queries", [1, 7, 64])
def test_same_neighbours_and_distances_as_the_flat_index(metric: str, n_queries: int):
    rng = np.random.default_rng(n_queries)
    gallery = rng.normal(size=(3, 12_000, 16)).astype(np.float32)  # 24 blocks for k = 10
    queries = rng.normal(size=(3, n_queries, 16)).astype(np.float32)
    flat = GalleryIndex(gallery, metric=metric)
    fast = MatmulGalleryIndex(gallery, metric=metric)
    d_flat, p_flat = flat.search(queries, k=10)
    d_fast, p_fast = fast.search(queries, k=10)
    np.testing.assert_array_equal(p_fast, p_flat)  # random data: no exact ties
    np.testing.assert_allclose(d_fast, d_flat, rtol=1e-4, atol=1e-4)


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
    fast = MatmulGalleryIndex(gallery, labels=labels)
    dissim, pos = fast.search(gallery[:, :2], k=5)
    assert pos[:, :, 3:].tolist() == [[[-1, -1]] * 2] * 2  # k > n_items: -1 pads
    assert np.isinf(dissim[:, :, 3:]).all()
    assert pos[:, :, 0].tolist() == [[0, 1], [0, 1]]  # each item is its own nearest
    alpha = np.array([0.3, 0.7])
    expected = classify(GalleryIndex(gallery, labels=labels), gallery[:, :2], alpha, k=5)
    got = classify(fast, gallery[:, :2], alpha, k=5)
    assert got.labels.tolist() == expected.labels.tolist()
    np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-5)


def test_bad_shapes_are_refused_naming_the_argument():
    gallery = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="labels: expected 3 entries"):
        MatmulGalleryIndex(gallery, labels=np.zeros(2))
    with pytest.raises(ValueError, match="queries: expected"):
        MatmulGalleryIndex(gallery).search(np.zeros((1, 1, 4), np.float32), k=1)
