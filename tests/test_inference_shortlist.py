"""Certified shortlists of the exact index: the bound on a product's rounding holds for the
products this machine computes (float32 and bfloat16), a shortlist is widened or replaced by
the whole gallery when it cannot be certified, and whichever product ranks the gallery, a query
gets the answer of measuring every row."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oahu.inference import band as band_module
from oahu.inference import matmul
from oahu.inference.matmul import MatmulIndex
from oahu.inference.shortlist import (
    BFLOAT16_ROUNDOFF,
    FLOAT32_ROUNDOFF,
    SHORTLIST_MARGINS,
    at_most_float32,
    band_gap,
    certified_gap,
    certified_shortlist,
    count_at_most,
    float64_product_error,
    product_error,
)

U = FLOAT32_ROUNDOFF


def test_the_gap_is_twice_the_product_bound_plus_the_rescoring_slack_by_hand():
    # |q| = 3, max|g| = 2, max b = 4, a = −1, n = 2 dimensions, bfloat16 inputs and output:
    # γ_2 = 2u/(1 − 2u), γ_4 = 4u/(1 − 4u); |a|·|q|·max|g| = 6
    v = 2.0**-8
    gamma2, gamma4 = 2 * U / (1 - 2 * U), 4 * U / (1 - 4 * U)
    error = ((1 + v) ** 2 * (1 + gamma2) * (1 + v) - 1) * 6 + U * (4 + 12)
    expected = 2 * error + 4 * gamma4 * 25  # (|q| + max|g|)² = 25
    assert expected == pytest.approx(0.1412, abs=1e-4)  # ≈ 2 · 6 · 3v: the rounding of 3 values
    got = certified_gap(torch.tensor([3.0]), 2.0, 4.0, -1.0, 2, v, v)
    assert float(got) == pytest.approx(expected, rel=1e-6)
    # float32 throughout: only the accumulation, the addition of b and the rescoring remain
    exact32 = 2 * (gamma2 * 6 + U * 16) + 4 * gamma4 * 25
    assert float(certified_gap(torch.tensor([3.0]), 2.0, 4.0, -1.0, 2)) == pytest.approx(exact32)


def partial_distances(index: MatmulIndex, queries: np.ndarray, bfloat16: bool) -> list:
    """Each depth's computed partial distances and their float64 values, over the real columns."""
    out = []
    for depth in range(index.n_depths):
        block = torch.from_numpy(queries[depth])
        got = index._partial_distances(block, depth, bfloat16)[:, : index.n_items].double()
        g, q = index._rows[depth].double(), block.double()
        bias = (g * g).sum(1) if index.metric == "l2" else torch.zeros(len(g), dtype=g.dtype)
        out.append((got, bias[None, :] + index._scale * (q @ g.T)))
    return out


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    dim=st.sampled_from([1, 3, 16, 200]),
    n_items=st.integers(1, 1200),
    log_scale=st.floats(-3.0, 3.0),
    metric=st.sampled_from(["l2", "ip"]),
    bfloat16=st.booleans(),
)
def test_every_computed_partial_distance_is_within_the_bound(
    seed, dim, n_items, log_scale, metric, bfloat16
):
    # the certificate is only as good as this bound: it must hold for the kernels torch and
    # numpy run on this machine, at any scale of the embeddings
    rng = np.random.default_rng(seed)
    scale = 10.0**log_scale
    gallery = (rng.normal(size=(2, n_items, dim)) * scale).astype(np.float32)
    queries = (rng.normal(size=(2, 5, dim)) * scale * rng.uniform(0.1, 10)).astype(np.float32)
    index = MatmulIndex(gallery, metric=metric, bfloat16=True)
    roundoff = BFLOAT16_ROUNDOFF if bfloat16 else 0.0
    for depth, (got, exact) in enumerate(partial_distances(index, queries, bfloat16)):
        norms = torch.linalg.vector_norm(torch.from_numpy(queries[depth]).double(), dim=1)
        gap = certified_gap(
            norms,
            index._gallery_norm[depth],
            index._bias_max[depth],
            index._scale,
            dim,
            roundoff,
            roundoff,
        ).double()
        # gap = 2E + R, so E < gap / 2
        assert ((got - exact).abs() <= gap[:, None] / 2).all()


