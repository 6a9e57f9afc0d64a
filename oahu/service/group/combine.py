"""One combine of a learning group: the members' models averaged, weighted by what each learned
in the round, their counters summed, and what each member says to the group (stop, checkpoint,
item changes) gathered, all in one all-reduce of one float64 vector.

Member i contributes ``[w_i·θ_i, s_i − s, w_i, signals_i]``: its averaged values θ_i (the
parameters, :meth:`oahu.learner.Learner.combine_values`) weighted by w_i, the constraints it
learned this round; its summed counters s_i less the group's ``s`` at the last combine; w_i;
and its signals. The sum gives θ = Σ w_i·θ_i / Σ w_i, counters s + Σ (s_i − s), and each signal
summed. A member that learned nothing weighs nothing (its model is the last combined one); a
round in which nobody learned changes no parameter.

:func:`combine_in_process` does the same sum over learners in one process, in rank order: the
replay of a recorded schedule (:mod:`.schedule`).

>>> import numpy as np, torch
>>> from oahu.learner import CombineValues
>>> a = CombineValues(torch.tensor([1.0, 4.0], dtype=torch.float64), np.array([10.0]))
>>> b = CombineValues(torch.tensor([3.0, 0.0], dtype=torch.float64), np.array([13.0]))
>>> base = np.array([8.0])
>>> total = pack(a, base, 1.0, [0, 1]) + pack(b, base, 3.0, [1, 0])
>>> values, signals = unpack(total, base, n_signals=2)
>>> values.averaged.tolist(), values.summed.tolist(), signals.tolist()
([2.5, 1.0], [15.0], [1.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from oahu.learner import CombineValues, Learner

__all__ = ["apply", "combine_in_process", "pack", "unpack"]


def pack(
    values: CombineValues, base: np.ndarray, weight: float, signals: Sequence[float]
) -> torch.Tensor:
    """A member's contribution to the sum (see the module docstring), on its values' device."""
    device = values.averaged.device
    tail = np.concatenate([values.summed - base, [float(weight)], np.asarray(signals, np.float64)])
    return torch.cat(
        [values.averaged * float(weight), torch.from_numpy(tail).to(device, torch.float64)]
    )


def unpack(
    total: torch.Tensor, base: np.ndarray, n_signals: int
) -> tuple[CombineValues | None, np.ndarray]:
    """The combined values (an empty averaged part when no member learned anything: each keeps
    its own, the last combined model) and the summed signals."""
    tail = total[-(len(base) + 1 + n_signals) :].cpu().numpy()
    summed = base + tail[: len(base)]
    weight = float(tail[len(base)])
    signals = tail[len(base) + 1 :]
    averaged = total[: len(total) - len(tail)]
    if weight <= 0.0:
        return CombineValues(averaged[:0], summed), signals
    return CombineValues(averaged / weight, summed), signals


def apply(learner: Learner, combined: CombineValues) -> None:
    """Continue ``learner`` from ``combined`` (its own parameters when nobody learned)."""
    if combined.averaged.numel() == 0:
        combined = CombineValues(learner.combine_values().averaged, combined.summed)
    learner.set_combined_values(combined)


def combine_in_process(
    learners: Sequence[Learner],
    weights: Sequence[float],
    base: np.ndarray,
    reduce: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
) -> np.ndarray:
    """Combine ``learners`` (the members, in rank order) in place, as the group's all-reduce
    does; returns the new base (the summed counters)."""
    parts = [pack(m.combine_values(), base, w, []) for m, w in zip(learners, weights, strict=True)]
    total = reduce(parts) if reduce is not None else torch.stack(parts).sum(0)
    combined, _ = unpack(total, base, 0)
    assert combined is not None
    for member in learners:
        apply(member, combined)
    return combined.summed
