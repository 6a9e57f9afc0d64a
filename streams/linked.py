"""Linked objects: two modalities, each with objects of its own, and a list of links across them.

The other kind of cross-modal data than :mod:`streams.views`' two views of the same labelled
objects: link prediction in a bipartite graph (drug and target, user and item, image and
caption). Modality A has n_a objects (``XA``, n_a x d_a), modality B n_b (``XB``, n_b x d_b), n_a
and n_b may differ, and a link (i, j) says that object i of A and object j of B are linked.
There are no class labels.

:func:`load_linked` reads the user's ``.npz`` of them, :func:`load_cross_modal_data` either kind
of file, told by its arrays.
:func:`oahu.streams.cross_modal_protocol.build_cross_modal_stream` draws CSLP's constraints
from the links: :func:`split_linked` splits each modality's objects into
development and test objects, :func:`draw_linked` draws the constraints' objects
(streams/FORMAT.md, "Cross-modal streams from links").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from oahu.streams.dataset_arrays import features_from_array
from oahu.streams.protocol import _rng, split_dev_test
from oahu.streams.views import (
    PairedArchive,
    TwoViews,
    check_two_names,
    paired_views,
    read_paired_archive,
)

__all__ = [
    "LinkedObjects",
    "PerModality",
    "check_links",
    "draw_linked",
    "link_keys",
    "load_cross_modal_data",
    "load_linked",
    "split_linked",
]

_LINKED_ARRAYS = ("XA", "XB", "links")  # what a linked .npz must hold
_NO_DEVELOPMENT_LINK = (
    "links: no link joins two development objects, and {} is drawn from one; another seed "
    "splits the objects otherwise"
)
_FEATURES = ("XA", "XB")  # the array of each modality, for errors
# B's split breaks ties under a tag of its own (A's is split_dev_test's).
_SPLIT_B = 65
# Rejection rounds before an unlinked partner is drawn from an explicit list: a round keeps a
# draw with probability 1 - degree / n, so only an object linked to nearly all of the other
# modality gets there.
_ROUNDS = 64


def check_links(value: Any, sizes: tuple[int, int]) -> np.ndarray:
    """``value`` as int64 (m, 2) links, or a ``ValueError`` (the problem, without a field name)
    naming the link and the column: shape, dtype, none, out of range, repeated."""
    links = np.asarray(value)
    if links.ndim != 2 or links.shape[1] != 2:
        raise ValueError(
            f"expected a 2-d array (n_links, 2) of (row of XA, row of XB), got shape {links.shape}"
        )
    if links.size and links.dtype.kind not in "iu":
        raise ValueError(
            f"expected integer rows of XA and XB, got dtype {links.dtype} (store the links as "
            "integers)"
        )
    if not len(links):
        raise ValueError(
            "no links (shape (0, 2)); linked pairs, triplets and the evaluation are drawn from them"
        )
    links = links.astype(np.int64)
    for column, n in enumerate(sizes):
        out = (links[:, column] < 0) | (links[:, column] >= n)
        if out.any():
            k = int(np.argmax(out))
            raise ValueError(
                f"link {k} (row {k}), column {column}: {links[k, column]} is not a row of "
                f"{_FEATURES[column]}, which has rows [0, {n})"
            )
    keys = link_keys(links, sizes[1])
    order = np.argsort(keys, kind="stable")
    repeats = order[1:][keys[order][1:] == keys[order][:-1]]
    if len(repeats):
        k1 = int(repeats.min())
        k0 = int(np.flatnonzero(keys == keys[k1])[0])
        raise ValueError(
            f"link {k1} repeats link {k0}: ({links[k1, 0]}, {links[k1, 1]}); each linked pair once"
        )
    return links


def link_keys(links: np.ndarray, n_b: int) -> np.ndarray:
    """One int64 per link (i, j), ``i * n_b + j``: equal for equal links, ordered as (i, j)."""
    return links[:, 0] * np.int64(n_b) + links[:, 1]


class PerModality:
    """``sizes`` and ``dims`` of what holds one array of objects per modality, ``X``."""

    X: tuple[np.ndarray, np.ndarray]

    @property
    def sizes(self) -> tuple[int, int]:
        """The objects of each modality, (n_a, n_b)."""
        return (len(self.X[0]), len(self.X[1]))

    @property
    def dims(self) -> tuple[int, int]:
        """The features of an object in each modality, (d_a, d_b)."""
        return (self.X[0].shape[1], self.X[1].shape[1])


@dataclass(frozen=True)
class LinkedObjects(PerModality):
    """Objects of two modalities, each of its own, and the links between them.

    ``names``: the two modalities' names; ``X``: float32 (n_a, d_a) and (n_b, d_b), one row per
    object of each; ``links``: int64 (m, 2), each a linked (row of A, row of B), no pair twice;
    ``dataset``: where the objects come from. Construction checks the shapes and the links
    (``ValueError`` naming the field, the link and the column).

    >>> objects = LinkedObjects(("drug", "target"), (np.zeros((3, 2)), np.ones((2, 4))),
    ...                         [[0, 1], [2, 1], [2, 0]])
    >>> objects.sizes, objects.dims, objects.n_links
    ((3, 2), (2, 4), 3)
    >>> LinkedObjects(("drug", "target"), (np.zeros((3, 2)), np.ones((2, 4))), [[0, 2]])
    Traceback (most recent call last):
    ...
    ValueError: links: link 0 (row 0), column 1: 2 is not a row of XB, which has rows [0, 2)
    """

    names: tuple[str, str]
    X: tuple[np.ndarray, np.ndarray]
    links: np.ndarray
    dataset: str = "arrays"

    def __post_init__(self) -> None:
        names = check_two_names(self.names, "names")
        if len(self.X) != 2:
            raise ValueError(f"X: expected one array per modality (2), got {len(self.X)}")
        X = tuple(np.asarray(x, dtype=np.float32) for x in self.X)
        for name, x in zip(names, X, strict=True):
            if x.ndim != 2:
                raise ValueError(
                    f"X: modality {name!r} must have shape (n_objects, d), got {x.shape}"
                )
        try:
            links = check_links(self.links, (len(X[0]), len(X[1])))
        except ValueError as e:
            raise ValueError(f"links: {e}") from None
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "links", links)

    @property
    def n_links(self) -> int:
        return len(self.links)


def load_linked(path: str | os.PathLike[str]) -> LinkedObjects:
    """The user's own linked objects, from an ``.npz``.

    The archive holds ``XA`` (n_a, d_a) and ``XB`` (n_b, d_b), numbers, one row per object of
    each modality; ``links`` (m, 2), integers, each a linked (row of XA, row of XB), each pair
    once; optionally ``names``, the two modalities' names (default ``"a"``, ``"b"``). Features
    are kept as given, as float32, not rescaled. The dataset is named after the file. It holds
    no ``y``: a file with class labels is :func:`oahu.streams.views.load_paired`'s.

    Errors (``FileNotFoundError`` for a missing file, else ``ValueError``) start with the file
    and name the array: a missing array, one that is not 2-d, a non-finite value (with its row
    and column), a link outside the rows of XA or XB (with the link and the column), a link
    given twice, no links, fewer than 2 objects in a modality (the protocol splits each
    modality's objects into development and test objects).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "drugs.npz"
    >>> np.savez(path, XA=np.eye(3), XB=np.ones((2, 4)), links=[[0, 1], [2, 1]],
    ...          names=["drug", "target"])
    >>> objects = load_linked(path)
    >>> objects.names, objects.sizes, objects.links.tolist(), objects.dataset
    (('drug', 'target'), (3, 2), [[0, 1], [2, 1]], 'drugs')
    >>> np.savez(path, XA=np.eye(3), XB=np.ones((2, 4)), links=[[0, 1], [2, 1], [0, 1]])
    >>> load_linked(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../drugs.npz: array 'links': link 2 repeats link 0: (0, 1); each linked pair once
    """
    archive = read_paired_archive(path, "XA, XB and links")
    if "y" in archive.arrays:
        raise ValueError(
            f"{archive.shown}: holds class labels (array 'y'): paired views of labelled "
            "objects, read by load_paired; linked objects hold XA, XB and links"
        )
    return linked_objects(archive)


def linked_objects(archive: PairedArchive) -> LinkedObjects:
    """The linked objects an archive of ``XA``, ``XB`` and ``links`` holds, checked as
    :func:`load_linked` documents."""
    archive.require(
        _LINKED_ARRAYS,
        "linked data needs XA and XB (the objects of each modality) and links (linked (row of "
        "XA, row of XB) pairs)",
    )
    shown, X = archive.shown, []
    for key in _FEATURES:
        archive.check_matrix(key)
        try:
            X.append(features_from_array(archive.arrays[key]))
        except ValueError as e:
            raise ValueError(f"{shown}: array {key!r}: {str(e).partition(': ')[2]}") from None
        if len(X[-1]) < 2:
            raise ValueError(
                f"{shown}: array {key!r}: {len(X[-1])} object; the protocol splits each "
                "modality's objects 1:1 into development and test objects, which takes at least 2"
            )
    names = archive.names()
    try:  # the features and names are checked: what LinkedObjects refuses is the links
        return LinkedObjects(names, (X[0], X[1]), archive.arrays["links"], archive.dataset)
    except ValueError as e:
        problem = str(e).removeprefix("links: ")
        raise ValueError(f"{shown}: array 'links': {problem}") from None


def load_cross_modal_data(path: str | os.PathLike[str]) -> TwoViews | LinkedObjects:
    """The user's own cross-modal data, either kind, told by its arrays: ``XA``, ``XB`` and
    ``y`` are two views of labelled objects (:func:`oahu.streams.views.load_paired`), ``XA``,
    ``XB`` and ``links`` objects linked across two modalities (:func:`load_linked`). A file with
    both ``y`` and ``links``, or neither, is a ``ValueError`` saying so.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "both.npz"
    >>> np.savez(path, XA=np.eye(2), XB=np.eye(2), y=[0, 1], links=[[0, 0]])
    >>> load_cross_modal_data(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../both.npz: holds both 'y' (class labels) and 'links' (linked pairs); ...
    """
    archive = read_paired_archive(path, "XA, XB and y or links")
    kinds = [key for key in ("y", "links") if key in archive.arrays]
    if len(kinds) == 2:
        raise ValueError(
            f"{archive.shown}: holds both 'y' (class labels) and 'links' (linked pairs); a file "
            "holds one: y for two views of the same objects (rows of XA and XB aligned), links "
            "for objects of each modality linked across"
        )
    if not kinds:
        held = ", ".join(map(repr, archive.present)) if archive.present else "none"
        raise ValueError(
            f"{archive.shown}: holds neither 'y' nor 'links'; cross-modal data is XA, XB and y "
            "(two views of the same labelled objects, rows aligned) or XA, XB and links "
            f"(objects of each modality, links (row of XA, row of XB)); the archive holds {held}"
        )
    if kinds == ["y"]:
        archive.require(("XA", "XB"), "paired data needs XA, XB (rows aligned objects) and y")
        return paired_views(archive)
    return linked_objects(archive)


# ---------------------------------------------------------------------- the protocol's draws
def split_linked(
    sizes: tuple[int, int], links: np.ndarray, seed: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Each modality's objects split 1:1 into development and test objects, ((dev_a, test_a),
    (dev_b, test_b)), int64 ascending; the development part gets the extra object when odd.

    A's objects by :func:`oahu.streams.protocol.split_dev_test` (the seeded shuffle of a single
    view's items); B's by their links: ordered by the share of their links that go to A's
    development objects (1/2 for an object without links), largest first, ties in a seeded
    random order, the first half development. Only a link between two development objects or
    two test objects serves (a development link for constraints, a test link for the
    evaluation); following A's split, B's keeps as many as a 1:1 split can, all of them when
    every object has one link (an image and its caption).

    >>> (dev_a, test_a), (dev_b, test_b) = split_linked((4, 4), np.array([[0, 3], [1, 2],
    ...                                                 [2, 1], [3, 0]]), seed=0)
    >>> pairs = {0: 3, 1: 2, 2: 1, 3: 0}
    >>> sorted(pairs[i] for i in dev_a) == dev_b.tolist()  # every link kept
    True
    """
    n_a, n_b = sizes
    for name, n in zip(_FEATURES, sizes, strict=True):
        if n < 2:
            raise ValueError(
                f"{name}: {n} object; the protocol splits each modality's objects 1:1 into "
                "development and test objects, which takes at least 2"
            )
    dev_a, test_a = split_dev_test(n_a, seed)
    is_dev_a = np.zeros(n_a, dtype=bool)
    is_dev_a[dev_a] = True
    degree = np.bincount(links[:, 1], minlength=n_b)
    to_dev = np.bincount(links[:, 1], weights=is_dev_a[links[:, 0]], minlength=n_b)
    share = np.where(degree > 0, to_dev / np.maximum(degree, 1), 0.5)
    order = np.lexsort((_rng(seed, _SPLIT_B).random(n_b), -share))
    n_dev_b = (n_b + 1) // 2
    return (
        (np.sort(dev_a), np.sort(test_a)),
        (np.sort(order[:n_dev_b]), np.sort(order[n_dev_b:])),
    )


class _DevGraph:
    """The development links (both objects development objects) and lookups in them."""

    def __init__(
        self, links: np.ndarray, sizes: tuple[int, int], dev: tuple[np.ndarray, np.ndarray]
    ) -> None:
        self.dev, self.n_b = dev, sizes[1]
        is_dev = [np.zeros(n, dtype=bool) for n in sizes]
        for mask, objects in zip(is_dev, dev, strict=True):
            mask[objects] = True
        self.links = links[is_dev[0][links[:, 0]] & is_dev[1][links[:, 1]]]
        self.keys = np.sort(link_keys(self.links, self.n_b))

    def linked(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each (a, b) is a development link."""
        if not len(self.keys):
            return np.zeros(len(a), dtype=bool)
        keys = a * np.int64(self.n_b) + b
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return self.keys[at] == keys

    def unlinked(self, fixed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        """For each object of ``fixed`` (modality m), a development object of the other
        modality not linked to it, uniform among those (each has one)."""
        pool = self.dev[1 - m]
        out = pool[rng.integers(len(pool), size=len(fixed))]

        def bad(rows: np.ndarray) -> np.ndarray:
            pairs = (fixed[rows], out[rows]) if m == 0 else (out[rows], fixed[rows])
            return rows[self.linked(*pairs)]

        redraw = bad(np.arange(len(fixed)))
        for _ in range(_ROUNDS):
            if not len(redraw):
                return out
            out[redraw] = pool[rng.integers(len(pool), size=len(redraw))]
            redraw = bad(redraw)
        for row in redraw.tolist():  # nearly saturated objects: from the explicit list
            same = np.full(len(pool), fixed[row])
            free = pool[~self.linked(*((same, pool) if m == 0 else (pool, same)))]
            out[row] = free[rng.integers(len(free))]
        return out


def _counts(values: np.ndarray, objects: np.ndarray) -> np.ndarray:
    """How often each of ``objects`` occurs in ``values``."""
    ordered = np.sort(values)
    return np.searchsorted(ordered, objects, side="right") - np.searchsorted(
        ordered, objects, side="left"
    )


def draw_linked(
    links: np.ndarray,
    sizes: tuple[int, int],
    dev: tuple[np.ndarray, np.ndarray],
    is_pair: np.ndarray,
    linked: np.ndarray,
    first_modality: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """The objects of every constraint, (N, 3), each in its item's modality's own rows: a
    pair's first object in ``first_modality``, its second in the other; a triplet's anchor in
    ``first_modality``, its positive and negative in the other.

    Only development links (both objects development objects, ``dev``) are drawn from: a linked
    pair is a development link, uniform; an unlinked pair a development object of A and one of
    B that are not linked, uniform over such pairs; a triplet's anchor and positive a
    development link, uniform among those whose anchor has a development object of the other
    modality it is not linked to, and its negative uniform among those.
    """
    graph = _DevGraph(links, sizes, dev)
    n = len(is_pair)
    out = np.full((n, 3), -1, dtype=np.int64)
    in_a = first_modality == 0
    rows = np.flatnonzero(is_pair & linked)
    if len(rows):
        if not len(graph.links):
            raise ValueError(_NO_DEVELOPMENT_LINK.format("a linked pair"))
        link = graph.links[rng.integers(len(graph.links), size=len(rows))]
        out[rows, :2] = np.where(in_a[rows, None], link, link[:, ::-1])
    rows = np.flatnonzero(is_pair & ~linked)
    if len(rows):
        # How many development objects of B each development object of A is not linked to.
        free = len(dev[1]) - _counts(graph.links[:, 0], dev[0])
        if free.sum() == 0:
            raise ValueError(
                "links: every development object of A is linked to every development object "
                "of B, and an unlinked pair needs two that are not"
            )
        a = dev[0][rng.choice(len(dev[0]), size=len(rows), p=free / free.sum())]
        b = graph.unlinked(a, 0, rng)
        out[rows, :2] = np.where(in_a[rows, None], np.stack([a, b], 1), np.stack([b, a], 1))
    for m in (0, 1):
        rows = np.flatnonzero(~is_pair & (first_modality == m))
        if not len(rows):
            continue
        anchors = graph.links[:, m]
        # An anchor linked to every development object of the other modality has no negative.
        open_ = _counts(anchors, anchors) < len(dev[1 - m])
        candidates = graph.links[open_]
        if not len(graph.links):
            raise ValueError(_NO_DEVELOPMENT_LINK.format("a triplet"))
        if not len(candidates):
            name = _FEATURES[m]
            raise ValueError(
                f"links: every development object of {name} with a development link is linked "
                "to every development object of the other modality, so no triplet anchored "
                f"in {name} has a negative"
            )
        link = candidates[rng.integers(len(candidates), size=len(rows))]
        out[rows, 0], out[rows, 1] = link[:, m], link[:, 1 - m]
        out[rows, 2] = graph.unlinked(link[:, m], m, rng)
    return out
