"""The paper's benchmark streams built from a labelled dataset (Section 4.3.2 and 4.5;
docs/algorithms.md, "Benchmark streams"; docs/datasets.md): a seeded split, then constraints
from the development items by the closure or the random protocol."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from oahu.checks import check_choice, check_int
from oahu.streams.closure import PROTOCOL_KINDS
from oahu.streams.dataset import Dataset
from oahu.streams.dataset_arrays import dataset_from_arrays
from oahu.streams.datasets import load_dataset
from oahu.streams.protocol import (
    SPLITS,
    closure_stream,
    random_pairs,
    random_triplets,
    split_classes,
    split_dev_test,
)
from oahu.streams.stream_file import FORMAT_VERSION, KINDS, PROTOCOLS, ConstraintStream

__all__ = ["build_stream", "protocol_meta"]


def build_stream(*args: Any, **kwargs: Any) -> ConstraintStream:
    """The paper's benchmark stream (docs/algorithms.md) for a dataset: a seeded split into
    development and test items, then ``n_constraints`` constraints from the development items
    by ``protocol``.

    ``build_stream(dataset, n_constraints, seed=0, kind="triplet", protocol="closure", *,
    split="items", label_column=None)``, or ``build_stream(X, y, n_constraints, seed=0, ...)``.

    The dataset is a built-in name (:data:`oahu.streams.datasets.DATASETS`), the path of the
    user's labelled file (``.npz``, ``.csv``, ``.tsv``, ``.parquet``; ``label_column`` names a
    table's label column), a :class:`Dataset`, or two arrays ``X, y`` in its place.

    ``split="items"`` is the classification protocol, a 1:1 split of the items;
    ``split="classes"`` the class-disjoint retrieval protocol (Section 4.5): constraints from the
    items of half of the classes, evaluation (Recall@K, leave-one-out kNN) on the other half.

    >>> s = build_stream("digits", n_constraints=100, seed=0)
    >>> len(s), s.kind, len(s.dev_idx), s.meta["n_seeds"]
    (100, 'triplet', 899, 50)
    >>> X = np.random.default_rng(0).normal(size=(40, 3))
    >>> s = build_stream(X, np.arange(40) % 4, 20, seed=1, split="classes")
    >>> len(s), sorted(set(s.y[s.dev_idx].tolist())), s.meta["split"]
    (20, [0, 3], 'classes')
    """
    if args and not isinstance(args[0], (str, os.PathLike, Dataset)):
        if len(args) < 2:
            raise TypeError("build_stream(X, y, n_constraints, ...): y is missing")
        if "label_column" in kwargs:
            raise TypeError("build_stream: label_column is for a dataset file, not arrays")
        return _build_stream(dataset_from_arrays(args[0], args[1]), *args[2:], **kwargs)
    return _build_stream(*args, **kwargs)


def _build_stream(
    dataset: str | os.PathLike[str] | Dataset,
    n_constraints: int,
    seed: int = 0,
    kind: str = "triplet",
    protocol: str = "closure",
    *,
    split: str = "items",
    label_column: str | None = None,
) -> ConstraintStream:
    check_choice(kind, "kind", KINDS)
    if kind not in PROTOCOL_KINDS:
        # What a quadruplet says (a pair closer than another pair) needs more than class labels.
        raise ValueError(
            f"kind: the paper's protocol builds {' or '.join(PROTOCOL_KINDS)} streams, got "
            f"{kind!r}; a quadruplet stream comes from a label hierarchy "
            "(oahu.streams.build_hierarchy_stream)"
        )
    check_choice(protocol, "protocol", PROTOCOLS)
    check_choice(split, "split", SPLITS)
    check_int(n_constraints, "n_constraints", minimum=0)
    if isinstance(dataset, Dataset):
        if label_column is not None:
            raise ValueError("label_column: only for a dataset file, not a Dataset")
        ds = dataset
    else:
        ds = load_dataset(os.fspath(dataset), label_column)
    source = ds.name if isinstance(dataset, Dataset) else os.fspath(dataset)
    if split == "classes":
        dev_idx, test_idx = split_classes(ds.y, seed)
    else:
        dev_idx, test_idx = split_dev_test(ds.n_items, seed)
    similar = None
    try:
        if len(dev_idx) < 2:
            raise ValueError("a constraint needs at least 2 development items")
        if protocol == "random":
            sampler = random_triplets if kind == "triplet" else random_pairs
            drawn = sampler(ds.y, dev_idx, n_constraints, seed)
            constraints, similar = (drawn, None) if kind == "triplet" else drawn
            n_seeds = len(constraints)
        else:
            closure = closure_stream(ds.y, dev_idx, n_constraints, seed, kind)
            constraints, similar = closure.constraints, closure.similar
            n_seeds = closure.is_seed.sum()
    except ValueError as error:
        # The protocol sees only index arrays; the user needs to know which dataset and which
        # split were too small, and what they held.
        raise ValueError(
            f"{source}: {_development_half(ds.y, dev_idx, split, seed)}: {error}"
        ) from error
    meta = protocol_meta(ds.name, seed, protocol, n_constraints, n_seeds)
    if split == "classes":
        meta["split"] = split
        meta["seen_classes"] = np.unique(ds.y[dev_idx]).tolist()
    return ConstraintStream(
        ds.X, ds.y, dev_idx, test_idx, kind, constraints, similar, meta, image_shape=ds.image_shape
    )


def _development_half(labels: np.ndarray, dev_idx: np.ndarray, split: str, seed: int) -> str:
    """What the development items of a split hold, as an error message says it.

    >>> _development_half(np.array([0, 1, 1, 2]), np.array([0, 1, 2]), "items", 3)
    'the development half (items split, seed 3) holds 3 items of 2 classes, at most 2 of one class'
    """
    counts = np.unique(labels[dev_idx], return_counts=True)[1]
    largest = int(counts.max()) if len(counts) else 0
    items = "item" if len(dev_idx) == 1 else "items"
    classes = "class" if len(counts) == 1 else "classes"
    return (
        f"the development half ({split} split, seed {seed}) holds {len(dev_idx)} {items} of "
        f"{len(counts)} {classes}, at most {largest} of one class"
    )


def protocol_meta(
    dataset: str, seed: int, protocol: str, n_constraints: int, n_seeds: int
) -> dict[str, Any]:
    """The meta of a stream built by the paper's protocol (streams/FORMAT.md)."""
    return {
        "format_version": FORMAT_VERSION,
        "dataset": dataset,
        "seed": int(seed),
        "protocol": protocol,
        "n_constraints": int(n_constraints),
        "n_seeds": int(n_seeds),
    }
