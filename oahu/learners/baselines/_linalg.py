"""Dense linear-algebra kernels shared by the matrix baselines.

Every baseline update is one or two matrix-vector products plus a rank-one or rank-two update of
a d x d float64 matrix. numpy's ``A -= np.outer(x, y)`` allocates and streams a d x d temporary;
BLAS level-2 routines (``dger``/``dsyr``) update in place in one pass, which is what makes
thousands of constraints per second possible at d = 784.

Symmetric matrices (the Mahalanobis A of LEGO, RDML and OPML, and RDML's A⁻¹) are stored in
Fortran order and only their upper triangle is read or written (``dsymv``/``dsyr``/``dsyr2k``):
half the memory traffic per update. The lower triangle is stale by design; ``symmetrized``
rebuilds the full matrix whenever one leaves the learner.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.linalg import blas

_UPPER = 0


def fortran_identity(n: int) -> np.ndarray:
    """A float64 identity in the memory layout the BLAS kernels update in place."""
    return np.asfortranarray(np.eye(n, dtype=np.float64))


def as_fortran64(matrix: np.ndarray | torch.Tensor) -> np.ndarray:
    """A float64 Fortran-ordered copy of ``matrix`` (e.g. a tensor read from a checkpoint)."""
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().cpu().numpy()
    return np.array(matrix, dtype=np.float64, order="F", copy=True)


def sym_matvec(a_upper: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``A @ x`` for a symmetric A of which only the upper triangle is valid."""
    return blas.dsymv(1.0, a_upper, x, lower=_UPPER)


def sym_rank1_update(a_upper: np.ndarray, alpha: float, x: np.ndarray) -> None:
    """In place: ``A += alpha * x xᵀ`` on the upper triangle of a Fortran-ordered A."""
    out = blas.dsyr(alpha, x, lower=_UPPER, a=a_upper, overwrite_a=1)
    if out is not a_upper:  # only if the layout were wrong; keep the update rather than lose it
        a_upper[...] = out


def matvec(m: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``M @ x`` for a general Fortran-ordered M."""
    return blas.dgemv(1.0, m, x)


def low_rank_update(m: np.ndarray, left: np.ndarray, right: np.ndarray) -> None:
    """In place: ``M += left rightᵀ`` for a general Fortran-ordered M and thin d x k factors:
    k rank-one updates in one pass over M (``dgemm``) instead of k passes (``dger``)."""
    out = blas.dgemm(1.0, left, right, trans_b=1, beta=1.0, c=m, overwrite_c=1)
    if out is not m:
        m[...] = out


def sym_rank2k_update(a_upper: np.ndarray, left: np.ndarray, right: np.ndarray) -> None:
    """In place: ``A += left rightᵀ + right leftᵀ`` on the upper triangle, for thin d x k
    Fortran-ordered factors (one pass over half of A instead of 2k rank-one passes)."""
    out = blas.dsyr2k(1.0, left, right, beta=1.0, c=a_upper, lower=_UPPER, overwrite_c=1)
    if out is not a_upper:
        a_upper[...] = out


def symmetrized(a_upper: np.ndarray) -> np.ndarray:
    """The full symmetric matrix (C order) whose upper triangle is that of ``a_upper``."""
    upper = np.triu(a_upper)
    return np.ascontiguousarray(upper + np.triu(upper, 1).T)


def mahalanobis_factor(a: np.ndarray) -> np.ndarray:
    """A matrix G with G Gᵀ = A for a symmetric PSD A, so that x ↦ Gᵀx embeds the metric.

    Cholesky first: it is cheap and continuous in A, so embeddings drift smoothly as A learns.
    A numerically singular A (RDML can drive eigenvalues to ~0) falls back to an eigendecomposition
    with negative round-off eigenvalues clipped to 0.
    """
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        eigval, eigvec = np.linalg.eigh(a)
        return eigvec * np.sqrt(np.clip(eigval, 0.0, None))


def to_tensor(matrix: np.ndarray) -> torch.Tensor:
    """A C-contiguous tensor copy, safe to save while the learner keeps updating ``matrix``."""
    return torch.from_numpy(np.array(matrix, dtype=np.float64, order="C", copy=True))
