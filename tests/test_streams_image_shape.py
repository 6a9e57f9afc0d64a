"""The image shape of items: recorded by the image datasets, carried by the streams built from
them, through both stream file formats and into the service's item stores."""

from __future__ import annotations

import dataclasses
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from oahu.connectors.file_source import FileSource
from oahu.service.catalog import Catalog
from oahu.service.config import ServiceConfig
from oahu.service.item_store import ItemStore
from oahu.service.serving.app import default_stream, initial_items
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import load_dataset, load_digits
from oahu.streams.drift import build_drift_stream
from oahu.streams.hierarchy import build_hierarchy_stream
from oahu.streams.noise import add_noise
from oahu.streams.packaged_datasets import PACKAGED, is_cached
from oahu.streams.stream_file import ConstraintStream, load_stream, write_jsonl


@pytest.fixture(scope="module")
def digits_stream() -> ConstraintStream:
    return build_stream("digits", n_constraints=50, seed=2)


def test_digits_items_are_8x8_images_row_by_row(digits_stream):
    from sklearn.datasets import load_digits as sk_load_digits

    assert load_digits().image_shape == (8, 8) and digits_stream.image_shape == (8, 8)
    # row-major: reshaping a row gives scikit-learn's own 8x8 image (values 0..16, scaled)
    images = sk_load_digits().images
    np.testing.assert_array_equal(digits_stream.X[5].reshape(8, 8) * 16, images[5])


