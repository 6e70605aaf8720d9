"""More torch functions scripts use on tensors: ``unique``, ``tensor_split``,
``outer``, ``dot``, ``broadcast_to``, ``meshgrid``, ``diff``, ``index_add``,
and ``pad_index_map`` for ``F.pad``'s reflect / replicate / circular modes.
Built from differentiable ops (slicing, arithmetic, expand) or with their
own backward, so gradients flow as in torch.

``attach()`` installs the methods on :class:`Tensor`; ``ctransformer``
exports the functions.
"""
from __future__ import annotations

import warnings
from typing import List, Sequence, Tuple, Union

import numpy as np

from .autograd import apply_op
from .tensor import Tensor, _norm_dim, int64

__all__ = ["unique", "tensor_split", "outer", "ger", "dot", "broadcast_to", "meshgrid", "diff", "index_add"]


def _as_tensor(x, fn: str, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' must be Tensor, not {type(x).__name__}")
    return x


def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
           dim=None) -> Union[Tensor, Tuple[Tensor, ...]]:
    """The distinct values (sorted, as torch's CPU kernel always sorts), and on
    request the index of each input element among them and their counts;
    ``dim``: distinct slices along that dim.  No gradient (as torch)."""
    x = _as_tensor(input, "unique")._data
    axis = None if dim is None else _norm_dim(dim, x.ndim, "unique")
    values, inverse, counts = np.unique(x, return_inverse=True, return_counts=True, axis=axis)
    if axis is None:
        inverse = inverse.reshape(x.shape)
    out = [Tensor._wrap(values)]
    if return_inverse:
        out.append(Tensor._wrap(inverse.astype(int64)))
    if return_counts:
        out.append(Tensor._wrap(counts.astype(int64)))
    return out[0] if len(out) == 1 else tuple(out)


def tensor_split(input: Tensor, indices_or_sections, dim: int = 0) -> Tuple[Tensor, ...]:
    """Views of ``input`` split along ``dim``: into n parts as equal as possible
    (the first ones one longer), or at the given indices."""
    x = _as_tensor(input, "tensor_split")
    d = _norm_dim(dim, x.dim(), "tensor_split")
    size = x.shape[d]
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.tolist()
    if isinstance(indices_or_sections, (int, np.integer)):
        n = int(indices_or_sections)
        if n <= 0:
            raise RuntimeError(f"tensor_split(): number of sections must be larger than 0, got {n}")
        base, extra = divmod(size, n)
        bounds = np.cumsum([0] + [base + (i < extra) for i in range(n)]).tolist()
    else:
        cuts = [min(max(int(i) + (size if int(i) < 0 else 0), 0), size) for i in indices_or_sections]
        bounds = [0] + cuts + [size]
    lead = (slice(None),) * d
    return tuple(x[lead + (slice(a, max(a, b)),)] for a, b in zip(bounds[:-1], bounds[1:]))


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """(n,), (m,) -> (n, m): input[i] * vec2[j]."""
    a, b = _as_tensor(input, "outer"), _as_tensor(vec2, "outer", "vec2")
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"outer: expected 1-D tensors, got {a.dim()}-D and {b.dim()}-D")
    return a.unsqueeze(1) * b.unsqueeze(0)


ger = outer


def dot(input: Tensor, tensor: Tensor) -> Tensor:
    """The inner product of two 1-D tensors of the same length and dtype."""
    a, b = _as_tensor(input, "dot"), _as_tensor(tensor, "dot", "tensor")
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.dim()}D and {b.dim()}D tensors")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src [{b.shape[0]}] to "
                           f"have the same number of elements, but got {a.shape[0]} and {b.shape[0]} elements "
                           "respectively")
    if a.dtype != b.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {a.dtype} and {b.dtype}")
    return (a * b).sum()


def broadcast_to(input: Tensor, size: Sequence[int]) -> Tensor:
    """``input.expand(size)``: a broadcast view (-1 keeps a dim)."""
    return _as_tensor(input, "broadcast_to").expand(*size)


