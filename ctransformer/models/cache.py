"""Per-layer key/value caches and the one-token step of our Transformer
layers (forward only, eval semantics: no dropout).

The step of a layer mirrors its full forward (post-norm or pre-norm),
reusing the layer's own norms and fused feed-forward on (B, D) rows; only
attention is replaced by the KV-cache kernels: the new token's key/value
are appended to the self-attention cache and its query attends to slots
0..t; cross-attention attends to the encoder memory's keys/values, computed
once per source (:func:`cross_kv`).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from .. import kernels as K
from ..tensor import Tensor

Arr = np.ndarray


def _proj(attn) -> Tuple[Arr, Arr, Arr, Optional[Arr], Optional[Arr], Optional[Arr]]:
    """(wq, wk, wv, bq, bk, bv) of a MultiheadAttention, packed or not."""
    E = attn.embed_dim
    if attn.in_proj_weight is not None:
        w = attn.in_proj_weight._data
        wq, wk, wv = w[:E], w[E:2 * E], w[2 * E:]
    else:
        wq, wk, wv = attn.q_proj_weight._data, attn.k_proj_weight._data, attn.v_proj_weight._data
    if attn.in_proj_bias is not None:
        b = attn.in_proj_bias._data
        return wq, wk, wv, b[:E], b[E:2 * E], b[2 * E:]
    return wq, wk, wv, None, None, None


def _heads(x: Arr, H: int) -> Arr:
    """(B, E) -> (B, H, Dh)."""
    return x.reshape(x.shape[0], H, -1)


def _out_proj(attn, ctx: Arr) -> Arr:
    """ctx (B, H, Dh) -> (B, E) through out_proj."""
    b = attn.out_proj.bias
    return K.linear_forward(ctx.reshape(ctx.shape[0], -1), attn.out_proj.weight._data,
                            None if b is None else b._data)


class SelfCache:
    """Self-attention keys/values of one layer: k, v (B, H, Tmax, Dh)."""

    def __init__(self, B: int, H: int, Tmax: int, Dh: int, dtype) -> None:
        self.k = np.zeros((B, H, Tmax, Dh), dtype)
        self.v = np.zeros((B, H, Tmax, Dh), dtype)

    def reorder(self, rows: Arr, length: int) -> None:
        self.k = K.cache_reorder(self.k, rows, length)
        self.v = K.cache_reorder(self.v, rows, length)


def self_attn_step(attn, x: Arr, cache: SelfCache, t: int) -> Arr:
    """x (B, E) the new token at position t -> attention output (B, E)."""
    wq, wk, wv, bq, bk, bv = _proj(attn)
    H = attn.num_heads
    q = _heads(K.linear_forward(x, wq, bq), H)
    K.kv_cache_append(cache.k, cache.v, _heads(K.linear_forward(x, wk, bk), H),
                      _heads(K.linear_forward(x, wv, bv), H), t)
    return _out_proj(attn, K.attend_step(q, cache.k, cache.v, t + 1))


def cross_kv(attn, memory: Arr) -> Tuple[Arr, Arr]:
    """The encoder memory (B, S, E) projected once: (k, v) (B, H, S, Dh)."""
    wq, wk, wv, bq, bk, bv = _proj(attn)
    B, S, _ = memory.shape
    H = attn.num_heads

    def heads(w, b):
        return np.ascontiguousarray(K.linear_forward(memory, w, b).reshape(B, S, H, -1).transpose(0, 2, 1, 3))

    return heads(wk, bk), heads(wv, bv)


def cross_attn_step(attn, x: Arr, mem_k: Arr, mem_v: Arr, mem_pad: Optional[Arr]) -> Arr:
    """x (B, E) attends to the memory (keys hidden where mem_pad (B, S) is True)."""
    wq, _, _, bq, _, _ = _proj(attn)
    q = _heads(K.linear_forward(x, wq, bq), attn.num_heads)
    return _out_proj(attn, K.attend_step(q, mem_k, mem_v, mem_k.shape[2], mem_pad))


def _t(a: Arr) -> Tensor:
    return Tensor._wrap(a)


def _post_norm(layer, x: Arr, sub: Arr, norm) -> Arr:
    return layer._residual_norm(_t(x), _t(sub), norm)._data


def encoder_layer_step(layer, x: Arr, cache: SelfCache, t: int) -> Arr:
    """One token through a TransformerEncoderLayer used causally (decoder-only LM)."""
    if layer.norm_first:
        x = x + self_attn_step(layer.self_attn, layer.norm1(_t(x))._data, cache, t)
        return x + layer._ff(layer.norm2(_t(x)))._data
    x = _post_norm(layer, x, self_attn_step(layer.self_attn, x, cache, t), layer.norm1)
    return _post_norm(layer, x, layer._ff(_t(x))._data, layer.norm2)


def decoder_layer_step(layer, x: Arr, cache: SelfCache, mem_kv: Tuple[Arr, Arr], mem_pad: Optional[Arr],
                       t: int) -> Arr:
    """One token through a TransformerDecoderLayer."""
    mk, mv = mem_kv
    if layer.norm_first:
        x = x + self_attn_step(layer.self_attn, layer.norm1(_t(x))._data, cache, t)
        x = x + cross_attn_step(layer.multihead_attn, layer.norm2(_t(x))._data, mk, mv, mem_pad)
        return x + layer._ff(layer.norm3(_t(x)))._data
    x = _post_norm(layer, x, self_attn_step(layer.self_attn, x, cache, t), layer.norm1)
    x = _post_norm(layer, x, cross_attn_step(layer.multihead_attn, x, mk, mv, mem_pad), layer.norm2)
    return _post_norm(layer, x, layer._ff(_t(x))._data, layer.norm3)


class DecoderCache:
    """Everything a model's decode_step carries between steps.

    self_caches: one SelfCache per layer; mem_kv: per layer (k, v) of the
    encoder memory or None (decoder-only); mem_pad (B, S) bool, True = padded
    source position; t: the number of tokens already fed."""

    def __init__(self, self_caches: List[SelfCache], mem_kv: Optional[List[Tuple[Arr, Arr]]] = None,
                 mem_pad: Optional[Arr] = None) -> None:
        self.self_caches = self_caches
        self.mem_kv = mem_kv
        self.mem_pad = mem_pad
        self.t = 0

    @property
    def max_len(self) -> int:
        return self.self_caches[0].k.shape[2] if self.self_caches else 0

    @property
    def rows(self) -> int:
        return self.self_caches[0].k.shape[0] if self.self_caches else 0

    def reorder(self, rows: Arr) -> None:
        """Beam search: row i continues from old row rows[i] (self caches only;
        every beam keeps its source, so the memory rows never move)."""
        rows = np.asarray(rows, dtype=np.int64)
        for c in self.self_caches:
            c.reorder(rows, self.t)

    def expand(self, rows: Arr) -> None:
        """Gather rows of everything, memory included (batch -> batch x beams)."""
        rows = np.asarray(rows, dtype=np.int64)
        for c in self.self_caches:
            c.reorder(rows, self.t)
        if self.mem_kv is not None:
            self.mem_kv = [(K.cache_reorder(k, rows), K.cache_reorder(v, rows)) for k, v in self.mem_kv]
        if self.mem_pad is not None:
            self.mem_pad = np.ascontiguousarray(self.mem_pad[rows])
