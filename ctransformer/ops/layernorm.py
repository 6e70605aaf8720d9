"""layer_norm through the C layernorm kernels."""
from __future__ import annotations

from typing import Optional, Tuple

from .. import kernels as K
from ..autograd import apply_op
from ..tensor import Tensor

__all__ = ["layer_norm"]


def layer_norm(input: Tensor, shape: Tuple[int, ...], weight: Optional[Tensor], bias: Optional[Tensor],
               eps: float) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims
    ``shape`` of input (..., *shape); weight, bias of shape ``shape`` or
    None, of input's dtype (checked by nn.functional.layer_norm)."""
    x = input._data
    d = 1
    for s in shape:
        d *= s
    x2 = x.reshape(-1, d)
    w2 = None if weight is None else weight._data.reshape(d)
    b2 = None if bias is None else bias._data.reshape(d)
    out, mean, rstd = K.layernorm_forward(x2, w2, b2, eps)
    need_dx = input.requires_grad

    def backward(g):
        dx, dw, db = K.layernorm_backward(g.reshape(-1, d), x2, w2, mean, rstd, need_dinp=need_dx,
                                          with_bias=b2 is not None)
        return (None if dx is None else dx.reshape(x.shape), None if dw is None else dw.reshape(shape),
                None if db is None else db.reshape(shape))

    return apply_op(out.reshape(x.shape), (input, weight, bias), backward, "LayerNorm", saved=(input, weight, bias))
