"""The numpy/torch array helpers behind the CPU and GPU step."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from oahu.learners.oahu import arrays
from oahu.learners.oahu.arrays import (
    add_batched_outer_,
    add_outer_,
    host_view,
    relu_backward,
    row_norms,
    times_transposed,
)
from oahu.threads import blas_threads


def test_add_outer_is_in_place_and_equals_the_product() -> None:
    rng = np.random.default_rng(0)
    w = rng.random((4, 6), dtype=np.float32)
    a, b = rng.random((3, 4), dtype=np.float32), rng.random((3, 6), dtype=np.float32)
    expected = w + -0.3 * a.T @ b
    view = w[:]  # writes must land in this very memory
    add_outer_(view, a, b, -0.3)
    assert np.allclose(w, expected, atol=1e-6)
    t = torch.from_numpy(rng.random((4, 6), dtype=np.float32))
    expected_t = t + 2.0 * torch.from_numpy(a).T @ torch.from_numpy(b)
    add_outer_(t, torch.from_numpy(a), torch.from_numpy(b), 2.0)
    assert torch.allclose(t, expected_t, atol=1e-6)


def test_add_outer_refuses_to_lose_an_update() -> None:
    # float64 (or any layout BLAS cannot write into) would make f2py update a copy.
    w = np.zeros((2, 3))
    with pytest.raises(RuntimeError, match="not in place"):
        add_outer_(w, np.ones((1, 2), np.float32), np.ones((1, 3), np.float32), 1.0)


def test_add_batched_outer_per_slice() -> None:
    rng = np.random.default_rng(1)
    out = rng.random((2, 3, 4), dtype=np.float32)
    a, b = rng.random((2, 5, 3), dtype=np.float32), rng.random((2, 5, 4), dtype=np.float32)
    expected = out + 0.5 * np.einsum("nmr,nmc->nrc", a, b)
    add_batched_outer_(out, a, b, 0.5)
    assert np.allclose(out, expected, atol=1e-6)


def test_host_view_shares_memory_and_checks_dtype() -> None:
    t = torch.zeros(2, 2)
    host_view(t)[0, 1] = 5.0
    assert float(t[0, 1]) == 5.0
    with pytest.raises(ValueError, match="float32"):
        host_view(torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="contiguous"):
        host_view(torch.zeros(2, 3).T)


def test_row_norms_and_relu_backward_agree_across_libraries() -> None:
    x = np.array([[3.0, 4.0], [0.0, -2.0]], np.float32)
    assert row_norms(x).tolist() == [[5.0], [2.0]]
    assert row_norms(torch.from_numpy(x)).tolist() == [[5.0], [2.0]]
    out = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
    grad = np.array([[7.0, 8.0], [9.0, 10.0]], np.float32)
    assert relu_backward(grad, out).tolist() == [[7.0, 0.0], [0.0, 10.0]]
    assert relu_backward(torch.from_numpy(grad), torch.from_numpy(out)).tolist() == [
        [7.0, 0.0],
        [0.0, 10.0],
    ]


@pytest.mark.parametrize("shape", [(128, 200), (200, 200), (1, 200, 128)])
def test_times_transposed_equals_the_plain_product_to_the_bit_in_c_order(shape) -> None:
    # The network's forward pass takes it for x·Wᵀ: a learner's model must not depend on which
    # of the two BLAS calls a row count picks (on some CPUs they round differently: the probe
    # keeps the faster one only where it agrees), and what is computed next must see C order.
    rng = np.random.default_rng(2)
    w = rng.standard_normal(shape, dtype=np.float32)
    with blas_threads(1):
        for m in (1, 3, 8, 9, 12, 16, 57, 128, 129, 777):
            x = rng.standard_normal((*shape[:-2], m, shape[-1]), dtype=np.float32)
            out = times_transposed(x, w)
            assert np.array_equal(out, x @ w.swapaxes(-1, -2)), m
            assert out.flags.c_contiguous, m
    # On tensors (the GPU path) it is the same product, over the same last two axes.
    x = rng.standard_normal((*shape[:-2], 12, shape[-1]), dtype=np.float32)
    on_torch = times_transposed(torch.from_numpy(x), torch.from_numpy(w))
    assert on_torch.shape == (*out.shape[:-2], 12, shape[-2])
    assert np.allclose(on_torch.numpy(), times_transposed(x, w), atol=1e-4)


@pytest.mark.parametrize("rows", [9, 12, 96])
def test_the_probe_tells_whether_the_two_forms_agree_on_this_cpu(rows) -> None:
    # What the probe remembers for a shape is what other operands of that shape show: the two
    # forms either sum in the same order (equal bits for any operands) or not (different bits
    # for almost all), so three fresh draws must all agree with it.
    arrays._AGREES.clear()
    with blas_threads(1):
        probed = arrays._transposed_form_agrees(rows, (128, 200))
        rng = np.random.default_rng(99)
        for _ in range(3):
            w = rng.standard_normal((128, 200), dtype=np.float32)
            x = rng.standard_normal((rows, 200), dtype=np.float32)
            same = np.array_equal((w @ x.T).T, x @ w.T)
            assert same == probed
    assert arrays._AGREES[(rows, 128, 200)] == probed


# OpenBLAS picks its kernels by CPU; OPENBLAS_CORETYPE makes it use another CPU's (within what
# this CPU's instructions allow), so one machine checks the probe against the kernels of several:
# on an AMD EPYC with AVX-512, SkylakeX's kernels give the two forms the same bits and Haswell's
# (also what OpenBLAS runs on Zen) do not, so both of the probe's answers are exercised there.
_KERNEL_CHECK = """
import numpy as np
from oahu.learners.oahu import arrays
from oahu.threads import blas_threads
rng = np.random.default_rng(5)
w = rng.standard_normal((128, 200), dtype=np.float32)
with blas_threads(1):
    for m in (9, 12, 57, 128):
        x = rng.standard_normal((m, 200), dtype=np.float32)
        assert np.array_equal(arrays.times_transposed(x, w), x @ w.T), m
