"""The service's configuration: one typed, validated place for everything ``oahu run`` can be told.

Each field carries its ``--help`` text, so the flags (:mod:`oahu.service.config_flags`) and their
documentation cannot drift apart; :mod:`oahu.service.config_sources` fills the fields from a
file, the environment and the flags.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from oahu.checks import check_bool, check_choice, check_int, check_number
from oahu.connectors.kafka_uri import parse_kafka_uri
from oahu.registry import LEARNER_NAMES, check_params

__all__ = ["LOG_LEVELS", "TABLES", "ServiceConfig", "configure_logging", "setting_type"]

LOG_LEVELS = ("debug", "info", "warning", "error")
_COUNTS = (
    "checkpoint_every",
    "poll_records",
    "max_request_bytes",
    "max_batch_items",
    "k",
    "threads",
    "reindex_every",
    "default_constraints",
    "ivf_nprobe",
    "learners",
)
_SECONDS = (
    "checkpoint_interval",
    "reindex_interval",
    "poll_timeout",
    "learner_restart_delay",
    "max_model_lag",
    "group_timeout",
)


def _opt(default: Any, help: str, metavar: str | None = None) -> Any:
    return field(default=default, metadata={"help": help, "metavar": metavar})


def _table(help: str, flag: str) -> dict[str, Any]:
    # A table's flag is given once per entry, so it is named for one entry, not the table.
    return {"help": help, "metavar": "KEY=VALUE", "flag": flag}


@dataclass(frozen=True)
class ServiceConfig:
    """Everything ``oahu run`` can be told. Invalid values raise ``ValueError`` naming the field.

    >>> cfg = ServiceConfig(source="kafka://127.0.0.1:9092/constraints?group=g1")
    >>> cfg.kafka_target(), cfg.http_host_port()
    (('127.0.0.1:9092', 'constraints', 'g1'), ('127.0.0.1', 8000))
    >>> ServiceConfig(checkpoint_every=0)
    Traceback (most recent call last):
    ...
    ValueError: checkpoint_every: must be an integer >= 1, got 0
    """

    source: str | None = _opt(
        None,
        "constraint source: file:///abs/path/stream.npz (or .jsonl, or one message per line) or "
        "kafka://HOST:PORT/TOPIC?group=NAME; default: a digits stream built once and cached "
        "in the checkpoint dir. A cross-modal stream file is learned by oahu's cross-modal "
        "model and served across modalities (docs/cross-modal.md)",
        "URI",
    )
    checkpoint_dir: str = _opt("oahu-state", "directory for checkpoints and service state", "DIR")
    http: str = _opt("127.0.0.1:8000", "address the HTTP API listens on", "HOST:PORT")
    learner: str = _opt("oahu", f"learner to train: {', '.join(LEARNER_NAMES)}", "NAME")
    preset: str | None = _opt(
        None,
        "OAHU only: a named configuration, e.g. paper (the published algorithm, whose deep heads "
        "collapse); default: oahu's own learner",
        "NAME",
    )
    self_paced: bool = _opt(
        False,
        "OAHU only: self-paced learning (after LEAP): hold back new constraints that are too hard "
        "for the model yet, admitting harder ones as the stream goes; counted in "
        "oahu_self_paced_held_back",
    )
    learner_params: dict[str, Any] = field(
        default_factory=dict,
        metadata=_table(
            "learner constructor parameter (repeatable), e.g. batch_size=1", "--learner-param"
        ),
    )
    n_features: int | None = _opt(
        None, "input dimension; default: that of the checkpoint, item store or gallery", "D"
    )
    items: str | None = _opt(
        None,
        "item store file (.npz with ids, X[, y], or a stream file): features by id; a "
        "cross-modal stream file makes the service cross-modal (its items by modality, "
        "docs/cross-modal.md)",
        "FILE",
    )
    gallery: str | None = _opt(
        None,
        "labelled gallery to classify and retrieve against (.npz with ids, X, y, or a stream "
        "file, whose development items are used); default: the file source's development items",
        "FILE",
    )
    exit_at_end: bool = _opt(
        False, "file sources: checkpoint and exit 0 once the file is exhausted"
    )
    checkpoint_every: int = _opt(5000, "checkpoint after this many consumed constraints", "N")
    checkpoint_interval: float = _opt(30.0, "... or after this many seconds", "SECONDS")
    reindex_every: int = _opt(1000, "re-embed the gallery after this many model updates", "N")
    reindex_interval: float = _opt(5.0, "... or after this many seconds", "SECONDS")
    poll_records: int = _opt(1000, "most records fetched (and learned as a run) at once", "N")
    poll_timeout: float = _opt(0.5, "longest wait for records in one poll", "SECONDS")
    dead_letter: str | None = _opt(
        None,
        "where rejected messages go: a topic for Kafka sources (default TOPIC.dead-letter), "
        "a JSON Lines file for file sources (default CHECKPOINT_DIR/dead-letters.jsonl)",
        "TOPIC|FILE",
    )
    suggest_topic: str | None = _opt(
        None,
        "publish every POST /v1/suggest answer to this Kafka topic, one JSON message per "
        "question, for annotation tools (docs/active-learning-service.md): a topic on the "
        "source's brokers, or kafka://HOST:PORT/TOPIC; default: not published",
        "TOPIC",
    )
    kafka: dict[str, Any] = field(
        default_factory=dict,
        metadata=_table(
            "kafka-python consumer/producer setting (repeatable), e.g. "
            "security_protocol=SASL_SSL, sasl_mechanism=PLAIN, sasl_plain_username=..., "
            "ssl_cafile=...",
            "--kafka-option",
        ),
    )
    publish_model: str | None = _opt(
        None,
        "oahu run: publish every snapshot to this Kafka topic (compacted; created if missing) "
        "and the API's item changes to TOPIC.items, for oahu serve replicas to follow",
        "kafka://HOST:PORT/TOPIC",
    )
    model_topic: str | None = _opt(
        None,
        "oahu serve: the topic of an oahu run --publish-model to serve snapshots from",
        "kafka://HOST:PORT/TOPIC",
    )
    max_model_lag: float = _opt(
        30.0,
        "oahu serve: /readyz answers 503 while the newest snapshot on the model topic has not "
        "been served for this long",
        "SECONDS",
    )
    auth_token: str | None = _opt(
        None, "bearer token required by the write endpoints (POST/DELETE /v1/items)", "TOKEN"
    )
    max_request_bytes: int = _opt(16 * 1024 * 1024, "largest accepted request body", "BYTES")
    max_batch_items: int = _opt(4096, "most items (or pairs) in one request", "N")
    index: str = _opt(
        "exact",
        "gallery search: exact (the paper's kNN, by matrix products), flat (the same, by faiss) "
        "or ivf (approximate, for large galleries)",
        "KIND",
    )
    ivf_nprobe: int = _opt(16, "clusters an ivf index visits per depth and query", "N")
    k: int = _opt(5, "neighbours per depth for classification and retrieval (Eq. 23-27)", "K")
    threads: int = _opt(1, "torch threads of the learner", "N")
    learner_nice: int = _opt(
        10,
        "niceness of the learner process (0-19): when the cores are busy, queries get them "
        "first and learning takes the rest",
        "N",
    )
    learner_restart_delay: float = _opt(
        1.0,
        "wait before starting a new learner process after one failed (serving goes on from the "
        "last snapshot meanwhile); doubled after each failure within a minute of its start, up "
        "to 60 s",
        "SECONDS",
    )
    default_constraints: int = _opt(
        10000, "length of the default digits stream (when no --source is given)", "N"
    )
    seed: int = _opt(0, "seed of the default digits stream", "SEED")
    log_level: str = _opt("info", ", ".join(LOG_LEVELS[:-1]) + f" or {LOG_LEVELS[-1]}", "LEVEL")
    learners: int = _opt(
        1,
        "learner processes that learn ONE model together over the source's partitions (a "
        "learning group, docs/delivery.md); 1: one learner process",
        "N",
    )
    combine_every: int | None = _opt(
        None,
        "a learning group combines its members' models after this many updates each; default: "
        "256 for strict learners, 64 for micro-batch learners (docs/delivery.md says why)",
        "K",
    )
    group_address: str | None = _opt(
        None,
        "rendezvous of a learning group: tcp://HOST:PORT of rank 0, or env:// (MASTER_ADDR, "
        "MASTER_PORT); default: a free port on 127.0.0.1, every member on this machine",
        "URI",
    )
    local_learners: int | None = _opt(
        None,
        "of a learning group's ranks, how many this machine runs (ranks 0 to N-1); the others "
        "run `oahu group-member` on other machines; default: all of them",
        "N",
    )
    group_timeout: float = _opt(
        10.0, "seconds a learning group waits for a member before it fails and restarts", "SECONDS"
    )

    def __post_init__(self) -> None:
        for name in _COUNTS:
            check_int(getattr(self, name), name)
        for name in ("n_features", "combine_every"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name)
        check_int(self.learner_nice, "learner_nice", minimum=0, maximum=19)
        check_int(self.seed, "seed", minimum=0)
        for name in _SECONDS:
            check_number(getattr(self, name), name, low=0.0, closed="neither")
        check_bool(self.self_paced, "self_paced")
        check_bool(self.exit_at_end, "exit_at_end")
        check_choice(self.learner, "learner", LEARNER_NAMES)
        check_choice(self.log_level, "log_level", LOG_LEVELS)
        check_params(self.learner, self.learner_params, "learner_params")
        if self.self_paced and self.learner != "oahu":
            raise ValueError(f"self_paced: only OAHU learns self-paced, not {self.learner!r}")
        if self.preset is not None:
            from oahu.learners.oahu.config import PRESETS

            if self.learner != "oahu":
                raise ValueError(f"preset: only OAHU has presets, not {self.learner!r}")
            check_choice(self.preset, "preset", tuple(PRESETS))
        from oahu.inference.index import INDEX_KINDS  # here: the learner process never needs it

        check_choice(self.index, "index", INDEX_KINDS)
        self._check_group()
        self.http_host_port()
        for name in ("publish_model", "model_topic"):
            if getattr(self, name) is not None:
                parse_kafka_uri(getattr(self, name), name, "kafka://HOST:PORT/TOPIC")
        if self.suggest_topic is not None:
            # A bare topic lives on the source's brokers; any other broker needs a URI.
            if self.suggest_topic.startswith("kafka://"):
                parse_kafka_uri(self.suggest_topic, "suggest_topic", "kafka://HOST:PORT/TOPIC")
            elif not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", self.suggest_topic):
                raise ValueError(
                    "suggest_topic: a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -) or "
                    f"kafka://HOST:PORT/TOPIC, got {self.suggest_topic!r}"
                )
            elif not (self.source or "").startswith("kafka://"):
                raise ValueError(
                    f"suggest_topic: {self.suggest_topic!r} names a topic on the source's "
                    "brokers, but the source is not Kafka; give kafka://HOST:PORT/TOPIC"
                )
        if self.source is not None:
            scheme = urlparse(self.source).scheme
            if scheme == "kafka":
                self.kafka_target()
            elif scheme == "file":
                uri = urlparse(self.source)
                if uri.netloc not in ("", "localhost") or not uri.path.startswith("/"):
                    raise ValueError(f"source: file URIs need an absolute path, got {self.source}")
            else:
                raise ValueError(
                    f"source: expected file:///abs/path or kafka://HOST:PORT/TOPIC?group=NAME, "
                    f"got {self.source!r}"
                )

    def _check_group(self) -> None:
        if self.local_learners is not None:
            check_int(self.local_learners, "local_learners", maximum=self.learners)
        if self.learners == 1:
            return
        from oahu.registry import learner_class

        if not learner_class(self.learner).capabilities.combines_parameters:
            raise ValueError(
                f"learners: {self.learners} learner processes learn one model by combining "
                f"their parameters, and {self.learner!r} declares no way to combine them; use "
                "--learners 1 or --learner oahu"
            )
        if self.group_address is not None:
            uri = urlparse(self.group_address)
            if uri.scheme == "env" or (uri.scheme == "tcp" and uri.hostname and uri.port):
                return
            raise ValueError(
                f"group_address: expected tcp://HOST:PORT or env://, got {self.group_address!r}"
            )

    # ------------------------------------------------------------------ views
    def learner_arguments(self) -> dict[str, Any]:
        """The learner's constructor arguments: ``--learner-param`` settings, ``--preset`` and
        ``--self-paced``."""
        preset = {} if self.preset is None else {"preset": self.preset}
        paced = {"self_paced": True} if self.self_paced else {}
        return {**self.learner_params, **preset, **paced}

    def index_device(self) -> str:
        """The torch device the serving index searches the gallery on: the GPU that the learner
        embeds on (``--learner-param device=cuda``, ``cuda:N``, or ``auto``, a torch learner's
        default, on a machine with one), where the gallery's embeddings already are and one
        matrix product answers a batch; else the CPU, whose search stays numpy's and torch's
        on the host as before. Only the ``"exact"`` index searches on a GPU: ``--index ivf`` is
        faiss's, on the CPU.

        >>> ServiceConfig(learner="euclidean").index_device()
        'cpu'
        >>> ServiceConfig(learner_params={"device": "cpu"}).index_device()
        'cpu'
        """
        from oahu.registry import learner_class

        if self.index != "exact" or not learner_class(self.learner).capabilities.torch_device:
            return "cpu"  # faiss's index, or a learner without a torch device (on the CPU)
        from oahu.learners.oahu.device import resolve_device

        device = resolve_device(str(self.learner_arguments().get("device", "auto")))
        return str(device) if device.type == "cuda" else "cpu"

    @property
    def is_kafka(self) -> bool:
        return self.source is not None and self.source.startswith("kafka://")

    def file_path(self) -> Path:
        """The path of a ``file://`` source."""
        return Path(urlparse(self.source or "").path)

    def kafka_target(self) -> tuple[str, str, str]:
        """(bootstrap servers, topic, group) of a ``kafka://`` source (group "oahu" if none)."""
        uri = parse_kafka_uri(self.source or "")
        return uri.bootstrap, uri.topic, uri.group or "oahu"

    def check_kafka_options(self) -> None:
        """``ValueError`` naming any ``--kafka-option`` that kafka-python does not know."""
        from kafka import KafkaConsumer, KafkaProducer

        known = set(KafkaConsumer.DEFAULT_CONFIG) | set(KafkaProducer.DEFAULT_CONFIG)
        unknown = set(self.kafka) - known
        if unknown:
            raise ValueError(f"kafka: unknown kafka-python setting(s) {sorted(unknown)}")

    def kafka_options(self, client: type) -> dict[str, Any]:
        """The ``--kafka-option`` settings that ``client`` (KafkaConsumer or KafkaProducer)
        takes, after :meth:`check_kafka_options`."""
        self.check_kafka_options()
        return {k: v for k, v in self.kafka.items() if k in client.DEFAULT_CONFIG}

    def http_host_port(self) -> tuple[str, int]:
        host, sep, port = self.http.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"http: expected HOST:PORT, got {self.http!r}")
        return host.strip("[]"), int(port)

    def replace(self, **changes: Any) -> ServiceConfig:
        return dataclasses.replace(self, **changes)


_HINTS = typing.get_type_hints(ServiceConfig)


def setting_type(name: str) -> type:
    """The plain type of the field ``name`` (``int`` for ``int | None``, ``dict`` for a table):
    what a value read as text becomes.

    >>> setting_type("n_features"), setting_type("kafka"), setting_type("self_paced")
    (<class 'int'>, <class 'dict'>, <class 'bool'>)
    """
    hint = _HINTS[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


#: The dict-valued fields, filled KEY=VALUE one entry at a time.
TABLES: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ServiceConfig) if setting_type(f.name) is dict
)


def configure_logging(level: str) -> None:
    """Log to stderr at ``level`` (both service processes call it)."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
    )
    if level != "debug":
        # kafka-python narrates every connection at INFO, and faiss announces at INFO which of
        # its builds it loaded, first thing in every start (before any error of ours)
        for library in ("kafka", "faiss"):
            logging.getLogger(library).setLevel(logging.WARNING)
