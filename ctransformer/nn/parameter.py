"""nn.Parameter: a Tensor that a Module registers as a learnable weight."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..tensor import Tensor, get_default_dtype


def _param_array(data) -> np.ndarray:
    """The storage a Parameter uses: ``data``'s own array when it is already
    C-contiguous and writeable (so Parameter(t) shares memory, as torch), a
    C-contiguous copy otherwise (optimizer kernels update it in place)."""
    if data is None:
        return np.zeros((0,), get_default_dtype())
    arr = data._data if isinstance(data, Tensor) else np.asarray(data)
    if not (arr.flags.c_contiguous and arr.flags.writeable):
        arr = np.array(arr, order="C", copy=True)
    return arr


class Parameter(Tensor):
    """A learnable Tensor (requires_grad=True by default) that, assigned as a
    Module attribute, appears in ``module.parameters()``.

    ``Parameter(data)`` shares ``data``'s storage when it is C-contiguous
    and writeable (copies otherwise)."""

    def __new__(cls, data: Optional[Tensor] = None, requires_grad: bool = True) -> "Parameter":
        t = Tensor.__new__(cls)
        t._data = _param_array(data)
        t._requires_grad = False
        t.grad = None
        t._node = None
        t._idx = 0
        t._version = None
        t._retain = False
        if requires_grad:
            t.requires_grad_(True)
        return t

    def __init__(self, data: Optional[Tensor] = None, requires_grad: bool = True) -> None:
        pass  # everything happens in __new__ (Tensor.__init__ would copy)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __deepcopy__(self, memo) -> "Parameter":
        if id(self) in memo:
            return memo[id(self)]
        p = Parameter(Tensor._wrap(self._data.copy()), self.requires_grad)
        if self.grad is not None:
            p.grad = Tensor._wrap(self.grad._data.copy())
        memo[id(self)] = p
        return p

    def __reduce_ex__(self, protocol):
        return (Parameter, (Tensor._wrap(self._data), self.requires_grad))
