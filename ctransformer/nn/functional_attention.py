"""Attention functions of ``ctransformer.nn.functional`` (torch's names and
mask meanings).

Two mask polarities live side by side in torch, and here:

* :func:`scaled_dot_product_attention` ``attn_mask``: **bool True = the key
  takes part** (False = hidden); a float mask is *added* to the scores.
* :func:`multi_head_attention_forward` / ``nn.MultiheadAttention`` /
  ``nn.Transformer*``: ``attn_mask`` and ``key_padding_mask`` bool **True =
  NOT allowed** (hidden); a float mask is *added* (use ``-inf`` to hide).

A query whose every key is hidden gets zero weights and a zero output (and
zero gradients), never NaN.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..autograd import _grad_enabled
from ..ops.attention import additive as _additive, as_4d as _as_4d, mha as _mha, mha_packed as _mha_packed
from ..ops.attention import sdpa as _sdpa
from ..random import default_generator
from ..tensor import Tensor
from .functional import _float_tensor as _float_tensor_any

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]


# ---------------------------------------------------------------- helpers

def _float_tensor(x, fn: str, arg: str) -> Tensor:
    return _float_tensor_any(x, fn, arg, verb="have dtype", error=RuntimeError)  # torch: its products refuse


def _same_dtype(x: Tensor, ref: Tensor, fn: str, arg: str, ref_arg: str) -> None:
    if x is not None and x.dtype != ref.dtype:  # torch: RuntimeError (its products refuse mixed dtypes)
        raise RuntimeError(f"{fn}: {arg} must have the dtype of {ref_arg} ({ref.dtype}), got {x.dtype}")


def _mask_array(mask, fn: str, arg: str, dtype: np.dtype, dtype_error=RuntimeError) -> Optional[np.ndarray]:
    """A mask as a NumPy array: bool stays bool, a float mask gets `dtype`.
    Another dtype raises ``dtype_error`` (torch's class for the caller)."""
    if mask is None:
        return None
    m = mask._data if isinstance(mask, Tensor) else mask
    if not isinstance(m, np.ndarray):
        raise TypeError(f"{fn}: {arg} must be a Tensor or None, got {type(mask).__name__}")
    if m.dtype == np.bool_:
        return m
    if m.dtype.kind != "f":
        raise dtype_error(f"{fn}: {arg} must have dtype bool or a float dtype, got {m.dtype}")
    return m.astype(dtype, copy=False)


def _grad_mask(mask) -> Optional[Tensor]:
    """``mask`` when it is a float Tensor that will need a gradient."""
    if isinstance(mask, Tensor) and mask.requires_grad and _grad_enabled[0] and mask.dtype.kind == "f":
        return mask
    return None


def _dropout_seed(dropout_p: float, fn: str, error=ValueError) -> int:
    """A seed for the dropout mask; dropout_p outside [0, 1] raises ``error``
    (torch: ValueError from F.dropout, RuntimeError from SDPA)."""
    if not 0.0 <= dropout_p <= 1.0:
        raise error(f"{fn}: dropout_p must be in [0, 1], got {dropout_p}")
    return default_generator.next_seed() if dropout_p > 0 else 0


# ---------------------------------------------------------------- SDPA

def _sdpa_mask(mask: np.ndarray, lead: tuple, L: int, S: int, fn: str) -> np.ndarray:
    """attn_mask broadcastable to lead + (L, S), in a shape the kernel
    broadcasts to (B, H, L, S)."""
    full = lead + (L, S)
    try:
        np.broadcast_shapes(mask.shape, full)
        ok = np.broadcast_shapes(mask.shape, full) == full
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(f"{fn}: attn_mask of shape {tuple(mask.shape)} must broadcast to "
                           f"(..., L, S) = {full}")
    if mask.ndim <= 2 or (len(lead) == 2 and mask.ndim <= 4):
        return mask
    B, H = _as_4d(lead)
    return np.broadcast_to(mask, full).reshape(B, H, L, S)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False) -> Tensor:
    """softmax(query key^T * scale + mask) value (torch's function).

    query (..., L, E), key (..., S, E), value (..., S, Ev) with leading dims
    that broadcast -> (..., L, Ev).  ``attn_mask`` broadcastable to
    (..., L, S): **bool True = the key takes part**, or a float mask added to
    the scores.  ``is_causal`` hides key j > i (cannot be combined with
    attn_mask, as in torch).  scale defaults to 1/sqrt(E).  Dropout with
    probability ``dropout_p`` is applied to the weights (always, as torch's
    function does: pass 0.0 in eval).  Fully hidden rows give zeros.
    """
    fn = "scaled_dot_product_attention"
    q = _float_tensor(query, fn, "query")
    k = _float_tensor(key, fn, "key")
    v = _float_tensor(value, fn, "value")
    _same_dtype(k, q, fn, "key", "query")
    _same_dtype(v, q, fn, "value", "query")
    if enable_gqa:
        raise NotImplementedError(f"{fn}: enable_gqa=True is not supported")
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim < 2:
            raise RuntimeError(f"{fn}: {name} must have at least 2 dimensions (..., seq, features), got {t.ndim}")
    L, E = q.shape[-2:]
    S = k.shape[-2]
    if k.shape[-1] != E:
        raise RuntimeError(f"{fn}: key.shape[-1] must be {E} (query.shape[-1], the embedding), got {k.shape[-1]}")
    if v.shape[-2] != S:
        raise RuntimeError(f"{fn}: value.shape[-2] must be {S} (key.shape[-2], the source length), "
                           f"got {v.shape[-2]}")
    try:
        lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except ValueError:
        raise RuntimeError(f"{fn}: the leading (batch) dims of query {tuple(q.shape[:-2])}, key "
                           f"{tuple(k.shape[:-2])} and value {tuple(v.shape[:-2])} must broadcast") from None
    mask = _mask_array(attn_mask, fn, "attn_mask", q.dtype)
    if mask is not None and is_causal:
        raise RuntimeError(f"{fn}: Explicit attn_mask should not be set when is_causal=True")
    if mask is not None:
        mask = _sdpa_mask(mask, lead, L, S, fn)
    seed = _dropout_seed(float(dropout_p), fn, RuntimeError)
    mask_t = _grad_mask(attn_mask)  # a learned additive bias: its gradient is d loss / d scores
    return _sdpa(q, k, v, lead, mask, mask_t, is_causal, scale, float(dropout_p), seed)