def test_a_shortlist_is_widened_only_for_the_queries_that_need_it():
    # query 0: distinct values, certified by the first width; query 1: 20 values within its gap
    # of its best, certified by the second; query 2: every value equal, by none
    partial = torch.stack([torch.arange(1024.0), torch.arange(1024.0), torch.zeros(1024)])
    partial[1, :20] = 0.0
    gap = torch.tensor([2.0, 2.0, 2.0])
    columns, uncertified = certified_shortlist(partial, 3, gap, n_items=1000)
    first, second, last = (3 + margin for margin in SHORTLIST_MARGINS)
    assert columns.shape == (3, last)
    assert columns[0, :first].tolist() == list(range(first))
    assert (columns[0, first:] == -1).all()
    assert sorted(columns[1, :second].tolist()) == list(range(second))
    assert (columns[1, second:] == -1).all()
    assert uncertified.tolist() == [2]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n_items=st.integers(1, 1024),
    found=st.integers(1, 40),
    gap=st.floats(0.0, 3.0),
    ties=st.booleans(),
)
def test_a_certified_shortlist_holds_every_column_within_the_gap(seed, n_items, found, gap, ties):
    # the certificate's promise, whatever the values: each query's shortlist holds every real
    # column whose value is within its gap of its found-th smallest, or the query is uncertified
    found = min(found, n_items)
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(4, 1024))
    if ties:  # few distinct values: many columns at the k-th's value
        values = np.round(values)
    values[:, n_items:] = np.inf
    partial = torch.from_numpy(values.astype(np.float32))
    gaps = torch.full((4,), gap, dtype=torch.float32)
    columns, uncertified = certified_shortlist(partial, found, gaps, n_items)
    for q in range(4):
        if q in uncertified.tolist():
            continue
        listed = set(columns[q].tolist()) - {-1}
        assert len(listed) >= found and all(c < n_items for c in listed)
        real = partial[q, :n_items]
        threshold = real.sort().values[found - 1] + gaps[q]  # in float32, as the certificate
        within = torch.nonzero(real <= threshold).ravel()
        assert set(within.tolist()) <= listed


def test_padding_columns_are_never_shortlisted_and_a_whole_gallery_is_certified():
    partial = torch.full((1, 512), float("inf"))
    partial[0, :5] = 1.0  # 5 real items, all equal
    columns, uncertified = certified_shortlist(partial, 2, torch.tensor([1.0]), n_items=5)
    assert sorted(columns[0].tolist()) == [0, 1, 2, 3, 4] and uncertified.tolist() == []


def crowded_gallery(
    seed: int, n_items: int = 3000, crowd: int = 300, dim: int = 32, spread: float = 1e-3
):
    """Unit rows, ``crowd`` of them within ~``spread`` of one direction: a query along it has
    hundreds of items inside a bfloat16 product's rounding of its nearest (at a spread of 1e-6,
    inside a float32 one's and its rescoring's); a second depth has none."""
    rng = np.random.default_rng(seed)
    gallery = rng.normal(size=(2, n_items, dim))
    centre = rng.normal(size=dim)
    gallery[0, :crowd] = centre + spread * rng.normal(size=(crowd, dim)) * np.linalg.norm(centre)
    gallery /= np.linalg.norm(gallery, axis=-1, keepdims=True)
    queries = rng.normal(size=(2, 6, dim))
    queries[0, :3] = centre + 1e-4 * rng.normal(size=(3, dim))
    queries /= np.linalg.norm(queries, axis=-1, keepdims=True)
    return gallery.astype(np.float32), queries.astype(np.float32)


