"""Variable-length batches for the recurrent modules: PackedSequence,
pack_padded_sequence, pad_packed_sequence, pack_sequence.

torch packs the real time steps of a sorted batch into one flat tensor.
Our recurrent kernels run padded batches with per-sequence lengths in any
order, so a :class:`PackedSequence` here is light: the time-major padded
tensor (``T = max(lengths)``) plus the lengths, in the caller's batch order.
torch's fields (``data``, ``batch_sizes``, ``sorted_indices``,
``unsorted_indices``) are provided for code that reads them.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from ...tensor import Tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pack_sequence"]

_SORT_MESSAGE = ("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can "
                 "pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this "
                 "requirement if you do not need ONNX exportability.")


class PackedSequence:
    """A batch of variable-length sequences.

    padded (T, B, *) time-major Tensor, T = max(lengths); steps t >= lengths[b]
    of sequence b are padding (never read by the recurrent modules).
    lengths: int64 array (B) in batch order.  ``sorted_indices`` /
    ``unsorted_indices`` are None when the batch was given sorted
    (``enforce_sorted=True``), else the permutations torch would store."""

    __slots__ = ("padded", "lengths", "sorted_indices", "unsorted_indices")

    def __init__(self, padded: Tensor, lengths: np.ndarray, sorted_indices: Optional[Tensor] = None,
                 unsorted_indices: Optional[Tensor] = None) -> None:
        self.padded = padded
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.sorted_indices = sorted_indices
        self.unsorted_indices = unsorted_indices

    @property
    def batch_sizes(self) -> Tensor:
        """(T) int64: how many sequences are still running at step t (torch's field)."""
        steps = np.arange(self.padded.shape[0])
        return Tensor._wrap((self.lengths[None, :] > steps[:, None]).sum(axis=1).astype(np.int64))

    @property
    def data(self) -> Tensor:
        """torch's flat layout (sum(lengths), *): step by step, the running
        sequences in decreasing-length order (differentiable)."""
        order = np.argsort(-self.lengths, kind="stable")
        t_idx, b_idx = [], []
        for t in range(self.padded.shape[0]):
            running = order[self.lengths[order] > t]
            t_idx.append(np.full(running.size, t))
            b_idx.append(running)
        return self.padded[np.concatenate(t_idx), np.concatenate(b_idx)]

    @property
    def dtype(self):
        return self.padded.dtype

    @property
    def is_cuda(self) -> bool:
        return False

    def to(self, *args, **kwargs) -> "PackedSequence":
        return PackedSequence(self.padded.to(*args, **kwargs), self.lengths, self.sorted_indices,
                              self.unsorted_indices)

    def cpu(self) -> "PackedSequence":
        return self

    def __iter__(self):
        return iter((self.data, self.batch_sizes, self.sorted_indices, self.unsorted_indices))

    def __repr__(self) -> str:
        return (f"PackedSequence(padded shape={tuple(self.padded.shape)}, "
                f"lengths={self.lengths.tolist()})")


def _lengths_array(lengths, batch: int) -> np.ndarray:
    """Validate ``lengths`` as torch does; returns an int64 array (B)."""
    if isinstance(lengths, Tensor):
        arr = lengths._data
    else:
        arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {arr.ndim}D tensor")
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"pack_padded_sequence: lengths must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.shape[0] != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {arr.shape[0]} "
                           f"(batch_size={batch})")
    return arr


def pack_padded_sequence(input: Tensor, lengths: Union[Tensor, Sequence[int]], batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch: input (T, B, *) (or (B, T, *) with batch_first),
    lengths (B) in [1, T] (list or int64 Tensor).  With enforce_sorted the
    lengths must be decreasing (RuntimeError otherwise, as torch)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"pack_padded_sequence: input must be a Tensor, got {type(input).__name__}")
    if input.dim() < 2:
        raise ValueError(f"pack_padded_sequence: input must have at least 2 dimensions "
                         f"({'B, T' if batch_first else 'T, B'}, *), got {input.dim()}")
    T, B = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
    arr = _lengths_array(lengths, B)
    sorted_idx = unsorted_idx = None
    if enforce_sorted:
        if B > 1 and np.any(arr[1:] > arr[:-1]):
            raise RuntimeError(_SORT_MESSAGE)
    else:
        order = np.argsort(-arr, kind="stable")
        sorted_idx = Tensor._wrap(order.astype(np.int64))
        unsorted_idx = Tensor._wrap(np.argsort(order, kind="stable").astype(np.int64))
    if B and arr.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in "
                           "'lengths' that is <= 0")
    if B and arr.max() > T:
        b = int(np.argmax(arr))
        raise ValueError(f"pack_padded_sequence: lengths[{b}] must be at most the sequence length "
                         f"{T} of input (dimension {1 if batch_first else 0}), got {int(arr[b])}")
    longest = int(arr.max()) if B else 0
    padded = input.transpose(0, 1) if batch_first else input
    if longest < T:
        padded = padded[:longest]
    return PackedSequence(padded, arr, sorted_idx, unsorted_idx)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Inverse of :func:`pack_padded_sequence`: returns (padded (T, B, *) or
    (B, T, *), lengths int64 (B)), padding filled with ``padding_value``,
    T = total_length if given (at least the longest length) else max(lengths)."""
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence: sequence must be a PackedSequence, got {type(sequence).__name__}")
    padded, lengths = sequence.padded, sequence.lengths
    T = padded.shape[0]
    if total_length is not None:
        if total_length < T:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in "
                             f"input, but got total_length={total_length} and max sequence length being {T}")
        if total_length > T:
            from ...tensor import cat, zeros
            pad = zeros((total_length - T,) + tuple(padded.shape[1:]), dtype=padded.dtype)
            padded = cat([padded, pad], 0)
    steps = np.arange(padded.shape[0])
    is_pad = steps[:, None] >= lengths[None, :]  # (T, B)
    is_pad = is_pad.reshape(is_pad.shape + (1,) * (padded.dim() - 2))
    if padding_value != 0 or np.any(padded._data[np.broadcast_to(is_pad, padded.shape)] != 0):
        padded = padded.masked_fill(Tensor._wrap(is_pad), padding_value)
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, Tensor._wrap(lengths.astype(np.int64).copy())


def pack_sequence(sequences: List[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) Tensors (decreasing lengths unless enforce_sorted=False)."""
    from .rnn import pad_sequence
    lengths = [int(s.shape[0]) for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)
