"""The service checkpoint: learner state and stream progress in one atomically written file, and
the previous ones kept beside it to fall back to.

Learner and offsets are saved together (``oahu.persistence.save_learner`` with the progress in its
``extra``), so a checkpoint always pairs a model with exactly the records that trained it: a
restart seeks to the stored offsets and every constraint is applied once.

Each file carries the SHA-256 of its payload (:mod:`oahu.persistence`). Before a new checkpoint
replaces ``checkpoint.pt``, the last :data:`KEEP_PREVIOUS` ones move to ``checkpoint.1.pt``
(the previous) and ``checkpoint.2.pt``; ``checkpoint.pt`` itself exists at every moment.
:func:`restore_checkpoint` takes the newest file that passes its check: when that is not
``checkpoint.pt`` it logs an error naming what was refused, renames the refused files
``NAME.corrupt``, and the learner process seeks to that checkpoint's own offsets (model and
offsets from one file), replaying what the refused checkpoint had covered. When no file
passes, it refuses to start with one line naming them.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from oahu.connectors.answered import AnsweredQuestions
from oahu.learner import Learner
from oahu.persistence import LearnerFileError, learner_to_bytes, load_learner
from oahu.streams.atomic import atomic_open

log = logging.getLogger("oahu.service")

CHECKPOINT_FILE = "checkpoint.pt"
KEEP_PREVIOUS = 2  # earlier checkpoints kept beside the latest, to fall back to


@dataclass
class Progress:
    """How far the stream has been consumed into the model.

    ``offsets``: the next offset to read per partition. ``consumed``: records read (good or
    bad); ``dead_letters``: rejected records by reason; ``items_version``: the catalog version
    (API changes to the items) at checkpoint time. ``answered``: the questions whose answer the
    model has consumed (the most recent :data:`~oahu.connectors.answered.MAX_ANSWERED`), so that
    an answer that reaches the stream twice is learned once, across restarts and rewinds alike.
    ``group``: a learning group's cut (:mod:`oahu.service.group`): ``members`` and the combine
    ``round`` it was taken at; empty for one learner process.

    >>> p = Progress({0: 12}, consumed=12, dead_letters=Counter(undecodable=1))
    >>> p.answered.add("3f9a0c"), Progress.from_extra(p.to_extra()) == p
    (True, True)
    """

    offsets: dict[int, int] = field(default_factory=dict)
    consumed: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    items_version: int = 0
    source: str = ""
    written_at: float = 0.0
    answered: AnsweredQuestions = field(default_factory=AnsweredQuestions)
    group: dict[str, int] = field(default_factory=dict)

    def to_extra(self) -> dict[str, Any]:
        # str keys: the checkpoint is read back with torch.load(weights_only=True)
        return {
            "offsets": {str(p): int(o) for p, o in self.offsets.items()},
            "constraints_consumed": int(self.consumed),
            "dead_letters": dict(self.dead_letters),
            "items_version": int(self.items_version),
            "source": self.source,
            "written_at": float(self.written_at),
            "answered_questions": list(self.answered),
            "group": {k: int(v) for k, v in self.group.items()},
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
            AnsweredQuestions(str(q) for q in extra.get("answered_questions", ())),
            {str(k): int(v) for k, v in extra.get("group", {}).items()},
        )


class CheckpointError(ValueError):
    """No checkpoint file of a directory that has some can be loaded (one line: files, why, and
    the remedy)."""


@dataclass
class Restored:
    """A checkpoint read back: the learner, its progress, the file it came from, and why each
    newer file was refused (``refused`` is empty when it is the latest)."""

    learner: Learner
    progress: Progress
    path: Path
    refused: list[str] = field(default_factory=list)

    @property
    def fell_back(self) -> bool:
        """Whether this is an earlier checkpoint than the latest written."""
        return bool(self.refused)


def make_state_dir(directory: str | os.PathLike[str]) -> Path:
    """The service's state folder (``--checkpoint-dir``), made if missing, with the temporary
    files a crash in the middle of a write left in it removed. A path that exists and is not a
    folder is refused by name, where ``mkdir`` would raise a bare "File exists".

    >>> make_state_dir("/dev/null")
    Traceback (most recent call last):
    ...
    ValueError: checkpoint_dir: '/dev/null' exists and is not a directory
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"checkpoint_dir: {str(path)!r} exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    return path


