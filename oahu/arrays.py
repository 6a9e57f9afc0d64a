"""Small-array arithmetic that runs on numpy or torch alike."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import torch


def namespace(x: Any) -> ModuleType:
    """``torch`` for a tensor, ``numpy`` otherwise.

    The per-depth arithmetic of a step (ABTL, the hedge) touches a few dozen numbers. On the CPU it
    runs on numpy views of the torch tensors, where an operation costs about a third of torch's
    dispatch; on CUDA it stays in torch, on the device. The functions that use this are written
    with calls both libraries share (``xp.exp``, ``xp.where``, ``.clip(min=...)``, ...).

    >>> namespace(torch.zeros(1)).__name__, namespace(np.zeros(1)).__name__
    ('torch', 'numpy')
    """
    return torch if isinstance(x, torch.Tensor) else np
