"""Tensor methods: indexing (``t[i]``, ``t[i] = v``, gather, scatter), ``new_*`` factories and
in-place random fills."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

from ..autograd import _grad_enabled, apply_op, share_version
from ._helpers import _along_axis_key, _check_index_dtype, _data_of, _index_to_numpy, _is_basic_index, _norm_dim, _sum_to

if TYPE_CHECKING:
    from ._core import Tensor

# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


class IndexingMixin:
    __slots__ = ()  # Tensor keeps its fixed slots

    # ------------------------------------------------------------ indexing
    def __getitem__(self, idx) -> "Tensor":
        key = _index_to_numpy(idx)
        x = self._data
        basic = _is_basic_index(key)
        if basic:
            # a trailing Ellipsis keeps even x[i, j] a 0-d view of the storage, as torch
            k = key if isinstance(key, tuple) else (key,)
            if Ellipsis not in k:
                k = k + (Ellipsis,)
            try:
                out = x[k]
            except IndexError as e:
                raise IndexError(f"index: {e}") from None
        else:
            _check_index_dtype(key)
            out = np.asarray(x[key])
        if not (_grad_enabled[0] and self.requires_grad):
            t = _T._wrap(out)
            if basic:
                share_version(self, t)
            return t
        shape, dtype = x.shape, x.dtype

        def backward(g):
            grad = np.zeros(shape, dtype)
            if basic:
                grad[key] = g
            else:
                np.add.at(grad, key, g)
            return (grad,)

        t = apply_op(out, (self,), backward, "Index")
        if basic:
            share_version(self, t)
        return t

    def __setitem__(self, idx, value) -> None:
        key = _index_to_numpy(idx)
        if not _is_basic_index(key):
            _check_index_dtype(key)
        v_t = value if isinstance(value, _T.Tensor) else None
        v = v_t._data if v_t is not None else value
        region_shape = self._data[key].shape
        vshape = np.shape(v)
        if len(vshape) > len(region_shape):  # torch drops leading 1s: x[0] = tensor([5])
            lead = len(vshape) - len(region_shape)
            if any(s != 1 for s in vshape[:lead]):
                raise RuntimeError(f"setitem: value of shape {tuple(vshape)} does not fit the indexed region "
                                   f"of shape {tuple(region_shape)}")
            v = np.reshape(v, vshape[lead:])
        if not self._tracked(v_t):
            self._writable()[key] = v
            return
        self._check_inplace("__setitem__")
        new = self._data.copy()
        new[key] = v
        keep_old = self.requires_grad

        def backward(g):
            g_old = None
            if keep_old:
                g_old = g.copy()
                g_old[key] = 0
            g_val = None
            if v_t is not None:
                g_val = _sum_to(np.asarray(g[key]).reshape(region_shape), vshape)
            return (g_old, g_val)

        self._become(apply_op(new, (self, v_t), backward, "CopySlices"))

    def index_select(self, dim: int, index) -> "Tensor":
        idx = _data_of(index)
        if idx.ndim > 1:
            raise IndexError(f"index_select: index must be 0-D or 1-D, got {idx.ndim}-D")
        d = _norm_dim(dim, self._data.ndim, "index_select")
        return self[(slice(None),) * d + (idx.reshape(-1),)]

    def gather(self, dim: int, index) -> "Tensor":
        x = self._data
        d = _norm_dim(dim, x.ndim, "gather")
        idx = _data_of(index)
        if idx.dtype.kind not in "iu":
            raise RuntimeError(f"gather: index must be an integer tensor, got {idx.dtype}")
        if idx.ndim != x.ndim or any(i > s for k, (i, s) in enumerate(zip(idx.shape, x.shape)) if k != d):
            raise RuntimeError(f"gather: index {tuple(idx.shape)} must have the input's number of dimensions "
                               f"and sizes no larger than {tuple(x.shape)} outside dimension {dim}")
        if idx.size and (idx.min() < 0 or idx.max() >= x.shape[d]):  # torch: no negative indices either
            bad = idx.min() if idx.min() < 0 else idx.max()
            raise RuntimeError(f"gather: index {bad} is out of bounds for dimension {dim} with size {x.shape[d]}")
        key = _along_axis_key(idx, d)

        def backward(g):
            grad = np.zeros_like(x)
            np.add.at(grad, key, g)
            return (grad,)

        return apply_op(x[key], (self,), backward, "Gather")

    def scatter(self, dim: int, index, src) -> "Tensor":
        """Out-of-place scatter; gradients as torch: self gets g with the
        written positions zeroed, a Tensor src gets g gathered at index."""
        x = self._data.copy()
        d = _norm_dim(dim, x.ndim, "scatter")
        idx = _data_of(index)
        key = _along_axis_key(idx, d)
        src_t = src if isinstance(src, _T.Tensor) else None
        region = tuple(slice(0, n) for n in idx.shape)
        if src_t is not None:
            x[key] = src_t._data[region]
        else:
            x[key] = src
        sshape = None if src_t is None else src_t._data.shape

        def backward(g):
            gs = g.copy()
            gs[key] = 0
            gsrc = None
            if src_t is not None:
                gsrc = np.zeros(sshape, g.dtype)
                gsrc[region] = g[key]
            return gs, gsrc

        return apply_op(x, (self, src_t), backward, "Scatter")

    def scatter_(self, dim: int, index, src) -> "Tensor":
        self._check_inplace("scatter_")
        if self._tracked(src if isinstance(src, _T.Tensor) else None):
            return self._become(self.scatter(dim, index, src))
        self._writable()[...] = self.scatter(dim, index, src)._data
        return self

    # numpy-ish conveniences torch also has
    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return _T.zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return _T.ones(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        return _T.full(size, fill_value, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        return _T.zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return _T.tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)

    # in-place random fills (used by nn.init; no graph)
    def uniform_(self, a: float = 0.0, b: float = 1.0, generator=None) -> "Tensor":
        self._check_inplace("uniform_")
        self._writable()[...] = _T._gen(generator).uniform(a, b, self._data.shape)
        return self

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator=None) -> "Tensor":
        self._check_inplace("normal_")
        self._writable()[...] = _T._gen(generator).normal(mean, std, self._data.shape)
        return self

    def bernoulli_(self, p: float = 0.5, generator=None) -> "Tensor":
        self._check_inplace("bernoulli_")
        self._writable()[...] = _T._gen(generator).uniform(0.0, 1.0, self._data.shape) < p
        return self
