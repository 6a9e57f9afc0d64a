"""oahu: streaming online metric learning.

The learners (OAHU and the online baselines LEGO, RDML, OASIS, OPML, plus plain Euclidean), the
paper's benchmark streams, replay and evaluation, saving and loading, and two ways into other
libraries: :class:`MetricLearner` for scikit-learn and :class:`MetricTransformer` for river.

>>> import oahu
>>> learner = oahu.LEGO(n_features=64)
>>> kind = learner.capabilities.protocol_kind  # LEGO learns pairs in the paper's protocol
>>> stream = oahu.build_stream("digits", n_constraints=500, seed=0, kind=kind)
>>> learner.prepare(stream.X[stream.dev_idx])
>>> stats = oahu.replay(learner, stream)
>>> result = oahu.evaluate(learner, stream.X, stream.y, stream.dev_idx, stream.test_idx)
>>> stats.constraints, round(result.error, 4)  # kNN error on the test split (Euclidean: 0.0145)
(500, 0.0145)

Names are imported on first use, so ``import oahu`` stays light and a process that needs one
part (the service's learner process, say) loads only that part.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # learners
    "Learner": "oahu.learner",
    "Capabilities": "oahu.capabilities",
    "Diagnostic": "oahu.capabilities",
    "OAHU": "oahu.learners.oahu.learner",
    "OAHUConfig": "oahu.learners.oahu.config",
    "PRESETS": "oahu.learners.oahu.config",
    "Euclidean": "oahu.learners.baselines.euclidean",
    "LEGO": "oahu.learners.baselines.lego",
    "RDML": "oahu.learners.baselines.rdml",
    "OASIS": "oahu.learners.baselines.oasis",
    "OPML": "oahu.learners.baselines.opml",
    "CrossModalOAHU": "oahu.learners.cross_modal.learner",
    "LEARNER_NAMES": "oahu.registry",
    "learner_class": "oahu.registry",
    "make_learner": "oahu.registry",
    "save_learner": "oahu.persistence",
    "load_learner": "oahu.persistence",
    # streams
    "ConstraintStream": "oahu.streams.stream_file",
    "build_stream": "oahu.streams.benchmark_stream",
    "load_stream": "oahu.streams.stream_file",
    "DATASETS": "oahu.streams.datasets",
    "load_dataset": "oahu.streams.datasets",
    "CrossModalStream": "oahu.streams.cross_modal",
    "build_cross_modal_stream": "oahu.streams.cross_modal_protocol",
    "load_views": "oahu.streams.views",
    "load_paired": "oahu.streams.views",
    # learning and evaluating
    "replay": "oahu.experiments.stream_replay",
    "ReplayStats": "oahu.experiments.stream_replay",
    "evaluate": "oahu.experiments.evaluation",
    "Evaluation": "oahu.experiments.evaluation",
    "replay_cross_modal": "oahu.experiments.cross_modal_replay",
    "make_index": "oahu.inference.index",
    "classify": "oahu.inference.scoring",
    "verify": "oahu.inference.scoring",
    "retrieve": "oahu.inference.scoring",
    "CrossModalGallery": "oahu.inference.cross_modal",
    # other libraries' shapes
    "MetricLearner": "oahu.adapters.sklearn_api",
    "MetricTransformer": "oahu.adapters.river_api",
    "Triplet": "oahu.adapters.river_api",
    "Pair": "oahu.adapters.river_api",
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'oahu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
