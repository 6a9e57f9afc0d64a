"""What the HTTP API accepts, against a real in-process service: ids, numbers, labels, tokens and
sizes are either accepted (and then behave) or refused with 401/413/422 naming the field, never
answered 5xx; a failed snapshot build never leaves the service unready for good; and the OpenAPI
schema describes what the server does (schemathesis fuzzes the app against it)."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import numpy as np
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from service_support import make_stream, wait_until
from service_support import start_service as start_file_service

from oahu.registry import make_learner
from oahu.service.catalog import OVERLAY_FILE, Catalog
from oahu.service.item_store import ItemStore
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving import snapshot as snapshot_module
from oahu.service.serving.app import Service
from oahu.service.serving.inputs import FLOAT32_MAX, INT64_MAX, INT64_MIN, MAX_ID_LENGTH
from oahu.service.serving.snapshot import SnapshotPublisher, build_snapshot

N = 200
D = 64  # digits
TOKEN = "s3cret-é"  # not ASCII: clients send it as UTF-8
AUTH = {"Authorization": b"Bearer " + TOKEN.encode()}
MAX_ITEMS = 16
MAX_BYTES = 200_000
FUZZ = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def start_service(stream_file: Path, state: Path) -> Service:
    return start_file_service(
        stream_file,
        state,
        N,
        auth_token=TOKEN,
        max_request_bytes=MAX_BYTES,
        max_batch_items=MAX_ITEMS,
    )


@pytest.fixture(scope="module")
def stream_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_stream(tmp_path_factory.mktemp("stream"), N, seed=5)


@pytest.fixture(scope="module")
def running(stream_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    service = start_service(stream_file, tmp_path_factory.mktemp("state"))
    with TestClient(service.app) as client:
        yield service, client
    service.shutdown()


@pytest.fixture(scope="module")
def client(running: Any) -> TestClient:
    return running[1]


def x(value: float = 0.5) -> list[float]:
    return [value] * D


def errors(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 422, response.text
    return response.json()["detail"]


def locs(response: Any) -> list[list[Any]]:
    return [e["loc"] for e in errors(response)]


# ---------------------------------------------------------------------- tokens
def test_a_non_ascii_token_is_compared_as_bytes(client: TestClient) -> None:
    body = {"items": [{"id": "tok", "x": x(), "label": 1}]}
    assert client.post("/v1/items", json=body, headers=AUTH).status_code == 200
    for token in ("s3cret-è", "s3cret-", "\xff", "", TOKEN.upper()):
        headers = {"Authorization": b"Bearer " + token.encode()}
        response = client.post("/v1/items", json=body, headers=headers)
        assert response.status_code == 401
        assert response.json() == {"detail": "a valid bearer token is required"}
        assert response.headers["www-authenticate"] == "Bearer"


@FUZZ
@given(token=st.binary(max_size=64).filter(lambda b: not {13, 10} & set(b) and b != TOKEN.encode()))
def test_arbitrary_tokens_get_401(client: TestClient, token: bytes) -> None:
    for header in (b"Bearer " + token, token):
        response = client.request(
            "DELETE", "/v1/items", json={"ids": ["nothing"]}, headers={"Authorization": header}
        )
        assert response.status_code == 401


# ---------------------------------------------------------------------- ids
BAD_IDS = [
    (False, "not a boolean"),
    (True, "not a boolean"),
    ("", "must not be empty"),
    ("x" * (MAX_ID_LENGTH + 1), f"at most {MAX_ID_LENGTH} characters, this one 257"),
    (2**63, "must fit in int64"),
    (INT64_MIN - 1, "must fit in int64"),
    (None, "not null"),
    (1.5, "not a number with a fraction"),
    (1e19, "must fit in int64"),  # a whole number, as 2.0 is, but beyond int64
    ([1], "not an array"),
    ("a\x00", "control characters"),
    ("tab\there", "control characters"),
]


@pytest.mark.parametrize(("bad", "msg"), BAD_IDS)
def test_bad_ids_get_422_naming_the_field_everywhere(client: TestClient, bad: Any, msg: str):
    for method, path, body, loc in [
        ("DELETE", "/v1/items", {"ids": ["0", bad]}, ["body", "ids", 1]),
        ("POST", "/v1/items", {"items": [{"id": bad, "x": x()}]}, ["body", "items", 0, "id"]),
        ("POST", "/v1/embed", {"items": [{"id": bad}]}, ["body", "items", 0, "id"]),
        ("POST", "/v1/classify", {"items": [{"x": x()}, {"id": bad}]}, ["body", "items", 1, "id"]),
        ("POST", "/v1/retrieve", {"items": [{"id": bad}], "k": 2}, ["body", "items", 0, "id"]),
        (
            "POST",
            "/v1/verify",
            {"pairs": [{"left": {"id": "0"}, "right": {"id": bad}}]},
            ["body", "pairs", 0, "right", "id"],
        ),
    ]:  # fmt: skip
        response = client.request(method, path, json=body, headers=AUTH)
        [error] = errors(response)
        assert error["loc"] == loc, (path, error)
        assert msg in error["msg"]
        assert error["type"] == "item_id"


def test_a_boolean_id_deletes_nothing(running: Any) -> None:
    service, client = running
    assert "0" in service.catalog.items
    version = service.catalog.version
    response = client.request("DELETE", "/v1/items", json={"ids": [False]}, headers=AUTH)
    assert response.status_code == 422
    assert "0" in service.catalog.items and service.catalog.version == version


def test_int64_ids_and_their_strings_are_one_item(client: TestClient) -> None:
    for item_id in (INT64_MAX, INT64_MIN):
        body = {"items": [{"id": item_id, "x": x(0.25), "label": 3}]}
        assert client.post("/v1/items", json=body, headers=AUTH).status_code == 200
        found = client.post("/v1/embed", json={"items": [{"id": str(item_id)}]})
        assert found.status_code == 200
        gone = client.request("DELETE", "/v1/items", json={"ids": [str(item_id)]}, headers=AUTH)
        assert gone.json()["removed"] == 1


def test_long_ids_and_large_requests_are_bounded(running: Any) -> None:
    service, client = running
    longest = "é" * MAX_ID_LENGTH
    body = {"items": [{"id": longest, "x": x(), "label": 2}]}
    assert client.post("/v1/items", json=body, headers=AUTH).status_code == 200
    assert longest in service.catalog.gallery
    huge = {"items": [{"id": "x" * 10_000_000, "x": x(), "label": 2}]}  # the tester's 10 MB id
    response = client.post("/v1/items", json=huge, headers=AUTH)
    assert response.status_code == 413
    assert response.json() == {"detail": f"request body larger than {MAX_BYTES} bytes"}
    too_many = {"items": [{"id": str(i), "x": x(), "label": 1} for i in range(MAX_ITEMS + 1)]}
    response = client.post("/v1/items", json=too_many, headers=AUTH)
    assert locs(response) == [["body", "items"]]
    assert f"at most {MAX_ITEMS} items" in errors(response)[0]["msg"]
    pair = {"left": {"id": 1}, "right": {"x": x()}}
    for path, body, loc in [
        ("/v1/classify", {"items": [{"x": x()}] * (MAX_ITEMS + 1)}, ["body", "items"]),
        ("/v1/verify", {"pairs": [pair] * (MAX_ITEMS + 1)}, ["body", "pairs"]),
        ("/v1/items", {"ids": ["a"] * (MAX_ITEMS + 1)}, ["body", "ids"]),
    ]:  # fmt: skip
        method = "DELETE" if "ids" in body else "POST"
        assert locs(client.request(method, path, json=body, headers=AUTH)) == [loc]
    short = client.post("/v1/embed", json={"items": [{"x": [0.5] * (D - 1)}]})
    assert locs(short) == [["body", "items", 0, "x"]]
    assert (
        errors(short)[0]["msg"] == f"List should have at least {D} items after validation, not 63"
    )
    wait_until(lambda: not service.publisher._stale_gallery(), 30, "the gallery re-indexed")
    assert service.publisher.error is None


def whole(value: Any) -> Any:
    """JSON's 2.0 is the integer 2."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def valid_id(value: Any) -> bool:
    value = whole(value)
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_ID_LENGTH
        and not any(ord(c) < 32 or ord(c) == 127 for c in value)
    )


