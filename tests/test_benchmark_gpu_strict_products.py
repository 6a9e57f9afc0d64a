"""benchmarks/gpu_strict_products.py run on the CPU: one process per variant, each recording
what it set and its profile."""

from __future__ import annotations

import json

from benchmarks.gpu_strict_products import main


def test_each_variant_runs_in_its_own_process_and_records_its_setting(tmp_path):
    out = tmp_path / "products.jsonl"
    records = main(
        ["--device", "cpu", "--dataset", "digits", "--constraints", "300", "--max-seconds", "1",
         "--profile-updates", "20", "--variants", "broadcast", "blas", "--out", str(out)]
    )  # fmt: skip
    assert [r["variant"] for r in records] == ["broadcast", "blas"]
    # The broadcast variant keeps the default cutoff, the BLAS one turns it off.
    assert records[0]["small_product_rows"] == 32 and records[1]["small_product_rows"] == 0
    for record in records:
        assert record["device"] == "cpu" and record["gpu"] is None
        assert 2 * 20 <= record["constraints"] <= 300
        assert record["profile"]["kernels_per_update"] == 0  # no device kernels on the CPU
    assert [json.loads(line)["variant"] for line in out.read_text().splitlines()] == [
        "broadcast",
        "blas",
    ]
