"""A user's own labelled dataset, read from a file or taken from arrays, as a :class:`Dataset`.

:func:`read_dataset` picks the format by the file's suffix (case-insensitive):

* ``.npz``: a NumPy archive with an array ``X`` (n, d) of numbers and an array ``y`` (n,) of
  labels (integers or strings; arrays of Python objects are not read, as ``np.load`` with
  ``allow_pickle=False``).
* ``.csv`` (comma-separated) and ``.tsv`` (tab-separated), optionally gzipped (``.csv.gz``,
  ``.tsv.gz``), UTF-8: a header row naming the columns is required; the label column is
  ``label`` unless ``label_column`` names another, and every other column is a feature, whose
  cells must be finite numbers. A label cell that is empty or ``nan`` (as pandas and numpy
  write a missing value) is a missing label, an error. Blank lines are skipped; whitespace
  around a cell is ignored. ::

      sepal_length,sepal_width,label
      5.1,3.5,setosa
      7.0,3.2,versicolor

* ``.parquet``: a table whose label column follows the same rules, and whose other columns are
  numeric (read with pyarrow, which is needed only for this format).

Labels become the class codes 0..C-1 in the sorted order of the distinct labels; a file's labels
are text, compared as integers when every one of them is an integer (``"9"`` before ``"10"``).
``class_names`` keeps the original label of each code, and is empty when the labels were the
integers 0..C-1 already. Features are kept as given, as float32: nothing is rescaled (unlike the
built-in datasets of :mod:`oahu.streams.datasets`, scaled to [0, 1]), since scaling belongs to
the learners' input preprocessing (:mod:`oahu.preprocessing`), which sees every item the same way.

Every problem raises ``ValueError`` (``FileNotFoundError`` for a missing file) whose message
starts with the file's path, then names the line (1-based line of the file; for parquet, the
1-based row of the table) and the column::

    data.csv: line 17, column 'petal_width': 'abc' is not a number

:func:`oahu.streams.dataset_arrays.dataset_from_arrays` applies the same checks to arrays
(positions are 0-based indices there), and
:func:`~oahu.streams.dataset_writing.write_dataset_csv` writes a dataset back to CSV or TSV,
float32 exactly.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "iris.csv"
>>> _ = path.write_text("a,b,label\\n5.1,3.5,setosa\\n7.0,3.2,versicolor\\n6.3,3.3,setosa\\n")
>>> ds = read_dataset(path)
>>> ds.name, ds.X.shape, ds.y.tolist(), ds.class_names
('iris', (3, 2), [0, 1, 0], ('setosa', 'versicolor'))
"""

from __future__ import annotations

import csv
import gzip
import os
import pickle
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oahu.streams.dataset import Dataset, read_only
from oahu.streams.dataset_arrays import (
    LabelError,
    class_codes,
    codes_from_array,
    dataset_from_arrays,
    float32_cells,
    is_missing_text,
)

__all__ = [
    "DEFAULT_LABEL_COLUMN",
    "SUFFIXES",
    "read_dataset",
]

# The suffixes read_dataset knows, compound ones before the plain ones they end with.
SUFFIXES: tuple[str, ...] = (".csv.gz", ".tsv.gz", ".csv", ".tsv", ".npz", ".parquet")
DELIMITERS = {".csv": ",", ".tsv": "\t", ".csv.gz": ",", ".tsv.gz": "\t"}

DEFAULT_LABEL_COLUMN = "label"

# Cells converted to numbers at a time: one np.array call per block of rows keeps the parsing
# in C (about 10x faster than float() per cell) while holding only a block of strings at once.
BLOCK_CELLS = 1 << 18

_MAX_LISTED = 10  # header columns or archive arrays named in an error before "... N more"


