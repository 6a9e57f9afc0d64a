"""Any oahu learner in river's shape: ``learn_one`` on a constraint, ``transform_one`` on an item.

Items are river's feature dicts. A constraint is a :class:`Triplet` (the anchor is more similar
to the positive than to the negative) or a labelled :class:`Pair`. ``transform_one`` embeds an
item where Euclidean distance is the learned metric (:meth:`oahu.learner.Learner.transform`), so
a :class:`MetricTransformer` goes in front of river's distance-based models; in a river pipeline,
whose ``learn_one`` hands every step the item itself, it learns nothing from items and the
metric learns from the constraints you give it.

>>> from river import neighbors
>>> metric = MetricTransformer("lego")
>>> a, b, c = {"x": 0.0, "y": 1.0}, {"x": 0.1, "y": 0.9}, {"x": 1.0, "y": 0.0}
>>> metric.learn_one(Triplet(anchor=a, positive=b, negative=c))
>>> metric.learn_one(Pair(a, c, similar=False))
>>> metric.learner_.constraints_seen, sorted(metric.transform_one(a))
(2, [0, 1])
>>> knn = metric | neighbors.KNNClassifier(n_neighbors=1)
>>> for item, label in [(a, "left"), (c, "right")]:
...     knn.learn_one(item, label)
>>> knn.predict_one({"x": 0.2, "y": 0.7})
'left'
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple

import numpy as np
from river import base

from oahu.learner import Learner
from oahu.registry import learner_class

Item = Mapping[Hashable, float]


class Triplet(NamedTuple):
    """``anchor`` is more similar to ``positive`` than to ``negative``."""

    anchor: Item
    positive: Item
    negative: Item


class Pair(NamedTuple):
    """``left`` and ``right`` are similar (``similar`` true) or dissimilar."""

    left: Item
    right: Item
    similar: bool


class MetricTransformer(base.Transformer):
    """A registered oahu learner as a river transformer.

    Parameters
    ----------
    learner
        The learner's registry name (``"oahu"``, ``"lego"``, ``"rdml"``, ``"opml"``,
        ``"euclidean"``; ``"oasis"`` learns a similarity, which has no Euclidean embedding).
    params
        Its constructor parameters.
    items
        Unlabelled items (feature dicts) to prepare the learner on, for a learner that fits
        something on items before it learns (``learner.needs_prepare``): OAHU's default
        principal-axes projection, ``"center"`` or ``"standardize"`` preprocessing, a
        PCA-initialised E0. A stream item by item does not give such a batch, so without
        ``items`` such a learner is refused at the first item; OAHU learns without it with
        ``params={"preprocess": "none"}`` (the cosine metric of the raw features as its start).

    Attributes
    ----------
    learner_
        The learner, made at the first constraint or item (which fixes the features, in the
        order of that item's keys).
    """

    def __init__(
        self,
        learner: str = "oahu",
        params: dict[str, Any] | None = None,
        items: list[Item] | None = None,
    ) -> None:
        self.learner = learner
        self.params = params
        self.items = items
        self.learner_: Learner | None = None
        self.features_: list[Hashable] = []

    def learn_one(self, x: Triplet | Pair | Item) -> None:  # type: ignore[override]
        """Learn from a :class:`Triplet` or :class:`Pair`. A plain item (what a river pipeline
        passes every step) teaches a metric nothing and is only used to fix the features."""
        if isinstance(x, Triplet):
            self._learner(x.anchor).learn("triplet", self._rows(x)[None])
        elif isinstance(x, Pair):
            learner = self._learner(x.left)
            learner.learn("pair", self._rows((x.left, x.right))[None], [x.similar])
        else:
            self._learner(x)

    def transform_one(self, x: Item) -> dict[int, float]:
        """The item embedded where Euclidean distance is the learned metric."""
        point = self._learner(x).transform(self._rows([x]))[0]
        return dict(enumerate(point.tolist()))

    def _learner(self, item: Item) -> Learner:
        if self.learner_ is None:
            cls = learner_class(self.learner)
            learner = cls(n_features=len(item), **(self.params or {}))
            if learner.metric != "l2":
                raise ValueError(f"learner: {self.learner!r} learns a similarity, not a distance")
            features = list(item)
            if learner.needs_prepare:
                if not self.items:
                    raise ValueError(
                        f"items: {learner!r} fits preprocessing or E0 on a batch of items "
                        "before it learns, which a river stream does not give: pass unlabelled "
                        "items=[...] to prepare it on (or, for OAHU, params={'preprocess': "
                        "'none'})"
                    )
                learner.prepare(_rows(self.items, features, "items"))
            self.learner_, self.features_ = learner, features
        return self.learner_

    def _rows(self, items: Any) -> np.ndarray:
        return _rows(items, self.features_)


def _rows(items: Any, features: list[Hashable], field: str = "x") -> np.ndarray:
    try:
        return np.array([[item[f] for f in features] for item in items], np.float32)
    except KeyError as missing:
        raise ValueError(f"{field}: feature {missing} missing (features: {features})") from None
