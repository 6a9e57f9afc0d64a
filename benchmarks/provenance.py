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


def machine() -> dict[str, object]:
    """What a report records of the machine: CPU count and model, Python version."""
    return {"cpus": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version()}
