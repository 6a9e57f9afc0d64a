"""``oahu run`` on a cross-modal stream: it learns oahu's cross-modal model exactly once (through
crashes, over a file or Kafka) and serves retrieval, verification, classification, embeddings,
binary codes and questions across modalities.

The stream is generated here: objects of four classes seen in two views ("img", 12 features,
and "txt", 7) that share their class structure, so a model that learns anything ranks an
object's own class first from either side. Every learned model is compared with the one
``oahu replay --cross-modal`` would learn: the same model prepared on the same development items
and taught the same rows in order (:func:`reference`).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import schemathesis
from fastapi.testclient import TestClient
from schemathesis import GenerationMode
from service_support import (
    ServiceProcess,
    assert_same_state,
    crash_and_resume,
    start_service,
    wait_until,
)
from test_service_http_validation import TOKEN, fuzz
from test_service_kafka import create_topic, produce, service, unique
from test_service_poison_records import DiscardingLink, ListSource

from oahu.connectors.constraint import ROLES, Constraint
from oahu.connectors.dead_letter import DeadLetter, DeadLetterFile
from oahu.connectors.messages import encode_binary, encode_json, encode_stream
from oahu.experiments.cross_modal_replay import learn_row, prepared_model
from oahu.inference.cross_modal import CrossModalGallery
from oahu.learners.cross_modal.learner import CrossModalOAHU
from oahu.service.checkpoints import Progress, checkpoint_path, read_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.learning.consumer import ConsumerLoop
from oahu.service.metrics import LearningMetrics
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.modal_items import ModalItems, new_cross_modal_model
from oahu.service.serving.app import Service
from oahu.streams.cross_modal import CrossModalStream
from oahu.streams.cross_modal_protocol import build_cross_modal_stream
from oahu.streams.linked import LinkedObjects
from oahu.streams.views import TwoViews


def views(seed: int = 0, n: int = 240, classes: int = 4) -> TwoViews:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    img = rng.normal(size=(classes, 12))[y] + 0.7 * rng.normal(size=(n, 12))
    txt = rng.normal(size=(classes, 7))[y] + 0.7 * rng.normal(size=(n, 7))
    return TwoViews(("img", "txt"), (img, txt), y)


def stream_file(directory: Path, n: int, seed: int = 0) -> Path:
    path = directory / f"cross-modal-{n}-{seed}.npz"
    build_cross_modal_stream(views(seed), n, seed=seed, within_share=0.1).save(path)
    return path


def reference(path: Path, rows: int | None = None) -> CrossModalOAHU:
    """The model ``oahu replay --cross-modal`` learns from the first ``rows`` constraints."""
    stream = CrossModalStream.load(path)
    model = prepared_model(stream, seed=0)
    for i in range(len(stream) if rows is None else rows):
        learn_row(model, stream, i)
    return model


def test_kill_9_mid_stream_and_a_restart_learn_each_constraint_once(tmp_path: Path):
    n = 3000
    path = stream_file(tmp_path, n, seed=1)
    state = tmp_path / "state"
    args = ["--source", path.as_uri(), "--checkpoint-dir", str(state),
            "--checkpoint-every", "97", "--poll-records", "20"]  # fmt: skip
    model, progress = crash_and_resume(args, state, n, tmp_path)
    assert not progress.dead_letters
    assert isinstance(model, CrossModalOAHU) and model.constraints_seen == n
    assert_same_state(model.get_state(), reference(path).get_state())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """A service that learned a 600-constraint cross-modal stream, its HTTP client, and the
    model learned from the same stream by replay, with its galleries."""
    directory = tmp_path_factory.mktemp("served")
    path = stream_file(directory, 600, seed=2)
    service = start_service(path, directory / "state", 600)
    model = reference(path)
    stream = CrossModalStream.load(path)
    gallery = CrossModalGallery(model)
    for name, x in zip(stream.modalities, stream.X, strict=True):
        dev = stream.dev_idx
        gallery.add(name, [str(i) for i in dev], x[dev], stream.y[dev])
    with TestClient(service.app) as client:
        yield client, stream, model, gallery
    service.shutdown()


def post(client: TestClient, path: str, body: dict, status: int = 200) -> dict:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    return response.json()


def test_the_served_model_is_the_replayed_one(served):
    client, stream, model, _ = served
    status = client.get("/v1/model").json()
    assert status["learner"] == "oahu-cross-modal"
    assert status["modalities"] == {"img": 12, "txt": 7}
    assert status["constraints_consumed"] == 600 and status["dead_letters"] == {}
    n_dev = len(stream.dev_idx)
    assert status["items"]["modalities"] == {
        "img": {"store": 240, "gallery": n_dev},
        "txt": {"store": 240, "gallery": n_dev},
    }
    assert status["snapshot"]["gallery_items"] == 2 * n_dev
    assert status["diagnostics"]["code_bits"] == model.chosen_bits
    np.testing.assert_allclose(status["alpha"], model.alpha, atol=1e-9)


def test_retrieval_across_modalities_by_learned_and_hamming_distance(served):
    client, stream, model, gallery = served
    test = stream.test_idx[:20]
    for from_, to, m in (("img", "txt", 0), ("txt", "img", 1)):
        for hamming in (False, True):
            body = {"from": from_, "to": to, "k": 5, "hamming": hamming,
                    "items": [{"id": int(i)} for i in test]}  # fmt: skip
            out = post(client, "/v1/retrieve", body)
            assert out["ranking"] == ("hamming" if hamming else "learned")
            assert out["model"]["code_bits"] == model.chosen_bits
            expected = gallery.retrieve(stream.X[m][test], from_, to, k=5, hamming=hamming)
            got_ids = [[r["id"] for r in row] for row in out["results"]]
            got = np.array([[r["distance"] for r in row] for row in out["results"]])
            np.testing.assert_allclose(got, expected.distances, rtol=1e-5, atol=1e-5)
            if hamming:  # whole distances: the order within a tie is the index's
                assert all(len(row) == 5 for row in got_ids)
            else:
                assert got_ids == expected.ids.astype(str).tolist()
            labels = np.array([[r["label"] for r in row] for row in out["results"]])
            assert np.isin(labels, stream.y[stream.dev_idx]).all()
    # it learned: a test object's 5 nearest texts are mostly of its class (chance is 1/4)
    every = [{"id": int(i)} for i in stream.test_idx]
    out = post(client, "/v1/retrieve", {"from": "img", "to": "txt", "k": 5, "items": every})
    labels = np.array([[r["label"] for r in row] for row in out["results"]])
    assert (labels == stream.y[stream.test_idx][:, None]).mean() > 0.6


def test_items_inline_and_by_id_are_the_same_items(served):
    client, stream, _, _ = served
    i = int(stream.test_idx[0])
    by_id = post(client, "/v1/retrieve", {"from": "txt", "to": "img", "items": [{"id": i}]})
    x = stream.X[1][i].tolist()
    inline = post(client, "/v1/retrieve", {"from": "txt", "to": "img", "items": [{"x": x}]})
    assert by_id["results"] == inline["results"]


def test_verify_classify_embed_and_codes(served):
    client, stream, model, _ = served
    a, b = stream.test_idx[:10], stream.test_idx[10:20]
    pairs = [{"left": {"id": int(i)}, "right": {"id": int(j)}} for i, j in zip(a, b, strict=True)]
    out = post(client, "/v1/verify", {"from": "img", "to": "txt", "pairs": pairs})
    left, right = model.embed(stream.X[0][a], "img"), model.embed(stream.X[1][b], "txt")
    distance = ((left - right) ** 2).sum(1)
    np.testing.assert_allclose([r["distance"] for r in out["results"]], distance, rtol=1e-5)
    assert [r["similar"] for r in out["results"]] == (distance < 1.0).tolist()

    every = [{"id": int(i)} for i in stream.test_idx]
    out = post(client, "/v1/classify", {"from": "txt", "to": "img", "k": 7, "items": every})
    predicted = np.array([p["label"] for p in out["predictions"]])
    assert (predicted == stream.y[stream.test_idx]).mean() > 0.7
    assert all(abs(sum(p["scores"].values()) - 1) < 1e-9 for p in out["predictions"])

    out = post(client, "/v1/embed", {"modality": "txt", "items": [{"id": int(i)} for i in a]})
    points = model.embed(stream.X[1][a], "txt")
    np.testing.assert_allclose(out["embeddings"], points, rtol=1e-5, atol=1e-6)
    codes = model.binary_codes.encode(points, model.chosen_bits)
    assert out["codes"] == [row.tobytes().hex() for row in codes]
    assert out["code_bits"] == model.chosen_bits and len(out["codes"][0]) == model.chosen_bits // 4


def test_suggest_asks_cross_modal_pair_questions_about_gallery_items(served):
    client, stream, _, _ = served
    out = post(client, "/v1/suggest", {"batch": 6, "seed": 3})
    assert post(client, "/v1/suggest", {"batch": 6, "seed": 3})["suggestions"] == out["suggestions"]
    assert len(out["suggestions"]) == 6 and out["seed"] == 3
    dev = set(stream.dev_idx.astype(str).tolist())
    for q in out["suggestions"]:
        assert q["kind"] == "pair"
        assert {q["left"]["modality"], q["right"]["modality"]} == {"img", "txt"}
        assert q["left"]["id"] in dev and q["right"]["id"] in dev
    for q in post(client, "/v1/suggest", {"batch": 4, "seed": 1, "kinds": "triplets"})[
        "suggestions"
    ]:
        assert q["kind"] == "triplet" and set(q) == {"kind", "anchor", "first", "second"}
        other = q["first"]["modality"]
        assert q["second"]["modality"] == other != q["anchor"]["modality"]
        assert q["first"]["id"] != q["second"]["id"]
    kinds = {q["kind"] for q in post(client, "/v1/suggest", {"batch": 40, "kinds": "both"})[
        "suggestions"
    ]}  # fmt: skip
    assert kinds <= {"pair", "triplet"}
    # an answer is a version-2 pair message the learner reads
    q = out["suggestions"][0]
    message = Constraint("pair", ids=(q["left"]["id"], q["right"]["id"]), similar=True,
                         modalities=(q["left"]["modality"], q["right"]["modality"]))  # fmt: skip
    assert json.loads(encode_json(message))["left"] == q["left"]


@pytest.mark.parametrize(
    ("path", "body", "loc", "msg"),
    [
        ("/v1/retrieve", {"from": "snd", "to": "txt", "items": [{"id": 1}]}, ["body", "from"],
         "unknown modality 'snd'"),
        ("/v1/retrieve", {"from": "img", "to": "txt", "items": [{"x": [1.0, 2.0]}]},
         ["body", "items", 0, "x"], "modality 'img' has 12 features, got 2"),
        ("/v1/retrieve", {"from": "img", "to": "txt", "items": [{"id": 1}, {"id": "zz"}]},
         ["body", "items", 1, "id"], "unknown item id 'zz' in 'img'"),
        ("/v1/verify", {"from": "img", "to": "txt",
                        "pairs": [{"left": {"id": 1}, "right": {"x": [0.0] * 12}}]},
         ["body", "pairs", 0, "right", "x"], "modality 'txt' has 7 features, got 12"),
        ("/v1/embed", {"modality": "txt", "items": [{"id": 1, "x": [0.0] * 7}]},
         ["body", "items", 0], "give exactly one of 'id' and 'x'"),
        ("/v1/embed", {"modality": "img", "items": []}, ["body", "items"], "at least 1 item"),
        ("/v1/retrieve", {"from": "img", "items": [{"id": 1}]}, ["body", "to"], "Field required"),
    ],
)  # fmt: skip
def test_bad_queries_are_422_naming_the_field(served, path, body, loc, msg):
    client = served[0]
    detail = post(client, path, body, 422)["detail"]
    assert detail[0]["loc"] == loc and msg in detail[0]["msg"], detail


def test_settings_a_cross_modal_service_does_not_take_are_refused(tmp_path: Path):
    path = stream_file(tmp_path, 50)
    for setting, value in (("learner", "lego"), ("learners", 2), ("preset", "paper")):
        config = ServiceConfig(source=path.as_uri(), checkpoint_dir=str(tmp_path / setting),
                               **{setting: value})  # fmt: skip
        with pytest.raises(ValueError, match=f"^{setting}: .* is not taken with a cross-modal"):
            Service(config)


def run_cross_modal_loop(tmp: Path, values: list[bytes], items: ModalItems) -> tuple:
    """The real learn loop of a new cross-modal model over ``values``: the loop and letters."""
    config = ServiceConfig(checkpoint_dir=str(tmp), exit_at_end=True, checkpoint_every=4,
                           poll_records=5, poll_timeout=0.001)  # fmt: skip
    model = CrossModalOAHU(items.dims, seed=0)
    for name, gallery in items.galleries.items():
        model.prepare(name, gallery.snapshot()[1])
    letters_file = tmp / "letters.jsonl"
    loop = ConsumerLoop(
        config, model, ListSource(values), ModalCatalog(items, tmp), DeadLetterFile(letters_file),
        DiscardingLink(), LearningMetrics.of(model), Progress(),
    )  # fmt: skip
    loop.run(threading.Event())
    loop.dead_letters.close()
    lines = letters_file.read_text().splitlines() if letters_file.exists() else []
    return loop, [DeadLetter.from_json(json.loads(line)) for line in lines]


def test_constraints_it_cannot_learn_are_dead_lettered_and_the_others_learned_in_order(
    tmp_path: Path,
):
    path = stream_file(tmp_path, 40, seed=3)
    stream = CrossModalStream.load(path)
    items = ModalItems.from_stream(stream)
    img, txt = stream.X[0], stream.X[1]
    good = [
        Constraint("pair", ids=("3", "5"), similar=False, modalities=("img", "txt")),
        Constraint("triplet", ids=("7", "7", "8"), modalities=("txt", "img", "img")),
        Constraint("triplet", ids=("1", "2", "3"), modalities=("img", "img", "img")),
        # inline: every item of one message has one dimension, here the texts'
        Constraint("pair", x=np.stack([txt[4], txt[9]]), similar=True, modalities=("txt", "txt")),
    ]
    bad = {
        "unsupported_modality": Constraint("pair", ids=("3", "5"), similar=True),  # default
        "unsupported_modality: other": Constraint(
            "triplet", ids=("1", "2", "3"), modalities=("img", "snd", "txt")
        ),
        "unknown_item": Constraint(
            "pair", ids=("3", "999"), similar=True, modalities=("img", "txt")
        ),
        "bad_dimension": Constraint(
            "pair", x=np.stack([img[0], img[1]]), similar=True, modalities=("img", "txt")
        ),
        "unsupported_kind": Constraint(
            "quadruplet", ids=("1", "2", "3", "4"), modalities=("img", "txt", "img", "txt")
        ),
    }
    values, offsets = [], {}
    for i, c in enumerate(good):
        values.append((encode_binary if i % 2 else encode_json)(c))
        reason, c_bad = list(bad.items())[i]
        offsets[len(values)] = reason.split(":")[0]
        values.append(encode_json(c_bad))
    offsets[len(values)] = "unsupported_kind"
    values.append(encode_binary(bad["unsupported_kind"]))
    loop, letters = run_cross_modal_loop(tmp_path, values, items)
    assert {d.offset: d.reason for d in letters} == offsets
    details = {d.offset: d.detail for d in letters}
    assert details[3] == (
        "items in modalities anchor 'img', positive 'snd', negative 'txt': learner "
        "'oahu-cross-modal' learns modalities 'img', 'txt'"
    )
    assert "right: unknown item id '999' in modality 'txt'" in details[5]
    assert "right: items have dim 12, modality 'txt' has 7" in details[7]
    model = loop.learner
    assert model.constraints_seen == len(good) and loop.progress.consumed == len(values)
    expected = CrossModalOAHU(items.dims, seed=0)
    for name, gallery in items.galleries.items():
        expected.prepare(name, gallery.snapshot()[1])
    expected.learn_pair(img[3], txt[5], ("img", "txt"), False)
    expected.learn_triplet(txt[7], img[7], img[8], ("txt", "img", "img"))
    expected.learn_triplet(img[1], img[2], img[3], ("img", "img", "img"))
    expected.learn_pair(txt[4], txt[9], ("txt", "txt"), True)
    assert_same_state(model.get_state(), expected.get_state())


def test_a_file_of_messages_with_the_items_in_a_cross_modal_stream_file(tmp_path: Path):
    path = stream_file(tmp_path, 200, seed=4)
    messages = tmp_path / "messages.jsonl"
    messages.write_bytes(b"\n".join(encode_stream(path, "json")) + b"\n")
    first = json.loads(messages.read_text().splitlines()[0])
    assert first["v"] == 2 and first[ROLES[first["kind"]][0]]["modality"] in ("img", "txt")
    state = tmp_path / "state"
    service = ServiceProcess(
        ["--source", messages.as_uri(), "--items", str(path), "--checkpoint-dir", str(state),
         "--exit-at-end"], tmp_path / "service.log",
    )  # fmt: skip
    assert service.proc.wait(timeout=120) == 0, service.output()
    banner = service.output()
    assert "oahu run: oahu-cross-modal learning from" in banner
    assert "  console  " not in banner  # the console is not mounted on a cross-modal service
    model, progress = read_checkpoint(checkpoint_path(state))
    assert progress.consumed == 200 and not progress.dead_letters
    assert_same_state(model.get_state(), reference(path).get_state())


def test_inline_items_of_a_cross_modal_stream_are_refused_by_name(tmp_path: Path):
    path = stream_file(tmp_path, 10)
    with pytest.raises(ValueError, match=r"^inline: .* is a cross-modal stream"):
        encode_stream(path, inline=True)


@pytest.mark.kafka
def test_over_kafka_with_the_items_given_as_a_cross_modal_stream_file(kafka_bootstrap, tmp_path):
    n = 800
    path = stream_file(tmp_path, n, seed=5)
    topic, group = unique("cross-modal"), unique("g")
    create_topic(kafka_bootstrap, topic, 1)
    assert produce(kafka_bootstrap, topic, path).wait(60) == 0
    state = tmp_path / "state"
    proc = service(kafka_bootstrap, topic, group, path, state)
    proc.wait_consumed(n)
    found = httpx.post(
        proc.base + "/v1/retrieve",
        json={"from": "txt", "to": "img", "k": 3, "items": [{"id": 0}]},
        timeout=10,
    )
    assert found.status_code == 200 and len(found.json()["results"][0]) == 3
    assert proc.terminate() == 0
    model, progress = read_checkpoint(checkpoint_path(state))
    assert progress.offsets == {0: n} and progress.consumed == n
    assert_same_state(model.get_state(), reference(path).get_state())


def test_items_added_and_removed_through_the_api_by_modality(tmp_path: Path):
    path = stream_file(tmp_path, 300, seed=6)
    stream = CrossModalStream.load(path)
    state = tmp_path / "state"
    service = start_service(path, state, 300)
    try:
        with TestClient(service.app) as client:
            # two new texts, copies of object 3's and object 100's, labelled 7 and 8
            new = [{"id": "t-3", "x": stream.X[1][3].tolist(), "label": 7},
                   {"id": "t-100", "x": stream.X[1][100].tolist(), "label": 8}]  # fmt: skip
            out = post(client, "/v1/items", {"modality": "txt", "items": new})
            assert out == {"added": 2, "modality": "txt", "items_version": 1}
            assert service.learning.wait_items(1, 0)  # the learner applied it before the answer
            snap = wait_until(
                lambda: (
                    service.publisher.current.gallery.size("txt") == 122
                    and service.publisher.current
                ),
                30,
                "a snapshot with the new texts",
            )
            query = {"from": "txt", "to": "txt", "k": 1, "items": [{"id": "t-3"}]}
            (nearest,) = post(client, "/v1/retrieve", query)["results"]
            assert nearest[0]["id"] in ("3", "t-3") and nearest[0]["distance"] < 1e-6
            assert snap.gallery.size("img") == 120  # the other modality is untouched
            detail = post(client, "/v1/items", {"modality": "img", "items": new}, 422)["detail"]
            assert detail[0]["loc"] == ["body", "items", 0, "x"]
            assert detail[0]["msg"] == "modality 'img' has 12 features, got 7"
            drop = {"modality": "txt", "ids": ["t-3"]}
            gone = client.request("DELETE", "/v1/items", json=drop)
            assert gone.json() == {"removed": 1, "modality": "txt", "items_version": 2}
            missing = client.request("DELETE", "/v1/items", json={**drop, "modality": "img"})
            assert missing.status_code == 404
            status = client.get("/v1/model").json()["items"]
            assert status["version"] == 2
            assert status["modalities"]["txt"] == {"store": 241, "gallery": 121}
    finally:
        service.shutdown()
    # durable: a new service starts with them, and its learner resolves constraints naming them
    messages = tmp_path / "messages.jsonl"
    answers = [
        Constraint("pair", ids=("5", "t-100"), similar=False, modalities=("img", "txt")),
        Constraint("triplet", ids=("t-100", "100", "5"), modalities=("txt", "img", "img")),
        Constraint("pair", ids=("5", "t-3"), similar=True, modalities=("img", "txt")),  # removed
    ]
    messages.write_bytes(b"\n".join(encode_json(c) for c in answers) + b"\n")
    again_state = tmp_path / "again"
    again_state.mkdir()
    for name in ("items-api.txt.npz", "items-api.img.npz"):
        if (state / name).exists():  # the API's changes, as the first service left them
            (again_state / name).write_bytes((state / name).read_bytes())
    again = ServiceProcess(
        ["--source", messages.as_uri(), "--items", str(path), "--checkpoint-dir",
         str(again_state), "--exit-at-end"], tmp_path / "again.log",
    )  # fmt: skip
    assert again.proc.wait(timeout=120) == 0, again.output()
    model, progress = read_checkpoint(checkpoint_path(again_state))
    assert progress.consumed == 3 and progress.dead_letters == {"unknown_item": 1}
    assert progress.items_version == 2
    # a new model fits its preprocessing on the galleries as they stand, the new text included
    galleries = ModalCatalog(ModalItems.from_stream(stream), again_state).items
    expected = new_cross_modal_model(galleries)
    img, txt = stream.X
    expected.learn_pair(img[5], txt[100], ("img", "txt"), False)
    expected.learn_triplet(txt[100], img[100], img[5], ("txt", "img", "img"))
    assert_same_state(model.get_state(), expected.get_state())


def test_features_the_model_cannot_embed_are_422_naming_the_item(served):
    client, stream, _, _ = served
    big = stream.X[0][0].copy()
    big[-2:] = 2.7e38, -2.9e38  # finite float32 that overflow the model's arithmetic
    items = [{"id": 1}, {"x": big.tolist()}]
    for path, body in (
        ("/v1/retrieve", {"from": "img", "to": "txt", "items": items}),
        ("/v1/classify", {"from": "img", "to": "txt", "items": items}),
        ("/v1/embed", {"modality": "img", "items": items}),
        ("/v1/verify", {"from": "txt", "to": "img",
                        "pairs": [{"left": {"id": 1}, "right": it} for it in items]}),
    ):  # fmt: skip
        [error] = post(client, path, body, 422)["detail"]
        where = ["body", "pairs", 1, "right"] if path == "/v1/verify" else ["body", "items", 1]
        assert error["loc"] == where and "not finite" in error["msg"], path


def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(tmp_path: Path):
    """Requests generated from the cross-modal app's own OpenAPI schema, valid and invalid, with
    and without the token: never 5xx, every answer as the schema documents it, every request
    the schema calls invalid refused (tests/test_service_http_validation.py fuzzes the
    single-modality app the same way)."""
    path = stream_file(tmp_path, 200, seed=7)
    service = start_service(path, tmp_path / "state", 200, auth_token=TOKEN, max_batch_items=8)
    try:
        with TestClient(service.app) as client:
            schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                statuses = fuzz(schema, mode)
                assert max(statuses) < 500 and 422 in statuses, (mode, statuses)
                if mode == GenerationMode.POSITIVE:
                    assert 200 in statuses
    finally:
        service.shutdown()


def test_linked_objects_without_labels_are_learned_and_served(tmp_path: Path):
    """Drugs and targets: each modality its own objects (60 and 40), links within 4 hidden
    groups, no labels. The service learns what replay learns, and answers by modality."""
    rng = np.random.default_rng(8)
    group_a, group_b = np.arange(60) % 4, np.arange(40) % 4
    drugs = rng.normal(size=(4, 9))[group_a] + 0.5 * rng.normal(size=(60, 9))
    targets = rng.normal(size=(4, 5))[group_b] + 0.5 * rng.normal(size=(40, 5))
    links = np.argwhere(group_a[:, None] == group_b[None, :])
    links = links[rng.random(len(links)) < 0.3]
    objects = LinkedObjects(("drug", "target"), (drugs, targets), links)
    path = tmp_path / "linked.npz"
    build_cross_modal_stream(objects, 400, seed=0).save(path)
    stream = CrossModalStream.load(path)
    service = start_service(path, tmp_path / "state", 400)
    try:
        served = service.publisher.current.learner.get_state(queries_only=True)
        assert_same_state(served, reference(path).get_state(queries_only=True))
        with TestClient(service.app) as client:
            status = client.get("/v1/model").json()["items"]["modalities"]
            assert status["drug"]["store"] == 60 and status["target"]["store"] == 40
            dev_b = set(stream.dev_objects(1).astype(str).tolist())
            query = {"from": "drug", "to": "target", "k": 3, "items": [{"id": 0}, {"id": 59}]}
            for row in post(client, "/v1/retrieve", query)["results"]:
                assert len(row) == 3 and all(r["id"] in dev_b and r["label"] is None for r in row)
            out = post(client, "/v1/classify", query)
            assert out["predictions"] == [{"label": None, "scores": {}}] * 2  # nothing to vote
            out = post(client, "/v1/suggest", {"batch": 3, "seed": 0})
            assert [{q["left"]["modality"], q["right"]["modality"]} for q in out["suggestions"]] \
                == [{"drug", "target"}] * 3  # fmt: skip
    finally:
        service.shutdown()


def test_a_snapshot_is_built_a_slice_at_a_time_with_rests_between(tmp_path: Path, monkeypatch):
    from oahu.service.serving import cross_modal as serving

    path = stream_file(tmp_path, 30, seed=9)
    catalog = ModalCatalog(ModalItems.from_stream(CrossModalStream.load(path)), tmp_path)
    model = new_cross_modal_model(catalog.items)
    whole = serving.build_cross_modal_snapshot(model, catalog, version=1)
    monkeypatch.setattr(serving, "GALLERY_SLICE", 7)
    rests: list[float] = []
    sliced = serving.build_cross_modal_snapshot(model, catalog, 2, rest=rests.append)
    assert len(rests) == 2 * -(-120 // 7)  # each modality's 120 gallery items, 7 at a time
    assert sliced.gallery_ids.tolist() == whole.gallery_ids.tolist()
    assert sliced.gallery_version == whole.gallery_version == catalog.gallery_version
    queries = model.embed(CrossModalStream.load(path).X[0][:5], "img")
    for hamming in (False, True):
        a, b = (s.gallery.search(queries, "txt", 10, hamming) for s in (whole, sliced))
        np.testing.assert_allclose(a.distances, b.distances, rtol=1e-5, atol=1e-6)


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_a_replica_answers_as_the_cross_modal_learner_service_does(kafka_bootstrap, tmp_path):
    n = 1000
    path = stream_file(tmp_path, n, seed=10)
    topic = f"kafka://{kafka_bootstrap}/{unique('cross-modal-model')}"
    run = ["--source", path.as_uri(), "--checkpoint-dir", str(tmp_path / "state"),
           "--publish-model", topic, "--reindex-interval", "0.2"]  # fmt: skip
    learner = ServiceProcess(run, tmp_path / "learner.log")
    learner.wait_consumed(n)
    replica = ServiceProcess(["--model-topic", topic, "--items", str(path)],
                             tmp_path / "replica.log", command="serve")  # fmt: skip
    queries = {
        "/v1/retrieve": {"from": "img", "to": "txt", "k": 5,
                         "items": [{"id": i} for i in range(0, 240, 24)]},
        "/v1/verify": {"from": "txt", "to": "img",
                       "pairs": [{"left": {"id": i}, "right": {"id": i + 1}} for i in range(5)]},
        "/v1/embed": {"modality": "txt", "items": [{"id": 3}]},
    }  # fmt: skip

    def answer(service: ServiceProcess, endpoint: str) -> dict | None:
        try:
            response = httpx.post(service.base + endpoint, json=queries[endpoint], timeout=10)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def same_snapshot() -> bool:
        mine, theirs = answer(learner, "/v1/retrieve"), answer(replica, "/v1/retrieve")
        return theirs is not None and mine is not None and theirs["model"] == mine["model"]

    wait_until(same_snapshot, 90, "the replica to serve the learner's snapshot")
    assert replica.get("/readyz").status_code == 200
    for endpoint in queries:  # same snapshot, same answers
        assert answer(replica, endpoint) == answer(learner, endpoint), endpoint
    assert answer(learner, "/v1/retrieve")["model"]["updates"] == n
    # a text added to the learner service reaches the replica; the replica takes no writes
    x = CrossModalStream.load(path).X[1][7].tolist()
    new = {"modality": "txt", "items": [{"id": "t-new", "x": x, "label": 2}]}
    assert httpx.post(learner.base + "/v1/items", json=new, timeout=30).status_code == 200
    probe = {"from": "txt", "to": "txt", "k": 2, "items": [{"id": "t-new"}]}

    def has_new_item(service: ServiceProcess) -> bool:
        found = httpx.post(service.base + "/v1/retrieve", json=probe, timeout=10)
        return found.status_code == 200 and "t-new" in {r["id"] for r in found.json()["results"][0]}

    wait_until(lambda: has_new_item(learner), 30, "the learner's new item")
    wait_until(lambda: has_new_item(replica), 30, "the replica's copy of the new item")
    refused = httpx.post(replica.base + "/v1/items", json=new, timeout=30)
    assert refused.status_code == 403 and "replica" in refused.json()["detail"]
    assert learner.terminate() == 0 and replica.terminate() == 0