def meshgrid(*tensors, indexing: str = None) -> Tuple[Tensor, ...]:
    """Coordinate grids of 1-D (or 0-D) tensors: with ``indexing="ij"`` grid i
    varies along dim i; ``"xy"``: the first two inputs vary along dims 1 and 0.  Without
    ``indexing``, "ij" with torch's warning."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
                      "argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}")
    vecs = [_as_tensor(t, "meshgrid", "tensors").reshape(-1) for t in tensors]
    swap = indexing == "xy" and len(vecs) >= 2
    if swap:
        vecs[0], vecs[1] = vecs[1], vecs[0]
    shape = tuple(v.shape[0] for v in vecs)
    grids = []
    for i, v in enumerate(vecs):
        view = [1] * len(vecs)
        view[i] = shape[i]
        grids.append(v.reshape(*view).expand(*shape))
    if swap:  # the grids in the order of the inputs again
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def diff(input: Tensor, n: int = 1, dim: int = -1, prepend: Tensor = None, append: Tensor = None) -> Tensor:
    """The n-th forward difference along ``dim`` (``prepend`` / ``append``
    joined first); bool tensors give x[i+1] != x[i], as torch."""
    x = _as_tensor(input, "diff")
    if n < 0:
        raise RuntimeError(f"diff expects n to be non-negative, got {n}")
    d = _norm_dim(dim, x.dim(), "diff")
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        from .tensor import cat
        x = cat(parts, d)
    lead = (slice(None),) * d
    for _ in range(n):
        later, earlier = x[lead + (slice(1, None),)], x[lead + (slice(None, -1),)]
        x = later != earlier if x.dtype == np.bool_ else later - earlier
    return x


def index_add(input: Tensor, dim: int, index, source: Tensor, *, alpha=1) -> Tensor:
    """A copy of ``input`` with ``alpha * source`` slice i added at position
    index[i] along ``dim`` (repeated indices add up).  Gradients: input gets
    the gradient, source its slices at index, times alpha."""
    x = _as_tensor(input, "index_add")
    src = _as_tensor(source, "index_add", "source")
    d = _norm_dim(dim, x.dim(), "index_add") if x.dim() else 0
    idx = np.asarray(index._data if isinstance(index, Tensor) else index)
    if idx.dtype.kind not in "iu" or idx.ndim > 1:
        raise IndexError("index_add_(): Expected a long or int tensor for index, of at most one dimension")
    idx = idx.reshape(-1).astype(np.int64)
    size = x.shape[d] if x.dim() else 1
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise IndexError(f"index_add_(): index out of range for dimension {d} of size {size}")
    idx = np.where(idx < 0, idx + size, idx)
    expected = tuple(x.shape[:d]) + (idx.size,) + tuple(x.shape[d + 1:])
    if tuple(src.shape) != expected and x.dim():
        raise RuntimeError(f"index_add_(): source must have shape {expected}, got {tuple(src.shape)}")
    xd = x._data
    out = xd.copy()
    scaled = src._data.astype(xd.dtype, copy=False) * alpha
    np.add.at(np.moveaxis(out, d, 0) if xd.ndim else out.reshape(1), idx,
              np.moveaxis(scaled, d, 0) if xd.ndim else scaled.reshape(1))

    def backward(g):
        gs = np.take(g, idx, axis=d) if g.ndim else g.reshape(1)[idx]
        return g, (gs * alpha).astype(src._data.dtype, copy=False).reshape(src.shape)

    return apply_op(out, (x, src), backward, "IndexAdd")


def _index_add_(self: Tensor, dim: int, index, source: Tensor, *, alpha=1) -> Tensor:
    self._check_inplace("index_add_")
    return self._become(index_add(self, dim, index, source, alpha=alpha))


def pad_index_map(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """For F.pad's non-constant modes: the input position each output position
    reads along one dim (size + before + after of them)."""
    positions = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(positions, 0, size - 1)
    if mode == "circular":
        return np.mod(positions, size)
    period = 2 * (size - 1)  # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
    folded = np.mod(positions, period) if period else np.zeros_like(positions)
    return np.where(folded < size, folded, period - folded)


def pad_by_index(input: Tensor, widths: List[Tuple[int, int]], mode: str) -> Tensor:
    """input padded by reading positions (pad_index_map) along each dim;
    gradient: each output's gradient added back at the position it read."""
    x = input._data
    maps = [None if (a, b) == (0, 0) else pad_index_map(s, a, b, mode) for s, (a, b) in zip(x.shape, widths)]
    out = x
    for axis, m in enumerate(maps):
        if m is not None:
            out = np.take(out, m, axis=axis)

    def backward(g):
        for axis in reversed(range(len(maps))):
            m = maps[axis]
            if m is None:
                continue
            folded = np.zeros(g.shape[:axis] + (x.shape[axis],) + g.shape[axis + 1:], g.dtype)
            np.add.at(np.moveaxis(folded, axis, 0), m, np.moveaxis(g, axis, 0))
            g = folded
        return (g,)

    return apply_op(np.ascontiguousarray(out), (input,), backward, mode.capitalize() + "Pad")


def attach() -> None:
    """Install the methods on Tensor (called once by ``ctransformer``)."""
    Tensor.unique = unique
    Tensor.tensor_split = tensor_split
    Tensor.outer = Tensor.ger = outer
    Tensor.dot = dot
    Tensor.broadcast_to = broadcast_to
    Tensor.diff = diff
    Tensor.index_add = index_add
    Tensor.index_add_ = _index_add_

