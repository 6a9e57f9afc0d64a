"""The image shape of items whose features are the pixels of a greyscale image.

Features of the image datasets are pixel values in row-major order (digits: 8 x 8, MNIST and
Fashion-MNIST: 28 x 28), so a feature vector reshaped to ``(height, width)`` is the picture.
Stream files, item files and the service record that shape, optionally, so that tools can show
such items as pictures; features that are not a plain image (statistics, several views joined)
have none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ImageShape", "check_image_shape"]

ImageShape = tuple[int, int]


def check_image_shape(
    value: Any, n_features: int | None = None, name: str = "image_shape"
) -> ImageShape | None:
    """``value`` as ``(height, width)``, two positive ints whose product is ``n_features`` (when
    given), or None for None; ``ValueError`` naming ``name`` otherwise.

    Accepts any sequence or array of two whole numbers (an .npz holds it as an int array, JSON
    as a list).

    >>> check_image_shape([8, 8], 64), check_image_shape(np.array([28, 28]))
    ((8, 8), (28, 28))
    >>> check_image_shape(None) is None
    True
    >>> check_image_shape((8, 8), 63)
    Traceback (most recent call last):
    ...
    ValueError: image_shape: (8, 8) has 64 pixels, but the items have 63 features
    >>> check_image_shape([8, True])
    Traceback (most recent call last):
    ...
    ValueError: image_shape: expected (height, width), two positive integers, got [8, True]
    """
    if value is None:
        return None
    items = np.asarray(value, dtype=object).ravel().tolist() if np.ndim(value) else None
    ok = (
        items is not None
        and np.ndim(value) == 1
        and len(items) == 2
        and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in items)
        and all(v > 0 for v in items)
    )
    if not ok:
        shown = value.tolist() if isinstance(value, np.ndarray) else value
        raise ValueError(
            f"{name}: expected (height, width), two positive integers, got {shown!r}"[:300]
        )
    assert items is not None
    shape = (int(items[0]), int(items[1]))
    if n_features is not None and shape[0] * shape[1] != n_features:
        raise ValueError(
            f"{name}: {shape} has {shape[0] * shape[1]} pixels, but the items have "
            f"{n_features} features"
        )
    return shape
