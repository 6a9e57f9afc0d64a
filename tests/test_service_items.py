"""The service's item store (features by id), the catalog's lookup and start-up items, and
resolving constraints to feature vectors."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from oahu.connectors.constraint import MISSING_LABEL
from oahu.connectors.messages import Constraint, DecodeError, decode_batch, encode_binary
from oahu.service.catalog import Catalog, base_items
from oahu.service.config import ServiceConfig
from oahu.service.item_store import ItemStore
from oahu.service.learning.resolve import resolve_batch
from oahu.streams.stream_file import ConstraintStream, write_jsonl


def labels(store: ItemStore, ids: list[str]) -> list[int]:
    """The stored labels of ``ids``, read from a snapshot of everything."""
    stored_ids, _, y = store.snapshot()
    return [int(y[stored_ids.index(i)]) for i in ids]


def test_add_get_labels_and_version() -> None:
    store = ItemStore()
    assert store.dim is None and store.version == 0 and len(store) == 0
    store.add(["a", "b", 7], [[1, 2], [3, 4], [5, 6]], y=[0, 1, 2])
    assert store.dim == 2 and store.version == 1 and len(store) == 3
    assert "7" in store and 7 in store and "c" not in store
    assert store.get([7, "a"]).tolist() == [[5.0, 6.0], [1.0, 2.0]]
    assert labels(store, ["b"]) == [1]
    store.add("c", [9, 9])  # one id, one vector, no label
    assert store.version == 2
    assert labels(store, ["c"]) == [MISSING_LABEL]
    store.add(["a"], [[0, 0]], y=[5])  # replacing an id keeps the count
    assert store.version == 3 and len(store) == 4
    assert store.get("a").tolist() == [[0.0, 0.0]] and labels(store, ["a"]) == [5]


def test_get_returns_a_copy() -> None:
    store = ItemStore(dim=1)
    store.add(["a"], [[1.0]])
    got = store.get(["a"])
    got[0, 0] = 99.0
    assert store.get(["a"]).tolist() == [[1.0]]


def test_remove_keeps_the_others_and_is_all_or_nothing() -> None:
    store = ItemStore(dim=1)
    store.add([str(i) for i in range(6)], np.arange(6.0)[:, None], y=np.arange(6) * 10)
    store.remove(["1", "4"])
    assert len(store) == 4 and store.version == 2
    ids, X, y = store.snapshot()
    assert ids == ["0", "2", "3", "5"]
    assert X[:, 0].tolist() == [0.0, 2.0, 3.0, 5.0] and y.tolist() == [0, 20, 30, 50]
    assert store.get(["5", "0"]).ravel().tolist() == [5.0, 0.0]
    with pytest.raises(DecodeError) as info:
        store.remove(["2", "nope"])
    assert info.value.reason == "unknown_item"
    assert len(store) == 4 and store.version == 2  # nothing removed, no version bump


def test_growth_beyond_initial_capacity() -> None:
    store = ItemStore(dim=3)
    for start in range(0, 1000, 100):
        ids = np.arange(start, start + 100)
        store.add(ids, np.repeat(ids[:, None], 3, axis=1))
    assert len(store) == 1000 and store.version == 10
    np.testing.assert_array_equal(store.get([999, 0, 512])[:, 1], [999, 0, 512])


@pytest.mark.parametrize(
    "X, reason",
    [
        ([[1.0, 2.0, 3.0]], "bad_dimension"),  # store has dim 2
        ([1.0, 2.0, 3.0, 4.0], "bad_dimension"),
        ([[1.0, np.nan]], "non_finite"),
        ([[np.inf, 0.0]], "non_finite"),
    ],
)
def test_add_validates_features(X: list, reason: str) -> None:
    store = ItemStore(dim=2)
    with pytest.raises(DecodeError) as info:
        store.add(["a"], X)
    assert info.value.reason == reason
    assert len(store) == 0 and store.version == 0


def test_add_rejects_bad_ids_and_labels() -> None:
    store = ItemStore(dim=1)
    with pytest.raises(ValueError, match="duplicate"):
        store.add(["a", "a"], [[1.0], [2.0]])
    with pytest.raises(ValueError, match="y"):
        store.add(["a", "b"], [[1.0], [2.0]], y=[1])
    with pytest.raises(ValueError, match="dim: must be an integer >= 1, got 0"):
        ItemStore(dim=0)


def test_get_unknown_ids() -> None:
    store = ItemStore(dim=1)
    store.add(["a"], [[1.0]])
    with pytest.raises(DecodeError) as info:
        store.get(["a", "b"])
    assert info.value.reason == "unknown_item" and "'b'" in info.value.detail
    X, found = store.get_many(["b", "a"])
    assert found.tolist() == [False, True] and X.tolist() == [[0.0], [1.0]]


def test_concurrent_writers_and_readers() -> None:
    """Readers always see rows consistent with their id while a writer keeps adding."""
    store = ItemStore(dim=4)
    store.add([0], np.zeros((1, 4)))
    n_batches, batch = 200, 10
    errors: list[str] = []

    def writer() -> None:
        for b in range(n_batches):
            ids = np.arange(1 + b * batch, 1 + (b + 1) * batch)
            store.add(ids, np.repeat(ids[:, None], 4, axis=1).astype(np.float32))

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(500):
            n = len(store)
            ids = rng.integers(0, n, 8)
            X = store.get(ids)
            if not (X == ids[:, None]).all():
                errors.append(f"ids {ids.tolist()} gave {X[:, 0].tolist()}")

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(s,)) for s in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store) == 1 + n_batches * batch and store.version == 1 + n_batches


def test_save_load_round_trip(tmp_path) -> None:
    store = ItemStore(dim=2)
    store.add(["x", "y"], [[1, 2], [3, 4]], y=[1, MISSING_LABEL])
    store.save(tmp_path / "items.npz")
    loaded = ItemStore.load(tmp_path / "items.npz")
    assert loaded.snapshot()[0] == ["x", "y"]
    np.testing.assert_array_equal(loaded.get(["y", "x"]), [[3, 4], [1, 2]])
    assert labels(loaded, ["x", "y"]) == [1, MISSING_LABEL]


def small_stream() -> ConstraintStream:
    X = np.arange(12, dtype=np.float32).reshape(6, 2)
    return ConstraintStream(
        X,
        y=[0, 0, 1, 1, 2, 2],
        dev_idx=[0, 1, 2, 3],
        test_idx=[4, 5],
        kind="triplet",
        constraints=[[0, 1, 2], [3, 2, 1]],
    )


# ---------------------------------------------------------------------- the catalog
def test_the_catalog_looks_ids_up_in_the_store_then_the_gallery(tmp_path) -> None:
    items, gallery = ItemStore(dim=2), ItemStore(dim=2)
    items.add(["both", "item"], [[1, 1], [2, 2]])
    gallery.add(["both", "gallery-only"], [[9, 9], [3, 3]], y=[0, 1])
    catalog = Catalog(items, gallery, tmp_path / "overlay.npz")
    X, found = catalog.lookup(["gallery-only", "nobody", "both", 17])
    assert found.tolist() == [True, False, True, False]
    assert X.tolist() == [[3, 3], [0, 0], [1, 1], [0, 0]]  # the store's "both", not the gallery's
    catalog.remove(["both"])
    X, found = catalog.lookup(["both", "item"])
    assert found.tolist() == [False, True] and X.tolist() == [[0, 0], [2, 2]]


def test_a_catalog_refuses_a_gallery_flag_that_is_not_a_boolean(tmp_path) -> None:
    catalog = Catalog(ItemStore(dim=1), ItemStore(dim=1), tmp_path / "overlay.npz")
    with pytest.raises(ValueError, match="gallery: must be true or false, got 1"):
        catalog.add(["a"], [[1.0]], [3], gallery=1)
    assert len(catalog.items) == 0 and catalog.version == 0


def test_both_processes_start_from_the_same_items(tmp_path) -> None:
    """The serving process and the learner's replica assemble their item store with
    ``base_items``: ``--items`` first, then the stream file's items (ids: item indices)."""
    stream_path = tmp_path / "stream.npz"
    small_stream().save(stream_path)
    extra = ItemStore(dim=2)
    extra.add(["extra", "5"], [[-1, -1], [-5, -5]], y=[7, 8])
    extra.save(tmp_path / "items.npz")
    config = ServiceConfig(
        source=stream_path.as_uri(), items=str(tmp_path / "items.npz"), checkpoint_dir=str(tmp_path)
    )
    items, stream_file = base_items(config)
    assert stream_file == stream_path
    assert items.snapshot()[0] == ["extra", "5", "0", "1", "2", "3", "4"]
    np.testing.assert_array_equal(items.get(["extra", "5"]), [[-1, -1], [10, 11]])  # the stream's
    assert labels(items, ["extra", "5", "0"]) == [7, 2, 0]
    messages = tmp_path / "messages.jsonl"
    messages.write_text("")
    items, stream_file = base_items(config.replace(source=messages.as_uri(), items=None))
    assert stream_file is None and len(items) == 0  # a file of messages brings no items


