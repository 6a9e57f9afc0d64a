"""Shared checks of constraint streams for the stream tests."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from oahu.streams.jsonl import write_jsonl
from oahu.streams.stream_file import OPTIONAL_FIELDS, ConstraintStream, load_stream

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


def round_trip_both_formats(stream: ConstraintStream) -> dict[str, ConstraintStream]:
    """``stream`` saved as .npz and as .jsonl and loaded back, by suffix, each checked to hold
    the same arrays and kind (:func:`assert_same_stream`)."""
    loaded = {}
    with tempfile.TemporaryDirectory() as folder:
        stream.save(Path(folder) / "s.npz")
        write_jsonl(stream, Path(folder) / "s.jsonl")
        for suffix in (".npz", ".jsonl"):
            loaded[suffix] = load_stream(Path(folder) / f"s{suffix}")
            assert_same_stream(stream, loaded[suffix])
    return loaded


def save_npz(path: Path, **arrays) -> Path:
    """``arrays`` saved as the .npz archive ``path``; ``path``."""
    np.savez(path, **arrays)
    return path