print(sorted(m for (m, *_), same in arrays._AGREES.items() if same))
"""


# The instructions each forced kernel executes: OpenBLAS does not check them when told to use a
# core type, and a CPU without them stops the process with SIGILL (EPYCs before Zen 4 have AVX2
# but no AVX-512, so SkylakeX's kernels cannot run there).
_CORETYPE_NEEDS = {
    "Sandybridge": {"avx"},
    "Haswell": {"avx", "avx2", "fma"},
    "SkylakeX": {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"},
}


def _cpu_flags() -> set[str] | None:
    """This CPU's instruction-set flags, from Linux's /proc/cpuinfo (None elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return None


@pytest.mark.parametrize("coretype", sorted(_CORETYPE_NEEDS))
def test_times_transposed_is_the_plain_product_under_other_cpus_kernels(coretype) -> None:
    flags = _cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo: cannot tell which kernels this CPU can run")
    missing = _CORETYPE_NEEDS[coretype] - flags
    if missing:
        pytest.skip(f"{coretype}'s kernels need {', '.join(sorted(missing))}, which this CPU lacks")
    env = {**os.environ, "OPENBLAS_CORETYPE": coretype}
    run = subprocess.run(
        [sys.executable, "-c", _KERNEL_CHECK], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    agreeing = json.loads(run.stdout)
    assert set(agreeing) <= {9, 12, 57, 128}


@pytest.fixture
def broadcast_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The small-row broadcast forms, which run on CUDA only, made to run on CPU tensors, so that
    the CPU checks the arithmetic a GPU step runs."""
    monkeypatch.setattr(arrays, "_SMALL_PRODUCT_DEVICES", ("cpu",))


def test_small_products_on_the_device_are_broadcast_sums(broadcast_on_cpu) -> None:
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 3.0]])
    # a @ b by hand: [[1, 2, 8], [3, 4, 18]]; aᵀ b: [[1, 3, 11], [2, 4, 16]].
    assert arrays.product(a, b).tolist() == [[1.0, 2.0, 8.0], [3.0, 4.0, 18.0]]
    assert arrays.product(a.unsqueeze(0).expand(2, 2, 2), b).shape == (2, 2, 3)


def test_the_broadcast_is_taken_for_small_row_counts_only(broadcast_on_cpu) -> None:
    rng = np.random.default_rng(3)
    w = torch.from_numpy(rng.standard_normal((128, 200), dtype=np.float32))
    for rows in (1, 12, arrays.SMALL_PRODUCT_ROWS, arrays.SMALL_PRODUCT_ROWS + 1, 300):
        x = torch.from_numpy(rng.standard_normal((rows, 200), dtype=np.float32))
        got = arrays.times_transposed(x, w)
        assert got.shape == (rows, 128)
        torch.testing.assert_close(got, x @ w.T, rtol=1e-5, atol=1e-4)
    assert arrays._broadcast(x, arrays.SMALL_PRODUCT_ROWS)
    assert not arrays._broadcast(x, arrays.SMALL_PRODUCT_ROWS + 1)
    assert not arrays._broadcast(x.numpy(), 1)  # numpy keeps BLAS: the CPU step is unchanged


def test_small_products_leave_the_cpu_step_and_other_devices_alone() -> None:
    # Without the fixture, CPU tensors take the BLAS product: the same bits as ``@``.
    rng = np.random.default_rng(4)
    a = torch.from_numpy(rng.standard_normal((12, 200), dtype=np.float32))
    b = torch.from_numpy(rng.standard_normal((200, 128), dtype=np.float32))
    assert torch.equal(arrays.product(a, b), a @ b)
    assert np.array_equal(arrays.product(a.numpy(), b.numpy()), a.numpy() @ b.numpy())


@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_device_step_with_broadcast_products_learns_the_blas_model(
    broadcast_on_cpu, monkeypatch: pytest.MonkeyPatch, batch_size: int
) -> None:
    # The device engine's update on CPU tensors, with and without the broadcast forms a GPU
    # takes for a strict step's dozen rows (and a micro-batch of two's 24, with the trust
    # region): the same model up to float rounding.
    from oahu import OAHU

    rng = np.random.default_rng(0)
    rows = rng.standard_normal((300, 3, 20)).astype(np.float32)
    models = []
    for cutoff in (arrays.SMALL_PRODUCT_ROWS, 0):
        monkeypatch.setattr(arrays, "SMALL_PRODUCT_ROWS", cutoff)
        model = OAHU(
            20, hidden_width=16, preprocess="none", device="cpu", step_engine="device", seed=0,
            batch_size=batch_size, batch_ramp=1,
        )  # fmt: skip
        model.learn_triplets(rows[:, 0], rows[:, 1], rows[:, 2])
        models.append(model)
    broadcast, blas = models
    assert broadcast.updates == blas.updates >= 300 // batch_size
    for name, t in blas.network.tensors().items():
        torch.testing.assert_close(broadcast.network.tensors()[name], t, rtol=0, atol=1e-5)
    np.testing.assert_allclose(broadcast.alpha, blas.alpha, atol=1e-5)