# ---------------------------------------------------------------- multi-head attention

def _mha_mask(attn_mask: Optional[np.ndarray], key_padding_mask: Optional[np.ndarray], B: int, H: int,
              L: int, S: int, dtype: np.dtype, fn: str) -> Optional[np.ndarray]:
    """torch's two masks (True / -inf = hidden) merged into the kernel's one
    mask (True = takes part, or float added), broadcastable to (B, H, L, S)."""
    parts = []
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if attn_mask.shape != (L, S):
                raise RuntimeError(f"{fn}: the 2-D attn_mask must have shape (target length L, source length S) "
                                   f"= {(L, S)}, got {tuple(attn_mask.shape)}")
            parts.append(attn_mask)
        elif attn_mask.ndim == 3:
            if attn_mask.shape != (B * H, L, S):
                raise RuntimeError(f"{fn}: the 3-D attn_mask must have shape (batch * num_heads, L, S) = "
                                   f"{(B * H, L, S)}, got {tuple(attn_mask.shape)}")
            parts.append(attn_mask.reshape(B, H, L, S))
        else:
            raise AssertionError(f"{fn}: attn_mask must be 2-D (L, S) or 3-D (batch * num_heads, L, S), "
                                 f"got {attn_mask.ndim}-D of shape {tuple(attn_mask.shape)}")
    if key_padding_mask is not None:
        if key_padding_mask.shape != (B, S):
            raise AssertionError(f"{fn}: key_padding_mask must have shape (batch, source length S) = {(B, S)}, "
                                 f"got {tuple(key_padding_mask.shape)}")
        parts.append(key_padding_mask.reshape(B, 1, 1, S))
    if not parts:
        return None
    if all(p.dtype == np.bool_ for p in parts):
        hidden = parts[0]
        for p in parts[1:]:
            hidden = hidden | p
        return ~hidden
    total = None
    for p in parts:
        add = np.where(p, dtype.type(-np.inf), dtype.type(0)) if p.dtype == np.bool_ else p
        total = add if total is None else total + add
    return total.astype(dtype, copy=False)


