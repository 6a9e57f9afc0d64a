"""Learner names → classes: the CLI, checkpoints and the service build any learner by name."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from typing import Any

from oahu.learner import Learner

# Imported lazily: a service running one learner need not import the others.
_LEARNERS: dict[str, str] = {
    "oahu": "oahu.learners.oahu.learner:OAHU",
    "euclidean": "oahu.learners.baselines.euclidean:Euclidean",
    "lego": "oahu.learners.baselines.lego:LEGO",
    "rdml": "oahu.learners.baselines.rdml:RDML",
    "oasis": "oahu.learners.baselines.oasis:OASIS",
    "opml": "oahu.learners.baselines.opml:OPML",
}

LEARNER_NAMES: tuple[str, ...] = tuple(_LEARNERS)
# Models of items in several modalities: not ``Learner``s (their items carry a modality), saved
# and loaded in the same checkpoint format.
_CROSS_MODAL: dict[str, str] = {
    "oahu-cross-modal": "oahu.learners.cross_modal.learner:CrossModalOAHU",
}
CROSS_MODAL_NAMES: tuple[str, ...] = tuple(_CROSS_MODAL)


def learner_class(name: str) -> type[Learner]:
    """The learner class registered under ``name``."""
    try:
        target = _LEARNERS[name]
    except KeyError:
        raise ValueError(
            f"learner: unknown name {name!r}; choose one of {', '.join(LEARNER_NAMES)}"
        ) from None
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def cross_modal_class(name: str) -> type:
    """The cross-modal model class registered under ``name``."""
    try:
        target = _CROSS_MODAL[name]
    except KeyError:
        raise ValueError(
            f"learner: unknown cross-modal model {name!r}; choose one of "
            f"{', '.join(CROSS_MODAL_NAMES)}"
        ) from None
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def check_params(name: str, params: Mapping[str, Any], what: str) -> None:
    """``ValueError`` naming ``what`` (the flag or field the settings came from) when ``params``
    holds a name that the learner ``name`` does not take, with the nearest one it does.

    >>> check_params("oahu", {"margn": 0.1}, "--set")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --set: oahu has no parameter 'margn' (did you mean 'margin'?); it takes preset, ...
    """
    names = learner_class(name).param_names()
    unknown = [key for key in params if key not in names]
    if unknown:
        close = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"{what}: {name} has no parameter {unknown[0]!r}{hint}; it takes {', '.join(names)}"
        )


def make_learner(name: str, n_features: int, **params: Any) -> Learner:
    """Build the learner ``name`` for ``n_features``-dimensional items; a parameter it does not
    take is a ``ValueError`` (settings come from users: flags, files, environment)."""
    check_params(name, params, "learner parameters")
    return learner_class(name)(n_features=n_features, **params)