ANY_ID = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=5),
)


@FUZZ
@given(item_id=ANY_ID)
def test_arbitrary_ids_are_stored_and_found_or_refused(running: Any, item_id: Any) -> None:
    service, client = running
    if valid_id(item_id):  # the stream's items (ids "0" to "1796") stay for the other tests
        assume(
            str(whole(item_id)) not in service.catalog.items
            and str(whole(item_id)) not in service.catalog.gallery
        )
    body = {"items": [{"id": item_id, "x": x(0.75), "label": 4}], "gallery": False}
    added = client.post("/v1/items", json=body, headers=AUTH)
    if not valid_id(item_id):
        assert locs(added) == [["body", "items", 0, "id"]]
        query = client.post("/v1/embed", json={"items": [{"id": item_id}]})
        assert locs(query) == [["body", "items", 0, "id"]]
        return
    assert added.status_code == 200, added.text
    key = str(whole(item_id))
    assert key in service.catalog.items
    np.testing.assert_array_equal(service.catalog.items.get([key])[0], np.float32(0.75))
    embed = client.post("/v1/embed", json={"items": [{"id": item_id}, {"x": x(0.75)}]})
    assert embed.status_code == 200
    by_id, inline = embed.json()["embeddings"]
    assert by_id == inline
    removed = client.request("DELETE", "/v1/items", json={"ids": [item_id]}, headers=AUTH)
    assert removed.status_code == 200 and removed.json()["removed"] == 1
    assert key not in service.catalog.items
    again = client.request("DELETE", "/v1/items", json={"ids": [item_id]}, headers=AUTH)
    assert again.status_code == 404