# ------------------------------------------------------------------ files
def read_dataset(path: str | os.PathLike[str], label_column: str | None = None) -> Dataset:
    """The labelled dataset in ``path`` (.npz, .csv, .tsv, .csv.gz, .tsv.gz or .parquet; see
    the module docstring), named after the file without its suffix.

    ``label_column`` names the label column of a csv/tsv/parquet file (default ``"label"``).
    Errors start with ``path`` and name the line (or row) and the column.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "points.tsv"
    >>> _ = path.write_text("x\\ty\\tkind\\n1\\t2\\t10\\n3\\t4\\t9\\n5\\t6\\t10\\n")
    >>> ds = read_dataset(path, label_column="kind")
    >>> ds.name, ds.X.tolist(), ds.y.tolist(), ds.class_names
    ('points', [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [1, 0, 1], ('9', '10'))
    >>> _ = path.write_text("x\\ty\\tkind\\n1\\t2\\t10\\n3\\tfour\\t9\\n")
    >>> read_dataset(path, label_column="kind")
    Traceback (most recent call last):
    ...
    ValueError: .../points.tsv: line 3, column 'y': 'four' is not a number
    """
    shown = os.fspath(path)
    if label_column is not None and not isinstance(label_column, str):
        raise ValueError(f"label_column: must be a column name (a string), got {label_column!r}")
    suffix = suffix_of(shown)
    if suffix is None:
        raise ValueError(
            f"{shown}: unknown file type; read_dataset reads files ending in "
            f"{', '.join(SUFFIXES)} (case-insensitive)"
        )
    file = Path(shown)
    if not file.exists():
        raise FileNotFoundError(f"{shown}: no such file")
    if not file.is_file():
        raise ValueError(f"{shown}: not a file")
    name = file.name[: -len(suffix)]
    if suffix == ".npz":
        if label_column is not None:
            raise ValueError(
                f"{shown}: label_column applies only to .csv/.tsv/.parquet files; "
                "a .npz archive holds its labels in the array 'y'"
            )
        return _read_npz(file, shown, name)
    label_column = DEFAULT_LABEL_COLUMN if label_column is None else label_column
    if suffix == ".parquet":
        return _read_parquet(file, shown, name, label_column)
    return _read_delimited(file, shown, name, label_column, DELIMITERS[suffix])


def suffix_of(path: str) -> str | None:
    lower = os.path.basename(path).lower()
    return next((s for s in SUFFIXES if lower.endswith(s) and len(lower) > len(s)), None)


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_MAX_LISTED])
    more = len(names) - _MAX_LISTED
    return f"{shown}, ... ({more} more)" if more > 0 else shown


