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
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from .autograd import apply_op
from .tensor import Tensor, _norm_dim, int64

__all__ = ["unique", "tensor_split", "outer", "ger", "dot", "broadcast_to", "meshgrid", "diff", "index_add",
           "take_along_dim", "masked_scatter", "index_put", "diag", "diagonal", "trace", "movedim", "moveaxis",
           "vstack", "hstack"]


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


def take_along_dim(input: Tensor, indices: Tensor, dim: Optional[int] = None) -> Tensor:
    """input's values at ``indices`` along ``dim`` (both broadcast except along
    it); dim None: of the flattened input."""
    x = _as_tensor(input, "take_along_dim")
    idx = _as_tensor(indices, "take_along_dim", "indices")
    if dim is None:
        return x.reshape(-1).gather(0, idx.reshape(-1))
    d = _norm_dim(dim, x.dim(), "take_along_dim")
    if x.dim() != idx.dim():
        raise RuntimeError(f"take_along_dim(): input and indices should have the same number of dimensions, "
                           f"but got {x.dim()} dimensions for input, and {idx.dim()} dimensions for indices")
    shape = [max(a, b) for a, b in zip(x.shape, idx.shape)]
    x_shape, idx_shape = list(shape), list(shape)
    x_shape[d], idx_shape[d] = x.shape[d], idx.shape[d]
    return x.expand(*x_shape).gather(d, idx.expand(*idx_shape))


def masked_scatter(input: Tensor, mask, source: Tensor) -> Tensor:
    """input with the positions where ``mask`` (broadcast) is True filled, in
    order, by the first elements of ``source``.  Gradients: input where mask is
    False, source's first elements from the filled positions."""
    x = _as_tensor(input, "masked_scatter")
    src = _as_tensor(source, "masked_scatter", "source")
    m = np.broadcast_to(mask._data if isinstance(mask, Tensor) else np.asarray(mask), x.shape)
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_scatter_: expected BoolTensor for mask, got {m.dtype}")
    count = int(m.sum())
    if src.numel() < count:
        raise RuntimeError(f"masked_scatter: expected source to have at least {count} elements, got {src.numel()}")
    out = x._data.copy()
    out[m] = src._data.reshape(-1)[:count].astype(out.dtype, copy=False)

    def backward(g):
        gsrc = np.zeros(src.numel(), g.dtype)
        gsrc[:count] = g[m]
        return np.where(m, 0, g).astype(g.dtype), gsrc.reshape(src.shape)

    return apply_op(out, (x, src), backward, "MaskedScatter")


def _masked_scatter_(self: Tensor, mask, source: Tensor) -> Tensor:
    self._check_inplace("masked_scatter_")
    return self._become(masked_scatter(self, mask, source))


def index_put(input: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """A copy of input with ``input[indices] = values`` (``accumulate``: +=, repeated
    indices adding up).  Gradients: input except where overwritten; values from
    the indexed positions."""
    x = _as_tensor(input, "index_put")
    key = tuple(i._data if isinstance(i, Tensor) else i for i in indices)
    v = values if isinstance(values, Tensor) else Tensor._wrap(np.asarray(values, x._data.dtype))
    out = x._data.copy()
    vals = v._data.astype(out.dtype, copy=False)
    if accumulate:
        np.add.at(out, key, vals)
    else:
        out[key] = vals
    target_shape = np.empty(x.shape)[key].shape

    def backward(g):
        gx = g.copy()
        if not accumulate:
            gx[key] = 0
        gv = np.broadcast_to(g[key], target_shape)
        from .tensor import _sum_to
        return gx, _sum_to(np.ascontiguousarray(gv), v.shape).astype(v._data.dtype, copy=False)

    return apply_op(out, (x, v), backward, "IndexPut")


def _index_put_(self: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    self._check_inplace("index_put_")
    return self._become(index_put(self, indices, values, accumulate))


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the (dim1, dim2) planes, as the last dim; gradient back onto it."""
    x = _as_tensor(input, "diagonal")
    d1, d2 = _norm_dim(dim1, x.dim(), "diagonal"), _norm_dim(dim2, x.dim(), "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    data = x._data
    out = np.ascontiguousarray(np.diagonal(data, offset, d1, d2))

    def backward(g):
        grad = np.zeros_like(data)
        view = np.diagonal(grad, offset, d1, d2)
        view.setflags(write=True)
        view[...] = g
        return (grad,)

    return apply_op(out, (x,), backward, "Diagonal")


def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D input as the ``diagonal``-th diagonal of a square matrix; a 2-D input's diagonal."""
    x = _as_tensor(input, "diag")
    if x.dim() == 2:
        return globals()["diagonal"](x, diagonal)
    if x.dim() != 1:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.dim()}D")
    n = x.shape[0] + abs(diagonal)
    rows = np.arange(x.shape[0]) + max(-diagonal, 0)
    cols = np.arange(x.shape[0]) + max(diagonal, 0)
    out = np.zeros((n, n), x._data.dtype)
    out[rows, cols] = x._data
    return apply_op(out, (x,), lambda g: (g[rows, cols],), "Diag")


def trace(input: Tensor) -> Tensor:
    x = _as_tensor(input, "trace")
    if x.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.dim()}")
    return diagonal(x).sum()


def movedim(input: Tensor, source, destination) -> Tensor:
    """The dims ``source`` moved to ``destination`` (the others keep their order)."""
    x = _as_tensor(input, "movedim")
    if isinstance(source, int) != isinstance(destination, int):
        raise TypeError(f"movedim() received an invalid combination of arguments: source and destination must "
                        f"both be ints or both be sequences, got {type(source).__name__} and "
                        f"{type(destination).__name__}")
    src = [_norm_dim(s, x.dim(), "movedim") for s in np.atleast_1d(source).tolist()]
    dst = [_norm_dim(s, x.dim(), "movedim") for s in np.atleast_1d(destination).tolist()]
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) should contain the "
                           f"same number of dims as destination ({dst} dims)")
    order = [d for d in range(x.dim()) if d not in src]
    for s, t in sorted(zip(dst, src)):
        order.insert(s, t)
    return x.permute(*order)


moveaxis = movedim


def vstack(tensors) -> Tensor:
    """Rows stacked: 1-D tensors become rows, then joined along dim 0."""
    from .tensor import cat
    return cat([t.unsqueeze(0) if t.dim() < 2 else t for t in (t.reshape(-1) if t.dim() == 0 else t
                                                               for t in tensors)], 0)


def hstack(tensors) -> Tensor:
    """Joined along dim 1 (dim 0 for 1-D tensors)."""
    from .tensor import cat
    items = [t.reshape(-1) if t.dim() == 0 else t for t in tensors]
    return cat(items, 0 if items[0].dim() == 1 else 1)


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
    Tensor.take_along_dim = take_along_dim
    Tensor.masked_scatter = masked_scatter
    Tensor.masked_scatter_ = _masked_scatter_
    Tensor.index_put = index_put
    Tensor.index_put_ = _index_put_
    Tensor.diagonal = diagonal
    Tensor.diag = diag
    Tensor.trace = trace
    Tensor.movedim = Tensor.moveaxis = movedim

