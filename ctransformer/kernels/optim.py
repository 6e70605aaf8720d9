"""In-place optimizer updates (torch.optim.SGD, Adam, AdamW) and gradient-norm
clipping (torch.nn.utils.clip_grad_norm_).

Parameters and optimizer state are updated in place and must be C-contiguous,
writeable arrays of one dtype and shape (views are refused: a copy would lose
the update).  Gradients are only read.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from .. import _C
from ._args import as_float

Grads = Union[np.ndarray, Sequence[np.ndarray]]


def sgd_step(param: np.ndarray, grad: np.ndarray, momentum_buffer: Optional[np.ndarray], lr: float,
             momentum: float = 0.0, dampening: float = 0.0, nesterov: bool = False,
             weight_decay: float = 0.0, maximize: bool = False, first_step: bool = False) -> None:
    """One step of torch.optim.SGD on one parameter, in place.

    param, grad, momentum_buffer: same shape and dtype (buffer may be None
    when momentum == 0).  ``first_step`` initialises the buffer to the
    (decayed) gradient without dampening, as torch does when the buffer
    does not exist yet.
    """
    _C.sgd_step(param, grad, momentum_buffer, lr, momentum, dampening, nesterov, weight_decay,
                maximize, first_step)


def adam_step(param: np.ndarray, grad: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray,
              step: int, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
              weight_decay: float = 0.0, decoupled_weight_decay: bool = False, amsgrad: bool = False,
              max_exp_avg_sq: Optional[np.ndarray] = None, maximize: bool = False) -> None:
    """One step of torch.optim.Adam (AdamW with ``decoupled_weight_decay``), in place.

    param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq, required when
    ``amsgrad``): same shape and dtype; state starts at zeros.  ``step`` is
    the number of this step, from 1 (bias correction 1 - beta**step).
    """
    _C.adam_step(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay,
                 decoupled_weight_decay, amsgrad, max_exp_avg_sq, maximize)


def grad_norm(grads: Grads, norm_type: float = 2.0) -> float:
    """p-norm of all gradients seen as one vector (``norm_type`` > 0 or inf),
    accumulated in double; 0.0 for an empty list."""
    return _C.grad_norm(grads, as_float("grad_norm", "norm_type", norm_type))


def clip_grad_norm(grads: Grads, max_norm: float, norm_type: float = 2.0) -> float:
    """torch.nn.utils.clip_grad_norm_ on arrays: scales every gradient in place
    by ``min(max_norm / (total_norm + 1e-6), 1)`` and returns total_norm
    (see :func:`grad_norm`).  Gradients must be C-contiguous; all are
    checked before any is scaled."""
    return _C.clip_grad_norm(grads, as_float("clip_grad_norm", "max_norm", max_norm),
                             as_float("clip_grad_norm", "norm_type", norm_type))
