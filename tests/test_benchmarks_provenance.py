"""Every benchmark result records the BLAS kernels it ran on, not only the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.provenance import blas, machine

REPO = Path(__file__).resolve().parent.parent


def test_the_machine_names_the_blas_libraries_and_the_openblas_variables(monkeypatch):
    monkeypatch.setenv("OPENBLAS_VERBOSE", "0")
    monkeypatch.setenv("OMP_NUM_THREADS_NOT_OPENBLAS", "1")
    record = machine()
    assert record["cpus"] == os.cpu_count()
    assert record["blas"]["environment"]["OPENBLAS_VERBOSE"] == "0"
    assert all(name.startswith("OPENBLAS") for name in record["blas"]["environment"])
    apis = {library["internal_api"] for library in record["blas"]["libraries"]}
    assert {"openblas", "torch"} <= apis  # numpy's OpenBLAS, and torch's own BLAS
    openblas = [lib for lib in record["blas"]["libraries"] if lib["internal_api"] == "openblas"]
    assert all(isinstance(lib["architecture"], str) and lib["architecture"] for lib in openblas)


@pytest.mark.parametrize("coretype", ["Haswell", "SkylakeX"])
def test_the_kernels_recorded_are_the_ones_openblas_runs(coretype):
    """OPENBLAS_CORETYPE picks the kernels (within what the CPU runs): the record follows it."""
    if coretype == "SkylakeX" and "avx512f" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU has no AVX-512, so OpenBLAS cannot run SkylakeX kernels")
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from provenance import blas; "
        "print(json.dumps(blas()))"
    )
    env = {**os.environ, "OPENBLAS_CORETYPE": coretype}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert f'"architecture": "{coretype}"' in out
    assert f'"OPENBLAS_CORETYPE": "{coretype}"' in out
    assert blas()["environment"].get("OPENBLAS_CORETYPE") == os.environ.get("OPENBLAS_CORETYPE")
