"""Running a device-resident update many times (ours; docs/algorithms.md, "Device-resident
steps"): on CUDA as CUDA graphs of several updates, captured once after the update is compiled,
so that a block of updates is a handful of graph launches; elsewhere one call per update.

Kept apart from :mod:`oahu.learners.oahu.device_steps`, which says what an update and a block
are; this module only decides how the same update is executed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from oahu.threads import torch_threads

__all__ = ["COMPILE_UPDATE", "UPDATES_PER_GRAPH", "UpdateGraphs"]

# Updates captured in one CUDA graph: a graph launch costs the host a few microseconds, so a
# block of 256 strict updates is 32 launches rather than 256.
UPDATES_PER_GRAPH = 8
# Whether the captured update is compiled first (torch.compile), which fuses its elementwise
# arithmetic: an update was 35 kernels on an H100, 8 of them GEMMs (benchmarks/README.md,
# "On CUDA"), where its operations number about 110.
COMPILE_UPDATE = True


class UpdateGraphs:
    """Runs ``update``, a function of device tensors only that reads which update of its block
    it is from ``counter`` (and advances it), ``n`` times: on CUDA by launches of graphs of
    :data:`UPDATES_PER_GRAPH` updates and of one, captured at the first run; elsewhere as plain
    calls, with ``cpu_threads`` torch threads (None: torch's default). ``state`` lists what an
    update changes besides its block's outputs; warm-up and capture run updates, so it is saved
    before and put back after.

    >>> counter, total = torch.zeros((), dtype=torch.long), torch.zeros(())
    >>> def update() -> None:
    ...     total.add_(counter)
    ...     counter.add_(1)
    >>> runner = UpdateGraphs(update, lambda: [total], counter, torch.device("cpu"))
    >>> runner.run(4)
    >>> float(total), int(counter), runner.graphs is None
    (6.0, 4, True)
    """

    def __init__(
        self,
        update: Callable[[], None],
        state: Callable[[], list[torch.Tensor]],
        counter: torch.Tensor,
        device: torch.device,
        cpu_threads: int | None = None,
    ) -> None:
        self.update = update
        self.state = state
        self.counter = counter
        self.device = device
        self.cpu_threads = cpu_threads
        self.capture = device.type == "cuda"
        self.graphs: tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph] | None = None
        self.compiled = False  # whether the captured update was compiled

    def run(self, n: int) -> None:
        """n updates: on CUDA by graph launches, elsewhere one call each."""
        if not self.capture:
            with torch_threads(self.cpu_threads):
                for _ in range(n):
                    self.update()
            return
        many, one = self.graphs or self._capture()
        for _ in range(n // UPDATES_PER_GRAPH):
            many.replay()
        for _ in range(n % UPDATES_PER_GRAPH):
            one.replay()

    def _capture(self) -> tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph]:
        """CUDA graphs of UPDATES_PER_GRAPH updates and of one, captured after a warm-up on a
        side stream (as ``torch.cuda.graphs`` requires). The update is compiled first
        (``torch.compile``: its elementwise arithmetic fused into a few kernels), unless
        COMPILE_UPDATE is off or compiling fails, when the graphs hold the plain update's
        kernels."""
        saved = [t.clone() for t in self.state()]
        update = self._warm_up()
        many, one = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(many):
            for _ in range(UPDATES_PER_GRAPH):
                update()
        with torch.cuda.graph(one):
            update()
        for target, value in zip(self.state(), saved, strict=True):
            target.copy_(value)
        self.counter.zero_()
        self.graphs = (many, one)
        return many, one

    def _warm_up(self) -> Callable[[], None]:
        """Run (and compile) the update a few times on a side stream; returns the update the
        graphs capture."""
        self.compiled = COMPILE_UPDATE
        update = (
            torch.compile(self.update, fullgraph=True, dynamic=False)
            if self.compiled
            else self.update
        )
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            try:
                self._run_eagerly(update)
            except Exception as error:  # any compiler failure: run uncompiled
                if not self.compiled:
                    raise
                warnings.warn(
                    f"device steps: torch.compile failed ({error!r:.200}); capturing the "
                    "uncompiled update",
                    RuntimeWarning,
                    stacklevel=4,
                )
                self.compiled, update = False, self.update
                self._run_eagerly(update)
        torch.cuda.current_stream(self.device).wait_stream(side)
        return update

    def _run_eagerly(self, update: Callable[[], None]) -> None:
        for _ in range(3):
            self.counter.zero_()
            update()
