"""Mining ranked on the device (oahu.learners.oahu.device_mining): the host's constraint graph
draws the anchors and candidates, the device ranks them; run on the CPU with the same torch code
as on a GPU, and checked against the host's own mining."""

from __future__ import annotations

import copy

import numpy as np
import torch

from oahu.learners.oahu.constraint_graph import ConstraintGraph
from oahu.learners.oahu.device_mining import DeviceMining

CPU = torch.device("cpu")


def _graph(seed: int = 0, n: int = 400) -> ConstraintGraph:
    """A graph that has seen triplets of 5 classes of 60 items, with unit embeddings."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, 60)
    items = rng.normal(size=(60, 4)).astype(np.float32)
    embeddings = rng.normal(size=(60, 2, 6)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=-1, keepdims=True)
    graph = ConstraintGraph(32, 4, 2, 6, np.random.default_rng(seed + 1), knowledge=100)
    for _ in range(n):
        a = rng.integers(0, 60)
        p = rng.choice(np.flatnonzero(labels == labels[a]))
        q = rng.choice(np.flatnonzero(labels != labels[a]))
        graph.observe(items[[a, p, q]][None], embeddings[[a, p, q]].transpose(1, 0, 2)[:, :, None])
    return graph


def test_device_ranking_mines_what_the_host_mines():
    # The same draws (the graph's generator, in the same order), ranked by numpy on the host
    # and by torch here: the same anchors, in the order they were drawn, and the same nearest
    # positives and negatives, up to float rounding between the two products (another item
    # as near, within it, may be chosen on another machine's kernels).
    graph = _graph()
    host = copy.deepcopy(graph)
    alpha = np.array([0.3, 0.7])
    _, expected = host.mine(64, alpha, candidates=8)
    mining = DeviceMining(graph, mined_rows=64, device=CPU, pinned=False)
    mining.mirror(graph)
    mining.mine(graph, np.arange(64), torch.tensor(alpha, dtype=torch.float32), candidates=8)
    found = mining.slots[:64][mining.valid[:64]].numpy()
    assert len(expected) > 20
    np.testing.assert_array_equal(found[:, 0], expected[:, 0])
    queries = (graph.embeddings[found[:, 0]] * alpha[:, None]).reshape(len(found), -1)
    for role in (1, 2):
        near_found, near_expected = (
            (graph.embeddings[t[:, role]].reshape(len(t), -1) * queries).sum(1)
            for t in (found, expected)
        )
        np.testing.assert_allclose(near_found, near_expected, atol=1e-5)
    assert (found == expected).mean() > 0.95
    np.testing.assert_array_equal(mining.mined[:64][mining.valid[:64]].numpy(), graph.rows[found])
    np.testing.assert_array_equal(
        mining.mined_keys[:64][mining.valid[:64]].numpy(), graph.keys[found]
    )


def test_triplets_go_to_the_rows_they_are_sent_to():
    graph = _graph(seed=3)
    mining = DeviceMining(graph, mined_rows=40, device=CPU, pinned=False)
    mining.mirror(graph)
    into = np.arange(20) * 2 + 1  # the odd rows
    mining.mine(graph, into, torch.ones(2), candidates=8)
    valid = mining.valid[:40].numpy()
    assert valid.any() and not valid[::2].any()


def test_a_refresh_writes_only_where_the_slot_holds_the_mined_item():
    graph = _graph(seed=5)
    mining = DeviceMining(graph, mined_rows=2, device=CPU, pinned=False)
    mining.mirror(graph)
    slots = torch.tensor([[0, 1, 2], [3, 4, 5]])
    keys = mining.keys[slots.view(-1)].view(2, 3).clone()
    keys[1, 2] += 1  # slot 5 holds another item by now
    f = torch.full((2, 3, 2, 6), 7.0)  # (depths, roles, rows, E)
    before = mining.embeddings.clone()
    mining.refresh(slots, keys, torch.tensor([True, True]), f)
    assert bool((mining.embeddings[:5] == 7.0).all())
    assert torch.equal(mining.embeddings[5:32], before[5:32])
    mining.refresh(
        slots,
        mining.keys[slots.view(-1)].view(2, 3),
        torch.tensor([False, False]),
        torch.zeros_like(f),
    )
    assert bool((mining.embeddings[:5] == 7.0).all())  # rows not learned: nothing written


def test_written_slots_and_a_restored_graph_reach_the_device():
    graph = _graph(seed=7)
    mining = DeviceMining(graph, mined_rows=2, device=CPU, pinned=False)
    mining.mirror(graph)
    graph.rows[3] = 9.0
    graph.embeddings[3] = 0.5
    mining.written(graph, np.array([3]))
    assert bool((mining.rows[3] == 9.0).all()) and bool((mining.embeddings[3] == 0.5).all())
    assert mining.mirrored == (id(graph), graph.restores)
    graph.set_state(_graph(seed=8).get_state())  # a checkpoint restored in place
    assert mining.mirrored != (id(graph), graph.restores)  # stale: mirror again before use
