"""Native thread pools per Python thread.

OpenMP keeps its thread count per calling thread: ``torch.set_num_threads`` or
``faiss.omp_set_num_threads`` in the main thread leaves a worker thread with the default (one
per core). On a 2-core box a query thread then runs every small faiss / torch call on a
spinning team of two that fights the learner for the cores (measured: 100 ms per query instead
of 3 ms). Each service thread therefore sets its own count when it starts.
"""

from __future__ import annotations


def use_native_threads(n: int = 1) -> None:
    """Run this thread's torch and faiss (OpenMP) work on ``n`` threads."""
    import faiss
    import torch

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)
