"""Argument checks of the Tensor layer, with torch's exception classes and
messages (shared by the ctransformer.tensor package and ctransformer.ops)."""
from __future__ import annotations

import numbers
import operator
from typing import Iterable, Tuple

import numpy as np


def _int_tuple(shape: Iterable, fn: str) -> Tuple[int, ...]:
    """Sizes as ints: anything with ``__index__`` (int, NumPy integers, a
    one-element integer Tensor); a float or a string is torch's TypeError."""
    out = []
    for pos, s in enumerate(shape):
        if isinstance(s, bool) or not hasattr(s, "__index__"):
            name = fn if fn.isidentifier() else "size"
            raise TypeError(f"{name}(): argument 'size' (position 1) must be tuple of ints, but found element of "
                            f"type {type(s).__name__} at pos {pos}")
        out.append(operator.index(s))
    return tuple(out)


def _view_shape(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """A view's target: sizes >= 0, at most one -1 (NumPy would take any
    negative size as the inferred one)."""
    for d in shape:
        if d < -1:
            raise RuntimeError(f"invalid shape dimension {d}")
    if sum(d == -1 for d in shape) > 1:
        raise RuntimeError("only one dimension can be inferred")
    return shape


def _factory_shape(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    if any(d < 0 for d in shape):
        bad = next(d for d in shape if d < 0)
        raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: {list(shape)}")
    return shape


def _positive_chunks(chunks) -> int:
    if isinstance(chunks, bool) or not hasattr(chunks, "__index__"):
        raise TypeError(f"chunk(): argument 'chunks' (position 1) must be int, not {type(chunks).__name__}")
    chunks = operator.index(chunks)
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    return chunks


def _check_operand(fn: str, arg: str, position: int, value) -> None:
    """An operand of a binary op: a Tensor or something tensor() accepts
    (array, nested list, number); None and other objects are torch's
    TypeError rather than an AttributeError from inside."""
    from .tensor import Tensor

    if isinstance(value, (Tensor, np.ndarray, list, tuple, numbers.Number)):
        return
    raise TypeError(f"{fn}(): argument '{arg}' (position {position}) must be Tensor, not {type(value).__name__}")
