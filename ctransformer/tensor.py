"""Tensor: a NumPy array with autograd, speaking PyTorch's API.

Elementwise arithmetic, reshapes and reductions run in NumPy (they are
memory-bound and NumPy's loops are already C); every layer's maths
(matmul, softmax, layer norm, attention, recurrences, losses, ...) runs in
our kernels (``ctransformer.kernels``).  The storage is ``t._data``; torch's
``t.data`` is a Tensor sharing it, without history.
"""
from __future__ import annotations

import numbers
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import kernels as K
from .autograd import _grad_enabled, apply_op, is_grad_enabled, no_grad, run_backward

# ---------------------------------------------------------------- dtypes
float32 = float_ = np.dtype(np.float32)
float64 = double = np.dtype(np.float64)
float16 = half = np.dtype(np.float16)
int64 = long = np.dtype(np.int64)
int32 = int_ = np.dtype(np.int32)
int16 = short = np.dtype(np.int16)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)

_default_dtype = float32


def set_default_dtype(d) -> None:
    global _default_dtype
    _default_dtype = np.dtype(d)


def get_default_dtype() -> np.dtype:
    return _default_dtype


def _as_dtype(d) -> np.dtype:
    if d is None:
        return None
    if d is float:
        return _default_dtype
    if d is int:
        return int64
    if d is bool:
        return bool_
    return np.dtype(d)


class Size(tuple):
    """torch.Size: a tuple of ints."""

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"ctransformer.Size({list(self)})"


class device:
    """Only the CPU exists here; asking for CUDA is a clear error."""

    def __init__(self, type: Union[str, "device"] = "cpu", index: Optional[int] = None) -> None:
        name = type.type if isinstance(type, device) else str(type)
        base = name.split(":")[0]
        if base not in ("cpu",):
            raise RuntimeError(f"device: ctransformer runs on the CPU only, got device {name!r} "
                               "(ctransformer.cuda.is_available() is False)")
        self.type = "cpu"
        self.index = index

    def __eq__(self, other) -> bool:
        return isinstance(other, (device, str)) and str(other).split(":")[0] == "cpu"

    def __hash__(self) -> int:
        return hash("cpu")

    def __repr__(self) -> str:
        return "device(type='cpu')"

    def __str__(self) -> str:
        return "cpu"


_cpu = device("cpu")


def _unbroadcast(g: np.ndarray, shape: Tuple[int, ...]) -> np.ndarray:
    """Sum a gradient of a broadcast result back to the operand's shape."""
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


def _norm_dim(dim: int, ndim: int, fn: str = "dim") -> int:
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"{fn}: dimension out of range (expected to be in range of "
                         f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {dim})")
    return dim % max(ndim, 1)


def _index_to_numpy(idx):
    if isinstance(idx, Tensor):
        return idx._data
    if isinstance(idx, tuple):
        return tuple(i._data if isinstance(i, Tensor) else i for i in idx)
    if isinstance(idx, list):
        return np.asarray([i.item() if isinstance(i, Tensor) else i for i in idx])
    return idx


def _is_basic_index(idx) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(isinstance(i, (int, np.integer, slice)) or i is None or i is Ellipsis for i in items)


