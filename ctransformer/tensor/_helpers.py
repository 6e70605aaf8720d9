"""Small helpers of the Tensor modules: broadcasting sums, dim normalisation, index conversion,
torch's type promotion, conversion of Python data to arrays."""
from __future__ import annotations

import sys
import numbers
import warnings
from typing import Tuple

import numpy as np

from .._checks import _int_tuple
from . import _dtypes
from ._dtypes import int64, Size

# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


# ---------------------------------------------------------------- helpers
def _sum_to(g: np.ndarray, shape: Tuple[int, ...]) -> np.ndarray:
    """Sum a gradient of a broadcast result back to the operand's shape."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead < 0:
        g = g.reshape((1,) * -lead + g.shape)
        lead = 0
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    if axes:
        g = g.sum(axis=axes)
    return g.reshape(shape)



def _norm_dim(dim: int, ndim: int, fn: str = "dim") -> int:
    n = max(ndim, 1)
    if not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{fn}: dim must be an int, got {type(dim).__name__}")
    if not -n <= dim < n:
        raise IndexError(f"{fn}: dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return int(dim) % n


def _axes(dim, ndim, fn="dim"):
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        return tuple(_norm_dim(d, ndim, fn) for d in dim)
    return (_norm_dim(dim, ndim, fn),)


def _shape_args(shape, fn: str = "size") -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
        shape = shape[0]
    return _int_tuple(shape, fn)


def _index_to_numpy(idx):
    if isinstance(idx, _T.Tensor):
        return idx._data
    if isinstance(idx, tuple):
        return tuple(_index_item(i) for i in idx)
    if isinstance(idx, list):
        return _index_item(idx)
    return idx


def _index_item(i):
    if isinstance(i, _T.Tensor):
        return i._data
    if isinstance(i, list):
        return np.asarray([j.item() if isinstance(j, _T.Tensor) else j for j in i])
    return i


def _is_basic_index(key) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    for i in items:
        if not (i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice))):
            return False
    return True


_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _promote(a: np.ndarray, b: np.ndarray) -> np.dtype:
    """torch's result type of two tensors: a higher category wins with its
    own dtype; a 0-d operand only counts when it is of a higher category."""
    da, db = a.dtype, b.dtype
    if da == db:
        return da
    ca, cb = _CATEGORY[da.kind], _CATEGORY[db.kind]
    if (a.ndim == 0) != (b.ndim == 0):
        zero, dim_, cz, cd = (da, db, ca, cb) if a.ndim == 0 else (db, da, cb, ca)
        return zero if cz > cd else dim_
    if ca != cb:
        return da if ca > cb else db
    return np.promote_types(da, db)


def _float_of(a: np.ndarray) -> np.ndarray:
    """Integer/bool input of a float function -> default float dtype (as torch)."""
    return a if a.dtype.kind in "fc" else a.astype(_dtypes._default_dtype)


def _deprecated_alpha_first(other, alpha, name: str):
    """torch still accepts the old ``add_(Number alpha, Tensor other)`` order
    (older tutorials' ``p.data.add_(-lr, p.grad.data)``), with a warning."""
    if isinstance(alpha, _T.Tensor) and isinstance(other, numbers.Number) and not isinstance(other, bool):
        warnings.warn(f"This overload of {name} is deprecated:\n\t{name}(Number alpha, Tensor other)\n"
                      f"Consider using one of the following signatures instead:\n"
                      f"\t{name}(Tensor other, *, Number alpha = 1)", UserWarning, stacklevel=3)
        return alpha, other
    return other, alpha


class _MinMax(tuple):
    """(values, indices), as torch's return_types."""

    def __new__(cls, values, indices):
        return super().__new__(cls, (values, indices))

    @property
    def values(self):
        return self[0]

    @property
    def indices(self):
        return self[1]


def _data_of(x) -> np.ndarray:
    return x._data if isinstance(x, _T.Tensor) else np.asarray(x)


def _ndim_of(x) -> int:
    return x._data.ndim if isinstance(x, _T.Tensor) else np.ndim(x)


def _check_index_dtype(key) -> None:
    items = key if isinstance(key, tuple) else (key,)
    for i in items:
        if isinstance(i, np.ndarray) and i.dtype.kind not in "iub":
            raise IndexError(f"index: tensors used as indices must be long, int, byte or bool tensors, "
                             f"got {i.dtype}")


def _along_axis_key(idx, axis):
    grids = np.indices(idx.shape, sparse=True)
    key = list(grids)
    key[axis] = idx
    return tuple(key)


def _identity_grad(g):
    return (g,)


def _neg_grad(g):
    return (-g,)


def _no_grad_1(g):
    return (None,)


def _zero_grad(g):
    return (np.zeros_like(g),)


def _to_array(data, dtype) -> np.ndarray:
    """Copy ``data`` into a new array; ``dtype`` None infers torch's way."""
    if isinstance(data, _T.Tensor):
        arr = data._data.copy()
    elif isinstance(data, np.ndarray):
        if data.dtype.kind in "OUSVMm":
            raise TypeError(f"tensor: can't convert np.ndarray of type {data.dtype}; the only supported "
                            "types are float64, float32, float16, int64, int32, int16, int8, uint8 and bool")
        # a copy in the machine's byte order (the kernels read native bytes)
        arr = data.astype(data.dtype.newbyteorder("="))
    else:
        if isinstance(data, (list, tuple)):
            data = _untensor(data)
        elif isinstance(data, np.generic):
            data = np.asarray(data)
        arr = np.array(data)
        if arr.dtype.kind in "OUSV":
            raise TypeError(f"tensor: could not convert data of type {type(data).__name__} to a numeric tensor")
        if dtype is None and not isinstance(data, np.ndarray):
            if arr.dtype.kind == "f":
                arr = arr.astype(_dtypes._default_dtype)
            elif arr.dtype.kind in "iu":
                arr = arr.astype(int64)
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr


def _untensor(data):
    """Nested lists/tuples with Tensors inside -> plain values (kept lists)."""
    if isinstance(data, (list, tuple)):
        if any(isinstance(d, (_T.Tensor, list, tuple)) for d in data):
            return [_untensor(d) for d in data]
        return data
    if isinstance(data, _T.Tensor):
        return data._data
    return data


# op codes of the binary arithmetic operators (``_arith``), and their NumPy ufuncs
_ADD, _SUB, _MUL, _DIV, _POW = range(5)
_UFUNCS = (np.add, np.subtract, np.multiply, np.true_divide, np.power)