def brute_force_order(gallery: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    g, q = gallery.astype(np.float64), queries.astype(np.float64)
    dist = np.sqrt(((q[:, :, None, :] - g[:, None, :, :]) ** 2).sum(-1))
    return np.argsort(dist, axis=2, kind="stable")[:, :, :k]


@pytest.mark.parametrize("rows_per_chunk", [band_module.ROWS_PER_CHUNK, 7])
def test_a_query_no_shortlist_certifies_is_measured_against_its_band(monkeypatch, rows_per_chunk):
    monkeypatch.setattr(band_module, "ROWS_PER_CHUNK", rows_per_chunk)  # 7: many chunks to merge
    gallery, queries = crowded_gallery(3)
    index = MatmulIndex(gallery, bfloat16=True)
    dissim, pos = index.search(queries, 5)
    reference = MatmulIndex(gallery, bfloat16=False).search(queries, 5)
    np.testing.assert_array_equal(dissim, reference[0])  # the same distances, to the bit
    # the crowd's nearest five are the float64 brute force's (the items differ by ~1e-4, far
    # beyond float32 rounding), at depth 0 and depth 1 alike
    np.testing.assert_array_equal(pos, brute_force_order(gallery, queries, 5))
    # ... which the widest bfloat16 shortlist alone would not give: without the band's
    # measurement the crowded queries' answers are wrong
    monkeypatch.setattr(
        matmul,
        "certified_shortlist",
        lambda *args: (certified_shortlist(*args)[0], torch.zeros(0, dtype=torch.int64)),
    )
    _, without = index.search(queries, 5)
    assert not np.array_equal(without[0, :3], pos[0, :3])


@pytest.mark.parametrize("bfloat16", [True, False])
def test_a_band_holds_the_nearest_and_is_a_fraction_of_a_crowded_gallery(bfloat16):
    """What an uncertified query is measured against: every item within the certificate's gap
    of its k-th partial distance, the brute force's k nearest among them, not every item."""
    gallery, queries = crowded_gallery(4, crowd=600)
    index = MatmulIndex(gallery, bfloat16=bfloat16)
    _, bands, _ = index._shortlists(torch.from_numpy(queries), 5)
    truth = brute_force_order(gallery, queries, 5)
    assert [i for i, _ in bands[0]] == [0, 1, 2] and bands[1] == []  # the crowd's queries
    for i, band in bands[0]:
        positions = band.tolist()
        assert positions == sorted(set(positions))
        assert set(truth[0, i].tolist()) <= set(positions)
        assert 5 < len(positions) < gallery.shape[1] / 2


def test_a_band_is_what_its_tighter_gap_keeps_of_what_a_shortlist_certificate_would():
    """The band's gap bounds the rescoring relative to the k-th squared distance, not by the
    largest one any query could have: it keeps every column within it of the k-th partial
    distance and nothing further, a subset of what the shortlists' gap would keep."""
    gallery, queries = crowded_gallery(4, crowd=600)
    index = MatmulIndex(gallery)
    block = torch.from_numpy(queries)
    _, bands, _ = index._shortlists(block, 5)
    norms = torch.linalg.vector_norm(block.double(), dim=-1) * (1 + 1e-6)
    partial = index._partial_distances(block[0], 0, False)[:, : index.n_items]
    for i, band in bands[0]:
        kth = partial[i].sort().values[4]
        error = product_error(
            norms[0, i : i + 1], index._gallery_norm[0], index._bias_max[0], -2.0, index.dim
        )
        gap = band_gap(kth[None], error, norms[0, i : i + 1], index._gallery_norm[0], -2.0, 32)
        within = torch.nonzero(partial[i].double() <= kth.double() + gap).view(-1)
        assert band.tolist() == within.tolist()
        loose = certified_gap(
            norms[0, i : i + 1], index._gallery_norm[0], index._bias_max[0], -2.0, index.dim
        )
        assert float(gap) < float(loose)
        wider = torch.nonzero(partial[i].double() <= kth.double() + loose.double()).view(-1)
        assert set(band.tolist()) <= set(wider.tolist())


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("spread", [1e-3, 1e-6])
def test_a_wide_band_drawn_again_in_float64_is_narrower_and_answers_the_same(
    monkeypatch, metric, spread
):
    """Past REFINE_BAND items a band is drawn again from float64 partial distances: narrower,
    still holding the search's nearest, and the answer is the same to the bit, also where the
    crowd's distances lie within the float32 rescoring's rounding of each other (spread 1e-6),
    which the float64 band's gap must leave in."""
    gallery, queries = crowded_gallery(4, crowd=600, spread=spread)
    monkeypatch.setattr(band_module, "REFINE_BAND", 10**9)
    index = MatmulIndex(gallery, metric=metric)
    reference = index.search(queries, 5)
    _, wide, _ = index._shortlists(torch.from_numpy(queries), 5)
    monkeypatch.setattr(band_module, "REFINE_BAND", 8)
    monkeypatch.setattr(band_module, "REFINE_QUERIES", 1)
    dissim, pos = index.search(queries, 5)
    np.testing.assert_array_equal(dissim, reference[0])
    np.testing.assert_array_equal(pos, reference[1])
    _, refined, _ = index._shortlists(torch.from_numpy(queries), 5)
    assert [i for i, _ in refined[0]] == [i for i, _ in wide[0]] == [0, 1, 2]
    for (i, narrow), (_, band) in zip(refined[0], wide[0], strict=True):
        assert set(narrow.tolist()) <= set(band.tolist())
        assert set(reference[1][0, i].tolist()) <= set(narrow.tolist())
        # narrower, unless the crowd's inner products lie within the rescoring's rounding
        assert len(narrow) < len(band) or (metric == "ip" and spread < 1e-4)
    if metric == "l2" and spread > 1e-4:  # beyond rounding: the float64 brute force's order
        np.testing.assert_array_equal(pos, brute_force_order(gallery, queries, 5))


def test_a_refined_band_keeps_what_the_float32_rescoring_cannot_order(monkeypatch):
    """600 items at distance 1 from the query, up to the rounding of their float32 rows: their
    float32 distances rank them by rounding, not by their float64 order, and the float64 band
    must keep every item the rescoring may put first, not only the float64 nearest."""
    rng = np.random.default_rng(11)
    query = rng.normal(size=32)
    directions = rng.normal(size=(600, 32))
    sphere = query + directions / np.linalg.norm(directions, axis=1, keepdims=True)
    far = 10.0 + 3.0 * rng.normal(size=(2400, 32))
    gallery = np.concatenate([sphere, far])[None].astype(np.float32)
    queries = query[None, None].astype(np.float32)
    index = MatmulIndex(gallery)
    monkeypatch.setattr(band_module, "REFINE_BAND", 10**9)
    reference = index.search(queries, 5)
    monkeypatch.setattr(band_module, "REFINE_BAND", 8)
    monkeypatch.setattr(band_module, "REFINE_QUERIES", 1)
    dissim, pos = index.search(queries, 5)
    np.testing.assert_array_equal(dissim, reference[0])
    np.testing.assert_array_equal(pos, reference[1])
    # the float64 order is another: a band of the float64 nearest alone would answer it
    assert not np.array_equal(pos, brute_force_order(gallery, queries, 5))


def test_the_band_gap_by_hand():
    # E = 0.01, |q| = 3, max|g| = 2, n = 2: Euclidean, the 5th partial distance −8 is a squared
    # distance of at most −8 + 0.01 + 9 = 1.01; the rescoring's slack is ρ·1.01 with
    # ρ = (1 + γ_4)(1 + u)² / ((1 − u)²(1 − γ_4)) − 1 (the square root may round two apart
    # values to a tie)
    gamma4 = 4 * U / (1 - 4 * U)
    rho = (1 + gamma4) * (1 + U) ** 2 / ((1 - U) ** 2 * (1 - gamma4)) - 1
    assert rho == pytest.approx(2 * gamma4 + 4 * U, rel=1e-6)
    error, norms = torch.tensor([0.01], dtype=torch.float64), torch.tensor([3.0])
    got = band_gap(torch.tensor([-8.0]), error, norms, 2.0, -2.0, 2)
    assert float(got) == pytest.approx(0.02 + rho * 1.01, rel=1e-12)
    # a k-th partial distance below −|q|² − E (a rounding artefact) is a squared distance of 0
    assert float(band_gap(torch.tensor([-10.0]), error, norms, 2.0, -2.0, 2)) == 0.02
    # the inner product: each of the n products and the sum round, 2·γ_2·|q|·max|g|
    gamma2 = 2 * U / (1 - 2 * U)
    got = band_gap(torch.tensor([-8.0]), error, norms, 2.0, -1.0, 2)
    assert float(got) == pytest.approx(0.02 + 2 * gamma2 * 6, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    dim=st.sampled_from([1, 3, 16, 200]),
    log_scale=st.floats(-3.0, 3.0),
    metric=st.sampled_from(["l2", "ip"]),
)
def test_every_float64_partial_distance_is_within_its_bound(seed, dim, log_scale, metric):
    """The float64 partial distances of a band's refinement, against extended precision."""
    rng = np.random.default_rng(seed)
    gallery = (rng.normal(size=(1, 200, dim)) * 10.0**log_scale).astype(np.float32)
    queries = (rng.normal(size=(1, 4, dim)) * 10.0**log_scale).astype(np.float32)
    index = MatmulIndex(gallery, metric=metric)
    q = torch.from_numpy(queries[0]).double()
    g = index._rows[0].double()
    bias = (g * g).sum(1) if metric == "l2" else torch.zeros(len(g), dtype=torch.float64)
    got = bias[None, :] + index._scale * (q @ g.T)
    gl, ql = gallery[0].astype(np.longdouble), queries[0].astype(np.longdouble)
    exact_bias = (gl * gl).sum(1) if metric == "l2" else np.zeros(len(gl), np.longdouble)
    exact = exact_bias[None, :] + np.longdouble(index._scale) * (ql @ gl.T)
    norms = torch.linalg.vector_norm(q, dim=-1) * (1 + 1e-6)
    bound = float64_product_error(
        norms, index._gallery_norm[0], index._bias_max[0], index._scale, dim
    ).numpy()
    assert (np.abs(got.numpy().astype(np.longdouble) - exact) <= bound[:, None]).all()


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_at_most_float32_is_the_largest_float32_not_above(bound):
    got = at_most_float32(torch.tensor([bound], dtype=torch.float64))
    assert float(got) <= bound or (abs(bound) > float(np.finfo(np.float32).max))
    with np.errstate(over="ignore"):  # past the largest float32 lies inf
        above = np.nextafter(np.float32(got.item()), np.float32(np.inf))
    assert float(above) > bound or np.isinf(above)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.lists(st.floats(width=32, allow_nan=False), min_size=5, max_size=5),
        min_size=1,
        max_size=4,
    ),
    bound=st.floats(width=32),
)
def test_count_at_most_counts_as_python_does(values, bound):
    rows = torch.tensor(values, dtype=torch.float32)
    bounds = torch.full((len(values),), bound, dtype=torch.float32)
    expected = [sum(v <= bound for v in row) for row in values]
    assert count_at_most(rows, bounds).tolist() == expected


