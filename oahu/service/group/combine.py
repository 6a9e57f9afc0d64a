"""One combine of a learning group: the members' changes since the last combine added up (strict
learners) or averaged weighted by what each learned in the round (micro-batch learners), their
counters summed, and what each member says to the group (stop, checkpoint, item changes)
gathered, all in one all-reduce of one float64 vector.

Every member holds θ₀, the values the last combine gave every member (the started or restored
model before the first). Member i contributes ``[c_i·(θ_i − θ₀), s_i − s, w_i, signals_i]``: the
change of its combined values θ_i (the parameters, :meth:`oahu.learner.Learner.combine_values`)
since θ₀; its summed counters s_i less the group's ``s`` at the last combine; w_i, the
constraints it learned this round; and its signals. With the ``"mean"`` rule c_i = w_i and the
sum gives θ = θ₀ + Σ w_i·(θ_i − θ₀) / Σ w_i, the weighted mean of the θ_i; with ``"sum"``,
c_i = 1 and θ = θ₀ + Σ (θ_i − θ₀): every member's change is kept whole, as one learner taking
all of the round's steps would (the linear scaling of large-batch SGD, over members instead of
a batch's rows). Counters become s + Σ (s_i − s), and each signal is summed. A member that
learned nothing changed nothing (its model is θ₀); a round in which nobody learned changes no
parameter.

Which rule (:func:`combine_rule`): a strict learner's round is a few dozen single-constraint
steps from θ₀, small and nearly additive, and averaging them would teach each constraint half
as much (two members); a micro-batch learner's round is thousands of constraints per member,
whose changes, added up, overshoot. On development seeds 100-102 (ours, docs/delivery.md, Eq. G1
and G2; ``benchmarks/group_combine_rule.py``), two members combined every 64 strict updates made
fewer validation errors with the sum than with the mean on 5 of 6 streams (sharded record by
record or in blocks); every 64 updates of 256, more on all 6.

:func:`combine_in_process` does the same sum over learners in one process, in rank order: the
replay of a recorded schedule (:mod:`.schedule`).

>>> import numpy as np, torch
>>> from oahu.combinable import CombineValues
>>> last = CombineValues(torch.tensor([1.0, 2.0], dtype=torch.float64), np.array([8.0]))
>>> a = CombineValues(torch.tensor([1.0, 4.0], dtype=torch.float64), np.array([10.0]))
>>> b = CombineValues(torch.tensor([3.0, 0.0], dtype=torch.float64), np.array([13.0]))
>>> total = pack(a, last, 1.0, [0, 1], "mean") + pack(b, last, 3.0, [1, 0], "mean")
>>> values, signals = unpack(total, last, n_signals=2, rule="mean")
>>> values.averaged.tolist(), values.summed.tolist(), signals.tolist()
([2.5, 1.0], [15.0], [1.0, 1.0])
>>> total = pack(a, last, 1.0, [], "sum") + pack(b, last, 3.0, [], "sum")
>>> unpack(total, last, n_signals=0, rule="sum")[0].averaged.tolist()
[3.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch

from oahu.combinable import CombineValues
from oahu.learner import Learner

__all__ = ["CombineRule", "apply", "combine_in_process", "combine_rule", "pack", "unpack"]

CombineRule = Literal["mean", "sum"]


def combine_rule(learner: Learner) -> CombineRule:
    """``"sum"`` for a strict learner (an update per constraint), ``"mean"`` for micro-batches
    (the module docstring says why).

    >>> from oahu.learners.oahu.learner import OAHU
    >>> combine_rule(OAHU(n_features=2)), combine_rule(OAHU(n_features=2, batch_size=16))
    ('sum', 'mean')
    """
    return "sum" if learner.constraints_per_update == 1 else "mean"


def pack(
    values: CombineValues,
    last: CombineValues,
    weight: float,
    signals: Sequence[float],
    rule: CombineRule,
) -> torch.Tensor:
    """A member's contribution to the sum (see the module docstring), on its values' device:
    ``last`` is what the last combine gave every member (θ₀ and the group's counters s)."""
    device = values.averaged.device
    tail = np.concatenate(
        [values.summed - last.summed, [float(weight)], np.asarray(signals, np.float64)]
    )
    change = values.averaged - last.averaged.to(device)
    if rule == "mean":
        change = change * float(weight)
    return torch.cat([change, torch.from_numpy(tail).to(device, torch.float64)])


def unpack(
    total: torch.Tensor, last: CombineValues, n_signals: int, rule: CombineRule
) -> tuple[CombineValues | None, np.ndarray]:
    """The combined values (an empty averaged part when no member learned anything: each keeps
    its own, the last combined model) and the summed signals."""
    base = last.summed
    tail = total[-(len(base) + 1 + n_signals) :].cpu().numpy()
    summed = base + tail[: len(base)]
    weight = float(tail[len(base)])
    signals = tail[len(base) + 1 :]
    averaged = total[: len(total) - len(tail)]
    if weight <= 0.0:
        return CombineValues(averaged[:0], summed), signals
    change = averaged / weight if rule == "mean" else averaged
    return CombineValues(last.averaged.to(change.device) + change, summed), signals


def apply(learner: Learner, combined: CombineValues) -> None:
    """Continue ``learner`` from ``combined`` (its own parameters when nobody learned)."""
    if combined.averaged.numel() == 0:
        combined = CombineValues(learner.combine_values().averaged, combined.summed)
    learner.set_combined_values(combined)


def combine_in_process(
    learners: Sequence[Learner],
    weights: Sequence[float],
    last: CombineValues,
    rule: CombineRule,
    reduce: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
) -> CombineValues:
    """Combine ``learners`` (the members, in rank order) in place, as the group's all-reduce
    does, from ``last`` (what the last combine gave them); returns what this one gave them."""
    parts = [
        pack(m.combine_values(), last, w, [], rule) for m, w in zip(learners, weights, strict=True)
    ]
    total = reduce(parts) if reduce is not None else torch.stack(parts).sum(0)
    combined, _ = unpack(total, last, 0, rule)
    assert combined is not None
    for member in learners:
        apply(member, combined)
    return learners[0].combine_values()
