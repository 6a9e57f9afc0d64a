"""Shared pytest fixtures."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

# scikit-learn's check_array_api_input (one of the estimator checks of tests/test_sklearn_api.py)
# runs only when SciPy's array API support was switched on before SciPy is first imported, and
# is skipped otherwise. For NumPy arrays, which are all this project passes, SciPy behaves the
# same either way.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import pytest

REPO = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO / "scripts" / "kafka" / "kafka.sh"


# ------------------------------------------------------------------ Kafka
def _kafka_sh(*args: str) -> str:
    """Run scripts/kafka/kafka.sh; fail the session loudly (never skip) when it fails, since CI
    installs the broker and a silently skipped Kafka test would hide a broken pipeline."""
    proc = subprocess.run(
        ["bash", str(KAFKA_SH), *args], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        pytest.fail(
            f"kafka.sh {' '.join(args)} failed with exit code {proc.returncode}:\n"
            f"{proc.stdout}\n{proc.stderr}",
            pytrace=False,
        )
    return proc.stdout.strip()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address ("127.0.0.1:PORT") of a real Kafka broker for this test session.

    Uses the broker named by ``OAHU_KAFKA_BOOTSTRAP`` when set; otherwise installs (cached) and
    starts a single-node KRaft broker in a temporary directory and stops it at the end.
    """
    external = os.environ.get("OAHU_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    _kafka_sh("install")
    with tempfile.TemporaryDirectory(prefix="oahu-kafka-") as run_dir:
        bootstrap = _kafka_sh("start", run_dir).splitlines()[-1]
        try:
            yield bootstrap
        finally:
            _kafka_sh("stop", run_dir)


@pytest.fixture(autouse=True)
def _no_service_outlives_its_test() -> Iterator[None]:
    """Services started as subprocesses (tests/service_support.py) end with their test, even
    one that failed before stopping them."""
    from service_support import STARTED, kill_started

    before = len(STARTED)  # those of wider-scoped fixtures, set up first, live on
    yield
    kill_started(before)
