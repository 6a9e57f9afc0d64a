"""Which decoded constraints a single-modality learner can learn: those whose items are all in
the default modality. The others are dead-lettered ``unsupported_modality`` before their items
are resolved: items of another modality are neither in this item store nor of the learner's
dimension, so ``unknown_item`` or ``bad_dimension`` would not say why they cannot be learned."""

from __future__ import annotations

from collections.abc import Sequence

from oahu.connectors.constraint import DEFAULT_MODALITY, ROLES, ConstraintBatch, split_modality

__all__ = ["modality_detail", "single_modality"]


def single_modality(
    batch: ConstraintBatch, learner: str
) -> tuple[ConstraintBatch | None, list[tuple[int, str]]]:
    """The rows of ``batch`` in the default modality (None if none), and for every other row
    its input index and what its ``unsupported_modality`` letter says.

    >>> import numpy as np
    >>> b = ConstraintBatch("pair", index=np.array([7, 8]), ids=np.array([[1, 2], [3, 4]]),
    ...                     similar=np.array([True, False]),
    ...                     modalities=np.array([["default", "default"], ["pix", "fou"]]))
    >>> kept, refused = single_modality(b, "oahu")
    >>> kept.index.tolist(), refused[0][0]
    ([7], 8)
    """
    kept, others = split_modality(batch, DEFAULT_MODALITY)
    roles = ROLES[batch.kind]
    return kept, [(i, modality_detail(learner, roles, names)) for i, names in others]


def modality_detail(
    learner: str,
    roles: tuple[str, ...],
    modalities: Sequence[str],
    learned: Sequence[str] = (DEFAULT_MODALITY,),
) -> str:
    """What an ``unsupported_modality`` letter says: each item's modality, and the modalities
    the learner learns (``learned``: the default one alone for a single-modality learner).

    >>> modality_detail("oahu", ("left", "right"), ("pix", "fou"))
    "items in modalities left 'pix', right 'fou': learner 'oahu' learns one modality, 'default'"
    >>> modality_detail("x", ("left", "right"), ("snd", "fou"), ("pix", "fou"))
    "items in modalities left 'snd', right 'fou': learner 'x' learns modalities 'pix', 'fou'"
    """
    items = ", ".join(f"{role} {name!r}" for role, name in zip(roles, modalities, strict=True))
    if len(learned) == 1:
        learns = f"learns one modality, {learned[0]!r}"
    else:
        learns = "learns modalities " + ", ".join(repr(m) for m in learned)
    return f"items in modalities {items}: learner {learner!r} {learns}"
