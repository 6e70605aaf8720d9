"""In-place optimizer updates (torch.optim.SGD, Adam, AdamW, RMSprop) and gradient-norm
clipping (torch.nn.utils.clip_grad_norm_).

Parameters and optimizer state are updated in place and must be C-contiguous,
writeable arrays of one dtype and shape (views are refused: a copy would lose
the update).  Gradients are only read.  (sgd_step, adam_step and rmsprop_step are generated
from csrc/py/kernel_table.py into _bindings.py.)
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from .. import _C
from ._args import as_float
from ._bindings import adam_step, rmsprop_step, sgd_step

__all__ = ["sgd_step", "adam_step", "adam_multi_step", "rmsprop_step", "grad_norm", "clip_grad_norm"]

Grads = Union[np.ndarray, Sequence[np.ndarray]]


def adam_multi_step(params: Sequence[np.ndarray], grads: Sequence[np.ndarray], exp_avgs: Sequence[np.ndarray],
                    exp_avg_sqs: Sequence[np.ndarray], steps: Sequence[int], lr: float = 1e-3, beta1: float = 0.9,
                    beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0,
                    decoupled_weight_decay: bool = False, amsgrad: bool = False,
                    max_exp_avg_sqs: Optional[Sequence[np.ndarray]] = None, maximize: bool = False) -> None:
    """:func:`adam_step` on every parameter of a list in one call (torch's
    fused Adam): entry i is ``adam_step(params[i], grads[i], exp_avgs[i],
    exp_avg_sqs[i], steps[i], ...)`` with the shared options, bit for bit.
    Every entry is checked before any parameter is updated; the lists must
    have one entry per parameter (``max_exp_avg_sqs`` only with amsgrad)."""
    fn = "adam_multi_step"
    _C.adam_multi_step(params, grads, exp_avgs, exp_avg_sqs, steps, as_float(fn, "lr", lr),
                       as_float(fn, "beta1", beta1), as_float(fn, "beta2", beta2), as_float(fn, "eps", eps),
                       as_float(fn, "weight_decay", weight_decay), bool(decoupled_weight_decay), bool(amsgrad),
                       max_exp_avg_sqs, bool(maximize))


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
