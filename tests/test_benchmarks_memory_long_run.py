"""benchmarks/memory_long_run.py: a stream over recurring and new items, learned with memory
recorded along it."""

from __future__ import annotations

import numpy as np

from benchmarks.memory_long_run import CLASSES, POOL, WIDTH, MixtureStream, run


def test_the_stream_mixes_recurring_and_new_items_of_the_right_classes():
    stream = MixtureStream(0)
    triplets = stream.triplets(2_000)
    assert triplets.shape == (2_000, 3, WIDTH)
    items = triplets.reshape(-1, WIDTH)
    labelled = zip(stream.pool, stream.pool_labels, strict=True)
    pool = {row.tobytes(): label for row, label in labelled}
    recurring = [pool.get(row.tobytes()) for row in items]
    share = np.mean([label is not None for label in recurring])
    assert 0.4 < share < 0.55  # half are drawn from the pool, where one of the class exists
    # An item's class is the class mean it is nearest to (noise 2 per coordinate, means 1 apart
    # on average per coordinate: at d = 784 the nearest mean is the right one).
    nearest = np.argmin(((items[:, None, :] - stream.means[None]) ** 2).sum(-1), axis=1).reshape(
        -1, 3
    )
    assert (nearest[:, 0] == nearest[:, 1]).all() and (nearest[:, 0] != nearest[:, 2]).all()
    known = [label for label in recurring if label is not None]
    assert len(set(known)) > CLASSES // 2 and len(stream.pool) == POOL


def test_a_run_records_memory_and_what_the_learner_holds():
    result = run(3_000, 0, {"batch_size": 256, "item_memory": 512, "graph_memory": 4_096})
    samples = result["samples"]
    assert [s["constraints"] for s in samples][-1] == 3_000
    assert all(s["graph_known_items"] <= 4_096 for s in samples)  # forgetting keeps the bound
    assert result["peak_resident_mb"] >= max(s["resident_mb"] for s in samples) * 0.99
    assert samples[-1]["checkpoint_mb"] > 1 and result["triplets_per_s"] > 0


def test_every_sample_hands_on_the_result_so_far():
    # A run of 10^7 takes most of an hour: one stopped early keeps what it measured.
    seen: list[dict] = []
    params = {"batch_size": 256, "item_memory": 512, "graph_memory": 4_096}
    result = run(20_000, 0, params, on_sample=seen.append)
    # Samples every BLOCK (8,192) triplets: two before the end, each handed on as it is taken.
    assert [p["constraints_learned"] for p in seen] == [8_192, 16_384]
    assert [len(p["samples"]) for p in seen] == [1, 2]
    assert not any(p["complete"] for p in seen) and all(p["triplets_per_s"] > 0 for p in seen)
    assert result["complete"] and result["constraints_learned"] == 20_000
    assert result["samples"][:2] == seen[-1]["samples"] and len(result["samples"]) == 3