class _GradMasks:
    """The float attn_mask / key_padding_mask Tensors that require grad
    (parents of the attention op), and the additive constant made of the
    other mask, for the composite re-run that differentiates them."""

    def __init__(self, tensors: tuple, kinds: tuple, const: Optional[np.ndarray], B: int, H: int,
                 L: int, S: int) -> None:
        self.tensors, self.kinds, self.const = tensors, kinds, const
        self.B, self.H, self.L, self.S = B, H, L, S

    @classmethod
    def build(cls, attn_mask, key_padding_mask, am, kpm, B: int, H: int, L: int, S: int, dtype,
              fn: str) -> Optional["_GradMasks"]:
        ga, gk = _grad_mask(attn_mask), _grad_mask(key_padding_mask)
        if ga is None and gk is None:
            return None
        const = _additive(_mha_mask(None if ga is not None else am, None if gk is not None else kpm,
                                    B, H, L, S, dtype, fn))
        pairs = [(t, kind) for t, kind in ((ga, "attn"), (gk, "kpm")) if t is not None]
        return cls(tuple(t for t, _ in pairs), tuple(k for _, k in pairs), const, B, H, L, S)

    def shaped(self, leaves) -> list:
        """The mask leaves reshaped to broadcast against (B, H, L, S) scores."""
        out = []
        for m, kind in zip(leaves, self.kinds):
            if kind == "attn":
                out.append(m if m.ndim == 2 else m.reshape(self.B, self.H, self.L, self.S))
            else:
                out.append(m.reshape(self.B, 1, 1, self.S))
        return out


def _check_param(t, fn: str, arg: str, shape: tuple, ref: Tensor) -> None:
    if t is None:
        return
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}: {arg} must be a Tensor or None, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{fn}: {arg} must have shape {shape}, got {tuple(t.shape)}")
    _same_dtype(t, ref, fn, arg, "query")


def _mha_layout(query: Tensor, key: Tensor, value: Tensor, batch_first: bool, fn: str):
    """Checks the (L, N, E) / (N, L, E) / unbatched (L, E) layouts.
    -> (batched, q, k, v as batch-first Tensors-or-arrays)."""
    nd = query.ndim
    if nd not in (2, 3):
        raise AssertionError(f"{fn}: query must be 3-D ({'batch, L, E' if batch_first else 'L, batch, E'}) "
                             f"or 2-D unbatched (L, E), got {nd}-D of shape {tuple(query.shape)}")
    for name, t in (("key", key), ("value", value)):
        if t.ndim != nd:
            raise AssertionError(f"{fn}: {name} must be {nd}-D like query, got {t.ndim}-D of shape "
                                 f"{tuple(t.shape)}")
    if nd == 3:
        bax = 0 if batch_first else 1
        layout = "batch_first=True: (batch, seq, feature)" if batch_first else \
                 "batch_first=False: (seq, batch, feature)"
        N = query.shape[bax]
        for name, t in (("key", key), ("value", value)):
            if t.shape[bax] != N:
                raise RuntimeError(f"{fn}: {name}.shape[{bax}] (the batch axis, {layout}) must be {N} "
                                   f"(query.shape[{bax}]), got {t.shape[bax]}; check batch_first")
    sax = 1 if (nd == 3 and batch_first) else 0
    if key.shape[sax] != value.shape[sax]:
        raise AssertionError(f"{fn}: value.shape[{sax}] (the source length) must be {key.shape[sax]} "
                             f"(key.shape[{sax}]), got {value.shape[sax]}")


