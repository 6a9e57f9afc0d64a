"""The query engine answers an item the same whatever requests wait beside it: one request of
many items and the same items asked one by one get the same labels, positions and scores, to the
bit, from one snapshot."""

from __future__ import annotations

import numpy as np
import pytest

from oahu.persistence import learner_to_bytes
from oahu.registry import make_learner
from oahu.service.catalog import Catalog
from oahu.service.item_store import ItemStore
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving.queries import QueryEngine, embed_each
from oahu.service.serving.snapshot import SnapshotPublisher

N_FEATURES = 784  # images' width: products large enough for BLAS to pick other kernels by shape


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    rng = np.random.default_rng(3)
    items = rng.random((600, N_FEATURES), dtype=np.float32)
    labels = rng.integers(0, 5, len(items))
    learner = make_learner("oahu", N_FEATURES, seed=3)
    learner.prepare(items)
    learner.learn("triplet", items[rng.integers(0, len(items), (300, 3))])
    gallery = ItemStore(dim=N_FEATURES)
    gallery.add([str(i) for i in range(len(items))], items, y=labels)
    overlay = tmp_path_factory.mktemp("catalog") / "overlay.npz"
    catalog = Catalog(ItemStore(dim=N_FEATURES), gallery, overlay)
    publisher = SnapshotPublisher(catalog, ServiceMetrics())
    publisher.start()
    publisher.submit(learner_to_bytes(learner))
    assert publisher.wait_for(1, timeout=60)
    queries = QueryEngine(publisher)
    queries.start()
    yield queries, rng.random((64, N_FEATURES), dtype=np.float32), learner
    queries.stop()
    publisher.stop()


@pytest.mark.parametrize(("op", "param"), [("classify", 5), ("retrieve", 7), ("embed", None)])
def test_an_item_gets_the_same_answer_alone_as_in_a_batch(engine, op, param):
    queries, x, _ = engine
    together, snap = queries.submit(op, x, param).result(timeout=60)
    for i in range(len(x)):
        alone, snap_alone = queries.submit(op, x[i : i + 1], param).result(timeout=60)
        assert snap_alone.version == snap.version
        if op == "embed":
            np.testing.assert_array_equal(alone, together[:, i : i + 1])
            continue
        for key, value in alone.items():
            if key != "classes":
                np.testing.assert_array_equal(value, together[key][i : i + 1], err_msg=key)


def test_verify_scores_a_pair_alone_as_in_a_batch(engine):
    queries, x, _ = engine
    pairs = np.stack([x[:32], x[32:]])
    together, _ = queries.submit("verify", pairs, 0.5).result(timeout=60)
    for i in range(0, 32, 5):
        alone, _ = queries.submit("verify", pairs[:, i : i + 1], 0.5).result(timeout=60)
        for key in ("similar", "vote", "score"):
            np.testing.assert_array_equal(alone[key], together[key][i : i + 1], err_msg=key)


def test_items_embedded_each_on_its_own_match_the_batch_within_rounding(engine):
    _, x, learner = engine
    each = embed_each(learner, x)
    assert each.shape == (learner.n_depths, len(x), learner.embed(x[:1]).shape[2])
    np.testing.assert_allclose(each, learner.embed(x), rtol=1e-5, atol=1e-6)
    assert embed_each(learner, x[:0]).shape == (learner.n_depths, 0, each.shape[2])
