"""A file of random bytes given as a stream, to ``oahu replay --stream`` or ``oahu run
--source file://``: the command exits 2 with one line naming the file and what a stream file is,
not a codec's complaint about a byte."""

from __future__ import annotations

import subprocess
import sys
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
    # refused before anything was written: no state folder
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("option", ["--items", "--gallery"])
def test_run_names_a_bad_items_or_gallery_file(
    garbage: Path, tmp_path: Path, capsys, option: str
) -> None:
    # A .npz name does not make a file an archive: the refusal is the stream reader's, not
    # numpy's advice to unpickle it.
    argv = ["run", option, str(garbage), "--checkpoint-dir", str(tmp_path / "state" / "run"),
            "--http", "127.0.0.1:0", "--log-level", "error", "--exit-at-end"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith("oahu run: error: " + refusal(garbage)), err
    assert "pickle" not in err
    # Without --source the embedded default stream was written into the state folder before
    # the file was read; the refusal took away both folders this start made.
    assert not (tmp_path / "state").exists()


def test_a_refusal_keeps_a_state_folder_it_did_not_make(garbage: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "checkpoint.pt").write_bytes(b"a deployment's state")
    argv = ["run", "--gallery", str(garbage), "--checkpoint-dir", str(state),
            "--http", "127.0.0.1:0", "--log-level", "error", "--exit-at-end"]  # fmt: skip
    assert main(argv) == 2
    assert (state / "checkpoint.pt").read_bytes() == b"a deployment's state"


@pytest.mark.parametrize(
    "argv, named, why",
    [
        (["run", "--items", "{missing}"], "missing", "no such file or directory"),
        (["run", "--gallery", "{folder}"], "folder", "is a directory"),
        (["produce", "--stream", "{missing}", "--to", "kafka://127.0.0.1:9/t"], "missing",
         "no such file or directory"),
    ],
)  # fmt: skip
def test_a_file_that_cannot_be_read_is_named_with_the_reason(
    tmp_path: Path, capsys, argv: list[str], named: str, why: str
) -> None:
    paths = {"missing": str(tmp_path / "gone.npz"), "folder": str(tmp_path)}
    argv = [a.format(**paths) for a in argv]
    if argv[0] == "run":
        argv += ["--checkpoint-dir", str(tmp_path / "state"), "--http", "127.0.0.1:0",
                 "--log-level", "error", "--exit-at-end"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"oahu {argv[0]}: error: {paths[named]}: {why}\n"), err


def test_at_the_default_log_level_the_refusal_is_the_only_line(tmp_path: Path) -> None:
    """A fresh process at the default level (info): what the libraries log while the command
    starts (faiss names the build it loaded) does not come before the refusal."""
    missing = tmp_path / "gone.npz"
    argv = [sys.executable, "-m", "oahu.cli.main", "run", "--source", f"file://{missing}",
            "--checkpoint-dir", str(tmp_path / "state"), "--http", "127.0.0.1:0"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr == f"oahu run: error: {missing}: no such file or directory\n"


def test_a_checkpoint_dir_that_is_a_file_is_refused_by_name(tmp_path: Path, capsys) -> None:
    """``mkdir`` of an existing file raised a bare FileExistsError, with its traceback."""
    taken = tmp_path / "state"
    taken.write_text("not a folder")
    argv = ["run", "--checkpoint-dir", str(taken), "--http", "127.0.0.1:0", "--log-level",
            "error", "--exit-at-end", "--default-constraints", "100"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"oahu run: error: checkpoint_dir: {str(taken)!r} exists and is not a directory\n"
    assert taken.read_text() == "not a folder"
