"""Saving and loading a learner's full state, atomically.

A checkpoint is a ``torch.save`` of plain containers and tensors (see ``Learner.get_state``), so
it loads with ``weights_only=True``: opening a checkpoint never executes code from it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from oahu.learner import Learner
from oahu.registry import learner_class

FORMAT_VERSION = 1


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` to ``path`` so that a crash leaves either the old file or the new one.

    Temp file in the same directory, fsync, rename, fsync the directory.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
