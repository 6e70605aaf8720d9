"""Fused element-wise pieces of a Transformer block: bias + activation for the
feed-forward, and residual add (after the sublayer's dropout, in training) +
LayerNorm over the last axis."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .. import _C
from ._args import U64, as_float, as_int


def _act_name(fn: str, act: str, approximate: str) -> str:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"{fn}: approximate must be 'none' or 'tanh', got {approximate!r}")
    if approximate == "tanh":
        if act != "gelu":
            raise ValueError(f"{fn}: approximate='tanh' needs act='gelu', got act={act!r}")
        return "gelu_tanh"
    return act


def bias_act_forward(inp: np.ndarray, bias: Optional[np.ndarray] = None, act: str = "relu",
                     approximate: str = "none") -> np.ndarray:
    """``act(inp + bias)``: inp (..., N), bias (N) or None -> out (..., N).
    act is "relu" or "gelu" (exact erf form, or torch's tanh form with
    approximate="tanh")."""
    return _C.bias_act_forward(inp, bias, _act_name("bias_act_forward", act, approximate))


def bias_act_dropout_forward(inp: np.ndarray, bias: Optional[np.ndarray], p: float, seed: int,
                             act: str = "relu", approximate: str = "none") -> Tuple[np.ndarray, np.ndarray]:
    """``dropout(act(inp + bias), p)`` in one pass: inp (..., N), bias (N) or
    None -> (out (..., N), keep (..., N) bool, True where kept).  The same bits
    as :func:`bias_act_forward` then ``dropout_forward(., p, seed)`` (offset
    0): the feed-forward block's forward with dropout."""
    fn = "bias_act_dropout_forward"
    return _C.bias_act_dropout_forward(inp, as_float(fn, "p", p), as_int(fn, "seed", seed, *U64), bias,
                                       _act_name(fn, act, approximate))


def bias_act_backward(dout: np.ndarray, inp: np.ndarray, bias: Optional[np.ndarray] = None,
                      act: str = "relu", approximate: str = "none",
                      dinp: Optional[np.ndarray] = None, dbias: Optional[np.ndarray] = None
                      ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Gradients of :func:`bias_act_forward`: dout (..., N) -> (dinp (..., N),
    dbias (N) or None when bias is None).  Given arrays are accumulated into."""
    return _C.bias_act_backward(dout, inp, bias, _act_name("bias_act_backward", act, approximate),
                                dinp, dbias)


def add_layernorm_forward(inp: np.ndarray, residual: np.ndarray, weight: Optional[np.ndarray] = None,
                          bias: Optional[np.ndarray] = None, eps: float = 1e-5
                          ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``LayerNorm(inp + residual)`` over the last axis (biased variance, eps
    inside the square root, as torch).  inp, residual (..., N), weight/bias (N)
    or None -> (out (..., N), mean (...), rstd (...))."""
    return _C.add_layernorm_forward(inp, residual, weight, bias, as_float("add_layernorm_forward", "eps", eps))


def add_layernorm_backward(dout: np.ndarray, inp: np.ndarray, residual: np.ndarray,
                           weight: Optional[np.ndarray], mean: np.ndarray, rstd: np.ndarray,
                           with_bias: bool = True, dinp: Optional[np.ndarray] = None,
                           dweight: Optional[np.ndarray] = None, dbias: Optional[np.ndarray] = None
                           ) -> Tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]:
    """Gradients of :func:`add_layernorm_forward`: -> (dinp (..., N), which is
    the gradient of both inp and residual; dweight (N) or None when weight is
    None; dbias (N) or None when not with_bias).  Given arrays are accumulated into."""
    return _C.add_layernorm_backward(dout, inp, residual, weight, mean, rstd, bool(with_bias), dinp,
                                     dweight, dbias)


def dropout_add_layernorm_forward(inp: np.ndarray, residual: np.ndarray, p: float, seed: int,
                                  weight: Optional[np.ndarray] = None, bias: Optional[np.ndarray] = None,
                                  eps: float = 1e-5) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``LayerNorm(dropout(inp, p) + residual)`` over the last axis in one
    pass, the post-norm residual connection of a Transformer layer in
    training: inp, residual (..., N), weight/bias (N) or None -> (out (..., N),
    mean (...), rstd (...), keep (..., N) bool, True where kept).  The same
    bits as ``dropout_forward(inp, p, seed)`` (offset 0) then
    :func:`add_layernorm_forward` of its output and residual, without that
    output array."""
    fn = "dropout_add_layernorm_forward"
    return _C.dropout_add_layernorm_forward(inp, residual, as_float(fn, "p", p), as_int(fn, "seed", seed, *U64),
                                            weight, bias, as_float(fn, "eps", eps))


def dropout_add_layernorm_backward(dout: np.ndarray, inp: np.ndarray, keep: np.ndarray, p: float,
                                   residual: np.ndarray, weight: Optional[np.ndarray], mean: np.ndarray,
                                   rstd: np.ndarray, with_bias: bool = True, dinp: Optional[np.ndarray] = None,
                                   dresidual: Optional[np.ndarray] = None, dweight: Optional[np.ndarray] = None,
                                   dbias: Optional[np.ndarray] = None
                                   ) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]:
    """Gradients of :func:`dropout_add_layernorm_forward` -> (dinp (..., N),
    dresidual (..., N), dweight (N) or None when weight is None, dbias (N) or
    None when not with_bias): the bits of :func:`add_layernorm_backward` of
    the dropped input, then ``dropout_backward`` for dinp.  Given arrays are
    accumulated into (the others then start from zeros); with none given all
    are fresh."""
    return _C.dropout_add_layernorm_backward(dout, inp, keep, as_float("dropout_add_layernorm_backward", "p", p),
                                             residual, weight, mean, rstd, bool(with_bias), dinp, dresidual,
                                             dweight, dbias)


def ff_backward(dout: np.ndarray, x: np.ndarray, h: np.ndarray, keep: Optional[np.ndarray], p: float,
                w1: np.ndarray, b1: Optional[np.ndarray], w2: np.ndarray, with_bias2: bool = True,
                act: str = "relu", approximate: str = "none", need_dx: bool = True, *,
                dx: Optional[np.ndarray] = None, dw1: Optional[np.ndarray] = None,
                db1: Optional[np.ndarray] = None, dw2: Optional[np.ndarray] = None,
                db2: Optional[np.ndarray] = None
                ) -> Tuple[Optional[np.ndarray], np.ndarray, Optional[np.ndarray], np.ndarray, Optional[np.ndarray]]:
    """Gradients of the feed-forward block ``y = drop(act(x w1^T + b1)) w2^T + b2``.

    dout, x (..., D); h (..., F) = x w1^T (before b1, as saved by forward);
    keep (..., F) bool dropout mask (True = kept; None without dropout) and
    its probability p; w1 (F, D), b1 (F) or None, w2 (D, F).  linear2's
    input is recomputed from h, b1 and keep.  Rows of dout that are all
    zero (padding) are skipped when the saved rows and weights are finite:
    the result equals the dense computation.
    -> (dx (..., D) or None when not need_dx, dw1, db1 or None, dw2, db2 or
    None when not with_bias2).  ``dx``/``dw1``/``db1``/``dw2``/``db2`` given
    as C-contiguous arrays are accumulated into (``+=``) and returned (the
    others then start from zeros); with none given the results are fresh."""
    return _C.ff_backward(dout, x, h, keep, as_float("ff_backward", "p", p), w1, b1, w2, bool(with_bias2),
                          _act_name("ff_backward", act, approximate), bool(need_dx), dx, dw1, db1, dw2, db2)
