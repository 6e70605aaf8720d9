"""Tensor methods: elementwise maths (exp, log, ..., the activations through ops.activation),
clamp and masked fills."""
from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

import numpy as np

from ..autograd import apply_op
from .._fp import quietly
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
    @quietly
    def exp(self):
        out = np.exp(_float_of(self._data))
        return _T._unary(self, out, lambda g: (g * out,), "Exp")

    @quietly
    def log(self):
        x = _float_of(self._data)
        return _T._unary(self, np.log(x), lambda g: (g / x,), "Log")

    @quietly
    def log1p(self):
        x = _float_of(self._data)
        return _T._unary(self, np.log1p(x), lambda g: (g / (1 + x),), "Log1p")

    @quietly
    def sqrt(self):
        out = np.sqrt(_float_of(self._data))
        return _T._unary(self, out, lambda g: (g / (2 * out),), "Sqrt")

    @quietly
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
        x = self._data
        if x.dtype.kind == "f":  # torch: (0 < x) - (x < 0), so sign(nan) = 0 and sign(-0.) = 0.
            out = (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)
        else:
            out = np.sign(x)
        return _T._unary(self, out, _zero_grad, "Sign")

    def floor(self):
        return _T._unary(self, np.floor(self._data), _zero_grad, "Floor")

    def ceil(self):
        return _T._unary(self, np.ceil(self._data), _zero_grad, "Ceil")

    def round(self, decimals: int = 0):
        return _T._unary(self, np.round(self._data, decimals), _zero_grad, "Round")

    @quietly
    def sin(self):
        x = _float_of(self._data)
        return _T._unary(self, np.sin(x), lambda g: (g * np.cos(x),), "Sin")

    @quietly
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
        if isinstance(min, _T.Tensor) or isinstance(max, _T.Tensor):
            return _clamp_by_tensors(self, min, max)
        lo, hi = min, max
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


# ---------------------------------------------------------------- more unary maths
# name: (NumPy function, gradient (g, x, out) -> dL/dx, torch's grad_fn name).
# Integer input is computed in the default float dtype, as torch; inf / nan
# come out quietly (see _fp.py), as torch.
_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
# NumPy has no erf: the C library's (math.erf, double precision), element by element
# (~0.1 us each: fine for a GELU written out in a notebook, not for a hot loop).
_ERF, _ERFC = np.frompyfunc(math.erf, 1, 1), np.frompyfunc(math.erfc, 1, 1)


def _by_element(fn):
    return lambda x: np.asarray(fn(x), dtype=np.float64).astype(x.dtype)


_MATH = {
    "reciprocal": (np.reciprocal, lambda g, x, out: -g * out * out, "Reciprocal"),
    "log2": (np.log2, lambda g, x, out: g / (x * _LN2), "Log2"),
    "log10": (np.log10, lambda g, x, out: g / (x * _LN10), "Log10"),
    "exp2": (np.exp2, lambda g, x, out: g * out * _LN2, "Exp2"),
    "expm1": (np.expm1, lambda g, x, out: g * (out + 1), "Expm1"),
    "tan": (np.tan, lambda g, x, out: g * (1 + out * out), "Tan"),
    "asin": (np.arcsin, lambda g, x, out: g / np.sqrt(1 - x * x), "Asin"),
    "acos": (np.arccos, lambda g, x, out: -g / np.sqrt(1 - x * x), "Acos"),
    "atan": (np.arctan, lambda g, x, out: g / (1 + x * x), "Atan"),
    "sinh": (np.sinh, lambda g, x, out: g * np.cosh(x), "Sinh"),
    "cosh": (np.cosh, lambda g, x, out: g * np.sinh(x), "Cosh"),
    "asinh": (np.arcsinh, lambda g, x, out: g / np.sqrt(x * x + 1), "Asinh"),
    "acosh": (np.arccosh, lambda g, x, out: g / np.sqrt(x * x - 1), "Acosh"),
    "atanh": (np.arctanh, lambda g, x, out: g / (1 - x * x), "Atanh"),
    "erf": (_by_element(_ERF), lambda g, x, out: g * (_TWO_OVER_SQRT_PI * np.exp(-x * x)).astype(x.dtype), "Erf"),
    "erfc": (_by_element(_ERFC), lambda g, x, out: -g * (_TWO_OVER_SQRT_PI * np.exp(-x * x)).astype(x.dtype),
             "Erfc"),
}


