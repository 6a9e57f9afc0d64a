"""The revealed constraint graph: transitive knowledge, bounded memory, mining, checkpoints."""

import copy

import numpy as np
import pytest

from oahu.learners.oahu import graph_mining
from oahu.learners.oahu.constraint_graph import ConstraintGraph
from oahu.learners.oahu.graph_mining import KEPT_SCANS, RUN_ANCHORS
from oahu.learners.oahu.item_keys import row_keys


def graph(capacity: int = 64, seed: int = 0) -> ConstraintGraph:
    return ConstraintGraph(capacity, 1, 1, 2, np.random.default_rng(seed))


def observe(g: ConstraintGraph, *triplets: tuple[float, float, float]) -> None:
    """Items are 1-d points v; their (unit, as OAHU's) embedding is the point at angle v/20, so
    that embedding distances grow with |v − v'| over the values used here."""
    rows = np.asarray(triplets, dtype=np.float32)[:, :, None]
    angle = rows[:, :, 0].T / 20.0  # (3, n)
    embeddings = np.stack([np.cos(angle), np.sin(angle)], axis=-1)[None]  # (1, 3, n, 2)
    g.observe(rows, embeddings.astype(np.float32))


def component(g: ConstraintGraph, value: float) -> int:
    return int(g.component[g.slot_of[int(row_keys(np.float32([[value]]))[0])]])


def test_similarity_is_transitive_and_dissimilarity_spreads_to_components() -> None:
    g = graph()
    observe(g, (1, 2, 10), (2, 3, 11), (20, 21, 3))
    assert component(g, 1) == component(g, 2) == component(g, 3)
    assert component(g, 20) == component(g, 21) != component(g, 1)
    ones, tens, twenties = component(g, 1), component(g, 10), component(g, 20)
    assert g.links[ones] == {tens, component(g, 11), twenties}
    assert (g.size, g.n_components, g.n_links) == (7, 4, 3)


def test_contradictions_are_counted_and_not_applied() -> None:
    g = graph()
    observe(g, (1, 2, 3), (1, 3, 4))  # says 1 ~ 3, but 3 was revealed dissimilar to 1's group
    assert component(g, 1) != component(g, 3) and g.contradictions == 1
    observe(g, (5, 6, 6))  # a triplet whose negative is its positive
    assert g.contradictions == 2


def test_mining_takes_the_nearest_known_positive_and_the_nearest_known_negative() -> None:
    g = graph()
    # Class "low" near 0 (one of them close to class "high"), class "high" near 10.
    observe(g, (0.0, 0.5, 10.0), (0.5, 6.0, 10.5), (10.0, 9.0, 0.0), (9.0, 11.0, 6.0))
    triplets, slots = g.mine(200, alpha=np.ones(1), candidates=64)
    assert len(triplets) > 0 and np.array_equal(triplets[:, :, 0], g.rows[slots][:, :, 0])
    anchors, positives, negatives = triplets[:, 0, 0], triplets[:, 1, 0], triplets[:, 2, 0]
    low = anchors < 7
    assert ((positives < 7) == low).all() and ((negatives < 7) != low).all()
    # The nearest known negative of 0.5 is 9.0 (not 10 or 10.5); of 9.0 it is 6.0.
    assert set(negatives[anchors == 0.5].tolist()) == {9.0}
    assert set(negatives[anchors == 9.0].tolist()) == {6.0}
    # The nearest known positive of 6.0 is 0.5.
    assert set(positives[anchors == 6.0].tolist()) == {0.5}


def test_nothing_to_mine_without_positives_and_links() -> None:
    g = graph()
    assert g.mine(5, np.ones(1), 8)[0].shape == (0, 3, 1)
    observe(g, (1, 2, 3))
    assert len(g.mine(50, np.ones(1), 8)[0]) > 0  # 1 and 2 have each other and 3