# ---------------------------------------------------------------------- numbers and labels
@pytest.mark.parametrize(
    ("label", "msg"),
    [
        (2**63, "less than 9223372036854775808"),
        (INT64_MIN - 1, "greater than -9223372036854775808"),
        (INT64_MIN, "greater than -9223372036854775808"),  # it stores "no label"
        (1e30, "less than 9223372036854775808"),  # whole, so an integer, but too large
        (2.5, "valid integer"),
        (True, "valid integer"),
        ("3", "valid integer"),
    ],
)
def test_labels_are_int64(client: TestClient, label: Any, msg: str) -> None:
    body = {"items": [{"id": "lab", "x": x(), "label": label}]}
    [error] = errors(client.post("/v1/items", json=body, headers=AUTH))
    assert error["loc"] == ["body", "items", 0, "label"] and msg in error["msg"]
    if isinstance(label, float) and label.is_integer():
        label = int(label)  # JSON's 1e30 is the integer 10^30
    if isinstance(label, int) and not INT64_MIN <= label <= INT64_MAX:
        assert error["input"] == f"an integer of {label.bit_length()} bits"
    else:
        assert error["input"] == label


def test_extreme_labels_are_stored_and_returned(running: Any) -> None:
    service, client = running
    for label in (INT64_MAX, INT64_MIN + 1):
        body = {"items": [{"id": f"label-{label}", "x": x(0.1), "label": label}]}
        assert client.post("/v1/items", json=body, headers=AUTH).status_code == 200
        ids, _, labels = service.catalog.gallery.snapshot()
        assert labels[ids.index(f"label-{label}")] == label


PAIR = '{"pairs": [{"left": {"id": "0"}, "right": {"id": "1"}}], '