@pytest.mark.parametrize("suffix", [".npz", ".jsonl"])
def test_load_items_of_a_stream_file(tmp_path, suffix: str) -> None:
    path = tmp_path / f"stream{suffix}"
    stream = small_stream()
    stream.save(path) if suffix == ".npz" else write_jsonl(stream, path)
    store = ItemStore.load(path)
    assert len(store) == 6 and store.dim == 2
    np.testing.assert_array_equal(store.get(np.arange(6)), stream.X)  # ids are item indices
    assert labels(store, ["4", "5"]) == [2, 2]
    gallery = ItemStore.load(path, dev_only=True)  # a stream file as a gallery
    assert gallery.snapshot()[0] == [str(i) for i in stream.dev_idx]


# ---------------------------------------------------------------------- resolving
def resolve_one(c: Constraint, store: ItemStore | None = None, dim: int | None = None):
    """One constraint through the batch resolver: its features, or the error of its row."""
    (batch,) = decode_batch([encode_binary(c)]).batches
    resolved, errors = resolve_batch(batch, store, dim)
    if errors:
        [(_, error)] = errors
        raise error
    return resolved.x[0]


def test_resolve_single_constraints() -> None:
    store = ItemStore(dim=2)
    store.add(["1", "2", "3"], [[1, 0], [0, 1], [1, 1]])
    by_id = Constraint("triplet", ids=("3", "1", "2"))
    assert resolve_one(by_id, store).tolist() == [[1, 1], [1, 0], [0, 1]]
    inline = Constraint("pair", x=np.ones((2, 2), np.float32), similar=True)
    assert resolve_one(inline, store).tolist() == [[1, 1], [1, 1]]
    assert resolve_one(inline).shape == (2, 2)
    for c, kwargs, reason in [
        (Constraint("pair", ids=("1", "9"), similar=False), {"store": store}, "unknown_item"),
        (by_id, {}, "unknown_item"),  # ids but no store
        (Constraint("pair", x=np.ones((2, 3), np.float32), similar=True), {"store": store},
         "bad_dimension"),
        (inline, {"dim": 5}, "bad_dimension"),
    ]:  # fmt: skip
        with pytest.raises(DecodeError) as info:
            resolve_one(c, **kwargs)
        assert info.value.reason == reason


