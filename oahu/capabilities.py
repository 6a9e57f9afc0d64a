"""What a learner class declares it can do, read by callers instead of inspecting the class.

A learner's class sets :class:`Capabilities` (the constraint kinds it learns, whether it builds
its own constraints from labelled samples, the :class:`Diagnostic` values it reports), the way
river's ``_tags`` and scikit-learn's estimator tags do. :class:`oahu.learner.Learner` checks the
declaration against the hooks the class overrides when the class is defined.
"""

from __future__ import annotations

from dataclasses import dataclass

from oahu.constraint_kinds import ConstraintKind

__all__ = ["LEARN_HOOKS", "Capabilities", "Diagnostic"]

# The hook a learner overrides to learn each kind of constraint (checked against its declared
# capabilities when its class is defined). A new kind adds its entry, a public ``learn_<kind>s``
# that validates, and a branch of ``Learner.learn``.
LEARN_HOOKS: dict[str, str] = {
    "triplet": "_learn_triplets",
    "pair": "_learn_pairs",
    "quadruplet": "_learn_quadruplets",
}


@dataclass(frozen=True)
class Diagnostic:
    """A value a learner reports about itself besides the common counters.

    ``name`` keys it in ``Learner.diagnostics()``, in ``/v1/model``'s ``diagnostics`` and in
    ``oahu replay --json``'s ``diagnostics``; the service exports it as the Prometheus gauge
    ``oahu_<name>`` with ``help``, labelled ``depth`` when ``per_depth`` (the value is then a
    list with one float per depth, else one float).
    """

    name: str
    help: str
    per_depth: bool = False


@dataclass(frozen=True)
class Capabilities:
    """What a learner class can do; callers read this instead of inspecting the class.

    ``constraint_kinds``: the kinds it learns from; the first is the kind the paper's protocol
    feeds it (``protocol_kind``). ``learns_samples``: it builds its own constraints from labelled
    samples (``Learner.learn_samples``), as OPML's one pass does. ``diagnostics``: what
    ``Learner.diagnostics()`` reports. ``detects_drift``: it takes a ``drift_detector``
    parameter, hands it to ``Learner._watch_for_drift`` and feeds its prequential mistakes to
    ``Learner._observe_mistakes``, which watch for concept drift (:mod:`oahu.drift`).
    ``combines_parameters``: copies of it that learned different constraints from one start can
    be combined into one model (``Learner.combine_values`` and ``Learner.set_combined_values``,
    implemented by ``_averaged_values`` and ``_set_averaged_values``): what a learning group of
    several processes needs (:mod:`oahu.service.group`). ``cross_modal``: its items belong to
    modalities, each with its own input dimension, and it learns a constraint with the modality
    of each item (``CrossModalOAHU.learn_pair`` and ``learn_triplet``), not through ``learn``.
    ``torch_device``: it computes on the torch device its ``device`` parameter names (``"auto"``:
    a GPU where there is one), so that what serves its embeddings can search there too.

    >>> caps = Capabilities(constraint_kinds=("pair", "triplet"))
    >>> caps.protocol_kind, caps.learns("triplet"), caps.learns("quadruplet")
    ('pair', True, False)
    """

    constraint_kinds: tuple[ConstraintKind, ...] = ("triplet",)
    learns_samples: bool = False
    diagnostics: tuple[Diagnostic, ...] = ()
    detects_drift: bool = False
    combines_parameters: bool = False
    cross_modal: bool = False
    torch_device: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.constraint_kinds) - set(LEARN_HOOKS)
        if not self.constraint_kinds or unknown:
            raise ValueError(
                f"constraint_kinds: one or more of {tuple(LEARN_HOOKS)}, got "
                f"{self.constraint_kinds!r}"
            )

    @property
    def protocol_kind(self) -> ConstraintKind:
        """The kind of constraint stream the paper's protocol feeds this learner."""
        return self.constraint_kinds[0]

    def learns(self, kind: str) -> bool:
        """Whether the learner learns from constraints of ``kind``."""
        return kind in self.constraint_kinds
