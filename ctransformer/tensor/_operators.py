"""Tensor methods: arithmetic (the operators themselves are the fast functions of ``_arith``),
in-place arithmetic, comparisons and logic."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

from ..autograd import apply_op
from .._fp import quietly
from ._dtypes import bool_, int64
from ._helpers import _ADD, _DIV, _MUL, _POW, _SUB, _UFUNCS, _axes, _data_of, _deprecated_alpha_first, _ndim_of, _neg_grad, _sum_to

if TYPE_CHECKING:
    from ._core import Tensor

# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


def _refuse_integer_zero_division(dividend, divisor) -> None:
    """Integer ``//`` and ``%`` by zero: torch raises RuntimeError('ZeroDivisionError')
    (NumPy warns and answers 0).  Floating point gives inf / nan, quietly, as torch."""
    if np.result_type(dividend, divisor).kind in "iu" and not np.all(divisor):
        raise RuntimeError("ZeroDivisionError")


def _remainder(x, other, remainder_fn, round_fn, name: str):
    """x - round(x / other) * other by ``remainder_fn`` (np.mod or np.fmod);
    d/dx = 1, d/dother = -round(x / other) (``round_fn``: floor or trunc)."""
    ot = other if isinstance(other, _T.Tensor) else None
    a = x._data
    o = ot._data if ot is not None else other
    _refuse_integer_zero_division(a, o)
    out = np.asarray(remainder_fn(a, o))
    if out.dtype.kind != "f":
        return _T._wrap(out)
    sa, so = a.shape, np.shape(o)

    def backward(g):
        go = None
        if ot is not None and ot.requires_grad:
            go = _sum_to(-g * round_fn(a / o), so)
        return _sum_to(g, sa), go

    return apply_op(out, (x, ot), backward, name)


class OperatorsMixin:
    __slots__ = ()  # Tensor keeps its fixed slots

    # ------------------------------------------------------------ arithmetic
    # __add__, __radd__, __sub__, ..., __rpow__ and their aliases (mul, div,
    # pow, ...) are the fast functions made by _make_arith, set below the class.
    def add(self, other, alpha=1):
        other, alpha = _deprecated_alpha_first(other, alpha, "add")
        return _T._arith(self, other if alpha == 1 else other * alpha, _ADD)

    def sub(self, other, alpha=1):
        other, alpha = _deprecated_alpha_first(other, alpha, "sub")
        return _T._arith(self, other if alpha == 1 else other * alpha, _SUB)

    subtract = sub

    @quietly
    def __floordiv__(self, other):
        o = other._data if isinstance(other, _T.Tensor) else other
        _refuse_integer_zero_division(self._data, o)
        return _T._wrap(np.asarray(np.floor_divide(self._data, o)))

    @quietly
    def __rfloordiv__(self, other):
        _refuse_integer_zero_division(other, self._data)
        return _T._wrap(np.asarray(np.floor_divide(other, self._data)))

    @quietly
    def __mod__(self, other):
        """Python's (and torch's) remainder: the sign of the divisor.  Gradients
        as torch: d/dself = 1, d/dother = -floor(self / other)."""
        return _remainder(self, other, np.mod, np.floor, "Remainder")

    remainder = __mod__

    @quietly
    def fmod(self, other):
        """C's remainder (math.fmod): the sign of the dividend.  Gradients as
        torch: d/dself = 1, d/dother = -trunc(self / other)."""
        return _remainder(self, other, np.fmod, np.trunc, "Fmod")

    def __neg__(self):
        if self._data.dtype == bool_:
            raise RuntimeError("neg: negation, the `-` operator, on a bool tensor is not supported")
        return _T._unary(self, np.negative(self._data), _neg_grad, "Neg")

    neg = negative = __neg__

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __matmul__(self, other):
        return _T.matmul(self, other)

    def __rmatmul__(self, other):
        return _T.matmul(other, self)

    matmul = __matmul__

    def mm(self, other):
        if self._data.ndim != 2 or _ndim_of(other) != 2:
            raise RuntimeError(f"mm: expected 2-D tensors, got {self._data.ndim}-D and {_ndim_of(other)}-D")
        return _T.matmul(self, other)

    def bmm(self, other):
        return _T.bmm(self, other)

    # in-place arithmetic: autograd-aware
    @quietly
    def _inplace_arith(self, other, code, name):
        self._check_inplace(name)
        if self._tracked(other):
            res = _T._arith(self, other, code)
            if res._data.dtype != self._data.dtype:
                if res._data.dtype.kind == "f" and self._data.dtype.kind != "f":
                    raise RuntimeError(f"{name}: result type {res._data.dtype} can't be cast to the desired "
                                       f"output type {self._data.dtype}")
                res = res.type(self._data.dtype)
            return self._become(res)
        o = other._data if isinstance(other, _T.Tensor) else other
        out = self._writable()
        if code == _DIV and out.dtype.kind != "f":
            raise RuntimeError(f"{name}: result type Float can't be cast to the desired output type {out.dtype}")
        try:
            _UFUNCS[code](out, o, out=out, casting="same_kind")
        except TypeError:
            raise RuntimeError(f"{name}: result type {np.result_type(out, o)} can't be cast to the desired "
                               f"output type {out.dtype}") from None
        return self

    def __iadd__(self, other):
        return self._inplace_arith(other, _ADD, "add_")

    def __isub__(self, other):
        return self._inplace_arith(other, _SUB, "sub_")

    def __imul__(self, other):
        return self._inplace_arith(other, _MUL, "mul_")

    def __itruediv__(self, other):
        return self._inplace_arith(other, _DIV, "div_")

    def add_(self, other, alpha=1):
        other, alpha = _deprecated_alpha_first(other, alpha, "add_")
        return self._inplace_arith(other if alpha == 1 else other * alpha, _ADD, "add_")

    def sub_(self, other, alpha=1):
        other, alpha = _deprecated_alpha_first(other, alpha, "sub_")
        return self._inplace_arith(other if alpha == 1 else other * alpha, _SUB, "sub_")

    def mul_(self, other):
        return self._inplace_arith(other, _MUL, "mul_")

    def div_(self, other):
        return self._inplace_arith(other, _DIV, "div_")

    def pow_(self, other):
        return self._inplace_arith(other, _POW, "pow_")

    def clamp_(self, min=None, max=None):
        self._check_inplace("clamp_")
        if self._tracked():
            return self._become(self.clamp(min, max))
        np.clip(self._data, min, max, out=self._writable())
        return self

    clip_ = clamp_

    # comparisons and logic: no gradient
    def _compare(self, other, fn):
        o = other._data if isinstance(other, _T.Tensor) else other
        return _T._wrap(np.asarray(fn(self._data, o)))

    def __eq__(self, other):
        return self._compare(other, np.equal)

    def __ne__(self, other):
        return self._compare(other, np.not_equal)

    def __lt__(self, other):
        return self._compare(other, np.less)

    def __le__(self, other):
        return self._compare(other, np.less_equal)

    def __gt__(self, other):
        return self._compare(other, np.greater)

    def __ge__(self, other):
        return self._compare(other, np.greater_equal)

    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__
    greater, less, greater_equal, less_equal, not_equal = gt, lt, ge, le, ne

    def _logic(self, other, logical, bitwise):
        o = other._data if isinstance(other, _T.Tensor) else other
        a = self._data
        both_bool = a.dtype == bool_ and (isinstance(o, bool) or getattr(o, "dtype", None) == bool_)
        if a.dtype.kind == "f" or np.asarray(o).dtype.kind == "f":
            raise TypeError(f"{bitwise.__name__}: not implemented for floating point tensors")
        return _T._wrap(np.asarray((logical if both_bool else bitwise)(a, o)))

    def __and__(self, other):
        return self._logic(other, np.logical_and, np.bitwise_and)

    def __or__(self, other):
        return self._logic(other, np.logical_or, np.bitwise_or)

    def __xor__(self, other):
        return self._logic(other, np.logical_xor, np.bitwise_xor)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    bitwise_and, bitwise_or, bitwise_xor = __and__, __or__, __xor__

    def __invert__(self):
        a = self._data
        if a.dtype.kind == "f":
            raise TypeError("bitwise_not: not implemented for floating point tensors")
        return _T._wrap(np.logical_not(a) if a.dtype == bool_ else np.invert(a))

    bitwise_not = __invert__

    def logical_not(self):
        return _T._wrap(np.logical_not(self._data))

    def logical_and(self, other):
        return _T._wrap(np.logical_and(self._data, _data_of(other)))

    def logical_or(self, other):
        return _T._wrap(np.logical_or(self._data, _data_of(other)))

    def equal(self, other) -> bool:
        return self.shape == other.shape and bool(np.array_equal(self._data, other._data))

    def allclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False) -> bool:
        return bool(np.allclose(self._data, _data_of(other), rtol=rtol, atol=atol, equal_nan=equal_nan))

    def isclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False) -> "Tensor":
        return _T._wrap(np.isclose(self._data, _data_of(other), rtol=rtol, atol=atol, equal_nan=equal_nan))

    def any(self, dim=None, keepdim=False):
        return _T._wrap(np.asarray(np.any(self._data, axis=_axes(dim, self._data.ndim), keepdims=keepdim)))

    def all(self, dim=None, keepdim=False):
        return _T._wrap(np.asarray(np.all(self._data, axis=_axes(dim, self._data.ndim), keepdims=keepdim)))

    def isnan(self):
        return _T._wrap(np.isnan(self._data))

    def isinf(self):
        return _T._wrap(np.isinf(self._data))

    def isfinite(self):
        return _T._wrap(np.isfinite(self._data))

    def nonzero(self, as_tuple: bool = False):
        idx = np.nonzero(self._data)
        if as_tuple:
            return tuple(_T._wrap(i.astype(int64)) for i in idx)
        return _T._wrap(np.stack(idx, axis=-1).astype(int64) if idx else np.zeros((0, 0), int64))
