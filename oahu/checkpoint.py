"""Saving and loading a learner's full state, atomically.

A checkpoint is a ``torch.save`` of plain containers and tensors (see ``Learner.get_state``), so
it loads with ``weights_only=True``: opening a checkpoint never executes code from it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from oahu.learner import Learner
from oahu.registry import learner_class
from oahu.streams.atomic import atomic_open

FORMAT_VERSION = 1


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save`` so that a crash leaves either the old file or the new one."""
    with atomic_open(path, "wb") as fh:
        torch.save(obj, fh)


def save_learner(
    learner: Learner, path: str | os.PathLike[str], extra: dict[str, Any] | None = None
) -> None:
    """Atomically save ``learner`` (and optional plain ``extra`` data) to ``path``."""
    atomic_torch_save(
        {"format_version": FORMAT_VERSION, "state": learner.get_state(), "extra": extra or {}},
        path,
    )


def load_learner(
    path: str | os.PathLike[str], device: str | None = None
) -> tuple[Learner, dict[str, Any]]:
    """Load a learner saved by ``save_learner``; returns ``(learner, extra)``.

    ``device`` overrides the device the learner was saved from (for learners that have one).
    """
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if blob.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"format_version: checkpoint {path} has {blob.get('format_version')!r}, "
            f"this oahu reads {FORMAT_VERSION}"
        )
    state = blob["state"]
    params = dict(state["params"])
    if device is not None and "device" in params:
        params["device"] = device
    learner = learner_class(state["learner"])(n_features=state["n_features"], **params)
    learner.set_state(state)
    return learner, blob["extra"]
