"""One vocabulary for checking the values users give: integers, numbers in a range, choices and
flags, each error naming the setting and the value (``"beta: must be a number in (0, 1), got
1.5"``).

Every parameter check in oahu goes through these four functions, the way scikit-learn's
estimators share ``_param_validation`` (``Interval``, ``StrOptions``): the learners' constructors
and configs, the service's settings, the stream files, the experiments. A check returns the value
in its plain Python type, so a caller can write ``self.k = check_int(k, "k")``.

>>> check_int(np.int64(3), "batch")
3
>>> check_number(0.5, "beta", low=0.0, high=1.0, closed="neither")
0.5
>>> check_choice("margin", "loss", ("margin", "abtl"))
'margin'
>>> check_number(1.5, "beta", low=0.0, high=1.0, closed="neither")
Traceback (most recent call last):
...
ValueError: beta: must be a number in (0, 1), got 1.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Literal, TypeVar

import numpy as np

__all__ = ["check_bool", "check_choice", "check_int", "check_number"]

Closed = Literal["both", "left", "right", "neither"]
T = TypeVar("T")


def check_int(value: Any, name: str, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (Python or numpy, not a bool) in
    [``minimum``, ``maximum``]; otherwise a ``ValueError`` naming ``name`` and the value.

    >>> check_int(-1, "seed", minimum=0)
    Traceback (most recent call last):
    ...
    ValueError: seed: must be an integer >= 0, got -1
    >>> check_int(True, "batch")
    Traceback (most recent call last):
    ...
    ValueError: batch: must be an integer >= 1, got True
    >>> check_int(20, "learner_nice", minimum=0, maximum=19)
    Traceback (most recent call last):
    ...
    ValueError: learner_nice: must be an integer in [0, 19], got 20
    """
    is_int = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if not is_int or value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name}: must be an integer {bound}, got {value!r}")
    return int(value)


def check_number(
    value: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    closed: Closed = "both",
) -> float:
    """``value`` as a ``float`` if it is a finite real number (not a bool) within the interval
    from ``low`` to ``high`` (either may be None: unbounded), whose ends ``closed`` includes
    (``"both"``, ``"left"``, ``"right"`` or ``"neither"``, as scikit-learn's ``Interval``).

    >>> check_number(0, "margin", low=0.0)
    0.0
    >>> check_number(0, "learning_rate", low=0.0, closed="neither")
    Traceback (most recent call last):
    ...
    ValueError: learning_rate: must be a number > 0, got 0
    >>> check_number("fast", "eta")
    Traceback (most recent call last):
    ...
    ValueError: eta: must be a number, got 'fast'
    >>> check_number(float("nan"), "eta")
    Traceback (most recent call last):
    ...
    ValueError: eta: must be finite, got nan
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    left_in = closed in ("both", "left")
    right_in = closed in ("both", "right")
    below = low is not None and (number < low if left_in else number <= low)
    above = high is not None and (number > high if right_in else number >= high)
    if below or above:
        raise ValueError(f"{name}: must be a number {_interval(low, high, closed)}, got {value!r}")
    return number


def check_choice(value: T, name: str, choices: Iterable[T]) -> T:
    """``value`` if it is one of ``choices``; otherwise a ``ValueError`` listing them.

    >>> check_choice("adam", "loss", ("margin", "abtl"))
    Traceback (most recent call last):
    ...
    ValueError: loss: must be one of 'margin', 'abtl', got 'adam'
    """
    options = tuple(choices)
    if not _is_one_of(value, options):
        raise ValueError(f"{name}: must be one of {', '.join(map(repr, options))}, got {value!r}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """``value`` if it is a bool (Python or numpy); otherwise a ``ValueError``.

    >>> check_bool(1, "residual_heads")
    Traceback (most recent call last):
    ...
    ValueError: residual_heads: must be true or false, got 1
    """
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}: must be true or false, got {value!r}")
    return bool(value)


def _is_one_of(value: Any, options: tuple[Any, ...]) -> bool:
    # Not ``value in options``: True must not pass for 1 (nor 1 for True), and an array compared
    # with an option must be refused, not raise.
    try:
        return any(
            bool(value == option) and isinstance(value, bool) == isinstance(option, bool)
            for option in options
        )
    except (TypeError, ValueError):
        return False


def _interval(low: float | None, high: float | None, closed: Closed) -> str:
    left_in = closed in ("both", "left")
    right_in = closed in ("both", "right")
    if high is None:
        return f"{'>=' if left_in else '>'} {low:g}"
    if low is None:
        return f"{'<=' if right_in else '<'} {high:g}"
    return f"in {'[' if left_in else '('}{low:g}, {high:g}{']' if right_in else ')'}"
