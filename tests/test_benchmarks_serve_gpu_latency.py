"""benchmarks/serve_gpu_latency.py: a synthetic gallery served in process at a fixed rate, its
report written as JSON (run here on the CPU with a small gallery)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import serve_gpu_latency


def test_a_small_cpu_run_answers_every_request_and_reports_percentiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    out = tmp_path / "result.json"
    flags = "--device cpu --synthetic-gallery 3000 --dim 16 --rate 50 --seconds 1 --warmup 0.2"
    argv = ["serve_gpu_latency.py", *flags.split(), "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    serve_gpu_latency.main()
    report = json.loads(out.read_text())
    assert report["gallery_items"] == 3000 and report["index_device"] == "cpu"
    assert report["requests"] == 50 and report["failures"] == 0
    assert 0 < report["p50_ms"] <= report["p99_ms"] <= report["max_ms"]
    assert report["agreement_with_cpu_index"] is None  # the index is the CPU's already
    assert set(report["one_query_alone"]) == {"embed", "search", "embed_and_classify"}
