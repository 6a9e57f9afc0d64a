"""``KEY=VALUE`` settings, as command-line flags, config tables and environment variables give
them: ``oahu replay --set``, ``oahu run --learner-param``/``--kafka-option`` and
``OAHU_<TABLE>__<KEY>``, ``oahu produce --kafka-option``, the benchmark scripts.

>>> parse_settings(["eta=0.1", "init=orthogonal", "flag=true"], "--set")
{'eta': 0.1, 'init': 'orthogonal', 'flag': True}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def split_setting(entry: str, what: str, form: str = "KEY=VALUE") -> tuple[str, str]:
    """``("KEY", "VALUE")`` of ``"KEY=VALUE"``; ``ValueError`` naming ``what`` otherwise.

    >>> split_setting("a=b=c", "--set")
    ('a', 'b=c')
    >>> split_setting("nonsense", "--set")
    Traceback (most recent call last):
    ...
    ValueError: --set: expected KEY=VALUE, got 'nonsense'
    """
    key, sep, value = entry.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{what}: expected {form}, got {entry!r}")
    return key.strip(), value


def parse_value(value: Any) -> Any:
    """A setting's value: numbers, booleans and JSON stay typed, anything else is a string.

    >>> parse_value("5"), parse_value("[1, 2]"), parse_value("SASL_SSL"), parse_value(0.5)
    (5, [1, 2], 'SASL_SSL', 0.5)
    """
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse_settings(entries: Iterable[str], what: str) -> dict[str, Any]:
    """``KEY=VALUE`` entries as a dict of typed values (:func:`parse_value`); later keys win."""
    return {key: parse_value(raw) for key, raw in (split_setting(e, what) for e in entries)}
