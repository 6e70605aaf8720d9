"""Adam and AdamW (torch's algorithm, bias-corrected, optional AMSGrad)."""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Tuple

import numpy as np

from .. import kernels as K
from ..autograd import bump_version, no_grad
from ..tensor import Tensor
from .optimizer import Optimizer, _inplace_ready

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    weight_decay adds wd * p to g (Adam) or multiplies p by (1 - lr wd)
    first (``decoupled_weight_decay=True``, AdamW).  One ``adam_multi_step``
    kernel call per parameter group (torch's fused Adam).  State: step (float32 0-d), exp_avg, exp_avg_sq
    (and max_exp_avg_sq with amsgrad)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False, fused=None,
                 decoupled_weight_decay: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable, differentiable=differentiable,
                        fused=fused, decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _state_for(self, p: Tensor, amsgrad: bool) -> dict:
        state = self.state[p]
        if len(state) == 0:
            state["step"] = Tensor._wrap(np.asarray(0.0, np.float32))
            state["exp_avg"] = Tensor._wrap(np.zeros_like(p._data, order="C"))
            state["exp_avg_sq"] = Tensor._wrap(np.zeros_like(p._data, order="C"))
            if amsgrad:
                state["max_exp_avg_sq"] = Tensor._wrap(np.zeros_like(p._data, order="C"))
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = Tensor._wrap(np.zeros_like(p._data, order="C"))
        return state

    def step(self, closure: Optional[Callable] = None):
        loss = self._evaluate(closure)
        with no_grad():
            for group in self.param_groups:
                live = [p for p in group["params"] if p.grad is not None]
                if live:
                    self._group_step(group, live)
        return loss

    def _group_step(self, group: dict, live: list) -> None:
        """One adam_multi_step call for the parameters of `group` that have a
        gradient (torch's fused Adam): every entry is checked before any
        parameter moves, and the step counters advance only after."""
        beta1, beta2 = group["betas"]
        amsgrad = bool(group["amsgrad"])
        states = [self._state_for(p, amsgrad) for p in live]
        steps = [int(state["step"]._data) + 1 for state in states]
        K.adam_multi_step([_inplace_ready(p) for p in live], [self._grad_array(p) for p in live],
                          [_inplace_ready(state["exp_avg"]) for state in states],
                          [_inplace_ready(state["exp_avg_sq"]) for state in states], steps,
                          float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                          float(group["weight_decay"]), bool(group["decoupled_weight_decay"]), amsgrad,
                          [_inplace_ready(state["max_exp_avg_sq"]) for state in states] if amsgrad else None,
                          bool(group["maximize"]))
        for p, state, step in zip(live, states, steps):
            step_t = state["step"]
            step_t._data = np.asarray(step, step_t._data.dtype)
            bump_version(p)  # an in-place update, as torch's: graphs that saved p go stale


class AdamW(Adam):
    """Adam with decoupled weight decay (default weight_decay=0.01)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach=None, capturable: bool = False, differentiable: bool = False, fused=None) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         foreach=foreach, maximize=maximize, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True)
