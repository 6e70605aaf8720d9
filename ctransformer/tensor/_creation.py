"""Functions making Tensors: ``tensor``, ``zeros``, ``arange``, ``cat``, ``stack``, ..., the random
factories, and ``where`` / ``maximum`` / ``minimum`` / ``mm`` / ``bmm``."""
from __future__ import annotations

import sys
from typing import Sequence, Tuple, Union

import numpy as np

from .._checks import _factory_shape
from ..autograd import apply_op
from . import _dtypes
from ._dtypes import _as_dtype, _check_device, bool_, int64, Size
from ._helpers import _data_of, _norm_dim, _promote, _shape_args, _sum_to, _to_array
from ._core import _wrap, Tensor

# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


# ------------------------------------------------------------------ mm, bmm, where, maximum, minimum
# (matmul itself, kernel-backed, is ctransformer/ops/linear.py)
def mm(a: Tensor, b: Tensor) -> Tensor:
    return a.mm(b) if isinstance(a, Tensor) else tensor(a).mm(b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {a.dim()}-D and {b.dim()}-D")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: batch sizes must match, got {a.shape[0]} and {b.shape[0]}")
    return _T.matmul(a, b)


def where(condition, x=None, y=None) -> Union[Tensor, Tuple[Tensor, ...]]:
    """Elementwise ``condition ? x : y`` (broadcasting); ``where(c)`` is
    ``c.nonzero(as_tuple=True)``."""
    c = _data_of(condition)
    if x is None and y is None:
        return _wrap(c).nonzero(as_tuple=True)
    if c.dtype != bool_:
        raise TypeError(f"where: condition must have dtype bool, got {c.dtype}")
    xt = x if isinstance(x, Tensor) else None
    yt = y if isinstance(y, Tensor) else None
    xd = xt._data if xt is not None else x
    yd = yt._data if yt is not None else y
    if xt is not None and yt is not None:
        dt = _promote(xd, yd)
    elif xt is not None or yt is not None:
        ref = (xt if xt is not None else yt)._data
        scalar = yd if xt is not None else xd
        dt = ref.dtype if not (isinstance(scalar, float) and ref.dtype.kind != "f") else _dtypes._default_dtype
    else:
        dt = np.asarray(xd).dtype if np.asarray(xd).dtype.kind != "f" else _dtypes._default_dtype
    out = np.where(c, np.asarray(xd).astype(dt, copy=False), np.asarray(yd).astype(dt, copy=False))
    xs, ys = np.shape(xd), np.shape(yd)

    def backward(g):
        return (_sum_to(np.where(c, g, 0), xs) if xt is not None else None,
                _sum_to(np.where(c, 0, g), ys) if yt is not None else None)

    return apply_op(out, (xt, yt), backward, "Where")


def maximum(a: Tensor, b: Tensor) -> Tensor:
    """The elementwise larger of a and b (broadcasting); NaN wins, as torch.
    Gradient as torch's: to the larger operand, halved between equal ones."""
    return _extremum(a, b, np.maximum, "Maximum")


def minimum(a: Tensor, b: Tensor) -> Tensor:
    """The elementwise smaller of a and b (broadcasting); NaN wins, as torch.
    Gradient as torch's: to the smaller operand, halved between equal ones."""
    return _extremum(a, b, np.minimum, "Minimum")


def _extremum(a, b, pick, name: str) -> Tensor:
    at = a if isinstance(a, Tensor) else tensor(a)
    bt = b if isinstance(b, Tensor) else tensor(b)
    dt = _promote(at._data, bt._data)
    x, y = at._data.astype(dt, copy=False), bt._data.astype(dt, copy=False)
    out = np.asarray(pick(x, y))

    def backward(g):
        tie = x == y
        x_wins = (x > y) if pick is np.maximum else (x < y)
        y_wins = ~tie & ~x_wins
        half = g / 2
        return (_sum_to(np.where(tie, half, np.where(x_wins, g, 0)), x.shape),
                _sum_to(np.where(tie, half, np.where(y_wins, g, 0)), y.shape))

    return apply_op(out, (at, bt), backward, name)


