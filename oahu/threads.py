"""Intra-op thread control for tiny tensor operations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (``None``: leave as is), then restore.

    A strict OAHU step is a few dozen operations on matrices of a few rows. Spreading those over
    threads buys nothing, and each parallel region's fork/join can wait a whole scheduler quantum
    (milliseconds) when another process holds the other core: measured here, batched matmuls of a
    strict step went from ~5 µs to ~3 ms each under load.

    >>> before = torch.get_num_threads()
    >>> with intra_op_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    if before == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
