"""Kafka topics named as URIs: ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC[?group=NAME]``.

>>> parse_kafka_uri("kafka://127.0.0.1:9092/constraints?group=g1")
KafkaURI(bootstrap='127.0.0.1:9092', topic='constraints', group='g1')
>>> parse_kafka_uri("kafka://127.0.0.1:9092/constraints").group is None
True
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

FORM = "kafka://HOST:PORT/TOPIC?group=NAME"


@dataclass(frozen=True)
class KafkaURI:
    """Bootstrap servers, topic and (for consumers) consumer group of a ``kafka://`` URI."""

    bootstrap: str
    topic: str
    group: str | None = None


def parse_kafka_uri(uri: str, what: str = "source", form: str = FORM) -> KafkaURI:
    """The parts of ``uri``; ``ValueError`` naming ``what`` (and the expected ``form``) when it
    is not a ``kafka://`` URI with servers and one topic."""
    parsed = urlparse(uri)
    topic = parsed.path.strip("/")
    if parsed.scheme != "kafka" or not parsed.netloc or not topic or "/" in topic:
        raise ValueError(f"{what}: expected {form}, got {uri!r}")
    group = parse_qs(parsed.query).get("group", [None])[0]
    return KafkaURI(parsed.netloc, topic, group)
