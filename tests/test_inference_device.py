"""The exact index on a torch device: the same neighbours as a float64 brute-force search on the
CPU (exact ties may swap) whichever library multiplies there, in float32 or bfloat16, blocked to
bounded memory, one query's answer the same whatever is searched beside it, and the same answers
on CUDA as on the CPU where a GPU is present."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oahu.inference import make_index, matmul
from oahu.inference.matmul import MatmulIndex

TOLERANCE = 1e-4


def brute_force(gallery: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """Every gallery item's dissimilarity to every query, (D, Q, N), in float64."""
    g, q = gallery.astype(np.float64), queries.astype(np.float64)
    if metric == "ip":
        return -np.einsum("dqe,dne->dqn", q, g)
    return np.sqrt(((q[:, :, None, :] - g[:, None, :, :]) ** 2).sum(-1))


def assert_same_neighbours(got, gallery, queries, k: int, metric: str, scale: float = 1.0):
    """``got`` (a search's dissimilarities and positions) has the brute-force distance at every
    rank within rounding, -1 and inf past the gallery's end, and the brute-force item at every
    rank whose distance no other item comes within rounding of (exact ties may swap)."""
    d_got, p_got = got
    dissim = brute_force(gallery, queries, metric)
    ranked = np.sort(dissim, axis=2)
    found = min(k, gallery.shape[1])
    tol = TOLERANCE * max(scale, 1.0)
    np.testing.assert_allclose(d_got[:, :, :found], ranked[:, :, :found], rtol=TOLERANCE, atol=tol)
    assert (p_got[:, :, found:] == -1).all() and np.isinf(d_got[:, :, found:]).all()
    positions = p_got[:, :, :found]
    assert (positions >= 0).all()
    # the distance each reported item really has is its rank's distance
    at = np.take_along_axis(dissim, positions, axis=2)
    np.testing.assert_allclose(at, ranked[:, :, :found], rtol=TOLERANCE, atol=tol)
    # where no other item is as near (within rounding), the item itself must be the one
    gaps = np.diff(ranked, axis=2)
    edge = np.full((*ranked.shape[:2], 1), np.inf)
    before, after = np.concatenate([edge, gaps], axis=2), np.concatenate([gaps, edge], axis=2)
    alone = (before > tol) & (after > tol)
    expected = np.argsort(dissim, axis=2, kind="stable")[:, :, :found]
    distinct = alone[:, :, :found]
    np.testing.assert_array_equal(positions[distinct], expected[distinct])
    for depth_positions in positions:  # no item twice in one query's list
        for row in depth_positions:
            assert len(set(row.tolist())) == len(row)


def random_gallery(seed: int, depths: int, n_items: int, n_queries: int, dim: int = 8):
    rng = np.random.default_rng(seed)
    gallery = rng.normal(size=(depths, n_items, dim)).astype(np.float32)
    queries = rng.normal(size=(depths, n_queries, dim)).astype(np.float32)
    return gallery, queries


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize(("depths", "n_items", "k"), [(1, 700, 5), (3, 1500, 10), (6, 40, 7)])
def test_cpu_device_finds_the_brute_force_neighbours(metric, depths, n_items, k):
    gallery, queries = random_gallery(depths * n_items, depths, n_items, n_queries=9)
    index = make_index("exact", gallery, metric=metric, device="cpu")
    assert isinstance(index, MatmulIndex) and index.device == torch.device("cpu")
    assert index.products == matmul.cpu_products()
    assert_same_neighbours(index.search(queries, k), gallery, queries, k, metric)


@pytest.mark.parametrize("products", ["torch", "numpy"])
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_either_library_multiplies_to_the_brute_force_neighbours(products, metric):
    gallery, queries = random_gallery(17, depths=3, n_items=1500, n_queries=20, dim=16)
    index = MatmulIndex(gallery, metric=metric, products=products)
    assert index.products == products
    assert_same_neighbours(index.search(queries, 10), gallery, queries, 10, metric)


@pytest.mark.parametrize(
    ("cpuinfo", "mkl", "expected"),
    [
        ("processor\t: 0\nvendor_id\t: GenuineIntel\n" * 2, True, "torch"),
        ("processor\t: 0\nvendor_id\t: GenuineIntel\n", False, "numpy"),
        ("processor\t: 0\nvendor_id\t: AuthenticAMD\n", True, "numpy"),
        ("processor\t: 0\nvendor_id\t: HygonGenuine\n", True, "numpy"),
        ("processor\t: 0\nCPU implementer\t: 0x41\n", True, "numpy"),  # an ARM CPU
        ("", True, "numpy"),  # /proc/cpuinfo unreadable
    ],
)
def test_auto_products_are_torch_only_on_intel_cpus_with_mkl(cpuinfo, mkl, expected):
    assert matmul.products_for(cpuinfo, mkl) == expected


def test_an_unknown_product_library_is_refused_naming_it():
    gallery, _ = random_gallery(0, depths=1, n_items=10, n_queries=1)
    with pytest.raises(
        ValueError, match="products: must be one of 'auto', 'torch', 'numpy', got 'mkl'"
    ):
        MatmulIndex(gallery, products="mkl")


@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_k_beyond_the_gallery_pads_with_minus_one_and_inf(metric):
    gallery, queries = random_gallery(3, depths=2, n_items=4, n_queries=3)
    dissim, pos = MatmulIndex(gallery, metric=metric, device="cpu").search(queries, k=9)
    assert dissim.shape == pos.shape == (2, 3, 9)
    assert (pos[:, :, 4:] == -1).all() and np.isinf(dissim[:, :, 4:]).all()
    assert_same_neighbours((dissim, pos), gallery, queries, 9, metric)


