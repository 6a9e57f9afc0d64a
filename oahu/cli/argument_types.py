"""Value types for the commands' options, refused by argparse with the option's own name
(``argument --batch: ...``) rather than later, by the code they reach, with its own names.
Light: the quick commands (``oahu suggest``) import it."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["integer_at_least"]


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """The option type of integers >= ``minimum``.

    >>> questions = integer_at_least(1)
    >>> questions("3")
    3
    >>> questions("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be an integer >= 1, got 0
    >>> questions("x")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be an integer >= 1, got 'x'
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer >= {minimum}, got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    return parse
