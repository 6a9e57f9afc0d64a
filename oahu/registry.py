"""Learner names → classes: the CLI, checkpoints and the service build any learner by name."""

from __future__ import annotations

import importlib
from typing import Any

from oahu.learner import Learner

# Imported lazily: a service running one learner need not import the others.
_LEARNERS: dict[str, str] = {
    "oahu": "oahu.oahu_learner:OAHU",
    "euclidean": "oahu.baselines.euclidean:Euclidean",
    "lego": "oahu.baselines.lego:LEGO",
    "rdml": "oahu.baselines.rdml:RDML",
    "oasis": "oahu.baselines.oasis:OASIS",
    "opml": "oahu.baselines.opml:OPML",
}

LEARNER_NAMES: tuple[str, ...] = tuple(_LEARNERS)


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


def make_learner(name: str, n_features: int, **params: Any) -> Learner:
    """Build the learner ``name`` for ``n_features``-dimensional items."""
    return learner_class(name)(n_features=n_features, **params)
