"""Batching helpers on NumPy arrays: padding, length bucketing, attention masks.

Mask polarity used throughout ctransformer: **True = may attend (keep)**,
False = blocked (the score is set to -inf before the softmax).  This is the
polarity of the tutorials' ``scores.masked_fill(mask == 0, -1e9)`` and of
``torch.nn.functional.scaled_dot_product_attention``'s boolean ``attn_mask``
(True = takes part in attention).  torch's ``nn.MultiheadAttention`` and
``nn.Transformer`` use the OPPOSITE polarity for boolean masks
(``attn_mask`` / ``key_padding_mask`` / ``tgt_mask``: True = NOT allowed);
pass ``~mask`` there.

Shapes: ids are (B, S) / (B, T) int arrays; masks are 4-D so that they
broadcast against attention scores (B, heads, T_query, S_key):
padding mask (B, 1, 1, S), subsequent mask (1, 1, T, T), target mask
(B, 1, T, T).
"""
from __future__ import annotations

import itertools

from typing import List, Optional, Sequence, Tuple

import numpy as np


def _int_ids(ids, where: str) -> np.ndarray:
    arr = np.asarray(ids)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{where}: ids must be an integer array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{where}: ids must be 2-D (B, S), got shape {arr.shape}")
    return arr


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int = 0, length: Optional[int] = None) -> np.ndarray:
    """Right-pad integer sequences into an int64 array (B, T).

    T is the longest sequence's length, or ``length`` if given (ValueError if
    a sequence is longer).  An empty list gives shape (0, T or 0); empty
    sequences give rows of padding.
    """
    if not isinstance(seqs, (list, tuple)):
        seqs = list(seqs)  # read twice below (an iterator would be empty the second time)
    lengths, flat = _all_ids(seqs)
    longest = max(lengths, default=0)
    if length is None:
        length = longest
    elif longest > length:
        raise ValueError(f"pad_batch: sequences must have at most length={length} ids, got {longest}")
    out = np.full((len(lengths), length), pad_id, dtype=np.int64)
    out[np.arange(length) < np.asarray(lengths, dtype=np.int64)[:, None]] = flat  # row-major: row by row
    return out


def _plain_integers(arr: np.ndarray) -> bool:
    return arr.dtype != bool and np.issubdtype(arr.dtype, np.integer)


def _all_ids(seqs: Sequence[Sequence[int]]) -> Tuple[List[int], np.ndarray]:
    """(length of each row, all ids in row order).  One conversion of every id
    at once (a per-row np.asarray costs more than the copy on a training
    step's batch); rows of bools, of other shapes or of non-integers are
    looked at one by one, so that the error names the row."""
    items = list(itertools.chain.from_iterable(seqs))
    kinds = set(map(type, items))  # (in C: a generator over the ids cost ~0.4 ms per training batch)
    if bool not in kinds and np.bool_ not in kinds:  # bools beside ints would convert to ints
        try:
            flat = np.asarray(items)
        except ValueError:  # ragged: rows that are not flat sequences
            flat = None
        lengths = [len(s) for s in seqs]
        if flat is not None and flat.ndim == 1 and flat.size == sum(lengths) and (
                flat.size == 0 or _plain_integers(flat)):
            return lengths, flat
    rows = [np.asarray(s).reshape(-1) if len(s) else np.zeros(0, np.int64) for s in seqs]
    for i, row in enumerate(rows):
        if row.size and not _plain_integers(row):
            raise TypeError(f"pad_batch: seqs[{i}] must hold integers, got dtype {row.dtype}")
    return [row.size for row in rows], (np.concatenate(rows) if rows else np.zeros(0, np.int64))


def bucket_batches(lengths: Sequence[int], batch_size: int, shuffle: bool = True, seed: int = 0,
                   bucket_size: Optional[int] = None, drop_last: bool = False) -> List[np.ndarray]:
    """Split example indices into batches of similar length (less padding).

    Without shuffle: all indices sorted by length (stable, ties keep index
    order), cut into consecutive batches.  With shuffle: indices are permuted
    with ``np.random.default_rng(seed)``, cut into buckets of ``bucket_size``
    (default 50 * batch_size), each bucket is sorted by length and cut into
    batches, and the order of all batches is shuffled.  Every index appears
    exactly once (the last batch may be smaller unless ``drop_last``).
    Returns a list of int64 index arrays.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"bucket_batches: batch_size must be a positive int, got {batch_size!r}")
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"bucket_batches: lengths must be 1-D, got shape {lengths.shape}")
    bucket_size = 50 * batch_size if bucket_size is None else bucket_size
    if bucket_size < batch_size:
        raise ValueError(f"bucket_batches: bucket_size must be >= batch_size={batch_size}, got {bucket_size}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(lengths.size) if shuffle else np.arange(lengths.size)
    buckets = [order[i:i + bucket_size] for i in range(0, order.size, bucket_size)] if shuffle else [order]
    batches: List[np.ndarray] = []
    for bucket in buckets:
        bucket = bucket[np.argsort(lengths[bucket], kind="stable")]
        batches += [bucket[i:i + batch_size].astype(np.int64) for i in range(0, bucket.size, batch_size)]
    if drop_last:
        batches = [b for b in batches if b.size == batch_size]
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def padding_mask(ids: np.ndarray, pad_id: int = 0) -> np.ndarray:
    """Key padding mask: ids (B, S) -> bool (B, 1, 1, S), **True = keep**
    (``ids != pad_id``; positions holding ``pad_id`` may not be attended to).

    torch's ``key_padding_mask`` (nn.MultiheadAttention / nn.Transformer) uses
    the opposite polarity (True = padding, blocked); F.scaled_dot_product_attention
    uses this one (True = takes part).
    """
    ids = _int_ids(ids, "padding_mask")
    return (ids != pad_id)[:, None, None, :]


def subsequent_mask(size: int) -> np.ndarray:
    """Causal ("no peeking") mask: bool (1, 1, T, T), lower triangle incl. the
    diagonal **True = may attend**: query position i sees keys 0..i.

    ``nn.Transformer.generate_square_subsequent_mask`` returns the opposite
    (a float -inf mask above the diagonal); a boolean torch ``attn_mask`` for
    nn.MultiheadAttention is True where attention is *blocked*, i.e. ``~mask``.
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise ValueError(f"subsequent_mask: size must be a non-negative int, got {size!r}")
    return np.tril(np.ones((size, size), dtype=bool))[None, None]


def target_mask(tgt_ids: np.ndarray, pad_id: int = 0) -> np.ndarray:
    """Decoder self-attention mask: tgt_ids (B, T) -> bool (B, 1, T, T),
    **True = may attend**: key j is visible from query i iff j <= i and
    ``tgt_ids[b, j] != pad_id`` (the padding mask on keys AND the causal mask).

    Invert (``~mask``) for torch's nn.MultiheadAttention / nn.Transformer masks
    (True = blocked); use as is for F.scaled_dot_product_attention.
    """
    tgt_ids = _int_ids(tgt_ids, "target_mask")
    return padding_mask(tgt_ids, pad_id) & subsequent_mask(tgt_ids.shape[1])


def create_masks(src_ids: np.ndarray, tgt_ids: np.ndarray, pad_id: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """The tutorial's ``create_masks``: (padding_mask(src) (B, 1, 1, S),
    target_mask(tgt) (B, 1, T, T)), both True = may attend."""
    return padding_mask(src_ids, pad_id), target_mask(tgt_ids, pad_id)
