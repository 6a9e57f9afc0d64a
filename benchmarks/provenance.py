"""Where a benchmark figure came from: the code's commit and the machine's CPU, recorded beside
the figure so that runs of different code or on different hosts are not compared unawares."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def code_version() -> str:
    """The checkout's commit (with "+changes" if its tracked files differ), or "unknown"."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        if not head:  # not a checkout (a copied tree): git diff would print its usage
            return "unknown"
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD"], cwd=REPO, capture_output=True
        ).returncode
    except OSError:
        return "unknown"
    return head + ("+changes" if dirty else "")


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas() -> dict[str, object]:
    """The BLAS libraries numpy and torch call, with the kernels each chose, and the
    ``OPENBLAS_*`` variables of the environment.

    The kernels matter as much as the CPU: ``OPENBLAS_CORETYPE=Haswell`` on an AVX-512 CPU
    makes OpenBLAS multiply a (3, 784) block by (784, 200) 4.7 times slower (46 µs against
    10 µs), so a figure measured under it says little about the same CPU without it.
    """
    # threadpoolctl lists only libraries already loaded: load the two that oahu calls.
    import numpy  # noqa: F401
    import torch
    from threadpoolctl import threadpool_info

    libraries = [
        {key: info.get(key) for key in ("internal_api", "version", "architecture", "num_threads")}
        for info in threadpool_info()
    ]
    # torch links its BLAS statically, out of threadpoolctl's sight.
    libraries.append({"internal_api": "torch", "mkl": torch.backends.mkl.is_available()})
    environment = {name: value for name, value in os.environ.items() if name.startswith("OPENBLAS")}
    return {"libraries": libraries, "environment": environment}


def machine() -> dict[str, object]:
    """What a report records of the machine: CPU count and model, Python version, BLAS."""
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "blas": blas(),
    }
