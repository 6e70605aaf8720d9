"""Still more torch functions scripts use: order statistics (median,
kthvalue), cumprod, counting and binning (count_nonzero, bincount, histc,
isin, bucketize, searchsorted), std_mean / var_mean, fused arithmetic (lerp,
addcmul, addcdiv, addmm, logaddexp), cdist, ``linalg.vector_norm`` /
``linalg.norm``, ``logspace``, ``bernoulli`` and the dtype queries
(promote_types, result_type, can_cast).  Differentiable ones are composed
from differentiable ops or record their own backward, with torch's
gradients.

``attach()`` installs the methods on :class:`Tensor`; ``ctransformer``
exports the functions.
"""
from __future__ import annotations

import types
from typing import Optional

import numpy as np

from ._fp import quietly
from .autograd import apply_op
from .tensor import Tensor, _as_dtype, _MinMax, _norm_dim, int64, tensor, where
from .tensor import _dtypes
from .tensor._reductions import _take_along
from .tensor._creation import _gen
from .tensor._helpers import _promote

__all__ = ["cumprod", "median", "kthvalue", "count_nonzero", "bincount", "histc", "isin", "bucketize",
           "searchsorted", "std_mean", "var_mean", "lerp", "addcmul", "addcdiv", "addmm", "logaddexp", "cdist",
           "logspace", "bernoulli", "promote_types", "result_type", "can_cast", "linalg"]


