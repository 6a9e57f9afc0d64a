"""Checks of user-given values that name the setting and the value in their error."""

from __future__ import annotations

from typing import Any

import numpy as np


def check_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an ``int`` if it is an integer (Python or numpy, not a bool) of at least
    ``minimum``; otherwise a ``ValueError`` naming ``name`` and the value.

    >>> check_int(np.int64(3), "batch")
    3
    >>> check_int(-1, "seed", minimum=0)
    Traceback (most recent call last):
    ...
    ValueError: seed: must be an integer >= 0, got -1
    >>> check_int(True, "batch")
    Traceback (most recent call last):
    ...
    ValueError: batch: must be an integer >= 1, got True
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return int(value)
