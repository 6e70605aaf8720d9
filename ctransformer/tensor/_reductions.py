"""Tensor methods: reductions (sum, mean, var, max, topk, sort, ...) and softmax along a dim."""
from __future__ import annotations

import sys
import warnings
from typing import Optional

import numpy as np

from .._fp import quiet, quietly
from ..autograd import apply_op
from ._dtypes import _as_dtype, int64
from ._helpers import _axes, _identity_grad, _MinMax, _norm_dim

# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


class ReductionsMixin:
    __slots__ = ()  # Tensor keeps its fixed slots

    # ------------------------------------------------------------ reductions
    @quietly
    def sum(self, dim=None, keepdim: bool = False, dtype=None):
        x = self._data
        axis = _axes(dim, x.ndim, "sum")
        d = _as_dtype(dtype)
        if d is None and x.dtype.kind in "biu":
            d = int64
        out = np.asarray(np.sum(x, axis=axis, keepdims=keepdim, dtype=d))
        shape = x.shape

        def backward(g):
            if not keepdim and axis is not None:
                g = np.expand_dims(g, axis)
            return (np.broadcast_to(g, shape),)

        return apply_op(out, (self,), backward, "Sum")

    @quietly
    def prod(self, dim: Optional[int] = None, keepdim: bool = False, dtype=None):
        """Product of all elements, or along one dim; integers multiply in int64, as torch.
        Gradient: the product of the other elements (exact where some are 0)."""
        x = self._data
        d = _as_dtype(dtype)
        if d is None and x.dtype.kind in "biu":
            d = int64
        if d is not None:
            x = x.astype(d)
        ax = None if dim is None else _norm_dim(dim, x.ndim, "prod")
        out = np.asarray(np.prod(x, axis=ax, keepdims=keepdim and ax is not None))

        def backward(g):
            if ax is None:
                return (_others_product(x.reshape(-1)).reshape(x.shape) * g,)
            gk = g if keepdim else np.expand_dims(g, ax)
            others = np.moveaxis(_others_product(np.moveaxis(x, ax, -1)), -1, ax)
            return (others * gk,)

        return apply_op(out, (self,), backward, "Prod")

    @quietly
    def mean(self, dim=None, keepdim: bool = False, dtype=None):
        x = self._data
        d = _as_dtype(dtype)
        if x.dtype.kind not in "fc" and (d is None or d.kind not in "fc"):
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating "
                               f"point or complex dtype. Got: {x.dtype}")
        if d is not None:
            x = x.astype(d)
        axis = _axes(dim, x.ndim, "mean")
        if _reduces_nothing(x, axis):  # mean of no elements: nan, as torch (np.mean warns "Mean of empty slice")
            out = np.asarray(np.sum(x, axis=axis, keepdims=keepdim) / x.dtype.type(0))
        else:
            out = np.asarray(np.mean(x, axis=axis, keepdims=keepdim))
        n = x.size // out.size if out.size else 0
        shape = x.shape

        def backward(g):
            if not keepdim and axis is not None:
                g = np.expand_dims(g, axis)
            return (np.broadcast_to(g / n if n else g, shape),)

        return apply_op(out, (self,), backward, "Mean")

    def var(self, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *, correction=None):
        """Variance with ``correction`` (default 1: unbiased, as torch);
        ``unbiased=False`` is correction 0."""
        return self._var(dim, unbiased, keepdim, correction, "var")

    def std(self, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *, correction=None):
        return self._var(dim, unbiased, keepdim, correction, "std").sqrt()

    def _var(self, dim, unbiased, keepdim: bool, correction, name: str):
        if isinstance(dim, bool):  # var(unbiased) positional form
            dim, unbiased = None, dim
        c = 1 if correction is None and unbiased is None else (
            correction if correction is not None else int(bool(unbiased)))
        x = self._data
        axis = _axes(dim, x.ndim, "var")
        n = x.size if axis is None else int(np.prod([x.shape[a] for a in axis]))
        if n - c <= 0:  # torch's warning; the answer is then nan (or inf)
            warnings.warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the "
                          "reduction factor (input numel divided by output numel).", UserWarning, stacklevel=3)
        mu = self.mean(dim=axis, keepdim=True)
        d = self - mu
        ss = (d * d).sum(dim=axis, keepdim=keepdim)
        return ss / float(max(n - c, 0))

    def _minmax(self, dim, keepdim, np_arg, np_red, name):
        x = self._data
        if dim is None:
            out = np.asarray(np_red(x))

            def backward(g):
                # torch spreads the gradient evenly over tied extremes
                hit = x == out
                return (np.where(hit, g / np.count_nonzero(hit), 0).astype(x.dtype),)

            return apply_op(out, (self,), backward, name)
        d = _norm_dim(dim, x.ndim, name.lower())
        if x.ndim == 0:
            return _MinMax(apply_op(x.copy(), (self,), _identity_grad, name), _T._wrap(np.asarray(0, int64)))
        return _take_along(self, np.expand_dims(np_arg(x, axis=d), d), d, keepdim, name)

    def max(self, dim=None, keepdim: bool = False):
        if isinstance(dim, _T.Tensor):
            return _T.maximum(self, dim)
        return self._minmax(dim, keepdim, np.argmax, np.max, "Max")

    def min(self, dim=None, keepdim: bool = False):
        if isinstance(dim, _T.Tensor):
            return _T.minimum(self, dim)
        return self._minmax(dim, keepdim, np.argmin, np.min, "Min")

    def amax(self, dim=None, keepdim: bool = False):
        return self.max() if dim is None else self.max(dim, keepdim)[0]

    def amin(self, dim=None, keepdim: bool = False):
        return self.min() if dim is None else self.min(dim, keepdim)[0]

    def argmax(self, dim=None, keepdim: bool = False):
        x = self._data
        if dim is None:
            return _T._wrap(np.asarray(np.argmax(x), dtype=int64))
        d = _norm_dim(dim, x.ndim, "argmax")
        out = np.argmax(x, axis=d) if x.ndim else np.asarray(0)
        return _T._wrap((np.expand_dims(out, d) if keepdim and x.ndim else out).astype(int64))

    def argmin(self, dim=None, keepdim: bool = False):
        x = self._data
        if dim is None:
            return _T._wrap(np.asarray(np.argmin(x), dtype=int64))
        d = _norm_dim(dim, x.ndim, "argmin")
        out = np.argmin(x, axis=d) if x.ndim else np.asarray(0)
        return _T._wrap((np.expand_dims(out, d) if keepdim and x.ndim else out).astype(int64))

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
        """(values, indices) of the k largest (smallest) along ``dim``."""
        x = self._data
        d = _norm_dim(dim, x.ndim, "topk")
        n = x.shape[d] if x.ndim else 1
        if not 0 <= k <= n:
            raise RuntimeError(f"topk: k ({k}) must be in [0, {n}] (the size of dimension {dim})")
        xs = x if x.ndim else x.reshape(1)
        key = -xs if largest and xs.dtype.kind != "b" else (~xs if largest else xs)
        order = np.argsort(key, axis=d, kind="stable")
        idx = np.take(order, np.arange(k), axis=d)
        vals = np.take_along_axis(xs, idx, axis=d)
        if not x.ndim:
            vals, idx = vals.reshape(()), idx.reshape(())

        def backward(g):
            grad = np.zeros_like(xs)
            np.put_along_axis(grad, idx.reshape(-1) if not x.ndim else idx, g.reshape(idx.shape) if x.ndim
                              else g.reshape(1), axis=d)
            return (grad.reshape(x.shape),)

        return _MinMax(apply_op(vals, (self,), backward, "Topk"), _T._wrap(idx.astype(int64)))

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        x = self._data
        d = _norm_dim(dim, x.ndim, "sort")
        return self.topk(x.shape[d] if x.ndim else 1, d, largest=descending)

    def argsort(self, dim: int = -1, descending: bool = False):
        return self.sort(dim, descending)[1]

    @quietly
    def cumsum(self, dim: int, dtype=None):
        x = self._data
        d = _norm_dim(dim, x.ndim, "cumsum")
        out = np.cumsum(x, axis=d, dtype=_as_dtype(dtype) or (int64 if x.dtype.kind in "biu" else None))
        return apply_op(out, (self,), lambda g: (np.flip(np.cumsum(np.flip(g, d), axis=d), d),), "Cumsum")

    def softmax(self, dim: int = -1, dtype=None):
        return _T._softmax(self._softmax_input(dtype, "softmax"), dim, log=False)

    def log_softmax(self, dim: int = -1, dtype=None):
        return _T._softmax(self._softmax_input(dtype, "log_softmax"), dim, log=True)

    def _softmax_input(self, dtype, fn: str):
        """self in ``dtype``; an integer tensor without one is refused, as torch
        refuses it (NotImplementedError: no integer softmax kernel)."""
        if dtype is not None:
            return self.type(dtype)
        if self._data.dtype.kind not in "fc":
            raise NotImplementedError(f"{fn}: not implemented for {self._data.dtype} tensors; "
                                      f"pass dtype=float32 (or call .float() first)")
        return self

    def norm(self, p=2, dim=None, keepdim=False):
        """The p-norm (sum |x|^p)^(1/p), inf: max |x|, 0: the count of nonzeros, over dim
        (all elements when None).  Its gradient at a zero vector is 0, as torch's (the chain rule through
        sqrt(sum x^2) gave inf * 0 = NaN there: a zero-initialised bias in a norm penalty)."""
        if p == "fro":
            p = 2
        if p == float("inf"):
            return self.abs().amax(dim, keepdim)
        if p == 0:  # the count of nonzeros; its gradient is 0
            x = self._data
            count = np.asarray((x != 0).sum(axis=_axes(dim, x.ndim), keepdims=keepdim), dtype=x.dtype)
            return _T._unary(self, count, lambda g: (np.zeros_like(x),), "NormZero")
        with quiet():
            powered = self * self if p == 2 else self.abs() ** p
            return _norm_root(powered.sum(dim=dim, keepdim=keepdim), float(p))


