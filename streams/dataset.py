"""The labelled dataset every stream is built from: float32 features and class codes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Dataset", "read_only"]


@dataclass(frozen=True)
class Dataset:
    """A labelled dataset: ``X`` float32 (n, d), ``y`` int64 (n,) class codes 0..C-1.

    The built-in sets have features in [0, 1] (:mod:`oahu.streams.datasets`); a user's own
    file keeps its values (:mod:`oahu.streams.dataset_files`).

    >>> ds = Dataset("tiny", read_only(np.zeros((3, 2), np.float32)), read_only(np.arange(3)))
    >>> ds.n_items, ds.n_features, ds.class_names
    (3, 2, ())
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    # The original label of each class code, where the source named them (e.g. a CSV's "cat",
    # "dog"); empty when the labels were integer codes already.
    class_names: tuple[str, ...] = ()

    @property
    def n_items(self) -> int:
        return len(self.y)

    @property
    def n_features(self) -> int:
        return self.X.shape[1]


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` itself, made read-only: datasets are shared, one copy per process."""
    a.setflags(write=False)
    return a
