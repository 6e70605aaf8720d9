"""cross_entropy through the C fused log-softmax + NLL kernel (class ids),
or the log_softmax kernel (class probabilities).

Layouts: input (N, C), (N, C, d1, ...) or (C,); the kernels want rows of
classes, (rows, C): :func:`class_dim_last` / :func:`class_dim_back`."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import kernels as K
from ..autograd import apply_op
from ..tensor import Tensor

__all__ = ["cross_entropy", "cross_entropy_probs", "class_dim_last", "class_dim_back", "loss_shape"]


def class_dim_last(x: np.ndarray) -> np.ndarray:
    """(N, C, d1, ...) -> (N * d1 * ..., C)."""
    if x.ndim <= 2:
        return x.reshape(-1, x.shape[-1]) if x.ndim == 2 else x.reshape(1, -1)
    return np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])


def class_dim_back(g2: np.ndarray, shape: tuple) -> np.ndarray:
    """Inverse of :func:`class_dim_last`."""
    if len(shape) <= 2:
        return g2.reshape(shape)
    moved = (shape[0],) + tuple(shape[2:]) + (shape[1],)
    return np.moveaxis(g2.reshape(moved), -1, 1)


def loss_shape(x: np.ndarray) -> tuple:
    """Shape of the per-element loss with reduction='none'."""
    return () if x.ndim == 1 else (x.shape[0],) + tuple(x.shape[2:])


def cross_entropy(input: Tensor, target: Tensor, w: Optional[np.ndarray], ignore_index: int,
                  label_smoothing: float, reduction: str) -> Tensor:
    """Cross-entropy of softmax(input) along the class dim against integer
    class ids ``target`` (checked by nn.functional.cross_entropy); ``w``:
    per-class weights (C,) of input's dtype, or None."""
    x, t = input._data, target._data
    x2 = class_dim_last(x)
    t2 = t.reshape(-1)
    loss, lse = K.cross_entropy_forward(x2, t2, ignore_index, label_smoothing, reduction, w)
    if reduction == "none":
        loss = loss.reshape(loss_shape(x))

    def backward(g):
        g2 = g.reshape(-1) if reduction == "none" else g
        d2 = K.cross_entropy_backward(np.asarray(g2, x.dtype), x2, t2, lse, ignore_index,
                                      label_smoothing, reduction, w)
        return (class_dim_back(d2, x.shape), None)

    return apply_op(loss, (input, target), backward, "CrossEntropy")


def cross_entropy_probs(input: Tensor, target: Tensor, w: Optional[np.ndarray], reduction: str,
                        label_smoothing: float) -> Tensor:
    """Soft targets (``target`` shaped like ``input``): loss_n = -sum_c w_c
    q_nc log p_nc, q = (1-eps) target + eps / C; 'mean' divides by the batch
    size (torch's rule for probability targets)."""
    x, t = input._data, target._data
    x2 = class_dim_last(x)
    q = class_dim_last(t.astype(x.dtype))
    n, c = x2.shape
    if label_smoothing:
        q = q * (1 - label_smoothing) + label_smoothing / c
    logp = K.log_softmax_forward(np.ascontiguousarray(x2))
    wq = q if w is None else q * w
    per_row = -(wq * logp).sum(axis=1)
    if reduction == "none":
        loss = per_row.reshape(loss_shape(x))
    elif reduction == "sum":
        loss = np.asarray(per_row.sum(), x.dtype)
    else:
        loss = np.asarray(per_row.sum() / max(n, 1), x.dtype)
    rows = max(n, 1)

    def backward(g):
        if reduction == "none":
            scale = g.reshape(-1, 1)
        elif reduction == "sum":
            scale = g
        else:
            scale = g / rows
        dlogp = np.ascontiguousarray(-wq * scale, x.dtype)
        d2 = K.log_softmax_backward(dlogp, logp)
        dq = None
        if target.requires_grad:
            dq = class_dim_back(-(logp if w is None else logp * w) * scale * (1 - label_smoothing), x.shape)
        return (class_dim_back(d2, x.shape), dq)

    return apply_op(loss, (input, target), backward, "CrossEntropy")
