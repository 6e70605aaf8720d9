"""Softmax and log-softmax over the last axis."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import _C


def softmax_forward(x: np.ndarray) -> np.ndarray:
    """``y = exp(x - max) / sum exp(x - max)`` over the last axis.

    x (..., D) float32/float64, at least 1-D -> y (..., D).  Stable for any
    finite inputs (e.g. +-1e30).  A row of all -inf gives zeros; a row
    containing NaN gives NaN.
    """
    return _C.softmax_forward(x)


def softmax_backward(dout: np.ndarray, y: np.ndarray, dinp: Optional[np.ndarray] = None) -> np.ndarray:
    """Gradient of :func:`softmax_forward` from its output y:
    ``dinp += y * (dout - sum(dout * y, axis=-1))``.

    dout (..., D), y (..., D) -> dinp (..., D) (accumulated into when given).
    An all -inf input row (y = 0) gets zero gradient.
    """
    return _C.softmax_backward(dout, y, dinp)


def log_softmax_forward(x: np.ndarray) -> np.ndarray:
    """``y = x - max - log sum exp(x - max)`` over the last axis.

    x (..., D) -> y (..., D).  A row of all -inf gives -inf; a row containing
    NaN gives NaN.
    """
    return _C.log_softmax_forward(x)


def log_softmax_backward(dout: np.ndarray, y: np.ndarray, dinp: Optional[np.ndarray] = None) -> np.ndarray:
    """Gradient of :func:`log_softmax_forward` from its output y:
    ``dinp += dout - exp(y) * sum(dout, axis=-1)``.

    dout (..., D), y (..., D) -> dinp (..., D) (accumulated into when given).
    An all -inf row gets zero gradient (never NaN).
    """
    return _C.log_softmax_backward(dout, y, dinp)
