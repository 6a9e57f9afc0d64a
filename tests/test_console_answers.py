"""The annotation page's back end: questions signed by the service, answers stored durably on
the service's input path (the answers log beside a stream file, or the Kafka input topic) and
learned exactly once, across kill -9 and retried answers."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from service_support import (
    ServiceProcess,
    assert_same_model,
    gone,
    make_stream,
    train_reference,
    wait_until,
)
from test_service_kafka import produce, read_topic, unique
from test_service_kafka import service as kafka_service
from test_service_poison_records import DiscardingLink
from test_service_process import learner_pid

from oahu.connectors.answered import MAX_ANSWERED, AnsweredQuestions, question_of
from oahu.connectors.answers_log import ANSWERS_FILE, AnswersLog
from oahu.connectors.answers_source import WithAnswers
from oahu.connectors.dead_letter import DUPLICATE_ANSWER, read_dead_letters
from oahu.connectors.file_source import FileSource
from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.messages import encode_stream
from oahu.registry import make_learner
from oahu.service.checkpoints import Progress, checkpoint_path, read_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.console.answers import answer_message
from oahu.service.console.question_tokens import (
    KEY_FILE,
    AskedQuestion,
    BadToken,
    QuestionTokens,
    load_key,
)
from oahu.service.learning.main import DEAD_LETTER_FILE, build_loop
from oahu.streams.stream_file import ConstraintStream


# ---------------------------------------------------------------------- tokens
def test_a_token_verifies_with_the_key_read_again_and_not_when_tampered_or_garbled(tmp_path):
    key = load_key(tmp_path)
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600 and len(key) == 32
    asked = AskedQuestion.new("17", "4", "90", snapshot=3, asked_at=time.time() - 7200)
    token = QuestionTokens(key).sign(asked)
    # the key is read back (what a restarted service does) and verifies the old token,
    # whatever its age: the time asked comes back for the endpoint to judge
    again = QuestionTokens(load_key(tmp_path)).verify(token)
    assert again == asked and again.asked_at == asked.asked_at
    assert AskedQuestion.new("1", "2", "3", 0, 0.0).question != asked.question  # fresh ids

    payload, mac = token.split(".")
    forged = json.dumps([asked.question, "17", "90", "4", 3, asked.asked_at]).encode()
    forged_payload = base64.urlsafe_b64encode(forged).rstrip(b"=").decode()
    flipped = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    cases = {
        f"{forged_payload}.{mac}": "its signature does not match",  # items swapped
        f"{payload}.{flipped}": "its signature does not match",
        "garbage": "not a question token",
        "a.b.c": "not a question token",
        "é.é": "not a question token",
        ".": "its signature does not match",
    }
    tokens = QuestionTokens(key)
    for bad, why in cases.items():
        with pytest.raises(BadToken, match=why):
            tokens.verify(bad)
    with pytest.raises(BadToken):
        QuestionTokens(os.urandom(32)).verify(token)  # another service's key


def test_a_damaged_key_file_is_refused_naming_it(tmp_path):
    (tmp_path / KEY_FILE).write_bytes(b"short")
    with pytest.raises(ValueError, match=r"console\.key: a console key is 32 bytes, this file 5"):
        load_key(tmp_path)


# ---------------------------------------------------------------------- the answers log
def test_an_append_is_on_disk_when_fsync_returns_and_a_failed_write_leaves_no_line(
    tmp_path, monkeypatch
):
    path = tmp_path / ANSWERS_FILE
    answers = AnswersLog(path)
    synced: list[bytes] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append(path.read_bytes())  # what the file held when the append was durable

    monkeypatch.setattr(os, "fsync", fsync)
    first = b'{"v":1,"kind":"triplet","question":"q1"}'
    assert answers.append(first) == 0
    assert answers.append(b'{"v":1,"kind":"triplet","question":"q2"}') == 1
    assert synced[0] == first + b"\n" and synced[1].count(b"\n") == 2

    def half_then_full_disk(fd: int, data: bytes) -> int:
        os.pwrite(fd, data[: len(data) // 2], os.fstat(fd).st_size)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full_disk)
    with pytest.raises(OSError, match="No space"):
        answers.append(b'{"v":1,"kind":"triplet","question":"q3"}')
    assert path.read_bytes().count(b"\n") == 2 and path.read_bytes().endswith(b'"q2"}\n')
    assert answers.lines == 2
    with pytest.raises(ValueError, match="one line"):
        answers.append(b'{"v":1}\n{"v":1}')


def test_opening_the_log_cuts_a_torn_line_and_rebuilds_the_answered_questions(tmp_path):
    path = tmp_path / ANSWERS_FILE
    lines = [b'{"v":1,"kind":"triplet","question":"q%d"}' % i for i in range(3)]
    path.write_bytes(b"\n".join(lines) + b'\n{"v":1,"kind":"triplet","quest')
    answers = AnswersLog(path)
    assert path.read_bytes() == b"\n".join(lines) + b"\n"
    assert answers.lines == 3 and list(answers.questions) == ["q0", "q1", "q2"]
    assert answers.append(lines[0]) == 3  # offsets go on after the cut


def test_answered_questions_keep_the_most_recent_in_order():
    answered = AnsweredQuestions(limit=3)
    assert [answered.add(q) for q in ["a", "b", "a", "c", "d"]] == [True, True, False, True, True]
    assert list(answered) == ["b", "c", "d"] and "a" not in answered
    assert MAX_ANSWERED == 100_000
    assert question_of(b'{"v":1,"question":"q9","kind":"triplet"}') == "q9"
    assert question_of(b'{"v":1,"question":""}') is None  # no id: learned as any message


# ---------------------------------------------------------------------- the two-partition source
def message_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "stream.txt"
    path.write_bytes(b"".join(b'{"v":1,"i":%d}\n' % i for i in range(n)))
    return path


def test_the_answers_log_is_partition_1_with_line_offsets_seek_lag_and_exhaustion(tmp_path):
    log_path = tmp_path / ANSWERS_FILE
    source = WithAnswers(FileSource(message_file(tmp_path, 5)), log_path)
    assigned: list[list[int]] = []
    source.listen(assigned.append, lambda partitions: None)
    assert not source.exhausted and source.lag() == {1: 0}  # no log yet: the service makes it
    records = source.poll(3)
    assert assigned == [[0, 1]]
    assert [(r.partition, r.offset) for r in records] == [(0, 0), (0, 1), (0, 2)]

    writer = AnswersLog(log_path)
    for i in range(4):
        writer.append(b'{"v":1,"question":"q%d"}' % i)
    with open(log_path, "ab") as fh:
        fh.write(b'{"v":1,"question":"q4"')  # being written: not delivered until its newline
    assert source.lag() == {1: 4}
    records = source.poll(3)  # answers come first
    assert [(r.partition, r.offset, r.value) for r in records] == [
        (1, i, b'{"v":1,"question":"q%d"}' % i) for i in range(3)
    ]
    assert records[0].source == str(log_path)
    records = source.poll(3)
    assert [(r.partition, r.offset) for r in records] == [(1, 3), (0, 3), (0, 4)]
    assert source.poll(3) == [] and source.exhausted  # the torn line is not a record
    with open(log_path, "ab") as fh:
        fh.write(b"}\n")
    assert not source.exhausted and source.lag() == {0: 0, 1: 1}
    assert [(r.partition, r.offset) for r in source.poll(3)] == [(1, 4)]
    assert source.exhausted

    source.commit({0: 5, 1: 5})
    assert source.committed(0) == 5 and source.committed(1) == 5
    source.seek({0: 4, 1: 2})  # what a restart from a checkpoint does
    assert [(r.partition, r.offset) for r in source.poll(10)] == [(1, 2), (1, 3), (1, 4), (0, 4)]
    source.seek({1: 9})  # a log replaced behind the checkpoint's back: continue at its end
    writer.append(b'{"v":1,"question":"q5"}')
    assert [(r.partition, r.offset) for r in source.poll(10)] == [(1, 5)]
    source.close()
    writer.close()


# ---------------------------------------------------------------------- the learner skips repeats
def triplet(ids: tuple[int, int, int], question: str | None = None) -> bytes:
    message: dict[str, Any] = {"v": 1, "kind": "triplet"}
    for role, item in zip(("anchor", "positive", "negative"), ids, strict=True):
        message[role] = {"id": str(item)}
    if question is not None:
        message["question"] = question
    return json.dumps(message).encode()


def learn_until_exhausted(state: Path, messages: Path, stream: Path) -> Any:
    """The real learn loop of a service on the file ``messages`` (its items: ``stream``'s) and
    the answers log in ``state``, from the checkpoint there, until both are exhausted."""
    config = ServiceConfig(
        source=messages.as_uri(), items=str(stream), checkpoint_dir=str(state),
        exit_at_end=True, poll_records=4, checkpoint_every=3, poll_timeout=0.01,
    )  # fmt: skip
    restored = read_checkpoint(checkpoint_path(state))
    if restored is None:
        learner = make_learner("oahu", 64)
        learner.prepare(ConstraintStream.load(stream).X[ConstraintStream.load(stream).dev_idx])
        restored = (learner, Progress())
    loop = build_loop(config, restored[0], restored[1], DiscardingLink())
    try:
        loop.run(threading.Event())
    finally:
        loop.source.close()
        loop.dead_letters.close()
    return loop


def messages_of(tmp_path: Path, n: int, seed: int) -> tuple[ConstraintStream, Path, Path]:
    """A stream of ``n`` triplets, and its constraints as a file of JSON messages by id."""
    stream_file = make_stream(tmp_path, n, seed=seed)
    messages = tmp_path / "messages.txt"
    messages.write_bytes(b"\n".join(encode_stream(stream_file, "json")))
    return ConstraintStream.load(stream_file), stream_file, messages


def learned_in_order(stream: ConstraintStream, rows: list[Any]) -> Any:
    """OAHU prepared as the service prepares it, then taught the triplets ``rows`` of the
    stream's constraints in order."""
    reference = train_reference(stream, rows=slice(0, 0))
    c = stream.constraints[np.concatenate([np.atleast_1d(r) for r in rows])]
    reference.learn_triplets(stream.X[c[:, 0]], stream.X[c[:, 1]], stream.X[c[:, 2]])
    return reference


def test_an_answer_that_reaches_the_log_twice_is_learned_once_across_restarts(tmp_path):
    stream, stream_file, messages = messages_of(tmp_path, 10, seed=3)
    state = tmp_path / "state"
    state.mkdir()
    c = stream.constraints
    answers = AnswersLog(state / ANSWERS_FILE)
    answers.append(triplet(tuple(c[0]), "q-a"))
    answers.append(triplet(tuple(c[1]), "q-b"))
    answers.append(triplet(tuple(c[0]), "q-a"))  # a retried answer, appended again
    loop = learn_until_exhausted(state, messages, stream_file)
    assert loop.learner.constraints_learned == 12 and loop.progress.consumed == 13
    assert loop.progress.offsets == {0: 10, 1: 3}
    assert loop.progress.dead_letters == {DUPLICATE_ANSWER: 1}
    (letter,) = read_dead_letters(state / DEAD_LETTER_FILE)
    assert (letter.reason, letter.partition, letter.offset) == (DUPLICATE_ANSWER, 1, 2)
    assert "'q-a'" in letter.detail

    # the checkpoint remembers the questions: after a restart a third copy is skipped too,
    # and a new question is learned
    _, progress = read_checkpoint(checkpoint_path(state))
    assert list(progress.answered) == ["q-a", "q-b"]
    answers.append(triplet(tuple(c[0]), "q-a"))
    answers.append(triplet(tuple(c[2]), "q-c"))
    answers.close()
    loop = learn_until_exhausted(state, messages, stream_file)
    assert loop.learner.constraints_learned == 13 and loop.progress.consumed == 15
    assert loop.progress.dead_letters == {DUPLICATE_ANSWER: 2}
    # answers first in a poll: q-a, q-b, then the stream, then (after the restart) q-c
    assert_same_model(loop.learner, learned_in_order(stream, [0, 1, np.arange(10), 2]))


def test_a_rewind_forgets_the_questions_answered_after_the_checkpoint(tmp_path, monkeypatch):
    """An error while learning rewinds the learner and the answered questions together: the
    answers consumed since the checkpoint are learned again, once, not skipped as repeats."""
    stream, stream_file, messages = messages_of(tmp_path, 6, seed=4)
    state = tmp_path / "state"
    state.mkdir()
    answers = AnswersLog(state / ANSWERS_FILE)
    for i in range(3):
        answers.append(triplet(tuple(stream.constraints[i]), f"q{i}"))
    answers.close()
    oahu_class = type(make_learner("oahu", 64))
    original = oahu_class.learn
    calls = []

    def fails_first(self: Any, kind: str, items: Any, similar: Any = None) -> np.ndarray:
        calls.append(len(items))
        if len(calls) == 1:
            raise ValueError("a learner error, once")
        return original(self, kind, items, similar)

    monkeypatch.setattr(oahu_class, "learn", fails_first)
    loop = learn_until_exhausted(state, messages, stream_file)
    assert calls[0] == 4 and calls[1:5] == [1, 1, 1, 1]  # rewound, then one at a time
    assert loop.progress.consumed == 9 and loop.learner.constraints_learned == 9
    assert not loop.progress.dead_letters and list(loop.progress.answered) == ["q0", "q1", "q2"]
    assert_same_model(loop.learner, learned_in_order(stream, [0, 1, 2, np.arange(6)]))


# ---------------------------------------------------------------------- the endpoints
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def start(tmp_path: Path, stream_file: Path, state: Path, name: str, *extra: str):
    service = ServiceProcess(
        ["--source", stream_file.as_uri(), "--checkpoint-dir", str(state), "--poll-records",
         "20", "--checkpoint-every", "7", "--reindex-interval", "0.2", *extra],
        tmp_path / f"{name}.log",
    )  # fmt: skip
    service.wait_serving()
    return service


def post(service: ServiceProcess, path: str, body: Any, auth: bool = True) -> httpx.Response:
    return httpx.post(service.base + path, json=body, headers=AUTH if auth else {}, timeout=30)


def ask(service: ServiceProcess, n: int = 1, auth: bool = True) -> list[dict[str, Any]]:
    response = post(service, "/v1/console/questions", {"n": n}, auth)
    assert response.status_code == 200, response.text
    return response.json()["questions"]


def oracle(question: dict[str, Any]) -> str:
    """The choice a person who knows the labels makes."""
    return "first" if question["first"]["label"] == question["anchor"]["label"] else "second"


def answer(service: ServiceProcess, token: str, choice: str, who: str = "ana") -> httpx.Response:
    return post(
        service, "/v1/console/answers", {"token": token, "choice": choice, "annotator": who}
    )


def error(response: httpx.Response, status: int) -> Any:
    assert response.status_code == status, response.text
    return response.json()["detail"]


def test_the_endpoints_refuse_every_bad_input_with_a_4xx_naming_it(tmp_path):
    stream_file = make_stream(tmp_path, 60, seed=1)
    state = tmp_path / "state"
    service = start(tmp_path, stream_file, state, "api", "--auth-token", TOKEN)
    try:
        log_path = state / ANSWERS_FILE
        # the questions: items by id with their labels, the snapshot that chose them
        response = post(service, "/v1/console/questions", {"n": 3, "strategy": "uncertainty"})
        body = response.json()
        assert set(body) == {"questions", "model"} and len(body["questions"]) == 3
        assert set(body["model"]) == {"snapshot", "updates"}
        stream = ConstraintStream.load(stream_file)
        for q in body["questions"]:
            assert set(q) == {"token", "anchor", "first", "second", "score"}
            for role in ("anchor", "first", "second"):
                assert q[role]["label"] == int(stream.y[int(q[role]["id"])])
            assert isinstance(q["score"], float)
        assert len(ask(service)) == 1  # n defaults to 1

        # the bearer token guards both
        for path in ("/v1/console/questions", "/v1/console/answers"):
            assert error(post(service, path, {}, auth=False), 401) == (
                "a valid bearer token is required"
            )
        for bad, field in (({"n": 0}, "n"), ({"n": 21}, "n"), ({"strategy": "best"}, "strategy"),
                           ({"n": 2, "pool": [1, 2, 3]}, "pool")):  # fmt: skip
            [detail] = error(post(service, "/v1/console/questions", bad), 422)
            assert detail["loc"] == ["body", field], detail

        questions = body["questions"]
        token = questions[0]["token"]
        # a token the service never issued
        payload, mac = token.split(".")
        for bad in ("garbage", f"{payload}.{mac[::-1]}", f"{payload[:-4]}AAAA.{mac}"):
            [detail] = error(answer(service, bad, "first"), 422)
            assert detail["loc"] == ["body", "token"]
            assert detail["msg"].startswith("the service never asked this question")
        # a name that is no name
        for who in ("", " ", "x" * 65, "bad\nname", "tab\there", "\x97n", 7):
            [detail] = error(answer(service, token, "first", who), 422)
            assert detail["loc"] == ["body", "annotator"]
            assert "1 to 64 characters, no control character" in detail["msg"]
        [detail] = error(answer(service, token, "maybe"), 422)
        assert detail["loc"] == ["body", "choice"]
        assert log_path.read_bytes() == b""

        # a stale question: signed by this service's key an hour and more ago
        key = (state / KEY_FILE).read_bytes()
        old = AskedQuestion.new("1", "2", "3", snapshot=1, asked_at=time.time() - 3700)
        detail = error(answer(service, QuestionTokens(key).sign(old), "first"), 409)
        assert f"question {old.question} is stale" in detail and "ask again" in detail

        # skipped: counted, nothing stored
        assert answer(service, token, "skip", "bo").json() == {
            "status": "skipped",
            "question": token_question(key, token),
        }
        assert log_path.read_bytes() == b""

        # accepted, stored before the answer; a retry is a duplicate, stored once
        accepted = answer(service, token, oracle(questions[0]))
        qid = token_question(key, token)
        assert accepted.json() == {
            "status": "accepted", "question": qid, "appended_to": str(log_path.resolve()),
        }  # fmt: skip
        [line] = log_path.read_bytes().splitlines()
        message = json.loads(line)
        asked = questions[0]
        closer, farther = (
            (asked["first"], asked["second"])
            if oracle(asked) == "first"
            else (asked["second"], asked["first"])
        )
        assert message["anchor"] == {"id": asked["anchor"]["id"]}
        assert message["positive"] == {"id": closer["id"]}
        assert message["negative"] == {"id": farther["id"]}
        assert (message["v"], message["kind"], message["question"], message["annotator"]) == (
            1, "triplet", qid, "ana",
        )  # fmt: skip
        assert abs(message["ts"] - time.time()) < 60
        again = answer(service, token, "second", "someone else")
        assert again.json() == {
            "status": "duplicate", "question": qid, "appended_to": str(log_path.resolve()),
        }  # fmt: skip
        assert len(log_path.read_bytes().splitlines()) == 1
        service.wait_consumed(61)

        # an item removed since the question was asked
        removed = questions[1]["first"]["id"]
        deleted = httpx.request(
            "DELETE", service.base + "/v1/items", json={"ids": [removed]}, headers=AUTH
        )
        assert deleted.json()["removed"] == 1
        detail = error(answer(service, questions[1]["token"], "first"), 409)
        assert f"item '{removed}' (the question's first) is no longer in the item store" in detail
        assert len(log_path.read_bytes().splitlines()) == 1

        metrics = service.get("/metrics").text
        assert 'oahu_console_answers_total{annotator="ana",choice=' in metrics
        counts = {
            line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
            for line in metrics.splitlines()
            if line.startswith("oahu_console_answers_total")
        }
        assert counts == {
            f'oahu_console_answers_total{{annotator="ana",choice="{oracle(asked)}"}}': 1.0,
            'oahu_console_answers_total{annotator="bo",choice="skip"}': 1.0,
        }
    finally:
        assert service.terminate() == 0


def test_no_snapshot_and_a_failing_disk_are_503s_that_say_why(tmp_path):
    """Before the first snapshot there is nothing to ask with; an answer that cannot be made
    durable is refused, never acknowledged (in-process: the learner is not started)."""
    from fastapi.testclient import TestClient

    from oahu.service.serving.app import Service

    stream_file = make_stream(tmp_path, 20, seed=9)
    state = tmp_path / "state"
    service = Service(ServiceConfig(source=stream_file.as_uri(), checkpoint_dir=str(state)))
    service.suggester.start()
    try:
        with TestClient(service.app) as client:
            response = client.post("/v1/console/questions", json={"n": 2})
            assert response.status_code == 503 and "snapshot" in response.json()["detail"]
            asked = AskedQuestion.new("1", "2", "3", snapshot=1, asked_at=time.time())
            token = QuestionTokens((state / KEY_FILE).read_bytes()).sign(asked)
            service.answers.log.close()  # every write now fails, as on a broken disk
            body = {"token": token, "choice": "first", "annotator": "ana"}
            response = client.post("/v1/console/answers", json=body)
            assert response.status_code == 503, response.text
            assert response.json()["detail"].startswith(
                f"the answer could not be written to {(state / ANSWERS_FILE).resolve()}"
            )
            assert (state / ANSWERS_FILE).read_bytes() == b""
            assert not service.answers.is_answered(asked.question)  # a retry may store it
    finally:
        service.suggester.stop()


def token_question(key: bytes, token: str) -> str:
    return QuestionTokens(key).verify(token).question


def test_answers_are_learned_exactly_once_across_a_kill_9(tmp_path):
    """20 answers, one at a time, the service killed with SIGKILL after 8 of them: the
    restarted service continues the answers log where its checkpoint left it, and the model
    equals one that learned the stream and then each answer once, in the log's order."""
    n = 200
    stream_file = make_stream(tmp_path, n, seed=5)
    state = tmp_path / "state"
    log_path = state / ANSWERS_FILE
    first = start(tmp_path, stream_file, state, "first")
    first.wait_consumed(n)
    tokens = []
    for _ in range(8):
        (question,) = ask(first)
        assert answer(first, question["token"], oracle(question)).json()["status"] == "accepted"
        tokens.append(question["token"])
    child = learner_pid(first)
    first.kill()  # some answers learned, some in the log only, few if any checkpointed
    wait_until(lambda: gone(child), 10, "the learner process to die with the service")
    _, progress = read_checkpoint(checkpoint_path(state))
    assert progress.consumed < n + 8

    second = start(tmp_path, stream_file, state, "second")
    retried = answer(second, tokens[3], "first")  # the answer to a question asked before
    assert retried.json()["status"] == "duplicate"
    for _ in range(12):
        (question,) = ask(second)
        assert answer(second, question["token"], oracle(question)).json()["status"] == "accepted"
    model = second.wait_consumed(n + 20)
    time.sleep(1.5)  # any second copy of an answer would be consumed by now
    model = second.model()
    assert model["constraints_consumed"] == n + 20
    assert model["constraints_learned"] == n + 20 and model["dead_letters"] == {}
    assert answer(second, tokens[0], "second").json()["status"] == "duplicate"
    assert second.terminate() == 0

    lines = log_path.read_bytes().splitlines()
    assert len(lines) == 20
    messages = [json.loads(line) for line in lines]
    assert len({m["question"] for m in messages}) == 20
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.offsets == {0: n, 1: 20} and progress.consumed == n + 20
    assert list(progress.answered) == [m["question"] for m in messages]
    stream = ConstraintStream.load(stream_file)
    ids = np.array(
        [[int(m[role]["id"]) for role in ("anchor", "positive", "negative")] for m in messages]
    )
    reference = train_reference(stream)
    reference.learn_triplets(stream.X[ids[:, 0]], stream.X[ids[:, 1]], stream.X[ids[:, 2]])
    assert_same_model(learner, reference)


def test_answer_message_names_the_chosen_item_positive():
    asked = AskedQuestion("q", "1", "2", "3", snapshot=5, asked_at=0.0)
    first = json.loads(answer_message(asked, "first", "Zoë", at=1.0))
    second = json.loads(answer_message(asked, "second", "Zoë", at=1.0))
    assert (first["positive"], first["negative"]) == ({"id": "2"}, {"id": "3"})
    assert (second["positive"], second["negative"]) == ({"id": "3"}, {"id": "2"})
    assert first["annotator"] == "Zoë" and first["snapshot"] == 5
    assert b"\n" not in answer_message(asked, "first", "a\u2028b", at=1.0)


# ---------------------------------------------------------------------- Kafka
@pytest.mark.kafka
def test_answers_are_produced_to_the_input_topic_and_learned_once(kafka_bootstrap, tmp_path):
    n = 150
    stream_file = make_stream(tmp_path, n, seed=12)
    topic, state = unique("answers"), tmp_path / "state"
    assert produce(kafka_bootstrap, topic, stream_file, "--format", "json").wait(60) == 0
    service = kafka_service(kafka_bootstrap, topic, unique("g"), stream_file, state)
    service.wait_serving()
    service.wait_consumed(n)
    accepted = []
    for question in ask(service, n=5):
        response = answer(service, question["token"], oracle(question))
        body = response.json()
        assert body["status"] == "accepted" and body["appended_to"] == topic, body
        accepted.append((body["question"], question))
    again = answer(service, accepted[0][1]["token"], "second").json()
    assert again == {"status": "duplicate", "question": accepted[0][0], "appended_to": topic}
    service.wait_consumed(n + 5)
    records = read_topic(kafka_bootstrap, topic, n + 6, timeout_ms=3000)
    assert len(records) == n + 5  # acknowledged by the brokers before each 200, stored once
    answers = [json.loads(r.value) for r in records[n:]]
    assert [m["question"] for m in answers] == [q for q, _ in accepted]
    assert [r.key.decode() for r in records[n:]] == [q for q, _ in accepted]
    assert [m["anchor"]["id"] for m in answers] == [q["anchor"]["id"] for _, q in accepted]

    # the same answer on the topic a second time (a retry after a crash between the append and
    # the response): consumed, skipped, dead-lettered
    sink = KafkaSink(topic, kafka_bootstrap)
    try:
        sink.send(records[n].value, key=records[n].key)
        sink.flush()
    finally:
        # closed here: a producer left to the collector closes itself whenever it is collected,
        # in another test's time and maybe after the broker has gone
        sink.close()
    model = service.wait_consumed(n + 6)
    assert model["constraints_learned"] == n + 5
    assert model["dead_letters"] == {DUPLICATE_ANSWER: 1}
    assert service.terminate() == 0
    _, progress = read_checkpoint(checkpoint_path(state))
    assert list(progress.answered) == [q for q, _ in accepted]