@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_bfloat16_and_float32_products_give_a_query_the_same_answer_to_the_bit(metric):
    gallery, queries = crowded_gallery(8)
    answers = [
        MatmulIndex(gallery, metric=metric, bfloat16=b, products=p).search(queries, 7)
        for b, p in ((True, "numpy"), (False, "numpy"), (False, "torch"))
    ]
    for other in answers[1:]:
        np.testing.assert_array_equal(other[0], answers[0][0])
        np.testing.assert_array_equal(other[1], answers[0][1])


def test_large_blocks_multiply_float32_and_answer_the_same(monkeypatch):
    gallery, queries = crowded_gallery(5)
    index = MatmulIndex(gallery, bfloat16=True)
    calls = []
    original = index._partial_distances
    monkeypatch.setattr(
        index, "_partial_distances", lambda b, d, bf: calls.append(bf) or original(b, d, bf)
    )
    monkeypatch.setattr(matmul, "BFLOAT16_QUERIES", 4)
    together = index.search(queries, 5)  # a block of 6 queries: float32
    alone = index.search(queries[:, :2], 5)  # a block of 2: bfloat16
    assert calls == [False, False, True, True]
    np.testing.assert_array_equal(alone[1], together[1][:, :2])
    np.testing.assert_array_equal(alone[0], together[0][:, :2])