def _math_method(name: str, fn, grad, node_name: str):
    def method(self):
        x = _float_of(self._data)
        out = fn(x)
        return _T._unary(self, out, lambda g: (grad(g, x, out),), node_name)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Elementwise {name} (NumPy's {fn.__name__}), with its gradient."
    return quietly(method)


for _name, (_fn, _grad, _node) in _MATH.items():
    setattr(ElementwiseMixin, _name, _math_method(_name, _fn, _grad, _node))
del _name, _fn, _grad, _node

# torch's aliases
for _alias, _name in {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
                      "arccosh": "acosh", "arctanh": "atanh"}.items():
    setattr(ElementwiseMixin, _alias, getattr(ElementwiseMixin, _name))
del _alias, _name


def _trunc(self):
    """Round towards zero; no gradient flows (zero, as torch)."""
    return _T._unary(self, np.trunc(self._data), _zero_grad, "Trunc")


@quietly
def _frac(self):
    """x - trunc(x); its gradient is 1."""
    x = self._data
    return _T._unary(self, x - np.trunc(x), lambda g: (g,), "Frac")


@quietly
def _atan2(self, other):
    """atan2(self, other): the angle of the point (other, self), elementwise, broadcasting;
    gradients other / r^2 and -self / r^2 (r^2 = self^2 + other^2)."""
    o = other if isinstance(other, _T.Tensor) else _T.tensor(other)
    y, x = _float_of(self._data), _float_of(o._data)
    dt = np.result_type(y, x)
    y, x = y.astype(dt, copy=False), x.astype(dt, copy=False)
    out = np.arctan2(y, x)

    def backward(g):
        r2 = x * x + y * y
        return _sum_to(g * x / r2, y.shape), _sum_to(-g * y / r2, x.shape)

    return apply_op(out, (self, o), backward, "Atan2")


ElementwiseMixin.trunc = ElementwiseMixin.fix = _trunc
ElementwiseMixin.frac = _frac
ElementwiseMixin.atan2 = ElementwiseMixin.arctan2 = _atan2
ElementwiseMixin.sgn = ElementwiseMixin.sign  # (real tensors: the same)
ElementwiseMixin.maximum = lambda self, other: _T.maximum(self, other)
ElementwiseMixin.minimum = lambda self, other: _T.minimum(self, other)


@quietly
def _clamp_by_tensors(x_t, lo_t, hi_t):
    """clamp with Tensor bounds (broadcasting, elementwise): min(max(x, lo), hi).
    Gradients as torch's: to x where lo <= x <= hi, to lo where x < lo, to hi where
    x > hi (and where the bounds cross, hi < lo, to hi)."""
    as_t = (lambda b: b if b is None or isinstance(b, _T.Tensor) else _T.tensor(b, dtype=x_t.dtype))
    lo_t, hi_t = as_t(lo_t), as_t(hi_t)
    x = x_t._data
    lo = None if lo_t is None else lo_t._data.astype(x.dtype, copy=False)
    hi = None if hi_t is None else hi_t._data.astype(x.dtype, copy=False)
    raised = x if lo is None else np.maximum(x, lo)
    out = np.asarray(raised if hi is None else np.minimum(raised, hi))
    to_hi = np.zeros(out.shape, bool) if hi is None else np.broadcast_to(raised > hi, out.shape)
    to_lo = np.zeros(out.shape, bool) if lo is None else np.broadcast_to(x < lo, out.shape) & ~to_hi
    to_x = ~(to_lo | to_hi)

    def backward(g):
        return (_sum_to(np.where(to_x, g, 0), x.shape),
                None if lo is None else _sum_to(np.where(to_lo, g, 0), lo.shape),
                None if hi is None else _sum_to(np.where(to_hi, g, 0), hi.shape))

    return apply_op(out, (x_t, lo_t, hi_t), backward, "Clamp")
