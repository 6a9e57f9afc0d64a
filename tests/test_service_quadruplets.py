"""Quadruplets through ``oahu run``: a learner that learns them learns them in stream order; one
that does not dead-letters them as ``unsupported_kind`` and learns the constraints around them.

The source is a file of JSON messages (one per line) mixing triplets, pairs and quadruplets, by
id (resolved against the stream file as the item store) and inline, as a producer would write
them; stream files of quadruplets are read by the file source as binary messages; on Kafka (the
real broker of tests/conftest.py), binary quadruplets reach the dead-letter topic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from service_support import assert_same_model, make_stream
from test_service_file import run_to_end

from oahu.connectors.constraint import Constraint
from oahu.connectors.dead_letter import UNSUPPORTED_KIND, read_dead_letters
from oahu.connectors.file_source import FileSource
from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.messages import decode, decode_batch, encode_constraints, encode_json
from oahu.constraint_kinds import triplet_as_quadruplet
from oahu.learner import Learner
from oahu.registry import learner_class, make_learner
from oahu.service.checkpoints import checkpoint_path, read_checkpoint
from oahu.streams.stream_file import ConstraintStream, write_jsonl


def mixed_messages(stream: ConstraintStream) -> list[tuple[str, np.ndarray, bool | None, bytes]]:
    """(kind, item indices, similar, JSON message) in stream order: the stream's triplets (every
    third inline), after every fourth a quadruplet (the triplet itself as (a, p, a, n), or its
    anchor and positive against the next triplet's anchor and negative; every other one
    inline), after every fifth a pair by id."""
    c = stream.constraints
    out = []
    for i, (a, p, n) in enumerate(c):
        out.append(("triplet", c[i], None, inline_or_id("triplet", stream, c[i], i % 3 == 0)))
        if i % 4 == 1:
            a2, _, n2 = c[(i + 1) % len(c)]
            quad = (
                triplet_as_quadruplet(c[i : i + 1])[0] if i % 8 == 1 else np.array([a, p, a2, n2])
            )
            out.append(
                ("quadruplet", quad, None, inline_or_id("quadruplet", stream, quad, i % 8 == 5))
            )
        if i % 5 == 2:
            similar = i % 10 == 2  # (a, p) similar, (a, n) dissimilar
            pair = np.array([a, p if similar else n])
            ids = tuple(str(v) for v in pair)
            out.append(
                ("pair", pair, similar, encode_json(Constraint("pair", ids=ids, similar=similar)))
            )
    return out


def inline_or_id(kind: str, stream: ConstraintStream, items: np.ndarray, inline: bool) -> bytes:
    if inline:
        return encode_json(Constraint(kind, x=stream.X[items]))
    return encode_json(Constraint(kind, ids=tuple(str(v) for v in items)))


def reference(learner: str, stream: ConstraintStream, records: list) -> Learner:
    """``learner`` trained on the kinds it declares among ``records``, one by one in order,
    prepared on the gallery (the stream's development items) as the service prepares it."""
    model = make_learner(learner, stream.n_features)
    if model.needs_prepare:
        model.prepare(stream.X[stream.dev_idx])
    for kind, items, similar, _ in records:
        if model.capabilities.learns(kind):
            model.learn(kind, stream.X[items][None], None if similar is None else [similar])
    return model


def run_mixed(tmp_path: Path, learner: str, records: list, stream_file: Path):
    source = tmp_path / "messages.jsonl"
    source.write_bytes(b"\n".join(message for *_, message in records) + b"\n")
    state = tmp_path / learner
    files = {"items": str(stream_file), "gallery": str(stream_file)}  # ids: the stream's indices
    service = run_to_end(source, state, learner=learner, n_features=64, poll_records=16, **files)
    return service, read_dead_letters(state / "dead-letters.jsonl")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> tuple[Path, ConstraintStream, list]:
    tmp = tmp_path_factory.mktemp("mixed")
    stream_file = make_stream(tmp, 80, seed=12)
    stream = ConstraintStream.load(stream_file)
    records = mixed_messages(stream)
    for kind, items, _, message in records:  # what the file says is what the test expects
        c = decode(message)
        assert c.kind == kind and (c.ids is None or c.ids == tuple(str(v) for v in items))
    kinds = [kind for kind, *_ in records]
    assert kinds.count("quadruplet") == 20 and kinds.count("pair") == 16
    return stream_file, stream, records


@pytest.mark.parametrize("learner", ["lego", "rdml"])
def test_a_learner_of_pairs_and_triplets_dead_letters_quadruplets_and_learns_the_rest(
    learner: str, mixed, tmp_path: Path
):
    stream_file, stream, records = mixed
    assert not learner_class(learner).capabilities.learns("quadruplet")
    service, letters = run_mixed(tmp_path, learner, records, stream_file)
    quads = [i for i, (kind, *_) in enumerate(records) if kind == "quadruplet"]
    assert [letter.offset for letter in letters] == quads
    assert {letter.reason for letter in letters} == {UNSUPPORTED_KIND}
    assert all(f"'{learner}' does not learn from quadruplets" in d.detail for d in letters)
    assert [d.value for d in letters] == [records[i][3] for i in quads]  # the bytes, to replay
    status = service.status
    assert status["constraints_consumed"] == len(records)
    assert status["constraints_learned"] == len(records) - len(quads)
    assert status["dead_letters"] == {UNSUPPORTED_KIND: len(quads)}
    # the triplets and pairs, in stream order, as if the quadruplets were not there
    assert_same_model(service.publisher.current.learner, reference(learner, stream, records))
    metrics = service.metrics.render().decode().splitlines()
    assert f'oahu_dead_letters_total{{reason="{UNSUPPORTED_KIND}"}} {len(quads)}.0' in metrics


def test_oahu_learns_quadruplets_in_stream_order(mixed, tmp_path: Path):
    """OAHU learns triplets and quadruplets (D(a, b) < D(c, d)); its pairs are the dead
    letters now."""
    stream_file, stream, records = mixed
    # OAHU learns quadruplets: a build that stops declaring them has lost that, and fails here
    assert learner_class("oahu").capabilities.learns("quadruplet"), "OAHU must learn quadruplets"
    service, letters = run_mixed(tmp_path, "oahu", records, stream_file)
    kinds = [kind for kind, *_ in records]
    assert [d.offset for d in letters] == [i for i, kind in enumerate(kinds) if kind == "pair"]
    assert {d.reason for d in letters} == {UNSUPPORTED_KIND}
    learned = kinds.count("triplet") + kinds.count("quadruplet")
    assert service.status["constraints_learned"] == learned > kinds.count("triplet")
    assert_same_model(service.publisher.current.learner, reference("oahu", stream, records))


def test_a_stream_file_of_quadruplets_is_read_as_quadruplet_messages(tmp_path: Path):
    """The file source encodes any kind's constraints as messages by item index, .npz or JSON
    Lines alike."""
    triplets = ConstraintStream.load(make_stream(tmp_path, 12, seed=3))
    quads = triplet_as_quadruplet(triplets.constraints)
    stream = ConstraintStream(
        triplets.X, triplets.y, triplets.dev_idx, triplets.test_idx, "quadruplet", quads
    )
    stream.save(tmp_path / "quads.npz")
    write_jsonl(stream, tmp_path / "quads.jsonl")
    for name in ("quads.npz", "quads.jsonl"):
        source = FileSource(tmp_path / name)
        values = [r.value for r in source.poll(100)]
        assert source.kind == "quadruplet" and len(values) == 12 and source.exhausted
        assert {len(v) for v in values} == {48}  # binary, by id
        (batch,) = decode_batch(values).batches
        assert batch.kind == "quadruplet"
        np.testing.assert_array_equal(batch.ids, quads)


@pytest.mark.kafka
def test_binary_quadruplets_on_kafka_go_to_the_dead_letter_topic_of_a_learner_without_them(
    kafka_bootstrap, tmp_path: Path
):
    """The same against the real broker, in the binary format: LEGO's dead-letter topic gets
    each quadruplet (by id and inline) with reason ``unsupported_kind`` and its original bytes;
    the triplets around them are learned in order and the partition reaches its end."""
    from test_service_kafka import create_topic, read_topic, service, unique

    stream_file = make_stream(tmp_path, 120, seed=13)
    stream = ConstraintStream.load(stream_file)
    triplets = encode_constraints("triplet", ids=stream.constraints)
    quads = triplet_as_quadruplet(stream.constraints)
    by_id = encode_constraints("quadruplet", ids=quads)
    inline = encode_constraints("quadruplet", x=stream.X[quads])
    values, records, quad_offsets = [], [], []
    for i, value in enumerate(triplets):
        values.append(value)
        records.append(("triplet", stream.constraints[i], None, value))
        if i % 10 == 3:
            quad_offsets.append(len(values))
            values.append(by_id[i] if i % 20 == 3 else inline[i])
    topic, state = unique("quads"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, 1)
    sink = KafkaSink(topic, kafka_bootstrap)
    for value in values:
        sink.send(value)
    sink.flush()
    sink.close()
    proc = service(kafka_bootstrap, topic, unique("g"), stream_file, state, "--learner", "lego")
    model = proc.wait_consumed(len(values))
    assert proc.terminate() == 0
    assert model["dead_letters"] == {UNSUPPORTED_KIND: len(quad_offsets)}
    assert model["constraints_learned"] == len(triplets)
    letters = read_topic(kafka_bootstrap, topic + ".dead-letter", len(quad_offsets))
    got = {}
    for letter in letters:
        headers = {k: v.decode() for k, v in letter.headers}
        got[int(headers["offset"])] = (headers["reason"], letter.value)
    assert got == {o: (UNSUPPORTED_KIND, values[o]) for o in quad_offsets}
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.offsets == {0: len(values)} and progress.consumed == len(values)
    assert_same_model(learner, reference("lego", stream, records))
