"""The console's retrieval explorer endpoints, against a real ``oahu run`` learning a digits
stream: item thumbnails, random gallery pages, and neighbours under the served model (as
``/v1/retrieve`` answers) beside exact Euclidean neighbours."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from service_support import ServiceProcess, make_stream, wait_until

from oahu.service.config import ServiceConfig
from oahu.service.console.explore import feature_summary
from oahu.service.serving.app import Service
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.stream_file import ConstraintStream

N = 300


@pytest.fixture(scope="module")
def stream_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_stream(tmp_path_factory.mktemp("stream"), N, seed=5)


@pytest.fixture(scope="module")
def stream(stream_file: Path) -> ConstraintStream:
    return ConstraintStream.load(stream_file)


def serve(stream_file: Path, folder: Path, n: int) -> ServiceProcess:
    """``oahu run`` on ``stream_file``, waited for until its snapshot has learned all of it."""
    service = ServiceProcess(
        ["--source", stream_file.as_uri(), "--checkpoint-dir", str(folder / "state"),
         "--reindex-interval", "0.05"], folder / "service.log",
    )  # fmt: skip
    service.wait_serving()
    wait_until(
        lambda: ((service.model() or {}).get("snapshot") or {}).get("updates") == n,
        120,
        "the snapshot of the whole stream",
    )
    return service


@pytest.fixture(scope="module")
def service(stream_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    proc = serve(stream_file, tmp_path_factory.mktemp("service"), N)
    yield proc
    assert proc.terminate() == 0, proc.output()


def get(service: ServiceProcess, path: str) -> httpx.Response:
    return httpx.get(service.base + path, timeout=30)


def post(service: ServiceProcess, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    return httpx.post(service.base + path, json=body, timeout=30, **kw)


def levels(x: np.ndarray) -> np.ndarray:
    """Features in [0, 1] as the grey levels a thumbnail shows: round(255 v), half up."""
    return np.floor(np.asarray(x, np.float64) * 255 + 0.5).astype(np.uint8)


def png_pixels(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    image = Image.open(io.BytesIO(response.content))
    assert image.format == "PNG" and image.mode == "L"
    return np.asarray(image)


# ---------------------------------------------------------------------------- thumbnails
def test_a_thumbnail_is_the_items_8x8_pixels_enlarged(service, stream):
    gallery_item, test_item = int(stream.dev_idx[7]), int(stream.test_idx[3])
    for item in (gallery_item, test_item):  # a gallery item, and one only in the item store
        pixels = png_pixels(get(service, f"/v1/console/items/{item}.png?size=96"))
        assert pixels.shape == (96, 96)
        expected = levels(stream.X[item]).reshape(8, 8)
        # each feature is a 12 x 12 block of its grey level
        np.testing.assert_array_equal(pixels, np.kron(expected, np.ones((12, 12), np.uint8)))
        assert len(np.unique(expected)) > 5  # a real digit, not a blank
    default = png_pixels(get(service, f"/v1/console/items/{gallery_item}.png"))
    assert default.shape == (96, 96)
    # a size that is no multiple of 8: nearest-neighbour, pixel (i, j) shows feature
    # (floor((i + 0.5) * 8 / 20), same for j)
    small = png_pixels(get(service, f"/v1/console/items/{gallery_item}.png?size=20"))
    source = ((np.arange(20) + 0.5) * 8 / 20).astype(int)
    expected = levels(stream.X[gallery_item]).reshape(8, 8)
    np.testing.assert_array_equal(small, expected[np.ix_(source, source)])
    largest = png_pixels(get(service, f"/v1/console/items/{gallery_item}.png?size=256"))
    assert largest.shape == (256, 256) and largest[255, 255] == expected[7, 7]


def test_thumbnails_are_cached_per_item_version_and_size(service, stream):
    item = int(stream.dev_idx[11])
    path = f"/v1/console/items/{item}.png?size=48"
    first, second = get(service, path), get(service, path)
    assert (first.headers["x-cache"], second.headers["x-cache"]) == ("miss", "hit")
    assert first.content == second.content
    assert first.headers["cache-control"] == second.headers["cache-control"] == "public, max-age=60"
    assert get(service, f"/v1/console/items/{item}.png?size=49").headers["x-cache"] == "miss"
    # new features under the same id: a new items version, so a new picture (in the item
    # store only: the gallery, which other tests compare with the stream, stays as it is)
    x = np.zeros(64)
    x[:8] = 1.0  # the top row white
    added = post(
        service, "/v1/items", {"items": [{"id": "new", "x": x.tolist()}], "gallery": False}
    )
    assert added.status_code == 200, added.text
    new = get(service, "/v1/console/items/new.png?size=16")
    np.testing.assert_array_equal(
        png_pixels(new), np.kron(levels(x).reshape(8, 8), np.ones((2, 2)))
    )
    x[:8] = 0.5
    post(service, "/v1/items", {"items": [{"id": "new", "x": x.tolist()}], "gallery": False})
    again = get(service, "/v1/console/items/new.png?size=16")
    assert again.headers["x-cache"] == "miss" and png_pixels(again)[0, 0] == 128
    assert get(service, "/v1/console/items/new.png?size=16").headers["x-cache"] == "hit"
    removed = httpx.request("DELETE", service.base + "/v1/items", json={"ids": ["new"]})
    assert removed.status_code == 200, removed.text
    assert get(service, "/v1/console/items/new.png?size=16").status_code == 404


def test_thumbnails_of_unknown_items_and_bad_sizes_are_refused(service):
    missing = get(service, "/v1/console/items/99999.png")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "unknown item id '99999'"}
    for size in ("15", "257", "abc", "96.5"):
        bad = get(service, f"/v1/console/items/3.png?size={size}")
        assert bad.status_code == 422, size
        assert bad.json()["detail"][0]["loc"] == ["query", "size"]


# ---------------------------------------------------------------------------- gallery pages
def test_gallery_pages_are_random_repeatable_and_describe_their_items(service, stream):
    pages = [get(service, f"/v1/console/gallery?n=24&seed={seed}").json() for seed in (1, 1, 2)]
    assert pages[0] == pages[1]
    assert pages[0]["items"] != pages[2]["items"]
    dev = stream.dev_idx
    page = pages[0]
    assert page["gallery_items"] == len(dev) and page["image_shape"] == [8, 8]
    assert set(page) == {"items", "gallery_items", "image_shape"}
    ids = [item["id"] for item in page["items"]]
    assert len(ids) == len(set(ids)) == 24 and set(map(int, ids)) <= set(dev.tolist())
    for item in page["items"]:
        x = stream.X[int(item["id"])]
        assert set(item) == {"id", "label", "image", "summary"}
        assert item["label"] == int(stream.y[int(item["id"])])
        assert item["image"] == f"/v1/console/items/{item['id']}.png"
        assert item["summary"] == (
            f"64 features, mean {x.astype(np.float64).mean():.2g}, "
            f"range [{x.min():.3g}, {x.max():.3g}]"
        )
    assert len(get(service, "/v1/console/gallery?seed=7").json()["items"]) == 24  # n's default
    many = get(service, "/v1/console/gallery?n=200&seed=3").json()["items"]
    assert len({item["id"] for item in many}) == 200
    # different seeds draw different pages: 10 seeds, 10 distinct pages
    pages = [get(service, f"/v1/console/gallery?n=5&seed={s}").json() for s in range(10)]
    assert len({tuple(i["id"] for i in page["items"]) for page in pages}) == 10
    for query in ("n=0", "n=201", "n=x", "seed=-1"):
        bad = get(service, f"/v1/console/gallery?{query}")
        assert bad.status_code == 422, query
        assert bad.json()["detail"][0]["loc"] == ["query", query.split("=")[0]]


# ---------------------------------------------------------------------------- neighbours
def _same_snapshot(service: ServiceProcess, neighbours_body: dict, retrieve_body: dict):
    """The explorer's and /v1/retrieve's answers, asked until both come from one snapshot."""
    for _ in range(20):
        explored = post(service, "/v1/console/neighbours", neighbours_body)
        retrieved = post(service, "/v1/retrieve", retrieve_body)
        assert explored.status_code == retrieved.status_code == 200, explored.text
        if explored.json()["snapshot"] == retrieved.json()["model"]:
            return explored.json(), retrieved.json()
    raise AssertionError("the snapshot kept changing between the two requests")


def euclidean_reference(stream: ConstraintStream, x: np.ndarray, k: int, exclude=None):
    """Brute force: every gallery item (the stream's development items, in their order), by
    float64 Euclidean distance, ties to the earlier item."""
    dev = stream.dev_idx
    distance = np.sqrt(((stream.X[dev].astype(np.float64) - x.astype(np.float64)) ** 2).sum(1))
    order = np.lexsort((np.arange(len(dev)), distance))
    order = [i for i in order.tolist() if dev[i] != exclude][:k]
    return [(str(dev[i]), int(stream.y[dev[i]]), float(distance[i])) for i in order]


@pytest.mark.parametrize("position", [0, 100, 500])
def test_neighbours_of_a_gallery_item_are_the_models_and_the_exact_euclidean(
    service, stream, position
):
    item = int(stream.dev_idx[position])
    out, retrieved = _same_snapshot(
        service, {"id": str(item), "k": 7}, {"items": [{"id": item}], "k": 8}
    )
    assert set(out) == {"query", "model", "euclidean", "snapshot"}
    assert out["query"] == {
        "id": str(item), "label": int(stream.y[item]), "image": f"/v1/console/items/{item}.png",
        "summary": None,  # drawn as a picture
    }  # fmt: skip
    # the model's list is /v1/retrieve's for k + 1, without the item itself
    expected = [r for r in retrieved["results"][0] if r["id"] != str(item)][:7]
    assert len(out["model"]) == 7
    assert [{k: n[k] for k in ("id", "label", "score")} for n in out["model"]] == expected
    assert all(n["image"] == f"/v1/console/items/{n['id']}.png" for n in out["model"])
    assert all(n["summary"] is None for n in out["model"] + out["euclidean"])
    reference = euclidean_reference(stream, stream.X[item], 7, exclude=item)
    got = [(n["id"], n["label"], n["score"]) for n in out["euclidean"]]
    assert [g[:2] for g in got] == [r[:2] for r in reference]
    np.testing.assert_allclose([g[2] for g in got], [r[2] for r in reference], rtol=1e-12)
    assert str(item) not in {n["id"] for n in out["model"] + out["euclidean"]}
    assert out["snapshot"]["updates"] == N  # the model that learned the whole stream


def test_neighbours_of_a_pasted_vector(service, stream):
    x = stream.X[int(stream.test_idx[0])]  # not in the gallery: nothing to leave out
    out, retrieved = _same_snapshot(
        service, {"x": x.tolist()}, {"items": [{"x": x.tolist()}]}
    )  # fmt: skip
    assert out["query"] == {
        "id": None, "label": None, "image": None, "summary": feature_summary(x)
    }  # fmt: skip
    assert len(out["model"]) == len(out["euclidean"]) == 5  # the service's --k
    assert [{k: n[k] for k in ("id", "label", "score")} for n in out["model"]] == retrieved[
        "results"][0]  # fmt: skip
    reference = euclidean_reference(stream, x, 5)
    assert [(n["id"], n["label"]) for n in out["euclidean"]] == [r[:2] for r in reference]
    np.testing.assert_allclose(
        [n["score"] for n in out["euclidean"]], [r[2] for r in reference], rtol=1e-12
    )


@pytest.mark.parametrize(
    ("body", "status", "loc", "message"),
    [
        ({}, 422, ["body"], "give exactly one of 'id' and 'x'"),
        ({"id": 3, "x": [0.0] * 64}, 422, ["body"], "give exactly one of 'id' and 'x'"),
        ({"id": "nope"}, 404, None, "unknown item id 'nope'"),
        ({"id": 99999, "k": 3}, 404, None, "unknown item id '99999'"),
        ({"id": True}, 422, ["body", "id"], "not a boolean"),
        ({"id": ""}, 422, ["body", "id"], "must not be empty"),
        ({"x": [0.5] * 63}, 422, ["body", "x"], "at least 64 items"),
        ({"x": [0.5] * 65}, 422, ["body", "x"], "at most 64 items"),
        ({"x": ["0.5"] + [0.5] * 63}, 422, ["body", "x", 0], "valid number"),
        ({"x": [0.5] * 63 + [None]}, 422, ["body", "x", 63], "valid number"),
        ({"x": [1e39] + [0.5] * 63}, 422, ["body", "x", 0], "less than or equal to"),
        ({"x": "0.5"}, 422, ["body", "x"], "valid list"),
        ({"id": 3, "k": 0}, 422, ["body", "k"], "greater than or equal to 1"),
        ({"id": 3, "k": 101}, 422, ["body", "k"], "less than or equal to 100"),
        ({"id": 3, "k": 2.5}, 422, ["body", "k"], "integer"),
        ({"id": 3, "depth": 2}, 422, ["body", "depth"], "Extra inputs are not permitted"),
        ([1, 2], 422, ["body"], "valid dictionary"),
    ],
)
def test_bad_neighbour_requests_are_4xx_naming_the_field(service, body, status, loc, message):
    response = post(service, "/v1/console/neighbours", body)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    if loc is None:
        assert detail == message
    else:
        assert detail[0]["loc"] == loc and message in detail[0]["msg"], detail


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_features_are_refused_naming_x(service, value):
    body = b'{"x": [' + b", ".join([value] + [b"0.5"] * 63) + b"]}"
    response = httpx.post(
        service.base + "/v1/console/neighbours", content=body,
        headers={"content-type": "application/json"}, timeout=30,
    )  # fmt: skip
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "x", 0] and "finite" in error["msg"]


def test_the_explorer_answers_503_before_the_first_snapshot(stream_file, tmp_path):
    service = Service(ServiceConfig(source=stream_file.as_uri(), checkpoint_dir=str(tmp_path)))
    service.engine.start()  # the query worker, with nothing published
    try:
        client = TestClient(service.app)
        response = client.post("/v1/console/neighbours", json={"id": "3"})
        assert response.status_code == 503
        assert response.json() == {"detail": "no model snapshot published yet"}
        # what needs no model answers already
        assert client.get("/v1/console/gallery?n=3&seed=0").status_code == 200
        assert client.get("/v1/console/items/3.png").status_code == 200
    finally:
        service.engine.stop()


# ---------------------------------------------------------------------------- not images
def test_items_that_are_not_images_have_no_pictures(tmp_path, stream):
    # the digits' features as plain arrays: nothing says they are pixels
    n = 40
    plain = build_stream(stream.X, stream.y, n, seed=1)
    assert plain.image_shape is None
    plain.save(tmp_path / "plain.npz")
    service = serve(tmp_path / "plain.npz", tmp_path, n)
    try:
        missing = get(service, "/v1/console/items/3.png")
        assert missing.status_code == 404
        assert missing.json()["detail"].startswith("the items have no image shape")
        assert get(service, "/v1/console/items/nope.png").json() == {
            "detail": "unknown item id 'nope'"
        }
        page = get(service, "/v1/console/gallery?n=4&seed=0").json()
        assert page["image_shape"] is None and all(i["image"] is None for i in page["items"])
        item = page["items"][0]["id"]
        out = post(service, "/v1/console/neighbours", {"id": item, "k": 3}).json()
        assert out["query"]["image"] is None
        assert all(n["image"] is None for n in out["model"] + out["euclidean"])
        # what the page shows instead of a picture: the features in a few words, per item
        x, _ = plain.X, plain.y
        assert out["query"]["summary"] == feature_summary(x[int(item)])
        for n in out["model"] + out["euclidean"]:
            assert n["summary"] == feature_summary(x[int(n["id"])])
    finally:
        assert service.terminate() == 0, service.output()
