"""SGD with momentum, dampening, Nesterov, weight decay (torch's algorithm)."""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import numpy as np

from .. import kernels as K
from ..autograd import bump_version, no_grad
from ..tensor import Tensor
from .optimizer import Optimizer, _inplace_ready

__all__ = ["SGD"]


class SGD(Optimizer):
    """g = grad (+ weight_decay * p); with momentum: buf = momentum * buf +
    (1 - dampening) * g (buf = g at the first step), g = g + momentum * buf
    if nesterov else buf; p -= lr * g.  One ``sgd_step`` kernel call per
    parameter.  State: ``momentum_buffer`` (only when momentum != 0)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False, foreach=None,
                 differentiable: bool = False, fused=None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach, differentiable=differentiable,
                        fused=fused)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    def step(self, closure: Optional[Callable] = None):
        loss = self._evaluate(closure)
        with no_grad():
            for group in self.param_groups:
                momentum = group["momentum"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    param = _inplace_ready(p)
                    grad = self._grad_array(p)
                    buf, first = None, False
                    if momentum != 0:
                        state = self.state[p]
                        buf_t = state.get("momentum_buffer")
                        if buf_t is None:
                            buf_t = state["momentum_buffer"] = Tensor._wrap(np.zeros_like(param, order="C"))
                            first = True
                        buf = _inplace_ready(buf_t)
                    K.sgd_step(param, grad, buf, float(group["lr"]), float(momentum), float(group["dampening"]),
                               bool(group["nesterov"]), float(group["weight_decay"]), bool(group["maximize"]),
                               first)
                    bump_version(p)  # an in-place update, as torch's p.add_(...): saved copies go stale
        return loss
