"""What ``/v1/model`` tells about the model, the stream and the last checkpoint.

The learner process builds it after every change and reports it (:mod:`oahu.service.messages`);
the serving process builds the first one itself, from the checkpoint it read, so that
``/v1/model`` answers before the learner's first report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oahu.learner import Learner
from oahu.service.checkpoints import Progress


def model_status(
    learner: Learner,
    progress: Progress,
    checkpointed: Progress,
    checkpoint_file: Path,
    lag: dict[int, int] | None = None,
) -> dict[str, Any]:
    """What /v1/model tells about the model, the stream and the last checkpoint (plain values).

    ``diagnostics`` holds what the learner declares it reports (``Learner.diagnostics``);
    ``depth_loss`` repeats OAHU's per-depth loss at the top level, where clients of the first
    release read it, and ``prequential_accuracy`` OAHU's rolling prequential accuracy of the
    α-combined metric, what an operator watches to see the model improve (None for learners
    without them).
    """
    diagnostics = learner.diagnostics()
    return {
        **learner.summary(),
        "n_features": learner.n_features,
        "n_depths": learner.n_depths,
        "metric": learner.metric,
        "depth_loss": diagnostics.get("depth_loss"),
        "prequential_accuracy": diagnostics.get("prequential_accuracy"),
        "diagnostics": diagnostics,
        "constraints_consumed": progress.consumed,
        "dead_letters": dict(progress.dead_letters),
        "offsets": {str(p): o for p, o in sorted(progress.offsets.items())},
        "lag": {str(p): v for p, v in sorted((lag or {}).items())},
        "checkpoint": {
            "path": str(checkpoint_file),
            "written_at": checkpointed.written_at or None,
            "constraints_consumed": checkpointed.consumed,
            "offsets": {str(p): o for p, o in sorted(checkpointed.offsets.items())},
            "items_version": checkpointed.items_version,
        },
    }