def _t(x, fn: str, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' must be Tensor, not {type(x).__name__}")
    return x


# ---------------------------------------------------------------- order statistics
def _select_kth(x_t: Tensor, k: int, dim, keepdim: bool, name: str, nan_wins: bool = False):
    """The k-th smallest (0-based) along dim (None: of all elements), with its index; with
    ``nan_wins`` a NaN in the row is the answer (torch's median).  The gradient goes to the
    element picked (NumPy's sort puts NaN last, so rows without one are unaffected)."""
    x = x_t._data
    if dim is None:
        flat = x.reshape(-1)
        if flat.size == 0:
            raise IndexError(f"{name}(): cannot compute on an empty tensor")
        nan = np.isnan(flat)
        i = int(np.argmax(nan)) if nan_wins and nan.any() else int(np.argsort(flat, kind="stable")[k])
        return _take_along(x_t.reshape(-1), np.array([i]), 0, False, name).values  # (a Tensor, as torch)
    if x.ndim == 0:
        return _MinMax(apply_op(x.copy(), (x_t,), lambda g: (g,), name), Tensor._wrap(np.asarray(0, int64)))
    d = _norm_dim(dim, x.ndim, name)
    if not 0 <= k < x.shape[d]:
        raise RuntimeError(f"{name}(): selected number k out of range for dimension {d}")
    idx = np.take(np.argsort(x, axis=d, kind="stable"), [k], axis=d)
    if nan_wins:
        nan = np.isnan(x)
        idx = np.where(nan.any(axis=d, keepdims=True), np.expand_dims(np.argmax(nan, axis=d), d), idx)
    return _take_along(x_t, idx, d, keepdim, name)


def median(input: Tensor, dim: Optional[int] = None, keepdim: bool = False):
    """The lower median (of all elements, or (values, indices) along ``dim``), as torch:
    the ((n - 1) // 2)-th smallest; a NaN in the row is the answer."""
    x = _t(input, "median")
    n = x.numel() if dim is None else (x.shape[_norm_dim(dim, x.dim(), "median")] if x.dim() else 1)
    return _select_kth(x, (n - 1) // 2, dim, keepdim, "median", nan_wins=True)


def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False):
    """(values, indices) of the k-th smallest (1-based) along ``dim``."""
    x = _t(input, "kthvalue")
    return _select_kth(x, int(k) - 1, dim, keepdim, "kthvalue")


@quietly
def cumprod(input: Tensor, dim: int, dtype=None) -> Tensor:
    """Running products along ``dim``; gradient exact where a factor is 0."""
    x_t = _t(input, "cumprod")
    x = x_t._data
    d = _norm_dim(dim, x.ndim, "cumprod") if x.ndim else 0
    want = _as_dtype(dtype) or (int64 if x.dtype.kind in "biu" else None)
    if want is not None:
        x = x.astype(want)
    if x.ndim == 0:
        return apply_op(x.copy(), (x_t,), lambda g: (g,), "Cumprod")
    out = np.cumprod(x, axis=d)

    def backward(g):
        xm, gm = np.moveaxis(x, d, -1), np.moveaxis(g * 1.0, d, -1).astype(x.dtype)
        outm = np.moveaxis(out, d, -1)
        n = xm.shape[-1]
        # d out_j / d x_i = prod_{k <= j, k != i} x_k for j >= i: the prefix before i times the
        # running product after it (no division, so exact at zeros)
        grad = np.zeros_like(xm)
        prefix = np.ones(xm.shape[:-1], xm.dtype)
        for i in range(n):
            after = np.cumprod(xm[..., i + 1:], axis=-1)
            grad[..., i] = prefix * (gm[..., i] + (gm[..., i + 1:] * after).sum(axis=-1))
            prefix = outm[..., i]
        return (np.moveaxis(grad, -1, d),)

    return apply_op(out, (x_t,), backward, "Cumprod")


# ---------------------------------------------------------------- counting and binning
def count_nonzero(input: Tensor, dim=None) -> Tensor:
    x = _t(input, "count_nonzero")._data
    axis = None if dim is None else tuple(_norm_dim(d, x.ndim, "count_nonzero") for d in np.atleast_1d(dim))
    return Tensor._wrap(np.asarray(np.count_nonzero(x, axis=axis), int64))


def bincount(input: Tensor, weights: Optional[Tensor] = None, minlength: int = 0) -> Tensor:
    """Counts of each non-negative int in a 1-D tensor (weighted: sums of weights, float64 as torch)."""
    x = _t(input, "bincount")._data
    if x.ndim != 1 or x.dtype.kind not in "iu":
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if x.size and x.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else weights._data
    out = np.bincount(x, w, minlength)
    if w is None:
        return Tensor._wrap(out.astype(int64))
    return Tensor._wrap(out.astype(w.dtype if w.dtype.kind == "f" else np.float64))


def histc(input: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:
    """A histogram of ``bins`` equal bins over [min, max] (the data's range when
    both are 0); elements outside are ignored; the result has input's dtype."""
    x = _t(input, "histc")._data
    lo, hi = float(min), float(max)
    if lo == hi and x.size:
        lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError(f"histc: max must be larger than min, got min {min} and max {max}")
    counts, _ = np.histogram(x[(x >= lo) & (x <= hi)], bins=int(bins), range=(lo, hi))
    return Tensor._wrap(counts.astype(x.dtype))


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False) -> Tensor:
    e = elements._data if isinstance(elements, Tensor) else np.asarray(elements)
    t = test_elements._data if isinstance(test_elements, Tensor) else np.asarray(test_elements)
    return Tensor._wrap(np.asarray(np.isin(e, t, invert=invert)))


def searchsorted(sorted_sequence: Tensor, input, *, out_int32: bool = False, right: bool = False,
                 side: Optional[str] = None, sorter=None) -> Tensor:
    """For each value, the index where it would be inserted into the (last dim of the) sorted sequence."""
    seq = _t(sorted_sequence, "searchsorted", "sorted_sequence")._data
    vals = input._data if isinstance(input, Tensor) else np.asarray(input)
    side = side or ("right" if right else "left")
    if seq.ndim <= 1:
        out = np.searchsorted(seq, vals, side=side)
    else:
        rows, vrows = seq.reshape(-1, seq.shape[-1]), vals.reshape(-1, vals.shape[-1])
        out = np.stack([np.searchsorted(r, v, side=side) for r, v in zip(rows, vrows)]).reshape(vals.shape)
    return Tensor._wrap(np.asarray(out, np.int32 if out_int32 else np.int64))


def bucketize(input, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """The bucket of each value: boundaries[i-1] < x <= boundaries[i] (right=False)."""
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def _var_args(dim, unbiased, keepdim, correction):
    """torch's positional form std_mean(x, unbiased) as keywords."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return dim, unbiased, keepdim, correction


def std_mean(input: Tensor, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *, correction=None):
    dim, unbiased, keepdim, correction = _var_args(dim, unbiased, keepdim, correction)
    return (input.std(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim))


def var_mean(input: Tensor, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *, correction=None):
    dim, unbiased, keepdim, correction = _var_args(dim, unbiased, keepdim, correction)
    return (input.var(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim))


# ---------------------------------------------------------------- fused arithmetic
def lerp(input: Tensor, end: Tensor, weight) -> Tensor:
    """input + weight * (end - input)."""
    return _t(input, "lerp") + weight * (end - input)


def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    return _t(input, "addcmul") + tensor1 * tensor2 * value


def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    return _t(input, "addcdiv") + tensor1 / tensor2 * value


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2) (input broadcast; beta 0 ignores it, NaN included)."""
    product = mat1 @ mat2
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:
        return scaled
    return scaled + (input if beta == 1 else input * beta)


@quietly
def logaddexp(input: Tensor, other: Tensor) -> Tensor:
    """log(exp(a) + exp(b)) without overflow; -inf with -inf gives -inf."""
    from .tensor import maximum
    top = maximum(input, other)
    gap = -(input - other).abs()
    safe = where(top == float("-inf"), 0.0, gap)  # both -inf: no nan from inf - inf (top + log 2 = -inf)
    return top + safe.exp().log1p()


@quietly
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode=None) -> Tensor:
    """(..., P, M), (..., R, M) -> (..., P, R): the p-norm distances of every pair of rows."""
    _t(x1, "cdist", "x1")
    _t(x2, "cdist", "x2")
    if x1.dim() < 2 or x2.dim() < 2 or x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"cdist: X1 and X2 must have at least 2 dims and the same number of columns, got "
                           f"{tuple(x1.shape)} and {tuple(x2.shape)}")
    return (x1.unsqueeze(-2) - x2.unsqueeze(-3)).norm(p, dim=-1)


