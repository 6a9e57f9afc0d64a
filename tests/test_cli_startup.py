"""The ``oahu`` command imports only the command it runs: ``oahu suggest`` in a labelling loop
or ``oahu produce`` in a script starts in a fraction of a second, where loading every command
(torch among them, for ``run`` and ``replay``) took seconds."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from oahu.cli.main import COMMANDS

HEAVY = ("torch", "sklearn", "river")


def loaded_after(argv: list[str]) -> tuple[list[str], str, int]:
    """The heavy modules loaded by ``oahu ARGV`` in a fresh interpreter, its output and its
    exit status (``--help`` and argparse errors exit through SystemExit)."""
    probe = (
        "import sys\n"
        "from oahu.cli.main import main\n"
        "try:\n"
        f"    code = main({argv!r})\n"
        "except SystemExit as stop:\n"
        "    code = stop.code\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules], code)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    *shown, last = done.stdout.strip().splitlines()
    heavy, code = last.rsplit(" ", 1)
    return ast.literal_eval(heavy), "\n".join(shown) + done.stderr, int(code)


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["suggest", "--help"], "usage: oahu suggest"),
        (["produce", "--help"], "usage: oahu produce"),
        (["datasets", "list"], "letter"),  # the listing itself: a packaged set's name
        (["make-stream", "-h"], "usage: oahu make-stream"),
    ],
)
def test_a_light_command_loads_no_heavy_library(argv, shown):
    heavy, output, code = loaded_after(argv)
    assert code == 0, output
    assert heavy == []
    assert shown in output


def test_a_light_command_still_checks_its_arguments_and_names_its_own_options():
    heavy, output, code = loaded_after(["suggest", "--url", "http://127.0.0.1:1"])
    assert (heavy, code) == ([], 2)
    assert "oahu suggest: error: the following arguments are required: --batch" in output


@pytest.mark.parametrize(("batch", "words"), [("0", "got 0"), ("-2", "got -2"), ("x", "got 'x'")])
def test_a_batch_of_no_questions_is_refused_before_the_service_is_asked(batch, words):
    # Nothing listens on port 1: a refusal here comes from the command, not from the service.
    heavy, output, code = loaded_after(["suggest", "--url", "http://127.0.0.1:1", "--batch", batch])
    assert (heavy, code) == ([], 2)
    assert f"oahu suggest: error: argument --batch: must be an integer >= 1, {words}" in output
    assert "cannot reach" not in output


def test_help_and_a_mistyped_command_list_every_command():
    names = [name.replace("_", "-") for name in COMMANDS]
    _, output, code = loaded_after(["--help"])
    assert code == 0
    assert all(f"    {name}" in output for name in names), output
    _, output, code = loaded_after(["sugest"])
    assert code == 2
    assert "argument COMMAND: invalid choice: 'sugest' (choose from " in output
    assert all(f"'{name}'" in output for name in names), output


def test_a_command_that_learns_gets_its_whole_parser():
    heavy, output, code = loaded_after(["replay", "--help"])
    assert code == 0 and "torch" in heavy
    assert "--learner" in output and "--cross-modal" in output


def test_an_unknown_option_is_refused_by_its_command_with_that_command_s_usage():
    """``oahu: error`` and the list of commands would not say which options the command has."""
    argv = ["make-stream", "--dataset", "digits", "--n-constraints", "5", "--out", "s.npz"]
    heavy, output, code = loaded_after(argv)
    assert (heavy, code) == ([], 2)
    assert output.startswith("usage: oahu make-stream")
    assert "--constraints N" in output  # the option meant, in the usage shown
    assert output.endswith("oahu make-stream: error: unrecognized arguments: --n-constraints 5\n")