# ------------------------------------------------------------------ factories
def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new Tensor copying ``data`` (Python floats -> float32, ints -> int64,
    bools -> bool; NumPy arrays keep their dtype)."""
    _check_device(device)
    t = _wrap(_to_array(data, _as_dtype(dtype)))
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(arr: np.ndarray) -> Tensor:
    """A Tensor sharing ``arr``'s memory (dtype kept, as torch)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(arr).__name__}")
    if not arr.dtype.isnative:
        raise ValueError("given numpy array has byte order different from the native byte order. "
                         "Conversion between byte orders is currently not supported.")
    if arr.dtype.kind in "OUSVMm":
        raise TypeError(f"can't convert np.ndarray of type {arr.dtype}. The only supported types are: "
                        "float64, float32, float16, int64, int32, int16, int8, uint8, and bool.")
    return _wrap(arr)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``data`` itself when it already is a Tensor / array of that dtype
    (shared), else a new Tensor."""
    _check_device(device)
    d = _as_dtype(dtype)
    if isinstance(data, Tensor):
        return data if d is None or data.dtype == d else data.type(d)
    if isinstance(data, np.ndarray) and data.dtype.isnative and (d is None or data.dtype == d):
        return _wrap(data)
    return tensor(data, dtype=dtype)


def _factory(fill, size, dtype, requires_grad, device=None):
    _check_device(device)
    shape = _factory_shape(_shape_args(size, getattr(fill, "__name__", "size")))
    d = _as_dtype(dtype) or _dtypes._default_dtype
    t = _wrap(fill(shape, d))
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.zeros, size, dtype, requires_grad, device)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.ones, size, dtype, requires_grad, device)


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.zeros, size, dtype, requires_grad, device)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, bool) else (int64 if isinstance(fill_value, int) else None)
    return _factory(lambda s, d: np.full(s, fill_value, d), (size,) if isinstance(size, int) else size,
                    dtype, requires_grad, device)


def _like_device(t: Tensor, device):
    """A *_like factory's device: its tensor's unless one is given (not the default device)."""
    return t.device if device is None else device


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device), requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device), requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device), requires_grad=requires_grad)


def full_like(t: Tensor, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=_like_device(t, device),
                requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """[start, end) by step; int64 unless an argument is a float (then float32)."""
    _check_device(device)
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if vals[2] == 0:
        raise RuntimeError("arange: step must be nonzero")
    is_float = any(isinstance(v, float) for v in vals)
    d = _as_dtype(dtype) or (_dtypes._default_dtype if is_float else int64)
    t = _wrap(np.arange(*vals).astype(d))
    return t.requires_grad_(True) if requires_grad else t


def linspace(start, end, steps, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device)
    t = _wrap(np.linspace(start, end, steps).astype(_as_dtype(dtype) or _dtypes._default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def eye(n, m=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device)
    t = _wrap(np.eye(n, m, dtype=_as_dtype(dtype) or _dtypes._default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def tril(t: Tensor, diagonal: int = 0) -> Tensor:
    return t.tril(diagonal)


def triu(t: Tensor, diagonal: int = 0) -> Tensor:
    return t.triu(diagonal)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim``; gradients split back to each input."""
    ts = [t if isinstance(t, Tensor) else tensor(t) for t in tensors]
    if not ts:
        raise ValueError("cat: expected a non-empty list of Tensors")
    nd = ts[0]._data.ndim
    if nd == 0:
        raise RuntimeError("cat: zero-dimensional tensor cannot be concatenated")
    d = _norm_dim(dim, nd, "cat")
    dt = ts[0]._data.dtype
    for t in ts[1:]:
        dt = _promote(np.empty((1,), dt), t._data if t._data.ndim else t._data.reshape(1))
    try:
        out = np.concatenate([t._data.astype(dt, copy=False) for t in ts], axis=d)
    except ValueError as e:
        raise RuntimeError(f"cat: sizes of tensors must match except in dimension {dim} "
                           f"(got {[tuple(t.shape) for t in ts]})") from e
    bounds = tuple(int(b) for b in np.cumsum([t._data.shape[d] for t in ts])[:-1])
    return apply_op(out, tuple(ts), lambda g: tuple(np.split(g, bounds, axis=d)), "Cat")


concat = concatenate = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    ts = [t if isinstance(t, Tensor) else tensor(t) for t in tensors]
    if not ts:
        raise ValueError("stack: expected a non-empty list of Tensors")
    shapes = {t._data.shape for t in ts}
    if len(shapes) > 1:
        raise RuntimeError(f"stack: expects each tensor to be equal size, got {[tuple(t.shape) for t in ts]}")
    d = _norm_dim(dim, ts[0]._data.ndim + 1, "stack")
    out = np.stack([t._data for t in ts], axis=d)
    n = len(ts)
    return apply_op(out, tuple(ts), lambda g: tuple(np.take(g, i, axis=d) for i in range(n)), "Stack")


