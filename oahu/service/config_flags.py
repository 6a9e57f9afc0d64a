"""The command-line flags of ``oahu run``: one per :class:`~oahu.service.config.ServiceConfig`
field, made from the field itself (its name, type and help text), so that a new setting is a
flag with its documentation and the two cannot drift apart."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Collection

from oahu.service.config import ServiceConfig, setting_type
from oahu.service.config_sources import ENV_PREFIX

__all__ = ["add_arguments", "flag_of"]


def flag_of(field: dataclasses.Field) -> str:
    """The flag that sets ``field``: its name with - for _, or a table's own flag.

    >>> [flag_of(f) for f in dataclasses.fields(ServiceConfig) if f.name in ("http", "kafka")]
    ['--http', '--kafka-option']
    """
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """One flag per field (``only`` those named, where given), plus ``--config``; every flag
    defaults to None, so that :func:`oahu.service.config_sources.resolve_config` knows which
    were given.

    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> args = parser.parse_args(["--checkpoint-every", "300", "--kafka-option", "acks=all"])
    >>> args.checkpoint_every, args.kafka, args.http, args.self_paced
    ('300', ['acks=all'], None, None)
    """
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML or YAML file of settings (keys are the option names below, with _ for -); "
        f"environment variables {ENV_PREFIX}<OPTION> override it, flags override both",
    )
    for f in dataclasses.fields(ServiceConfig):
        if only is not None and f.name not in only:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        text = f.metadata["help"]
        if "default:" not in text:  # an option whose help explains its default says it there
            text += f" (default: {default!r})"
        kind = setting_type(f.name)
        if kind is dict:
            action = {"action": "append", "metavar": f.metadata["metavar"]}
        elif kind is bool:
            action = {"action": "store_true", "default": None}
        else:
            action = {"metavar": f.metadata["metavar"]}
        parser.add_argument(flag_of(f), dest=f.name, help=text, **action)
