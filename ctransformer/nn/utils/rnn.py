"""nn.utils.rnn.pad_sequence."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...autograd import apply_op
from ...tensor import Tensor

__all__ = ["pad_sequence"]


def pad_sequence(sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack variable-length sequences (L_i, *) into (T, B, *) (or (B, T, *)
    with batch_first), T = max L_i, filling with ``padding_value``.
    Gradients flow back to each sequence."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}")
    seqs = list(sequences)
    if not seqs:
        raise RuntimeError("pad_sequence: received an empty list of sequences")
    for i, s in enumerate(seqs):
        if not isinstance(s, Tensor):
            raise TypeError(f"pad_sequence: sequences[{i}] must be a Tensor, got {type(s).__name__}")
        if s.dim() == 0 or s.shape[1:] != seqs[0].shape[1:]:
            raise RuntimeError(f"pad_sequence: sequences[{i}] has shape {tuple(s.shape)}; every sequence "
                               f"must be (L, {', '.join(map(str, seqs[0].shape[1:]))})")
    arrays = [s._data for s in seqs]
    dtype = np.result_type(*arrays)
    longest = max(a.shape[0] for a in arrays)
    out = np.full((len(arrays), longest) + arrays[0].shape[1:], padding_value, dtype=dtype)
    spans = []
    for i, a in enumerate(arrays):
        n = a.shape[0]
        span = slice(0, n) if padding_side == "right" else slice(longest - n, longest)
        out[i, span] = a
        spans.append(span)
    if not batch_first:
        out = np.ascontiguousarray(np.swapaxes(out, 0, 1))

    def backward(g):
        gb = g if batch_first else np.swapaxes(g, 0, 1)
        return tuple(np.ascontiguousarray(gb[i, span]) for i, span in enumerate(spans))

    return apply_op(out, tuple(seqs), backward, "PadSequence")
from .rnn_pack import PackedSequence, pack_padded_sequence, pack_sequence, pad_packed_sequence  # noqa: E402,F401
