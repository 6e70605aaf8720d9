"""Attention: scaled dot-product attention, fused multi-head attention
(torch.nn.MultiheadAttention maths, batch first) and the sinusoidal
positional encoding table.

Masks (``mask=``) are either a **bool** array, True = the key takes part
(the meaning of ``torch.nn.functional.scaled_dot_product_attention``'s
``attn_mask``; torch's ``nn.MultiheadAttention`` masks use the opposite
meaning), or a **float** array of the inputs' dtype that is *added* to the
scores.  Either broadcasts (right aligned) to (B, H, Tq, Tk).
``is_causal=True`` hides key j from query i when j > i (torch's top-left
aligned ``tril(ones(Tq, Tk))``) and combines with ``mask``.

A query whose every key is hidden (bool False, -inf, causal) gets zero
weights, zero output and zero gradient, never NaN (torch 2.13's CPU
behaviour for ``scaled_dot_product_attention``).  A large finite additive
mask such as -1e9 is ordinary arithmetic, as in torch.

Dropout on the weights is drawn from the counter-based generator: weight
(b, h, i, j) is dropped when ``uniform(seed, ((b*H + h)*Tq + i)*Tk + j) <
dropout_p``, kept weights are scaled by 1/(1 - dropout_p); the same seed
gives the same mask, and backward regenerates it from the seed.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np

from .. import _C
from ._args import U64, as_float, as_int


def _p(fn: str, dropout_p: object) -> float:
    return as_float(fn, "dropout_p", dropout_p)


def _seed(fn: str, seed: object) -> int:
    return as_int(fn, "seed", seed, *U64)


def sdpa_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Optional[np.ndarray] = None,
                 is_causal: bool = False, scale: Optional[float] = None, dropout_p: float = 0.0,
                 seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Scaled dot-product attention.

    q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv), mask broadcastable
    to (B, H, Tq, Tk) or None; scale defaults to 1/sqrt(Dh)
    -> (out (B, H, Tq, Dv), probs (B, H, Tq, Tk)), probs being the softmax
    weights after dropout (out = probs @ v).
    """
    return _C.sdpa_forward(q, k, v, mask, bool(is_causal), scale, _p("sdpa_forward", dropout_p),
                           _seed("sdpa_forward", seed))