def test_a_large_gallery_is_searched_a_few_queries_at_a_time(monkeypatch):
    # 2,048 padded columns and room for 3 queries' scores: 7 queries take 3 products per depth
    monkeypatch.setattr(matmul, "SCORES_PER_BLOCK", 3 * 2048)
    gallery, queries = random_gallery(5, depths=2, n_items=2000, n_queries=7)
    index = MatmulIndex(gallery, device="cpu")
    assert index._query_block == 3
    assert_same_neighbours(index.search(queries, 6), gallery, queries, 6, "l2")


@pytest.mark.parametrize("bfloat16", [False, True])
@pytest.mark.parametrize("products", ["torch", "numpy"])
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_a_query_gets_the_same_answer_whatever_is_searched_beside_it(products, bfloat16, metric):
    # BLAS kernels for a few rows add a row's terms in another order than those for many: a
    # service batching whatever requests wait must still give one query one answer
    gallery, queries = random_gallery(23, depths=2, n_items=20_000, n_queries=24, dim=64)
    index = MatmulIndex(gallery, metric=metric, products=products, bfloat16=bfloat16)
    together = index.search(queries, 7)
    for size in (1, 2, 3, 4, 5, 8, 11, 16):
        for start in range(0, 24 - size + 1, size):
            alone = index.search(queries[:, start : start + size], 7)
            np.testing.assert_array_equal(alone[0], together[0][:, start : start + size])
            np.testing.assert_array_equal(alone[1], together[1][:, start : start + size])
    assert_same_neighbours(together, gallery, queries, 7, metric, scale=10.0)


def test_exact_ties_come_in_position_order():
    gallery, _ = random_gallery(2, depths=1, n_items=300, n_queries=1)
    copies = [250, 3, 120, 77]  # one item at four positions, the query itself
    gallery[0, copies] = gallery[0, 9]
    dissim, pos = MatmulIndex(gallery).search(gallery[:, [9]], k=6)
    assert pos[0, 0, :5].tolist() == [3, 9, 77, 120, 250]
    assert dissim[0, 0, :5].tolist() == [0.0] * 5 and dissim[0, 0, 5] > 0


def test_a_near_query_far_from_the_origin_keeps_its_distance():
    # |q|² + |g|² − 2q·g in float32 cancels to a multiple of 1e6's rounding step (0.0625) here;
    # the distance from the difference is exact: 1000.0009765625 is a float32
    gallery = np.array([[[1000.0, 0.0], [0.0, 1000.0]]], dtype=np.float32)
    dissim, pos = MatmulIndex(gallery).search(np.array([[[1000.0009765625, 0.0]]]), k=1)
    assert pos.tolist() == [[[0]]] and dissim.tolist() == [[[0.0009765625]]]


def test_the_faiss_kinds_refuse_a_gpu_device():
    gallery, _ = random_gallery(0, depths=1, n_items=10, n_queries=1)
    with pytest.raises(ValueError, match="device: the 'ivf' index searches on the CPU only"):
        make_index("ivf", gallery, device="cuda")


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    depths=st.integers(1, 3),
    n_items=st.integers(1, 600),
    n_queries=st.integers(0, 5),
    k=st.integers(1, 12),
    metric=st.sampled_from(["l2", "ip"]),
    integer_features=st.booleans(),
    products=st.sampled_from(["torch", "numpy"]),
    bfloat16=st.booleans(),
)
def test_any_small_gallery_gives_the_brute_force_neighbours(
    seed, depths, n_items, n_queries, k, metric, integer_features, products, bfloat16
):
    gallery, queries = random_gallery(seed, depths, n_items, n_queries, dim=4)
    if integer_features:  # small integers: many exact ties, which may swap
        gallery, queries = np.round(gallery * 2), np.round(queries * 2)
    scale = float(np.abs(gallery).max(initial=1.0)) ** 2 * 4
    index = MatmulIndex(gallery, metric=metric, products=products, bfloat16=bfloat16)
    got = index.search(queries, k)
    assert_same_neighbours(got, gallery, queries, k, metric, scale)


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device here; the CPU tests above run the same search code on device 'cpu'",
)
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_cuda_finds_the_same_neighbours_as_the_cpu(metric):
    gallery, queries = random_gallery(11, depths=3, n_items=20_000, n_queries=70, dim=32)
    on_cpu = MatmulIndex(gallery, metric=metric, device="cpu").search(queries, k=10)
    on_gpu = MatmulIndex(gallery, metric=metric, device="cuda").search(queries, k=10)
    assert_same_neighbours(on_gpu, gallery, queries, 10, metric, scale=10.0)
    assert_same_neighbours(on_cpu, gallery, queries, 10, metric, scale=10.0)
    np.testing.assert_allclose(on_gpu[0], on_cpu[0], rtol=TOLERANCE, atol=TOLERANCE * 10)
    assert (on_gpu[1] != on_cpu[1]).mean() < 1e-3  # float rounding may swap near-exact ties


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device here; the CPU test above checks the same search code on device 'cpu'",
)
def test_cuda_gives_a_query_the_same_answer_whatever_is_searched_beside_it():
    gallery, queries = random_gallery(29, depths=2, n_items=20_000, n_queries=16, dim=64)
    index = MatmulIndex(gallery, device="cuda")
    together = index.search(queries, 7)
    for size in (1, 2, 3, 5, 8):
        alone = index.search(queries[:, :size], 7)
        np.testing.assert_array_equal(alone[0], together[0][:, :size])
        np.testing.assert_array_equal(alone[1], together[1][:, :size])