def test_bfloat16_is_off_by_default_and_a_bad_setting_is_refused():
    gallery, _ = crowded_gallery(0, n_items=50, crowd=5)
    assert MatmulIndex(gallery).bfloat16 is False and MatmulIndex(gallery)._gallery_bf16 is None
    assert MatmulIndex(gallery, bfloat16=True)._gallery_bf16 is not None
    with pytest.raises(ValueError, match="bfloat16: must be true or false, got 'on'"):
        MatmulIndex(gallery, bfloat16="on")


def test_a_query_with_non_finite_values_is_measured_against_every_item():
    """Its partial distances bound nothing (a NaN norm makes a NaN gap), so its band is the
    whole gallery, never empty; a finite query's band beside it is its own."""
    rng = np.random.default_rng(5)
    gallery = rng.normal(size=(1, 300, 4)).astype(np.float32)
    gallery /= np.linalg.norm(gallery, axis=-1, keepdims=True)
    index = MatmulIndex(gallery)
    partial = torch.full((2, 512), float("inf"))
    partial[0, :300] = torch.finfo(torch.float32).max  # as _bound_non_finite leaves it
    partial[1, :300] = torch.arange(300.0)
    norms = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    queries = torch.zeros((2, 4))
    bands = index._bands(queries, partial, torch.tensor([0, 1]), 5, 0, norms, 0.0)
    assert [i for i, _ in bands] == [0, 1]
    assert bands[0][1].tolist() == list(range(300))
    assert bands[1][1].tolist() == [0, 1, 2, 3, 4]  # 5 apart by 1, far beyond the gap