def sdpa_backward(dout: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  probs: np.ndarray, mask: Optional[np.ndarray] = None, is_causal: bool = False,
                  scale: Optional[float] = None, dropout_p: float = 0.0, seed: int = 0,
                  dq: Optional[np.ndarray] = None, dk: Optional[np.ndarray] = None,
                  dv: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`sdpa_forward` (called with the same mask/options).

    dout (B, H, Tq, Dv), probs as returned by forward -> (dq, dk, dv) shaped
    like q, k, v.  ``dq``/``dk``/``dv`` given as C-contiguous arrays are
    accumulated into (``+=``) and returned.
    """
    return _C.sdpa_backward(dout, q, k, v, probs, mask, bool(is_causal), scale, _p("sdpa_backward", dropout_p),
                            _seed("sdpa_backward", seed), dq, dk, dv)


class MHASaved(NamedTuple):
    """What :func:`mha_backward` needs from :func:`mha_forward`."""
    q: np.ndarray        # (B, H, Tq, Dh) projected queries
    k: np.ndarray        # (B, H, Tk, Dh) projected keys
    v: np.ndarray        # (B, H, Tk, Dh) projected values
    probs: np.ndarray    # (B, H, Tq, Tk) attention weights after dropout
    context: np.ndarray  # (B, Tq, E) heads merged, before the output projection


class MHAGrads(NamedTuple):
    """Gradients of :func:`mha_backward`.  With a packed ``in_proj_weight``
    (``in_proj_bias``), ``in_proj_weight`` (``in_proj_bias``) holds the (3E, E)
    ((3E,)) gradient and the q/k/v fields are views of its three row blocks."""
    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    q_weight: np.ndarray
    k_weight: np.ndarray
    v_weight: np.ndarray
    q_bias: Optional[np.ndarray]
    k_bias: Optional[np.ndarray]
    v_bias: Optional[np.ndarray]
    out_weight: np.ndarray
    out_bias: Optional[np.ndarray]
    in_proj_weight: Optional[np.ndarray] = None
    in_proj_bias: Optional[np.ndarray] = None


def _unpack(fn: str, name: str, packed: Optional[np.ndarray], parts: tuple, E: int,
            ndim: int) -> tuple:
    """Split torch's packed (3E, ...) [q; k; v] into three row-block views."""
    if packed is None:
        return parts
    if any(p is not None for p in parts):
        raise ValueError(f"{fn}: give either {name} or the separate q/k/v arrays, not both")
    if not isinstance(packed, np.ndarray):
        raise TypeError(f"{fn}: {name} must be a numpy.ndarray, got {type(packed).__name__}")
    if packed.ndim != ndim or packed.shape[0] != 3 * E:
        want = f"(3 * embed_dim = {3 * E}" + (", embed_dim)" if ndim == 2 else ",)")
        raise ValueError(f"{fn}: {name} must have shape {want}, got {packed.shape}")
    return packed[:E], packed[E:2 * E], packed[2 * E:]


def _embed_dim(fn: str, query: np.ndarray) -> int:
    if not isinstance(query, np.ndarray) or query.ndim != 3:
        got = query.ndim if isinstance(query, np.ndarray) else type(query).__name__
        raise ValueError(f"{fn}: query must be a 3-D (batch, Tq, embed_dim) array, got {got}")
    return query.shape[2]


def mha_forward(query: np.ndarray, key: np.ndarray, value: np.ndarray,
                q_weight: Optional[np.ndarray], k_weight: Optional[np.ndarray],
                v_weight: Optional[np.ndarray], q_bias: Optional[np.ndarray],
                k_bias: Optional[np.ndarray], v_bias: Optional[np.ndarray],
                out_weight: np.ndarray, out_bias: Optional[np.ndarray], num_heads: int,
                mask: Optional[np.ndarray] = None, is_causal: bool = False,
                dropout_p: float = 0.0, seed: int = 0,
                in_proj_weight: Optional[np.ndarray] = None,
                in_proj_bias: Optional[np.ndarray] = None) -> Tuple[np.ndarray, MHASaved]:
    """Multi-head attention (torch.nn.MultiheadAttention maths, batch first).

    query (B, Tq, E), key (B, Tk, Ek), value (B, Tk, Ev); q_weight (E, E),
    k_weight (E, Ek), v_weight (E, Ev), q/k/v_bias (E) or None, out_weight
    (E, E), out_bias (E) or None; or torch's packed ``in_proj_weight`` (3E, E)
    / ``in_proj_bias`` (3E,) with the separate ones None.  mask broadcastable
    to (B, num_heads, Tq, Tk), bool True = take part, or float added.
    -> (out (B, Tq, E), saved).  E % num_heads must be 0.
    """
    E = _embed_dim("mha_forward", query)
    q_weight, k_weight, v_weight = _unpack("mha_forward", "in_proj_weight", in_proj_weight,
                                           (q_weight, k_weight, v_weight), E, 2)
    q_bias, k_bias, v_bias = _unpack("mha_forward", "in_proj_bias", in_proj_bias,
                                     (q_bias, k_bias, v_bias), E, 1)
    out, *saved = _C.mha_forward(query, key, value, q_weight, k_weight, v_weight, q_bias, k_bias,
                                 v_bias, out_weight, out_bias, num_heads, mask, bool(is_causal),
                                 _p("mha_forward", dropout_p), _seed("mha_forward", seed))
    return out, MHASaved(*saved)


def mha_backward(dout: np.ndarray, query: np.ndarray, key: np.ndarray, value: np.ndarray,
                 q_weight: Optional[np.ndarray], k_weight: Optional[np.ndarray],
                 v_weight: Optional[np.ndarray], q_bias: Optional[np.ndarray],
                 k_bias: Optional[np.ndarray], v_bias: Optional[np.ndarray],
                 out_weight: np.ndarray, out_bias: Optional[np.ndarray], num_heads: int,
                 saved: MHASaved, mask: Optional[np.ndarray] = None, is_causal: bool = False,
                 dropout_p: float = 0.0, seed: int = 0,
                 in_proj_weight: Optional[np.ndarray] = None,
                 in_proj_bias: Optional[np.ndarray] = None) -> MHAGrads:
    """Gradients of :func:`mha_forward` (same arguments, plus dout (B, Tq, E)
    and ``saved``).  Always returns the three input gradients (for
    self-attention the caller sums them); bias gradients are None where the
    bias is None.
    """
    E = _embed_dim("mha_backward", query)
    q_weight, k_weight, v_weight = _unpack("mha_backward", "in_proj_weight", in_proj_weight,
                                           (q_weight, k_weight, v_weight), E, 2)
    q_bias, k_bias, v_bias = _unpack("mha_backward", "in_proj_bias", in_proj_bias,
                                     (q_bias, k_bias, v_bias), E, 1)
    # A packed weight gets one packed gradient, accumulated through its row-block views.
    acc = {}
    d_in_w = d_in_b = None
    if in_proj_weight is not None:
        d_in_w = np.zeros(in_proj_weight.shape, in_proj_weight.dtype)
        acc.update(dq_weight=d_in_w[:E], dk_weight=d_in_w[E:2 * E], dv_weight=d_in_w[2 * E:])
    if in_proj_bias is not None:
        d_in_b = np.zeros(in_proj_bias.shape, in_proj_bias.dtype)
        acc.update(dq_bias=d_in_b[:E], dk_bias=d_in_b[E:2 * E], dv_bias=d_in_b[2 * E:])
    grads = _C.mha_backward(dout, query, key, value, q_weight, k_weight, v_weight, q_bias, k_bias,
                            v_bias, out_weight, out_bias, num_heads, *saved, mask=mask,
                            is_causal=bool(is_causal), dropout_p=_p("mha_backward", dropout_p),
                            seed=_seed("mha_backward", seed),
                            **acc)
    return MHAGrads(*grads, in_proj_weight=d_in_w, in_proj_bias=d_in_b)



class PackedSaved(NamedTuple):
    """What :func:`mha_packed_backward` needs from :func:`mha_packed_forward`."""
    proj_q: np.ndarray             # token rows x 3E ([q | k | v], self-attention) or x E (q)
    proj_kv: Optional[np.ndarray]  # memory token rows x 2E ([k | v]), cross-attention; else None
    probs: np.ndarray              # (B, H, Tq, Tk) attention weights BEFORE dropout
    context: np.ndarray            # heads merged, before the output projection, like query


class PackedGrads(NamedTuple):
    """Gradients of :func:`mha_packed_backward` (None where not asked for / no bias)."""
    query: Optional[np.ndarray]
    kv: Optional[np.ndarray]
    in_proj_weight: np.ndarray
    in_proj_bias: Optional[np.ndarray]
    out_weight: np.ndarray
    out_bias: Optional[np.ndarray]


def mha_packed_forward(query: np.ndarray, kv: Optional[np.ndarray], in_proj_weight: np.ndarray,
                       in_proj_bias: Optional[np.ndarray], out_weight: np.ndarray,
                       out_bias: Optional[np.ndarray], num_heads: int, seq_first: bool = False,
                       mask: Optional[np.ndarray] = None, is_causal: bool = False,
                       dropout_p: float = 0.0, seed: int = 0) -> Tuple[np.ndarray, PackedSaved]:
    """Multi-head attention with torch's packed ``in_proj_weight``, the path of
    nn.MultiheadAttention inside the Transformer layers.

    ``kv=None``: self-attention, keys and values projected from ``query``
    (one (3E) projection GEMM); else cross-attention, keys and values from
    ``kv`` (the memory).  Layout: ``seq_first=True`` -> query (Tq, B, E), kv
    (Tk, B, E) (torch's batch_first=False, used without transposes);
    otherwise (B, Tq, E), (B, Tk, E).  in_proj_weight (3E, E) = [wq; wk; wv],
    in_proj_bias (3E) or None, out_weight (E, E), out_bias (E) or None; mask
    broadcastable to (B, num_heads, Tq, Tk), bool True = take part, or float
    added.  -> (out like query, saved).  Same maths and dropout mask as
    :func:`mha_forward`, but ``saved.probs`` holds the weights *before*
    dropout (backward then regenerates the dropout factors instead of
    recomputing the softmax); the weights after dropout are
    ``dropout_forward(saved.probs, dropout_p, seed)[0]`` (same counter-based mask).
    """
    out, pq, pkv, probs, ctx = _C.mha_packed_forward(query, kv, in_proj_weight, in_proj_bias, out_weight,
                                                     out_bias, num_heads, kv is None, bool(seq_first), mask,
                                                     bool(is_causal), _p("mha_packed_forward", dropout_p),
                                                     _seed("mha_packed_forward", seed))
    return out, PackedSaved(pq, pkv, probs, ctx)


def mha_packed_backward(dout: np.ndarray, query: np.ndarray, kv: Optional[np.ndarray],
                        in_proj_weight: np.ndarray, in_proj_bias: Optional[np.ndarray],
                        out_weight: np.ndarray, out_bias: Optional[np.ndarray], num_heads: int,
                        saved: PackedSaved, seq_first: bool = False, mask: Optional[np.ndarray] = None,
                        is_causal: bool = False, dropout_p: float = 0.0, seed: int = 0,
                        need_dquery: bool = True, need_dkv: bool = True, *,
                        dquery: Optional[np.ndarray] = None, dkv: Optional[np.ndarray] = None,
                        din_proj_weight: Optional[np.ndarray] = None, din_proj_bias: Optional[np.ndarray] = None,
                        dout_weight: Optional[np.ndarray] = None, dout_bias: Optional[np.ndarray] = None
                        ) -> PackedGrads:
    """Gradients of :func:`mha_packed_forward` (same arguments, plus dout like
    query and ``saved``).  For self-attention ``query`` gets the whole input
    gradient (through q, k and v) and ``kv`` is None.  ``dquery``/``dkv``/
    ``din_proj_weight``/``din_proj_bias``/``dout_weight``/``dout_bias`` given
    as C-contiguous arrays are accumulated into (``+=``) and returned (the
    others then start from zeros); with none given the gradients are fresh."""
    return PackedGrads(*_C.mha_packed_backward(dout, query, kv, in_proj_weight, in_proj_bias, out_weight, out_bias,
                                               num_heads, kv is None, bool(seq_first), *saved, mask=mask,
                                               is_causal=bool(is_causal),
                                               dropout_p=_p("mha_packed_backward", dropout_p),
                                               seed=_seed("mha_packed_backward", seed),
                                               need_dquery=bool(need_dquery),
                                               need_dkv=bool(need_dkv), dquery=dquery, dkv=dkv,
                                               din_proj_weight=din_proj_weight, din_proj_bias=din_proj_bias,
                                               dout_weight=dout_weight, dout_bias=dout_bias))


def positional_encoding(max_len: int, d_model: int, dtype=np.float32) -> np.ndarray:
    """Sinusoidal table (max_len, d_model): PE[pos, 2i] = sin(pos / 10000^(2i/d_model)),
    PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)); an odd d_model ends with a
    sin column.  Computed in double, then cast to dtype (float32 or float64)."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"positional_encoding: dtype must be float32 or float64, got {dt}")
    return _C.positional_encoding(max_len, d_model, dt == np.float64)
