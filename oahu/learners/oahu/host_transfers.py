"""Copies between the host and a device that do not wait for the device's work (ours; used by
:mod:`oahu.learners.oahu.device_steps`).

A copy from pageable host memory to a GPU first waits for every kernel queued before it, and a
copy back into pageable memory blocks the host until it is done: with a block of updates in
flight, either one stalls the host that should be preparing the next block. Copies through
pinned memory are queued behind the stream's work instead. :class:`HostBuffers` keeps two sets of
host tensors shaped as some device tensors and uses them in turn, so that one block's set is
written while the block before it, with the other set, may still be in flight; on the CPU the
same code runs on plain tensors.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["HostBuffers", "InFlight"]


class InFlight:
    """Copies on their way to the host, and the CUDA event after which they are there (None:
    they are there already)."""

    def __init__(self, copies: list[torch.Tensor], done: torch.cuda.Event | None) -> None:
        self.copies = copies
        self.done = done

    def wait(self) -> list[torch.Tensor]:
        if self.done is not None:
            self.done.synchronize()
        return self.copies


class HostBuffers:
    """Two sets of host tensors shaped as ``like``, pinned when ``pinned``, used in turn.

    >>> device_tensors = [torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)]
    >>> buffers = HostBuffers(device_tensors, pinned=False)
    >>> buffers.upload(device_tensors, [np.ones((2, 2)), np.arange(2)], n=2)
    >>> device_tensors[1].tolist()
    [0, 1, 0, 0]
    >>> ones, indices = buffers.download([device_tensors[0][:2], device_tensors[1]]).wait()
    >>> ones.tolist(), indices.tolist()
    ([[1.0, 1.0], [1.0, 1.0]], [0, 1, 0, 0])
    """

    def __init__(self, like: list[torch.Tensor], pinned: bool) -> None:
        self.pinned = pinned
        self.sets = [
            [torch.empty(t.shape, dtype=t.dtype, pin_memory=pinned) for t in like] for _ in range(2)
        ]
        self.turn = 0

    def _next(self) -> list[torch.Tensor]:
        chosen = self.sets[self.turn]
        self.turn ^= 1
        return chosen

    def upload(self, targets: list[torch.Tensor], values: list[np.ndarray], n: int) -> None:
        """``targets[i][:n] = values[i]`` (numpy, broadcast and cast as numpy assigns), through
        the next set of host tensors."""
        for target, host, value in zip(targets, self._next(), values, strict=True):
            host[:n].numpy()[...] = value
            target[:n].copy_(host[:n], non_blocking=True)

    def download(self, sources: list[torch.Tensor]) -> InFlight:
        """Copies of ``sources`` (each at most as long as its buffer) into the next set of host
        tensors, queued behind the device's work."""
        copies = [host[: t.shape[0]] for host, t in zip(self._next(), sources, strict=True)]
        for copy, t in zip(copies, sources, strict=True):
            copy.copy_(t, non_blocking=True)
        done = None
        if self.pinned:
            done = torch.cuda.Event()
            done.record()
        return InFlight(copies, done)
