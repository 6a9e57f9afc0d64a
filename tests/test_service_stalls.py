"""Stalls of the serving process are measured, told apart and named (oahu/service/serving/
stalls.py): a blocked event loop, a busy query worker and a paused process, each counted and
logged with where it happened; and a running ``oahu run`` exports the series."""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from service_support import ServiceProcess, make_stream, wait_until

from oahu.service.metrics import ServiceMetrics
from oahu.service.serving.stalls import StallWatch


@pytest.fixture
def watched() -> Iterator[tuple[StallWatch, ServiceMetrics]]:
    """A watch with a 100 ms threshold. The collector is off meanwhile: late in a full test run
    this process's heap is large, and a collection of it is a real pause of its own."""
    metrics = ServiceMetrics()
    watch = StallWatch(
        metrics.event_loop_lag, metrics.serving_pause, metrics.serving_stalls, threshold=0.1
    )
    gc.disable()
    watch.start()
    try:
        yield watch, metrics
    finally:
        watch.stop()
        gc.enable()


def stalls(metrics: ServiceMetrics, thread: str) -> float:
    return metrics.registry.get_sample_value("oahu_serving_stalls_total", {"thread": thread})


def hold_the_loop() -> None:
    time.sleep(0.4)  # sleeping releases the GIL: only the loop is held up, not the process


def test_a_blocked_event_loop_is_counted_once_and_logged_with_its_stack(watched, caplog):
    watch, metrics = watched
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        loop.call_soon_threadsafe(watch.attach_loop, loop)
        wait_until(lambda: metrics.registry.get_sample_value(
            "oahu_event_loop_lag_seconds_count") >= 5, 10, "the loop's beats")  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="oahu.service.serving.stalls"):
            loop.call_soon_threadsafe(hold_the_loop)
            wait_until(lambda: stalls(metrics, "http") >= 1.0, 10, "the stall")
            time.sleep(0.5)  # the loop beats again; the same stall is not counted twice
        blocked = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
        assert len([m for m in blocked if "hold_the_loop" in m]) == 1, blocked
        assert stalls(metrics, "http") == len(blocked)
        lags = metrics.registry.get_sample_value(
            "oahu_event_loop_lag_seconds_bucket", {"le": "0.25"}
        )
        count = metrics.registry.get_sample_value("oahu_event_loop_lag_seconds_count")
        assert count - lags >= 1  # the late beat's lag (about 0.4 s) is in the histogram
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()


def answer_slowly(watch: StallWatch) -> None:
    watch.begin("queries")
    time.sleep(0.3)
    watch.end("queries")


def test_a_busy_query_worker_is_named_and_short_work_is_not(watched, caplog):
    watch, metrics = watched
    with caplog.at_level(logging.WARNING, logger="oahu.service.serving.stalls"):
        for _ in range(20):  # short pieces of work, each well under the threshold
            watch.begin("queries")
            time.sleep(0.005)
            watch.end("queries")
        time.sleep(0.05)
        assert stalls(metrics, "queries") == 0.0
        worker = threading.Thread(target=answer_slowly, args=(watch,))
        worker.start()
        worker.join()
        time.sleep(0.05)
    assert stalls(metrics, "queries") == 1.0
    (record,) = [r for r in caplog.records if "query worker busy" in r.getMessage()]
    assert "answer_slowly" in record.getMessage()


def test_a_c_call_holding_the_gil_is_a_pause_of_the_whole_process(watched, caplog):
    _, metrics = watched
    values = [random.random() for _ in range(3_000_000)]
    with caplog.at_level(logging.WARNING, logger="oahu.service.serving.stalls"):
        started = time.monotonic()
        values.sort()  # C code that never lets another thread run
        held = time.monotonic() - started
        time.sleep(0.1)
    assert held >= 0.15, f"sorting held the GIL {held:.3f} s only: sort more values"
    # The sort's pause is counted and logged; a collection of the test process's large heap may
    # add one of its own, so "at least".
    assert stalls(metrics, "process") >= 1.0
    paused_ms = [
        float(r.getMessage().split("paused ")[1].split(" ms")[0])
        for r in caplog.records
        if "serving process paused" in r.getMessage()
    ]
    assert max(paused_ms) >= 0.8 * held * 1000, (paused_ms, held)
    below = metrics.registry.get_sample_value("oahu_serving_pause_seconds_bucket", {"le": "0.1"})
    assert metrics.registry.get_sample_value("oahu_serving_pause_seconds_count") - below >= 1


def test_oahu_run_exports_the_loop_lag_and_the_stall_counters(tmp_path):
    stream_file = make_stream(tmp_path, 200, seed=3)
    service = ServiceProcess(
        ["--source", stream_file.as_uri(), "--checkpoint-dir", str(tmp_path / "state")],
        tmp_path / "service.log",
    )
    try:
        service.wait_serving()

        def beats() -> float:
            text = service.get("/metrics").text
            line = next(
                s for s in text.splitlines() if s.startswith("oahu_event_loop_lag_seconds_count")
            )
            return float(line.split()[-1])

        first = beats()
        wait_until(lambda: beats() >= first + 20, 30, "the event loop's beats")  # every 10 ms
        lines = service.get("/metrics").text.splitlines()
        for thread in ("http", "queries", "process"):
            assert any(
                s.startswith(f'oahu_serving_stalls_total{{thread="{thread}"}}') for s in lines
            )
        assert any(s.startswith("oahu_serving_pause_seconds_count") for s in lines)
    finally:
        assert service.terminate() == 0, service.output()


def test_the_query_engine_tells_the_watch_when_it_answers(watched, caplog, monkeypatch, tmp_path):
    """The query worker's groups are marked: one answered slowly is a 'queries' stall whose
    logged stack reaches the slow code; the requests are answered all the same."""
    from oahu.persistence import learner_to_bytes
    from oahu.registry import make_learner
    from oahu.service.catalog import Catalog
    from oahu.service.item_store import ItemStore
    from oahu.service.serving import queries as queries_module
    from oahu.service.serving.queries import QueryEngine
    from oahu.service.serving.snapshot import SnapshotPublisher

    watch, metrics = watched
    gallery = ItemStore(dim=2)
    gallery.add(["a", "b"], [[1, 0], [0, 1]], y=[0, 1])
    publisher = SnapshotPublisher(Catalog(ItemStore(dim=2), gallery, tmp_path / "o.npz"), metrics)
    publisher.start()
    publisher.submit(learner_to_bytes(make_learner("euclidean", 2)))
    assert publisher.wait_for(1, timeout=10)
    compute = queries_module._compute

    def compute_slowly(*args: object) -> object:
        time.sleep(0.3)
        return compute(*args)

    monkeypatch.setattr(queries_module, "_compute", compute_slowly)
    engine = QueryEngine(publisher, stalls=watch)
    engine.start()
    try:
        with caplog.at_level(logging.WARNING, logger="oahu.service.serving.stalls"):
            result, _ = engine.submit("classify", np.array([[0.9, 0.1]]), 1).result(timeout=10)
        assert result["labels"].tolist() == [0]
        assert stalls(metrics, "queries") == 1.0
        (busy,) = [r.getMessage() for r in caplog.records if "query worker busy" in r.getMessage()]
        assert "compute_slowly" in busy
    finally:
        engine.stop()
        publisher.stop()
