"""Tensor methods: elementwise maths (exp, log, ..., the activations through ops.activation),
clamp and masked fills."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

from ..autograd import apply_op
from ._dtypes import bool_
from ._helpers import _data_of, _float_of, _sum_to, _zero_grad

if TYPE_CHECKING:
    from ._core import Tensor

# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


class ElementwiseMixin:
    __slots__ = ()  # Tensor keeps its fixed slots

    # ------------------------------------------------------------ elementwise
    def exp(self):
        out = np.exp(_float_of(self._data))
        return _T._unary(self, out, lambda g: (g * out,), "Exp")

    def log(self):
        x = _float_of(self._data)
        return _T._unary(self, np.log(x), lambda g: (g / x,), "Log")

    def log1p(self):
        x = _float_of(self._data)
        return _T._unary(self, np.log1p(x), lambda g: (g / (1 + x),), "Log1p")

    def sqrt(self):
        out = np.sqrt(_float_of(self._data))
        return _T._unary(self, out, lambda g: (g / (2 * out),), "Sqrt")

    def rsqrt(self):
        out = 1 / np.sqrt(_float_of(self._data))
        return _T._unary(self, out, lambda g: (-0.5 * g * out * out * out,), "Rsqrt")

    def square(self):
        return self * self

    def abs(self):
        x = self._data
        return _T._unary(self, np.abs(x), lambda g: (g * np.sign(x),), "Abs")

    absolute = abs

    def sign(self):
        return _T._unary(self, np.sign(self._data), _zero_grad, "Sign")

    def floor(self):
        return _T._unary(self, np.floor(self._data), _zero_grad, "Floor")

    def ceil(self):
        return _T._unary(self, np.ceil(self._data), _zero_grad, "Ceil")

    def round(self, decimals: int = 0):
        return _T._unary(self, np.round(self._data, decimals), _zero_grad, "Round")

    def sin(self):
        x = _float_of(self._data)
        return _T._unary(self, np.sin(x), lambda g: (g * np.cos(x),), "Sin")

    def cos(self):
        x = _float_of(self._data)
        return _T._unary(self, np.cos(x), lambda g: (-g * np.sin(x),), "Cos")

    def tanh(self):
        return _T._activation(self, "tanh")

    def sigmoid(self):
        return _T._activation(self, "sigmoid")

    def relu(self):
        return _T._activation(self, "relu")

    def relu_(self):
        self._check_inplace("relu_")
        if self._tracked():
            return self._become(self.relu())
        np.maximum(self._data, 0, out=self._writable())
        return self

    def clamp(self, min=None, max=None):
        if min is None and max is None:
            raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
        lo = min.item() if isinstance(min, _T.Tensor) else min
        hi = max.item() if isinstance(max, _T.Tensor) else max
        x = self._data
        out = np.clip(x, lo, hi)
        # torch passes the gradient where lo <= x <= hi (boundaries included)
        keep = np.ones(x.shape, bool)
        if lo is not None:
            keep &= x >= lo
        if hi is not None:
            keep &= x <= hi
        return _T._unary(self, out, lambda g: (g * keep,), "Clamp")

    clip = clamp

    def masked_fill(self, mask, value) -> "Tensor":
        """Where ``mask`` (bool, broadcastable) is True, take ``value``.

        self (...), mask broadcastable with self -> (broadcast shape)."""
        m = mask._data if isinstance(mask, _T.Tensor) else np.asarray(mask)
        if m.dtype != bool_:
            raise TypeError(f"masked_fill: mask must have dtype bool, got {m.dtype} "
                            "(write mask == 0 or mask.bool())")
        if isinstance(value, _T.Tensor):
            if value._data.ndim != 0:
                raise RuntimeError(f"masked_fill: value must be a 0-dimensional tensor, got "
                                   f"{value._data.ndim} dimensions")
            value = value.item()
        x = self._data
        try:
            out = np.where(m, np.asarray(value).astype(x.dtype), x)
        except ValueError:
            raise RuntimeError(f"masked_fill: mask of shape {tuple(m.shape)} does not broadcast "
                               f"to the tensor's shape {tuple(x.shape)}") from None
        shape = x.shape
        return apply_op(out, (self,), lambda g: (_sum_to(np.where(m, 0, g), shape),), "MaskedFill")

    def masked_fill_(self, mask, value) -> "Tensor":
        self._check_inplace("masked_fill_")
        m = mask._data if isinstance(mask, _T.Tensor) else np.asarray(mask)
        if m.dtype != bool_:
            raise TypeError(f"masked_fill_: mask must have dtype bool, got {m.dtype} "
                            "(write mask == 0 or mask.bool())")
        if np.broadcast_shapes(m.shape, self._data.shape) != self._data.shape:
            raise RuntimeError(f"masked_fill_: mask of shape {tuple(m.shape)} does not broadcast "
                               f"to the tensor's shape {tuple(self._data.shape)}")
        if self._tracked():
            return self._become(self.masked_fill(mask, value))
        v = value.item() if isinstance(value, _T.Tensor) else value
        out = self._writable()
        np.copyto(out, np.asarray(v).astype(out.dtype), where=m)
        return self

    def masked_select(self, mask) -> "Tensor":
        m = np.broadcast_to(_data_of(mask), self._data.shape)
        return self[_T._wrap(m)]

    def where(self, condition, other):
        return _T.where(condition, self, other)
