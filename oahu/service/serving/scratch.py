"""A serving replica's scratch folder, and the removal of those whose replica died.

A replica is stateless, yet the catalog and the console keep what they follow (the item
changes of the items topic, a cross-modal gallery's overlays) in files while it lives. It
removes the folder when it shuts down; a replica killed with ``kill -9`` cannot, and under a
supervisor that restarts it (a container's restart policy keeps its ``/tmp``) each crash
would leave one, as large as the item changes it followed. So every replica holds an
exclusive ``flock`` on a file in its folder for as long as it lives, which the kernel drops
when the process dies however it dies, and a replica that starts removes every folder whose
lock it can take: their owners are gone. Folders of live replicas, of other users or of
another program are left as they are.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["PREFIX", "ScratchFolder", "remove_abandoned"]

PREFIX = "oahu-replica-"
_LOCK = ".owner"  # held by the replica that owns the folder


class ScratchFolder:
    """A new folder under ``parent`` (the temporary directory by default) that this process
    owns until :meth:`remove` or its death; creating one first removes the abandoned ones.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as parent:
    ...     first = ScratchFolder(parent)
    ...     second = ScratchFolder(parent)  # the first one's owner (this process) lives on
    ...     held = [p.name[: len(PREFIX)] for p in Path(parent).iterdir()]
    ...     first.remove(), second.remove()
    ...     left = list(Path(parent).iterdir())
    (None, None)
    >>> held, left
    (['oahu-replica-', 'oahu-replica-'], [])
    """

    def __init__(self, parent: str | os.PathLike[str] | None = None) -> None:
        remove_abandoned(parent)
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
        # Locked before it takes the name another replica's sweep looks for, so that no sweep
        # can find the folder without its lock held.
        pending = self.path / (_LOCK + ".new")
        self._lock_fd = os.open(pending, os.O_CREAT | os.O_WRONLY, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(pending, self.path / _LOCK)

    def remove(self) -> None:
        """Delete the folder and what it holds (at shutdown)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def remove_abandoned(parent: str | os.PathLike[str] | None = None) -> list[Path]:
    """Delete the scratch folders under ``parent`` whose replica has died; returns them."""
    removed = []
    for folder in Path(parent or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            fd = os.open(folder / _LOCK, os.O_RDONLY)
        except OSError:  # no lock yet (being created), not ours, or not readable by this user
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its replica lives
            continue
        finally:
            # Closing the descriptor drops a lock just taken; the folder is abandoned either way.
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
