"""A learner's parameters, read from its constructor's signature as scikit-learn and river
read theirs: ``get_params``, ``clone`` and the repr, and how a checkpoint's parameters map onto
today's (``migrate_params``, :mod:`oahu.persistence`).
"""

from __future__ import annotations

import inspect
from typing import Any, Self

__all__ = ["LearnerParams"]


class LearnerParams:
    """The parameter half of :class:`~oahu.learner.Learner`, which inherits it. A learner's
    parameters are its constructor's besides ``n_features`` (the data's shape, not a setting),
    stored under the same names unless the class says where they live in ``_param_value``."""

    n_features: int

    @classmethod
    def _param_specs(cls) -> tuple[inspect.Parameter, ...]:
        """The learner's parameters besides ``n_features``, with their defaults: by default the
        constructor's, read from its signature; a class whose constructor takes them as
        ``**kwargs`` (OAHU takes its config's fields) lists them itself.

        >>> from oahu.learners.baselines.rdml import RDML
        >>> [(p.name, p.default) for p in RDML._param_specs()]
        [('learning_rate', 0.1), ('psd_margin', 0.5), ('preprocess', 'unit')]
        """
        skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        parameters = inspect.signature(cls.__init__).parameters.values()
        return tuple(
            p for p in parameters if p.name not in ("self", "n_features") and p.kind not in skip
        )

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """The names of the learner's parameters besides ``n_features`` (``_param_specs``)."""
        return tuple(p.name for p in cls._param_specs())

    @classmethod
    def migrate_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The constructor arguments that rebuild a learner of this class saved with ``params``
        (``get_params`` then): ``params`` themselves, unless the class's parameters changed
        meaning since and it says how an older checkpoint's map onto them.

        >>> from oahu.learners.baselines.oasis import OASIS
        >>> OASIS.migrate_params({"aggressiveness": 0.5})
        {'aggressiveness': 0.5}
        """
        return dict(params)

    @classmethod
    def settled_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with every value the class settles from the others written out as it
        settles it (an ``"auto"`` that depends on other parameters alone), so that two sets of
        parameters that build learners that learn alike compare equal: ``params`` themselves,
        unless the class settles some.

        >>> from oahu.learners.baselines.oasis import OASIS
        >>> OASIS.settled_params({"aggressiveness": 0.5})
        {'aggressiveness': 0.5}
        """
        return dict(params)

    def _param_value(self, name: str) -> Any:
        """The current value of constructor parameter ``name`` (the attribute of that name)."""
        return getattr(self, name)

    def get_params(self) -> dict[str, Any]:
        """Constructor arguments (besides ``n_features``) that build this learner, untrained.

        >>> from oahu.learners.baselines.rdml import RDML
        >>> RDML(n_features=3, learning_rate=0.5).get_params()
        {'learning_rate': 0.5, 'psd_margin': 0.5, 'preprocess': 'unit'}
        """
        return {name: self._param_value(name) for name in self.param_names()}

    def clone(self) -> Self:
        """A new, untrained learner with the same parameters.

        >>> from oahu.learners.baselines.oasis import OASIS
        >>> OASIS(n_features=3, aggressiveness=0.5).clone()
        OASIS(n_features=3, aggressiveness=0.5)
        """
        return type(self)(self.n_features, **self.get_params())

    def __repr__(self) -> str:
        """The constructor call, with the parameters that differ from their defaults."""
        defaults = {p.name: p.default for p in self._param_specs()}
        params = [
            f"{name}={value!r}"
            for name, value in self.get_params().items()
            if not _same(value, defaults.get(name, inspect.Parameter.empty))
        ]
        return f"{type(self).__name__}({', '.join([f'n_features={self.n_features}', *params])})"


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(value == default) and type(value) is type(default)
    except (TypeError, ValueError):  # e.g. arrays: never a default here
        return False
