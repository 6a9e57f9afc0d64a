"""The processes of a learning group: the leader (rank 0) and the members it spawns, the
process group they form, and how the group dies as one.

The serving process sees one learner process, as with one learner: rank 0, spawned as always
(:func:`oahu.service.learning.main.learner_main`, which hands over to :func:`leader_main` when
``learners > 1``). Rank 0 spawns ranks 1 to ``local_learners - 1`` on this machine; ranks
beyond run elsewhere (``oahu group-member``, docs/delivery.md). They rendezvous at
``group_address`` (``tcp://HOST:PORT`` of rank 0's machine, or ``env://``) through
``torch.distributed``'s TCP store and form one process group: gloo on the CPU, NCCL when the
learner runs on GPUs and every member on this machine has one of its own (gloo through host
memory otherwise; the GPU paths are written but have not been run on a GPU). Rank 0 then
broadcasts the model and progress to continue from (the ``Start`` the serving process sent), so
that every member starts from the same cut.

Dying as one: a member dies with rank 0 (``PR_SET_PDEATHSIG``, and end of file on a pipe only
rank 0 holds open); rank 0 watches its members' process handles, and when one exits before the
end (a ``kill -9``, a crash) it kills the others and exits 1, and the serving process restarts
it. A member on another machine is noticed by the collectives instead: they fail at once when
its connection closes, or after ``group_timeout`` seconds when it hangs.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import logging
import multiprocessing
import os
import queue
import signal
import socket
import threading
import traceback
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
import torch.distributed as dist

from oahu.connectors.kafka_source import KafkaSource
from oahu.learner import Learner
from oahu.persistence import learner_from_bytes
from oahu.service.catalog import OVERLAY_FILE, Catalog, ItemChange, base_items
from oahu.service.checkpoints import Progress
from oahu.service.config import ServiceConfig, configure_logging
from oahu.service.group.loop import (
    GroupLoop,
    NoServing,
    group_progress,
    member_directory,
    round_records,
)
from oahu.service.group.schedule import ScheduleLog
from oahu.service.group.shards import ShardedFileSource, member_partitions
from oahu.service.item_store import ItemStore
from oahu.service.learning.link import ParentLink, ReindexSchedule
from oahu.service.learning.main import dead_letter_sink
from oahu.service.messages import EXIT_ORPHANED, STOP_SIGNALS, Start, Stop
from oahu.service.metrics import LearningMetrics
from oahu.threads import use_native_threads

log = logging.getLogger("oahu.service")

_CONTEXT = multiprocessing.get_context("spawn")
_PR_SET_PDEATHSIG = 1
#: The longest the members wait for each other to rendezvous (imports and model loading
#: included); once formed, the group's collectives wait ``group_timeout``.
RENDEZVOUS_SECONDS = 120.0


class TorchCollectives:
    """The loop's :class:`~.loop.Collectives` over the default ``torch.distributed`` group,
    whose collectives run on ``device`` (the CPU for gloo, the member's GPU for NCCL)."""

    def __init__(self, rank: int, members: int, device: torch.device) -> None:
        self.rank, self.members, self.device = rank, members, device

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        # gloo combines host memory: a GPU learner's values go through it when NCCL is not used
        moved = tensor.to(self.device)
        dist.all_reduce(moved, op=dist.ReduceOp.SUM)
        return moved.to(tensor.device)

    def gather(self, value: Any) -> list[Any] | None:
        out: list[Any] | None = [None] * self.members if self.rank == 0 else None
        dist.gather_object(value, out, dst=0)
        return out

    def broadcast(self, value: Any) -> Any:
        box = [value]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]


