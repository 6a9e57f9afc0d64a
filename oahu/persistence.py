"""Saving and loading learners: the one format of checkpoints, ``oahu replay --save-model``, the
pipe between the service's two processes, pickling and the Python API.

A saved learner is ``torch.save`` of plain containers and tensors::

    {"format_version": 1, "state": Learner.get_state(), "extra": {...}}

so it loads with ``torch.load(..., weights_only=True)``: opening one never executes code from
it. ``state["params"]`` is the learner's ``get_params()``, read from its constructor signature,
and rebuilding a learner calls its class with those parameters before ``set_state``.

Checkpoints written before oahu's own OAHU learner became the default (issue 8) hold an OAHU
that was the paper's algorithm, and its params name none of the fields that came with the new
default: they are rebuilt as ``preset="paper"`` with the fields they record, i.e. as what they
were (:func:`checkpoint_params`).

>>> from oahu.baselines.rdml import RDML
>>> rdml = RDML(n_features=2, learning_rate=0.2)
>>> _ = rdml.learn_pairs([[2.0, 0.0]], [[0.0, 0.0]], [True])
>>> copy, extra = learner_from_bytes(learner_to_bytes(rdml, extra={"offset": 1}))
>>> copy, extra, copy.metric_matrix.tolist() == rdml.metric_matrix.tolist()
(RDML(n_features=2, learning_rate=0.2), {'offset': 1}, True)
"""

from __future__ import annotations

import io
import os
from typing import IO, Any

import torch

from oahu.learner import Learner
from oahu.registry import learner_class
from oahu.streams.atomic import atomic_open

FORMAT_VERSION = 1


# OAHUConfig's fields that came with oahu's own default learner (issue 8). A checkpoint whose
# OAHU params hold none of them was written when every OAHU was the paper's Algorithm 1.
_OAHU_FIELDS_OF_THE_DEFAULT_LEARNER = frozenset(
    {
        "lr_decay",
        "loss",
        "margin",
        "hedge_signal",
        "depth_weighting",
        "residual_heads",
        "replay",
        "replay_memory",
        "mined",
        "item_memory",
        "mining_candidates",
        "graph_memory",
        "prequential_window",
    }
)


def checkpoint_params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments that rebuild learner ``name`` saved with ``params``.

    An OAHU saved before oahu's default learner existed ran the paper's algorithm (ABTL, hedge
    on the loss, no residual heads, replay or mining) with the fields its params record (all of
    its configuration then, with or without a ``preset`` key, and ``"tuned"`` was a preset of
    those fields): it is rebuilt as ``preset="paper"`` with them, so that the fields it predates
    take the paper's values rather than the new defaults.

    >>> old = {"hidden_width": 8, "embedding_dim": 4, "learning_rate": 0.3, "preprocess": "none"}
    >>> checkpoint_params("oahu", old)["preset"]
    'paper'
    >>> checkpoint_params("oahu", {"preset": None, "loss": "margin"})
    {'preset': None, 'loss': 'margin'}
    """
    if name == "oahu" and not _OAHU_FIELDS_OF_THE_DEFAULT_LEARNER & set(params):
        return {**params, "preset": "paper"}
    return dict(params)


def learner_from_state(state: dict[str, Any], device: str | None = None) -> Learner:
    """A new learner holding ``state`` (``Learner.get_state``), built from its parameters.

    ``device`` replaces the device the learner was saved with, for learners that have one.
    """
    params = checkpoint_params(state["learner"], state["params"])
    if device is not None and "device" in params:
        params["device"] = device
    learner = learner_class(state["learner"])(n_features=state["n_features"], **params)
    learner.set_state(state)
    return learner


def _write(learner: Learner, extra: dict[str, Any] | None, fh: IO[bytes]) -> None:
    blob = {"format_version": FORMAT_VERSION, "state": learner.get_state(), "extra": extra or {}}
    torch.save(blob, fh)


def _read(
    source: str | os.PathLike[str] | IO[bytes], device: str | None
) -> tuple[Learner, dict[str, Any]]:
    blob = torch.load(source, map_location="cpu", weights_only=True)
    if blob.get("format_version") != FORMAT_VERSION:
        where = source if isinstance(source, str | os.PathLike) else "the data"
        raise ValueError(
            f"format_version: {where} has {blob.get('format_version')!r}, "
            f"this oahu reads {FORMAT_VERSION}"
        )
    return learner_from_state(blob["state"], device), blob["extra"]


def learner_to_bytes(learner: Learner, extra: dict[str, Any] | None = None) -> bytes:
    """``learner`` (and optional plain ``extra`` data) as bytes."""
    buffer = io.BytesIO()
    _write(learner, extra, buffer)
    return buffer.getvalue()


def learner_from_bytes(data: bytes, device: str | None = None) -> tuple[Learner, dict[str, Any]]:
    """The learner and ``extra`` of :func:`learner_to_bytes`'s output."""
    return _read(io.BytesIO(data), device)


def save_learner(
    learner: Learner, path: str | os.PathLike[str], extra: dict[str, Any] | None = None
) -> None:
    """Write ``learner`` (and ``extra``) to ``path`` atomically: a crash leaves the old file or
    the complete new one."""
    with atomic_open(path, "wb") as fh:
        _write(learner, extra, fh)


def load_learner(
    path: str | os.PathLike[str], device: str | None = None
) -> tuple[Learner, dict[str, Any]]:
    """The learner and ``extra`` saved by :func:`save_learner`."""
    return _read(path, device)


def restore(data: bytes) -> Learner:
    """The learner of :func:`learner_to_bytes`'s output (how a pickled learner is read back)."""
    return learner_from_bytes(data)[0]
