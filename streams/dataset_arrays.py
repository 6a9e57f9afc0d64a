"""Arrays checked into a :class:`Dataset`: finite float32 features, labels as class codes.

The checks and the label coding every source of labelled data shares: arrays given in Python
(:func:`dataset_from_arrays`), the user's files (:mod:`oahu.streams.dataset_files`) and the
packaged benchmarks (:mod:`oahu.streams.packaged_datasets`). Labels become the codes 0..C-1 in
their sorted order (text labels that are all integers sorted as numbers), and ``class_names``
keeps each code's label, empty when the labels were the codes already.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from oahu.streams.dataset import Dataset, read_only

__all__ = [
    "LabelError",
    "class_codes",
    "codes_from_array",
    "dataset_from_arrays",
    "features_from_array",
    "float32_cells",
    "is_missing_text",
]

# A file's label that is exactly an integer in decimal; int() alone would also take "1_000",
# " 7" or non-ASCII digits, which a label column does not mean as numbers.
_INTEGER = re.compile(r"[+-]?[0-9]+")


class LabelError(ValueError):
    """A bad label at 0-based position ``index`` (None: the labels as a whole)."""

    def __init__(self, index: int | None, problem: str) -> None:
        super().__init__(problem)
        self.index = index
        self.problem = problem


def dataset_from_arrays(X: Any, y: Any, name: str = "arrays") -> Dataset:
    """A :class:`Dataset` from features ``X`` (n, d) and labels ``y`` (n,), checked.

    ``X``: finite numbers, at least one column; kept as given (not rescaled), copied to a
    float32 C-contiguous array. ``y``: one hashable label per row (integers, strings, any
    numpy scalars), none missing (None, NaN, empty string), at least two distinct. Labels
    become the codes 0..C-1 in their sorted order, and ``class_names`` their text in code
    order; labels that are the integers 0..C-1 already keep ``class_names`` empty. Both
    arrays are returned read-only. Errors name the argument and the 0-based position.

    >>> ds = dataset_from_arrays([[0.5, 2.0], [1.0, 0.0], [3.0, 1.5]], ["dog", "cat", "dog"])
    >>> ds.X.dtype.name, ds.y.tolist(), ds.class_names
    ('float32', [1, 0, 1], ('cat', 'dog'))
    >>> dataset_from_arrays([[0.5], [1.0]], [1, 0]).class_names
    ()
    >>> dataset_from_arrays([[0.5], [float("nan")]], [1, 0])
    Traceback (most recent call last):
    ...
    ValueError: X: non-finite value nan at row 1, column 0
    >>> dataset_from_arrays([[0.5], [1.0]], [7, 7])
    Traceback (most recent call last):
    ...
    ValueError: y: a single class (7); metric learning needs at least 2
    """
    if not isinstance(name, str):
        raise ValueError(f"name: must be a string, got {name!r}")
    features = features_from_array(X)
    labels = _labels_array(y)
    if len(labels) != len(features):
        raise ValueError(
            f"y: expected 1 label per row of X ({len(features)} rows), got {len(labels)}"
        )
    try:
        codes, class_names = _codes_from_array(labels)
    except LabelError as e:
        where = "" if e.index is None else f" at row {e.index}"
        raise ValueError(f"y: {e.problem}{where}") from None
    return Dataset(name, read_only(features), read_only(codes), class_names)


def features_from_array(X: Any) -> np.ndarray:
    """``X`` as a new float32 (n, d) array, or a ValueError naming ``X`` and the offending cell
    (:func:`dataset_from_arrays`'s checks of its features, for features without labels).

    >>> features_from_array([[1, 2], [3, float("inf")]])
    Traceback (most recent call last):
    ...
    ValueError: X: non-finite value inf at row 1, column 1
    """
    try:
        arr = np.asarray(X)
    except (ValueError, TypeError) as e:
        raise ValueError(f"X: not a 2-d array of numbers: {_ragged(X) or e}") from None
    if arr.ndim != 2:
        raise ValueError(f"X: expected a 2-d array (n_items, n_features), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"X: expected at least 1 row and 1 column, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        # Object, string or complex arrays: name the first cell that is not a real number
        # rather than letting a conversion turn None into nan or "1.5" into 1.5.
        for (row, col), value in np.ndenumerate(arr):
            if not _is_real(value):
                hint = ""
                if arr.dtype.kind in "US":
                    hint = f" (X holds text, dtype {arr.dtype}: convert it to numbers first)"
                raise ValueError(
                    f"X: non-numeric value {_plain(value)!r} at row {row}, column {col}{hint}"
                )
    try:
        wide = arr.astype(np.float64)
    except (OverflowError, TypeError, ValueError) as e:
        raise ValueError(f"X: not convertible to float: {e}") from None
    features, bad = float32_cells(wide)
    if bad is not None:
        row, col, overflow = bad
        value, where = _plain(arr[row, col]), f"at row {row}, column {col}"
        if overflow:
            raise ValueError(f"X: value {value!r} {where} is outside the float32 range")
        raise ValueError(f"X: non-finite value {value!r} {where}")
    return features


def float32_cells(wide: np.ndarray) -> tuple[np.ndarray, tuple[int, int, bool] | None]:
    """float64 cells (n, d) as the float32 the learners take, and the first cell that is not a
    finite float32 as ``(row, column, overflow)``, or None; ``overflow``: the cell is a finite
    number beyond float32's range (which would silently become inf), else it is nan or inf.

    >>> float32_cells(np.array([[1.0, 2.0], [3.0, 1e300]]))[1]
    (1, 1, True)
    """
    with np.errstate(over="ignore"):  # reported, with the cell, by the caller
        cells = np.array(wide, dtype=np.float32, order="C")
    bad = ~np.isfinite(cells)
    if not bad.any():
        return cells, None
    row, col = (int(i) for i in np.argwhere(bad)[0])
    return cells, (row, col, math.isfinite(wide[row, col]))


def is_missing_text(label: str) -> bool:
    """Whether a label read as text is missing: blank, or "nan" as numpy writes a missing one
    (pandas writes "")."""
    text = label.strip()
    return not text or text.lower() == "nan"


def _ragged(X: Any) -> str | None:
    """Which row of a nested sequence ``X`` differs in length from row 0, if one does."""
    try:
        lengths = [len(row) for row in X]
    except TypeError:
        return None
    for row, length in enumerate(lengths):
        if length != lengths[0]:
            return f"row {row} has {length} values, row 0 has {lengths[0]}"
    return None


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating | np.bool_)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds, for a message's repr."""
    return value.item() if isinstance(value, np.generic) else value


def _labels_array(y: Any) -> np.ndarray:
    try:
        labels = np.asarray(y)
    except (ValueError, TypeError) as e:
        raise ValueError(f"y: not a 1-d array of labels: {e}") from None
    if labels.ndim != 1:
        raise ValueError(f"y: expected a 1-d array of labels, got shape {labels.shape}")
    if labels.dtype.kind == "V":
        raise ValueError(f"y: expected integers or strings as labels, got dtype {labels.dtype}")
    return labels


def codes_from_array(y: Any) -> tuple[np.ndarray, tuple[str, ...]]:
    """Codes 0..C-1 in the sorted order of the distinct labels ``y`` (a 1-d array of
    integers, text or any numpy scalars), and their names; a :class:`LabelError` naming the
    0-based position of a missing label.

    >>> codes, names = codes_from_array(np.array([2.5, 1.0, 2.5]))
    >>> codes.tolist(), names
    ([1, 0, 1], ('1.0', '2.5'))
    """
    return _codes_from_array(_labels_array(y))


def _codes_from_array(labels: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Codes 0..C-1 in the sorted order of the distinct ``labels``, and their names."""
    missing = _missing(labels)
    if missing.any():
        raise LabelError(int(np.argmax(missing)), "missing label")
    try:
        distinct, codes = np.unique(labels, return_inverse=True)
    except TypeError:
        kinds = sorted({type(v).__name__ for v in labels})
        raise LabelError(
            None, f"labels of types {' and '.join(kinds)} cannot be sorted together"
        ) from None
    if len(distinct) < 2:
        raise LabelError(
            None, f"a single class ({_plain(distinct[0])!r}); metric learning needs at least 2"
        )
    codes = codes.reshape(-1).astype(np.int64)
    if _are_codes(distinct):
        return codes, ()
    names = tuple(_text(v) for v in distinct)
    if len(set(names)) != len(names):
        # Distinct labels that print the same would merge into one class when written out.
        seen: dict[str, Any] = {}
        for value, text in zip(distinct, names, strict=True):
            if text in seen:
                raise LabelError(
                    None,
                    f"labels {_plain(seen[text])!r} and {_plain(value)!r} are distinct "
                    f"but both read {text!r}",
                )
            seen[text] = value
    return codes, names


def _missing(labels: np.ndarray) -> np.ndarray:
    """Which labels are missing: None, NaN (or NaT), or blank text."""
    kind = labels.dtype.kind
    if kind in "fc":
        return np.isnan(labels)
    if kind in "mM":
        return np.isnat(labels)
    if kind in "US":
        return np.char.str_len(np.char.strip(labels)) == 0
    if kind == "O":
        return np.fromiter((_is_missing(v) for v in labels), dtype=bool, count=len(labels))
    return np.zeros(len(labels), dtype=bool)


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str | bytes):
        return not value.strip()
    if isinstance(value, float | np.floating):
        return math.isnan(value)
    return False


def _are_codes(distinct: np.ndarray) -> bool:
    """Whether the sorted distinct labels are exactly the integers 0..C-1 (bools are not)."""
    if distinct.dtype.kind == "O":
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in distinct):
            return False
    elif distinct.dtype.kind not in "iu":
        return False
    return bool(np.array_equal(distinct.astype(object), np.arange(len(distinct))))


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return str(_plain(value))


def class_codes(labels: Sequence[str], where: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Class codes 0..C-1 for text labels, sorted as integers when all are, else as text, and
    the label of each code (empty when the labels are the codes already); ``where`` starts the
    error for a single class.

    >>> codes, names = class_codes(["10", "9", "10"], "t.csv")
    >>> codes.tolist(), names
    ([1, 0, 1], ('9', '10'))
    """
    distinct = set(labels)
    if all(_INTEGER.fullmatch(s) for s in distinct):
        # Ties by text keep "07" and "7" apart: they are different labels in the file.
        order = sorted(distinct, key=lambda s: (int(s), s))
    else:
        order = sorted(distinct)
    if len(order) < 2:
        raise ValueError(
            f"{where}: a single class ({order[0]!r}); metric learning needs at least 2"
        )
    index = {label: code for code, label in enumerate(order)}
    codes = np.fromiter((index[s] for s in labels), dtype=np.int64, count=len(labels))
    if order == [str(code) for code in range(len(order))]:
        return codes, ()
    return codes, tuple(order)
