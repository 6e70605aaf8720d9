"""Tensor methods and torch functions that real PyTorch scripts reach for
around their models: ``narrow`` (word_language_model's batchify),
``index_fill_``, ``scatter_add``, ``logsumexp``, ``roll``, ``nan_to_num``,
``stride``, ``einsum``.  Each is built from differentiable ops (or records
its own backward), so gradients flow as in torch.

``attach()`` installs the methods on :class:`Tensor`; ``ctransformer``
exports the functions.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np

from .autograd import apply_op
from .tensor import Tensor, _along_axis_key, _data_of, _norm_dim, tensor, where

__all__ = ["narrow", "index_fill", "scatter_add", "logsumexp", "roll", "nan_to_num", "einsum", "triu_indices",
           "tril_indices"]


def _int_arg(value, fn: str, name: str) -> int:
    if isinstance(value, Tensor):
        if value.numel() != 1 or value.dtype.kind not in "iu":
            raise TypeError(f"{fn}(): argument '{name}' must be int, not Tensor")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{fn}(): argument '{name}' must be int, not {type(value).__name__}")
    return int(value)


def narrow(input: Tensor, dim: int, start, length: int) -> Tensor:
    """The slice ``start:start+length`` of dimension ``dim`` (a view in torch;
    differentiable here)."""
    if input.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = _norm_dim(_int_arg(dim, "narrow", "dim"), input.dim(), "narrow")
    start = _int_arg(start, "narrow", "start")
    length = _int_arg(length, "narrow", "length")
    size = input.shape[d]
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
    if start < 0:
        start += size
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return input[(slice(None),) * d + (slice(start, start + length),)]


def _index_mask(input: Tensor, dim: int, index, fn: str) -> np.ndarray:
    d = _norm_dim(dim, input.dim(), fn) if input.dim() else 0
    idx = _data_of(index)
    if idx.dtype.kind not in "iu":
        raise IndexError(f"{fn}(): Expected a long tensor for index, but got {idx.dtype}")
    if idx.ndim > 1:
        raise IndexError(f"{fn}(): Index is supposed to be a vector")
    n = input.shape[d] if input.dim() else 1
    flat = idx.reshape(-1)
    if flat.size and (flat.min() < -n or flat.max() >= n):
        bad = flat[(flat < -n) | (flat >= n)][0]
        raise IndexError(f"index {bad} is out of bounds for dimension {d} with size {n}")
    hit = np.zeros(n, bool)
    hit[flat % n if n else flat] = True
    shape = [1] * max(input.dim(), 1)
    shape[d] = n
    return np.broadcast_to(hit.reshape(shape), input.shape if input.dim() else (1,)).reshape(input.shape)


def index_fill(input: Tensor, dim: int, index, value) -> Tensor:
    """A copy of ``input`` with the entries at ``index`` along ``dim`` set to ``value``."""
    if isinstance(value, Tensor) and value.dim() != 0:
        raise IndexError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                         f"{value.dim()} dimension(s).")
    return input.masked_fill(tensor(_index_mask(input, dim, index, "index_fill")), value)


def _index_fill_(self: Tensor, dim: int, index, value) -> Tensor:
    if isinstance(value, Tensor) and value.dim() != 0:
        raise IndexError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                         f"{value.dim()} dimension(s).")
    return self.masked_fill_(tensor(_index_mask(self, dim, index, "index_fill_")), value)


def scatter_add(input: Tensor, dim: int, index, src: Tensor) -> Tensor:
    """``out = input.clone(); out[index[i][j]][j] += src[i][j]`` (dim 0), etc.
    Differentiable in ``input`` and ``src``."""
    x = input._data
    d = _norm_dim(dim, x.ndim, "scatter_add")
    idx = _data_of(index)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"scatter_add(): Expected dtype int64 for index, got {idx.dtype}")
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_add(): argument 'src' must be Tensor, not {type(src).__name__}")
    s = src._data
    if idx.ndim != x.ndim or s.ndim != x.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if any(i > ss for i, ss in zip(idx.shape, s.shape)) or \
            any(i > xs for k, (i, xs) in enumerate(zip(idx.shape, x.shape)) if k != d):
        raise RuntimeError(f"Expected index {list(idx.shape)} to be smaller than self {list(x.shape)} apart "
                           f"from dimension {d} and to be smaller size than src {list(s.shape)}")
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[d]):
        raise RuntimeError(f"index {int(idx.max() if idx.max() >= x.shape[d] else idx.min())} is out of bounds "
                           f"for dimension {d} with size {x.shape[d]}")
    key = _along_axis_key(idx, d)
    src_part = s[tuple(slice(0, n) for n in idx.shape)]
    out = x.copy()
    np.add.at(out, key, src_part.astype(out.dtype, copy=False))

    def backward(g):
        gs = np.zeros_like(s)
        gs[tuple(slice(0, n) for n in idx.shape)] = g[key]
        return g, gs

    return apply_op(out, (input, src), backward, "ScatterAdd")


def _scatter_add_(self: Tensor, dim: int, index, src: Tensor) -> Tensor:
    self._check_inplace("scatter_add_")
    return self._become(scatter_add(self, dim, index, src))


def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    """log(sum(exp(input), dim)), computed stably."""
    if input.dtype.kind not in "fc":
        input = input.float()
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = tuple(_norm_dim(d, input.dim(), "logsumexp") for d in dims) if input.dim() else ()
    peak = np.max(input._data, axis=axes, keepdims=True) if input._data.size else np.zeros(
        [1 if i in axes else n for i, n in enumerate(input.shape)], input.dtype)
    m = Tensor._wrap(np.where(np.isfinite(peak), peak, 0).astype(input.dtype))
    out = input - m
    for d in axes:
        out = out.exp().sum(d, keepdim=True) if d == axes[0] else out.sum(d, keepdim=True)
    out = out.log() + m if axes else (input - m).exp().log() + m
    if not keepdim:
        for d in sorted(axes, reverse=True):
            out = out.squeeze(d)
    return out


def roll(input: Tensor, shifts: Union[int, Sequence[int]], dims: Union[int, Sequence[int], None] = None) -> Tensor:
    """Shift elements along ``dims`` (wrapping around); without ``dims`` the
    flattened tensor is rolled and the shape restored."""
    if dims is None:
        if not isinstance(shifts, int):
            if len(shifts) != 1:
                raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims:0")
            shifts = shifts[0]
        return roll(input.flatten(), shifts, 0).view(input.shape)
    shifts_t = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims_t = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts_t) != len(dims_t):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts_t)}, dims:{len(dims_t)}")
    out = input
    for s, d in zip(shifts_t, dims_t):
        d = _norm_dim(d, input.dim(), "roll")
        n = input.shape[d]
        if n == 0:
            continue
        order = (np.arange(n) - int(s)) % n
        out = out.index_select(d, tensor(order))
    return out


def nan_to_num(input: Tensor, nan: float = 0.0, posinf: Optional[float] = None,
               neginf: Optional[float] = None) -> Tensor:
    """NaN -> ``nan``, +inf -> ``posinf`` (default: the dtype's max), -inf ->
    ``neginf`` (default: its min); gradient 1 where the input was finite, 0 elsewhere."""
    x = input._data
    if x.dtype.kind not in "fc":
        return input.clone()
    fixed = np.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)
    return where(input.isfinite(), input, tensor(fixed))


def _stride(self: Tensor, dim: Optional[int] = None) -> Union[int, Tuple[int, ...]]:
    """Strides in elements, of the (C-contiguous) layout torch would give this tensor."""
    strides, step = [], 1
    for d in reversed(self.shape):
        strides.append(step)
        step *= max(int(d), 1)
    out = tuple(reversed(strides))
    if dim is None:
        return out
    return out[_norm_dim(dim, self.dim(), "stride")]


def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation (``torch.einsum``), differentiable in every operand:
    the gradient of operand k is the einsum of the output gradient with the
    other operands onto k's subscripts."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): argument 'equation' must be str, not {type(equation).__name__}")
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    if not all(isinstance(t, Tensor) for t in operands):
        raise TypeError("einsum(): operands must be Tensors")
    eq = equation.replace(" ", "")
    if "..." in eq:
        raise NotImplementedError("einsum: ellipsis ('...') is not supported here; write the dimensions out")
    lhs, _, rhs = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise ValueError("einsum(): more operands were provided than specified in the equation"
                         if len(operands) > len(ins) else "einsum(): fewer operands were provided than specified "
                         "in the equation")
    if not _:
        counts = {}
        for c in "".join(ins):
            counts[c] = counts.get(c, 0) + 1
        rhs = "".join(sorted(c for c, k in counts.items() if k == 1))
    for sub, t in zip(ins, operands):
        if len(sub) != t.dim():
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(sub)}) does not match "
                               f"the number of dimensions ({t.dim()}) for operand {operands.index(t)}")
    arrays = [t._data for t in operands]
    dtype = np.result_type(*arrays)
    out = np.einsum(f"{','.join(ins)}->{rhs}", *arrays).astype(dtype, copy=False)

    def backward(g):
        grads = []
        for k, (sub, a) in enumerate(zip(ins, arrays)):
            others = [s for j, s in enumerate(ins) if j != k]
            other_arrays = [arr for j, arr in enumerate(arrays) if j != k]
            present = set(rhs).union(*others) if others else set(rhs)
            # subscripts of k summed away alone (not in output nor other operands): broadcast back
            keep = "".join(c for c in dict.fromkeys(sub) if c in present)
            gk = np.einsum(f"{','.join([rhs] + others)}->{keep}", g, *other_arrays)
            full = np.zeros(a.shape, dtype=np.result_type(gk.dtype, a.dtype))
            # place gk on k's layout (repeated subscripts = diagonals)
            target = np.einsum(f"{sub}->{keep}", full)  # a writable diagonal view where possible
            if len(set(sub)) == len(sub):
                expand = tuple(None if c not in keep else slice(None) for c in sub)
                order = [keep.index(c) for c in sub if c in keep]
                full[...] = np.transpose(gk, order)[expand] if order else gk
            else:
                target[...] = gk
            grads.append(full.astype(a.dtype, copy=False))
        return tuple(grads)

    return apply_op(out, tuple(operands), backward, "Einsum")


def _tri_indices(fn: str, np_fn, row: int, col: int, offset: int, dtype) -> Tensor:
    for name, v in (("row", row), ("col", col), ("offset", offset)):
        _int_arg(v, fn, name)
    if row < 0 or col < 0:
        raise RuntimeError(f"{fn}: row and col must be non-negative, got row={row} col={col}")
    r, c = np_fn(row, offset, col)
    from .tensor import _as_dtype, int64
    return Tensor._wrap(np.stack([r, c]).astype(_as_dtype(dtype) or int64))


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None) -> Tensor:
    """The (2, N) coordinates of the upper triangle of a row x col matrix (torch.triu_indices)."""
    return _tri_indices("triu_indices", np.triu_indices, row, col, offset, dtype)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None) -> Tensor:
    """The (2, N) coordinates of the lower triangle of a row x col matrix (torch.tril_indices)."""
    return _tri_indices("tril_indices", np.tril_indices, row, col, offset, dtype)


def _data_ptr(self: Tensor) -> int:
    """The address of the tensor's first element (its NumPy buffer)."""
    return int(self._data.__array_interface__["data"][0])


def attach() -> None:
    """Install the methods on Tensor (called once by ``ctransformer``)."""
    Tensor.narrow = narrow
    Tensor.index_fill = index_fill
    Tensor.index_fill_ = _index_fill_
    Tensor.scatter_add = scatter_add
    Tensor.scatter_add_ = _scatter_add_
    Tensor.logsumexp = logsumexp
    Tensor.roll = roll
    Tensor.nan_to_num = nan_to_num
    Tensor.stride = _stride
    Tensor.data_ptr = _data_ptr
