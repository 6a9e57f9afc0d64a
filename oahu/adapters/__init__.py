"""oahu's learners in other libraries' shapes: a scikit-learn estimator
(:mod:`~oahu.adapters.sklearn_api`) and a river transformer (:mod:`~oahu.adapters.river_api`)."""
