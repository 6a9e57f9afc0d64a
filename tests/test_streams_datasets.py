"""The datasets the benchmark streams draw from: shapes, value ranges, labels, errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from oahu.streams.datasets import (
    DATASETS,
    FASHION_MNIST_ROOT,
    load_dataset,
    load_digits,
    load_fashion_mnist,
)


def test_digits_shape_range_and_labels():
    ds = load_digits()
    assert ds.name == "digits"
    assert ds.X.shape == (1797, 64) and ds.X.dtype == np.float32
    assert ds.y.shape == (1797,) and ds.y.dtype == np.int64
    assert ds.X.min() == 0.0 and ds.X.max() == 1.0
    # Pixel counts 0..16 scaled by 1/16: every value is a multiple of 1/16.
    np.testing.assert_array_equal(ds.X * 16, np.round(ds.X * 16))
    assert np.bincount(ds.y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def test_loaded_arrays_are_shared_and_read_only():
    ds = load_dataset("digits")
    assert ds is load_digits()
    with pytest.raises(ValueError, match="read-only"):
        ds.X[0, 0] = 0.5


def test_fashion_mnist_shape_range_and_classes():
    ds = load_dataset("fashion-mnist")
    assert ds.name == "fashion-mnist"
    assert ds.X.shape == (70000, 784) and ds.X.dtype == np.float32
    assert ds.y.shape == (70000,) and ds.y.dtype == np.int64
    assert ds.X.min() == 0.0 and ds.X.max() == 1.0
    # 7,000 items per class (6,000 train + 1,000 test); train first, its first labels known.
    assert np.bincount(ds.y).tolist() == [7000] * 10
    assert ds.y[:5].tolist() == [9, 0, 0, 3, 0]
    # Pixels are bytes scaled by 1/255.
    sample = ds.X[:100]
    np.testing.assert_allclose(sample * 255, np.round(sample * 255), atol=1e-4)


def test_fashion_mnist_missing_root_names_path_and_package(tmp_path):
    root = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as excinfo:
        load_fashion_mnist(str(root))
    message = str(excinfo.value)
    assert "apt-get install dataset-fashion-mnist" in message
    assert str(root) in message


@pytest.fixture
def fashion_links(tmp_path: Path) -> Path:
    """A folder of links to the installed files, so that a test can replace one of them."""
    for source in Path(FASHION_MNIST_ROOT).iterdir():
        (tmp_path / source.name).symlink_to(source)
    return tmp_path


def test_fashion_mnist_rejects_a_file_of_the_wrong_kind(fashion_links):
    # Labels where the images should be: the idx magic number gives it away.
    images = fashion_links / "t10k-images-idx3-ubyte.gz"
    images.unlink()
    images.write_bytes((fashion_links / "t10k-labels-idx1-ubyte.gz").read_bytes())
    with pytest.raises(ValueError, match="magic number 2049, expected 2051"):
        load_fashion_mnist(str(fashion_links))


def test_fashion_mnist_rejects_a_truncated_payload(fashion_links):
    labels_file = fashion_links / "t10k-labels-idx1-ubyte.gz"
    raw = gzip.decompress(labels_file.read_bytes())
    labels_file.unlink()
    labels_file.write_bytes(gzip.compress(raw[:-10]))
    with pytest.raises(ValueError, match="header says \\[10000\\], payload has 9990"):
        load_fashion_mnist(str(fashion_links))


def test_unknown_dataset_name_lists_the_choices():
    with pytest.raises(
        ValueError, match="unknown name 'mnist'; choose one of digits, fashion-mnist"
    ):
        load_dataset("mnist")
    assert DATASETS[:3] == ("digits", "fashion-mnist", "letter") and len(DATASETS) == 9
    with pytest.raises(ValueError, match=r"or give the path of a labelled \.npz, \.csv"):
        load_dataset("mnist")
