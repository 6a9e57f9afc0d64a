"""The two families of stream files, and how a reader of one refuses a file of the other.

A single-modality constraint stream (:mod:`streams.stream_file`) and a cross-modal stream
(:mod:`streams.cross_modal`) are both ``.npz`` archives or JSON Lines, so opening one with the
other's reader must say which it is and what reads it, rather than fail on a missing field. A
cross-modal file announces itself by its ``format``, :data:`CROSS_MODAL_FORMAT` (the ``.npz``
array ``format``, the JSON Lines header's field ``format``); a file without it is a
single-modality stream.

This module imports nothing of either family, so that both can import it.

>>> refusal = cross_modal_refusal("s.npz")
>>> print(refusal)  # doctest: +ELLIPSIS
s.npz: a cross-modal stream: read it with oahu.streams.cross_modal.load_cross_modal_stream ...
>>> isinstance(refusal, ValueError), refusal.cross_modal
(True, True)
"""

from __future__ import annotations

import os

__all__ = [
    "CROSS_MODAL_FORMAT",
    "OtherStreamFamily",
    "cross_modal_refusal",
    "single_modality_refusal",
]

#: The ``format`` a cross-modal stream file announces.
CROSS_MODAL_FORMAT = "oahu-cross-modal-stream"


class OtherStreamFamily(ValueError):
    """A stream file of the other family than its reader's; ``cross_modal`` says which the
    file is, so that a caller can say what to do instead (``--cross-modal``, say) without
    reading the message."""

    def __init__(self, message: str, cross_modal: bool) -> None:
        super().__init__(message)
        self.cross_modal = cross_modal


def cross_modal_refusal(path: str | os.PathLike[str]) -> OtherStreamFamily:
    """What a single-modality reader raises for a cross-modal file."""
    return OtherStreamFamily(
        f"{os.fspath(path)}: a cross-modal stream: read it with "
        "oahu.streams.cross_modal.load_cross_modal_stream (or CrossModalStream.load), not "
        "load_stream",
        cross_modal=True,
    )


def single_modality_refusal(path: str | os.PathLike[str]) -> OtherStreamFamily:
    """What a cross-modal reader raises for a single-modality file.

    >>> print(single_modality_refusal("s.jsonl"))  # doctest: +ELLIPSIS
    s.jsonl: a single-modality constraint stream: read it with oahu.streams.load_stream, ...
    """
    return OtherStreamFamily(
        f"{os.fspath(path)}: a single-modality constraint stream: read it with "
        "oahu.streams.load_stream, not load_cross_modal_stream",
        cross_modal=False,
    )