def _to_batch_first(t: Tensor, nd: int, batch_first: bool) -> Tensor:
    if nd == 2:
        return t.unsqueeze(0)
    return t if batch_first else t.transpose(0, 1)


def _from_batch_first(t: Tensor, nd: int, batch_first: bool) -> Tensor:
    if nd == 2:
        return t.squeeze(0)
    return t if batch_first else t.transpose(0, 1)


def multi_head_attention(query: Tensor, key: Tensor, value: Tensor, num_heads: int,
                         in_proj_weight: Optional[Tensor], in_proj_bias: Optional[Tensor],
                         out_proj_weight: Tensor, out_proj_bias: Optional[Tensor],
                         dropout_p: float = 0.0, training: bool = True,
                         key_padding_mask: Optional[Tensor] = None, need_weights: bool = True,
                         attn_mask: Optional[Tensor] = None,
                         q_proj_weight: Optional[Tensor] = None, k_proj_weight: Optional[Tensor] = None,
                         v_proj_weight: Optional[Tensor] = None, average_attn_weights: bool = True,
                         is_causal: bool = False, batch_first: bool = False,
                         fn: str = "multi_head_attention_forward") -> Tuple[Tensor, Optional[Tensor]]:
    """The maths of ``nn.MultiheadAttention.forward`` (see there), with an
    explicit ``batch_first``."""
    q = _float_tensor(query, fn, "query")
    k = _float_tensor(key, fn, "key")
    v = _float_tensor(value, fn, "value")
    _same_dtype(k, q, fn, "key", "query")
    _same_dtype(v, q, fn, "value", "query")
    _mha_layout(q, k, v, batch_first, fn)
    nd = q.ndim
    E = q.shape[-1]
    if num_heads <= 0 or E % num_heads:  # torch asserts it: AssertionError
        raise AssertionError(f"{fn}: embed_dim ({E}, query.shape[-1]) must be divisible by num_heads ({num_heads})")
    Ek, Ev = k.shape[-1], v.shape[-1]
    if in_proj_weight is not None:
        if Ek != E or Ev != E:
            raise RuntimeError(f"{fn}: with a packed in_proj_weight, key and value must have embed_dim {E} "
                               f"features (query.shape[-1]), got key {Ek} and value {Ev}; use "
                               "kdim/vdim (separate projection weights)")
        _check_param(in_proj_weight, fn, "in_proj_weight", (3 * E, E), q)
    else:
        for name, w, d in (("q_proj_weight", q_proj_weight, E), ("k_proj_weight", k_proj_weight, Ek),
                           ("v_proj_weight", v_proj_weight, Ev)):
            if w is None:
                raise ValueError(f"{fn}: {name} is required when in_proj_weight is None")
            _check_param(w, fn, name, (E, d), q)
    _check_param(in_proj_bias, fn, "in_proj_bias", (3 * E,), q)
    _check_param(out_proj_weight, fn, "out_proj_weight", (E, E), q)
    _check_param(out_proj_bias, fn, "out_proj_bias", (E,), q)
    if nd == 3:
        B, L, S = (q.shape[0], q.shape[1], k.shape[1]) if batch_first else (q.shape[1], q.shape[0], k.shape[0])
    else:
        B, L, S = 1, q.shape[0], k.shape[0]
    am = _mask_array(attn_mask, fn, "attn_mask", q.dtype, AssertionError)
    kpm = _mask_array(key_padding_mask, fn, "key_padding_mask", q.dtype, AssertionError)
    if nd == 2:
        if kpm is not None and kpm.ndim == 1:
            kpm = kpm.reshape(1, -1)
        elif kpm is not None:
            raise AssertionError(f"{fn}: for unbatched (2-D) query, key_padding_mask must be 1-D (S,), got "
                                 f"{kpm.ndim}-D of shape {tuple(kpm.shape)}")
    mask = _mha_mask(am, kpm, B, num_heads, L, S, q.dtype, fn)
    gms = _GradMasks.build(attn_mask, key_padding_mask, am, kpm, B, num_heads, L, S, q.dtype, fn)
    # is_causal is torch's hint that attn_mask is causal: an explicit mask wins;
    # without one we apply the causal mask (torch raises instead).
    causal = bool(is_causal) and am is None
    p = float(dropout_p) if training else 0.0
    seed = _dropout_seed(p, fn)
    if in_proj_weight is not None and nd == 3 and k is v:
        # The Transformer layers' case: self- or cross-attention on one packed
        # projection, computed in the inputs' own layout.
        return _mha_packed(q, None if q is k else k, num_heads, in_proj_weight, in_proj_bias, out_proj_weight,
                           out_proj_bias, mask, causal, p, need_weights, average_attn_weights, not batch_first, seed,
                           gms)
    qb, kb, vb = (_to_batch_first(t, nd, batch_first) for t in (q, k, v))
    out, attn = _mha(qb, kb, vb, num_heads, q_proj_weight if in_proj_weight is None else None,
                     k_proj_weight if in_proj_weight is None else None,
                     v_proj_weight if in_proj_weight is None else None, in_proj_weight, in_proj_bias,
                     out_proj_weight, out_proj_bias, mask, causal, p, need_weights, average_attn_weights, seed, gms)
    out = _from_batch_first(out, nd, batch_first)
    if attn is not None and nd == 2:
        attn = attn.squeeze(0)
    return out, attn


