"""A replica's scratch folder: its own goes at shutdown, and those of replicas killed with
``kill -9`` go when the next one starts, while those of live replicas and of other programs
stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from service_support import REPO

from oahu.service.serving.scratch import PREFIX, ScratchFolder, remove_abandoned

OWNER = (
    "import sys, time\n"
    "from oahu.service.serving.scratch import ScratchFolder\n"
    "folder = ScratchFolder(sys.argv[1])\n"
    "print(folder.path, flush=True)\n"
    "time.sleep(600)\n"
)


def start_owner(parent: Path) -> tuple[subprocess.Popen, Path]:
    """Another process that made a scratch folder under ``parent`` and lives on."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(parent)], stdout=subprocess.PIPE,
                            text=True, env=env)  # fmt: skip
    return proc, Path(proc.stdout.readline().strip())


def kill_9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()


def test_the_folders_of_killed_replicas_go_when_the_next_one_starts(tmp_path: Path) -> None:
    killed, killed_folder = start_owner(tmp_path)
    live, live_folder = start_owner(tmp_path)
    try:
        (killed_folder / "items-api.npz").write_bytes(b"what the killed replica followed")
        foreign = tmp_path / (PREFIX + "of-another-program")  # no owner's lock: not ours
        foreign.mkdir()
        kill_9(killed)
        mine = ScratchFolder(tmp_path)
        assert not killed_folder.exists()
        assert live_folder.is_dir() and foreign.is_dir() and mine.path.is_dir()
        assert sorted(tmp_path.iterdir()) == sorted([live_folder, foreign, mine.path])

        kill_9(live)
        assert remove_abandoned(tmp_path) == [live_folder]  # mine is held by this process
        mine.remove()
        assert list(tmp_path.iterdir()) == [foreign]
    finally:
        for proc in (killed, live):
            if proc.poll() is None:
                kill_9(proc)
