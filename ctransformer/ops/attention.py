"""Attention through the C attention kernels: scaled dot-product attention
(``kernels.sdpa_*``) and multi-head attention with separate or packed
projections (``kernels.mha_*``, ``kernels.mha_packed_*``), each ONE autograd
op.  The caller (nn.functional_attention) has checked the arguments and
merged torch's masks into the kernels' polarity: bool **True = the key takes
part**, or a float mask added to the scores.

Masks that require grad, and gradients reaching the returned attention
weights, are differentiated through a composite re-run of the same maths
(``nn._attention_grad``): the kernels do not compute them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

from .. import kernels as K
from ..autograd import FreshGrads, apply_op
from ..nn._attention_grad import dropout_factors, mha_composite, mha_composite_grads, sdpa_mask_grad
from ..tensor import Tensor, _sum_to

if TYPE_CHECKING:
    from ..nn.functional_attention import _GradMasks as GradMasks

__all__ = ["sdpa", "mha", "mha_packed", "additive", "as_4d"]


def as_4d(shape_lead: tuple) -> Tuple[int, int]:
    """Leading dims (...) folded to the kernels' (B, H)."""
    if len(shape_lead) == 0:
        return 1, 1
    return int(np.prod(shape_lead[:-1], dtype=np.int64)), int(shape_lead[-1])


def sdpa(q: Tensor, k: Tensor, v: Tensor, lead: tuple, mask: Optional[np.ndarray], mask_t: Optional[Tensor],
         is_causal: bool, scale: Optional[float], dropout_p: float, seed: int) -> Tensor:
    """softmax(q k^T * scale + mask) v: q (..., L, E), k (..., S, E), v (..., S, Ev) whose leading dims
    broadcast to ``lead`` -> (*lead, L, Ev).  ``mask``: broadcastable to (B, H, L, S) in the kernel's
    polarity, or None; ``mask_t``: the float mask Tensor when it needs a gradient (a learned additive
    bias: its gradient is d loss / d scores), else None."""
    L, E = q.shape[-2:]
    S, Ev = k.shape[-2], v.shape[-1]
    B, H = as_4d(lead)

    def to4(t: Tensor, n: int, d: int) -> np.ndarray:
        return np.broadcast_to(t._data, lead + (n, d)).reshape(B, H, n, d)

    q4, k4, v4 = to4(q, L, E), to4(k, S, E), to4(v, S, Ev)
    opts = dict(mask=mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p, seed=seed)
    out, probs = K.sdpa_forward(q4, k4, v4, **opts)

    def backward(g):
        g4 = np.ascontiguousarray(g).reshape(B, H, L, Ev)
        dq, dk, dv = K.sdpa_backward(g4, q4, k4, v4, probs, **opts)
        grads = (_sum_to(dq.reshape(lead + (L, E)), q.shape),
                 _sum_to(dk.reshape(lead + (S, E)), k.shape),
                 _sum_to(dv.reshape(lead + (S, Ev)), v.shape))
        if mask_t is None:
            return grads
        dS = sdpa_mask_grad(g4, q4, k4, v4, mask, scale, dropout_p, seed)
        return grads + (_sum_to(dS.reshape(lead + (L, S)), mask_t.shape),)

    parents = (q, k, v) if mask_t is None else (q, k, v, mask_t)
    return apply_op(out.reshape(lead + (L, Ev)), parents, backward, name="ScaledDotProductAttention", saved=parents)