class Tensor:
    """An n-dimensional array with autograd (torch.Tensor's API, CPU only)."""

    __slots__ = ("_data", "requires_grad", "grad", "_node", "_idx", "_retain", "__weakref__")
    __array_priority__ = 1000  # numpy defers to our operators

    def __init__(self, data: Any = None, requires_grad: bool = False, dtype=None) -> None:
        if data is None:
            data = np.zeros((0,), _default_dtype)
        arr = _to_array(data, _as_dtype(dtype))
        self._data = arr
        self.requires_grad = False
        self.grad = None
        self._node = None
        self._idx = 0
        self._retain = False
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _wrap(cls, arr: np.ndarray, requires_grad: bool = False) -> "Tensor":
        t = cls.__new__(cls)
        t._data = arr
        t.requires_grad = requires_grad
        t.grad = None
        t._node = None
        t._idx = 0
        t._retain = False
        return t

    # ------------------------------------------------------------ basics
    @property
    def data(self) -> "Tensor":
        """A Tensor sharing this storage, outside the graph (torch's .data)."""
        return Tensor._wrap(self._data)

    @data.setter
    def data(self, value) -> None:
        self._data = value._data if isinstance(value, Tensor) else np.asarray(value)

    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: Optional[int] = None):
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[_norm_dim(dim, self._data.ndim, "size")]

    def dim(self) -> int:
        return self._data.ndim

    ndimension = dim

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return self._data.size

    nelement = numel

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def device(self) -> device:
        return _cpu

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self):
        return self._node

    @property
    def is_cuda(self) -> bool:
        return False

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self._data.size} values is ambiguous")
        return bool(self._data.reshape(-1)[0])

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self._data.reshape(-1)[0])

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)

    def __repr__(self) -> str:
        body = np.array2string(self._data, separator=", ", prefix="tensor(", precision=4)
        extras = []
        if self._data.dtype not in (_default_dtype, int64, bool_):
            extras.append(f"dtype={self._data.dtype}")
        if self._node is not None:
            extras.append(f"grad_fn=<{self._node.name or 'Op'}Backward>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    __str__ = __repr__

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self._data, self.requires_grad))

    def __deepcopy__(self, memo):
        t = type(self).__new__(type(self))
        t._data = self._data.copy()
        t.requires_grad = self.requires_grad
        t.grad = None if self.grad is None else Tensor._wrap(self.grad._data.copy())
        t._node = None
        t._idx = 0
        t._retain = False
        memo[id(self)] = t
        return t

    def item(self):
        if self._data.size != 1:
            raise ValueError(f"item: only one element tensors can be converted to Python scalars, "
                             f"got {self._data.size} elements")
        return self._data.reshape(-1)[0].item()

    def tolist(self):
        return self._data.tolist()

    def numpy(self) -> np.ndarray:
        if self.requires_grad and is_grad_enabled() and self._node is not None:
            pass  # torch raises; we allow reading values of non-leaves
        return self._data

    # ------------------------------------------------------------ autograd
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and self._data.dtype.kind not in "fc":
            raise RuntimeError(f"requires_grad_: only floating point tensors can require "
                               f"gradients, got dtype {self._data.dtype}")
        if not requires_grad and self._node is not None:
            raise RuntimeError("requires_grad_: you can only change requires_grad flags of leaf variables")
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self) -> None:
        self._retain = True

    def backward(self, gradient: Optional["Tensor"] = None, retain_graph: Optional[bool] = None,
                 create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``."""
        if not self.requires_grad:
            raise RuntimeError("backward: element 0 of tensors does not require grad and does not have a grad_fn")
        if gradient is None:
            if self._data.size != 1:
                raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, "
                                   f"got shape {tuple(self._data.shape)}")
            g = np.ones_like(self._data)
        else:
            g = gradient._data if isinstance(gradient, Tensor) else np.asarray(gradient, self._data.dtype)
            if g.shape != self._data.shape:
                raise RuntimeError(f"backward: gradient has shape {tuple(g.shape)}, "
                                   f"expected {tuple(self._data.shape)}")
        with no_grad():
            run_backward(self, g)

    def detach(self) -> "Tensor":
        return Tensor._wrap(self._data)

    def detach_(self) -> "Tensor":
        self._node = None
        self.requires_grad = False
        return self

    def clone(self, memory_format=None) -> "Tensor":
        return apply_op(self._data.copy(), (self,), lambda g: (g,), "Clone")

    def zero_(self) -> "Tensor":
        return self._inplace_fill(0)

    def fill_(self, value) -> "Tensor":
        return self._inplace_fill(value.item() if isinstance(value, Tensor) else value)

    def _inplace_fill(self, value) -> "Tensor":
        self._check_inplace("fill_")
        if self._tracked_inplace():
            self._rebase(np.full_like(self._data, value), (), lambda g: ())
        else:
            self._data[...] = value
        return self

    def copy_(self, src, non_blocking: bool = False) -> "Tensor":
        src_t = src if isinstance(src, Tensor) else Tensor(src)
        self._check_inplace("copy_")
        if self._tracked_inplace() or (src_t.requires_grad and is_grad_enabled()):
            shape = self._data.shape
            new = np.broadcast_to(src_t._data, shape).astype(self._data.dtype, copy=True)
            self._rebase(new, (src_t,), lambda g: (_unbroadcast(g, src_t._data.shape),), keep_old=False)
        else:
            self._data[...] = src_t._data
        return self

    def _check_inplace(self, name: str) -> None:
        if self.requires_grad and self._node is None and is_grad_enabled():
            raise RuntimeError(f"{name}: a leaf Variable that requires grad is being used in an in-place "
                               "operation (wrap it in ctransformer.no_grad())")

    def _tracked_inplace(self) -> bool:
        return is_grad_enabled() and self.requires_grad

    def _rebase(self, new_data: np.ndarray, others: tuple, backward, keep_old: bool = True) -> None:
        """Make self the output of an in-place op.  The old self becomes a
        parent (first, if keep_old); ``backward(g)`` returns grads for
        (old self,) + others, or for others only when keep_old is False."""
        old = Tensor._wrap(self._data, self.requires_grad)
        old._node, old._idx = self._node, self._idx
        parents = ((old,) if keep_old else ()) + tuple(others)
        res = apply_op(new_data, parents, backward, "Inplace")
        self._data = res._data
        self._node, self._idx = res._node, res._idx
        self.requires_grad = res.requires_grad

    # ------------------------------------------------------------ dtype / device
    def to(self, *args, **kwargs) -> "Tensor":
        dtype = kwargs.get("dtype")
        for a in list(args) + [kwargs.get("device")]:
            if a is None:
                continue
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (str, device)):
                device(a)  # validates: raises for CUDA
            else:
                dtype = a
        return self if dtype is None else self.type(dtype)

    def cpu(self) -> "Tensor":
        return self

    def cuda(self, *args, **kwargs) -> "Tensor":
        device("cuda")
        return self

    def type(self, dtype=None):
        if dtype is None:
            return str(self._data.dtype)
        d = _as_dtype(dtype if not isinstance(dtype, str) else _TYPE_NAMES.get(dtype, dtype))
        if d == self._data.dtype:
            return self
        src = self._data.dtype
        if d.kind == "f" and src.kind == "f":
            return apply_op(self._data.astype(d), (self,), lambda g: (g.astype(src),), "ToCopy")
        return Tensor._wrap(self._data.astype(d))

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.type(other.dtype)

    def float(self) -> "Tensor":
        return self.type(float32)

    def double(self) -> "Tensor":
        return self.type(float64)

    def half(self) -> "Tensor":
        return self.type(float16)

    def long(self) -> "Tensor":
        return self.type(int64)

    def int(self) -> "Tensor":
        return self.type(int32)

    def bool(self) -> "Tensor":
        return self.type(bool_)

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f"

    # ------------------------------------------------------------ arithmetic
    def _binary(self, other, fwd, bwd_self, bwd_other, name, reverse=False):
        if isinstance(other, Tensor):
            o = other._data
        else:
            o = _scalar_or_array(other, self._data.dtype)
        a, b = (o, self._data) if reverse else (self._data, o)
        out = fwd(a, b)
        if out.dtype == np.float64 and self._data.dtype != np.float64 and not (
                isinstance(other, Tensor) and other._data.dtype == np.float64):
            out = out.astype(_default_dtype)
        other_t = other if isinstance(other, Tensor) else None
        if not (_grad_enabled[0] and (self.requires_grad or (other_t is not None and other_t.requires_grad))):
            return Tensor._wrap(out)
        xs, ys = a.shape, b.shape

        def backward(g):
            ga = _unbroadcast(bwd_self(g, a, b, out), xs) if bwd_self else None
            gb = _unbroadcast(bwd_other(g, a, b, out), ys) if bwd_other else None
            return (gb, ga) if reverse else (ga, gb)

        return apply_op(out, (self, other_t), backward, name)

    def __add__(self, other):
        return self._binary(other, np.add, _g_id, _g_id, "Add")

    __radd__ = __add__

    def add(self, other, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def __sub__(self, other):
        return self._binary(other, np.subtract, _g_id, _g_neg, "Sub")

    def __rsub__(self, other):
        return self._binary(other, np.subtract, _g_id, _g_neg, "Sub", reverse=True)

    sub = __sub__

    def __mul__(self, other):
        return self._binary(other, np.multiply, lambda g, a, b, o: g * b, lambda g, a, b, o: g * a, "Mul")

    __rmul__ = __mul__
    mul = __mul__

    def __truediv__(self, other):
        return self._binary(other, _true_divide, lambda g, a, b, o: g / b, lambda g, a, b, o: -g * o / b, "Div")

    def __rtruediv__(self, other):
        return self._binary(other, _true_divide, lambda g, a, b, o: g / b, lambda g, a, b, o: -g * o / b, "Div",
                            reverse=True)

    div = __truediv__

    def __floordiv__(self, other):
        o = other._data if isinstance(other, Tensor) else other
        return Tensor._wrap(np.floor_divide(self._data, o))

    def __mod__(self, other):
        o = other._data if isinstance(other, Tensor) else other
        return Tensor._wrap(np.mod(self._data, o))

    def __pow__(self, other):
        return self._binary(other, np.power, lambda g, a, b, o: g * b * np.power(a, b - 1),
                            lambda g, a, b, o: g * o * np.log(np.where(a > 0, a, 1)), "Pow")

    def __rpow__(self, other):
        return self._binary(other, np.power, lambda g, a, b, o: g * b * np.power(a, b - 1),
                            lambda g, a, b, o: g * o * np.log(np.where(a > 0, a, 1)), "Pow", reverse=True)

    pow = __pow__

    def __neg__(self):
        return apply_op(-self._data, (self,), lambda g: (-g,), "Neg")

    neg = __neg__

    def __pos__(self):
        return self

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other if isinstance(other, Tensor) else Tensor(other), self)

    matmul = __matmul__

    # in-place arithmetic: autograd-aware
    def _inplace_binary(self, other, op_name):
        self._check_inplace(op_name)
        result = getattr(self, op_name)(other)
        if result.requires_grad:
            if result._data.dtype != self._data.dtype:
                result = result.type(self._data.dtype)
            # self becomes the result node
            self._data, self._node, self._idx = result._data, result._node, result._idx
            self.requires_grad = True
        else:
            np.copyto(self._data, result._data, casting="same_kind") if self._data.flags.writeable else None
            if not self._data.flags.writeable:
                self._data = result._data
        return self

    def __iadd__(self, other):
        return self._inplace_binary(other, "__add__")

    def __isub__(self, other):
        return self._inplace_binary(other, "__sub__")

    def __imul__(self, other):
        return self._inplace_binary(other, "__mul__")

    def __itruediv__(self, other):
        return self._inplace_binary(other, "__truediv__")

    def add_(self, other, alpha=1):
        return self._inplace_binary(other * alpha if alpha != 1 else other, "__add__")

    def sub_(self, other, alpha=1):
        return self._inplace_binary(other * alpha if alpha != 1 else other, "__sub__")

    def mul_(self, other):
        return self._inplace_binary(other, "__mul__")

    def div_(self, other):
        return self._inplace_binary(other, "__truediv__")

    # comparisons and logic: no gradient
    def _compare(self, other, fn):
        o = other._data if isinstance(other, Tensor) else other
        return Tensor._wrap(fn(self._data, o))

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

    def __and__(self, other):
        return self._compare(other, np.logical_and if self._data.dtype == bool_ else np.bitwise_and)

    def __or__(self, other):
        return self._compare(other, np.logical_or if self._data.dtype == bool_ else np.bitwise_or)

    def __xor__(self, other):
        return self._compare(other, np.logical_xor if self._data.dtype == bool_ else np.bitwise_xor)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        return Tensor._wrap(np.logical_not(self._data) if self._data.dtype == bool_ else np.invert(self._data))

    logical_not = __invert__

    def equal(self, other) -> bool:
        return self.shape == other.shape and bool(np.array_equal(self._data, other._data))

    def allclose(self, other, rtol=1e-5, atol=1e-8) -> bool:
        return bool(np.allclose(self._data, other._data, rtol=rtol, atol=atol))

    def any(self, dim=None, keepdim=False):
        return Tensor._wrap(np.any(self._data, axis=dim, keepdims=keepdim))

    def all(self, dim=None, keepdim=False):
        return Tensor._wrap(np.all(self._data, axis=dim, keepdims=keepdim))

    # ------------------------------------------------------------ elementwise
    def _unary(self, out, grad_fn, name):
        return apply_op(out, (self,), lambda g: (grad_fn(g, out),), name)

    def exp(self):
        return self._unary(np.exp(self._data), lambda g, o: g * o, "Exp")

    def log(self):
        x = self._data
        return self._unary(np.log(x), lambda g, o: g / x, "Log")

    def sqrt(self):
        return self._unary(np.sqrt(self._data), lambda g, o: g / (2 * o), "Sqrt")

    def rsqrt(self):
        return self._unary(1 / np.sqrt(self._data), lambda g, o: -0.5 * g * o * o * o, "Rsqrt")

    def abs(self):
        x = self._data
        return self._unary(np.abs(x), lambda g, o: g * np.sign(x), "Abs")

    def sin(self):
        x = self._data
        return self._unary(np.sin(x), lambda g, o: g * np.cos(x), "Sin")

    def cos(self):
        x = self._data
        return self._unary(np.cos(x), lambda g, o: -g * np.sin(x), "Cos")

    def tanh(self):
        return _activation(self, "tanh")

    def sigmoid(self):
        return _activation(self, "sigmoid")

    def relu(self):
        return _activation(self, "relu")

    def clamp(self, min=None, max=None):
        x = self._data
        out = np.clip(x, min, max)
        keep = np.ones(x.shape, bool)
        if min is not None:
            keep &= x >= min
        if max is not None:
            keep &= x <= max
        return self._unary(out, lambda g, o: g * keep, "Clamp")

    clip = clamp

    def masked_fill(self, mask, value) -> "Tensor":
        """Where ``mask`` (bool, broadcastable) is True, take ``value``."""
        m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
        if m.dtype != bool_:
            raise TypeError(f"masked_fill: mask must have dtype bool, got {m.dtype} "
                            "(write mask == 0 or mask.bool())")
        v = value.item() if isinstance(value, Tensor) else value
        out = np.where(m, np.asarray(v, self._data.dtype), self._data)
        shape = self._data.shape
        if out.shape != shape:
            raise RuntimeError(f"masked_fill: mask of shape {tuple(m.shape)} does not broadcast "
                               f"to the tensor's shape {tuple(shape)}")
        return apply_op(out, (self,), lambda g: (np.where(m, 0, g),), "MaskedFill")

    def masked_fill_(self, mask, value) -> "Tensor":
        self._check_inplace("masked_fill_")
        if self._tracked_inplace():
            res = self.masked_fill(mask, value)
            self._data, self._node, self._idx = res._data, res._node, res._idx
        else:
            m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
            if m.dtype != bool_:
                raise TypeError(f"masked_fill_: mask must have dtype bool, got {m.dtype}")
            np.copyto(self._data, np.asarray(value.item() if isinstance(value, Tensor) else value,
                                             self._data.dtype), where=np.broadcast_to(m, self._data.shape))
        return self

    def where(self, condition, other):
        return where(condition, self, other)

    # ------------------------------------------------------------ reductions
    def sum(self, dim=None, keepdim: bool = False, dtype=None):
        x = self._data
        axis = _axes(dim, x.ndim)
        out = np.sum(x, axis=axis, keepdims=keepdim)
        if dtype is not None:
            out = out.astype(_as_dtype(dtype))
        elif x.dtype == bool_ or x.dtype.kind in "iu":
            out = out.astype(int64)
        out = np.asarray(out)
        shape = x.shape

        def backward(g):
            if not keepdim and axis is not None:
                g = np.expand_dims(g, axis)
            return (np.broadcast_to(g, shape).astype(x.dtype),)

        return apply_op(out, (self,), backward, "Sum")

    def mean(self, dim=None, keepdim: bool = False, dtype=None):
        x = self._data
        if x.dtype.kind not in "fc" and dtype is None:
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be floating point, "
                               f"got {x.dtype}")
        axis = _axes(dim, x.ndim)
        out = np.asarray(np.mean(x, axis=axis, keepdims=keepdim))
        n = x.size // max(out.size, 1) if x.size else 0
        shape = x.shape

        def backward(g):
            if not keepdim and axis is not None:
                g = np.expand_dims(g, axis)
            return (np.broadcast_to(g / max(n, 1), shape).astype(x.dtype),)

        return apply_op(out.astype(x.dtype), (self,), backward, "Mean")

    def var(self, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, correction=None):
        c = 1 if (unbiased is None and correction is None) else (
            correction if correction is not None else int(bool(unbiased)))
        axis = _axes(dim, self._data.ndim)
        n = self._data.size if axis is None else int(np.prod([self._data.shape[a] for a in axis]))
        mu = self.mean(dim=dim, keepdim=True)
        d = self - mu
        return (d * d).sum(dim=dim, keepdim=keepdim) / max(n - c, 0) if n - c > 0 else \
            (d * d).sum(dim=dim, keepdim=keepdim) * float("nan")

    def std(self, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, correction=None):
        return self.var(dim=dim, unbiased=unbiased, keepdim=keepdim, correction=correction).sqrt()

    def _minmax(self, dim, keepdim, np_arg, np_red, name):
        x = self._data
        if dim is None:
            out = np.asarray(np_red(x))
            flat_idx = np_arg(x.reshape(-1))

            def backward(g):
                grad = np.zeros(x.size, x.dtype)
                grad[flat_idx] = g
                return (grad.reshape(x.shape),)

            return apply_op(out, (self,), backward, name)
        d = _norm_dim(dim, x.ndim, name.lower())
        idx = np.expand_dims(np_arg(x, axis=d), d)
        vals = np.take_along_axis(x, idx, axis=d)

        def backward(g):
            grad = np.zeros_like(x)
            np.put_along_axis(grad, idx, g if keepdim else np.expand_dims(g, d), axis=d)
            return (grad,)

        values = apply_op(vals if keepdim else np.squeeze(vals, d), (self,), backward, name)
        indices = Tensor._wrap((idx if keepdim else np.squeeze(idx, d)).astype(int64))
        return _MinMax(values, indices)

    def max(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):
            return maximum(self, dim)
        return self._minmax(dim, keepdim, np.argmax, np.max, "Max")

    def min(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):
            return minimum(self, dim)
        return self._minmax(dim, keepdim, np.argmin, np.min, "Min")

    def argmax(self, dim=None, keepdim: bool = False):
        x = self._data
        if dim is None:
            return Tensor._wrap(np.asarray(np.argmax(x), dtype=int64))
        out = np.argmax(x, axis=dim)
        return Tensor._wrap((np.expand_dims(out, dim) if keepdim else out).astype(int64))

    def argmin(self, dim=None, keepdim: bool = False):
        x = self._data
        if dim is None:
            return Tensor._wrap(np.asarray(np.argmin(x), dtype=int64))
        out = np.argmin(x, axis=dim)
        return Tensor._wrap((np.expand_dims(out, dim) if keepdim else out).astype(int64))

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
        x = self._data
        d = _norm_dim(dim, x.ndim, "topk")
        order = np.argsort(-x if largest else x, axis=d, kind="stable")
        idx = np.take(order, np.arange(k), axis=d)
        vals = np.take_along_axis(x, idx, axis=d)

        def backward(g):
            grad = np.zeros_like(x)
            np.put_along_axis(grad, idx, g, axis=d)
            return (grad,)

        return _MinMax(apply_op(vals, (self,), backward, "Topk"), Tensor._wrap(idx.astype(int64)))

    def softmax(self, dim: int = -1):
        return _softmax(self, dim, log=False)

    def log_softmax(self, dim: int = -1):
        return _softmax(self, dim, log=True)

    def norm(self, p=2, dim=None, keepdim=False):
        if p == 2:
            return (self * self).sum(dim=dim, keepdim=keepdim).sqrt()
        return (self.abs() ** p).sum(dim=dim, keepdim=keepdim) ** (1.0 / p)

    # ------------------------------------------------------------ shape
    def view(self, *shape) -> "Tensor":
        shape = _shape_args(shape)
        x = self._data
        old = x.shape
        try:
            out = x.reshape(shape)
        except ValueError:
            raise RuntimeError(f"view: shape {list(shape)} is invalid for input of size {x.size}") from None
        return apply_op(out, (self,), lambda g: (g.reshape(old),), "View")

    reshape = view

    def view_as(self, other: "Tensor") -> "Tensor":
        return self.view(other.shape)

    reshape_as = view_as

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        nd = self._data.ndim
        if nd == 0:
            return self.view(1)
        s, e = _norm_dim(start_dim, nd), _norm_dim(end_dim, nd)
        shp = self._data.shape
        return self.view(shp[:s] + (-1,) + shp[e + 1:])

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        nd = self._data.ndim
        perm = list(range(nd))
        a, b = _norm_dim(dim0, nd, "transpose"), _norm_dim(dim1, nd, "transpose")
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(*perm)

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
        dims = tuple(_norm_dim(d, self._data.ndim, "permute") for d in _shape_args(dims))
        if sorted(dims) != list(range(self._data.ndim)):
            raise RuntimeError(f"permute: dims {dims} are not a permutation of {self._data.ndim} dimensions")
        inv = tuple(np.argsort(dims))
        return apply_op(self._data.transpose(dims), (self,), lambda g: (g.transpose(inv),), "Permute")

    def contiguous(self, memory_format=None) -> "Tensor":
        if self._data.flags.c_contiguous:
            return self
        return apply_op(np.ascontiguousarray(self._data), (self,), lambda g: (g,), "Contiguous")

    def is_contiguous(self) -> bool:
        return bool(self._data.flags.c_contiguous)

    def unsqueeze(self, dim: int) -> "Tensor":
        nd = self._data.ndim + 1
        d = _norm_dim(dim, nd, "unsqueeze")
        old = self._data.shape
        return apply_op(np.expand_dims(self._data, d), (self,), lambda g: (g.reshape(old),), "Unsqueeze")

    def squeeze(self, dim=None) -> "Tensor":
        x = self._data
        old = x.shape
        if dim is None:
            out = x.squeeze()
        else:
            dims = dim if isinstance(dim, (tuple, list)) else (dim,)
            ds = tuple(_norm_dim(d, x.ndim, "squeeze") for d in dims)
            ds = tuple(d for d in ds if x.shape[d] == 1)
            out = x.squeeze(ds) if ds else x
        return apply_op(out, (self,), lambda g: (g.reshape(old),), "Squeeze")

    def expand(self, *sizes) -> "Tensor":
        sizes = _shape_args(sizes)
        x = self._data
        lead = len(sizes) - x.ndim
        target = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
        old = x.shape
        return apply_op(np.broadcast_to(x, target), (self,), lambda g: (_unbroadcast(g, old),), "Expand")

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(other.shape)

    def repeat(self, *sizes) -> "Tensor":
        sizes = _shape_args(sizes)
        x = self._data
        xs = x.reshape((1,) * (len(sizes) - x.ndim) + x.shape)
        out = np.tile(xs, sizes)
        shape = xs.shape

        def backward(g):
            split = []
            for r, s in zip(sizes, shape):
                split += [r, s]
            return (g.reshape(split).sum(axis=tuple(range(0, 2 * len(sizes), 2))).reshape(x.shape),)

        return apply_op(out, (self,), backward, "Repeat")

    def chunk(self, chunks: int, dim: int = 0):
        n = self._data.shape[dim]
        size = -(-n // chunks)
        return self.split(size, dim)

    def split(self, split_size, dim: int = 0):
        n = self._data.shape[dim]
        if isinstance(split_size, int):
            bounds = list(range(0, n, split_size)) + [n]
        else:
            bounds = [0] + list(np.cumsum(split_size))
        d = _norm_dim(dim, self._data.ndim)
        out = []
        for s, e in zip(bounds[:-1], bounds[1:]):
            idx = (slice(None),) * d + (slice(int(s), int(e)),)
            out.append(self[idx])
        return tuple(out)

    def flip(self, dims) -> "Tensor":
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        return apply_op(np.flip(self._data, dims), (self,), lambda g: (np.flip(g, dims),), "Flip")

    def tril(self, diagonal: int = 0) -> "Tensor":
        keep = np.tril(np.ones(self._data.shape[-2:], bool), diagonal)
        return apply_op(np.where(keep, self._data, 0).astype(self._data.dtype), (self,),
                        lambda g: (np.where(keep, g, 0),), "Tril")

    def triu(self, diagonal: int = 0) -> "Tensor":
        keep = np.triu(np.ones(self._data.shape[-2:], bool), diagonal)
        return apply_op(np.where(keep, self._data, 0).astype(self._data.dtype), (self,),
                        lambda g: (np.where(keep, g, 0),), "Triu")

    # ------------------------------------------------------------ indexing
    def __getitem__(self, idx) -> "Tensor":
        key = _index_to_numpy(idx)
        x = self._data
        out = x[key]
        if not isinstance(out, np.ndarray):
            out = np.asarray(out)
        basic = _is_basic_index(key)
        shape, dtype = x.shape, x.dtype

        def backward(g):
            grad = np.zeros(shape, dtype)
            if basic:
                grad[key] = g
            else:
                np.add.at(grad, key, g)
            return (grad,)

        return apply_op(out, (self,), backward, "Index")

    def __setitem__(self, idx, value) -> None:
        key = _index_to_numpy(idx)
        v_t = value if isinstance(value, Tensor) else None
        v = v_t._data if v_t is not None else value
        tracked = is_grad_enabled() and (self.requires_grad or (v_t is not None and v_t.requires_grad))
        if not tracked:
            self._data[key] = v
            return
        self._check_inplace("__setitem__")
        new = self._data.copy()
        new[key] = v
        vshape = np.shape(v)
        region_shape = new[key].shape

        def backward(g):
            g_old = g.copy()
            g_old[key] = 0
            g_val = None
            if v_t is not None:
                g_val = _unbroadcast(np.asarray(g[key]).reshape(region_shape), vshape)
            return (g_old, g_val)

        self._rebase(new, (v_t,), backward)

    def index_select(self, dim: int, index: "Tensor") -> "Tensor":
        idx = (slice(None),) * _norm_dim(dim, self._data.ndim) + (index._data,)
        return self[idx]

    def gather(self, dim: int, index: "Tensor") -> "Tensor":
        x = self._data
        d = _norm_dim(dim, x.ndim)
        idx = index._data

        def backward(g):
            grad = np.zeros_like(x)
            np.add.at(grad, _along_axis_key(idx, d), g)
            return (grad,)

        return apply_op(np.take_along_axis(x, idx, axis=d), (self,), backward, "Gather")

    # numpy-ish conveniences torch also has
    def new_zeros(self, *size, dtype=None):
        return zeros(*size, dtype=dtype or self.dtype)

    def new_ones(self, *size, dtype=None):
        return ones(*size, dtype=dtype or self.dtype)

    def new_full(self, size, fill_value, dtype=None):
        return full(size, fill_value, dtype=dtype or self.dtype)

    def new_tensor(self, data, dtype=None):
        return tensor(data, dtype=dtype or self.dtype)

    # in-place random fills (used by nn.init; no graph)
    def uniform_(self, a: float = 0.0, b: float = 1.0) -> "Tensor":
        from .random import default_generator
        with no_grad():
            self._data[...] = default_generator.uniform(a, b, self._data.shape)
        return self

    def normal_(self, mean: float = 0.0, std: float = 1.0) -> "Tensor":
        from .random import default_generator
        with no_grad():
            self._data[...] = default_generator.normal(mean, std, self._data.shape)
        return self


from . import autograd as _autograd  # noqa: E402

_autograd._Tensor = Tensor


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


_TYPE_NAMES = {"torch.FloatTensor": float32, "torch.DoubleTensor": float64, "torch.LongTensor": int64,
               "torch.BoolTensor": bool_, "torch.IntTensor": int32}


def _rebuild(data, requires_grad):
    t = Tensor._wrap(data)
    t.requires_grad = requires_grad
    return t


def _g_id(g, a, b, o):
    return g


def _g_neg(g, a, b, o):
    return -g


def _true_divide(a, b):
    out = np.true_divide(a, b)
    return out


def _along_axis_key(idx, axis):
    grids = np.indices(idx.shape, sparse=True)
    key = list(grids)
    key[axis] = idx
    return tuple(key)


def _axes(dim, ndim):
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        return tuple(_norm_dim(d, ndim) for d in dim)
    return (_norm_dim(dim, ndim),)


def _shape_args(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


def _scalar_or_array(value, dtype) -> np.ndarray:
    if isinstance(value, bool):
        return np.asarray(value)
    if isinstance(value, numbers.Integral):
        return np.asarray(value, dtype if dtype.kind in "fiu" else int64)
    if isinstance(value, numbers.Real):
        return np.asarray(value, dtype if dtype.kind == "f" else _default_dtype)
    return _to_array(value, None)


def _to_array(data, dtype) -> np.ndarray:
    if isinstance(data, Tensor):
        arr = data._data.copy()
    elif isinstance(data, np.ndarray):
        arr = data.copy()
    else:
        if isinstance(data, (list, tuple)) and any(isinstance(d, Tensor) for d in data):
            data = [d._data if isinstance(d, Tensor) else d for d in data]
        arr = np.array(data)
        if arr.dtype == np.float64 and dtype is None:
            arr = arr.astype(_default_dtype)
        elif arr.dtype.kind in "iu" and dtype is None:
            arr = arr.astype(int64)
        elif arr.dtype.kind in "OUS":
            raise TypeError(f"tensor: could not convert data of type {type(data).__name__} to a numeric tensor")
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr


# ------------------------------------------------------------------ kernel-backed ops
def _activation(x: Tensor, kind: str) -> Tensor:
    """relu / tanh / sigmoid / gelu through the C activation kernel."""
    xd = x._data
    if xd.dtype.kind != "f" or xd.dtype == float16:
        fn = {"relu": lambda a: np.maximum(a, 0), "tanh": np.tanh, "sigmoid": lambda a: 1 / (1 + np.exp(-a))}
        return Tensor._wrap(fn[kind](xd.astype(_default_dtype)))
    out = K.activation_forward(xd, kind)
    saved = out if K.activation_saves_output(kind) else xd
    return apply_op(out, (x,), lambda g: (K.activation_backward(g, saved, kind),), kind.capitalize())


def _softmax(x: Tensor, dim: int, log: bool) -> Tensor:
    xd = x._data
    if xd.dtype.kind != "f":
        xd = xd.astype(_default_dtype)
    d = _norm_dim(dim, xd.ndim, "softmax")
    last = xd.ndim - 1
    moved = xd if d == last or xd.ndim == 0 else np.moveaxis(xd, d, -1)
    fwd, bwd = ((K.log_softmax_forward, K.log_softmax_backward) if log
                else (K.softmax_forward, K.softmax_backward))
    y = fwd(moved if moved.ndim else moved.reshape(1))
    y = y.reshape(moved.shape)
    out = y if d == last or xd.ndim == 0 else np.moveaxis(y, -1, d)

    def backward(g):
        gm = g if d == last or g.ndim == 0 else np.moveaxis(g, d, -1)
        dx = bwd(gm.reshape(y.shape) if y.ndim else gm.reshape(1), y if y.ndim else y.reshape(1)).reshape(y.shape)
        return (dx if d == last or g.ndim == 0 else np.moveaxis(dx, -1, d),)

    return apply_op(out, (x,), backward, "LogSoftmax" if log else "Softmax")


def matmul(a, b) -> Tensor:
    """``a @ b`` with torch's rules: 1-D operands are promoted, batch dims
    broadcast; float products run in our bmm kernel."""
    a = a if isinstance(a, Tensor) else Tensor(a)
    b = b if isinstance(b, Tensor) else Tensor(b)
    ad, bd = a._data, b._data
    if ad.ndim == 0 or bd.ndim == 0:
        raise RuntimeError("matmul: both arguments to matmul need to be at least 1D")
    if ad.dtype != bd.dtype:
        raise RuntimeError(f"matmul: expected both operands to have the same dtype, got {ad.dtype} and {bd.dtype}")
    if ad.dtype.kind != "f" or ad.dtype == float16:
        return Tensor._wrap(np.matmul(ad, bd))
    a2 = ad[None, :] if ad.ndim == 1 else ad
    b2 = bd[:, None] if bd.ndim == 1 else bd
    if a2.shape[-1] != b2.shape[-2]:
        raise RuntimeError(f"matmul: mat1 and mat2 shapes cannot be multiplied "
                           f"({'x'.join(map(str, a2.shape[-2:]))} and {'x'.join(map(str, b2.shape[-2:]))})")
    out = K.matmul_forward(a2, b2)
    squeeze = ([-2] if ad.ndim == 1 else []) + ([-1] if bd.ndim == 1 else [])
    final = np.squeeze(out, tuple(squeeze)) if squeeze else out

    def backward(g):
        g2 = g.reshape(out.shape)
        da, db = K.matmul_backward(g2, a2, b2, a.requires_grad, b.requires_grad)
        return (None if da is None else da.reshape(ad.shape), None if db is None else db.reshape(bd.shape))

    return apply_op(final, (a, b), backward, "Matmul")


def where(condition, x, y) -> Tensor:
    c = condition._data if isinstance(condition, Tensor) else np.asarray(condition)
    xt = x if isinstance(x, Tensor) else None
    yt = y if isinstance(y, Tensor) else None
    xd = xt._data if xt is not None else x
    yd = yt._data if yt is not None else y
    out = np.where(c, xd, yd)
    ref = xt if xt is not None else yt
    if ref is not None and ref._data.dtype.kind == "f" and out.dtype != ref._data.dtype:
        out = out.astype(ref._data.dtype)
    xs, ys = np.shape(xd), np.shape(yd)

    def backward(g):
        return (_unbroadcast(np.where(c, g, 0), xs) if xt is not None else None,
                _unbroadcast(np.where(c, 0, g), ys) if yt is not None else None)

    return apply_op(out, (xt, yt), backward, "Where")


def maximum(a: Tensor, b: Tensor) -> Tensor:
    return where(a >= b, a, b)


def minimum(a: Tensor, b: Tensor) -> Tensor:
    return where(a <= b, a, b)


# ------------------------------------------------------------------ factories
def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new Tensor copying ``data`` (Python floats -> float32, ints -> int64)."""
    if device is not None:
        globals()["device"](device)
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


def from_numpy(arr: np.ndarray) -> Tensor:
    """A Tensor sharing ``arr``'s memory (dtype kept, as torch)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(arr).__name__}")
    return Tensor._wrap(arr)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor) and (dtype is None or data.dtype == _as_dtype(dtype)):
        return data
    if isinstance(data, np.ndarray) and (dtype is None or data.dtype == _as_dtype(dtype)):
        return Tensor._wrap(data)
    return tensor(data, dtype=dtype)


def _factory(fill, size, dtype, requires_grad):
    shape = _shape_args(size)
    d = _as_dtype(dtype) or _default_dtype
    t = Tensor._wrap(fill(shape, d))
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.zeros, size, dtype, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.ones, size, dtype, requires_grad)


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.zeros, size, dtype, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, bool) else (int64 if isinstance(fill_value, int) else None)
    return _factory(lambda s, d: np.full(s, fill_value, d), (size,) if isinstance(size, int) else size,
                    dtype, requires_grad)


def zeros_like(t: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value, dtype=None) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    is_float = any(isinstance(v, float) for v in vals)
    d = _as_dtype(dtype) or (_default_dtype if is_float else int64)
    t = Tensor._wrap(np.arange(*vals).astype(d))
    return t.requires_grad_(True) if requires_grad else t


def linspace(start, end, steps, dtype=None) -> Tensor:
    return Tensor._wrap(np.linspace(start, end, steps).astype(_as_dtype(dtype) or _default_dtype))


def eye(n, m=None, dtype=None) -> Tensor:
    return Tensor._wrap(np.eye(n, m, dtype=_as_dtype(dtype) or _default_dtype))


def tril(t: Tensor, diagonal: int = 0) -> Tensor:
    return t.tril(diagonal)


def triu(t: Tensor, diagonal: int = 0) -> Tensor:
    return t.triu(diagonal)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim``; gradients split back to each input."""
    ts = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
    if not ts:
        raise ValueError("cat: expected a non-empty list of Tensors")
    d = _norm_dim(dim, ts[0]._data.ndim, "cat")
    out = np.concatenate([t._data for t in ts], axis=d)
    bounds = np.cumsum([t._data.shape[d] for t in ts])[:-1]
    return apply_op(out, tuple(ts), lambda g: tuple(np.split(g, bounds, axis=d)), "Cat")


concat = concatenate = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    ts = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
    if not ts:
        raise ValueError("stack: expected a non-empty list of Tensors")
    d = _norm_dim(dim, ts[0]._data.ndim + 1, "stack")
    out = np.stack([t._data for t in ts], axis=d)
    n = len(ts)
    return apply_op(out, tuple(ts), lambda g: tuple(np.take(g, i, axis=d) for i in range(n)), "Stack")


def bmm(a: Tensor, b: Tensor) -> Tensor:
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {a.dim()}-D and {b.dim()}-D")
    return matmul(a, b)


def numel(t: Tensor) -> int:
    return t.numel()


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


# torch.FloatTensor(...) / torch.LongTensor(...) constructors
class _TypedTensor:
    def __init__(self, dtype, name):
        self.dtype = dtype
        self.__name__ = name

    def __call__(self, *args):
        if len(args) == 1 and not isinstance(args[0], int):
            return tensor(args[0], dtype=self.dtype)
        return zeros(*args, dtype=self.dtype)

    def __instancecheck__(self, obj):
        return isinstance(obj, Tensor) and obj.dtype == self.dtype


FloatTensor = _TypedTensor(float32, "FloatTensor")
DoubleTensor = _TypedTensor(float64, "DoubleTensor")
LongTensor = _TypedTensor(int64, "LongTensor")
BoolTensor = _TypedTensor(bool_, "BoolTensor")
IntTensor = _TypedTensor(int32, "IntTensor")


# ------------------------------------------------------------------ random factories
def _gen(generator):
    from .random import default_generator
    return generator or default_generator


def randn(*size, dtype=None, generator=None, device=None, requires_grad: bool = False) -> Tensor:
    shape = _shape_args(size)
    t = Tensor._wrap(_gen(generator).normal(0.0, 1.0, shape).astype(_as_dtype(dtype) or _default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def rand(*size, dtype=None, generator=None, device=None, requires_grad: bool = False) -> Tensor:
    shape = _shape_args(size)
    t = Tensor._wrap(_gen(generator).uniform(0.0, 1.0, shape).astype(_as_dtype(dtype) or _default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def randint(low, high=None, size=None, dtype=None, generator=None, device=None) -> Tensor:
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint: missing required argument 'size'")
    shape = _shape_args((size,) if isinstance(size, int) else tuple(size))
    return Tensor._wrap(_gen(generator).integers(low, high, shape).astype(_as_dtype(dtype) or int64))


def randperm(n: int, dtype=None, generator=None) -> Tensor:
    return Tensor._wrap(_gen(generator).permutation(n).astype(_as_dtype(dtype) or int64))


def randn_like(t: Tensor, dtype=None) -> Tensor:
    return randn(t.shape, dtype=dtype or t.dtype)


def rand_like(t: Tensor, dtype=None) -> Tensor:
    return rand(t.shape, dtype=dtype or t.dtype)


def multinomial(probs: Tensor, num_samples: int, replacement: bool = False, generator=None) -> Tensor:
    """Sample indices from rows of (unnormalised) probabilities."""
    p = probs._data.astype(np.float64)
    rows = p.reshape(-1, p.shape[-1])
    g = _gen(generator)
    out = np.empty((rows.shape[0], num_samples), np.int64)
    for i, r in enumerate(rows):
        r = r / r.sum()
        out[i] = g.numpy.choice(len(r), size=num_samples, replace=replacement, p=r)
    return Tensor._wrap(out.reshape(p.shape[:-1] + (num_samples,)))


__all__ = [_n for _n, _v in list(globals().items())
           if not _n.startswith("_") and _n not in ("annotations", "np", "numbers", "K", "Any", "Iterable",
                                                    "List", "Optional", "Sequence", "Tuple", "Union",
                                                    "apply_op", "is_grad_enabled", "no_grad", "run_backward")]
