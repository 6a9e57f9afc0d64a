"""Benchmark constraint streams: datasets, the paper's stream protocol, drift, label noise,
label-hierarchy quadruplets, stream file formats.

>>> from oahu.streams import build_stream
>>> stream = build_stream("digits", n_constraints=10, seed=0)
>>> anchors, positives, negatives = stream.batch(0, 4)
>>> anchors.shape
(4, 64)
"""

from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import DATASETS, Dataset, load_dataset, load_digits, load_fashion_mnist
from oahu.streams.drift import DRIFTS, build_drift_stream, drift_mask, novel_classes, rotate90
from oahu.streams.groupings import (
    DRIFT_GROUPINGS,
    GROUPINGS,
    Grouping,
    coarse_labels,
    grouping_for,
)
from oahu.streams.hierarchy import (
    HIERARCHY_LEVELS,
    build_hierarchy_stream,
    hierarchy_distance,
    matched_triplet_count,
    matched_triplet_stream,
)
from oahu.streams.jsonl import iter_jsonl, read_jsonl, write_jsonl
from oahu.streams.noise import NOISE_MODELS, add_noise, class_confusability
from oahu.streams.protocol import (
    ClosureStream,
    closure_stream,
    distinct_constraints,
    interleave_closure,
    pair_stream,
    random_pairs,
    random_triplets,
    split_dev_test,
    triplet_stream,
)
from oahu.streams.stream_file import (
    FORMAT_VERSION,
    KINDS,
    OPTIONAL_FIELDS,
    PROTOCOLS,
    ConstraintStream,
    load_stream,
)

__all__ = [
    "DATASETS",
    "DRIFTS",
    "DRIFT_GROUPINGS",
    "FORMAT_VERSION",
    "GROUPINGS",
    "HIERARCHY_LEVELS",
    "KINDS",
    "NOISE_MODELS",
    "OPTIONAL_FIELDS",
    "PROTOCOLS",
    "ClosureStream",
    "ConstraintStream",
    "Dataset",
    "Grouping",
    "add_noise",
    "build_drift_stream",
    "build_hierarchy_stream",
    "build_stream",
    "class_confusability",
    "closure_stream",
    "coarse_labels",
    "distinct_constraints",
    "drift_mask",
    "grouping_for",
    "hierarchy_distance",
    "interleave_closure",
    "iter_jsonl",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "load_stream",
    "matched_triplet_count",
    "matched_triplet_stream",
    "novel_classes",
    "pair_stream",
    "random_pairs",
    "random_triplets",
    "read_jsonl",
    "rotate90",
    "split_dev_test",
    "triplet_stream",
    "write_jsonl",
]
