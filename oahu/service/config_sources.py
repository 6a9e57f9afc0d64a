"""Where the service's settings come from, and which wins: defaults < one config file < the
environment < command-line flags.

A config file is TOML or YAML whose keys are the :class:`~oahu.service.config.ServiceConfig`
field names; environment variables are ``OAHU_<FIELD>``, with ``OAHU_KAFKA__<KEY>`` and
``OAHU_LEARNER_PARAMS__<KEY>`` for single entries of the two tables. Every value read as text
becomes the field's type here, and a value that cannot is a ``ValueError`` naming the setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oahu.service.config import TABLES, ServiceConfig, setting_type
from oahu.settings import parse_value, split_setting

__all__ = ["ENV_PREFIX", "coerce_setting", "read_config_file", "read_env", "resolve_config"]

ENV_PREFIX = "OAHU_"
_NAMES = frozenset(f.name for f in dataclasses.fields(ServiceConfig))


def coerce_setting(name: str, value: Any) -> Any:
    """``value`` (from a file, env var or flag) as the type of the field ``name``; a
    ``ValueError`` naming it when it is not one.

    >>> coerce_setting("checkpoint_every", "200"), coerce_setting("exit_at_end", "yes")
    (200, True)
    >>> coerce_setting("checkpoint_every", "many")
    Traceback (most recent call last):
    ...
    ValueError: checkpoint_every: expected int, got 'many'
    """
    kind = setting_type(name)
    if kind is dict:
        if not isinstance(value, Mapping):
            raise ValueError(f"{name}: expected a table of KEY = VALUE, got {value!r}")
        return {str(k).replace("-", "_"): parse_value(v) for k, v in value.items()}
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}: expected true or false, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected {kind.__name__}, got {value!r}") from None


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Fields from a TOML (.toml) or YAML (.yaml/.yml) file; unknown keys raise ValueError."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        raw = tomllib.loads(text)
    elif path.suffix in (".yaml", ".yml"):
        import yaml

        raw = yaml.safe_load(text) or {}
    else:
        raise ValueError(f"config: expected a .toml, .yaml or .yml file, got {path}")
    if not isinstance(raw, dict):
        raise ValueError(f"config: {path} must hold a table of settings")
    out = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name not in _NAMES:
            raise ValueError(f"config: unknown setting {key!r} in {path}")
        out[name] = coerce_setting(name, value)
    return out


def read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Fields from ``OAHU_<FIELD>`` and ``OAHU_<TABLE>__<KEY>`` variables.

    >>> read_env({"OAHU_HTTP": "0.0.0.0:9000", "OAHU_KAFKA__SECURITY_PROTOCOL": "SSL"})
    {'http': '0.0.0.0:9000', 'kafka': {'security_protocol': 'SSL'}}
    """
    out: dict[str, Any] = {}
    for var, value in sorted(environ.items()):
        if not var.startswith(ENV_PREFIX):
            continue
        name, _, key = var[len(ENV_PREFIX) :].lower().partition("__")
        if key and name in TABLES:
            out.setdefault(name, {})[key] = parse_value(value)
        elif not key and name in _NAMES and name not in TABLES:
            out[name] = coerce_setting(name, value)
    return out


def resolve_config(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> ServiceConfig:
    """Merge defaults < config file < environment < flags (``args``, parsed from the flags of
    :func:`oahu.service.config_flags.add_arguments`) into a validated ``ServiceConfig``; a
    table's entries merge key by key.

    >>> flags = argparse.Namespace(config=None, checkpoint_every="300", kafka=["acks=all"])
    >>> env = {"OAHU_CHECKPOINT_EVERY": "200", "OAHU_KAFKA__RETRIES": "3"}
    >>> cfg = resolve_config(flags, environ=env)
    >>> cfg.checkpoint_every, cfg.kafka
    (300, {'retries': 3, 'acks': 'all'})
    """
    values: dict[str, Any] = {}
    if getattr(args, "config", None):
        values.update(read_config_file(args.config))
    for name, value in read_env(os.environ if environ is None else environ).items():
        if name in TABLES:
            values[name] = {**values.get(name, {}), **value}
        else:
            values[name] = value
    for name in _NAMES:
        value = getattr(args, name, None)
        if value is None:
            continue
        if name in TABLES:
            pairs = dict(split_setting(entry, name) for entry in value)
            values[name] = {**values.get(name, {}), **coerce_setting(name, pairs)}
        else:
            values[name] = coerce_setting(name, value)
    return ServiceConfig(**values)
