"""A numpy random generator's state as plain checkpoint values, and back.

Learners that draw from a numpy generator (replay, mining, reservoirs) checkpoint it, so that a
restored learner draws what the original would have. The PCG64 state holds 128-bit integers; they
are written as strings, which every torch version's ``torch.load(weights_only=True)`` reads back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["generator_state", "restore_generator"]


def generator_state(rng: np.random.Generator) -> dict[str, Any]:
    """``rng``'s state as checkpointable plain values.

    >>> rng = np.random.default_rng(7)
    >>> saved = generator_state(rng)
    >>> first = rng.integers(1000, size=3).tolist()
    >>> restore_generator(rng, saved)
    >>> rng.integers(1000, size=3).tolist() == first
    True
    """
    state = rng.bit_generator.state
    return {
        "bit_generator": state["bit_generator"],
        "state": str(state["state"]["state"]),
        "inc": str(state["state"]["inc"]),
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def restore_generator(rng: np.random.Generator, saved: dict[str, Any]) -> None:
    """Put ``rng`` back where :func:`generator_state` saw it. Also takes the bit generator's own
    state dict (nested, integers as integers), as cross-modal checkpoints of the first release
    hold it.

    >>> rng = np.random.default_rng(7)
    >>> raw = rng.bit_generator.state
    >>> first = rng.integers(1000, size=3).tolist()
    >>> restore_generator(rng, raw)
    >>> rng.integers(1000, size=3).tolist() == first
    True
    """
    if isinstance(saved["state"], dict):
        rng.bit_generator.state = saved
        return
    rng.bit_generator.state = {
        "bit_generator": saved["bit_generator"],
        "state": {"state": int(saved["state"]), "inc": int(saved["inc"])},
        "has_uint32": saved["has_uint32"],
        "uinteger": saved["uinteger"],
    }
