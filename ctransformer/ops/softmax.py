"""softmax / log_softmax along any dim through the C softmax kernels (which
work on the last axis: other dims are moved there and back)."""
from __future__ import annotations

import numpy as np

from .. import kernels as K
from ..tensor import Tensor, _float_of, _norm_dim, _unary

__all__ = ["softmax"]


def softmax(x: Tensor, dim: int, log: bool) -> Tensor:
    """softmax (``log``: log_softmax) of ``x`` along ``dim``; integer input
    runs in the default float dtype."""
    xd = _float_of(x._data)
    d = _norm_dim(dim, xd.ndim, "log_softmax" if log else "softmax")
    last = d == xd.ndim - 1 or xd.ndim == 0
    moved = xd if last else np.moveaxis(xd, d, -1)
    fwd, bwd = ((K.log_softmax_forward, K.log_softmax_backward) if log
                else (K.softmax_forward, K.softmax_backward))
    flat = moved if moved.ndim else moved.reshape(1)
    y = fwd(flat)
    no_keys = _rows_of_minus_inf(flat, y, log)
    if no_keys is not None:
        y[no_keys] = np.nan
    y = y.reshape(moved.shape)
    out = y if last else np.moveaxis(y, -1, d)

    def backward(g):
        gm = g if last else np.moveaxis(g, d, -1)
        dx = bwd(gm if y.ndim else gm.reshape(1), y if y.ndim else y.reshape(1))
        if no_keys is not None:
            dx[no_keys] = np.nan
        dx = dx.reshape(y.shape)
        return (dx if last else np.moveaxis(dx, -1, d),)

    return _unary(x, out, backward, "LogSoftmax" if log else "Softmax")


def _rows_of_minus_inf(x: np.ndarray, y: np.ndarray, log: bool):
    """Where every element of a row (last axis) of x is -inf: a boolean mask of
    x.shape[:-1], or None when there is no such row.

    torch's softmax and log_softmax give such a row NaN (0 / 0), and NaN
    gradients; the kernels give it 0 / -inf and no gradient (their contract,
    made for attention's fully masked rows).  Only rows whose first output is
    what the kernel writes there (0, or -inf for log) are read whole."""
    if x.shape[-1] == 0:
        return None
    first = y[..., 0]
    candidates = np.isneginf(first) if log else first == 0
    if not candidates.any():
        return None
    rows = np.zeros(first.shape, bool)
    rows[candidates] = np.isneginf(x[candidates]).all(axis=-1)
    return rows if rows.any() else None