# numpy says so when it multiplies an infinite query or overflows
@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow encountered in matmul:RuntimeWarning")
@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), 1e38])
@pytest.mark.parametrize("n_items", [3, 300, 3000])  # 3000: past REFINE_BAND
def test_a_non_finite_query_gets_real_items_and_leaves_its_neighbours_answers_alone(
    metric, bad, n_items
):
    """Infinite, NaN or overflowing (1e38) features make a query's partial distances non-finite; NaN
    ranks after +inf and +inf ties with the padding columns, which once sent such a query's
    shortlist past the gallery (an IndexError). It now names only real items, and the finite
    queries of its block get the answers they get alone."""
    rng = np.random.default_rng(7)
    gallery = rng.normal(size=(2, n_items, 8)).astype(np.float32)
    queries = np.full((2, 3, 8), bad, dtype=np.float32)
    queries[:, 1] = rng.normal(size=(2, 8))
    index = MatmulIndex(gallery, metric=metric)
    found = min(5, n_items)
    dissim, pos = index.search(queries, 5)
    assert ((pos[:, :, :found] >= 0) & (pos[:, :, :found] < n_items)).all()
    for row in (0, 2):
        assert sorted(pos[0, row, :found].tolist()) == sorted(set(pos[0, row, :found].tolist()))
    alone = index.search(queries[:, 1:2], 5)
    np.testing.assert_array_equal(pos[:, 1:2], alone[1])
    np.testing.assert_array_equal(dissim[:, 1:2], alone[0])
    g, q = gallery.astype(np.float64), queries[:, 1].astype(np.float64)
    if metric == "l2":
        truth = brute_force_order(gallery, queries[:, 1:2], found)[:, 0]
    else:
        truth = np.argsort(-np.einsum("dnk,dk->dn", g, q), axis=1, kind="stable")[:, :found]
    np.testing.assert_array_equal(pos[:, 1, :found], truth)


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device here; the CPU tests above run the same band code on device 'cpu'",
)
@pytest.mark.parametrize("refine_band", [8, 10**9])
def test_cuda_measures_a_crowded_query_against_its_band_as_the_cpu_does(monkeypatch, refine_band):
    """Bands drawn on the GPU, from float32 and (past REFINE_BAND) float64 partial distances,
    hold the crowd's nearest: the float64 brute force's order, as on the CPU."""
    monkeypatch.setattr(band_module, "REFINE_BAND", refine_band)
    monkeypatch.setattr(band_module, "REFINE_QUERIES", 1)
    gallery, queries = crowded_gallery(4, crowd=600)
    on_gpu = MatmulIndex(gallery, device="cuda").search(queries, 5)
    on_cpu = MatmulIndex(gallery, device="cpu").search(queries, 5)
    np.testing.assert_array_equal(on_gpu[1], brute_force_order(gallery, queries, 5))
    np.testing.assert_array_equal(on_gpu[1], on_cpu[1])
