"""Attention masks for the Transformer tutorials, and converters between the
two polarities in use.

**Keep polarity (True = may attend)** — what this module builds by default,
what the Annotated-Transformer style code expects (``scores.masked_fill(mask
== 0, -1e9)``) and what ``F.scaled_dot_product_attention`` takes as a bool
``attn_mask``:

* :func:`padding_mask` (B, 1, 1, S): True where the token is not padding;
* :func:`subsequent_mask` (1, 1, T, T): True on and below the diagonal;
* :func:`target_mask` (B, 1, T, T): both combined, for decoder self-attention.

**Blocked polarity (True = NOT allowed)** — what ``nn.MultiheadAttention`` and
``nn.Transformer*`` take (``attn_mask``, ``*_key_padding_mask``):

* :func:`key_padding_mask` (B, S): True where the token is padding;
* :func:`causal_mask` (T, T): True above the diagonal (the bool form of
  ``nn.Transformer.generate_square_subsequent_mask``, which is float -inf);
* :func:`to_blocked` flips a keep mask (optionally squeezing the broadcast
  axes to torch's (B, S) / (T, T) shapes); :func:`to_keep` flips back;
  :func:`to_additive` turns either into a float 0 / -inf mask.

Mixing the polarities up silently inverts attention (a tutorial bug we must
not copy): every function here says which one it returns.
"""
from __future__ import annotations

from typing import Union

import numpy as np

from .tensor import Tensor

ArrayLike = Union[Tensor, np.ndarray]

__all__ = ["padding_mask", "subsequent_mask", "target_mask", "key_padding_mask", "causal_mask",
           "to_blocked", "to_keep", "to_additive"]


def _ids(ids: ArrayLike, fn: str) -> np.ndarray:
    a = ids._data if isinstance(ids, Tensor) else np.asarray(ids)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{fn}: ids must have an integer dtype, got {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"{fn}: ids must be 2-D (batch, seq), got {a.ndim}-D of shape {a.shape}")
    return a


def _bool(mask: ArrayLike, fn: str) -> np.ndarray:
    m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"{fn}: mask must have dtype bool, got {m.dtype}")
    return m


def _size(T: int, fn: str) -> int:
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 0:
        raise ValueError(f"{fn}: the size must be an int >= 0, got {T!r}")
    return int(T)


def padding_mask(ids: ArrayLike, pad_id: int) -> Tensor:
    """ids (B, S) -> bool (B, 1, 1, S), **True = keep** (token != pad_id).
    Broadcasts over heads and queries in (B, H, T, S) scores."""
    a = _ids(ids, "padding_mask")
    return Tensor._wrap((a != pad_id)[:, None, None, :])


def subsequent_mask(T: int) -> Tensor:
    """bool (1, 1, T, T), **True = keep**: query i may attend to keys j <= i."""
    T = _size(T, "subsequent_mask")
    return Tensor._wrap(np.tril(np.ones((T, T), dtype=bool))[None, None])


def target_mask(tgt: ArrayLike, pad_id: int) -> Tensor:
    """tgt ids (B, T) -> bool (B, 1, T, T), **True = keep**: key j is visible
    to query i when j <= i and tgt[b, j] is not padding."""
    a = _ids(tgt, "target_mask")
    return Tensor._wrap(padding_mask(a, pad_id)._data & subsequent_mask(a.shape[1])._data)


def key_padding_mask(ids: ArrayLike, pad_id: int) -> Tensor:
    """ids (B, S) -> bool (B, S), **True = padding (blocked)**: torch's
    ``src_key_padding_mask`` / ``tgt_key_padding_mask`` / ``memory_key_padding_mask``."""
    a = _ids(ids, "key_padding_mask")
    return Tensor._wrap(a == pad_id)


def causal_mask(T: int) -> Tensor:
    """bool (T, T), **True = blocked** (j > i): torch's bool ``attn_mask`` /
    ``tgt_mask`` form of ``nn.Transformer.generate_square_subsequent_mask(T)``."""
    T = _size(T, "causal_mask")
    return Tensor._wrap(np.triu(np.ones((T, T), dtype=bool), 1))


def to_blocked(mask: ArrayLike, squeeze: bool = False) -> Tensor:
    """Keep polarity -> torch's nn.Transformer polarity: **True = blocked**.

    With ``squeeze=True`` the broadcast axes of this module's shapes are
    dropped: (B, 1, 1, S) -> (B, S) (a key padding mask) and (1, 1, T, T) ->
    (T, T) (an attn_mask); a (B, 1, T, T) mask has no torch 2-D form and is
    returned as (B, T, T) (repeat it per head for a (B*H, T, T) attn_mask)."""
    m = ~_bool(mask, "to_blocked")
    if squeeze and m.ndim == 4:
        if m.shape[1] != 1:
            raise ValueError(f"to_blocked: mask.shape[1] (heads) must be 1 to squeeze, got {m.shape[1]}")
        if m.shape[0] == 1:
            m = m[0, 0]
        elif m.shape[2] == 1:
            m = m[:, 0, 0, :]
        else:
            m = m[:, 0]
    return Tensor._wrap(m)


def to_keep(mask: ArrayLike) -> Tensor:
    """torch's blocked polarity (True = NOT allowed) -> keep polarity (True = keep)."""
    return Tensor._wrap(~_bool(mask, "to_keep"))


def to_additive(mask: ArrayLike, blocked: bool = False, dtype=np.float32) -> Tensor:
    """A bool mask -> float 0 / -inf (added to scores; accepted by every API
    here and in torch).  ``blocked=False`` reads True as keep (this module's
    masks); ``blocked=True`` reads True as blocked (torch's nn.Transformer masks)."""
    m = _bool(mask, "to_additive")
    hidden = m if blocked else ~m
    return Tensor._wrap(np.where(hidden, -np.inf, 0.0).astype(dtype))
