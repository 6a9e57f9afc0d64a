"""Choosing the torch device from a user's ``--device`` string."""

from __future__ import annotations

import torch


def resolve_device(spec: str = "auto") -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; ``"cpu"``, ``"cuda"``, ``"cuda:N"`` as given.

    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(f"device: {spec!r} requested but no CUDA device is available")
        return torch.device(spec)
    raise ValueError(f"device: must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {spec!r}")
