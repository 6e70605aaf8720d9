"""More of ``torch.optim.lr_scheduler``: CosineAnnealingLR, LinearLR,
OneCycleLR, SequentialLR (torch's formulas; the closed forms torch
documents, which agree with its recursive updates to rounding)."""
from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any, Dict, List, Optional, Sequence, Union

from .lr_scheduler import LRScheduler
from .optimizer import Optimizer

__all__ = ["CosineAnnealingLR", "LinearLR", "OneCycleLR", "SequentialLR", "ReduceLROnPlateau", "MultiStepLR"]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr = base_lr * factor, factor moving linearly from start_factor to
    end_factor over total_iters steps."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        t = min(self.total_iters, self.last_epoch)
        factor = self.start_factor + (self.end_factor - self.start_factor) * t / self.total_iters
        return [base * factor for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy: warm up from max_lr / div_factor to max_lr over
    pct_start of the steps, then anneal to initial_lr / final_div_factor
    (cosine or linear); momentum (or Adam's beta1) cycles inversely."""

    def __init__(self, optimizer: Optimizer, max_lr: Union[float, Sequence[float]], total_steps: Optional[int] = None,
                 epochs: Optional[int] = None, steps_per_epoch: Optional[int] = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True, base_momentum: float = 0.85,
                 max_momentum: float = 0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1) -> None:
        if total_steps is not None:
            if total_steps <= 0 or not isinstance(total_steps, int):
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            if epochs <= 0 or not isinstance(epochs, int):
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if steps_per_epoch <= 0 or not isinstance(steps_per_epoch, int):
                raise ValueError(f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self.anneal_strategy = anneal_strategy
        if three_phase:
            self._schedule_phases = [
                dict(end_step=float(pct_start * self.total_steps) - 1, start="initial_lr", end="max_lr",
                     start_m="max_momentum", end_m="base_momentum"),
                dict(end_step=float(2 * pct_start * self.total_steps) - 2, start="max_lr", end="initial_lr",
                     start_m="base_momentum", end_m="max_momentum"),
                dict(end_step=self.total_steps - 1, start="initial_lr", end="min_lr",
                     start_m="max_momentum", end_m="max_momentum")]
        else:
            self._schedule_phases = [
                dict(end_step=float(pct_start * self.total_steps) - 1, start="initial_lr", end="max_lr",
                     start_m="max_momentum", end_m="base_momentum"),
                dict(end_step=self.total_steps - 1, start="max_lr", end="min_lr",
                     start_m="base_momentum", end_m="max_momentum")]
        groups = optimizer.param_groups
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * len(groups)
        if len(max_lrs) != len(groups):
            raise ValueError(f"expected {len(groups)} values for max_lr, got {len(max_lrs)}")
        if last_epoch == -1:
            for lr, group in zip(max_lrs, groups):
                group["initial_lr"] = lr / div_factor
                group["max_lr"] = lr
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                for group in groups:
                    if self.use_beta1:
                        group["betas"] = (max_momentum, *group["betas"][1:])
                    else:
                        group["momentum"] = max_momentum
                    group["max_momentum"] = max_momentum
                    group["base_momentum"] = base_momentum
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> List[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is "
                             f"{self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            lr = momentum = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step <= end_step or i == len(self._schedule_phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lr = self._anneal(group[phase["start"]], group[phase["end"]], pct)
                    if self.cycle_momentum:
                        momentum = self._anneal(group[phase["start_m"]], group[phase["end_m"]], pct)
                    break
                start_step = phase["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    group["betas"] = (momentum, *group["betas"][1:])
                else:
                    group["momentum"] = momentum
        return lrs


class SequentialLR(LRScheduler):
    """Runs ``schedulers[i]`` between ``milestones[i-1]`` and ``milestones[i]``."""

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1, verbose: Any = "deprecated") -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler, but got no scheduler.")
        for i, s in enumerate(schedulers):
            if s.optimizer is not optimizer:
                raise ValueError(f"{type(self).__name__} expects all schedulers to belong to the same optimizer, "
                                 f"but got scheduler {type(s).__name__} at index {i} has {s.optimizer}, which is "
                                 f"different from {type(optimizer).__name__}.")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be one more than the "
                             f"number of milestone points, but got number of schedulers {len(schedulers)} and the "
                             f"number of milestones to be equal to {len(milestones)}")
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for s in self._schedulers:
            s.last_epoch -= 1
        first = self._schedulers[0]
        first._step_count = 0
        first.step()
        self._last_lr = first.get_last_lr()

    def step(self, epoch: Optional[int] = None) -> None:
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> Dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        state = dict(state_dict)
        inner = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, sd in zip(self._schedulers, inner):
            s.load_state_dict(sd)


class ReduceLROnPlateau(LRScheduler):
    """Multiply each group's lr by ``factor`` once the metric passed to
    ``step(metric)`` has not improved for more than ``patience`` epochs
    (torch's rule: "improved" is better than the best by ``threshold``,
    relative or absolute; then ``cooldown`` epochs without counting; never
    below ``min_lr``, and no change smaller than ``eps``)."""

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: Union[float, Sequence[float]] = 0, eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode} is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold mode {threshold_mode} is unknown!")
        groups = optimizer.param_groups
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(groups):
                raise ValueError(f"expected {len(groups)} min_lrs, got {len(min_lr)}")
            self.min_lrs = [float(v) for v in min_lr]
        else:
            self.min_lrs = [float(min_lr)] * len(groups)
        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.cooldown, self.eps = cooldown, eps
        self.cooldown_counter = 0
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.best = self.mode_worse
        self.num_bad_epochs = 0
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in groups]

    def is_better(self, current: float, best: float) -> bool:
        if self.mode == "min":
            bar = best * (1 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold
            return current < bar
        bar = best * (1 + self.threshold) if self.threshold_mode == "rel" else best + self.threshold
        return current > bar

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def step(self, metrics, epoch: Optional[int] = None) -> None:  # type: ignore[override]
        """One epoch's metric (a number or a one-element tensor)."""
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _reduce_lr(self) -> None:
        for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
            old = float(group["lr"])
            new = max(old * self.factor, floor)
            if old - new > self.eps:
                group["lr"] = new


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each epoch listed in ``milestones``
    (a milestone listed twice multiplies twice, as torch)."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        hits = self.milestones.count(self.last_epoch)
        return [group["lr"] * self.gamma ** hits for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> List[float]:
        passed = bisect_right(self.milestones, self.last_epoch)
        return [base_lr * self.gamma ** passed for base_lr in self.base_lrs]
