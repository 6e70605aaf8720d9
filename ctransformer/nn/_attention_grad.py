"""Gradients the fused attention kernels do not compute, for the (rare)
calls that need them:

* a float attention mask that requires grad (a learned additive bias):
  its gradient is the gradient w.r.t. the pre-softmax scores, summed over
  the dims the mask was broadcast along;
* the attention weights returned by ``need_weights=True`` used in a loss.

Forward always runs the fused kernel (same values).  Only when backward
finds such a gradient is it computed here: for scaled_dot_product_attention
in NumPy from the saved inputs, for multi-head attention by re-running the
op as a composite of differentiable Tensor ops and differentiating that.
Calls without a mask that requires grad and whose weights get no gradient
never reach this module.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import kernels as K
from ..autograd import enable_grad, grad as _grad
from ..tensor import Tensor, _sum_to

__all__ = ["softmax_rows", "dropout_factors", "sdpa_mask_grad", "mha_composite_grads"]


def softmax_rows(s: np.ndarray) -> np.ndarray:
    """softmax over the last axis; a row with every score -inf gives zeros."""
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    den = e.sum(axis=-1, keepdims=True)
    return e / np.where(den == 0, 1, den)


def dropout_factors(shape: tuple, dtype, p: float, seed: int) -> Optional[np.ndarray]:
    """The kernels' dropout on (B, H, L, S) weights as multipliers (0 or
    1/(1-p)), regenerated from the seed (None without dropout)."""
    if p <= 0:
        return None
    return K.dropout_forward(np.ones(shape, dtype), p, seed)[0]


def _causal_add(L: int, S: int, dtype) -> np.ndarray:
    return np.where(np.triu(np.ones((L, S), bool), 1), dtype.type(-np.inf), dtype.type(0))


def sdpa_mask_grad(g: np.ndarray, q4: np.ndarray, k4: np.ndarray, v4: np.ndarray, mask: np.ndarray,
                   scale: Optional[float], dropout_p: float, seed: int) -> np.ndarray:
    """d loss / d (additive float mask) of scaled_dot_product_attention, as
    (B, H, L, S): dS = P * (dP - rowsum(dP * P)), dP = (g v^T) * dropout."""
    sc = 1.0 / math.sqrt(q4.shape[-1]) if scale is None else scale
    s = np.matmul(q4, np.swapaxes(k4, -1, -2)) * sc + mask
    P = softmax_rows(s)
    dP = np.matmul(g, np.swapaxes(v4, -1, -2))
    mult = dropout_factors(P.shape, P.dtype, dropout_p, seed)
    if mult is not None:
        dP = dP * mult
    return P * (dP - (dP * P).sum(axis=-1, keepdims=True))


def _softmax_t(s: Tensor) -> Tensor:
    """Differentiable softmax over the last dim; fully hidden rows give zeros."""
    m = np.max(s._data, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = (s - Tensor._wrap(m)).exp()
    den = e.sum(-1, keepdim=True)
    return e / (den + Tensor._wrap((den._data == 0).astype(den._data.dtype)))


def mha_composite(q: Tensor, k: Tensor, v: Tensor, num_heads: int, w: Sequence[Tensor], b: Sequence[Optional[Tensor]],
                  wo: Tensor, bo: Optional[Tensor], const_mask: Optional[np.ndarray], grad_masks: List[Tensor],
                  causal: bool, mult: Optional[np.ndarray], average: bool) -> Tuple[Tensor, Tensor]:
    """Multi-head attention from differentiable Tensor ops, batch first:
    q (B, L, E), k (B, S, Ek), v (B, S, Ev); w = (wq, wk, wv), b = (bq, bk, bv);
    masks additive, broadcastable to (B, H, L, S) -> (out (B, L, E),
    weights after dropout, (B, L, S) averaged over heads or (B, H, L, S))."""
    B, L, E = q.shape
    S = k.shape[1]
    H, Dh = num_heads, E // num_heads

    def heads(x: Tensor, wi: Tensor, bi: Optional[Tensor], T: int) -> Tensor:
        y = x.matmul(wi.t())
        if bi is not None:
            y = y + bi
        return y.reshape(B, T, H, Dh).transpose(1, 2)

    Q, Kh, V = heads(q, w[0], b[0], L), heads(k, w[1], b[1], S), heads(v, w[2], b[2], S)
    s = Q.matmul(Kh.transpose(-2, -1)) * (1.0 / math.sqrt(Dh))
    if const_mask is not None:
        s = s + Tensor._wrap(const_mask)
    for m in grad_masks:
        s = s + m
    if causal:
        s = s + Tensor._wrap(_causal_add(L, S, s._data.dtype))
    P = _softmax_t(s)
    if mult is not None:
        P = P * Tensor._wrap(mult)
    ctx = P.matmul(V).transpose(1, 2).reshape(B, L, E)
    out = ctx.matmul(wo.t())
    if bo is not None:
        out = out + bo
    return out, (P.mean(1) if average else P)


def mha_composite_grads(parents: Sequence[Optional[Tensor]], g_out: np.ndarray, g_attn: Optional[np.ndarray],
                        run) -> tuple:
    """Differentiate ``run(*leaves) -> (out, weights)`` (a composite
    re-run of the op on fresh leaves holding the parents' values) with
    output gradients (g_out, g_attn); one gradient per parent (None where a
    parent needs none)."""
    leaves = [None if p is None else Tensor._wrap(p._data, requires_grad=p.requires_grad) for p in parents]
    with enable_grad():
        out, attn = run(*leaves)
    wanted = [t for t in leaves if t is not None and t.requires_grad]
    outs, gos = [out], [Tensor._wrap(np.ascontiguousarray(g_out))]
    if g_attn is not None:
        outs.append(attn)
        gos.append(Tensor._wrap(g_attn))
    grads = iter(_grad(outs, wanted, gos, allow_unused=True))
    res = []
    for t in leaves:
        if t is None or not t.requires_grad:
            res.append(None)
        else:
            gr = next(grads)
            res.append(None if gr is None else gr._data)
    return tuple(res)


def mask_grad_to(dS: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum a (..., L, S) score gradient down to a mask's broadcast shape."""
    return _sum_to(dS, tuple(shape))
