"""benchmarks/small_products_cpu_cost.py compares like with like: its "plain" products are the
dispatch's results to the bit on the CPU, and it times all six of a strict step's products."""

from __future__ import annotations

import numpy as np

from benchmarks.small_products_cpu_cost import STRICT_PRODUCTS, VARIANTS, per_call, products
from oahu.learners.oahu import arrays, network


def test_the_plain_products_are_the_dispatch_to_the_bit_on_the_cpu():
    rng = np.random.default_rng(1)
    for name, a_shape, b_shape in STRICT_PRODUCTS:
        a = rng.standard_normal(a_shape, dtype=np.float32)
        b = rng.standard_normal(b_shape, dtype=np.float32)
        results = []
        for variant in ("dispatch", "plain"):
            with products(variant):
                assert arrays.product is network.product is VARIANTS[variant]
                fn = arrays.times_transposed if name == "times_transposed" else network.product
                results.append(fn(a, b))
        assert np.array_equal(*results), name
    assert arrays.product is network.product is VARIANTS["dispatch"]  # put back


def test_every_product_is_timed_through_both():
    timings = per_call(calls=5)
    assert len(timings) == len(STRICT_PRODUCTS) == 6
    for best in timings.values():
        assert set(best) == {"dispatch", "plain"} and all(0 < t < 1e5 for t in best.values())
