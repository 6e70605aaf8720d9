"""Learning-rate schedulers: LambdaLR, StepLR, ExponentialLR (torch's
semantics) and NoamLR, the Transformer paper's warmup / inverse-sqrt rule.

Call ``scheduler.step()`` after ``optimizer.step()``; construction already
performs step 0 (sets each group's lr for the first optimizer step).
"""
from __future__ import annotations

import types
from typing import Any, Callable, Dict, List, Sequence, Union

from .optimizer import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "ExponentialLR", "NoamLR"]


class LRScheduler:
    """Base class: subclasses define ``get_lr()`` from ``self.last_epoch``."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                                   "scheduler with last_epoch >= 0")
        self.base_lrs: List[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        self.step()
        self._is_initial = False

    def get_lr(self) -> List[float]:
        raise NotImplementedError

    def get_last_lr(self) -> List[float]:
        """The learning rates set by the latest ``step()``, one per group."""
        return self._last_lr

    def step(self, epoch: Union[int, None] = None) -> None:
        """Advance one epoch (or jump to ``epoch``) and set each group's lr."""
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        values = self.get_lr() if epoch is None else self._closed_form_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> List[float]:
        return self.get_lr()

    def state_dict(self) -> Dict[str, Any]:
        """Every attribute except the optimizer."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


_LRScheduler = LRScheduler


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch) (one function, or one per group)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Union[Callable[[int], float], Sequence[Callable]],
                 last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups)
        else:
            if len(lr_lambda) != len(optimizer.param_groups):
                raise ValueError(f"Expected {len(optimizer.param_groups)} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        return [base_lr * lmbda(self.last_epoch) for lmbda, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> Dict[str, Any]:
        """As torch: plain functions are stored as None, callable objects by their __dict__."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas", [])
        self.__dict__.update(state)
        for idx, fn_state in enumerate(lambdas):
            if fn_state is not None:
                self.lr_lambdas[idx].__dict__.update(fn_state)


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [group["lr"] for group in self.optimizer.param_groups]
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> List[float]:
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size) for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        if self._is_initial:
            return [group["lr"] for group in self.optimizer.param_groups]
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> List[float]:
        return [base_lr * self.gamma ** self.last_epoch for base_lr in self.base_lrs]


class NoamLR(LRScheduler):
    """"Attention Is All You Need" schedule, for every group:

        lr(s) = factor * d_model^-0.5 * min(s^-0.5, s * warmup_steps^-1.5),  s = last_epoch + 1

    i.e. linear warmup for ``warmup_steps`` optimizer steps, then decay as
    1/sqrt(s).  s counts from 1 at construction, so the first optimizer step
    uses lr(1); call ``step()`` after each ``optimizer.step()``.  The groups'
    own lr values are replaced (not scaled)."""

    def __init__(self, optimizer: Optimizer, d_model: int, warmup_steps: int, factor: float = 1.0,
                 last_epoch: int = -1) -> None:
        if d_model <= 0:
            raise ValueError(f"NoamLR: d_model must be positive, got {d_model}")
        if warmup_steps <= 0:
            raise ValueError(f"NoamLR: warmup_steps must be positive, got {warmup_steps}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.factor = factor
        super().__init__(optimizer, last_epoch)

    def rate(self, step: int) -> float:
        """The learning rate for optimizer step ``step`` (1-based)."""
        s = max(int(step), 1)
        return self.factor * self.d_model ** -0.5 * min(s ** -0.5, s * self.warmup_steps ** -1.5)

    def get_lr(self) -> List[float]:
        lr = self.rate(self.last_epoch + 1)
        return [lr for _ in self.optimizer.param_groups]

from .lr_scheduler_extra import (CosineAnnealingLR, LinearLR, MultiStepLR, OneCycleLR,  # noqa: E402,F401
                                 ReduceLROnPlateau, SequentialLR)
__all__ += ["CosineAnnealingLR", "LinearLR", "OneCycleLR", "SequentialLR", "ReduceLROnPlateau", "MultiStepLR"]