def multi_head_attention_forward(query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int,
                                 num_heads: int, in_proj_weight: Optional[Tensor], in_proj_bias: Optional[Tensor],
                                 bias_k: Optional[Tensor], bias_v: Optional[Tensor], add_zero_attn: bool,
                                 dropout_p: float, out_proj_weight: Tensor, out_proj_bias: Optional[Tensor],
                                 training: bool = True, key_padding_mask: Optional[Tensor] = None,
                                 need_weights: bool = True, attn_mask: Optional[Tensor] = None,
                                 use_separate_proj_weight: bool = False, q_proj_weight: Optional[Tensor] = None,
                                 k_proj_weight: Optional[Tensor] = None, v_proj_weight: Optional[Tensor] = None,
                                 static_k: Optional[Tensor] = None, static_v: Optional[Tensor] = None,
                                 average_attn_weights: bool = True, is_causal: bool = False
                                 ) -> Tuple[Tensor, Optional[Tensor]]:
    """torch.nn.functional.multi_head_attention_forward: sequence-first query
    (L, N, E), key (S, N, Ek), value (S, N, Ev) (or unbatched (L, E) ...) ->
    (out (L, N, E), weights (N, L, S) averaged over heads / (N, H, L, S) or
    None).  Masks use torch's MultiheadAttention polarity: bool **True =
    hidden**, float added; key_padding_mask (N, S), attn_mask (L, S) or
    (N * num_heads, L, S).  bias_k/bias_v, add_zero_attn and static_k/v are
    not supported (NotImplementedError)."""
    fn = "multi_head_attention_forward"
    if bias_k is not None or bias_v is not None:
        raise NotImplementedError(f"{fn}: bias_k/bias_v (add_bias_kv=True) are not supported")
    if add_zero_attn:
        raise NotImplementedError(f"{fn}: add_zero_attn=True is not supported")
    if static_k is not None or static_v is not None:
        raise NotImplementedError(f"{fn}: static_k/static_v are not supported")
    if isinstance(query, Tensor) and query.shape[-1] != embed_dim_to_check:
        raise AssertionError(f"{fn}: query.shape[-1] must be embed_dim_to_check = {embed_dim_to_check}, "
                             f"got {query.shape[-1]}")
    if use_separate_proj_weight:
        in_proj_weight = None
    return multi_head_attention(query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight,
                                out_proj_bias, dropout_p, training, key_padding_mask, need_weights, attn_mask,
                                q_proj_weight, k_proj_weight, v_proj_weight, average_attn_weights, is_causal,
                                batch_first=False, fn=fn)