def test_memory_is_bounded_and_knowledge_outlives_the_reservoir() -> None:
    g = ConstraintGraph(4, 1, 1, 2, np.random.default_rng(1), knowledge=16)
    rng = np.random.default_rng(0)
    for _ in range(500):
        observe(g, tuple(rng.integers(0, 10_000, size=3).astype(float)))
    assert g.size == 4 and len(g.slot_of) == 4
    assert len(g.known) == 16 and sum(g.count.values()) == 16
    # Held items are always known, and the links join components that are still known.
    assert set(g.slot_of) <= set(g.known)
    roots = {g._find(c) for c in g.known.values()}
    assert set(g.links) <= roots and all(linked <= roots for linked in g.links.values())
    # A chain of similar items joins one component although the reservoir holds few of them.
    chain = ConstraintGraph(2, 1, 1, 2, np.random.default_rng(0), knowledge=100)
    for v in range(30):
        observe(chain, (float(v), float(v + 1), 1000.0 + v))
    keys = row_keys(np.arange(31, dtype=np.float32)[:, None]).tolist()
    assert len({chain._find(chain.known[key]) for key in keys}) == 1


def test_the_least_recently_mentioned_items_are_forgotten_first() -> None:
    g = ConstraintGraph(2, 1, 1, 2, np.random.default_rng(0), knowledge=6)
    observe(g, (1, 2, 3), (4, 5, 6))
    observe(g, (1, 7, 8))  # mentions 1 again: 2 and 3 are now the oldest
    key = {v: int(row_keys(np.float32([[v]]))[0]) for v in range(1, 9)}
    kept = set(g.known)
    assert key[1] in kept and len(kept) == 6
    forgotten = {v for v in (2, 3) if key[v] not in kept and key[v] not in g.slot_of}
    assert forgotten  # 8 items mentioned, 6 remembered: the oldest not held went first


def test_state_round_trip_mines_identically() -> None:
    a = graph(capacity=32, seed=2)
    rng = np.random.default_rng(5)
    for _ in range(60):
        observe(a, tuple(rng.integers(0, 40, size=3).astype(float)))
    # Saving renumbers the components; what is mined must not depend on their numbers.
    unsaved = copy.deepcopy(a)
    b = graph(capacity=32, seed=2)
    b.set_state(a.get_state())
    b.rng.bit_generator.state = a.rng.bit_generator.state
    assert sorted(unsaved.members) != sorted(b.members)
    assert (b.size, b.n_components, b.n_links, b.contradictions) == (
        a.size,
        a.n_components,
        a.n_links,
        a.contradictions,
    )
    assert np.array_equal(unsaved.mine(20, np.ones(1), 8)[1], b.mine(20, np.ones(1), 8)[1])


def test_row_keys_are_stable_across_calls_and_processes() -> None:
    rows = np.float32([[0.25, -1.5, 3.0]])
    # Fixed multipliers: this value is the same in every process and run (checkpoints rely on it).
    assert row_keys(rows).tolist() == [4845948736360153088]
    assert row_keys(np.float32([[0.25, -1.5, 3.0]])).dtype == np.int64


def test_capacity_must_be_positive_and_leave_a_triplet_room_beside_the_held_items() -> None:
    with pytest.raises(ValueError, match="capacity"):
        graph(capacity=0)
    with pytest.raises(ValueError, match=r"at most knowledge - 3 \(61\), got 62"):
        ConstraintGraph(62, 1, 1, 2, np.random.default_rng(0), knowledge=64)
    # At the tightest bound every item is held but the three of the triplet being learned, and
    # a stream of new items still learns without forgetting one of them before it is linked.
    tight = ConstraintGraph(61, 1, 1, 2, np.random.default_rng(0), knowledge=64)
    for v in range(0, 600, 3):
        observe(tight, (float(v), float(v + 1), float(v + 2)))
    assert tight.size == 61 and len(tight.known) == 64


@pytest.mark.parametrize("per_call", [1, 3])
def test_an_item_keeps_the_embedding_of_its_latest_mention(per_call: int) -> None:
    """Within one call (a micro-batch) and across calls alike, whatever order the copies take."""
    g = graph()
    rows = np.float32([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [0.0, 4.0, 5.0]])[:, :, None]
    embeddings = np.arange(3 * 3 * 2, dtype=np.float32).reshape(1, 3, 3, 2)  # (depth, role, n, E)
    for start in range(0, 3, per_call):
        stop = start + per_call
        g.observe(rows[start:stop], embeddings[:, :, start:stop])
    slot = g.slot_of[int(row_keys(np.float32([[0.0]]))[0])]
    # Item 0.0 is the anchor of triplets 0 and 2 and the positive of triplet 1: triplet 2 last.
    assert g.embeddings[slot, 0].tolist() == embeddings[0, 0, 2].tolist()
    slot = g.slot_of[int(row_keys(np.float32([[1.0]]))[0])]  # positive of 0, anchor of 1
    assert g.embeddings[slot, 0].tolist() == embeddings[0, 0, 1].tolist()


