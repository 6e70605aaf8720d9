"""Layer normalisation over the last axis."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .. import _C


def layernorm_forward(x: np.ndarray, weight: Optional[np.ndarray] = None, bias: Optional[np.ndarray] = None,
                      eps: float = 1e-5) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``out = (x - mean) / sqrt(var + eps) * weight + bias`` over the last axis.

    x (..., D) float32/float64, weight (D) or None (scale 1), bias (D) or None
    (shift 0) -> (out (..., D), mean (...), rstd (...)), mean and rstd in x's
    dtype, ``rstd = 1 / sqrt(var + eps)`` with the biased variance (as torch),
    eps inside the root.  Statistics are computed in double with two passes,
    so rows far from zero and constant rows are exact.  An empty row (D = 0)
    has mean 0 and rstd 1 / sqrt(eps).
    """
    return _C.layernorm_forward(x, weight, bias, eps)


def layernorm_backward(dout: np.ndarray, x: np.ndarray, weight: Optional[np.ndarray], mean: np.ndarray,
                       rstd: np.ndarray, dinp: Optional[np.ndarray] = None,
                       dweight: Optional[np.ndarray] = None, dbias: Optional[np.ndarray] = None,
                       need_dinp: bool = True, with_bias: bool = True
                       ) -> Tuple[Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray]]:
    """Gradients of :func:`layernorm_forward`.

    dout (..., D), x (..., D), weight (D) or None, mean (...), rstd (...) from
    the forward -> (dinp (..., D) or None if not need_dinp, dweight (D) or
    None if weight is None, dbias (D) or None if not with_bias).  Arrays
    passed as ``dinp``/``dweight``/``dbias`` (C-contiguous) are accumulated
    into (``+=``) and returned.
    """
    return _C.layernorm_backward(dout, x, weight, mean, rstd, dinp, dweight, dbias, need_dinp, with_bias)
