"""A user's labelled dataset from files (npz, csv, tsv, gzipped, parquet) and arrays: round
trips, label codes and class names, and errors that name the file, the line and the column."""

from __future__ import annotations

import gzip
import math
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oahu.streams.dataset import Dataset
from oahu.streams.dataset_arrays import dataset_from_arrays
from oahu.streams.dataset_files import SUFFIXES, read_dataset
from oahu.streams.dataset_writing import write_dataset_csv
from oahu.streams.datasets import load_digits

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DELIMITERS = {".csv": ",", ".tsv": "\t", ".csv.gz": ",", ".tsv.gz": "\t"}
# pyarrow is optional (only .parquet files need it); it may join the test extras later.
NO_PYARROW = "pyarrow is not installed: the .parquet reader is optional"


def write_text(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def read_error(path: Path, label_column: str | None = None) -> str:
    """The message of the ValueError reading ``path`` raises, checked to start with the path."""
    with pytest.raises(ValueError) as excinfo:
        read_dataset(path, label_column=label_column)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: "), message
    return message


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labellings put the same rows together (a bijection between their labels)."""
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


# ------------------------------------------------------------------ arrays
def test_string_labels_become_sorted_codes_with_their_names():
    ds = dataset_from_arrays(np.ones((5, 2)), ["dog", "cat", "emu", "cat", "dog"], name="pets")
    assert ds.name == "pets"
    assert ds.y.tolist() == [1, 0, 2, 0, 1] and ds.y.dtype == np.int64
    assert ds.class_names == ("cat", "dog", "emu")


def test_labels_that_are_codes_already_keep_class_names_empty():
    y = np.array([2, 0, 1, 1, 0])
    ds = dataset_from_arrays(np.zeros((5, 3)), y)
    assert ds.class_names == ()
    np.testing.assert_array_equal(ds.y, y)
    # Python ints in an object array count too; bools and other integers are named.
    assert dataset_from_arrays(np.zeros((2, 1)), np.array([1, 0], dtype=object)).class_names == ()
    assert dataset_from_arrays(np.zeros((2, 1)), [True, False]).class_names == ("False", "True")
    other = dataset_from_arrays(np.zeros((3, 1)), [30, -2, 30])
    assert other.y.tolist() == [1, 0, 1] and other.class_names == ("-2", "30")


def test_features_are_float32_c_contiguous_copies_kept_as_given_and_read_only():
    X = np.asfortranarray([[255.0, -3.5], [1e6, 0.0], [7.0, 2.0]])
    ds = dataset_from_arrays(X, np.array(["a", "b", "a"]))
    assert ds.X.dtype == np.float32 and ds.X.flags.c_contiguous
    assert ds.X.tolist() == X.tolist()  # not rescaled
    X[0, 0] = 0.0
    assert ds.X[0, 0] == 255.0  # a copy, not a view of the caller's array
    for array in (ds.X, ds.y):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1
    assert dataset_from_arrays([[1, 2], [3, 4]], [0, 1]).X.dtype == np.float32


@pytest.mark.parametrize(
    ("X", "y", "message"),
    [
        (np.zeros((5, 8)), [0, 1, 0, 1], "y: expected 1 label per row of X (5 rows), got 4"),
        (np.zeros((3, 2)), [0, 1, None], "y: missing label at row 2"),
        (np.zeros((3, 2)), [0.0, math.nan, 1.0], "y: missing label at row 1"),
        (np.zeros((3, 2)), ["a", "b", ""], "y: missing label at row 2"),
        (np.zeros((3, 2)), ["a", "  ", "b"], "y: missing label at row 1"),
        (np.zeros((3, 2)), [7, 7, 7], "y: a single class (7); metric learning needs at least 2"),
        (np.zeros((2, 2)), ["cat", "cat"], "y: a single class ('cat'); metric learning needs"),
        (np.zeros((2, 2)), np.array([1, "a"], dtype=object), "y: labels of types int and str"),
        (np.zeros((2, 2)), [[0], [1]], "y: expected a 1-d array of labels, got shape (2, 1)"),
        (np.zeros(4), [0, 1, 0, 1], "X: expected a 2-d array (n_items, n_features), got shape"),
        (np.zeros((2, 0)), [0, 1], "X: expected at least 1 row and 1 column, got shape (2, 0)"),
        ([[1.0, 2.0], [3.0]], [0, 1], "X: not a 2-d array of numbers: row 1 has 1 values"),
        ([[1.0, "abc"], [3.0, 4.0]], [0, 1], "X: non-numeric value '1.0' at row 0, column 0"),
        (np.array([[1.0, None]], dtype=object), [0], "X: non-numeric value None at row 0, col"),
        ([[1.0, 2.0], [3.0, 1e300]], [0, 1], "X: value 1e+300 at row 1, column 1 is outside"),
    ],
)
def test_array_errors_name_the_argument_and_the_position(X, y, message):
    with pytest.raises(ValueError) as excinfo:
        dataset_from_arrays(X, y)
    assert str(excinfo.value).startswith(message), str(excinfo.value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_features_are_named_by_row_and_column(bad):
    X = np.zeros((5, 9))
    X[3, 7] = bad
    with pytest.raises(ValueError, match=re.escape(f"X: non-finite value {bad!r} at row 3, col")):
        dataset_from_arrays(X, [0, 1, 0, 1, 0])


# ------------------------------------------------------------------ npz
def test_npz_round_trip_with_string_labels(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 4)).astype(np.float32)
    y = np.array(["b", "a", "c", "a"] * 5)
    with open(tmp_path / "mine.NPZ", "wb") as fh:  # np.savez would append ".npz" to the name
        np.savez(fh, X=X, y=y)
    ds = read_dataset(tmp_path / "mine.NPZ")
    assert ds.name == "mine"
    np.testing.assert_array_equal(ds.X, X)
    assert ds.class_names == ("a", "b", "c")
    assert [ds.class_names[c] for c in ds.y] == y.tolist()


def test_npz_errors_name_the_file_and_the_arrays(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, features=np.zeros((2, 2)), y=np.array([0, 1]))
    message = read_error(path)
    assert "missing array 'X'" in message and "'features', 'y'" in message

    np.savez(path, X=np.zeros((2, 2)), y=np.array([0, 1]))
    message = read_error(path, label_column="y")
    assert "label_column applies only to .csv/.tsv/.parquet files" in message

    np.savez(path, X=np.array([[0.0, 1.0], [2.0, np.inf]]), y=np.array([0, 1]))
    assert read_error(path) == f"{path}: X: non-finite value inf at row 1, column 1"

    np.savez(path, X=np.zeros((2, 2)), y=np.array([0, None], dtype=object))
    assert "array 'y' holds Python objects" in read_error(path)

    path.write_text("not an archive")
    # What the file starts with, not numpy's advice to unpickle it.
    expected = f"{path}: not a .npz archive (a zip file of arrays 'X' and 'y'); it starts with "
    assert read_error(path) == expected + "b'not an archive'"


# ------------------------------------------------------------------ csv / tsv round trips
@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".csv.gz", ".tsv.gz"])
def test_digits_round_trip_through_every_text_format(tmp_path, suffix):
    digits = load_digits()
    path = tmp_path / f"digits{suffix}"
    write_dataset_csv(digits, path, delimiter=DELIMITERS[suffix])
    ds = read_dataset(path)
    assert ds.name == "digits"
    assert ds.X.dtype == np.float32 and ds.y.dtype == np.int64
    np.testing.assert_array_equal(ds.X, digits.X)
    np.testing.assert_array_equal(ds.y, digits.y)
    assert ds.class_names == ()
    assert not ds.X.flags.writeable and not ds.y.flags.writeable


def test_float32_values_read_back_exactly(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(scale=1e3, size=(50, 6)).astype(np.float32)
    extremes = [np.finfo(np.float32).max, -np.finfo(np.float32).max]
    extremes += [np.finfo(np.float32).smallest_subnormal, np.finfo(np.float32).tiny, -0.0, 0.1]
    X[0] = extremes
    ds = dataset_from_arrays(X, np.arange(50) % 3)
    write_dataset_csv(ds, tmp_path / "x.csv")
    again = read_dataset(tmp_path / "x.csv")
    assert again.X.tobytes() == X.tobytes()  # bit for bit, the sign of -0.0 included


def test_class_names_with_delimiters_quotes_and_newlines_round_trip(tmp_path):
    names = ["a,b", 'say "hi"', "two\nlines", "tab\there", "ünï"]
    ds = dataset_from_arrays(np.arange(10.0).reshape(5, 2), names, name="odd")
    for suffix in (".csv", ".tsv"):
        write_dataset_csv(ds, tmp_path / f"odd{suffix}", delimiter=DELIMITERS[suffix])
        again = read_dataset(tmp_path / f"odd{suffix}")
        assert again.class_names == ds.class_names
        np.testing.assert_array_equal(again.y, ds.y)


def test_write_refuses_what_would_not_read_back(tmp_path):
    ds = dataset_from_arrays(np.zeros((2, 2)), ["nan", "x"])
    with pytest.raises(ValueError, match="class name 'nan' would not read back"):
        write_dataset_csv(ds, tmp_path / "a.csv")
    ds = dataset_from_arrays(np.zeros((2, 2)), [0, 1])
    with pytest.raises(ValueError, match=r"delimiter: ',' does not match .*a\.tsv"):
        write_dataset_csv(ds, tmp_path / "a.tsv")
    with pytest.raises(ValueError, match="label_column: 'f1' is also the name of a feature"):
        write_dataset_csv(ds, tmp_path / "a.csv", label_column="f1")
    bad = Dataset("bad", np.array([[np.nan]], dtype=np.float32), np.array([0]))
    with pytest.raises(ValueError, match="dataset: X must hold finite numbers"):
        write_dataset_csv(bad, tmp_path / "a.csv")
    assert not list(tmp_path.iterdir())  # nothing half-written is left behind


# ------------------------------------------------------------------ csv labels and layout
def test_text_labels_become_sorted_codes_with_names(tmp_path):
    path = write_text(tmp_path / "iris.csv", "x,label\n1,versicolor\n2,setosa\n3, virginica\n")
    ds = read_dataset(path)
    assert ds.y.tolist() == [1, 0, 2]
    assert ds.class_names == ("setosa", "versicolor", "virginica")


def test_integer_labels_sort_as_integers(tmp_path):
    path = write_text(tmp_path / "n.csv", "x,label\n1,10\n2,9\n3,-1\n4,10\n")
    ds = read_dataset(path)
    assert ds.class_names == ("-1", "9", "10")
    assert ds.y.tolist() == [2, 1, 0, 2]
    # "07" and "7" are different labels of the file, ordered by value then text.
    path = write_text(tmp_path / "z.csv", "x,label\n1,7\n2,07\n3,8\n")
    assert read_dataset(path).class_names == ("07", "7", "8")
    # Not all integers: compared as text.
    path = write_text(tmp_path / "t.csv", "x,label\n1,10\n2,9\n3,b\n")
    assert read_dataset(path).class_names == ("10", "9", "b")


def test_labels_that_are_codes_already_keep_class_names_empty_in_files(tmp_path):
    path = write_text(tmp_path / "c.csv", "x,label\n1,2\n2,0\n3,1\n4,0\n")
    ds = read_dataset(path)
    assert ds.class_names == () and ds.y.tolist() == [2, 0, 1, 0]


def test_label_column_anywhere_blank_lines_bom_and_crlf(tmp_path):
    text = "\ufeffkind,a,b\r\n\r\nx,1.5,2\r\ny, 3 ,4e-1\r\n\r\n"
    path = write_text(tmp_path / "m.CSV", text)
    ds = read_dataset(path, label_column="kind")
    assert ds.name == "m"
    assert ds.X.tolist() == [[1.5, 2.0], [3.0, np.float32(0.4)]]
    assert ds.y.tolist() == [0, 1] and ds.class_names == ("x", "y")


def test_large_files_are_read_in_blocks(tmp_path):
    """More rows than one conversion block holds, and an error in a later block."""
    rng = np.random.default_rng(2)
    X = rng.random((6000, 50)).astype(np.float32)
    ds = dataset_from_arrays(X, rng.integers(0, 4, 6000))
    path = tmp_path / "big.csv"
    write_dataset_csv(ds, path)
    np.testing.assert_array_equal(read_dataset(path).X, X)
    lines = path.read_text().split("\n")
    cells = lines[5800].split(",")
    cells[17] = "oops"
    lines[5800] = ",".join(cells)
    path.write_text("\n".join(lines))
    assert read_error(path) == f"{path}: line 5801, column 'f17': 'oops' is not a number"


# ------------------------------------------------------------------ csv errors
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,petal_width,label\n1,2,x\n3,abc,y\n", "line 3, column 'petal_width': 'abc' is not"),
        ("a,b,label\n1,2,x\n3,,y\n", "line 3, column 'b': missing value"),
        ("a,b,label\n1,2,x\n\n3,4,\n", "line 4, column 'label': missing label"),
        ("a,b,label\n1,2,x\n3,4,NaN\n", "line 3, column 'label': missing label"),
        ("a,b,label\n1,2,x\n3,4\n", "line 3 has 2 fields, the header has 3"),
        ("a,b,label\n1,2,x\n3,4,y,5\n", "line 3 has 4 fields, the header has 3"),
        ("a,x3,label\n1,2,x\n3,nan,y\n", "line 3, column 'x3': non-finite value 'nan'"),
        ("a,x3,label\n1,2,x\n3,-Infinity,y\n", "line 3, column 'x3': non-finite value '-Inf"),
        ("a,b,label\n1,2,x\n3,1e39,y\n", "line 3, column 'b': '1e39' is outside the float32"),
        ("a,b,label\n1,2,x\n3,4,x\n", "column 'label': a single class ('x'); metric learning"),
        ("", "empty file; expected a header row naming the columns"),
        ("\n\n", "empty file; expected a header row naming the columns"),
        ("a,b,label\n", "no data rows after the header (line 1)"),
        ("a,b,label\n\n", "no data rows after the header (line 1)"),
        ("label\nx\n", "the header (line 1) has only the label column 'label'; at least 1"),
        ("a,a,label\n1,2,x\n", "the header (line 1) names column 'a' more than once (columns 1"),
        ('a,b,label\n1,2,"x\n3,4,y\n', "line 2: unexpected end of data (a quoted"),
        ('a,b,label\n1,2,"x"y\n3,4,z\n', "line 2: "),
    ],
)
def test_csv_errors_name_the_file_the_line_and_the_column(tmp_path, text, message):
    path = write_text(tmp_path / "data.csv", text)
    assert message in read_error(path)


def test_missing_label_column_lists_the_header(tmp_path):
    path = write_text(tmp_path / "data.csv", "sepal,petal,species\n1,2,x\n")
    assert read_error(path) == (
        f"{path}: no label column 'label' in the header (line 1); "
        "its columns are 'sepal', 'petal', 'species'"
    )
    assert "no label column 'kind'" in read_error(path, label_column="kind")
    wide = ",".join(f"pixel{j}" for j in range(784))
    path = write_text(tmp_path / "wide.csv", f"{wide},class\n")
    message = read_error(path)
    assert "'pixel0', 'pixel1'," in message and "... (775 more)" in message
    assert len(message) < 300 + len(str(path))
    path = write_text(tmp_path / "headless.csv", "1,2,3\n4,5,6\n")
    assert "the first line looks like data: the file needs a header row" in read_error(path)


def test_tsv_and_gzip_errors_name_the_line(tmp_path):
    path = write_text(tmp_path / "t.tsv.gz", "a\tb\tlabel\n1\t2\tx\n\n3\t?\ty\n")
    assert read_error(path) == f"{path}: line 4, column 'b': '?' is not a number"
    # A comma-separated file under a .tsv name: one column, the label column not among them.
    path = write_text(tmp_path / "c.tsv", "a,b,label\n1,2,x\n")
    assert "no label column 'label' in the header (line 1); its columns are 'a,b,label'" in (
        read_error(path)
    )
    path = tmp_path / "plain.csv.gz"
    path.write_text("a,label\n1,x\n")
    assert "not a gzip file" in read_error(path)
    path = tmp_path / "latin1.csv"
    path.write_bytes("a,label\n1,caf\xe9\n".encode("latin-1"))
    assert "not UTF-8 text" in read_error(path)


def test_unknown_suffix_and_missing_file(tmp_path):
    path = write_text(tmp_path / "data.json", "{}")
    message = read_error(path)
    assert all(suffix in message for suffix in SUFFIXES)
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'nope.csv'}: no such")):
        read_dataset(tmp_path / "nope.csv")
    with pytest.raises(ValueError, match="label_column: must be a column name"):
        read_dataset(path.with_suffix(".csv"), label_column=3)


# ------------------------------------------------------------------ properties
float32s = st.floats(width=32, allow_nan=False, allow_infinity=False)
text_labels = st.text(
    alphabet=st.sampled_from(list("ab7 ,;\t\"'\nü")), min_size=1, max_size=4
).filter(lambda s: s == s.strip() and s.lower() != "nan")
labels_of_a_kind = st.one_of(
    st.lists(st.integers(-3, 12), min_size=1), st.lists(text_labels, min_size=1)
)


@PROPERTY
@given(
    data=st.data(),
    n=st.integers(2, 12),
    d=st.integers(1, 5),
    suffix=st.sampled_from(sorted(DELIMITERS)),
)
def test_write_then_read_keeps_features_and_classes(data, n, d, suffix):
    X = np.array(data.draw(st.lists(float32s, min_size=n * d, max_size=n * d)), dtype=np.float32)
    X = X.reshape(n, d)
    pool = data.draw(labels_of_a_kind.filter(lambda p: len(set(p)) >= 2))
    y = data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    if len(set(y)) < 2:
        y[0], y[1] = pool[0], next(v for v in pool if v != pool[0])
    ds = dataset_from_arrays(X, np.array(y, dtype=object))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"prop{suffix}"
        write_dataset_csv(ds, path, delimiter=DELIMITERS[suffix])
        again = read_dataset(path)
    assert again.X.tobytes() == X.tobytes()
    assert same_partition(again.y, np.array([str(v) for v in y]))
    assert sorted(again.class_names or map(str, range(len(set(y))))) == sorted(map(str, set(y)))


column_names = st.lists(
    st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=2, max_size=5, unique=True
)
not_a_number = st.text(alphabet=st.sampled_from(list("abx.-+e_ ?")), min_size=1, max_size=5)


@PROPERTY
@given(data=st.data(), columns=column_names, n=st.integers(1, 8))
def test_one_corrupted_cell_is_named_by_its_line_and_column(data, columns, n):
    label_at = data.draw(st.integers(0, len(columns) - 1))
    label_column = columns[label_at]
    rows = [
        [
            f"c{i % 2}" if j == label_at else repr(data.draw(float32s.map(float)))
            for j in range(len(columns))
        ]
        for i in range(n + 1)
    ]
    bad_row = data.draw(st.integers(0, n))
    bad_col = data.draw(st.integers(0, len(columns) - 1))
    if bad_col == label_at:
        corrupt = data.draw(st.sampled_from(["", " ", "nan", "NaN"]))
    else:
        corrupt = data.draw(
            st.one_of(
                st.sampled_from(["", "nan", "inf", "-inf", "NaN", "Infinity", "1e39"]),
                not_a_number.filter(lambda s: not _parses(s)),
            )
        )
    rows[bad_row][bad_col] = corrupt
    blank_after = data.draw(st.lists(st.booleans(), min_size=n + 1, max_size=n + 1))
    lines = [",".join(columns)]
    for row, blank in zip(rows, blank_after, strict=True):
        if row is rows[bad_row]:
            bad_line = len(lines) + 1
        lines.append(",".join(row))
        if blank:
            lines.append("")
    with tempfile.TemporaryDirectory() as folder:
        path = write_text(Path(folder) / "corrupt.csv", "\n".join(lines) + "\n")
        with pytest.raises(ValueError) as excinfo:
            read_dataset(path, label_column=label_column)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: line {bad_line}, column {columns[bad_col]!r}: "), message


def _parses(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------ parquet
def test_parquet_without_pyarrow_says_how_to_install_it(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1")
    for module in ("pyarrow", "pyarrow.parquet", "pyarrow.compute"):
        monkeypatch.setitem(sys.modules, module, None)  # makes `import pyarrow` fail
    with pytest.raises(ImportError, match=re.escape(f"{path}: reading .parquet files needs")):
        read_dataset(path)
    with pytest.raises(ImportError, match="pip install pyarrow"):
        read_dataset(path)


def test_parquet_round_trip_and_labels(tmp_path):
    pa = pytest.importorskip("pyarrow", reason=NO_PYARROW)
    pq = pytest.importorskip("pyarrow.parquet", reason=NO_PYARROW)
    table = pa.table(
        {
            "a": pa.array([0.5, 1.5, 2.5, 3.5], type=pa.float32()),
            "species": ["10", "9", "10", "9"],
            "b": pa.array([1, 2, 3, 4], type=pa.int16()),
            "c": [True, False, True, True],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    ds = read_dataset(tmp_path / "t.parquet", label_column="species")
    assert ds.name == "t"
    assert ds.X.tolist() == [[0.5, 1, 1], [1.5, 2, 0], [2.5, 3, 1], [3.5, 4, 1]]
    assert ds.y.tolist() == [1, 0, 1, 0] and ds.class_names == ("9", "10")

    pq.write_table(pa.table({"x": [1.0, 2.0, 3.0], "label": [1, 0, 1]}), tmp_path / "i.parquet")
    ds = read_dataset(tmp_path / "i.parquet")
    assert ds.y.tolist() == [1, 0, 1] and ds.class_names == ()


def test_parquet_errors_name_the_file_the_row_and_the_column(tmp_path):
    pa = pytest.importorskip("pyarrow", reason=NO_PYARROW)
    pq = pytest.importorskip("pyarrow.parquet", reason=NO_PYARROW)
    path = tmp_path / "p.parquet"

    def error(columns: dict, label_column: str | None = None) -> str:
        pq.write_table(pa.table(columns), path)
        return read_error(path, label_column)

    assert error({"x": [1.0, 2.0], "kind": ["a", "b"]}) == (
        f"{path}: no label column 'label' in the table; its columns are 'x', 'kind'"
    )
    assert error({"x": [1.0, None, 2.0], "label": ["a", "b", "c"]}) == (
        f"{path}: row 2, column 'x': missing value"
    )
    assert error({"x": [1.0, 2.0, np.inf], "label": ["a", "b", "c"]}) == (
        f"{path}: row 3, column 'x': non-finite value inf"
    )
    assert "column 'x' holds string values; feature columns must be numeric" in error(
        {"x": ["1", "2"], "label": ["a", "b"]}
    )
    assert error({"x": [1.0, 2.0], "label": ["a", None]}) == (
        f"{path}: row 2, column 'label': missing label"
    )
    assert error({"x": [1.0, 2.0], "label": [3.0, math.nan]}) == (
        f"{path}: row 2, column 'label': missing label"
    )
    assert error({"x": [1.0, 2.0], "label": [4, 4]}) == (
        f"{path}: column 'label': a single class (4); metric learning needs at least 2"
    )
    path.write_bytes(b"not parquet")
    assert "not a readable parquet file" in read_error(path)
