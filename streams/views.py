"""Two views of the same objects, the data of cross-modal streams (:mod:`streams.cross_modal`).

A cross-modal learner has one tower per modality and learns from constraints whose items come
from different modalities. Its benchmark data is a set of objects each seen in two views, rows
aligned (row i of both views is the same object), with one class label per object:

=============  ======  =====================================================  ==========  ========
dataset        view    what                                                   width       derived
=============  ======  =====================================================  ==========  ========
mfeat          fou     Fourier coefficients of the character shape            76          no
mfeat          fac     profile correlations                                   216         no
mfeat          kar     Karhunen-Loeve coefficients                            64          no
mfeat          pix     pixel averages in 2x3 windows (a 15x16 image)          240         no
mfeat          zer     Zernike moments                                        47          no
mfeat          mor     morphological features                                 6           no
fashion-mnist  pixels  the 28x28 grey levels in [0, 1] (:func:`load_dataset`)  784         no
fashion-mnist  hog     HOG descriptors of those images (:func:`hog_features`)  324         yes
=============  ======  =====================================================  ==========  ========

mfeat's six views are column slices of the one joined matrix the data cache holds
(:mod:`oahu.streams.packaged_datasets`, each feature min-max scaled to [0, 1]), in that order.
Fashion-MNIST has a single view of its own; ``hog`` is computed from ``pixels`` (so ``derived``
is True: a weaker cross-modal benchmark than two independent measurements), once for all
70,000 images, and cached as ``fashion-mnist-hog.npz`` beside the packaged sets
(:func:`cache_fashion_mnist_hog`; ``scripts/bootstrap.sh`` runs it).

:func:`load_views` gives a built-in dataset's two views as :class:`TwoViews`; the user's own
paired data comes from an ``.npz`` file through :func:`load_paired`.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oahu.streams.atomic import atomic_open
from oahu.streams.dataset import read_only
from oahu.streams.dataset_arrays import dataset_from_arrays
from oahu.streams.datasets import load_dataset, load_fashion_mnist
from oahu.streams.packaged_datasets import cache_dir

__all__ = [
    "ARCHIVE_ARRAYS",
    "DEFAULT_VIEWS",
    "HOG_CACHE_NAME",
    "HOG_PARAMETERS",
    "VIEWS",
    "PairedArchive",
    "TwoViews",
    "View",
    "cache_fashion_mnist_hog",
    "check_two_names",
    "hog_features",
    "load_paired",
    "load_views",
    "paired_views",
    "read_paired_archive",
]


@dataclass(frozen=True)
class View:
    """One view of a dataset's objects: its ``name``, ``width`` (features), what it is, and
    whether it is ``derived`` (computed from another view rather than measured on its own)."""

    name: str
    width: int
    description: str
    derived: bool = False


def _views(*views: View) -> dict[str, View]:
    return {view.name: view for view in views}


#: The views of each dataset that has two or more, in column order for mfeat.
VIEWS: dict[str, dict[str, View]] = {
    "mfeat": _views(
        View("fou", 76, "Fourier coefficients of the character shape"),
        View("fac", 216, "profile correlations"),
        View("kar", 64, "Karhunen-Loeve coefficients"),
        View("pix", 240, "pixel averages in 2x3 windows (a 15x16 image)"),
        View("zer", 47, "Zernike moments"),
        View("mor", 6, "morphological features"),
    ),
    "fashion-mnist": _views(
        View("pixels", 784, "the 28x28 grey levels, scaled to [0, 1]"),
        View("hog", 324, "HOG descriptors of the 28x28 images", derived=True),
    ),
}
#: The two views a dataset's cross-modal stream pairs when none are named. mfeat: its pixels
#: against its Fourier coefficients, the image against a description of the contour, two
#: measurements that share no feature; fashion-mnist: the only two it has.
DEFAULT_VIEWS: dict[str, tuple[str, str]] = {
    "mfeat": ("pix", "fou"),
    "fashion-mnist": ("pixels", "hog"),
}
#: ``skimage.feature.hog``'s settings for the 28x28 images: 4x4 cells of 7x7 pixels, blocks of
#: 2x2 cells (3x3 block positions), 9 orientations: 3 * 3 * 2 * 2 * 9 = 324 features.
HOG_PARAMETERS: dict[str, object] = {
    "orientations": 9,
    "pixels_per_cell": (7, 7),
    "cells_per_block": (2, 2),
}
HOG_CACHE_NAME = "fashion-mnist-hog.npz"
_HOG_WIDTH = 324
_PAIRED_ARRAYS = ("XA", "XB", "y")  # what a paired .npz must hold
#: The arrays a user's .npz of two modalities is read for: paired views (XA, XB, y) or linked
#: objects (XA, XB, links; :mod:`oahu.streams.linked`), and the modalities' names.
ARCHIVE_ARRAYS = ("XA", "XB", "y", "links", "names")
_FASHION_SHAPE = (28, 28)
_PROGRESS_EVERY = 10_000  # images between two progress messages while HOG is computed


def check_two_names(value: Any, name: str) -> tuple[str, str]:
    """``value`` as a tuple of two distinct non-empty strings (the names of two views or
    modalities), or a ``ValueError`` naming ``name`` and the value.

    >>> check_two_names(["pix", "fou"], "names")
    ('pix', 'fou')
    >>> check_two_names(("pix", "pix"), "modalities")
    Traceback (most recent call last):
    ...
    ValueError: modalities: expected two distinct non-empty names, got ('pix', 'pix')
    """
    names = tuple(value) if isinstance(value, list | tuple) else ()
    if len(names) != 2 or not all(isinstance(n, str) and n for n in names) or len(set(names)) < 2:
        raise ValueError(f"{name}: expected two distinct non-empty names, got {value!r}")
    return names  # type: ignore[return-value]


@dataclass(frozen=True)
class TwoViews:
    """Objects seen in two views, rows aligned: row i of ``X[0]`` and of ``X[1]`` is object i.

    ``names``: the two views' names; ``X``: float32 (n, d_a) and (n, d_b); ``y``: int64 (n,)
    class labels; ``class_names``: the label of each class code (empty when the labels were the
    codes); ``dataset``: where the objects come from; ``derived``: whether one view is computed
    from the other (Fashion-MNIST's HOG from its pixels), which makes the pair a weaker
    cross-modal benchmark. Construction checks the shapes (``ValueError`` naming the field).

    >>> views = TwoViews(("a", "b"), (np.zeros((3, 2)), np.ones((3, 4))), np.array([0, 1, 0]))
    >>> views.n_objects, views.dims, views.X[0].dtype.name, views.derived
    (3, (2, 4), 'float32', False)
    """

    names: tuple[str, str]
    X: tuple[np.ndarray, np.ndarray]
    y: np.ndarray
    class_names: tuple[str, ...] = ()
    dataset: str = "arrays"
    derived: bool = False

    def __post_init__(self) -> None:
        names = check_two_names(self.names, "names")
        if len(self.X) != 2:
            raise ValueError(f"X: expected one array per view (2), got {len(self.X)}")
        X = tuple(np.asarray(x, dtype=np.float32) for x in self.X)
        y = np.asarray(self.y)
        if y.ndim != 1 or (y.size and not np.issubdtype(y.dtype, np.integer)):
            raise ValueError(f"y: expected a 1-d array of integer labels, got {y.dtype} {y.shape}")
        for name, x in zip(names, X, strict=True):
            if x.ndim != 2 or len(x) != len(y):
                raise ValueError(
                    f"X: view {name!r} must have shape ({len(y)}, d), one row per object, "
                    f"got {x.shape}"
                )
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y.astype(np.int64, copy=False))
        object.__setattr__(self, "class_names", tuple(self.class_names))

    @property
    def n_objects(self) -> int:
        return len(self.y)

    @property
    def dims(self) -> tuple[int, int]:
        return (self.X[0].shape[1], self.X[1].shape[1])


def load_views(dataset: str, views: tuple[str, str] | None = None) -> TwoViews:
    """Two views of a built-in dataset (:data:`VIEWS`), by default :data:`DEFAULT_VIEWS`.

    mfeat's views are column slices of the cached joined matrix (fetched once by ``oahu
    datasets fetch mfeat``); fashion-mnist's ``hog`` is read from the data cache, computed and
    cached first if it is not there (about half a minute, once). The arrays are read-only and
    shared with the dataset's.

    >>> load_views("digits")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: dataset: 'digits' has no two views; choose one of mfeat, fashion-mnist, or the ...
    >>> load_views("mfeat", ("pix", "pix"))
    Traceback (most recent call last):
    ...
    ValueError: views: the two views must differ, got 'pix' twice
    >>> load_views("mfeat", ("pix", "fourier"))
    Traceback (most recent call last):
    ...
    ValueError: views: mfeat has no view 'fourier'; choose from fou, fac, kar, pix, zer, mor
    """
    names = _check_views(dataset, views)
    if dataset == "mfeat":
        ds = load_dataset("mfeat")
        ends = np.cumsum([0, *(view.width for view in VIEWS["mfeat"].values())])
        if ds.n_features != ends[-1]:
            raise ValueError(
                f"dataset: the cached mfeat has {ds.n_features} columns, its six views "
                f"{ends[-1]}; fetch it again with `oahu datasets fetch mfeat`"
            )
        start = {name: int(ends[k]) for k, name in enumerate(VIEWS["mfeat"])}
        X = tuple(ds.X[:, start[n] : start[n] + VIEWS["mfeat"][n].width] for n in names)
        return TwoViews(names, X, ds.y, ds.class_names, dataset)  # type: ignore[arg-type]
    ds = load_fashion_mnist()
    arrays = {"pixels": ds.X}
    if "hog" in names:
        arrays["hog"] = _cached_hog()
    X = tuple(arrays[n] for n in names)
    return TwoViews(names, X, ds.y, ds.class_names, dataset, derived=True)  # type: ignore[arg-type]


def load_paired(path: str | os.PathLike[str]) -> TwoViews:
    """The user's own paired data: two views of the same labelled objects, from an ``.npz``.

    The archive holds ``XA`` (n, d_a) and ``XB`` (n, d_b), numbers, row i of both the same
    object; ``y`` (n,), the objects' labels (integers or strings, at least two classes, coded
    0..C-1 in sorted order as :func:`oahu.streams.dataset_arrays.dataset_from_arrays` does);
    and optionally ``names``, the two views' names (default ``"a"``, ``"b"``). Features are
    kept as given, as float32, not rescaled. The dataset is named after the file.

    Objects of each modality of their own, with a list of links between them instead of labels
    (arrays ``XA``, ``XB`` and ``links``), are read by :func:`oahu.streams.linked.load_linked`;
    :func:`oahu.streams.linked.load_cross_modal_data` reads either kind of file.

    Errors (``FileNotFoundError`` for a missing file, else ``ValueError``) start with the file
    and name the array: a missing array, row counts that differ, a non-finite value (with its
    row and column), fewer than 2 classes.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "pairs.npz"
    >>> np.savez(path, XA=np.eye(3), XB=np.ones((3, 2)), y=["cat", "dog", "cat"])
    >>> views = load_paired(path)
    >>> views.names, views.dims, views.y.tolist(), views.class_names, views.dataset
    (('a', 'b'), (3, 2), [0, 1, 0], ('cat', 'dog'), 'pairs')
    >>> np.savez(path, XA=np.eye(3), XB=np.ones((2, 2)), y=[0, 1, 0])
    >>> load_paired(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../pairs.npz: arrays 'XA' and 'XB' must have one row per object, ... 3 and 2
    """
    archive = read_paired_archive(path, "XA, XB and y")
    archive.require(
        _PAIRED_ARRAYS, "paired data needs XA, XB (rows aligned objects) and y (their labels)"
    )
    return paired_views(archive)


def paired_views(archive: PairedArchive) -> TwoViews:
    """The two views an archive of ``XA``, ``XB`` and ``y`` holds, checked as
    :func:`load_paired` documents."""
    arrays, shown = archive.arrays, archive.shown
    for key in ("XA", "XB"):
        archive.check_matrix(key)
    rows = {key: len(arrays[key]) for key in ("XA", "XB")}
    if rows["XA"] != rows["XB"]:
        raise ValueError(
            f"{shown}: arrays 'XA' and 'XB' must have one row per object, the same number; "
            f"they have {rows['XA']} and {rows['XB']}"
        )
    labels = arrays["y"]
    if labels.ndim != 1 or len(labels) != rows["XA"]:
        raise ValueError(
            f"{shown}: array 'y': expected one label per object, shape ({rows['XA']},) as the "
            f"rows of XA and XB, got shape {labels.shape}"
        )
    checked = {}
    for key in ("XA", "XB"):
        try:
            checked[key] = dataset_from_arrays(arrays[key], labels)
        except ValueError as e:
            # dataset_from_arrays names its arguments X and y; here they are arrays of a file.
            argument, _, problem = str(e).partition(": ")
            shown_key = key if argument == "X" else "y"
            raise ValueError(f"{shown}: array {shown_key!r}: {problem}") from None
    first = checked["XA"]
    return TwoViews(
        archive.names(),
        (first.X, checked["XB"].X),
        first.y,
        first.class_names,
        archive.dataset,
    )


@dataclass(frozen=True)
class PairedArchive:
    """The arrays of a user's ``.npz`` of two modalities (:func:`read_paired_archive`):
    ``shown``, the path as errors show it; ``dataset``, the file's name without ``.npz``;
    ``arrays``, those of :data:`ARCHIVE_ARRAYS` it holds; ``present``, every array it holds."""

    shown: str
    dataset: str
    arrays: dict[str, np.ndarray]
    present: tuple[str, ...]

    def require(self, needed: tuple[str, ...], why: str) -> None:
        """A ``ValueError`` naming the file and the arrays of ``needed`` it lacks, and ``why``
        they are needed, unless it holds them all."""
        missing = [key for key in needed if key not in self.arrays]
        if missing:
            held = ", ".join(map(repr, self.present)) if self.present else "none"
            raise ValueError(
                f"{self.shown}: missing array {' and '.join(map(repr, missing))}; {why}; the "
                f"archive holds {held}"
            )

    def check_matrix(self, key: str) -> None:
        """A ``ValueError`` naming the file and ``key`` unless that array is 2-d."""
        if self.arrays[key].ndim != 2:
            raise ValueError(
                f"{self.shown}: array {key!r}: expected a 2-d array (n_objects, n_features), "
                f"got shape {self.arrays[key].shape}"
            )

    def names(self) -> tuple[str, str]:
        """The two views' (modalities') names the array ``names`` gives, else ("a", "b")."""
        names = self.arrays.get("names")
        if names is None:
            return ("a", "b")
        listed = names.tolist() if names.ndim == 1 else None
        if (
            listed is None
            or len(listed) != 2
            or not all(isinstance(n, str) and n.strip() for n in listed)
            or listed[0] == listed[1]
        ):
            raise ValueError(
                f"{self.shown}: array 'names': expected the two views' names, two distinct "
                f"non-empty strings, got {names.tolist()!r}"[:300]
            )
        return (listed[0], listed[1])


def read_paired_archive(path: str | os.PathLike[str], holds: str) -> PairedArchive:
    """The arrays of :data:`ARCHIVE_ARRAYS` that the ``.npz`` at ``path`` holds, without
    pickles; ``holds`` says in errors what it should hold ("XA, XB and y"). A missing file is a
    ``FileNotFoundError``, anything else that is no such archive a ``ValueError`` naming it."""
    shown = os.fspath(path)
    file = Path(shown)
    if not file.name.lower().endswith(".npz"):
        raise ValueError(f"{shown}: expected a .npz archive of arrays {holds}")
    if not file.exists():
        raise FileNotFoundError(f"{shown}: no such file")
    try:
        archive = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as e:
        raise ValueError(f"{shown}: not a readable .npz archive: {e}") from None
    if isinstance(archive, np.ndarray):  # a .npy file under a .npz name
        raise ValueError(f"{shown}: a single .npy array, not a .npz archive of {holds}")
    with archive:
        present = tuple(archive.files)
        arrays = {}
        for key in ARCHIVE_ARRAYS:
            if key not in present:
                continue
            try:
                arrays[key] = archive[key]
            except ValueError:
                # Object arrays are pickles, which could run code while loading: never read.
                raise ValueError(
                    f"{shown}: array {key!r} holds Python objects, which are not read "
                    "(allow_pickle=False); store numbers, and labels as integers or strings"
                ) from None
    return PairedArchive(shown, file.name[: -len(".npz")], arrays, present)


def _check_views(dataset: str, views: tuple[str, str] | None) -> tuple[str, str]:
    if dataset not in VIEWS:
        raise ValueError(
            f"dataset: {dataset!r} has no two views; choose one of {', '.join(VIEWS)}, or the path "
            "of a paired .npz file (arrays XA, XB, y; load_paired)"
        )
    if views is None:
        return DEFAULT_VIEWS[dataset]
    names = tuple(views)
    if len(names) != 2:
        raise ValueError(f"views: expected two view names, got {views!r}")
    for name in names:
        if name not in VIEWS[dataset]:
            raise ValueError(
                f"views: {dataset} has no view {name!r}; choose from {', '.join(VIEWS[dataset])}"
            )
    if names[0] == names[1]:
        raise ValueError(f"views: the two views must differ, got {names[0]!r} twice")
    return names  # type: ignore[return-value]


def hog_features(images: np.ndarray, log: Callable[[str], None] | None = None) -> np.ndarray:
    """HOG descriptors (:data:`HOG_PARAMETERS`) of 28x28 greyscale images, float32 (n, 324).

    ``images``: (n, 784) rows of pixels in row-major order, or (n, 28, 28). ``log``, if given,
    gets a progress message every 10,000 images.

    >>> images = np.zeros((2, 784), dtype=np.float32); images[1, 300:320] = 1.0
    >>> features = hog_features(images)
    >>> features.shape, features.dtype.name, float(features[0].max()), bool(features[1].max() > 0)
    ((2, 324), 'float32', 0.0, True)
    """
    from skimage.feature import hog  # only the derived view needs scikit-image

    images = np.asarray(images, dtype=np.float32)
    n = len(images)
    if images.shape[1:] not in ((_FASHION_SHAPE[0] * _FASHION_SHAPE[1],), _FASHION_SHAPE):
        raise ValueError(f"images: expected shape (n, 784) or (n, 28, 28), got {images.shape}")
    images = images.reshape(n, *_FASHION_SHAPE)
    out = np.empty((n, _HOG_WIDTH), dtype=np.float32)
    for i, image in enumerate(images):
        out[i] = hog(image, **HOG_PARAMETERS)
        if log is not None and (i + 1) % _PROGRESS_EVERY == 0:
            log(f"HOG: {i + 1:,} of {n:,} images")
    return out


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cache_fashion_mnist_hog(
    cache: Path | None = None, log: Callable[[str], None] = _stderr
) -> Path:
    """Compute the HOG view of all 70,000 Fashion-MNIST images into the data cache, once; the
    cached file's path. A cache that holds it already (computed with the same
    :data:`HOG_PARAMETERS`, for as many images) is left alone.
    """
    return _hog_view(cache, log)[0]


def _hog_view(cache: Path | None, log: Callable[[str], None]) -> tuple[Path, np.ndarray]:
    path = (cache or cache_dir()) / HOG_CACHE_NAME
    images = load_fashion_mnist().X
    cached = _read_hog(path, len(images))
    if cached is not None:
        return path, cached
    log(f"computing HOG descriptors of {len(images):,} Fashion-MNIST images once, into {path}")
    started = time.monotonic()
    features = hog_features(images, log)
    with atomic_open(path, "wb") as fh:
        np.savez_compressed(fh, X=features, parameters=np.array(_hog_parameters_json()))
    log(f"HOG: done in {time.monotonic() - started:.0f} s")
    return path, features


def _hog_parameters_json() -> str:
    return json.dumps(HOG_PARAMETERS, sort_keys=True)


def _read_hog(path: Path, n_items: int) -> np.ndarray | None:
    """The cached HOG view, or None when the file is absent or holds other settings' or other
    images' descriptors (then it is computed again)."""
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as z:
        parameters, X = str(z["parameters"][()]), z["X"]
    if parameters != _hog_parameters_json() or X.shape != (n_items, _HOG_WIDTH):
        return None
    return X


@functools.cache
def _cached_hog() -> np.ndarray:
    # Decoded once per process and shared read-only, as the datasets are.
    return read_only(_hog_view(None, _stderr)[1])
