"""Tensor methods: views and reshapes (view, transpose, permute, expand, split, ...)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

import numpy as np

from .._checks import _positive_chunks, _view_shape
from ..autograd import apply_op, share_version
from ._helpers import _axes, _identity_grad, _norm_dim, _shape_args, _sum_to

if TYPE_CHECKING:
    from ._core import Tensor

# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


class ShapeMixin:
    __slots__ = ()  # Tensor keeps its fixed slots

    # ------------------------------------------------------------ shape
    def view(self, *shape) -> "Tensor":
        shape = _view_shape(_shape_args(shape, "view"))
        x = self._data
        old = x.shape
        try:
            out = x.reshape(shape)
        except ValueError:
            raise RuntimeError(f"view: shape '{list(shape)}' is invalid for input of size {x.size}") from None
        if out.size > 1 and not np.may_share_memory(out, x):
            raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                               "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
        t = apply_op(out, (self,), lambda g: (g.reshape(old),), "View")
        share_version(self, t)
        return t

    def reshape(self, *shape) -> "Tensor":
        """A view when the layout allows, else a copy (torch's reshape)."""
        shape = _view_shape(_shape_args(shape, "reshape"))
        x = self._data
        old = x.shape
        try:
            out = x.reshape(shape)
        except ValueError:
            raise RuntimeError(f"reshape: shape '{list(shape)}' is invalid for input of size {x.size}") from None
        return apply_op(out, (self,), lambda g: (g.reshape(old),), "Reshape" if out.base is None else "View")

    def view_as(self, other: "Tensor") -> "Tensor":
        return self.view(other.shape)

    def reshape_as(self, other: "Tensor") -> "Tensor":
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        nd = self._data.ndim
        if nd == 0:
            return self.view(1)
        s, e = _norm_dim(start_dim, nd, "flatten"), _norm_dim(end_dim, nd, "flatten")
        if s > e:
            raise RuntimeError("flatten: start_dim cannot come after end_dim")
        shp = self._data.shape
        return self.reshape(shp[:s] + (int(np.prod(shp[s:e + 1])),) + shp[e + 1:])

    def unflatten(self, dim: int, sizes) -> "Tensor":
        shp = self._data.shape
        d = _norm_dim(dim, len(shp), "unflatten")
        return self.reshape(shp[:d] + tuple(sizes) + shp[d + 1:])

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        nd = self._data.ndim
        if nd == 0:
            return self
        perm = list(range(nd))
        a, b = _norm_dim(dim0, nd, "transpose"), _norm_dim(dim1, nd, "transpose")
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(*perm)

    swapaxes = swapdims = transpose

    def t(self) -> "Tensor":
        if self._data.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self._data.ndim}D")
        return self.transpose(0, 1) if self._data.ndim == 2 else self

    @property
    def T(self) -> "Tensor":
        return self.permute(*reversed(range(self._data.ndim)))

    @property
    def mT(self) -> "Tensor":
        return self.transpose(-2, -1)

    def permute(self, *dims) -> "Tensor":
        nd = self._data.ndim
        dims = tuple(_norm_dim(d, nd, "permute") for d in _shape_args(dims))
        if sorted(dims) != list(range(nd)):
            raise RuntimeError(f"permute: dims {dims} are not a permutation of {nd} dimensions")
        inv = tuple(np.argsort(dims))
        t = apply_op(self._data.transpose(dims), (self,), lambda g: (g.transpose(inv),), "Permute")
        share_version(self, t)
        return t

    def contiguous(self, memory_format=None) -> "Tensor":
        if self._data.flags.c_contiguous:
            return self
        return apply_op(np.ascontiguousarray(self._data), (self,), _identity_grad, "Contiguous")

    def is_contiguous(self, memory_format=None) -> bool:
        return bool(self._data.flags.c_contiguous)

    def unsqueeze(self, dim: int) -> "Tensor":
        x = self._data
        d = _norm_dim(dim, x.ndim + 1, "unsqueeze")
        old = x.shape
        return apply_op(np.expand_dims(x, d), (self,), lambda g: (g.reshape(old),), "Unsqueeze")

    def squeeze(self, dim=None) -> "Tensor":
        x = self._data
        old = x.shape
        if dim is None:
            out = x.squeeze()
        else:
            dims = dim if isinstance(dim, (tuple, list)) else (dim,)
            ds = tuple(d for d in (_norm_dim(d, x.ndim, "squeeze") for d in dims) if x.ndim and x.shape[d] == 1)
            out = x.squeeze(ds) if ds else x
        return apply_op(out, (self,), lambda g: (g.reshape(old),), "Squeeze")

    def unsqueeze_(self, dim: int) -> "Tensor":
        return self._become(self.unsqueeze(dim))

    def squeeze_(self, dim=None) -> "Tensor":
        return self._become(self.squeeze(dim))

    def expand(self, *sizes) -> "Tensor":
        sizes = _shape_args(sizes)
        x = self._data
        lead = len(sizes) - x.ndim
        if lead < 0:
            raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal "
                               f"to the number of dimensions in the tensor ({x.ndim})")
        target = tuple(x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes))
        try:
            out = np.broadcast_to(x, target)
        except ValueError:
            raise RuntimeError(f"expand: the expanded size {list(sizes)} must match the existing size "
                               f"{list(x.shape)} at non-singleton dimensions") from None
        old = x.shape
        return apply_op(out, (self,), lambda g: (_sum_to(g, old),), "Expand")

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(other.shape)

    def repeat(self, *sizes) -> "Tensor":
        sizes = _shape_args(sizes)
        x = self._data
        if len(sizes) < x.ndim:
            raise RuntimeError("repeat: number of dimensions of repeat dims can not be smaller than number "
                               "of dimensions of tensor")
        xs = x.reshape((1,) * (len(sizes) - x.ndim) + x.shape)
        out = np.tile(xs, sizes)
        shape, xshape = xs.shape, x.shape  # shapes only: backward keeps no array

        def backward(g):
            split = []
            for r, s in zip(sizes, shape):
                split += [r, s]
            return (g.reshape(split).sum(axis=tuple(range(0, 2 * len(sizes), 2))).reshape(xshape),)

        return apply_op(out, (self,), backward, "Repeat")

    def repeat_interleave(self, repeats: int, dim: Optional[int] = None) -> "Tensor":
        if dim is None:
            return self.flatten().repeat_interleave(repeats, 0)
        d = _norm_dim(dim, self._data.ndim, "repeat_interleave")
        idx = np.repeat(np.arange(self._data.shape[d]), repeats)
        return self.index_select(d, _T._wrap(idx))

    def chunk(self, chunks: int, dim: int = 0):
        chunks = _positive_chunks(chunks)
        n = self._data.shape[_norm_dim(dim, self._data.ndim, "chunk")]
        size = -(-n // chunks)
        return self.split(max(size, 1), dim)

    def split(self, split_size, dim: int = 0):
        d = _norm_dim(dim, self._data.ndim, "split")
        n = self._data.shape[d]
        if isinstance(split_size, (int, np.integer)):
            bounds = list(range(0, n, int(split_size))) + [n]
        else:
            if sum(split_size) != n:
                raise RuntimeError(f"split: split_with_sizes expects split_sizes to sum exactly to {n} "
                                   f"(input tensor's size at dimension {dim}), but got split_sizes={list(split_size)}")
            bounds = [0] + [int(b) for b in np.cumsum(split_size)]
        out = []
        for s, e in zip(bounds[:-1], bounds[1:]):
            out.append(self[(slice(None),) * d + (slice(s, e),)])
        return tuple(out)

    def unbind(self, dim: int = 0):
        d = _norm_dim(dim, self._data.ndim, "unbind")
        return tuple(self[(slice(None),) * d + (i,)] for i in range(self._data.shape[d]))

    def flip(self, *dims) -> "Tensor":
        dims = _axes(dims[0] if len(dims) == 1 else dims, self._data.ndim, "flip")
        return apply_op(np.flip(self._data, dims), (self,), lambda g: (np.flip(g, dims),), "Flip")

    def tril(self, diagonal: int = 0) -> "Tensor":
        return self._triangle(np.tril, diagonal, "Tril")

    def triu(self, diagonal: int = 0) -> "Tensor":
        return self._triangle(np.triu, diagonal, "Triu")

    def _triangle(self, fn, diagonal, name):
        x = self._data
        if x.ndim < 2:
            raise RuntimeError(f"{name.lower()}: input tensor must have at least 2 dimensions")
        keep = fn(np.ones(x.shape[-2:], bool), diagonal)
        out = np.where(keep, x, np.zeros((), x.dtype))
        # backward rebuilds the mask (torch saves only the diagonal)
        return apply_op(out, (self,), lambda g: (np.where(fn(np.ones(g.shape[-2:], bool), diagonal), g, 0),), name)

    def tril_(self, diagonal: int = 0) -> "Tensor":
        self._check_inplace("tril_")
        return self._become(self.tril(diagonal))

    def triu_(self, diagonal: int = 0) -> "Tensor":
        self._check_inplace("triu_")
        return self._become(self.triu(diagonal))
