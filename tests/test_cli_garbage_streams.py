"""A file of random bytes given as a stream, to ``oahu replay --stream`` or ``oahu run
--source file://``: the command exits 2 with one line naming the file and what a stream file is,
not a codec's complaint about a byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from oahu.cli.main import main

GARBAGE = bytes([0x78, 0x8C, 0x01, 0x02, 0xFF, 0x00])


@pytest.fixture
def garbage(tmp_path: Path) -> Path:
    path = tmp_path / "x.npz"
    path.write_bytes(GARBAGE)
    return path


def refusal(path: Path) -> str:
    return (
        f"{path}: not an oahu stream file (expected a .npz stream written by `oahu make-stream`, "
        "or JSON Lines); it starts with b'x\\x8c\\x01\\x02\\xff\\x00'\n"
    )


def test_replay_names_the_file_and_what_was_expected(garbage: Path, capsys) -> None:
    assert main(["replay", "--stream", str(garbage), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == "oahu replay: error: " + refusal(garbage)


def test_run_names_the_file_and_what_was_expected(garbage: Path, tmp_path: Path, capsys) -> None:
    argv = ["run", "--source", f"file://{garbage}", "--checkpoint-dir", str(tmp_path / "state"),
            "--http", "127.0.0.1:0", "--log-level", "error"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith("oahu run: error: " + refusal(garbage)), err
    assert "codec" not in err and "Traceback" not in err
