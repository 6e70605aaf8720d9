"""The Transformer's fused sub-layers through the C fused kernels, ONE
autograd op each: the feed-forward block (``kernels.bias_act_forward`` or
``kernels.bias_act_dropout_forward``, ``kernels.ff_backward``) and the post-norm residual connection
(``kernels.add_layernorm_*``; in training, with the sublayer's dropout, ``kernels.dropout_add_layernorm_*``)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import kernels as K
from ..autograd import FreshGrads, apply_op
from ..random import default_generator
from ..tensor import Tensor

__all__ = ["feed_forward", "add_layer_norm", "dropout_add_layer_norm"]


def feed_forward(x: Tensor, w1: Tensor, b1: Optional[Tensor], w2: Tensor, b2: Optional[Tensor],
                 activation: str = "relu", approximate: str = "none", dropout_p: float = 0.0,
                 training: bool = True) -> Tensor:
    """``linear2(dropout(act(linear1(x))))`` as ONE autograd op: x (..., D),
    w1 (F, D), b1 (F), w2 (D, F), b2 (D) -> (..., D).  activation "relu" or
    "gelu" (``approximate="tanh"`` for the tanh form); dropout only when
    training and dropout_p > 0."""
    xd = x._data
    h = K.linear_forward(xd, w1._data, None)
    b1d = None if b1 is None else b1._data
    drop = training and dropout_p > 0
    keep = None
    if drop:  # act and dropout in one pass (the same bits as the two kernels)
        a, keep = K.bias_act_dropout_forward(h, b1d, dropout_p, default_generator.next_seed(), activation,
                                             approximate)
    else:
        a = K.bias_act_forward(h, b1d, activation, approximate)
    y = K.linear_forward(a, w2._data, None if b2 is None else b2._data)
    del a  # backward recomputes linear2's input from h (and keep): one (..., F) array saved, not two
    p = dropout_p if drop else 0.0

    def backward(g):
        dx, dw1, db1, dw2, db2 = K.ff_backward(np.ascontiguousarray(g), xd, h, keep, p, w1._data, b1d, w2._data,
                                               with_bias2=b2 is not None, act=activation, approximate=approximate,
                                               need_dx=x.requires_grad)
        return FreshGrads((dx, dw1, db1, dw2, db2))  # the kernel's fresh arrays, each once

    # backward reads x, w1, b1 (recomputes the activation from h) and w2: all checked against in-place change
    return apply_op(y, (x, w1, b1, w2, b2), backward, name="FeedForward", saved=(x, w1, b1, w2))


def add_layer_norm(inp: Tensor, residual: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                   eps: float = 1e-5) -> Tensor:
    """``layer_norm(inp + residual)`` over the last axis as ONE autograd op
    (the post-norm residual connection).  inp, residual (..., D)."""
    if tuple(inp.shape) != tuple(residual.shape):
        raise ValueError(f"add_layer_norm: residual must have the shape of inp {tuple(inp.shape)}, "
                         f"got {tuple(residual.shape)}")
    w = None if weight is None else weight._data
    out, mean, rstd = K.add_layernorm_forward(inp._data, residual._data, w, None if bias is None else bias._data,
                                              eps)

    def backward(g):
        d, dw, db = K.add_layernorm_backward(np.ascontiguousarray(g), inp._data, residual._data, w, mean, rstd,
                                             with_bias=bias is not None)
        return d, d, dw, db

    return apply_op(out, (inp, residual, weight, bias), backward, name="AddLayerNorm", saved=(weight, bias))


def dropout_add_layer_norm(inp: Tensor, residual: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                           eps: float, p: float) -> Tensor:
    """``layer_norm(dropout(inp, p) + residual)`` over the last axis as ONE
    autograd op (the post-norm residual connection in training): inp,
    residual (..., D).  The dropout mask is the one ``dropout(inp, p)`` would
    draw (the same seed, kernel and bits), and the dropped array is never
    made: the backward rebuilds each row of the sum from inp and the mask."""
    if tuple(inp.shape) != tuple(residual.shape):
        raise ValueError(f"dropout_add_layer_norm: residual must have the shape of inp {tuple(inp.shape)}, "
                         f"got {tuple(residual.shape)}")
    w = None if weight is None else weight._data
    out, mean, rstd, keep = K.dropout_add_layernorm_forward(inp._data, residual._data, p,
                                                            default_generator.next_seed(), w,
                                                            None if bias is None else bias._data, eps)

    def backward(g):
        grads = K.dropout_add_layernorm_backward(np.ascontiguousarray(g), inp._data, keep, p, residual._data, w,
                                                 mean, rstd, with_bias=bias is not None)
        return FreshGrads(grads)  # (dinp, dresidual, dweight, dbias): the kernel's fresh arrays, each once

    return apply_op(out, (inp, residual, weight, bias), backward, name="DropoutAddLayerNorm", saved=(weight, bias))
