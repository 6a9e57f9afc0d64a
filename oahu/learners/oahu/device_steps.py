"""OAHU updates, strict or micro-batch, with everything a step touches on the network's device
(ours; docs/algorithms.md, "Device-resident steps").

On a GPU an update of :class:`~oahu.learners.oahu.update.UpdateStep` is a few hundred kernel
launches with host synchronisations between them (a replay draw, the mining ranks, the
prequential record, the constraint graph): the device idles while Python decides.
:class:`DeviceResidentSteps` learns a *block* of new triplets as the same updates, one after the
other, with no host round trip inside the block:

* the weights, α, the last losses, the replay reservoir and the block's inputs (the new triplets,
  the replay draws, the mined triplets, the step sizes) are device tensors at fixed addresses;
* every update has the same shape: ``largest_update`` rows of new triplets, padded with masked
  rows while the update takes fewer (``batch_ramp``, the end of a call), and as many replayed
  and mined rows per new one as the configuration says;
* one update is pure tensor arithmetic with no Python branch on a device value (a non-finite
  row is masked with ``where`` instead of being left out), so on CUDA it is captured once as a
  CUDA graph (``torch.cuda.graphs``: several updates per graph) and a block is a handful of graph
  launches;
* what the host keeps (the replay reservoir's mirror for checkpoints, the constraint graph, the
  prequential record, the drift detector's input) is read back once per block and applied in
  stream order, while the next block runs: a block's inputs and outcomes go through pinned host
  buffers, so that neither copy waits for the block in flight.

What differs from per-update learning, by design: the replay draws and the reservoir's slots are
drawn on the host when the block starts (the same distribution, Algorithm R); the triplets a block
mines come from the constraint graph as it was before the block in flight (mining already ranks
candidates ahead by embeddings a few updates old); a block's items are preprocessed together; a
non-finite row leaves the update without the rest of the update's rows leaving with it; and a
drift adapts after the block in which it was detected, once the block in flight is applied.
Blocks start small and grow with the stream (at most a quarter of the constraints learned
before), so that the staleness stays a small share of what the graph knows.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from oahu.learners.oahu.device_mining import DeviceMining
from oahu.learners.oahu.hedge import hedge_update
from oahu.learners.oahu.host_transfers import HostBuffers, InFlight
from oahu.learners.oahu.item_keys import row_keys
from oahu.learners.oahu.loss import constraint_distances, embedding_gradient
from oahu.learners.oahu.replay_memory import last_write_of_each_slot
from oahu.learners.oahu.update import StepResult
from oahu.learners.oahu.update_graphs import UPDATES_PER_GRAPH, UpdateGraphs

if TYPE_CHECKING:
    from oahu.learners.oahu.update import UpdateStep

__all__ = ["DeviceResidentSteps"]

# New triplets a block holds at most, whatever the batch size: its inputs and the embeddings it
# returns take about 30 KB per new triplet of the default learner (200 features, 3 depths, two
# mined triplets each), about 1 GB for a block of this many, on the device and twice pinned on
# the host.
BLOCK_TRIPLETS = 32_768
# A block's outcomes, read back once it is done: per update, then α and the last losses as the
# block leaves them (the last two).
_OUTCOMES = (
    "ok",
    "used",
    "correct",
    "combined",
    "fresh",
    "alpha",
    "last_losses",
)
# A block learns at most this share of the constraints learned before it (and at least
# UPDATES_PER_GRAPH): its mining sees the graph as the block started.
_BLOCK_SHARE = 4
# The trust-region bound of an update with one new triplet, which per-update learning does not
# bound (a strict step never comes near it): large enough never to bind.
_UNBOUNDED = 1e30


class DeviceResidentSteps:
    """The updates of ``step`` (an :class:`~oahu.learners.oahu.update.UpdateStep` on triplets),
    strict or of up to ``largest_update`` new triplets each, in blocks of at most ``block`` updates
    (and :data:`BLOCK_TRIPLETS` new triplets), each block without a host round trip; on CUDA each
    run of :data:`UPDATES_PER_GRAPH` updates is one CUDA graph launch.

    The same code runs eagerly on the CPU, where it is what the tests check the CUDA path by.

    >>> import numpy as np
    >>> from oahu.learners.oahu.learner import OAHU
    >>> model = OAHU(n_features=4, hidden_width=8, preprocess="none", device="cpu",
    ...              step_engine="device")
    >>> rows = np.random.default_rng(0).random((40, 3, 4), dtype=np.float32)
    >>> used = model.learn_triplets(rows[:, 0], rows[:, 1], rows[:, 2])
    >>> model.updates, model.update_step.replay.size, model.update_step.learned
    (40, 40, 40)
    >>> batched = OAHU(n_features=4, hidden_width=8, preprocess="none", device="cpu",
    ...                step_engine="device", batch_size=16, batch_ramp=1)
    >>> used = batched.learn_triplets(rows[:, 0], rows[:, 1], rows[:, 2])
    >>> batched.updates, batched.update_step.learned  # updates of 1, 1, 2, 4, 8, 16, 8
    (7, 40)
    """

    def __init__(self, step: UpdateStep, block: int) -> None:
        config = step.config
        network = step.network
        self.step = step
        self.width = config.largest_update  # new triplets per update
        self.block = max(1, min(block, BLOCK_TRIPLETS // self.width))  # updates per block
        self.device = network.device
        self.capture = self.device.type == "cuda"
        features = step.input_scaler.n_outputs
        depths, dim = step.n_depths, network.embedding_dim
        b, k = self.width, self.block
        self.n_replay, self.n_mined = config.replay * b, config.mined * b  # rows per update
        self.capacity = config.replay_memory
        zeros = functools.partial(torch.zeros, device=self.device)
        # Inputs of a block, one row per update.
        self.new = zeros(k, b, 3, features)
        self.new_valid = zeros(k, b, dtype=torch.bool)
        self.replay_slot = zeros(k, self.n_replay, dtype=torch.long)
        self.replay_valid = zeros(k, self.n_replay, dtype=torch.bool)
        self.insert_slot = zeros(k, b, dtype=torch.long)
        self.learning_rate = zeros(k)
        self.max_change = zeros(k)  # the trust region of each update (micro-batches only)
        # The replay reservoir, with a spare row that takes the triplets it does not keep.
        self.reservoir = zeros(self.capacity + 1, 3, features)
        self.alpha = zeros(depths)
        self.last_losses = zeros(depths)
        self.counter = zeros((), dtype=torch.long)
        # Outputs of a block, read back once it is done.
        self.ok = zeros(k, b, dtype=torch.bool)
        self.used = zeros(k, b, dtype=torch.bool)
        self.correct = zeros(k, b, depths, dtype=torch.bool)
        self.combined = zeros(k, b, dtype=torch.bool)
        # The new triplets' embeddings, which only the constraint graph takes (for mining).
        self.fresh = zeros(k, b if self.n_mined else 0, depths, 3, dim)
        # Mining ranked on the device, straight into the block's mined rows.
        self.mining = (
            DeviceMining(step.graph, k * self.n_mined, self.device, pinned=self.capture)
            if self.n_mined
            else None
        )
        self._mined_rows = torch.arange(self.n_mined, device=self.device)
        # How the update runs: on CUDA as captured graphs of several updates.
        self.runner = UpdateGraphs(
            self.update, self._state, self.counter, self.device, config.cpu_threads or None
        )
        self._mirrored: tuple[int, int] | None = None  # (id, revision) of the reservoir held
        self._out_of_step = False  # the device's reservoir was written out of step with it
        # The host's α and last losses the device took, and the reservoir's and the clock's
        # counts with the blocks launched (ahead of the host's while one is in flight).
        self._given: tuple[Any, Any] = (None, None)
        self._held = self._seen = self._scheduled = 0
        self._staging = HostBuffers(self._inputs(), pinned=self.capture)
        self._returned = HostBuffers(self._outputs(), pinned=self.capture)

    def _inputs(self) -> list[torch.Tensor]:
        """A block's inputs, in the order :meth:`_launch` fills them."""
        return [
            self.new,
            self.new_valid,
            self.replay_slot,
            self.replay_valid,
            self.insert_slot,
            self.learning_rate,
            self.max_change,
        ]

    def _outputs(self) -> list[torch.Tensor]:
        return [getattr(self, name) for name in _OUTCOMES]

    # ---------------------------------------------------------------- one update
    def update(self) -> None:
        """One update, the block's ``counter``-th, on device tensors only."""
        step, network = self.step, self.step.network
        i = self.counter.view(1)
        b, n_mined = self.width, self.n_mined
        new = self.new.index_select(0, i).view(b, *self.new.shape[2:])
        replayed = self.reservoir.index_select(0, self.replay_slot.index_select(0, i).view(-1))
        parts = [new, replayed]
        present = [
            self.new_valid.index_select(0, i).view(-1),
            self.replay_valid.index_select(0, i).view(-1),
        ]
        if n_mined:
            mined_rows = i * n_mined + self._mined_rows
            parts.append(self.mining.mined.index_select(0, mined_rows))
            present.append(self.mining.valid.index_select(0, mined_rows))
        rows = torch.cat(parts)
        n_rows = rows.shape[0]
        x = rows.transpose(0, 1).reshape(3 * n_rows, -1)
        cache = network.forward(x)
        f = cache.embeddings.view(step.n_depths, 3, n_rows, -1)
        diffs, dists = constraint_distances(f, 3)
        d_pos, d_neg = dists[:, 0, :, 0], dists[:, 1, :, 0]
        loss, g_pos, g_neg = step.loss(d_pos, d_neg)
        # A non-finite row is left out (a new one counted as skipped), and an update whose new
        # rows all are is left out altogether: masked, since the step may not branch on a
        # device value.
        valid = torch.cat(present) & step.finite(loss, cache)
        fresh_ok = valid[:b]
        taken = fresh_ok.any()
        valid = valid & taken
        n_new = fresh_ok.sum()
        alpha = self.alpha
        correct = d_pos[:, :b] < d_neg[:, :b]  # (L+1, b)
        combined = (alpha[:, None] * (d_neg[:, :b] - d_pos[:, :b])).sum(0) > 0
        mistakes = torch.where(fresh_ok, 1.0 - correct.float(), 0.0)
        weights = step.depth_weights(alpha)
        # Each new triplet with its share of the replayed and mined rows moves the weights as
        # far as it would alone (as the per-update step scales its mean), with the step size
        # folded into the gradient (every parameter's gradient is linear in it), so that it is
        # read from the block rather than captured as a constant.
        rate = self.learning_rate.index_select(0, i)
        share = valid.float() * (rate * n_new / valid.sum().clamp(min=1))
        scale = weights * torch.ones_like(alpha)
        grad = embedding_gradient(scale, g_pos * share, g_neg * share, diffs, dists, 3)
        items = valid.repeat(3)  # the rows' mask over x, which holds them role by role
        grad = torch.where(items[:, None], grad.reshape(cache.embeddings.shape), 0.0)
        limit = self.max_change.index_select(0, i) if b > 1 else None
        network.step(_finite_or_zero(cache, items), grad, 1.0, limit)
        new_loss = torch.where(fresh_ok, loss[:, :b], 0.0)
        signal, changes = step.hedge_signal.without_branching(new_loss, mistakes)
        if signal is not None:
            updated = hedge_update(alpha, signal, step.config.beta, step.config.smoothing)
            changed = taken if changes is None else taken & changes
            alpha.copy_(torch.where(changed, updated, alpha))
        mean_loss = new_loss.sum(1) / n_new.clamp(min=1)
        self.last_losses.copy_(torch.where(taken, mean_loss, self.last_losses))
        slot = torch.where(fresh_ok, self.insert_slot.index_select(0, i).view(-1), self.capacity)
        self.reservoir.index_copy_(0, slot, new)
        self.ok.index_copy_(0, i, fresh_ok.view(1, b))
        self.used.index_copy_(0, i, ((new_loss > 0).any(0) & fresh_ok).view(1, b))
        self.correct.index_copy_(0, i, correct.T[None])
        self.combined.index_copy_(0, i, combined.view(1, b))
        if n_mined:
            self.fresh.index_copy_(0, i, f[:, :, :b].permute(2, 0, 1, 3)[None])
            self.mining.refresh(
                self.mining.slots.index_select(0, mined_rows),
                self.mining.mined_keys.index_select(0, mined_rows),
                valid[n_rows - n_mined :],
                f[:, :, n_rows - n_mined :],
            )
        self.counter += 1

    # ---------------------------------------------------------------- blocks
    def block_size(self) -> int:
        """New triplets the next block takes at most: its ``block`` updates, but at most a
        quarter of the constraints learned (or launched) since the step-size clock last started,
        and at least UPDATES_PER_GRAPH."""
        since = self._scheduled - self.step.decay_origin
        return max(UPDATES_PER_GRAPH, min(self.block * self.width, since // _BLOCK_SHARE))

    def learn(self, rows: np.ndarray) -> Iterator[tuple[int, StepResult]]:
        """Learn validated triplets (n, 3, d) as the updates the configuration says, block by
        block; yields each block's first row and :class:`StepResult` in stream order, once the
        host has caught up with it. The next block is launched before a block's outcomes are
        applied, so that the host's catching up overlaps the device's work; it mines from the
        constraint graph as it was before the block in flight. Everything is applied when the
        iteration ends.

        Between two blocks the host may change what the device holds (a drift's adaptation:
        α, the memories): the block in flight is then applied first, and the device takes the
        host's values before the next one.
        """
        pending: _Block | None = None
        start = 0
        while start < len(rows) or pending is not None:
            if pending is not None and (start >= len(rows) or self._host_changed()):
                yield pending.start, self._apply(pending)
                pending = None
                continue
            if pending is None:
                self._sync()
            sizes = self._update_sizes(len(rows) - start)
            n = int(sizes.sum())
            launched = self._launch(rows[start : start + n], start, sizes)
            start += n
            if pending is not None:
                yield pending.start, self._apply(pending)
            pending = launched

    def _update_sizes(self, remaining: int) -> np.ndarray:
        """New triplets of each update of the next block, whole updates within
        :meth:`block_size`, each sized as per-update learning sizes it
        (:meth:`UpdateStep.update_size`)."""
        budget, learned = self.block_size(), self._scheduled
        sizes: list[int] = []
        total = 0
        while len(sizes) < self.block and total < remaining:
            size = min(self.step.update_size(learned + total), remaining - total)
            if sizes and total + size > budget:
                break
            sizes.append(size)
            total += size
        return np.array(sizes, np.int64)

    def _host_changed(self) -> bool:
        """Whether the host replaced α, the last losses, the replay reservoir or the constraint
        graph since the device took them, or a block wrote the device's reservoir out of
        step."""
        step, replay = self.step, self.step.replay
        return (
            step.alpha is not self._given[0]
            or step.last_losses is not self._given[1]
            or self._mirrored != (id(replay), replay.revision)
            or self._out_of_step
            or (self.mining is not None and self.mining.mirrored != _graph_id(step.graph))
        )

    def _sync(self) -> None:
        """Give the device the host's state where it changed (nothing is in flight)."""
        step, replay = self.step, self.step.replay
        device = self.device
        if self._out_of_step or self._mirrored != (id(replay), replay.revision):
            self._out_of_step = False
            self.reservoir.zero_()
            self.reservoir[: replay.size].copy_(torch.from_numpy(replay.rows[: replay.size]))
            self._mirrored = (id(replay), replay.revision)
        if self.mining is not None and self.mining.mirrored != _graph_id(step.graph):
            self.mining.mirror(step.graph)
        alpha = step.as_numpy(step.alpha)
        self.alpha.copy_(torch.as_tensor(alpha, device=device))
        self.last_losses.copy_(torch.as_tensor(step.as_numpy(step.last_losses), device=device))
        self._given = (step.alpha, step.last_losses)
        self._held, self._seen = replay.size, replay.seen
        self._scheduled = step.learned

    def _launch(self, rows: np.ndarray, start: int, sizes: np.ndarray) -> _Block:
        """Fill the block's inputs for ``rows``, learned as updates of ``sizes`` new triplets,
        and start its updates: the replay draws and reservoir slots (Algorithm R, for a
        reservoir that is offered every new triplet), the mined triplets and the step sizes;
        then queue the copies of its outcomes to the host."""
        step, config = self.step, self.step.config
        new = step.project(rows)
        # The graph knows items by the rows given, not by their projection (see UpdateStep).
        keys = row_keys(rows) if self.mining is not None else None
        n, features = len(new), new.shape[2]
        k, b = len(sizes), self.width
        firsts = np.cumsum(sizes) - sizes  # each update's first row in the block
        update = np.repeat(np.arange(k), sizes)  # each row's update, and its place in it
        place = np.arange(n) - firsts[update]
        laid_out = np.zeros((k, b, 3, features), np.float32)
        laid_out[update, place] = new
        valid = np.zeros((k, b), bool)
        valid[update, place] = True
        replay = step.replay
        held = np.minimum(self._held + firsts, self.capacity)  # before each update
        draws = replay.rng.integers(0, np.maximum(held, 1)[:, None], size=(k, self.n_replay))
        replay_valid = (np.arange(self.n_replay) < config.replay * sizes[:, None]) & (
            held[:, None] > 0
        )
        # Every slot not kept is the spare row's.
        insert = np.minimum(replay.draw_slots(n, self._held, self._seen), self.capacity)
        slots = np.full((k, b), self.capacity, np.int64)
        slots[update, place] = (
            insert if b == 1 else last_write_of_each_slot(insert, update, self.capacity)
        )
        learned = self._scheduled + firsts
        rates = np.array([step.step_size(t) for t in learned.tolist()])
        bounds = np.where(sizes > 1, config.max_step_change, _UNBOUNDED)
        # In the order of _inputs, through pinned buffers on CUDA (host_transfers).
        values = [
            laid_out,
            valid,
            draws,
            replay_valid,
            slots,
            rates,
            bounds,
        ]
        self._staging.upload(self._inputs(), values, k)
        if self.mining is not None:
            # Each update mines ``mined`` triplets per new one: the i-th anchor drawn goes to
            # the i-th mined row the block's updates take, in stream order.
            wanted = config.mined * sizes
            into = np.repeat(np.arange(k) * self.n_mined - (np.cumsum(wanted) - wanted), wanted)
            into += np.arange(len(into))
            self.mining.mine(step.graph, into, self.alpha, config.mining_candidates)
        self.counter.zero_()
        self.runner.run(k)
        self._held = min(self._held + n, self.capacity)
        self._seen += n
        self._scheduled += n
        return _Block(
            start,
            new,
            keys,
            (update, place),
            insert,
            rates,
            self._outcomes(k),
        )

    def _outcomes(self, k: int) -> InFlight:
        """Copies of the block's outcomes on the host, queued behind its updates: the first k
        of each per-update output, α and the last losses as the block leaves them."""
        outputs = self._outputs()
        per_update = len(_OUTCOMES) - 2
        return self._returned.download([t[:k] for t in outputs[:per_update]] + outputs[per_update:])

    def _apply(self, block: _Block) -> StepResult:
        """Wait for a launched block and apply its outcomes on the host, in stream order: the
        replay reservoir's host copy, the constraint graph, the prequential record, α, the
        last losses and the step-size clock."""
        step = self.step
        copies = block.outcomes.wait()
        ok, used, correct, combined, fresh, _, _ = (t.numpy() for t in copies)
        rows = block.rows  # (update, place) of each of the block's new triplets
        ok, used = ok[rows], used[rows]
        correct, combined = correct[rows][ok], combined[rows][ok]
        # New tensors (the host buffers take a later block's outcomes), copied without waiting
        # for the block in flight.
        step.alpha, step.last_losses = (
            step.per_depth(t.to(self.device, non_blocking=True, copy=True)) for t in copies[-2:]
        )
        self._given = (step.alpha, step.last_losses)
        self._mirror(block.new[ok], block.insert[ok], bool(ok.all()))
        if self.mining is not None:
            # (n, L+1, 3, E) -> (L+1, 3, n, E), a view where the block's updates are full and
            # all of them taken (the graph reads only the items it holds).
            fresh = fresh.reshape(-1, *fresh.shape[2:])
            where = rows[0] * self.width + rows[1]
            fresh = fresh[: len(where)] if where[-1] == len(where) - 1 else fresh[where]
            fresh = fresh if ok.all() else fresh[ok]
            keys = block.keys[ok]
            # Counted before the block, where a per-update step counts before each update: the
            # reservoir grows at most one block later on this path.
            step.graph.hold_up_to(step.items_held())
            written = step.graph.observe(block.new[ok], fresh.transpose(1, 2, 0, 3), keys)
            self.mining.written(step.graph, written)
        step.prequential.update(correct, combined)
        step.learned += int(ok.sum())
        taken = np.zeros(len(block.rates), bool)
        taken[rows[0][ok]] = True
        if taken.any():  # the step size of the latest update, as a per-update step reports it
            step.learning_rate = float(block.rates[np.flatnonzero(taken)[-1]])
        skipped = int((~ok).sum())
        if not len(combined):
            return StepResult(used, None, None, skipped)
        # rows[0][ok]: each kept outcome's update, in stream order
        sizes = np.unique(rows[0][ok], return_counts=True)[1]
        return StepResult(used, correct, combined, skipped or None, int(taken.sum()), sizes)

    def pull_graph(self) -> None:
        """Give the host's constraint graph the embeddings the device's updates cached for its
        held items (checkpoints and per-update steps read the host's)."""
        if self.mining is not None:
            self.mining.pull(self.step.graph)

    def _mirror(self, new: np.ndarray, insert: np.ndarray, every: bool) -> None:
        """Apply a block's reservoir writes to the host's reservoir (checkpoints read it), if it
        is still the one the block drew its slots for. A block that left a triplet out wrote
        the device's out of step (its later fills were drawn for slots it did not take): the
        host's is uploaded again before the next block."""
        replay = self.step.replay
        if self._mirrored != (id(replay), replay.revision):
            return  # replaced by the host (a drift emptied the memories): nothing to mirror
        if self.step.config.replay:
            replay.place(new, insert)
        self._mirrored = (id(replay), replay.revision)
        self._out_of_step |= not every

    def _state(self) -> list[torch.Tensor]:
        """What an update changes, besides the block's outputs."""
        mining = [] if self.mining is None else [self.mining.embeddings]
        return [
            *self.step.network.tensors().values(),
            self.alpha,
            self.last_losses,
            self.reservoir,
            *mining,
        ]


class _Block(NamedTuple):
    """What the host keeps of a launched block until it applies the block's outcomes."""

    start: int  # its first row in the rows being learned
    new: np.ndarray  # its triplets, preprocessed (n, 3, width)
    keys: np.ndarray | None  # their items' keys as given (n, 3), where the graph mines
    rows: tuple[np.ndarray, np.ndarray]  # each triplet's (update, place in the update)
    insert: np.ndarray  # the reservoir slot drawn for each
    rates: np.ndarray  # the step size of each update
    outcomes: InFlight


def _graph_id(graph: Any) -> tuple[int, int]:
    """Which constraint graph, in which restored state: a copy of another is stale."""
    return id(graph), graph.restores


def _finite_or_zero(cache: Any, items: torch.Tensor) -> Any:
    """The forward pass's tensors with the items left out (``items`` False) zeroed, so that
    they add 0, not 0 · inf, to the weights."""
    x = torch.where(items[:, None], cache.x, 0.0)
    hidden, embeddings = (
        torch.where(items[:, None], t, 0.0) for t in (cache.hidden, cache.embeddings)
    )
    return type(cache)(x, hidden, torch.where(items[:, None], cache.norms, 1.0), embeddings)