def free_address() -> str:
    """``tcp://127.0.0.1:PORT`` with a port free now, for a group on this machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def join_group(
    config: ServiceConfig, rank: int, address: str, device: torch.device
) -> TorchCollectives:
    """Rendezvous with the other members at ``address`` and form the process group."""
    if address.startswith("env://"):
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    else:
        uri = urlparse(address)
        host, port = uri.hostname or "127.0.0.1", int(uri.port or 0)
    store = dist.TCPStore(
        host, port, config.learners, is_master=rank == 0,
        timeout=datetime.timedelta(seconds=max(RENDEZVOUS_SECONDS, config.group_timeout)),
    )  # fmt: skip
    backend = "gloo"
    if device.type == "cuda" and torch.cuda.device_count() >= (
        config.local_learners or config.learners
    ):
        backend = "nccl"  # one GPU per member on this machine, as NCCL requires
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=config.learners,
        timeout=datetime.timedelta(seconds=config.group_timeout),
    )  # fmt: skip
    return TorchCollectives(
        rank, config.learners, device if backend == "nccl" else torch.device("cpu")
    )


def leave_group() -> None:
    """Tear the process group down once its last collective is done. Left to the interpreter's
    exit, gloo's worker threads can outlive the objects they hold and abort the process
    ("terminate called without an active exception", signal 6) after all of its work is done,
    which rank 0 cannot tell from a member that died while learning."""
    if dist.is_initialized():
        dist.destroy_process_group()


def learner_device(learner: Learner) -> torch.device:
    """Where the learner's combined values live (the collectives run there)."""
    return learner.combine_values().averaged.device


