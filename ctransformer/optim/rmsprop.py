"""RMSprop (torch's algorithm; one ``rmsprop_step`` kernel call per parameter)."""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import numpy as np

from .. import kernels as K
from ..autograd import bump_version, no_grad
from ..tensor import Tensor
from .optimizer import Optimizer, _inplace_ready

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """g = grad (+ weight_decay * p); v = alpha * v + (1 - alpha) * g²;
    centered: a = alpha * a + (1 - alpha) * g, denom = sqrt(v - a²) + eps,
    else denom = sqrt(v) + eps; with momentum: b = momentum * b + g / denom,
    p -= lr * b; without: p -= lr * g / denom.  State: ``step``,
    ``square_avg``, ``momentum_buffer`` (momentum > 0), ``grad_avg`` (centered)."""

    def __init__(self, params: Iterable, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False, capturable: bool = False,
                 foreach=None, maximize: bool = False, differentiable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach, maximize=maximize,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def step(self, closure: Optional[Callable] = None):
        loss = self._evaluate(closure)
        with no_grad():
            for group in self.param_groups:
                lr, alpha, eps = float(group["lr"]), float(group["alpha"]), float(group["eps"])
                wd, momentum = float(group["weight_decay"]), float(group["momentum"])
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    param = _inplace_ready(p)
                    grad = self._grad_array(p)
                    state = self.state[p]
                    if len(state) == 0:
                        state["step"] = Tensor._wrap(np.asarray(0.0, np.float32))
                        state["square_avg"] = Tensor._wrap(np.zeros_like(param, order="C"))
                        if momentum > 0:
                            state["momentum_buffer"] = Tensor._wrap(np.zeros_like(param, order="C"))
                        if group["centered"]:
                            state["grad_avg"] = Tensor._wrap(np.zeros_like(param, order="C"))
                    state["step"]._data = np.asarray(state["step"]._data + 1, np.float32)
                    grad_avg, buf = state.get("grad_avg"), state.get("momentum_buffer")
                    K.rmsprop_step(param, grad, _inplace_ready(state["square_avg"]), lr, alpha, eps, wd, momentum,
                                   bool(group["centered"]),
                                   None if grad_avg is None else _inplace_ready(grad_avg),
                                   None if buf is None else _inplace_ready(buf), bool(group["maximize"]))
                    bump_version(p)  # an in-place update, as torch's: graphs that saved p go stale
        return loss
