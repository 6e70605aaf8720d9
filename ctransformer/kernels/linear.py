"""Linear layer and (batched, broadcasting) matrix products (linear_* and bmm_*
are generated from csrc/py/kernel_table.py into _bindings.py)."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from .. import _C
from ._bindings import bmm_backward, bmm_forward, linear_backward, linear_forward

__all__ = ["linear_forward", "linear_backward", "bmm_forward", "bmm_backward", "matmul_forward", "matmul_backward"]


def _as_batches(x: np.ndarray, batch_shape: tuple) -> np.ndarray:
    """x (..., R, C) broadcast to batch_shape, as (B or 1, R, C) (B may be 0)."""
    if x.shape[:-2] == tuple(batch_shape):
        return x.reshape((math.prod(batch_shape),) + x.shape[-2:])
    if all(d == 1 for d in x.shape[:-2]):
        return x.reshape((1,) + x.shape[-2:])
    return np.broadcast_to(x, tuple(batch_shape) + x.shape[-2:]).reshape(
        (math.prod(batch_shape),) + x.shape[-2:])


def matmul_forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with NumPy's broadcasting of batch dims; a (..., M, K),
    b (..., K, N), both at least 2-D -> (broadcast batch..., M, N)."""
    _arrays("matmul_forward", a=a, b=b)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul_forward: a and b must be at least 2-D, got {a.ndim}-D and {b.ndim}-D")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul_forward: b.shape[-2] must be {a.shape[-1]} (a.shape[-1]), got {b.shape[-2]}")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if not batch:
        return _C.bmm_forward(a[None], b[None])[0]
    out = _C.bmm_forward(_as_batches(a, batch), _as_batches(b, batch))
    return out.reshape(tuple(batch) + out.shape[-2:])


def _arrays(fn: str, **arrays: object) -> None:
    """The Python-level wrappers' arguments must be arrays (before their
    .ndim / .shape are read): TypeError naming fn and the argument."""
    for name, value in arrays.items():
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{fn}: {name} must be a numpy.ndarray, got {type(value).__name__}")


def _reduce_to(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum a broadcast gradient back to ``shape``."""
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(i + extra for i, d in enumerate(shape) if d == 1 and grad.shape[i + extra] != 1)
    return grad.sum(axis=axes, keepdims=True).reshape(shape)


def matmul_backward(dout: np.ndarray, a: np.ndarray, b: np.ndarray, need_da: bool = True,
                    need_db: bool = True) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Gradients of :func:`matmul_forward`, summed back to the shapes of a and b."""
    _arrays("matmul_backward", dout=dout, a=a, b=b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a3, b3 = _as_batches(a, batch), _as_batches(b, batch)
    d3 = dout.reshape((math.prod(dout.shape[:-2]),) + dout.shape[-2:])
    da, db = _C.bmm_backward(d3, a3, b3, need_da, need_db)
    return _unbatch(da, batch, a.shape), _unbatch(db, batch, b.shape)


def _unbatch(g3: Optional[np.ndarray], batch: tuple, shape: tuple) -> Optional[np.ndarray]:
    """(B or 1, R, C) gradient -> the operand's own shape."""
    if g3 is None:
        return None
    lead = tuple(batch) if g3.shape[0] != 1 else (1,) * len(batch)
    return _reduce_to(g3.reshape(lead + g3.shape[-2:]), shape)
