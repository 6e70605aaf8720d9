"""Incremental decoding: one new query per row attending over a key/value
cache (forward only; decoding runs without gradients).

A cache is a pair of C-contiguous arrays ``cache_k`` (B, H, Tmax, Dh) and
``cache_v`` (B, H, Tmax, Dv), B being the rows (batch, or batch x beams).

* Self-attention while generating: at step t write the new token's key and
  value into slot t (:func:`kv_cache_append`), then attend to slots 0..t
  (:func:`attend_step` with ``lengths = t + 1``).
* Cross-attention: fill the cache once from the encoder memory and attend to
  the first ``src_len[b]`` slots of each row (or pass a key padding mask).
* Beam search: gather rows when beams are re-ranked (:func:`cache_reorder`).

``key_padding_mask`` follows torch's ``key_padding_mask`` polarity:
**True = the slot is padding and is ignored**.  A row with no visible key
gets a zero output (never NaN).
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np

from .. import _C

RowInts = Union[int, np.ndarray]


def kv_cache_append(cache_k: np.ndarray, cache_v: np.ndarray, k_t: np.ndarray, v_t: np.ndarray,
                    pos: RowInts) -> None:
    """Write k_t (B, H, Dh) into cache_k[:, :, pos] and v_t (B, H, Dv) into
    cache_v[:, :, pos], in place.  pos: an int, or (B,) ints (one slot per
    row), each in [0, Tmax)."""
    _C.kv_cache_append(cache_k, cache_v, k_t, v_t, pos)


def attend_step(q_t: np.ndarray, cache_k: np.ndarray, cache_v: np.ndarray, lengths: RowInts,
                key_padding_mask: Optional[np.ndarray] = None, scale: Optional[float] = None
                ) -> np.ndarray:
    """Attention of one query per (row, head) over the cache.

    q_t (B, H, Dh), cache_k (B, H, Tmax, Dh), cache_v (B, H, Tmax, Dv);
    lengths: int or (B,) ints in [0, Tmax], row b sees slots < lengths[b];
    key_padding_mask (B, Tmax) bool, True = hidden, or None; scale defaults
    to 1/sqrt(Dh) -> out (B, H, Dv) = softmax(scale q k^T) v.
    """
    return _C.attend_step(q_t, cache_k, cache_v, lengths, key_padding_mask, scale)


def cache_reorder(cache: np.ndarray, rows: np.ndarray, length: Optional[int] = None) -> np.ndarray:
    """Gather cache rows: cache (B_in, H, Tmax, D), rows (B_out,) ints in
    [0, B_in) -> new (B_out, H, Tmax, D) with out[i] = cache[rows[i]] for the
    first ``length`` slots (all by default) and zeros after.  B_out may
    differ from B_in (e.g. expanding a batch to batch x beams)."""
    return _C.cache_reorder(cache, rows, length)
