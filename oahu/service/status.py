"""What ``/v1/model`` tells about the model, the stream and the last checkpoint.

The learner process builds it after every change and reports it (:mod:`oahu.service.messages`);
the serving process builds the first one itself, from the checkpoint it read, so that
``/v1/model`` answers before the learner's first report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from oahu.learner import Learner
from oahu.service.checkpoints import Progress


def model_status(
    learner: Learner,
    progress: Progress,
    checkpointed: Progress,
    checkpoint_file: Path,
    lag: dict[int, int] | None = None,
) -> dict[str, Any]:
    """What /v1/model tells about the model, the stream and the last checkpoint (plain values)."""
    losses = getattr(learner, "last_losses", None)
    depth_loss = None if losses is None else [float(v) for v in np.asarray(losses.cpu())]
    return {
        **learner.summary(),
        "n_features": learner.n_features,
        "n_depths": learner.n_depths,
        "metric": learner.metric,
        "depth_loss": depth_loss,
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
