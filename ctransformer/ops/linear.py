"""matmul (torch's broadcasting rules) and linear through the C linear
kernels (``kernels.matmul_*``, ``kernels.linear_*``)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import kernels as K
from .._checks import _check_operand
from ..autograd import apply_op
from ..tensor import Tensor, _wrap, float16, tensor

__all__ = ["matmul", "linear"]


def matmul(a, b) -> Tensor:
    """``a @ b`` with torch's rules: 1-D operands are promoted, batch dims
    broadcast; float products run in our bmm kernel.

    a (..., M, K) or (K,), b (..., K, N) or (K,) -> (broadcast..., M, N)
    without the promoted dims."""
    _check_operand("matmul", "input", 1, a)
    _check_operand("matmul", "other", 2, b)
    a = a if isinstance(a, Tensor) else tensor(a)
    b = b if isinstance(b, Tensor) else tensor(b)
    ad, bd = a._data, b._data
    if ad.ndim == 0 or bd.ndim == 0:
        raise RuntimeError(f"matmul: both arguments to matmul need to be at least 1D, but they are "
                           f"{ad.ndim}D and {bd.ndim}D")
    if ad.dtype != bd.dtype:
        raise RuntimeError(f"matmul: expected both operands to have the same dtype, got {ad.dtype} and {bd.dtype}")
    a2 = ad[None, :] if ad.ndim == 1 else ad
    b2 = bd[:, None] if bd.ndim == 1 else bd
    if a2.shape[-1] != b2.shape[-2]:
        raise RuntimeError(f"matmul: mat1 and mat2 shapes cannot be multiplied "
                           f"({'x'.join(map(str, a2.shape[-2:]))} and {'x'.join(map(str, b2.shape[-2:]))})")
    try:
        np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise RuntimeError(f"matmul: batch dimensions {tuple(a2.shape[:-2])} and {tuple(b2.shape[:-2])} "
                           "do not broadcast") from None
    if ad.dtype.kind != "f" or ad.dtype == float16:
        return _wrap(np.asarray(np.matmul(ad, bd)))
    out = K.matmul_forward(a2, b2)
    squeeze = ((-2,) if ad.ndim == 1 else ()) + ((-1,) if bd.ndim == 1 else ())
    final = np.squeeze(out, squeeze) if squeeze else out
    ra, rb = a.requires_grad, b.requires_grad

    def backward(g):
        da, db = K.matmul_backward(g.reshape(out.shape), a2, b2, ra, rb)
        return (None if da is None else da.reshape(ad.shape), None if db is None else db.reshape(bd.shape))

    # what torch saves: a if b needs grad, b if a does (checked against in-place changes)
    saved = (b,) if not rb else (a,) if not ra else (a, b)
    return apply_op(final, (a, b), backward, "Matmul", saved=saved)


def linear(input: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    """``input @ weight.T + bias``: input (..., in), weight (out, in), bias
    (out) or None -> (..., out); float32/float64 of one dtype, checked by
    the caller (nn.functional.linear)."""
    x, w = input._data, weight._data
    b = None if bias is None else bias._data
    out = K.linear_forward(x, w, b)
    need_dx = input.requires_grad

    def backward(g):
        dx, dw, db = K.linear_backward(g, x, w, b is not None, need_dx)
        return dx, dw, db

    # as torch: the input is saved for weight's gradient, the weight for the input's
    saved = (input if weight.requires_grad else None, weight if need_dx else None)
    return apply_op(out, (input, weight, bias), backward, "Linear", saved=saved)