@pytest.mark.parametrize(
    ("raw", "loc", "shown"),
    [
        (PAIR + '"threshold": NaN}', ["body", "threshold"], "nan"),
        (PAIR + '"threshold": Infinity}', ["body", "threshold"], "inf"),
        (PAIR + '"threshold": 1e999}', ["body", "threshold"], "inf"),
        (PAIR + '"threshold": "0.5"}', ["body", "threshold"], "0.5"),
        (PAIR + '"threshold": true}', ["body", "threshold"], True),
        ('{"items": [{"x": [' + "0," * 63 + '-Infinity]}]}', ["body", "items", 0, "x", 63], "-inf"),
        ('{"items": [{"x": [1e39' + ",0" * 63 + "]}]}", ["body", "items", 0, "x", 0], 1e39),
        ('{"items": [{"x": [false' + ",0" * 63 + "]}]}", ["body", "items", 0, "x", 0], False),
        ('{"items": [{"x": [0' + ",0" * 63 + "]}], \"k\": true}", ["body", "k"], True),
        ('{"items": [{"x": [0' + ",0" * 63 + "]}], \"k\": 2.5}", ["body", "k"], 2.5),
    ],
)  # fmt: skip
def test_numbers_are_finite_and_strict(client: TestClient, raw: str, loc: list, shown: Any):
    path = "/v1/verify" if "pairs" in raw else "/v1/classify"
    response = client.post(path, content=raw, headers={"content-type": "application/json"})
    [error] = errors(response)
    assert error["loc"] == loc and error["input"] == shown


def test_a_validation_error_on_a_huge_integer_or_string_is_answered(client: TestClient) -> None:
    digits = "9" * 4000  # within Python's int-to-str limit, far outside int64
    raw = '{"items": [{"id": "h", "x": [0' + ",0" * 63 + '], "label": ' + digits + "}]}"
    response = client.post(
        "/v1/items", content=raw, headers={**AUTH, "content-type": "application/json"}
    )
    assert errors(response)[0]["input"] == "an integer of 13288 bits"
    over = "9" * 5000  # beyond it: pydantic-core's JSON parser refuses the number
    raw = raw.replace(digits, over)
    response = client.post(
        "/v1/items", content=raw, headers={**AUTH, "content-type": "application/json"}
    )
    assert errors(response)[0]["type"] == "json_invalid"
    long = client.post("/v1/items", json={"items": [{"id": "y" * 100_000, "x": x()}]}, headers=AUTH)
    assert len(errors(long)[0]["input"]) == 81  # cut to 80 characters and an ellipsis


@FUZZ
@given(
    threshold=st.one_of(st.floats(), st.integers(-(2**70), 2**70), st.booleans()),
    feature=st.one_of(st.floats(), st.integers(-(2**70), 2**70)),
)
def test_arbitrary_numbers_are_answered_or_refused(client: TestClient, threshold, feature) -> None:
    body = json.dumps(
        {
            "pairs": [{"left": {"x": x()}, "right": {"x": [feature, *x()[1:]]}}],
            "threshold": threshold,
        }
    )  # json.dumps writes NaN and Infinity, which the server's parser reads
    response = client.post("/v1/verify", content=body, headers={"content-type": "application/json"})
    threshold_ok = not isinstance(threshold, bool) and math.isfinite(threshold)
    feature_ok = math.isfinite(feature) and abs(feature) <= FLOAT32_MAX
    if threshold_ok and feature_ok:
        assert response.status_code == 200, response.text
        [result] = response.json()["results"]
        assert result["similar"] == (result["vote"] >= 0.5)  # Eq. 26's majority of depths
        if threshold <= 0:  # a depth votes similar when D/2 < T, and D >= 0
            assert result["vote"] == 0.0
        if threshold > 1:  # unit embeddings: D/2 <= 1
            assert result["vote"] == pytest.approx(1.0)
        return
    expected = []
    if not feature_ok:
        expected.append(["body", "pairs", 0, "right", "x", 0])
    if not threshold_ok:
        expected.append(["body", "threshold"])
    assert sorted(locs(response)) == sorted(expected)


def test_unknown_ids_are_named_where_they_are(client: TestClient) -> None:
    body = {"items": [{"id": "somebody", "x": x(), "label": 1}]}
    assert client.post("/v1/items", json=body, headers=AUTH).status_code == 200
    pairs = {"pairs": [{"left": {"id": "somebody"}, "right": {"id": "somebody"}}] * 2}
    pairs["pairs"][1] = {"left": {"id": "somebody"}, "right": {"id": "nobody"}}
    [error] = errors(client.post("/v1/verify", json=pairs))
    assert error["loc"] == ["body", "pairs", 1, "right", "id"]
    assert error["msg"] == "unknown item id 'nobody'"


