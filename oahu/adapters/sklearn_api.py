"""Any oahu learner as a scikit-learn estimator, in the shape metric-learn's users know.

``fit(triplets)`` learns from an array of triplets (n, 3, n_features); ``fit(X, y)`` draws
constraints from labelled items by the paper's protocol (half seeds, half derived by transitive
closure; docs/algorithms.md) and learns them in order. ``transform`` embeds items where
Euclidean distance is the learned metric (:meth:`oahu.learner.Learner.transform`), so the
estimator sits in a :class:`~sklearn.pipeline.Pipeline` before a
:class:`~sklearn.neighbors.KNeighborsClassifier`; ``score_pairs`` and ``get_metric`` compare items
as metric-learn's Mahalanobis learners do. ``partial_fit`` continues learning.

>>> from sklearn.datasets import load_digits
>>> from sklearn.model_selection import train_test_split
>>> from sklearn.neighbors import KNeighborsClassifier
>>> from sklearn.pipeline import make_pipeline
>>> X, y = load_digits(return_X_y=True)
>>> X_train, X_test, y_train, y_test = train_test_split(X / 16, y, random_state=0)
>>> model = make_pipeline(
...     MetricLearner("lego", n_constraints=2000, random_state=0), KNeighborsClassifier()
... )
>>> round(model.fit(X_train, y_train).score(X_test, y_test), 3)  # Euclidean 5-NN: 0.980
0.987
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from oahu.learner import Learner
from oahu.registry import learner_class
from oahu.streams.protocol import closure_stream, distinct_constraints


class MetricLearner(TransformerMixin, BaseEstimator):
    """A registered oahu learner (``"oahu"``, ``"lego"``, ``"rdml"``, ``"opml"``,
    ``"euclidean"``) as a scikit-learn transformer.

    Parameters
    ----------
    learner : str, default="oahu"
        The learner's registry name. ``"oasis"`` learns a similarity rather than a distance and
        has no Euclidean ``transform``; use it through :class:`oahu.OASIS`.
    params : dict or None, default=None
        Its constructor parameters, e.g. ``{"preset": "paper"}`` for OAHU as the paper
        publishes it (by default, oahu's own learner).
    n_constraints : int, default=10_000
        How many constraints ``fit(X, y)`` (and each ``partial_fit(X, y)``) draws from the
        labels, at most as many distinct ones as they allow. A learner that builds its own
        constraints from labelled samples (OPML) instead makes one pass over ``X``.
    random_state : int, RandomState or None, default=None
        Seeds the drawn constraints, the order of OPML's pass and the learner's initialisation
        (for learners with a ``seed`` parameter).

    Attributes
    ----------
    learner_ : oahu.learner.Learner
        The trained learner.
    n_features_in_ : int
        The number of features seen in ``fit``.

    Examples
    --------
    Triplets, as metric-learn's weakly supervised learners take them:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> triplets = rng.normal(size=(50, 3, 4))
    >>> model = MetricLearner("lego").fit(triplets)
    >>> model.transform(triplets[:2, 0]).shape, model.score_pairs(triplets[:2, :2]).shape
    ((2, 4), (2,))
    >>> distance = model.get_metric()
    >>> d = model.score_pairs(triplets[:1, :2])[0]
    >>> bool(np.isclose(distance(triplets[0, 0], triplets[0, 1]), d))
    True
    """

    def __init__(
        self,
        learner: str = "oahu",
        params: dict[str, Any] | None = None,
        n_constraints: int = 10_000,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.learner = learner
        self.params = params
        self.n_constraints = n_constraints
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, y: Any = None) -> MetricLearner:
        """Learn from triplets ``X`` (n, 3, n_features), or from constraints drawn from the
        labelled items ``X`` (n, n_features) with labels ``y``."""
        return self._learn(X, y, first=True)

    def partial_fit(self, X: Any, y: Any = None) -> MetricLearner:
        """Continue learning from more triplets, or from constraints drawn among more labelled
        items (a fresh estimator: the same as ``fit``)."""
        return self._learn(X, y, first=not hasattr(self, "learner_"))

    def _learn(self, X: Any, y: Any, first: bool) -> MetricLearner:
        """Learn from ``X`` (and ``y``), with a new learner prepared on these items if
        ``first``."""
        if y is None:
            triplets = self._check_triplets(X, first)
            items = triplets.reshape(-1, triplets.shape[2])
        else:
            items, y = validate_data(self, X, y, reset=first, ensure_min_samples=2)
        if first:
            self.learner_ = self._new_learner(items.shape[1])
            self.learner_.prepare(items)
        # this call draws with seed; the next partial_fit, with another one
        seed, self._seed = self._seed, int(np.random.default_rng(self._seed).integers(2**31))
        if y is None:
            self.learner_.learn("triplet", triplets)
        elif self.learner_.capabilities.learns_samples:
            order = np.random.default_rng(seed).permutation(len(items))
            self.learner_.learn_samples(items[order], y[order])
        else:
            self._learn_drawn_constraints(items, y, seed)
        return self

    def _check_triplets(self, X: Any, first: bool) -> np.ndarray:
        if np.ndim(X) != 3:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "fit(X, y) learns from labelled items, fit(triplets) from an array of shape "
                f"(n, 3, n_features), got shape {np.shape(X)}"
            )
        triplets = check_array(X, allow_nd=True, dtype=[np.float64, np.float32])
        if triplets.shape[1] != 3:
            raise ValueError(f"triplets: expected shape (n, 3, n_features), got {triplets.shape}")
        if first:
            self.n_features_in_ = triplets.shape[2]
        elif triplets.shape[2] != self.n_features_in_:
            raise ValueError(
                f"X has {triplets.shape[2]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input"
            )
        return triplets

    def _new_learner(self, n_features: int) -> Learner:
        cls = learner_class(self.learner)
        if cls.metric != "l2":
            raise ValueError(
                f"learner: {self.learner!r} learns a similarity, which has no Euclidean "
                "transform; use its class from oahu directly"
            )
        self._seed = int(check_random_state(self.random_state).randint(2**31 - 1))
        params = dict(self.params or {})
        if "seed" in cls.param_names():
            params.setdefault("seed", self._seed)
        return cls(n_features, **params)

    def _learn_drawn_constraints(self, items: np.ndarray, y: np.ndarray, seed: int) -> None:
        kind = self.learner_.capabilities.protocol_kind
        everything = np.arange(len(items))
        n = min(int(self.n_constraints), distinct_constraints(y, everything, kind))
        if n == 0:
            raise ValueError(f"y: {kind}s need two classes, and one with 2 samples; got 1 class")
        drawn = closure_stream(y, everything, n, seed, kind)
        self.learner_.learn(kind, items[drawn.constraints], drawn.similar)

    # ------------------------------------------------------------------ the metric
    def transform(self, X: Any) -> np.ndarray:
        """``X`` embedded where Euclidean distance is the learned metric (float32)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return self.learner_.transform(X)

    def score_pairs(self, pairs: Any) -> np.ndarray:
        """The learned distance between the two items of each pair (n_pairs, 2, n_features):
        smaller means more similar, as metric-learn's Mahalanobis learners answer."""
        check_is_fitted(self)
        pairs = check_array(pairs, allow_nd=True, dtype=[np.float64, np.float32])
        if pairs.ndim != 3 or pairs.shape[1] != 2:
            raise ValueError(f"pairs: expected shape (n_pairs, 2, n_features), got {pairs.shape}")
        left, right = self.transform(pairs[:, 0]), self.transform(pairs[:, 1])
        return np.linalg.norm(left.astype(np.float64) - right, axis=1)

    def get_metric(self) -> Callable[[Any, Any], float]:
        """A function ``distance(u, v)`` of two items under the metric learned so far (later
        learning does not change it), usable as ``KNeighborsClassifier(metric=...)``."""
        check_is_fitted(self)
        frozen = copy.deepcopy(self.learner_)

        def distance(u: Any, v: Any) -> float:
            both = frozen.transform(np.stack([np.ravel(u), np.ravel(v)]))
            return float(np.linalg.norm(both[0].astype(np.float64) - both[1]))

        return distance

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # fit(X) without y only takes triplets (n, 3, d)
        tags.transformer_tags.preserves_dtype = ["float32"]  # embeddings are float32
        return tags