# ---------------------------------------------------------------- linalg
def vector_norm(x: Tensor, ord: float = 2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The ``ord``-norm of the elements (over ``dim``, all when None)."""
    x = _t(x, "linalg.vector_norm", "x")
    if dtype is not None:
        x = x.type(dtype)
    if ord == float("-inf"):
        return x.abs().amin(dim, keepdim)
    return x.norm(ord, dim, keepdim)


def norm(A: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Vector norms (ord a number, or None: 2 over all elements) and the
    Frobenius norm of matrices (ord "fro", or None with a 2-D ``dim``);
    other matrix norms are not implemented."""
    A = _t(A, "linalg.norm", "A")
    two_dims = (dim is not None and not isinstance(dim, int) and len(dim) == 2) or (dim is None and A.dim() == 2)
    if ord == "fro" or (ord is None and two_dims):
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if ord is None or (isinstance(ord, (int, float)) and not two_dims):
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    raise NotImplementedError(f"linalg.norm: matrix norm ord={ord!r} is not implemented (vector norms and 'fro' are)")


linalg = types.SimpleNamespace(vector_norm=vector_norm, norm=norm)


# ---------------------------------------------------------------- factories, draws, dtypes
def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    from .tensor import linspace
    exps = linspace(start, end, steps, dtype=_dtypes.float64, device=device)._data
    out = tensor(np.power(base, exps).astype(_as_dtype(dtype) or _dtypes._default_dtype))
    return out.requires_grad_(requires_grad)


def bernoulli(input: Tensor, p: Optional[float] = None, *, generator=None) -> Tensor:
    """0/1 draws with probability ``input`` (or ``p``), in input's dtype; no gradient."""
    probs = _t(input, "bernoulli")._data
    chance = probs if p is None else np.full(probs.shape, p)
    if np.any((chance < 0) | (chance > 1)) or np.isnan(chance).any():
        raise RuntimeError("bernoulli: all probabilities must be in [0, 1]")
    draws = _gen(generator).numpy.random(probs.shape) < chance
    return Tensor._wrap(draws.astype(probs.dtype if probs.dtype.kind == "f" else _dtypes._default_dtype))


def promote_types(type1, type2):
    """torch's promotion of two dtypes (as for two tensors)."""
    a, b = np.zeros(1, _as_dtype(type1)), np.zeros(1, _as_dtype(type2))
    return _promote(a, b)


def result_type(tensor1, tensor2):
    """The dtype of ``tensor1 + tensor2`` (tensors or Python numbers)."""
    return (_as_operand(tensor1) + _as_operand(tensor2)).dtype


def _as_operand(x):
    return x if isinstance(x, Tensor) else (x if isinstance(x, (bool, int, float)) else tensor(x))


_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def can_cast(from_, to) -> bool:
    """torch's rule: no cast to a lower kind (float -> int, int -> bool, ...)."""
    return _KIND_RANK[_as_dtype(from_).kind] <= _KIND_RANK[_as_dtype(to).kind]


def attach() -> None:
    """Install the methods on Tensor (called once by ``ctransformer``)."""
    Tensor.cumprod = cumprod
    Tensor.median = median
    Tensor.kthvalue = kthvalue
    Tensor.count_nonzero = count_nonzero
    Tensor.bincount = bincount
    Tensor.histc = histc
    Tensor.lerp = lerp
    Tensor.addcmul = addcmul
    Tensor.addcdiv = addcdiv
    Tensor.addmm = addmm
    Tensor.logaddexp = logaddexp
    Tensor.bernoulli = bernoulli
    Tensor.isin = lambda self, test_elements, **kw: isin(self, test_elements, **kw)