def test_features_too_large_for_the_model_get_422_not_500(client: TestClient) -> None:
    """Found by schemathesis: finite float32 features near 3e38 overflow the model's arithmetic,
    and the answer (NaN) is not JSON."""
    big = x(0.0)  # what it found, rounded
    big[-2:] = 2.7108289254122374e38, -2.9722555959888726e38
    items = {"items": [{"x": x()}, {"x": big}]}
    for path in ("/v1/embed", "/v1/classify", "/v1/retrieve"):
        body = items if path == "/v1/embed" else {**items, "k": 257}
        [error] = errors(client.post(path, json=body))
        assert error["loc"] == ["body", "items", 1], path
        assert "not finite" in error["msg"]
    pairs = {
        "pairs": [
            {"left": {"x": x()}, "right": {"x": x()}},
            {"left": {"x": big}, "right": {"x": x()}},
        ]
    }
    [error] = errors(client.post("/v1/verify", json=pairs))
    assert error["loc"] == ["body", "pairs", 1]


# ---------------------------------------------------------------------- snapshot builds
def small_catalog(tmp_path: Path, ids: list[str]) -> Catalog:
    gallery = ItemStore(dim=2)
    gallery.add(ids, np.eye(2)[np.arange(len(ids)) % 2], y=np.arange(len(ids)) % 2)
    return Catalog(ItemStore(dim=2), gallery, tmp_path / "overlay.npz")


def test_a_gallery_with_a_very_long_id_still_builds(tmp_path: Path) -> None:
    """An id of 10 MB (what an earlier version accepted) made every build allocate 40 MB per
    gallery item, as a fixed-width str array; ids are an object array now."""
    ids = [str(i) for i in range(1000)] + ["x" * 10_000_000]
    from oahu.persistence import learner_to_bytes

    snap = build_snapshot(
        learner_to_bytes(make_learner("euclidean", 2)), small_catalog(tmp_path, ids), 1
    )
    assert snap.gallery_ids.dtype == object and snap.gallery_ids.tolist() == ids
    assert snap.index.n_items == 1001


def test_a_restart_with_a_huge_id_in_the_overlay_becomes_ready(stream_file, tmp_path) -> None:
    """The tester's case: an earlier version stored an item with a 10 MB id through the API;
    after a restart the service never became ready. It does now, and serves that item."""
    huge = "x" * 10_000_000
    overlay = Catalog(ItemStore(dim=D), ItemStore(dim=D), tmp_path / OVERLAY_FILE)
    overlay.add([huge], [x(0.9)], [3], gallery=True)
    service = start_service(stream_file, tmp_path)
    try:
        assert huge in service.catalog.gallery and service.publisher.error is None
        with TestClient(service.app) as client:
            assert client.get("/readyz").status_code == 200
            hits = client.post("/v1/retrieve", json={"items": [{"x": x(0.9)}], "k": 1})
            assert hits.json()["results"][0][0]["id"] == huge
    finally:
        service.shutdown()


def test_a_failed_build_is_retried_until_it_succeeds(tmp_path: Path, monkeypatch, caplog) -> None:
    from oahu.persistence import learner_to_bytes

    monkeypatch.setattr(snapshot_module, "RETRY_FIRST_SECONDS", 0.05)
    real, calls = snapshot_module.build_snapshot, []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= 3:
            raise MemoryError(f"attempt {len(calls)}")
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot_module, "build_snapshot", flaky)
    publisher = SnapshotPublisher(small_catalog(tmp_path, ["a", "b"]), ServiceMetrics())
    publisher.start()
    try:
        publisher.submit(learner_to_bytes(make_learner("euclidean", 2)))  # submitted once only
        wait_until(lambda: publisher.failures == 3, 10, "three failed builds")
        assert publisher.current is None and publisher.error == "MemoryError: attempt 3"
        assert publisher.wait_for(1, timeout=10)
        assert publisher.error is None and publisher.failures == 0 and len(calls) == 4
    finally:
        publisher.stop()
    failed = [r for r in caplog.records if "snapshot build failed" in r.getMessage()]
    assert "still serving no snapshot yet (not ready); retrying in 0 s" in failed[0].getMessage()
    assert failed[0].exc_info is not None