@pytest.mark.parametrize("per_call", [2, 5, 64])
@pytest.mark.parametrize("knowledge", [200_000, 40])
def test_a_micro_batch_holds_what_one_triplet_at_a_time_holds(
    per_call: int, knowledge: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of more than a few triplets are learned phase by phase and write their held rows
    and embeddings in one step (the last mention of a slot wins); with a reservoir of 16 among
    ~100 items, slots change hands within a block, and everything held, known, linked and drawn
    matches triplets fed one by one. With knowledge of 40 items, old items are forgotten and
    components renumbered along the way, and blocks where that happens are learned in order."""
    rng = np.random.default_rng(5)
    values = rng.integers(0, 100, size=(300, 3)).astype(np.float32)
    rows = values[:, :, None]
    embeddings = rng.normal(size=(1, 3, 300, 2)).astype(np.float32)

    def new() -> ConstraintGraph:
        return ConstraintGraph(16, 1, 1, 2, np.random.default_rng(9), knowledge=knowledge)

    one, batched = new(), new()
    as_block = []
    observe_block = ConstraintGraph._observe_block
    monkeypatch.setattr(
        ConstraintGraph,
        "_observe_block",
        lambda g, flat: as_block.append(len(flat)) or observe_block(g, flat),
    )
    for i in range(300):
        one.observe(rows[i : i + 1], embeddings[:, :, i : i + 1])
    for start in range(0, 300, per_call):
        stop = start + per_call
        batched.observe(rows[start:stop], embeddings[:, :, start:stop])
        assert batched.held_links == _held_links_as_derived(batched), f"after {stop}"
    assert batched.size == one.size == 16 and batched.seen == one.seen
    assert np.array_equal(batched.keys, one.keys) and np.array_equal(batched.rows, one.rows)
    assert np.array_equal(batched.embeddings, one.embeddings)
    assert np.array_equal(batched.component, one.component)
    assert list(batched.known.items()) == list(one.known.items())  # recency order too
    assert batched.links == one.links and batched.count == one.count
    assert batched.members == one.members and batched.held_links == one.held_links
    assert batched.contradictions == one.contradictions > 0
    assert batched.rng.integers(0, 2**32) == one.rng.integers(0, 2**32)
    # Blocks of 4 or more were learned phase by phase where they could forget nothing: with
    # knowledge of 40, the first two blocks of 5 (15 mentions each, at most 30 items known).
    blocks = 300 // per_call + (300 % per_call > 0)
    expected = {(2, 200_000): 0, (5, 200_000): blocks, (64, 200_000): blocks, (5, 40): 2}
    assert len(as_block) == expected.get((per_call, knowledge), 0)
    if knowledge == 40:
        assert len(one.known) == 40  # items were forgotten


def test_a_generator_draws_an_array_of_bounds_as_one_call_per_bound() -> None:
    """What observing a block relies on to draw the reservoir's slots for the whole block."""
    bounds = np.arange(5, 3000) ** 2
    one, at_once = np.random.default_rng(7), np.random.default_rng(7)
    by_one = [int(one.integers(0, bound)) for bound in bounds.tolist()]
    assert at_once.integers(0, bounds).tolist() == by_one
    assert at_once.integers(0, 2**62) == one.integers(0, 2**62)


def test_every_run_draws_its_candidates_as_a_call_per_pool_would() -> None:
    """Mining makes the candidate draws of all its runs in one call; each pool larger than
    ``candidates`` gets the draws a call of its own, in order, would have given it, and a smaller
    pool is taken whole without a draw."""
    pools = [
        (np.arange(n_pos) * 3, np.arange(n_neg) * 5 + 1)
        for n_pos, n_neg in [(300, 40), (9, 9), (1000, 5000), (10, 11), (2, 700)]
    ]
    g = graph(capacity=8, seed=5)
    reference = np.random.default_rng(5)
    drawn = g._draw(pools, candidates=10)
    for (positives, negatives), (got_pos, got_neg) in zip(pools, drawn, strict=True):
        for pool, got in ((positives, got_pos), (negatives, got_neg)):
            if len(pool) > 10:
                assert np.array_equal(got, pool[reference.integers(0, len(pool), size=10)])
            else:
                assert got is pool
    assert g.rng.bit_generator.state == reference.bit_generator.state
    small = pools[1:2]
    assert g._draw(small, candidates=10) is small  # nothing to draw: no call
    assert g._draw(pools, candidates=0) is pools  # 0: every item is a candidate
    assert g.rng.bit_generator.state == reference.bit_generator.state


class _ScanningAfresh(ConstraintGraph):
    """Mining as it was before scans were kept: every run scans the held items."""

    def _scan(self, own, linked, held):
        return np.flatnonzero(held == own), np.flatnonzero(self._linked_mask(linked, held))


@pytest.mark.parametrize(
    "capacity, knowledge, kept_at_most",
    [
        (8, 24, KEPT_SCANS),
        (32, 64, KEPT_SCANS),
        (64, 400, KEPT_SCANS),
        (200, 400, KEPT_SCANS),
        (200, 400, 2),
    ],
)
def test_kept_scans_mine_what_scanning_afresh_mines(
    capacity: int, knowledge: int, kept_at_most: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A component's scanned positives and negatives are kept until something held moves:
    through holds, releases, merges, new links, forgetting, compaction and a checkpoint, mining
    with them takes the triplets and draws that scanning every time takes; with room for fewer
    components than it draws, it forgets the oldest and stays within the bound."""
    monkeypatch.setattr(graph_mining, "KEPT_SCANS", kept_at_most)
    kept = ConstraintGraph(capacity, 1, 1, 2, np.random.default_rng(9), knowledge=knowledge)
    fresh = _ScanningAfresh(capacity, 1, 1, 2, np.random.default_rng(9), knowledge=knowledge)
    rng = np.random.default_rng(10)
    reused = 0
    for i in range(600):
        triplet = tuple(rng.integers(0, 80, size=3).astype(float))
        observe(kept, triplet)
        observe(fresh, triplet)
        for _ in range(int(rng.integers(0, 3))):  # mining between observations, often
            revision, scans = kept.held_revision, len(kept._scans)
            k = int(rng.integers(1, 6))
            got, want = kept.take(k, np.ones(1), 4, 8), fresh.take(k, np.ones(1), 4, 8)
            assert np.array_equal(got[1], want[1]), f"after triplet {i}"
            assert len(kept._scans) <= kept_at_most
            reused += revision == kept._scans_revision and scans > 0
        if i % 150 == 149:  # a checkpoint renumbers the components
            kept.set_state(kept.get_state())
            fresh.set_state(fresh.get_state())
    assert kept.rng.bit_generator.state == fresh.rng.bit_generator.state
    assert reused > 0  # the kept scans were used, not only rebuilt


def _held_links_as_derived(g: ConstraintGraph) -> dict[int, set[int]]:
    return {root: {o for o in g.links.get(root, ()) if o in g.members} for root in g.members}


@pytest.mark.parametrize("capacity, knowledge", [(4, 16), (16, 40), (61, 64)])
def test_the_links_mining_uses_are_the_links_between_held_components(
    capacity: int, knowledge: int
) -> None:
    """Held links are kept up to date through holds, releases, merges, forgetting and
    compaction: at every step they are exactly the links between components with held items."""
    g = ConstraintGraph(capacity, 1, 1, 2, np.random.default_rng(3), knowledge=knowledge)
    rng = np.random.default_rng(4)
    for i in range(400):
        observe(g, tuple(rng.integers(0, 60, size=3).astype(float)))
        assert g.held_links == _held_links_as_derived(g), f"after triplet {i}"
        assert set(g.members) == set(g.component[: g.size].tolist())
    restored = ConstraintGraph(capacity, 1, 1, 2, np.random.default_rng(3), knowledge=knowledge)
    restored.set_state(g.get_state())
    assert restored.held_links == _held_links_as_derived(restored) == g.held_links


def test_a_strict_step_takes_triplets_mined_ahead_and_drops_those_whose_items_left() -> None:
    g = graph(capacity=64, seed=1)
    rng = np.random.default_rng(6)
    for _ in range(40):
        observe(g, tuple(rng.integers(0, 30, size=3).astype(float)))
    rows, slots = g.take(2, np.ones(1), 8, 32)
    assert len(slots) == 2 and np.array_equal(rows, g.rows[slots])
    # One draw of 32 anchors served this take; the rest wait, and the next takes draw nothing
    # from the generator until they run out.
    waiting = len(g.waiting)
    assert 2 <= waiting <= 30
    state = g.rng.bit_generator.state
    _, second = g.take(2, np.ones(1), 8, 32)
    assert len(second) == 2
    assert g.rng.bit_generator.state == state and len(g.waiting) == waiting - 2
    # A waiting triplet whose item's slot now holds another item is not learned.
    g.waiting_keys[0, 1] += 1  # as if its positive's slot had been given to another item
    _, third = g.take(1, np.ones(1), 8, 32)
    assert len(third) == 0
    # Waiting triplets survive a checkpoint.
    restored = graph(capacity=64, seed=1)
    restored.set_state(g.get_state())
    assert np.array_equal(restored.waiting, g.waiting)
    assert np.array_equal(restored.waiting_keys, g.waiting_keys)


@pytest.mark.parametrize("ahead", [8, 32, 128])
def test_mining_further_ahead_draws_anchors_less_often(ahead: int) -> None:
    """Strict updates taking two triplets each draw anchors (and scan, draw and gather
    candidates) once per ``ahead`` anchors, and take two every time."""
    g = graph(capacity=64, seed=1)
    rng = np.random.default_rng(6)
    for _ in range(40):
        observe(g, tuple(rng.integers(0, 30, size=3).astype(float)))
    draws, state = 0, g.rng.bit_generator.state
    for _ in range(64):
        _, slots = g.take(2, np.ones(1), 8, ahead)
        assert len(slots) == 2
        draws += g.rng.bit_generator.state != state
        state = g.rng.bit_generator.state
    # 128 triplets: a draw of ``ahead`` anchors gives at most ``ahead`` of them, and here at
    # least half (an anchor with no held similar item gives none).
    assert 128 // ahead <= draws <= 2 * 128 // ahead


def test_anchors_of_one_component_share_a_draw_of_candidates_in_groups_of_run_anchors() -> None:
    """A micro-batch mines hundreds of triplets from one component; each RUN_ANCHORS of its
    anchors draw their own candidates, so they do not all meet the same few."""
    g = graph(capacity=256, seed=4)
    rng = np.random.default_rng(8)
    low, high = np.arange(0.0, 50.0), np.arange(100.0, 150.0)  # two classes, far apart
    for _ in range(300):
        observe(g, (rng.choice(low), rng.choice(low), rng.choice(high)))
        observe(g, (rng.choice(high), rng.choice(high), rng.choice(low)))
    assert g.n_components == 2
    triplets, _ = g.mine(320, np.ones(1), candidates=4)
    assert len(triplets) == 320
    # With one draw of 4 candidates per component, at most 4 negatives per class could appear.
    negatives_of_low = {float(v) for v in triplets[triplets[:, 0, 0] < 75][:, 2, 0]}
    assert 4 < len(negatives_of_low) <= 4 * -(-320 // RUN_ANCHORS)


def test_a_reservoir_that_grows_fills_its_new_slots_then_samples_with_the_larger_k() -> None:
    g = ConstraintGraph(6, 1, 1, 2, np.random.default_rng(0), held=3)
    assert (g.capacity, g.held_limit, g.rows.shape) == (6, 3, (6, 1))
    observe(g, (1, 2, 30), (3, 4, 31), (5, 6, 32))  # nine distinct items, three held
    assert g.size == 3 and g.seen == 9
    g.hold_up_to(5)
    observe(g, (7, 8, 33))  # the next items not held take the free slots first
    assert g.size == 5 and g.seen == 12
    for value in (7, 8):
        assert g.slot_of[int(row_keys(np.float32([[value]]))[0])] in (3, 4)
    g.hold_up_to(2)  # never shrinks
    g.hold_up_to(99)  # never past the slots it has
    assert g.held_limit == 6
    state = g.get_state()
    again = ConstraintGraph(6, 1, 1, 2, np.random.default_rng(0), held=3)
    again.set_state(state)
    assert again.held_limit == 6 and again.size == g.size
    del state["held_limit"]  # saved before reservoirs grew: they held their capacity
    older = ConstraintGraph(6, 1, 1, 2, np.random.default_rng(0), held=3)
    older.set_state(state)
    assert older.held_limit == 6


def test_the_held_limit_is_checked() -> None:
    with pytest.raises(ValueError, match="held: must be an integer >= 1, got 0"):
        ConstraintGraph(6, 1, 1, 2, np.random.default_rng(0), held=0)
