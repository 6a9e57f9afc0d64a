"""The two families of stream files, and how a reader of one refuses a file of the other.

A single-modality constraint stream (:mod:`streams.stream_file`) and a cross-modal stream
(:mod:`streams.cross_modal`) are both ``.npz`` archives or JSON Lines, so opening one with the
other's reader must say which it is and what reads it, rather than fail on a missing field. A
cross-modal file announces itself by its ``format``, :data:`CROSS_MODAL_FORMAT` (the ``.npz``
array ``format``, the JSON Lines header's field ``format``); a file without it is a
single-modality stream.

This module imports nothing of either family, so that both can import it.

>>> print(cross_modal_refusal("s.npz"))  # doctest: +ELLIPSIS
s.npz: a cross-modal stream: read it with oahu.streams.cross_modal.load_cross_modal_stream ...
"""

from __future__ import annotations

import os

__all__ = ["CROSS_MODAL_FORMAT", "cross_modal_refusal", "single_modality_refusal"]

#: The ``format`` a cross-modal stream file announces.
CROSS_MODAL_FORMAT = "oahu-cross-modal-stream"


def cross_modal_refusal(path: str | os.PathLike[str]) -> str:
    """What a single-modality reader says of a cross-modal file."""
    return (
        f"{os.fspath(path)}: a cross-modal stream: read it with "
        "oahu.streams.cross_modal.load_cross_modal_stream (or CrossModalStream.load), not "
        "load_stream"
    )


def single_modality_refusal(path: str | os.PathLike[str]) -> str:
    """What a cross-modal reader says of a single-modality file.

    >>> print(single_modality_refusal("s.jsonl"))  # doctest: +ELLIPSIS
    s.jsonl: a single-modality constraint stream: read it with oahu.streams.load_stream, ...
    """
    return (
        f"{os.fspath(path)}: a single-modality constraint stream: read it with "
        "oahu.streams.load_stream, not load_cross_modal_stream"
    )