def test_a_failed_build_keeps_serving_and_says_why(running: Any, monkeypatch) -> None:
    service, client = running
    monkeypatch.setattr(snapshot_module, "RETRY_FIRST_SECONDS", 0.3)
    real, failing = snapshot_module.build_snapshot, threading.Event()
    failing.set()

    def broken(*args: Any, **kwargs: Any) -> Any:
        if failing.is_set():
            raise MemoryError("no room for the gallery")
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot_module, "build_snapshot", broken)
    before = service.publisher.current.version
    body = {"items": [{"id": "after-failure", "x": x(0.3), "label": 5}]}
    assert client.post("/v1/items", json=body, headers=AUTH).status_code == 200
    wait_until(lambda: service.publisher.error, 10, "the failed build")
    ready = client.get("/readyz")
    assert ready.status_code == 200  # the previous snapshot still answers
    assert ready.json()["snapshot_error"] == "MemoryError: no room for the gallery"
    assert (
        client.get("/v1/model").json()["snapshot_error"] == "MemoryError: no room for the gallery"
    )
    assert (
        client.post("/v1/classify", json={"items": [{"x": x()}]}).json()["model"]["snapshot"]
        == before
    )
    failing.clear()
    wait_until(lambda: service.publisher.error is None, 10, "a successful retry")
    assert client.get("/readyz").json()["snapshot_error"] is None
    assert client.get("/v1/model").json()["snapshot_error"] is None
    hits = client.post("/v1/retrieve", json={"items": [{"id": "after-failure"}], "k": 1}).json()
    assert hits["results"][0][0]["id"] == "after-failure"