def _read_npz(file: Path, shown: str, name: str) -> Dataset:
    try:
        archive = np.load(file, allow_pickle=False)
    except ValueError as e:
        if "pickled" in str(e):
            # numpy takes any file that is neither zip nor .npy for a pickle, and its advice (to
            # load it unsafely) is wrong for a dataset: say what the file is not, and how it starts.
            with open(file, "rb") as fh:
                start = fh.read(16)
            raise ValueError(
                f"{shown}: not a .npz archive (a zip file of arrays 'X' and 'y'); it starts with "
                f"{start!r}"
            ) from None
        raise ValueError(f"{shown}: not a .npz archive: {e}") from None
    except (OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as e:
        raise ValueError(f"{shown}: not a readable .npz archive: {e}") from None
    if isinstance(archive, np.ndarray):  # a .npy file under a .npz name
        raise ValueError(f"{shown}: a single .npy array, not a .npz archive of arrays 'X' and 'y'")
    with archive:
        present = list(archive.files)
        missing = [key for key in ("X", "y") if key not in present]
        if missing:
            held = f"arrays {_listing(present)}" if present else "no arrays"
            raise ValueError(
                f"{shown}: missing array {' and '.join(map(repr, missing))}; "
                f"the archive holds {held}"
            )
        arrays = {}
        for key in ("X", "y"):
            try:
                arrays[key] = archive[key]
            except ValueError:
                # Object arrays are pickles, which could run code while loading: never read.
                raise ValueError(
                    f"{shown}: array {key!r} holds Python objects, which are not read "
                    "(allow_pickle=False); store X as numbers and y as integers or strings"
                ) from None
            except (OSError, EOFError, zipfile.BadZipFile) as e:
                raise ValueError(f"{shown}: array {key!r} is unreadable: {e}") from None
    try:
        return dataset_from_arrays(arrays["X"], arrays["y"], name)
    except ValueError as e:
        raise ValueError(f"{shown}: {e}") from None


def _read_delimited(
    file: Path, shown: str, name: str, label_column: str, delimiter: str
) -> Dataset:
    """A csv/tsv file, row by row, converting blocks of rows to numbers at once."""
    # utf-8-sig: spreadsheet exports often begin with a byte-order mark, which would otherwise
    # become part of the first column's name.
    if file.name.lower().endswith(".gz"):
        fh = gzip.open(file, "rt", encoding="utf-8-sig", newline="")
    else:
        fh = open(file, encoding="utf-8-sig", newline="")
    reader = csv.reader(fh, delimiter=delimiter, strict=True)
    try:
        with fh:
            return _parse_rows(_records(reader, shown), shown, name, label_column)
    except UnicodeDecodeError as e:
        raise ValueError(f"{shown}: not UTF-8 text: {e}") from None
    except gzip.BadGzipFile as e:
        raise ValueError(f"{shown}: not a gzip file: {e}") from None
    except EOFError:
        raise ValueError(f"{shown}: the gzip data ends early (a truncated file?)") from None


def _records(reader: Any, shown: str) -> Iterator[tuple[int, list[str]]]:
    """The non-blank rows of ``reader``, each with the line of the file it starts on."""
    end = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            hint = " (a quoted field left open?)" if "end of data" in str(e) else ""
            raise ValueError(f"{shown}: line {end + 1}: {e}{hint}") from None
        # A quoted field may span lines: reader.line_num is the row's last line, not its first.
        line, end = end + 1, reader.line_num
        if row:
            yield line, row


def _parse_rows(
    records: Iterator[tuple[int, list[str]]], shown: str, name: str, label_column: str
) -> Dataset:
    header_line, header = next(records, (0, []))
    if not header:
        raise ValueError(
            f"{shown}: empty file; expected a header row naming the columns, "
            f"e.g. x0,x1,{label_column}"
        )
    columns = [cell.strip() for cell in header]
    label_index = _label_index(columns, label_column, shown, f"the header (line {header_line})")
    feature_names = columns[:label_index] + columns[label_index + 1 :]
    n_columns = len(columns)
    block_rows = max(1, BLOCK_CELLS // len(feature_names))

    blocks: list[np.ndarray] = []
    labels: list[str] = []
    rows: list[list[str]] = []
    lines: list[int] = []
    for line, row in records:
        if len(row) != n_columns:
            raise ValueError(
                f"{shown}: line {line} has {len(row)} fields, the header has {n_columns}"
            )
        label = row.pop(label_index)
        if is_missing_text(label):
            raise ValueError(f"{shown}: line {line}, column {label_column!r}: missing label")
        labels.append(label.strip())
        rows.append(row)
        lines.append(line)
        if len(rows) == block_rows:
            blocks.append(_numbers(rows, lines, feature_names, shown))
            rows, lines = [], []
    if rows:
        blocks.append(_numbers(rows, lines, feature_names, shown))
    if not labels:
        raise ValueError(f"{shown}: no data rows after the header (line {header_line})")
    codes, class_names = class_codes(labels, f"{shown}: column {label_column!r}")
    return Dataset(name, read_only(np.concatenate(blocks)), read_only(codes), class_names)


def _label_index(columns: list[str], label_column: str, shown: str, header: str) -> int:
    """Where ``label_column`` is among ``columns`` (those of ``header``, for messages)."""
    if label_column not in columns:
        hint = ""
        if header.startswith("the header") and all(_is_number(c) for c in columns):
            hint = "; the first line looks like data: the file needs a header row naming columns"
        raise ValueError(
            f"{shown}: no label column {label_column!r} in {header}; "
            f"its columns are {_listing(columns)}{hint}"
        )
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        # A column named twice makes the label column, or any message naming it, ambiguous.
        places = [i + 1 for i, c in enumerate(columns) if c == repeated[0]]
        raise ValueError(
            f"{shown}: {header} names column {repeated[0]!r} more than once "
            f"(columns {', '.join(map(str, places))})"
        )
    if len(columns) < 2:
        raise ValueError(
            f"{shown}: {header} has only the label column {label_column!r}; "
            "at least 1 feature column is needed"
        )
    return columns.index(label_column)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _numbers(
    rows: list[list[str]], lines: list[int], feature_names: list[str], shown: str
) -> np.ndarray:
    """A block of text rows as float32, or a ValueError naming the first bad cell's place."""
    try:
        wide = np.array(rows, dtype=np.float64)
    except ValueError:
        # Only now look cell by cell, for the one numpy could not parse.
        for row, line in zip(rows, lines, strict=True):
            for cell, column in zip(row, feature_names, strict=True):
                if not _is_number(cell):
                    where = f"{shown}: line {line}, column {column!r}"
                    if not cell.strip():
                        raise ValueError(f"{where}: missing value") from None
                    raise ValueError(f"{where}: {cell.strip()!r} is not a number") from None
        raise
    block, bad = float32_cells(wide)
    if bad is not None:
        row, col, overflow = bad
        cell = rows[row][col].strip()
        where = f"{shown}: line {lines[row]}, column {feature_names[col]!r}"
        if overflow:
            raise ValueError(f"{where}: {cell!r} is outside the float32 range")
        raise ValueError(f"{where}: non-finite value {cell!r}")
    return block


def _read_parquet(file: Path, shown: str, name: str, label_column: str) -> Dataset:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        # pyarrow is large and only this format needs it, so it is not a dependency of oahu.
        raise ImportError(
            f"{shown}: reading .parquet files needs pyarrow: pip install pyarrow"
        ) from None
    try:
        table = pq.read_table(file)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ValueError(f"{shown}: not a readable parquet file: {e}") from None
    columns = [str(c) for c in table.column_names]
    label_index = _label_index(columns, label_column, shown, "the table")
    n = table.num_rows
    if n == 0:
        raise ValueError(f"{shown}: the table has no rows")

    def first_null(column: Any) -> int:
        return int(np.argmax(pc.is_null(column).to_numpy(zero_copy_only=False)))

    feature_names = columns[:label_index] + columns[label_index + 1 :]
    features = np.empty((n, len(feature_names)), dtype=np.float32)
    for j, column_name in enumerate(feature_names):
        column = table.column(column_name)
        kind = column.type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind)
            or pa.types.is_decimal(kind)
        ):
            raise ValueError(
                f"{shown}: column {column_name!r} holds {kind} values; "
                "feature columns must be numeric"
            )
        if column.null_count:
            raise ValueError(
                f"{shown}: row {first_null(column) + 1}, column {column_name!r}: missing value"
            )
        wide = column.cast(pa.float64()).to_numpy()
        cells, bad = float32_cells(wide[:, None])
        if bad is not None:
            row, _, overflow = bad
            where, value = f"{shown}: row {row + 1}, column {column_name!r}", float(wide[row])
            if overflow:
                raise ValueError(f"{where}: {value!r} is outside the float32 range")
            raise ValueError(f"{where}: non-finite value {value!r}")
        features[:, j] = cells[:, 0]

    labels = table.column(label_column)
    where = f"{shown}: column {label_column!r}"
    if labels.null_count:
        row = first_null(labels)
        raise ValueError(f"{shown}: row {row + 1}, column {label_column!r}: missing label")
    if pa.types.is_dictionary(labels.type):
        labels = labels.cast(labels.type.value_type)
    if pa.types.is_string(labels.type) or pa.types.is_large_string(labels.type):
        # Text labels follow the csv rules, so a table and its csv export agree on the codes.
        texts = labels.to_pylist()
        for row, text in enumerate(texts):
            if is_missing_text(text):
                raise ValueError(f"{shown}: row {row + 1}, column {label_column!r}: missing label")
        codes, class_names = class_codes([text.strip() for text in texts], where)
    else:
        try:
            codes, class_names = codes_from_array(labels.to_numpy())
        except LabelError as e:
            if e.index is None:
                raise ValueError(f"{where}: {e.problem}") from None
            raise ValueError(
                f"{shown}: row {e.index + 1}, column {label_column!r}: {e.problem}"
            ) from None
    return Dataset(name, read_only(features), read_only(codes), class_names)
