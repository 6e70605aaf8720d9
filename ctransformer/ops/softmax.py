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
    y = fwd(moved if moved.ndim else moved.reshape(1)).reshape(moved.shape)
    out = y if last else np.moveaxis(y, -1, d)

    def backward(g):
        gm = g if last else np.moveaxis(g, d, -1)
        dx = bwd(gm if y.ndim else gm.reshape(1), y if y.ndim else y.reshape(1)).reshape(y.shape)
        return (dx if last else np.moveaxis(dx, -1, d),)

    return _unary(x, out, backward, "LogSoftmax" if log else "Softmax")