def numel(t: Tensor) -> int:
    return t.numel()


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def is_floating_point(t: Tensor) -> bool:
    return t.is_floating_point()


# ------------------------------------------------------------------ random factories
def _gen(generator):
    from ..random import default_generator
    return generator or default_generator


def randn(*size, dtype=None, generator=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples from the seeded generator."""
    _check_device(device)
    samples = _gen(generator).normal(0.0, 1.0, _factory_shape(_shape_args(size)))
    t = _wrap(samples.astype(_as_dtype(dtype) or _dtypes._default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def rand(*size, dtype=None, generator=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) samples from the seeded generator."""
    _check_device(device)
    samples = _gen(generator).uniform(0.0, 1.0, _factory_shape(_shape_args(size)))
    t = _wrap(samples.astype(_as_dtype(dtype) or _dtypes._default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def randint(low, high=None, size=None, dtype=None, generator=None, device=None,
            requires_grad: bool = False) -> Tensor:
    """Integers in [low, high) (``randint(high, size)`` form too)."""
    _check_device(device)
    if size is None and isinstance(high, (tuple, list, Size)):
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint: missing required argument 'size'")
    if high <= low:
        raise RuntimeError(f"randint: expects 'from' ({low}) to be less than 'to' ({high})")
    shape = _shape_args((size,) if isinstance(size, int) else tuple(size))
    return _wrap(_gen(generator).integers(low, high, shape).astype(_as_dtype(dtype) or int64))


def randperm(n: int, dtype=None, generator=None, device=None) -> Tensor:
    _check_device(device)
    return _wrap(_gen(generator).permutation(n).astype(_as_dtype(dtype) or int64))


def randn_like(t: Tensor, dtype=None, device=None) -> Tensor:
    return randn(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device))


def rand_like(t: Tensor, dtype=None, device=None) -> Tensor:
    return rand(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device))


def randint_like(t: Tensor, low, high=None, dtype=None, device=None) -> Tensor:
    return randint(low, high, tuple(t.shape), dtype=dtype or t.dtype, device=_like_device(t, device))


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, out=None, device=None,
           requires_grad: bool = False) -> Tensor:
    """Normal draws: numbers ``mean`` and ``std`` with a ``size``, or Tensors of
    means and / or standard deviations (broadcast; one draw each, their dtype).
    No gradient flows to mean or std (as torch's)."""
    _check_device(device)
    g = _gen(generator)
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        m = mean._data if isinstance(mean, Tensor) else np.asarray(mean)
        s = std._data if isinstance(std, Tensor) else np.asarray(std)
        if np.any(s < 0):
            raise RuntimeError("normal expects all elements of std >= 0.0")
        shape = np.broadcast_shapes(m.shape, s.shape)
        dt = next(t._data.dtype for t in (mean, std) if isinstance(t, Tensor))
        t = _wrap((m + s * g.normal(0.0, 1.0, shape)).astype(dt if dt.kind == "f" else _dtypes._default_dtype))
    else:
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments: numbers mean and std need "
                            "a size (or pass Tensors)")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        t = _wrap(g.normal(mean, std, _shape_args((size,))).astype(_as_dtype(dtype) or _dtypes._default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def multinomial(probs: Tensor, num_samples: int, replacement: bool = False, generator=None) -> Tensor:
    """Sample indices from rows of (unnormalised) probabilities."""
    p = probs._data.astype(np.float64)
    rows = p.reshape(-1, p.shape[-1])
    g = _gen(generator)
    out = np.empty((rows.shape[0], num_samples), np.int64)
    if not np.all(np.isfinite(rows)) or np.any(rows < 0):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if np.any(rows.sum(axis=1) <= 0):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError(f"multinomial: cannot sample n_sample ({num_samples}) > prob_dist.size(-1) "
                           f"({rows.shape[1]}) samples without replacement")
    for i, r in enumerate(rows):
        r = r / r.sum()
        live = int((r > 0).sum())
        if replacement or live >= num_samples:
            out[i] = g.numpy.choice(len(r), size=num_samples, replace=replacement, p=r)
        else:  # as torch: every category that can be drawn, in a drawn order, then zero-probability ones
            drawn = g.numpy.choice(len(r), size=live, replace=False, p=r)
            rest = g.numpy.permutation(np.flatnonzero(r == 0))[:num_samples - live]
            out[i] = np.concatenate([drawn, rest])
    return _wrap(out.reshape(p.shape[:-1] + (num_samples,)))