def build_group_loop(
    config: ServiceConfig,
    group: TorchCollectives,
    start: Start,
    link: Any,
    changes: queue.SimpleQueue[ItemChange] | None = None,
) -> GroupLoop:
    """Member ``group.rank``'s loop over its share of the source, from ``start``."""
    rank, members = group.rank, group.members
    learner, _ = learner_from_bytes(start.learner)
    progress = group_progress(
        config, Progress.from_extra(start.progress), round_records(config, learner)
    )
    own = config.replace(checkpoint_dir=str(member_directory(config, rank)))
    Path(own.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    if config.is_kafka:
        bootstrap, topic, group_id = config.kafka_target()
        from kafka import KafkaConsumer

        source: Any = KafkaSource(
            topic, group_id, bootstrap, config=config.kafka_options(KafkaConsumer),
            partitions=lambda known: member_partitions(known, rank, members),
        )  # fmt: skip
        items, _ = base_items(config)
    else:
        source = ShardedFileSource(config.file_path(), rank, members, progress.group["block"])
        items, _ = base_items(config, source.file)
    catalog = Catalog(items, ItemStore(), Path(config.checkpoint_dir) / OVERLAY_FILE)
    schedule = ScheduleLog(config.checkpoint_dir, rank, progress.group.get("round", 0))
    return GroupLoop(
        own, learner, source, catalog, dead_letter_sink(own), link, LearningMetrics.of(learner),
        progress, group, schedule, changes, start.fell_back, start.learner,
    )  # fmt: skip


def _die_with_parent(lifeline: Connection) -> None:
    """Exit when rank 0 does: the kernel's parent-death signal, and end of file on the pipe
    whose other end only rank 0 holds."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            lifeline.recv()
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="oahu-group-lifeline", daemon=True).start()


def member_main(
    config: ServiceConfig, rank: int, address: str, lifeline: Connection | None
) -> None:
    """Entry point of a member other than rank 0: join the group, learn until it stops."""
    stop = threading.Event()
    for sig in STOP_SIGNALS:  # Ctrl-C reaches every process: the group stops at one round
        signal.signal(sig, lambda *_: stop.set())
    if lifeline is not None:
        _die_with_parent(lifeline)
    configure_logging(config.log_level)
    use_native_threads(config.threads)
    loop = None
    try:
        device = _device_of(config, rank)
        group = join_group(config, rank, address, device)
        start = group.broadcast(None)
        loop = build_group_loop(config, group, start, NoServing())
        loop.run(stop)
        leave_group()
    except BaseException:
        log.error("learning group member %d failed:\n%s", rank, traceback.format_exc())
        os._exit(1)  # the collectives of the others fail at once: the group restarts
    finally:
        if loop is not None:
            loop.schedule.close()
            loop.source.close()
            loop.dead_letters.close()


def _device_of(config: ServiceConfig, rank: int) -> torch.device:
    """The device the configured learner runs on (``--learner-param device=...``); on GPUs,
    member r's current device is GPU r mod (GPUs on this machine), where its learner is then
    rebuilt. With fewer GPUs than members here the group combines through gloo."""
    from oahu.learners.oahu.device import resolve_device

    device = resolve_device(str(config.learner_params.get("device", "auto")))
    if device.type == "cuda" and device.index is None:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    return device


class _Members:
    """Rank 0's members on this machine: spawned, watched, killed together."""

    def __init__(self, config: ServiceConfig, address: str, on_death: Any) -> None:
        local = config.local_learners or config.learners
        self.processes = []
        self._lifelines = []
        for rank in range(1, local):
            keep, give = _CONTEXT.Pipe(duplex=False)
            process = _CONTEXT.Process(
                target=member_main, args=(config, rank, address, keep),
                name=f"oahu-learner-{rank}", daemon=True,
            )  # fmt: skip
            process.start()
            keep.close()  # only rank 0 holds the writing end: its death is their end of file
            self.processes.append(process)
            self._lifelines.append(give)
        self.done = threading.Event()
        self._on_death = on_death
        threading.Thread(target=self._watch, name="oahu-group-watch", daemon=True).start()

    def _watch(self) -> None:
        """A member that exits before the group has finished, or with an error, fails it."""
        pending = {p.sentinel: p for p in self.processes}
        while pending:
            for sentinel in wait(list(pending)):
                process = pending.pop(sentinel)
                process.join()
                if process.exitcode != 0 and not self.done.is_set():
                    self._on_death(
                        f"{process.name} (pid {process.pid}) exited with {process.exitcode}"
                    )
                    return

    def kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(process.pid, signal.SIGKILL)

    def join(self, timeout: float) -> None:
        for process in self.processes:
            process.join(timeout)


def leader_main(config: ServiceConfig, inbox: Connection, outbox: Connection) -> None:
    """Rank 0, the learner process the serving process sees (see the module docstring)."""
    stop = threading.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop.set())
    try:
        start = inbox.recv()
    except (EOFError, OSError):
        raise SystemExit(EXIT_ORPHANED) from None
    assert isinstance(start, Start), start
    configure_logging(config.log_level)
    os.nice(config.learner_nice)  # the members inherit it
    use_native_threads(config.threads)
    link = ParentLink(outbox, ReindexSchedule(config.reindex_every, config.reindex_interval))
    address = config.group_address or free_address()
    members: _Members | None = None

    def fail(why: str) -> None:
        log.error("learning group failed: %s; stopping every member", why)
        if members is not None:
            members.kill()
        link.fail(f"learning group failed: {why}")
        os._exit(1)

    changes: queue.SimpleQueue[ItemChange] = queue.SimpleQueue()
    loop = None
    try:
        members = _Members(config, address, fail)
        group = join_group(config, 0, address, _device_of(config, 0))
        group.broadcast(start)
        loop = build_group_loop(config, group, start, link, changes)
        threading.Thread(
            target=_listen, args=(inbox, changes, stop, members), name="oahu-learner-inbox",
            daemon=True,
        ).start()  # fmt: skip
        log.info(
            "learning group of %d members formed at %s (%d on this machine)",
            config.learners, address, len(members.processes) + 1,
        )  # fmt: skip
        loop.run(stop)
        members.done.set()
        members.join(config.group_timeout)
        leave_group()
    except BaseException:
        if members is not None:
            members.done.set()
            members.kill()
        link.fail(traceback.format_exc())
        raise SystemExit(1) from None
    finally:
        if loop is not None:
            loop.schedule.close()
            loop.source.close()
            loop.dead_letters.close()
        outbox.close()


def _listen(
    inbox: Connection,
    changes: queue.SimpleQueue[ItemChange],
    stop: threading.Event,
    members: _Members,
) -> None:
    """Rank 0's reader: item changes wait for the next round boundary, where every member
    applies them; a stop stops the group at the next round; a vanished serving process ends
    the group at once, as a crash of the service would."""
    while True:
        try:
            message = inbox.recv()
        except (EOFError, OSError):
            members.kill()
            os._exit(EXIT_ORPHANED)
        if isinstance(message, ItemChange):
            changes.put(message)
        elif isinstance(message, Stop):
            stop.set()
            return