def mha(query: Tensor, key: Tensor, value: Tensor, num_heads: int, q_w: Optional[Tensor],
        k_w: Optional[Tensor], v_w: Optional[Tensor], in_w: Optional[Tensor], in_b: Optional[Tensor],
        out_w: Tensor, out_b: Optional[Tensor], mask: Optional[np.ndarray], is_causal: bool,
        dropout_p: float, need_weights: bool, average_attn_weights: bool, seed: int,
        grad_masks: Optional["GradMasks"] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """Batch-first multi-head attention as ONE autograd op around
    mha_forward / mha_backward.  query (B, L, E), key (B, S, Ek), value
    (B, S, Ev); mask in the kernel's polarity.  -> (out (B, L, E), weights
    (B, L, S) averaged or (B, H, L, S), or None).  ``seed``: the dropout
    seed (used when dropout_p > 0).  Masks that require grad
    (``grad_masks``) and a gradient on the weights are differentiated
    through the composite re-run (nn._attention_grad)."""
    arr = lambda t: None if t is None else t._data  # noqa: E731
    weights = dict(in_proj_weight=arr(in_w), in_proj_bias=arr(in_b))
    opts = dict(mask=mask, is_causal=is_causal, dropout_p=dropout_p, seed=seed)
    args = (query._data, key._data, value._data, arr(q_w), arr(k_w), arr(v_w), None, None, None,
            arr(out_w), arr(out_b), num_heads)
    out, saved = K.mha_forward(*args, **opts, **weights)
    attn = None
    if need_weights:
        attn = saved.probs.mean(axis=1) if average_attn_weights else saved.probs
    gm = grad_masks.tensors if grad_masks is not None else ()
    parents = (query, key, value, q_w, k_w, v_w, in_w, in_b, out_w, out_b) + gm
    H = num_heads

    def run(qq, kk, vv, qw, kw, vw, iw, ib, ow, ob, *ms):
        E = qq.shape[-1]
        w = (qw, kw, vw) if iw is None else (iw[:E], iw[E:2 * E], iw[2 * E:])
        b = (None, None, None) if ib is None else (ib[:E], ib[E:2 * E], ib[2 * E:])
        mult = dropout_factors((qq.shape[0], H, qq.shape[1], kk.shape[1]), qq.dtype, dropout_p, seed)
        return mha_composite(qq, kk, vv, H, w, b, ow, ob, grad_masks.const if grad_masks else additive(mask),
                             grad_masks.shaped(ms) if grad_masks else [], is_causal, mult, average_attn_weights)

    def backward(g):
        g, g_attn = _split_weights_grad(g, need_weights)
        if g_attn is not None or gm:
            return mha_composite_grads(parents, g, g_attn, run)
        gr = K.mha_backward(np.ascontiguousarray(g), *args, saved, **opts, **weights)
        packed = in_w is not None
        return (gr.query, gr.key, gr.value,
                None if packed else gr.q_weight, None if packed else gr.k_weight,
                None if packed else gr.v_weight, gr.in_proj_weight, gr.in_proj_bias,
                gr.out_weight, gr.out_bias)

    return _mha_node(out, attn, parents, backward)


def mha_packed(query: Tensor, memory: Optional[Tensor], num_heads: int, in_w: Tensor, in_b: Optional[Tensor],
               out_w: Tensor, out_b: Optional[Tensor], mask: Optional[np.ndarray], is_causal: bool,
               dropout_p: float, need_weights: bool, average_attn_weights: bool, seq_first: bool, seed: int,
               grad_masks: Optional["GradMasks"] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """Self-attention (``memory`` None: key = value = query) or cross-attention
    (key = value = memory) with the packed in_proj_weight, as ONE autograd op
    around mha_packed_forward / mha_packed_backward, in the inputs' own layout
    (``seq_first``: (L, N, E), no transposes).  Parents: (query, memory,
    in_w, in_b, out_w, out_b)."""
    arr = lambda t: None if t is None else t._data  # noqa: E731
    opts = dict(mask=mask, is_causal=is_causal, dropout_p=dropout_p, seed=seed)
    args = (query._data, arr(memory), in_w._data, arr(in_b), out_w._data, arr(out_b), num_heads)
    out, saved = K.mha_packed_forward(*args, seq_first=seq_first, **opts)
    attn = None
    if need_weights:
        attn = saved.probs  # before dropout: apply the kernel's own mask (same seed, same flat index)
        if dropout_p > 0:
            attn = K.dropout_forward(attn, dropout_p, seed)[0]
        attn = attn.mean(axis=1) if average_attn_weights else attn
    gm = grad_masks.tensors if grad_masks is not None else ()
    parents = (query, memory, in_w, in_b, out_w, out_b) + gm
    H = num_heads

    def run(qq, mem, iw, ib, ow, ob, *ms):
        kv = qq if mem is None else mem
        qb, kvb = (qq.transpose(0, 1), kv.transpose(0, 1)) if seq_first else (qq, kv)
        E = qb.shape[-1]
        w = (iw[:E], iw[E:2 * E], iw[2 * E:])
        b = (None, None, None) if ib is None else (ib[:E], ib[E:2 * E], ib[2 * E:])
        mult = dropout_factors((qb.shape[0], H, qb.shape[1], kvb.shape[1]), qb.dtype, dropout_p, seed)
        out, w_attn = mha_composite(qb, kvb, kvb, H, w, b, ow, ob,
                                    grad_masks.const if grad_masks else additive(mask),
                                    grad_masks.shaped(ms) if grad_masks else [], is_causal, mult,
                                    average_attn_weights)
        return (out.transpose(0, 1) if seq_first else out), w_attn

    def backward(g):
        g, g_attn = _split_weights_grad(g, need_weights)
        if g_attn is not None or gm:
            return mha_composite_grads(parents, g, g_attn, run)
        gr = K.mha_packed_backward(np.ascontiguousarray(g), *args, saved, seq_first=seq_first, **opts,
                                   need_dquery=query.requires_grad,
                                   need_dkv=memory is not None and memory.requires_grad)
        # the kernel's fresh arrays, each once: a residual's gradient may be summed into them
        return FreshGrads((gr.query, gr.kv, gr.in_proj_weight, gr.in_proj_bias, gr.out_weight, gr.out_bias))

    return _mha_node(out, attn, parents, backward)


def _split_weights_grad(g, need_weights: bool):
    """Backward's incoming gradient of a multi-head op -> (g_out, g_weights or
    None); a weights gradient of all zeros counts as none (the fused kernel
    then runs instead of the composite re-run)."""
    if not need_weights:
        return g, None
    g_out, g_attn = g
    return g_out, (g_attn if np.any(g_attn) else None)


def _mha_node(out: np.ndarray, attn: Optional[np.ndarray], parents, backward) -> Tuple[Tensor, Optional[Tensor]]:
    """The one autograd node of a multi-head op: (out, weights) when the
    weights were asked for (attn not None), else (out, None)."""
    if attn is not None:
        out_t, attn_t = apply_op((out, attn), parents, backward, name="MultiheadAttention", saved=parents)
        return out_t, attn_t
    return apply_op(out, parents, backward, name="MultiheadAttention", saved=parents), None


def additive(mask: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """A kernel-polarity mask (bool True = takes part, or float added) as an
    additive float mask (bool -> 0 / -inf)."""
    if mask is None or mask.dtype != np.bool_:
        return mask
    return np.where(mask, 0.0, -np.inf)
