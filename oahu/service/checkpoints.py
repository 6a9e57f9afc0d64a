"""The service checkpoint: learner state and stream progress in one atomically written file.

Learner and offsets are saved together (``oahu.persistence.save_learner`` with the progress in its
``extra``), so a checkpoint always pairs a model with exactly the records that trained it: a
restart seeks to the stored offsets and every constraint is applied once.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oahu.learner import Learner
from oahu.persistence import load_learner, save_learner

CHECKPOINT_FILE = "checkpoint.pt"


@dataclass
class Progress:
    """How far the stream has been consumed into the model.

    ``offsets``: the next offset to read per partition. ``consumed``: records read (good or
    bad); ``dead_letters``: rejected records by reason; ``items_version``: the catalog version
    (API changes to the items) at checkpoint time.

    >>> p = Progress({0: 12}, consumed=12, dead_letters=Counter(undecodable=1))
    >>> Progress.from_extra(p.to_extra()) == p
    True
    """

    offsets: dict[int, int] = field(default_factory=dict)
    consumed: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    items_version: int = 0
    source: str = ""
    written_at: float = 0.0

    def to_extra(self) -> dict[str, Any]:
        # str keys: the checkpoint is read back with torch.load(weights_only=True)
        return {
            "offsets": {str(p): int(o) for p, o in self.offsets.items()},
            "constraints_consumed": int(self.consumed),
            "dead_letters": dict(self.dead_letters),
            "items_version": int(self.items_version),
            "source": self.source,
            "written_at": float(self.written_at),
        }

    @classmethod
    def from_extra(cls, extra: dict[str, Any]) -> Progress:
        return cls(
            {int(p): int(o) for p, o in extra.get("offsets", {}).items()},
            int(extra.get("constraints_consumed", 0)),
            Counter({k: int(v) for k, v in extra.get("dead_letters", {}).items()}),
            int(extra.get("items_version", 0)),
            str(extra.get("source", "")),
            float(extra.get("written_at", 0.0)),
        )


def checkpoint_path(directory: str | os.PathLike[str]) -> Path:
    return Path(directory) / CHECKPOINT_FILE


def write_checkpoint(path: str | os.PathLike[str], learner: Learner, progress: Progress) -> None:
    """Atomically write learner + progress (temp file, fsync, rename, fsync dir)."""
    save_learner(learner, path, extra={"service": progress.to_extra()})


def read_checkpoint(path: str | os.PathLike[str]) -> tuple[Learner, Progress] | None:
    """The learner and progress in ``path``, or None when there is no checkpoint yet."""
    if not Path(path).exists():
        return None
    learner, extra = load_learner(path)
    return learner, Progress.from_extra(extra.get("service", {}))
