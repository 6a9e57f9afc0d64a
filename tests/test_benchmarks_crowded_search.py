"""benchmarks/crowded_search.py: one search per way of drawing the bands, the same answers from
each, and what the bands held."""

from __future__ import annotations

import numpy as np

from benchmarks.crowded_search import WAYS, measure
from oahu.inference import band


def test_both_ways_answer_alike_and_the_float64_bands_are_narrower(monkeypatch):
    # 600 of 3,000 unit rows within ~1e-3 of one direction: the queries along it are crowded
    rng = np.random.default_rng(3)
    gallery = rng.normal(size=(2, 3000, 16))
    centre = rng.normal(size=16)
    gallery[0, :600] = centre + 1e-3 * rng.normal(size=(600, 16)) * np.linalg.norm(centre)
    gallery /= np.linalg.norm(gallery, axis=-1, keepdims=True)
    queries = rng.normal(size=(2, 8, 16))
    queries[0, :4] = centre + 1e-4 * rng.normal(size=(4, 16))
    queries /= np.linalg.norm(queries, axis=-1, keepdims=True)
    monkeypatch.setattr(band, "REFINE_QUERIES", 1)
    own = band.REFINE_BAND
    monkeypatch.setitem(WAYS, "float64", 8)  # refine every band of more than 8 items
    got = measure(gallery.astype(np.float32), queries.astype(np.float32), 5)
    assert got["same_answers"]
    assert band.REFINE_BAND == own  # put back after the ways
    wide, narrow = got["float32"]["depths"][0], got["float64"]["depths"][0]
    assert wide["uncertified"] == narrow["uncertified"] == 0.5  # the 4 crowded of 8 queries
    assert 8 < wide["band_median"] and narrow["band_median"] < wide["band_median"]
    assert got["float64"]["depths"][1]["uncertified"] == 0.0  # nothing crowds depth 1
    assert got["float64"]["search_s"] > 0