@pytest.mark.parametrize(
    ("name", "shape"), [("optdigits", (8, 8)), ("mnist-5k", (28, 28)), ("letter", None)]
)
def test_packaged_sets_record_a_shape_only_when_their_features_are_pixels(name, shape):
    assert PACKAGED[name].image_shape == shape
    if not is_cached(name):
        pytest.skip(f"{name} is not in the data cache")
    ds = load_dataset(name)
    assert ds.image_shape == shape
    if shape is not None:
        # the mean zero of either set is a ring: dark in the middle, ink above and below it
        zero = ds.X[ds.y == 0].mean(axis=0).reshape(shape)
        h, w = shape
        centre = zero[h // 2 - h // 8 : h // 2 + h // 8 + 1, w // 2 - w // 8 : w // 2 + w // 8 + 1]
        assert centre.mean() < 0.5 * zero[h // 8 : h // 4 + 1, w // 4 : 3 * w // 4].mean()


def test_image_shape_round_trips_through_npz_and_jsonl(tmp_path, digits_stream):
    digits_stream.save(tmp_path / "s.npz")
    write_jsonl(digits_stream, tmp_path / "s.jsonl")
    with np.load(tmp_path / "s.npz") as npz:
        assert npz["image_shape"].tolist() == [8, 8] and npz["image_shape"].dtype == np.int64
    header = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert header["image_shape"] == [8, 8]
    for name in ("s.npz", "s.jsonl"):
        again = load_stream(tmp_path / name)
        assert again.image_shape == (8, 8)
        np.testing.assert_array_equal(again.X, digits_stream.X)
    # and from the JSON Lines copy to .npz again
    load_stream(tmp_path / "s.jsonl").save(tmp_path / "t.npz")
    assert ConstraintStream.load(tmp_path / "t.npz").image_shape == (8, 8)


def test_files_without_an_image_shape_load_with_none(tmp_path, digits_stream):
    # an .npz written before the field existed: the same arrays, no image_shape key
    with np.load(_saved(tmp_path, digits_stream)) as npz:
        arrays = {key: npz[key] for key in npz.files if key != "image_shape"}
    np.savez_compressed(tmp_path / "old.npz", **arrays)
    assert "image_shape.npy" not in zipfile.ZipFile(tmp_path / "old.npz").namelist()
    old = ConstraintStream.load(tmp_path / "old.npz")
    assert old.image_shape is None and len(old) == len(digits_stream)
    # a JSON Lines file from before it: a header without image_shape
    write_jsonl(digits_stream, tmp_path / "s.jsonl")
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    del header["image_shape"]
    (tmp_path / "old.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    assert load_stream(tmp_path / "old.jsonl").image_shape is None
    # and a stream without one writes neither key nor header field
    plain = ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet", [[0, 1, 2]])
    plain.save(tmp_path / "plain.npz")
    write_jsonl(plain, tmp_path / "plain.jsonl")
    assert "image_shape.npy" not in zipfile.ZipFile(tmp_path / "plain.npz").namelist()
    assert "image_shape" not in (tmp_path / "plain.jsonl").read_text()


def _saved(tmp_path: Path, stream: ConstraintStream) -> Path:
    stream.save(tmp_path / "new.npz")
    return tmp_path / "new.npz"


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([8, 9], "image_shape: (8, 9) has 72 pixels, but the items have 64 features"),
        ([8], "image_shape: expected (height, width), two positive integers, got [8]"),
        ([0, 64], "image_shape: expected (height, width), two positive integers, got [0, 64]"),
        ([8.5, 8], "image_shape: expected (height, width), two positive integers"),
    ],
)
def test_a_wrong_image_shape_is_refused_naming_the_field(tmp_path, digits_stream, shape, message):
    s = digits_stream
    with pytest.raises(ValueError, match=re.escape(message)):
        ConstraintStream(s.X, s.y, s.dev_idx, s.test_idx, s.kind, s.constraints, image_shape=shape)
    write_jsonl(s, tmp_path / "s.jsonl")
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    header = json.loads(lines[0]) | {"image_shape": shape}
    (tmp_path / "bad.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: field 'image_shape': "):
        load_stream(tmp_path / "bad.jsonl")
    arrays = {"image_shape": np.array(shape)}
    with np.load(_saved(tmp_path, s)) as npz:
        arrays |= {key: npz[key] for key in npz.files if key != "image_shape"}
    np.savez_compressed(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="image_shape: "):
        ConstraintStream.load(tmp_path / "bad.npz")


def test_derived_streams_keep_the_shape(digits_stream):
    assert add_noise(digits_stream, 0.1).image_shape == (8, 8)
    # rotated copies of square images are images of the same shape
    assert build_drift_stream("digits", 60, 0, "covariate", drift_at=30).image_shape == (8, 8)
    assert build_hierarchy_stream("digits", 20, 0, "shape").image_shape == (8, 8)
    arrays = build_stream(digits_stream.X, digits_stream.y, 20, seed=0)
    assert arrays.image_shape is None  # arrays carry no shape: nothing says they are pixels


def test_the_service_knows_the_shape_of_its_items(tmp_path, digits_stream):
    digits_stream.save(tmp_path / "s.npz")
    write_jsonl(digits_stream, tmp_path / "s.jsonl")
    for name in ("s.npz", "s.jsonl"):
        source = FileSource(tmp_path / name)
        assert source.image_shape == (8, 8)
        config = ServiceConfig(source=(tmp_path / name).as_uri(), checkpoint_dir=str(tmp_path))
        items, gallery = initial_items(config)
        assert items.image_shape == gallery.image_shape == (8, 8)
        assert len(gallery) == len(digits_stream.dev_idx)
        assert Catalog(items, gallery, tmp_path / "overlay.npz").image_shape == (8, 8)
    # a gallery file of items records it too, and keeps it through save and load
    gallery.save(tmp_path / "gallery.npz")
    assert ItemStore.load(tmp_path / "gallery.npz").image_shape == (8, 8)
    plain = ItemStore.from_arrays(["a"], np.zeros((1, 64), np.float32))
    plain.save(tmp_path / "plain.npz")
    assert ItemStore.load(tmp_path / "plain.npz").image_shape is None
    # a file of messages carries no items, and no shape
    (tmp_path / "messages.txt").write_text("")
    assert FileSource(tmp_path / "messages.txt").image_shape is None


def test_the_default_stream_of_oahu_run_records_8x8(tmp_path):
    config = ServiceConfig(checkpoint_dir=str(tmp_path), default_constraints=30)
    assert load_stream(default_stream(config)).image_shape == (8, 8)


def test_a_default_stream_written_without_image_shape_is_built_again_identical(tmp_path):
    config = ServiceConfig(checkpoint_dir=str(tmp_path), default_constraints=30)
    path = default_stream(config)
    before = load_stream(path)
    old = dataclasses.replace(before, image_shape=None)  # as an earlier release wrote it
    old.save(path)
    assert load_stream(path).image_shape is None
    again = load_stream(default_stream(config))
    assert again.image_shape == (8, 8)
    # the same constraints and items: a checkpoint's offsets into the file stay right
    np.testing.assert_array_equal(again.constraints, before.constraints)
    np.testing.assert_array_equal(again.X, before.X)
