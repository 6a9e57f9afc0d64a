"""Thread limits for the BLAS calls of a learning step on the CPU."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from functools import cache
from typing import Any

from threadpoolctl import ThreadpoolController


@cache
def _controller() -> ThreadpoolController:
    # Finding the loaded BLAS libraries takes ~0.6 ms; a limit through a found one, ~15 µs.
    import numpy  # noqa: F401  (the libraries must be loaded before they are looked for)
    import scipy.linalg  # noqa: F401

    return ThreadpoolController()


def blas_threads(n: int | None) -> AbstractContextManager[Any]:
    """Run the block with at most ``n`` BLAS threads (``None``: leave as is), then restore.

    A strict OAHU step is a few dozen operations on matrices of a few rows. Spreading those over
    threads buys nothing, and each parallel region's fork/join can wait a whole scheduler quantum
    (milliseconds) when another process holds the other core: measured here under load, a
    micro-batch step on two threads ran 23 times slower than on one.

    >>> import numpy as np
    >>> with blas_threads(1):
    ...     float((np.ones((2, 2)) @ np.ones((2, 2)))[0, 0])
    2.0
    """
    if n is None:
        return nullcontext()
    return _controller().limit(limits=n, user_api="blas")
