"""The benchmark-stream protocol: dev/test split, seeds, transitive closure (footnote 1), order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from oahu.streams import protocol
from oahu.streams.closure import ClosureKnowledge
from oahu.streams.datasets import load_digits
from oahu.streams.protocol import (
    closure_stream,
    interleave_closure,
    pair_stream,
    random_pairs,
    random_triplets,
    split_dev_test,
    triplet_stream,
)


def _drawn(revelation) -> list:
    return sorted(revelation or [])


def _triplets(revelation) -> list[tuple[int, ...]]:
    return [c for c, _ in _drawn(revelation)]


@pytest.fixture(scope="module")
def digits_split():
    ds = load_digits()
    dev, test = split_dev_test(ds.n_items, seed=0)
    return ds.y, dev, test


# ---------------------------------------------------------------------------- split
def test_split_is_a_seeded_one_to_one_partition():
    dev, test = split_dev_test(11, seed=3)
    assert dev.dtype == test.dtype == np.int64
    assert (len(dev), len(test)) == (6, 5)
    assert sorted(np.concatenate([dev, test]).tolist()) == list(range(11))
    again = split_dev_test(11, seed=3)
    assert np.array_equal(dev, again[0]) and np.array_equal(test, again[1])
    assert not np.array_equal(dev, split_dev_test(11, seed=4)[0])


def test_split_needs_two_items():
    with pytest.raises(ValueError, match="n_items: need at least 2"):
        split_dev_test(1, seed=0)
    with pytest.raises(ValueError, match=r"seed: must be an integer >= 0, got -3"):
        split_dev_test(10, seed=-3)
    with pytest.raises(ValueError, match=r"seed: must be an integer >= 0, got 1.5"):
        split_dev_test(10, seed=1.5)


# ---------------------------------------------------------------------------- closure rules
def test_triplet_closure_on_a_hand_example():
    # Items 0, 1, 2 are one class, 3 and 4 another.
    k = ClosureKnowledge(n_items=5, kind="triplet", rng=np.random.default_rng(0))
    assert k.reveal_similar(0, 1) is None  # no negative known yet: no triplet
    assert _triplets(k.reveal_dissimilar(0, 3)) == [(0, 1, 3), (1, 0, 3)]
    # 3~4: the cross pairs (3,4),(4,3) against {0,1}, and {0,1}'s pairs against 4 (rule 4).
    assert _triplets(k.reveal_similar(3, 4)) == [
        (0, 1, 4), (1, 0, 4), (3, 4, 0), (3, 4, 1), (4, 3, 0), (4, 3, 1),
    ]  # fmt: skip
    # 2 joins {0,1}: its pairs with 0 and 1 against {3,4}, and {3,4}'s pairs against 2.
    assert _triplets(k.reveal_similar(0, 2)) == [
        (0, 2, 3), (0, 2, 4), (1, 2, 3), (1, 2, 4), (2, 0, 3), (2, 0, 4), (2, 1, 3), (2, 1, 4),
        (3, 4, 2), (4, 3, 2),
    ]  # fmt: skip
    assert k.reveal_dissimilar(2, 4) is None  # already derivable
    assert k.similar(1, 2) and k.dissimilar(2, 4) and not k.similar(2, 3)


def test_pair_closure_on_a_hand_example():
    k = ClosureKnowledge(n_items=4, kind="pair", rng=np.random.default_rng(0))
    assert _drawn(k.reveal_similar(0, 1)) == [((0, 1), True)]
    # similar(0,1) and dissimilar(1,2) give dissimilar(0,2).
    assert _drawn(k.reveal_dissimilar(1, 2)) == [((0, 2), False), ((1, 2), False)]
    # similar(2,3) and dissimilar(2,{0,1}) give dissimilar(3,0) and dissimilar(3,1).
    assert _drawn(k.reveal_similar(2, 3)) == [((2, 3), True), ((3, 0), False), ((3, 1), False)]
    assert k.reveal_similar(3, 2) is None


def test_contradictory_facts_are_refused():
    k = ClosureKnowledge(n_items=3, kind="pair", rng=np.random.default_rng(0))
    k.reveal_similar(0, 1)
    with pytest.raises(ValueError, match=r"dissimilar\(1, 0\) contradicts"):
        k.reveal_dissimilar(1, 0)
    k.reveal_dissimilar(1, 2)
    with pytest.raises(ValueError, match=r"similar\(0, 2\) contradicts"):
        k.reveal_similar(0, 2)


def _brute_force_derivable(n_items, similar_edges, dissimilar_edges, kind):
    """Every constraint footnote 1 derives from the facts, computed from scratch."""
    rows, cols = zip(*similar_edges, strict=True) if similar_edges else ((), ())
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n_items, n_items))
    _, comp = connected_components(graph, directed=False)
    linked = {(comp[u], comp[v]) for u, v in dissimilar_edges}
    linked |= {(b, a) for a, b in linked}
    touched = {i for e in [*similar_edges, *dissimilar_edges] for i in e}
    if kind == "pair":
        return {
            ((u, v), bool(comp[u] == comp[v]))
            for u, v in itertools.combinations(sorted(touched), 2)
            if comp[u] == comp[v] or (comp[u], comp[v]) in linked
        }
    return {
        (x, y, z)
        for x, y, z in itertools.permutations(sorted(touched), 3)
        if comp[x] == comp[y] and (comp[x], comp[z]) in linked
    }


@pytest.mark.parametrize("kind", ["triplet", "pair"])
def test_revelations_partition_the_brute_force_closure(kind):
    """Each derivable constraint is revealed exactly once: when it first becomes derivable."""
    rng = np.random.default_rng(7)
    labels = rng.integers(3, size=14)
    k = ClosureKnowledge(len(labels), kind, np.random.default_rng(0))
    similar_edges, dissimilar_edges, revealed = [], [], []
    for _ in range(30):
        u, v = (int(i) for i in rng.choice(len(labels), size=2, replace=False))
        same = bool(labels[u] == labels[v])
        (similar_edges if same else dissimilar_edges).append((u, v))
        revelation = k.reveal_similar(u, v) if same else k.reveal_dissimilar(u, v)
        revealed += list(revelation or [])
        expected = _brute_force_derivable(len(labels), similar_edges, dissimilar_edges, kind)
        if kind == "pair":
            got = [(tuple(sorted(c)), s) for c, s in revealed]
        else:
            got = [c for c, _ in revealed]
        assert len(got) == len(set(got)), "a constraint was revealed twice"
        assert set(got) == expected


# ---------------------------------------------------------------------------- interleaving
def test_each_seed_is_followed_by_the_oldest_pending_constraint():
    seeds = [((0, 1, 3), False), ((3, 4, 0), False), ((0, 2, 4), False)]
    s = interleave_closure(seeds, n_items=5, kind="triplet", n_constraints=10,
                           rng=np.random.default_rng(1))  # fmt: skip
    out = [tuple(c) for c in s.constraints.tolist()]
    assert s.is_seed.tolist() == [True, False, True, False, True, False]
    assert out[0::2] == [seed for seed, _ in seeds]
    assert out[1] == (1, 0, 3)  # the only new constraint of the first seed
    # The second seed revealed 5 new triplets (see the hand example above); the third seed's
    # 9 come after them, so both derived slots still draw from the second seed's.
    second = {(0, 1, 4), (1, 0, 4), (3, 4, 1), (4, 3, 0), (4, 3, 1)}
    assert out[3] in second and out[5] in second and out[3] != out[5]


def test_a_seed_repeating_an_earlier_constraint_is_passed_over():
    seeds = [((0, 1, 2), False), ((1, 0, 2), False), ((0, 1, 2), False), ((3, 4, 2), False)]
    s = interleave_closure(seeds, 5, "triplet", 10, np.random.default_rng(0))
    assert s.constraints.tolist() == [[0, 1, 2], [1, 0, 2], [3, 4, 2], [4, 3, 2]]


def test_stream_stops_at_n_constraints():
    seeds = [((0, 1, 2), False), ((3, 4, 5), False)]
    s = interleave_closure(seeds, 6, "triplet", 3, np.random.default_rng(0))
    assert s.constraints.tolist() == [[0, 1, 2], [1, 0, 2], [3, 4, 5]]


# ---------------------------------------------------------------------------- closure streams
def test_triplet_stream_is_half_seeds_half_closure(digits_split):
    y, dev, _ = digits_split
    s = closure_stream(y, dev, n_constraints=2000, seed=5, kind="triplet")
    c = s.constraints
    assert c.shape == (2000, 3) and c.dtype == np.int64 and s.similar is None
    assert s.is_seed[0::2].all() and not s.is_seed[1::2].any()
    assert (y[c[:, 0]] == y[c[:, 1]]).all() and (y[c[:, 0]] != y[c[:, 2]]).all()
    assert len({tuple(t) for t in c.tolist()}) == 2000
    assert np.isin(c, dev).all()
    assert np.array_equal(c, triplet_stream(y, dev, 2000, seed=5))


def test_odd_and_empty_streams(digits_split):
    y, dev, _ = digits_split
    s = closure_stream(y, dev, n_constraints=7, seed=0, kind="triplet")
    assert s.is_seed.tolist() == [True, False, True, False, True, False, True]
    assert triplet_stream(y, dev, 0, seed=0).shape == (0, 3)


def test_pair_stream_tops_up_with_seeds_when_closure_runs_dry(digits_split):
    y, dev, _ = digits_split
    pairs, similar = pair_stream(y, dev, n_constraints=1000, seed=2)
    s = closure_stream(y, dev, n_constraints=1000, seed=2, kind="pair")
    assert np.array_equal(pairs, s.constraints) and np.array_equal(similar, s.similar)
    assert pairs.shape == (1000, 2) and similar.dtype == np.bool_
    assert np.array_equal(similar, y[pairs[:, 0]] == y[pairs[:, 1]])
    assert len({tuple(sorted(p)) for p in pairs.tolist()}) == 1000
    assert np.isin(pairs, dev).all()
    # Random pairs with 10 classes are ~90% dissimilar and reveal little to derive from.
    assert 500 < s.is_seed.sum() < 1000
    assert not (~s.is_seed[:-1] & ~s.is_seed[1:]).any()  # never two derived in a row
    assert s.is_seed[0]


def test_derived_constraints_follow_from_earlier_seeds_only():
    rng = np.random.default_rng(11)
    labels = rng.integers(3, size=30)
    dev = np.arange(30)
    for kind in ("triplet", "pair"):
        s = closure_stream(labels, dev, n_constraints=60, seed=4, kind=kind)
        c = [tuple(t) for t in s.constraints.tolist()]
        for i in np.flatnonzero(~s.is_seed):
            before = [c[j] for j in range(i) if s.is_seed[j]]
            if kind == "triplet":
                sims = [(a, p) for a, p, _ in before]
                diss = [(a, n) for a, _, n in before]
                assert c[i] in _brute_force_derivable(30, sims, diss, kind)
            else:
                sims = [p for j, p in enumerate(c[:i]) if s.is_seed[j] and s.similar[j]]
                diss = [p for j, p in enumerate(c[:i]) if s.is_seed[j] and not s.similar[j]]
                fact = (tuple(sorted(c[i])), bool(s.similar[i]))
                assert fact in _brute_force_derivable(30, sims, diss, kind)


@pytest.mark.parametrize("kind", ["triplet", "pair"])
def test_streams_are_deterministic_per_seed(digits_split, kind):
    y, dev, _ = digits_split
    a = closure_stream(y, dev, 500, seed=1, kind=kind).constraints
    assert np.array_equal(a, closure_stream(y, dev, 500, seed=1, kind=kind).constraints)
    assert not np.array_equal(a, closure_stream(y, dev, 500, seed=2, kind=kind).constraints)


@pytest.mark.parametrize(
    ("labels", "kind", "n"),
    [(None, "triplet", 1500), (np.arange(300) % 2, "pair", 1500)],
)
def test_skipping_unreachable_revelations_changes_nothing(
    digits_split, monkeypatch, labels, kind, n
):
    """Once N constraints are pending, later revelations are not built; the stream is the same."""
    y = digits_split[0] if labels is None else labels
    dev = digits_split[1] if labels is None else np.arange(len(labels))
    became_full = []
    add = protocol._PendingQueue.add

    def watching_add(self, revelation):
        add(self, revelation)
        became_full.append(self.full)

    monkeypatch.setattr(protocol._PendingQueue, "add", watching_add)
    fast = closure_stream(y, dev, n, seed=0, kind=kind)
    assert any(became_full)  # the shortcut was taken
    monkeypatch.setattr(protocol._PendingQueue, "full", property(lambda self: False))
    exhaustive = closure_stream(y, dev, n, seed=0, kind=kind)
    assert np.array_equal(fast.constraints, exhaustive.constraints)
    assert np.array_equal(fast.is_seed, exhaustive.is_seed)


# ---------------------------------------------------------------------------- random protocol
def test_random_triplets_are_valid_iid_draws_from_dev(digits_split):
    y, dev, _ = digits_split
    c = random_triplets(y, dev, 3000, seed=0)
    assert c.shape == (3000, 3) and c.dtype == np.int64
    assert (y[c[:, 0]] == y[c[:, 1]]).all() and (y[c[:, 0]] != y[c[:, 2]]).all()
    assert (c[:, 0] != c[:, 1]).all() and np.isin(c, dev).all()
    # Uniform anchors: every class appears, none dominates (each ~10%).
    share = np.bincount(y[c[:, 0]], minlength=10) / 3000
    assert share.min() > 0.06 and share.max() < 0.14
    assert np.array_equal(c, random_triplets(y, dev, 3000, seed=0))


def test_random_pairs_flag_same_class(digits_split):
    y, dev, _ = digits_split
    pairs, similar = random_pairs(y, dev, 2000, seed=0)
    assert (pairs[:, 0] != pairs[:, 1]).all() and np.isin(pairs, dev).all()
    assert np.array_equal(similar, y[pairs[:, 0]] == y[pairs[:, 1]])
    assert 0.05 < similar.mean() < 0.15


# ---------------------------------------------------------------------------- errors
def test_triplets_need_two_classes_with_a_positive():
    with pytest.raises(ValueError, match="labels: triplets need a class with at least 2"):
        random_triplets(np.array([0, 1, 2, 3]), np.arange(4), 5, seed=0)
    with pytest.raises(ValueError, match="labels: triplets need"):
        triplet_stream(np.zeros(5, dtype=int), np.arange(5), 5, seed=0)


def test_bad_arguments_name_the_field():
    y = np.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match="dev_idx: indices must lie in"):
        triplet_stream(y, np.array([0, 9]), 4, seed=0)
    with pytest.raises(ValueError, match="dev_idx: indices must be distinct"):
        triplet_stream(y, np.array([0, 0, 2]), 4, seed=0)
    with pytest.raises(ValueError, match="n_constraints: must be an integer >= 0"):
        triplet_stream(y, np.arange(4), -1, seed=0)
    with pytest.raises(ValueError, match=r"kind: expected 'triplet' or 'pair', got 'pairs'$"):
        closure_stream(y, np.arange(4), 4, seed=0, kind="pairs")
    # Quadruplets are a kind of constraint, but not one closure derives.
    with pytest.raises(
        ValueError, match=r"got 'quadruplet' \(quadruplets come from a label hierarchy"
    ):
        closure_stream(y, np.arange(4), 4, seed=0, kind="quadruplet")


def test_a_closure_stream_longer_than_the_labels_allow_is_refused() -> None:
    labels = np.array([0, 0, 1])  # two distinct triplets: (0, 1, 2) and (1, 0, 2)
    assert len(closure_stream(labels, np.arange(3), 2, seed=0, kind="triplet").constraints) == 2
    with pytest.raises(ValueError, match="labels allow 2 distinct triplets, asked for 3"):
        closure_stream(labels, np.arange(3), 3, seed=0, kind="triplet")
