"""Hyper-parameter checks with scikit-learn style errors that name the parameter and its value."""

from __future__ import annotations

import math
from typing import Any


def positive_float(name: str, value: Any) -> float:
    """``value`` as a float, or ``ValueError`` unless it is finite and > 0."""
    number = _finite_float(name, value)
    if number <= 0.0:
        raise ValueError(f"{name}: must be > 0, got {value!r}")
    return number


def open_unit_float(name: str, value: Any) -> float:
    """``value`` as a float, or ``ValueError`` unless 0 < value < 1."""
    number = _finite_float(name, value)
    if not 0.0 < number < 1.0:
        raise ValueError(f"{name}: must be strictly between 0 and 1, got {value!r}")
    return number


def _finite_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    return number
