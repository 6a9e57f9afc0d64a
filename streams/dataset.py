"""The labelled dataset every stream is built from: float32 features and class codes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oahu.streams.image_shape import ImageShape, check_image_shape

__all__ = ["Dataset", "read_only"]


@dataclass(frozen=True)
class Dataset:
    """A labelled dataset: ``X`` float32 (n, d), ``y`` int64 (n,) class codes 0..C-1.

    The built-in sets have features in [0, 1] (:mod:`oahu.streams.datasets`); a user's own
    file keeps its values (:mod:`oahu.streams.dataset_files`).

    >>> ds = Dataset("tiny", read_only(np.zeros((3, 2), np.float32)), read_only(np.arange(3)))
    >>> ds.n_items, ds.n_features, ds.class_names, ds.image_shape
    (3, 2, (), None)

    ``image_shape`` (height, width) is set for the image sets, whose features are the pixels in
    row-major order (:mod:`oahu.streams.image_shape`).
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    # The original label of each class code, where the source named them (e.g. a CSV's "cat",
    # "dog"); empty when the labels were integer codes already.
    class_names: tuple[str, ...] = ()
    image_shape: ImageShape | None = None

    def __post_init__(self) -> None:
        shape = check_image_shape(self.image_shape, self.X.shape[1] if self.X.ndim == 2 else None)
        object.__setattr__(self, "image_shape", shape)  # frozen: the checked tuple, once

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
