"""An update steps the network on the rows of its active constraints alone: the margin loss
leaves most constraints of a micro-batch with no derivative, and their rows would only add zeros
to the weights' gradients. These check that leaving them out changes nothing but the work."""

import numpy as np
import pytest
import torch

from oahu.learners.oahu.learner import OAHU
from oahu.learners.oahu.loss import constraint_distances, embedding_gradient
from oahu.learners.oahu.network import ForwardCache


def _model() -> OAHU:
    model = OAHU(5, n_hidden_layers=2, hidden_width=6, embedding_dim=3, batch_size=8, seed=3)
    model.prepare(np.random.default_rng(11).random((60, 5), dtype=np.float32))
    model.update_step.learned = 10_000  # past the ramp: one update takes all eight
    return model


def _half_inactive() -> tuple[np.ndarray, list[bool]]:
    """Eight triplets: even ones with the positive on the anchor and the negative far (no
    margin loss at any depth), odd ones with the positive far and the negative next to the
    anchor (a loss at every depth)."""
    rng = np.random.default_rng(5)
    anchors = rng.random((8, 5), dtype=np.float32)
    others = anchors[::-1] + 2.0  # far from every anchor
    triplets = np.stack([anchors, anchors, others], axis=1)
    triplets[1::2] = np.stack([anchors[1::2], others[1::2], anchors[1::2] + 0.01], axis=1)
    return triplets, [bool(i % 2) for i in range(8)]


def _cache(n_depths: int, n_rows: int, x: np.ndarray | None = None) -> ForwardCache:
    """A forward pass's cache of ``n_rows`` rows (inputs ``x``, or zeros of width 2), with
    embeddings of width 3; what picking rows reads of it is their order."""
    return ForwardCache(
        np.zeros((n_rows, 2), np.float32) if x is None else x,
        np.zeros((n_depths - 1, n_rows, 4), np.float32),
        np.ones((n_depths, n_rows, 1), np.float32),
        np.zeros((n_depths, n_rows, 3), np.float32),
    )


def _distances(n_depths: int, n_constraints: int, width: int):
    """A depth scale of ones and the differences and distances of random triplets' embeddings
    (L+1, 3, T, E)."""
    f = np.random.default_rng(2).random((n_depths, 3, n_constraints, width), dtype=np.float32)
    return (np.ones(n_depths, np.float32), *constraint_distances(f, 3))


def _recording_rows(model: OAHU) -> list[int]:
    """The rows of every network step ``model`` takes, recorded as they come."""
    rows: list[int] = []
    step = model.network.step

    def recorded(cache: ForwardCache, *args, **kwargs):
        rows.append(cache.x.shape[0])
        return step(cache, *args, **kwargs)

    model.network.step = recorded
    return rows


def _every_row(cache, scale, g_pos, g_neg, diffs, dists, n_roles, n_new):
    """The rows of every constraint of an update (repeated rows repeated, as its cache maps
    them) and their gradients, as the backward pass took them before inactive rows were left
    out."""
    grad = embedding_gradient(scale, g_pos, g_neg, diffs, dists, n_roles)
    every = cache.rows(np.arange(n_roles * g_pos.shape[1]))
    return every, grad.reshape(grad.shape[0], -1, grad.shape[-1])


def test_inactive_constraints_leave_the_step_and_the_model_is_the_same() -> None:
    compact, every_row = _model(), _model()
    # The same learner stepping on every row, as it did before inactive rows were left out.
    full_step = every_row.update_step
    full_step.step_rows = _every_row
    rows_compact, rows_full = _recording_rows(compact), _recording_rows(every_row)
    start = {k: v.clone() for k, v in compact.network.tensors().items()}
    triplets, active = _half_inactive()
    # Twice: the residual heads start at zero, so the first update moves no hidden layer.
    for _ in range(2):
        used = compact.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
        every_row.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    assert used.tolist() == active
    assert rows_full[0] == 3 * 8  # the first update: three rows per triplet, nothing replayed
    assert rows_compact[0] == 3 * 4  # the four active triplets' rows alone
    assert len(rows_compact) == len(rows_full) == 2
    assert rows_compact[1] < rows_full[1]  # with its replayed and mined triplets
    for name, value in compact.network.tensors().items():
        assert not torch.equal(value, start[name]), name  # the steps were taken
        assert torch.allclose(value, every_row.network.tensors()[name], atol=1e-6), name
    assert np.array_equal(compact.alpha, every_row.alpha)


def test_rows_are_picked_role_by_role() -> None:
    # Constraints 0 and 2 of three active: rows t, T + t, 2T + t of each, roles in order.
    step = _model().update_step
    n_depths, width = step.n_depths, 3
    x = np.arange(9 * 2, dtype=np.float32).reshape(9, 2)  # rows a0 a1 a2 p0 p1 p2 n0 n1 n2
    cache = _cache(n_depths, 9, x)
    g_pos = np.zeros((n_depths, 3), np.float32)
    g_neg = np.zeros((n_depths, 3), np.float32)
    g_pos[1, 0] = 0.5  # constraint 0 has a derivative at depth 1 only
    g_neg[0, 2] = -0.5  # constraint 2 at depth 0 only
    scale, diffs, dists = _distances(n_depths, 3, width)
    picked, picked_grad = step.step_rows(cache, scale, g_pos, g_neg, diffs, dists, 3, n_new=3)
    assert picked.x[:, 0].tolist() == [0.0, 4.0, 6.0, 10.0, 12.0, 16.0]  # rows 0 2 3 5 6 8
    # Each picked row's gradient is the one every constraint's gradient gives it.
    every = embedding_gradient(scale, g_pos, g_neg, diffs, dists, 3)  # (L+1, roles, T, E)
    assert picked_grad.shape == (n_depths, 6, width)
    assert np.array_equal(picked_grad[:, 1], every[:, 0, 2])  # constraint 2's anchor
    assert np.array_equal(picked_grad[:, 2], every[:, 1, 0])  # constraint 0's positive
    assert np.abs(every[:, :, 1]).max() == 0  # the inactive constraint had none to take


@pytest.mark.parametrize("active", [0, 3])
def test_no_active_constraint_means_no_step_and_all_active_keeps_every_row(active: int) -> None:
    step = _model().update_step
    n_depths = step.n_depths
    cache = _cache(n_depths, 9)
    g_pos = np.zeros((n_depths, 3), np.float32)
    g_pos[:, :active] = 1.0
    scale, diffs, dists = _distances(n_depths, 3, 3)
    picked, grad = step.step_rows(cache, scale, g_pos, 0 * g_pos, diffs, dists, 3, n_new=3)
    if active:
        assert picked is cache and grad.shape == (n_depths, 9, 3)
    else:
        assert picked is None and grad is None


def test_a_strict_update_keeps_every_row() -> None:
    # A strict update's few rows cost their calls, not their arithmetic: it keeps its sums.
    step = _model().update_step
    n_depths = step.n_depths
    cache = _cache(n_depths, 6)
    g_pos = np.zeros((n_depths, 2), np.float32)
    g_pos[:, 0] = 1.0  # the new constraint active, its replayed one not
    scale, diffs, dists = _distances(n_depths, 2, 3)
    picked, grad = step.step_rows(cache, scale, g_pos, 0 * g_pos, diffs, dists, 3, n_new=1)
    assert picked is cache and grad.shape == (n_depths, 6, 3)