def test_resolve_batch_drops_rows_with_unknown_items() -> None:
    store = ItemStore(dim=1)
    store.add(np.arange(5), np.arange(5.0)[:, None] * 10)
    messages = [
        encode_binary(Constraint("triplet", ids=("0", "1", "2"))),
        encode_binary(Constraint("triplet", ids=("3", "77", "4"))),
        encode_binary(Constraint("triplet", ids=("4", "3", "2"))),
    ]
    (batch,) = decode_batch(messages).batches
    resolved, errors = resolve_batch(batch, store)
    assert [(i, e.reason) for i, e in errors] == [(1, "unknown_item")]
    assert "77" in errors[0][1].detail
    assert resolved.index.tolist() == [0, 2]
    assert resolved.x[:, :, 0].tolist() == [[0, 10, 20], [40, 30, 20]]
    assert resolved.ids.tolist() == [[0, 1, 2], [4, 3, 2]]


def test_resolve_batch_inline_dimension_and_no_store() -> None:
    msgs = [
        encode_binary(Constraint("pair", x=np.full((2, 3), i, np.float32), similar=i % 2 == 0))
        for i in range(4)
    ]
    (batch,) = decode_batch(msgs).batches
    resolved, errors = resolve_batch(batch, dim=3)
    assert errors == [] and resolved.similar.tolist() == [True, False, True, False]
    assert resolved.x[:, 0, 0].tolist() == [0, 1, 2, 3]
    none, errors = resolve_batch(batch, dim=4)
    assert none is None and [e.reason for _, e in errors] == ["bad_dimension"] * 4
    ids_batch = decode_batch([encode_binary(Constraint("pair", ids=("1", "2"), similar=True))])
    none, errors = resolve_batch(ids_batch.batches[0])
    assert none is None and errors[0][1].reason == "unknown_item"


def test_integer_id_arrays_match_canonical_decimal_ids_only() -> None:
    store = ItemStore(dim=1)
    store.add(["7", "007", "-3", "x"], [[1.0], [2.0], [3.0], [4.0]])
    np.testing.assert_array_equal(store.get(np.array([7, -3])), [[1.0], [3.0]])
    assert store.get(["007"]).tolist() == [[2.0]]
    X, found = store.get_many(np.array([[7, 8], [-3, 7]]))
    assert found.tolist() == [True, False, True, True] and X[:, 0].tolist() == [1, 0, 3, 1]
    store.remove(["7"])  # the int index follows removals
    assert store.get_many(np.array([7, -3]))[1].tolist() == [False, True]
    assert store.get(np.array([-3])).tolist() == [[3.0]]
