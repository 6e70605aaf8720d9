"""Optimizer base class: param_groups with per-group options, per-parameter
state, and torch's state_dict layout::

    {"state": {index: {"exp_avg": Tensor, ...}},
     "param_groups": [{"lr": ..., ..., "params": [index, ...]}]}

Indices count parameters across groups in order.  A step updates the
parameters' arrays in place: SGD with one kernel call per parameter, Adam
with one call per parameter group (kernels.adam_multi_step).
"""
from __future__ import annotations

from collections import defaultdict
from copy import deepcopy
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np

from ..autograd import enable_grad
from ..tensor import Tensor

__all__ = ["Optimizer", "required"]


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


def _inplace_ready(t: Tensor) -> np.ndarray:
    """t's array, made C-contiguous and writeable (kernels update it in place)."""
    arr = t._data
    if not (arr.flags.c_contiguous and arr.flags.writeable):
        t._data = arr = np.array(arr, order="C", copy=True)
    return arr


class Optimizer:
    """Base class: subclasses define ``step()`` over ``self.param_groups``."""

    def __init__(self, params: Iterable, defaults: Dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: Dict[Any, Dict[str, Any]] = defaultdict(dict)
        self.param_groups: List[Dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {type(params).__name__}")
        groups = list(params)
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def __getstate__(self) -> dict:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        s = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}"
            for key in sorted(group):
                if key != "params":
                    s += f"\n    {key}: {group[key]}"
        return s + "\n)"

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Add a group ``{"params": [...], option: value, ...}``; missing
        options take the optimizer's defaults."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the "
                            "ordering of tensors in sets will change between runs. Please use a list instead.")
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if p._data.dtype.kind != "f":
                raise TypeError(f"optimizer can only optimize floating point Tensors, got dtype {p._data.dtype}")
            _inplace_ready(p)
        group = dict(param_group)
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            group.setdefault(name, default)
        existing = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in existing for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of every parameter (to None, or zeros in place)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = Tensor._wrap(np.zeros_like(p.grad._data, order="C"))

    def _evaluate(self, closure: Optional[Callable]):
        if closure is None:
            return None
        with enable_grad():
            return closure()

    @staticmethod
    def _grad_array(p: Tensor) -> np.ndarray:
        """p.grad's array in p's dtype and C order (the kernels read it)."""
        g = p.grad._data
        if g.dtype != p._data.dtype or not g.flags.c_contiguous:
            g = np.ascontiguousarray(g, dtype=p._data.dtype)
        if g.shape != p._data.shape:
            raise RuntimeError(f"{p.__class__.__name__} gradient has shape {tuple(g.shape)}, "
                               f"expected {tuple(p._data.shape)}")
        return g

    def step(self, closure: Optional[Callable] = None):
        raise NotImplementedError

    # ------------------------------------------------------------ state dict
    def state_dict(self) -> Dict[str, Any]:
        """torch's layout; state tensors are the live ones (save or deepcopy to keep)."""
        index: Dict[int, int] = {}
        groups = []
        start = 0
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start):
                index.setdefault(id(p), i)
            packed["params"] = [index[id(p)] for p in group["params"]]
            start += len(packed["params"])
            groups.append(packed)
        state = {index[id(p)]: v for p, v in self.state.items() if isinstance(p, Tensor) and id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore group options and per-parameter state (copied, cast to
        each parameter's dtype except ``step``)."""
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise ValueError("optimizer state_dict must be a dict with 'state' and 'param_groups' entries")
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = {}
        for g, s in zip(groups, saved_groups):
            for p, k in zip(g["params"], s["params"]):
                id_map[k] = p
        state: Dict[Any, Dict[str, Any]] = defaultdict(dict)
        for k, v in state_dict["state"].items():
            key = int(k) if isinstance(k, str) and k.isdigit() else k
            if key in id_map:
                param = id_map[key]
                state[param] = {name: _cast_state(param, name, value) for name, value in v.items()}
            else:
                state[key] = v
        for g, s in zip(groups, saved_groups):
            s["params"] = g["params"]
        self.state = state
        self.param_groups = saved_groups


def _cast_state(param: Tensor, name: str, value: Any) -> Any:
    """A private copy of one state entry: arrays in the parameter's dtype
    (``step`` keeps its own), C-contiguous so kernels can update them."""
    if isinstance(value, (Tensor, np.ndarray)):
        arr = value._data if isinstance(value, Tensor) else value
        dtype = arr.dtype if name == "step" or arr.dtype.kind != "f" else param._data.dtype
        if name != "step" and arr.shape != param._data.shape:
            raise ValueError(f"optimizer state {name!r} has shape {tuple(arr.shape)}, but its parameter has "
                             f"shape {tuple(param._data.shape)}")
        return Tensor._wrap(np.array(arr, dtype=dtype, order="C", copy=True))
    return deepcopy(value)
