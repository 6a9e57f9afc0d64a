"""benchmarks/gallery_scan.py on a small gallery: every batch timed alone and beside a second
scanner process, with float32 and bfloat16 products, and the product timed through both
libraries."""

from __future__ import annotations

import json

from benchmarks.gallery_scan import BATCHES, GEMM_QUERIES, PRECISIONS, main
from oahu.inference.matmul import cpu_products


def test_a_small_scan_times_every_batch_alone_and_beside_another(tmp_path):
    out = tmp_path / "scan.json"
    result = main(["--items", "2048", "--seconds", "0.05", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["products"] == cpu_products()
    assert set(result["alone"]) == set(PRECISIONS)
    assert all(set(by_batch) == {str(b) for b in BATCHES} for by_batch in result["alone"].values())
    assert len(result["beside"]) == 2
    assert all(run == {p: run[p] for p in PRECISIONS} for run in result["beside"])
    assert all(set(run[p]) == {str(b) for b in BATCHES} for run in result["beside"] for p in run)
    assert set(result["gemm"]) == {str(q) for q in GEMM_QUERIES}
    times = [t for by_batch in result["alone"].values() for t in by_batch.values()]
    times += [t for run in result["beside"] for by_batch in run.values() for t in by_batch.values()]
    times += [t for ms in result["gemm"].values() for t in ms.values()]
    assert all(0 < t < 10_000 for t in times)