def _norm_root(s, p: float):
    """s ** (1 / p) for a p-norm, s = sum |x|^p >= 0; gradient s^(1/p) / (p s) g,
    and 0 where s^(1/p) is 0 (torch's subgradient of a norm at the zero vector)."""
    data = s._data
    out = np.sqrt(data) if p == 2 else data ** (1.0 / p)

    def backward(g):  # (run_backward ignores floating-point errors: g * out / 0 where s = 0)
        return (np.where(out > 0, g * out / (p * data), 0).astype(out.dtype, copy=False),)
    return _T._unary(s, out, backward, "NormRoot")


def _reduces_nothing(x: np.ndarray, axis) -> bool:
    """Does reducing x over axis (None: all) take the mean of no elements?"""
    if axis is None:
        return x.size == 0
    return any(x.shape[a] == 0 for a in axis)


def _others_product(x: np.ndarray) -> np.ndarray:
    """For each element along the last axis, the product of the others
    (exclusive cumulative products from both ends: no division, so exact at 0)."""
    ones = np.ones(x.shape[:-1] + (1,), x.dtype)
    left = np.concatenate([ones, np.cumprod(x[..., :-1], axis=-1)], axis=-1)
    right = np.concatenate([ones, np.cumprod(x[..., :0:-1], axis=-1)], axis=-1)[..., ::-1]
    return left * right


def _take_along(x_t, idx: np.ndarray, d: int, keepdim: bool, name: str) -> _MinMax:
    """(values, indices) of x_t at the positions ``idx`` (size 1 along dim d), as
    max(dim) / median(dim) return them; the gradient goes back to those positions."""
    x = x_t._data
    vals = np.take_along_axis(x, idx, axis=d)

    def backward(g):
        grad = np.zeros_like(x)
        np.put_along_axis(grad, idx, g if keepdim else np.expand_dims(g, d), axis=d)
        return (grad,)

    values = apply_op(vals if keepdim else np.squeeze(vals, d), (x_t,), backward, name)
    return _MinMax(values, _T._wrap((idx if keepdim else np.squeeze(idx, d)).astype(int64)))
