"""The messages between the service's two processes, over two one-way pipes.

Serving process → learner process:

* :class:`Start`, always first: the learner to continue from and the stream progress, as the
  serving process read them from the checkpoint (or built them new);
* :class:`~oahu.service.catalog.ItemChange`: an item added or removed through the API, already
  written durably by the serving process, to apply to the learner's replica of the items;
* :class:`Stop`: finish the current run of updates, checkpoint, commit and exit 0.

Learner process → serving process:

* :class:`State`: the learner, when a new snapshot is due (the serving process embeds and
  indexes the gallery itself);
* :class:`Report`: the status for ``/v1/model`` and the learner's metric families for
  ``/metrics``;
* :class:`Ack`: item changes up to ``version`` are applied;
* :class:`Failure`: a traceback, sent before the learner process exits 1.

Learners travel as :mod:`oahu.persistence` bytes; everything else is plain, picklable data.

>>> Ack(3) == Ack(3), isinstance(Stop(), ToLearner)
(True, True)
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import Metric

from oahu.service.catalog import ItemChange

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what stops either process cleanly
EXIT_ORPHANED = 3  # the learner process's exit code when the serving process vanished


@dataclass(frozen=True)
class Start:
    """The learner (:mod:`oahu.persistence` bytes) and ``Progress.to_extra()`` to start from.

    ``fell_back``: they come from an earlier checkpoint than the latest, which was refused as
    corrupt or missing (``oahu.service.checkpoints.restore_checkpoint``): the source's committed
    offsets may be the refused checkpoint's, so this progress's own offsets win over them.
    """

    learner: bytes
    progress: dict[str, Any]
    fell_back: bool = False


@dataclass(frozen=True)
class Stop:
    """Stop cleanly: checkpoint, commit, exit 0."""


@dataclass(frozen=True)
class State:
    """The learner (:mod:`oahu.persistence` bytes) for a new snapshot."""

    learner: bytes


@dataclass(frozen=True)
class Report:
    """The model and stream status (``oahu.service.status.model_status``) and metric families."""

    status: dict[str, Any]
    families: list[Metric] = field(default_factory=list)


@dataclass(frozen=True)
class Ack:
    """Item changes up to ``version`` are applied in the learner process."""

    version: int


@dataclass(frozen=True)
class Failure:
    """Why the learner process failed (a traceback)."""

    detail: str


ToLearner = Start | ItemChange | Stop
ToServing = State | Report | Ack | Failure