# ---------------------------------------------------------------------- the OpenAPI schema
def test_the_schema_states_the_limits_and_the_answers(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    paths, components = schema["paths"], schema["components"]["schemas"]
    body_errors = {"413", "415", "422"}  # too large, not JSON, invalid
    assert set(paths["/v1/items"]["post"]["responses"]) == {"200", "401", "403", *body_errors}
    deletes = paths["/v1/items"]["delete"]["responses"]
    assert set(deletes) == {"200", "401", "403", "404", *body_errors}
    for path in ("/v1/embed", "/v1/classify", "/v1/retrieve", "/v1/verify"):
        assert set(paths[path]["post"]["responses"]) == {"200", "413", "415", "422", "503"}
    assert paths["/v1/items"]["post"]["security"] == [{"HTTPBearer": []}]
    ref = components["ItemRef"]
    assert ref["oneOf"] == [{"required": ["id"]}, {"required": ["x"]}]
    assert ref["additionalProperties"] is False
    assert ref["properties"]["x"]["minItems"] == ref["properties"]["x"]["maxItems"] == D
    ids = ref["properties"]["id"]["anyOf"]
    assert ids[0]["maxLength"] == MAX_ID_LENGTH
    assert components["AddItems"]["properties"]["items"]["maxItems"] == MAX_ITEMS
    assert ids[1] == {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX}
    label = components["NewItem"]["properties"]["label"]["anyOf"][0]
    assert label == {"type": "integer", "minimum": INT64_MIN + 1, "maximum": INT64_MAX}
    seed = components["SuggestQuery"]["properties"]["seed"]["anyOf"][0]
    assert seed == {"type": "integer", "minimum": 0, "maximum": INT64_MAX}
    k = components["NeighbourQuery"]["properties"]["k"]["anyOf"][0]
    assert k == {"type": "integer", "minimum": 1, "maximum": 1000}
    # every bound of an integer is exact: an int, never a float that rounds 2^63 - 1 to 2^63
    text = client.get("/openapi.json").text
    assert "e+18" not in text and "9223372036854775807" in text


# ---------------------------------------------------------------------- schema and server agree
def schema_accepts(client: TestClient, component: str, body: Any) -> bool:
    """Whether ``body`` is valid by the app's own OpenAPI schema of ``component``."""
    components = client.get("/openapi.json").json()["components"]
    schema = {"$ref": f"#/components/schemas/{component}", "components": components}
    return jsonschema_rs.Draft202012Validator(schema).is_valid(body)


def new_item(item_id: Any = "agree", label: Any = 1) -> dict[str, Any]:
    return {"id": item_id, "x": x(0.3), "label": label}


@pytest.mark.parametrize(
    ("item", "valid"),
    [
        (new_item(INT64_MAX), True),
        (new_item(INT64_MAX + 1), False),
        (new_item(INT64_MIN), True),
        (new_item(INT64_MIN - 1), False),
        (new_item(label=INT64_MAX), True),
        (new_item(label=INT64_MAX + 1), False),
        (new_item(label=INT64_MIN + 1), True),
        (new_item(label=INT64_MIN), False),  # it stores "no label"
    ],
)
def test_int64_limits_are_the_same_in_the_schema_and_the_server(
    client: TestClient, item: dict[str, Any], valid: bool
) -> None:
    """Found by schemathesis: the schema held int64's limits as floats (2^63 - 1 rounds to
    2^63), so tools generated ids, labels and seeds of 2^63 as valid and the server refused
    them."""
    body = {"items": [item]}
    assert schema_accepts(client, "AddItems", body) is valid
    response = client.post("/v1/items", json=body, headers=AUTH)
    assert response.status_code == (200 if valid else 422), response.text


@pytest.mark.parametrize(
    ("seed", "valid"), [(INT64_MAX, True), (INT64_MAX + 1, False), (-1, False)]
)
def test_seed_limits_are_the_same_in_the_schema_and_the_server(
    client: TestClient, seed: int, valid: bool
) -> None:
    body = {"pool": "gallery", "batch": 1, "seed": seed, "strategy": "random"}
    assert schema_accepts(client, "SuggestQuery", body) is valid
    response = client.post("/v1/suggest", json=body, headers=AUTH)
    assert response.status_code == (200 if valid else 422), response.text
    if valid:
        assert response.json()["seed"] == seed


def test_whole_numbers_written_as_floats_are_integers(client: TestClient) -> None:
    """Found by schemathesis: JSON Schema's ``integer`` admits -2222.0, which the server
    refused as an id. JSON has one kind of number: -2222.0 is the id -2222 (and "-2222")."""
    body = {"items": [new_item(-2222.0, label=4.0)]}
    assert schema_accepts(client, "AddItems", body)
    assert client.post("/v1/items", json=body, headers=AUTH).status_code == 200
    inline = client.post("/v1/embed", json={"items": [{"x": x(0.3)}]}).json()["embeddings"]
    for ref in (-2222, "-2222", -2222.0):
        found = client.post("/v1/embed", json={"items": [{"id": ref}]})
        assert found.status_code == 200 and found.json()["embeddings"] == inline, ref
    classified = client.post("/v1/classify", json={"items": [{"id": -2222}], "k": 3.0})
    assert classified.status_code == 200
    fraction = {"items": [new_item(-2222.5)]}
    assert not schema_accepts(client, "AddItems", fraction)
    [error] = errors(client.post("/v1/items", json=fraction, headers=AUTH))
    assert error["loc"] == ["body", "items", 0, "id"]
    gone = client.request("DELETE", "/v1/items", json={"ids": [-2222.0]}, headers=AUTH)
    assert gone.json()["removed"] == 1


@pytest.mark.parametrize(
    ("extra", "item", "valid"),
    [
        ({}, {"label": None}, False),  # the gallery is the default
        ({}, {}, False),
        ({"gallery": True}, {"label": None}, False),
        ({"gallery": False}, {"label": None}, True),
        ({"gallery": False}, {}, True),
        ({"gallery": True}, {"label": 2}, True),
    ],
)
def test_gallery_items_need_a_label_in_the_schema_too(
    client: TestClient, extra: dict[str, Any], item: dict[str, Any], valid: bool
) -> None:
    """Found by schemathesis: ``label: null`` with ``gallery: true`` was valid by the schema."""
    body = {"items": [{"id": "labelled?", "x": x(0.7), **item}], **extra}
    assert schema_accepts(client, "AddItems", body) is valid
    response = client.post("/v1/items", json=body, headers=AUTH)
    if valid:
        assert response.status_code == 200, response.text
    else:
        [error] = errors(response)
        assert error["loc"] == ["body", "items", 0, "label"]
        assert error["msg"] == "gallery items need a label"


def test_a_405_lists_every_method_of_the_path(client: TestClient) -> None:
    for method in ("OPTIONS", "GET", "PUT", "PATCH"):
        response = client.request(method, "/v1/items")
        assert response.status_code == 405, method
        assert response.headers["allow"] == "DELETE, POST", method
        assert response.json() == {"detail": "Method Not Allowed"}
    response = client.request("DELETE", "/v1/model")
    assert response.status_code == 405 and response.headers["allow"] == "GET"
    response = client.request("OPTIONS", "/v1/embed")
    assert response.status_code == 405 and response.headers["allow"] == "POST"


@schemathesis.check
def valid_by_the_schema_passes_validation(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request valid by the schema may be refused (422) only for what the service's state
    decides (unknown ids, features the model cannot embed, a pool too small) or JSON Schema
    cannot say (17 and "17" are one id), never by the request models: that would be the schema
    admitting what the server refuses."""
    if response.status_code != 422:
        return None
    for error in response.json()["detail"]:
        by_the_handler = error["type"] == "value_error" and not error["msg"].startswith("Value")
        same_id = error["type"] == "pool" and "in the pool twice" in error["msg"]
        assert by_the_handler or same_id, f"valid by the schema, refused: {error}"
    return None


def fuzz(schema: Any, mode: GenerationMode, examples: int = 100) -> set[int]:
    """Call the app with ``examples`` requests generated from its OpenAPI ``schema`` in
    ``mode``, with and without the token, checking each answer: never 5xx, its status and body
    as the schema documents them, and (negative) every request the schema calls invalid
    refused or (positive) none it calls valid refused by the request models. The statuses
    seen."""
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    if mode == GenerationMode.NEGATIVE:
        checks.append(negative_data_rejection)
    else:
        checks.append(valid_by_the_schema_passes_validation)
    statuses: set[int] = set()

    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=schema.as_strategy(generation_mode=mode), authorised=st.booleans())
    def call(case: Any, authorised: bool) -> None:
        # requests sends a header's str as latin-1: these characters are the token's UTF-8 bytes
        token = f"Bearer {TOKEN}".encode().decode("latin-1")
        headers = {"Authorization": token} if authorised else None
        response = case.call_and_validate(headers=headers, checks=checks)
        statuses.add(response.status_code)

    call()
    return statuses


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(client, mode) -> None:
    """Requests generated from the app's own OpenAPI schema, valid and invalid, with and without
    the token (:func:`fuzz`). Last in this file: it may change any item."""
    statuses = fuzz(schemathesis.openapi.from_asgi("/openapi.json", client.app), mode)
    assert max(statuses) < 500 and 422 in statuses
    if mode == GenerationMode.POSITIVE:
        assert 200 in statuses


FORM = "application/x-www-form-urlencoded"


@pytest.mark.parametrize(
    "headers, named",
    [
        ({"content-type": FORM}, f"'{FORM}'"),
        ({"content-type": "text/plain; charset=utf-8"}, "'text/plain; charset=utf-8'"),
        ({}, "'missing'"),
    ],
)  # fmt: skip
def test_a_body_not_sent_as_json_gets_415_saying_so(
    client: TestClient, headers: dict[str, str], named: str
) -> None:
    # What `curl -d` sends: a valid JSON body under a form's content type.
    body = json.dumps({"items": [{"x": x()}]})
    response = client.post("/v1/classify", content=body, headers=headers)
    assert response.status_code == 415
    assert response.json()["detail"] == (
        "send the body as JSON with Content-Type: application/json; this request's "
        f"Content-Type is {named}"
    )
    sent_as_json = {"content-type": "application/json"}
    as_json = client.post("/v1/classify", content=body, headers=sent_as_json)
    assert as_json.status_code == 200, as_json.text
    # A JSON body that fails validation is still a 422 naming the field.
    bad = client.post("/v1/classify", content='{"items": []}', headers=sent_as_json)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "items"]