def outermost_missing(directory: str | os.PathLike[str]) -> Path | None:
    """The outermost folder :func:`make_state_dir` would make for ``directory`` (None when it
    exists): removing it takes away everything that made.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> outermost_missing(root / "a" / "b") == root / "a", outermost_missing(root)
    (True, None)
    """
    missing, wanted = None, Path(directory).absolute()
    for path in (wanted, *wanted.parents):
        if path.exists():
            return missing
        missing = path
    return missing


def checkpoint_path(directory: str | os.PathLike[str]) -> Path:
    return Path(directory) / CHECKPOINT_FILE


def checkpoint_files(path: str | os.PathLike[str]) -> list[Path]:
    """``path`` and its kept predecessors, newest first.

    >>> [p.name for p in checkpoint_files("state/checkpoint.pt")]
    ['checkpoint.pt', 'checkpoint.1.pt', 'checkpoint.2.pt']
    """
    path = Path(path)
    return [path] + [
        path.with_name(f"{path.stem}.{n}{path.suffix}") for n in range(1, KEEP_PREVIOUS + 1)
    ]


def _keep_previous(path: Path) -> None:
    """Shift the kept checkpoints one place older and keep the current one as the previous,
    leaving ``path`` in place: a crash at any point leaves ``path`` and every kept file whole."""
    files = checkpoint_files(path)
    for newer, older in reversed(list(pairwise(files[1:]))):
        if newer.exists():
            os.replace(newer, older)
    if not path.exists():
        return
    link = path.with_name(f".{files[1].name}.keep.tmp")  # swept at start like atomic_open's
    link.unlink(missing_ok=True)
    try:
        os.link(path, link)  # the same bytes under a second name: no copy
    except OSError:  # a file system without hard links
        shutil.copyfile(path, link)
    os.replace(link, files[1])


def write_checkpoint(
    path: str | os.PathLike[str],
    learner: Learner,
    progress: Progress,
    keep_previous: bool = True,
) -> bytes:
    """Atomically write learner + progress (temp file, fsync, rename, fsync dir), the one it
    replaces kept as the previous checkpoint (:func:`checkpoint_files`) unless not
    ``keep_previous`` (it holds the same model); returns the bytes written."""
    # Built before the rotation: a failure to build or write it leaves the kept ones as they were.
    data = learner_to_bytes(learner, extra={"service": progress.to_extra()})
    if keep_previous:
        _keep_previous(Path(path))
    with atomic_open(path, "wb") as fh:
        fh.write(data)
    return data


def read_checkpoint(path: str | os.PathLike[str]) -> tuple[Learner, Progress] | None:
    """The learner and progress in ``path``, or None when there is no checkpoint yet.

    Raises :class:`~oahu.persistence.LearnerFileError` when ``path`` is corrupt.
    """
    if not Path(path).exists():
        return None
    learner, extra = load_learner(path)
    return learner, Progress.from_extra(extra.get("service", {}))


def _set_aside(refused: list[Path]) -> None:
    """Rename refused checkpoint files to ``NAME.corrupt`` (kept for a look, no longer kept as
    checkpoints): the next checkpoints then shift the valid one rather than them."""
    for file in refused:
        if file.exists():
            os.replace(file, file.with_name(file.name + ".corrupt"))


def restore_checkpoint(path: str | os.PathLike[str]) -> Restored | None:
    """The newest valid checkpoint among ``path`` and its kept predecessors, or None when there
    is none of them (a new model).

    Falling back past a missing or corrupt ``path`` is logged as an error naming the files,
    and the corrupt ones are renamed ``NAME.corrupt``; raises :class:`CheckpointError` (and
    renames nothing) when files exist and none is valid.
    """
    files = checkpoint_files(path)
    present = [f for f in files if f.exists()]
    if not present:
        return None
    refused: list[str] = []
    for file in files:
        try:
            restored = read_checkpoint(file)
        except (LearnerFileError, OSError) as exc:
            refused.append(str(exc))
            continue
        if restored is None:
            if file == files[0]:
                refused.append(f"{file}: missing")
            continue
        learner, progress = restored
        if refused:
            _set_aside(files[: files.index(file)])
            log.error(
                "CHECKPOINT FALLBACK: %s; continuing from the earlier checkpoint %s "
                "(%d constraints consumed, offsets %s): records after those offsets are learned "
                "again (refused files renamed *.corrupt)",
                "; ".join(refused),
                file,
                progress.consumed,
                dict(sorted(progress.offsets.items())),
            )
        return Restored(learner, progress, file, refused)
    raise CheckpointError(
        f"{files[0]}: no valid checkpoint to continue from ({'; '.join(refused)}); "
        f"restore the files from a backup, or move {', '.join(f.name for f in present)} out of "
        f"{files[0].parent} to start a new model"
    )
