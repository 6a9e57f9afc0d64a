"""How many threads the native libraries may use: BLAS during a learning step, and the OpenMP
pools of torch and faiss per service thread.

Learning steps are a few hundred small calls on small matrices (OAHU) or memory-bound level-2 BLAS
calls (the Mahalanobis and bilinear baselines). Spreading those over threads buys nothing, and each
parallel region's fork/join can wait a whole scheduler quantum (milliseconds) when another process
holds the other core (benchmarks/README.md, "Training throughput", has the slowdowns measured). So a
step runs inside :func:`blas_threads`.

OpenMP keeps its thread count per calling thread: ``torch.set_num_threads`` in the main thread
leaves a worker thread with the default (one per core), and a query thread then runs every small
call on a spinning team that fights the learner for the cores. So each service thread sets its
own count with :func:`use_native_threads` when it starts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
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

    >>> import numpy as np
    >>> with blas_threads(1):
    ...     float((np.ones((2, 2)) @ np.ones((2, 2)))[0, 0])
    2.0
    """
    if n is None:
        return nullcontext()
    return _controller().limit(limits=n, user_api="blas")


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with torch's own pool (its intra-op threads) at ``n`` threads (``None``:
    leave as is), then restore: the BLAS limit of :func:`blas_threads` does not reach torch's
    CPU kernels, and a strict step's small products stall on them just the same.

    >>> import torch
    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    """
    if n is None:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def use_native_threads(n: int = 1, faiss: bool = False) -> None:
    """Run this thread's torch work (and with ``faiss``, faiss's) on ``n`` OpenMP threads, and
    cap the BLAS libraries numpy calls (OpenBLAS) at ``n`` threads: that cap is one count for
    the whole process, which suits the service, whose threads each use one.

    Only the serving process searches with faiss; the learner process never imports it.

    >>> import torch
    >>> use_native_threads(1); torch.get_num_threads()
    1
    """
    import torch

    torch.set_num_threads(n)
    _controller().limit(limits=n, user_api="blas")
    if faiss:
        import faiss as faiss_lib

        faiss_lib.omp_set_num_threads(n)


def lower_thread_priority(niceness: int) -> None:
    """Add ``niceness`` to the calling thread's nice value (at most 19), leaving the rest of the
    process as it is: Linux schedules each thread as a task of its own, and ``setpriority`` on a
    thread id affects that thread only. Elsewhere it does nothing.

    >>> lower_thread_priority(0)  # a no-op, but a valid call
    """
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + niceness))
    except (AttributeError, OSError):  # no per-thread priorities here, or not permitted
        pass
