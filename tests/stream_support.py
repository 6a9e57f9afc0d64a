"""Shared checks of constraint streams for the stream tests."""

from __future__ import annotations

import numpy as np

from oahu.streams.stream_file import OPTIONAL_FIELDS, ConstraintStream

#: Every array a stream may hold, the optional ones included.
STREAM_ARRAYS = ("X", "y", "dev_idx", "test_idx", "constraints", "similar", *OPTIONAL_FIELDS)


def assert_same_stream(a: ConstraintStream, b: ConstraintStream, meta: bool = False) -> None:
    """``a`` and ``b`` hold the same arrays (values, dtypes, shapes), the same kind and, with
    ``meta``, the same meta."""
    for name in STREAM_ARRAYS:
        left, right = getattr(a, name), getattr(b, name)
        assert (left is None) == (right is None), name
        if left is not None:
            assert left.dtype == right.dtype and left.shape == right.shape, name
            np.testing.assert_array_equal(left, right, err_msg=name)
    assert a.kind == b.kind
    if meta:
        assert a.meta == b.meta
