"""Tensor: a NumPy array with autograd, speaking PyTorch's API.

Elementwise arithmetic, reshapes and reductions run in NumPy (they are
memory-bound and NumPy's loops are already C); every layer's maths
(matmul, softmax, activations, layer norm, attention, recurrences, losses,
...) runs in our kernels (``ctransformer.kernels``).  The storage is
``t._data``; torch's ``t.data`` is a Tensor sharing it, without history.

dtype rules follow torch: Python floats -> float32 (the default dtype),
ints -> int64, bools -> bool; ``int tensor * 0.5`` is float32; ``int / int``
is float32; a 0-d tensor does not promote a dimensioned tensor of the same
category (``float32 tensor * float64 0-d tensor`` is float32).
"""
from __future__ import annotations

import numbers
import warnings
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from . import autograd as _autograd
from ._checks import _factory_shape, _int_tuple, _positive_chunks, _view_shape
from .autograd import (Node, _FREED, _grad_enabled, apply_op, bump_version, run_backward,
                       share_version)

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
    """Dtype of Python floats and float factories (float32 or float64)."""
    global _default_dtype
    d = np.dtype(d)
    if d.kind != "f":
        raise TypeError(f"set_default_dtype: dtype must be a floating point dtype, got {d}")
    _default_dtype = d


def get_default_dtype() -> np.dtype:
    return _default_dtype


def _as_dtype(d) -> Optional[np.dtype]:
    if d is None:
        return None
    if isinstance(d, _TypedTensor):
        return d.dtype
    if isinstance(d, str) and d in _TYPE_NAMES:
        return _TYPE_NAMES[d]
    if d is float:
        return _default_dtype
    if d is int:
        return int64
    if d is bool:
        return bool_
    return np.dtype(d)


finfo = np.finfo
iinfo = np.iinfo


class Size(tuple):
    """torch.Size: a tuple of ints (compares equal to tuples and lists' tuples)."""

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __getitem__(self, i):
        out = tuple.__getitem__(self, i)
        return Size(out) if isinstance(i, slice) else out

    def __add__(self, other):
        return Size(tuple.__add__(self, tuple(other)))

    def __radd__(self, other):
        return Size(tuple(other) + tuple(self))

    def __repr__(self) -> str:
        return f"ctransformer.Size({list(self)})"


class device:
    """Only the CPU exists here; asking for CUDA is a clear error."""

    def __init__(self, type: Union[str, "device"] = "cpu", index: Optional[int] = None) -> None:
        name = type.type if isinstance(type, device) else str(type)
        base = name.split(":")[0]
        if base != "cpu":
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


def _check_device(d) -> None:
    if d is not None and not isinstance(d, device):
        device(d)


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
    if isinstance(idx, Tensor):
        return idx._data
    if isinstance(idx, tuple):
        return tuple(_index_item(i) for i in idx)
    if isinstance(idx, list):
        return _index_item(idx)
    return idx


def _index_item(i):
    if isinstance(i, Tensor):
        return i._data
    if isinstance(i, list):
        return np.asarray([j.item() if isinstance(j, Tensor) else j for j in i])
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
    return a if a.dtype.kind in "fc" else a.astype(_default_dtype)


# ---------------------------------------------------------------- the Tensor

def _deprecated_alpha_first(other, alpha, name: str):
    """torch still accepts the old ``add_(Number alpha, Tensor other)`` order
    (older tutorials' ``p.data.add_(-lr, p.grad.data)``), with a warning."""
    if isinstance(alpha, Tensor) and isinstance(other, numbers.Number) and not isinstance(other, bool):
        warnings.warn(f"This overload of {name} is deprecated:\n\t{name}(Number alpha, Tensor other)\n"
                      f"Consider using one of the following signatures instead:\n"
                      f"\t{name}(Tensor other, *, Number alpha = 1)", UserWarning, stacklevel=3)
        return alpha, other
    return other, alpha

class Tensor:
    """An n-dimensional array with autograd (torch.Tensor's API, CPU only).

    ``Tensor(data)`` is torch's legacy constructor: a list/array becomes a
    default-dtype (float32) tensor, ``Tensor(2, 3)`` an uninitialised
    (zeroed) 2x3 one, and ``Tensor(t)`` aliases Tensor ``t``."""

    __slots__ = ("_data", "requires_grad", "grad", "_node", "_idx", "_version", "__weakref__")
    __array_priority__ = 1000  # numpy defers to our operators

    def __init__(self, *args, requires_grad: bool = False, dtype=None) -> None:
        d = _as_dtype(dtype)
        if not args:
            arr = np.zeros((0,), d or _default_dtype)
        elif all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
            arr = np.zeros(tuple(int(a) for a in args), d or _default_dtype)
        elif len(args) == 1 and isinstance(args[0], Size):
            arr = np.zeros(tuple(args[0]), d or _default_dtype)
        else:
            data = args[0]
            if len(args) == 2 and isinstance(args[1], bool):  # Tensor(data, requires_grad)
                requires_grad = args[1] or requires_grad
            elif len(args) > 1:
                raise TypeError(f"Tensor: expected data or sizes, got {len(args)} arguments")
            if isinstance(data, Tensor):
                arr = data._data if d is None else data._data.astype(d)
            else:
                arr = _to_array(data, d or _default_dtype)
        self._data = arr
        self.requires_grad = False
        self.grad = None
        self._node = None
        self._idx = 0
        self._version = None
        if requires_grad:
            self.requires_grad_(True)

    @staticmethod
    def _wrap(arr: np.ndarray, requires_grad: bool = False) -> "Tensor":
        """A Tensor around ``arr`` (no copy, no graph)."""
        t = _tnew(Tensor)
        t._data = arr
        t.requires_grad = requires_grad
        t.grad = None
        t._node = None
        t._idx = 0
        t._version = None
        return t

    # ------------------------------------------------------------ basics
    @property
    def data(self) -> "Tensor":
        """A Tensor sharing this storage, outside the graph (torch's .data)."""
        return _wrap(self._data)

    @data.setter
    def data(self, value) -> None:
        arr = value._data if isinstance(value, Tensor) else np.asarray(value)
        # the kernels (optimizer steps in place) need the machine's byte order
        self._data = arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))

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

    def element_size(self) -> int:
        return self._data.itemsize

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
    def grad_fn(self) -> Optional[Node]:
        return self._node

    @property
    def is_cuda(self) -> bool:
        return False

    @property
    def retains_grad(self) -> bool:
        n = self._node
        return n is not None and n.retained is not None and any(t.tensor is self for t in n.retained)

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
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

    def __format__(self, spec: str) -> str:
        if self._data.ndim == 0:
            return format(self.item(), spec)
        return format(repr(self), spec)

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)

    def __repr__(self) -> str:
        body = np.array2string(self._data, separator=", ", prefix="tensor(", precision=4)
        extras = []
        if self._data.dtype not in (_default_dtype, int64, bool_):
            extras.append(f"dtype={self._data.dtype}")
        if self._node is not None:
            extras.append(f"grad_fn=<{self._node.name()}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    __str__ = __repr__

    def __reduce_ex__(self, protocol):
        state = getattr(self, "__dict__", None)
        return (_rebuild, (type(self), self._data, self.requires_grad, state))

    def __deepcopy__(self, memo):
        import copy

        if self._node is not None:
            raise RuntimeError("deepcopy: only Tensors created explicitly by the user (graph leaves) support "
                               "the deepcopy protocol; call .detach() first")
        t = _tnew(type(self))
        memo[id(self)] = t
        t._data = self._data.copy()
        t.requires_grad = self.requires_grad
        t.grad = None if self.grad is None else _wrap(self.grad._data.copy())
        t._node = None
        t._idx = 0
        t._version = None
        state = getattr(self, "__dict__", None)
        if state:
            t.__dict__.update(copy.deepcopy(state, memo))
        return t

    def item(self):
        if self._data.size != 1:
            raise ValueError(f"item: only one element tensors can be converted to Python scalars, "
                             f"got {self._data.size} elements")
        return self._data.reshape(-1)[0].item()

    def tolist(self):
        return self._data.tolist()

    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The storage itself (shared, as torch's).  A Tensor that requires
        grad refuses, as torch's does (``force=True``: a detached copy)."""
        if self.requires_grad:
            if force:
                return self._data.copy()
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                               "instead.")
        return self._data

    # ------------------------------------------------------------ autograd
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and self._data.dtype.kind not in "fc":
            raise RuntimeError(f"requires_grad_: only floating point tensors can require "
                               f"gradients, got dtype {self._data.dtype}")
        if not requires_grad and self._node is not None:
            raise RuntimeError("requires_grad_: you can only change requires_grad flags of leaf variables "
                               "(use .detach() for a non-leaf)")
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self) -> None:
        """Keep ``.grad`` of a non-leaf after backward (no-op on leaves)."""
        n = self._node
        if n is None:
            if not self.requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return
        if not self.retains_grad:
            _autograd.add_tap(n, _autograd._Tap(self._idx, 1, tensor=self))

    def register_hook(self, hook):
        """Call ``hook(grad)`` each time the gradient of this Tensor is
        computed; a Tensor it returns replaces the gradient (for the rest of
        the graph and for ``.grad``).  Returns a handle with ``.remove()``."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        n = self._node
        if n is None:
            return _autograd.register_leaf_hook(self, hook)
        tap = _autograd._Tap(self._idx, 0, fn=hook)
        _autograd.add_tap(n, tap)
        return _autograd.RemovableHandle(lambda: _autograd.remove_tap(n, tap))

    def backward(self, gradient=None, retain_graph: Optional[bool] = None, create_graph: bool = False,
                 inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        As in torch, the values the graph saved are freed unless
        ``retain_graph=True``: a second backward through them raises.
        ``inputs``: accumulate only into these Tensors."""
        if inputs is not None:
            _autograd.backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)
            return
        if create_graph:
            raise NotImplementedError("backward: create_graph=True (higher-order gradients) is not supported")
        if not self.requires_grad:
            raise RuntimeError("backward: element 0 of tensors does not require grad and does not have a grad_fn")
        data = self._data
        if gradient is None:
            if data.size != 1:
                raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, "
                                   f"got shape {tuple(data.shape)}")
            g = np.ones_like(data)
        else:
            g = gradient._data if isinstance(gradient, Tensor) else np.asarray(gradient)
            if g.shape != data.shape:
                raise RuntimeError(f"backward: gradient has shape {tuple(g.shape)}, "
                                   f"expected {tuple(data.shape)}")
            if g.dtype != data.dtype:
                g = g.astype(data.dtype)
        run_backward(((self, g),), retain_graph=bool(retain_graph))

    def detach(self) -> "Tensor":
        t = _wrap(self._data)
        share_version(self, t)  # torch: detach() shares the version counter (.data does not)
        return t

    def detach_(self) -> "Tensor":
        self._node = None
        self.requires_grad = False
        return self

    def clone(self, memory_format=None) -> "Tensor":
        return apply_op(self._data.copy(), (self,), _identity_grad, "Clone")

    # ------------------------------------------------------------ in-place machinery
    def _check_inplace(self, name: str) -> None:
        if self.requires_grad and self._node is None and _grad_enabled[0]:
            what = "a view of a leaf Variable" if name == "__setitem__" else "a leaf Variable"
            raise RuntimeError(f"{what} that requires grad is being used in an in-place operation. "
                               f"({name} on a parameter: wrap it in `with ctransformer.no_grad():`, or work on a "
                               ".clone())")

    def _become(self, res: "Tensor") -> "Tensor":
        """Make self the result of an in-place op computed out of place as
        ``res`` (whose graph edges already point at self's old node)."""
        bump_version(self)
        n = res._node
        if n is not None and n.versions and n.versions is not _FREED:
            # the op's own copy of self's old values is a snapshot (torch's original_self): not versioned
            n.versions = tuple(e for e in n.versions if e[0] is not self)
        self._data = res._data
        self._node = res._node
        self._idx = res._idx
        self.requires_grad = res.requires_grad
        return self

    def _tracked(self, *others) -> bool:
        if not _grad_enabled[0]:
            return False
        if self.requires_grad:
            return True
        return any(isinstance(o, Tensor) and o.requires_grad for o in others)

    def zero_(self) -> "Tensor":
        return self.fill_(0)

    def fill_(self, value) -> "Tensor":
        self._check_inplace("fill_")
        if isinstance(value, Tensor) and self._tracked(value):
            return self.copy_(value.expand(self.shape) if value.ndim == 0 else value)
        v = value.item() if isinstance(value, Tensor) else value
        if self._tracked():
            return self._become(apply_op(np.full_like(self._data, v), (self,), _no_grad_1, "Fill"))
        self._writable()[...] = v
        return self

    def copy_(self, src, non_blocking: bool = False) -> "Tensor":
        src_t = src if isinstance(src, Tensor) else tensor(src)
        self._check_inplace("copy_")
        if self._tracked(src_t):
            shape, sshape = self._data.shape, src_t._data.shape
            new = np.broadcast_to(src_t._data, shape).astype(self._data.dtype, copy=True)
            return self._become(apply_op(new, (self, src_t), lambda g: (None, _sum_to(g, sshape)), "Copy"))
        self._writable()[...] = src_t._data
        return self

    def _writable(self) -> np.ndarray:
        """The storage, about to be modified in place (bumps the version)."""
        bump_version(self)
        if not self._data.flags.writeable:
            self._data = self._data.copy()
        return self._data

    # ------------------------------------------------------------ dtype / device
    def to(self, *args, **kwargs) -> "Tensor":
        dtype = kwargs.get("dtype")
        copy = kwargs.get("copy", False)
        for a in list(args) + [kwargs.get("device")]:
            if a is None:
                continue
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (str, device)):
                device(a)  # validates: raises for CUDA
            elif isinstance(a, int) and not isinstance(a, bool):
                device(f"cuda:{a}")
            else:
                dtype = a
        out = self if dtype is None else self.type(dtype)
        return out.clone() if copy and out is self else out

    def cpu(self) -> "Tensor":
        return self

    def cuda(self, *args, **kwargs) -> "Tensor":
        device("cuda")
        return self

    def type(self, dtype=None, non_blocking: bool = False):
        """``type()`` -> 'torch.FloatTensor'-style name; ``type(dtype)`` converts."""
        if dtype is None:
            return _TYPE_OF.get(self._data.dtype, f"torch.{self._data.dtype}Tensor")
        d = _as_dtype(dtype)
        if d == self._data.dtype:
            return self
        src = self._data.dtype
        if d.kind == "f" and src.kind == "f":
            return apply_op(self._data.astype(d), (self,), lambda g: (g.astype(src),), "ToCopy")
        return _wrap(self._data.astype(d))

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

    def byte(self) -> "Tensor":
        return self.type(uint8)

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f"

    # ------------------------------------------------------------ arithmetic
    # __add__, __radd__, __sub__, ..., __rpow__ and their aliases (mul, div,
    # pow, ...) are the fast functions made by _make_arith, set below the class.
    def add(self, other, alpha=1):
        other, alpha = _deprecated_alpha_first(other, alpha, "add")
        return _arith(self, other if alpha == 1 else other * alpha, _ADD)

    def sub(self, other, alpha=1):
        other, alpha = _deprecated_alpha_first(other, alpha, "sub")
        return _arith(self, other if alpha == 1 else other * alpha, _SUB)

    subtract = sub

    def __floordiv__(self, other):
        o = other._data if isinstance(other, Tensor) else other
        return _wrap(np.asarray(np.floor_divide(self._data, o)))

    def __rfloordiv__(self, other):
        return _wrap(np.asarray(np.floor_divide(other, self._data)))

    def __mod__(self, other):
        """Python's (and torch's) remainder: the sign of the divisor.  Gradients
        as torch: d/dself = 1, d/dother = -floor(self / other)."""
        ot = other if isinstance(other, Tensor) else None
        a = self._data
        o = ot._data if ot is not None else other
        out = np.asarray(np.mod(a, o))
        if out.dtype.kind != "f":
            return _wrap(out)
        sa, so = a.shape, np.shape(o)

        def backward(g):
            go = None
            if ot is not None and ot.requires_grad:
                go = _sum_to(-g * np.floor(a / o), so)
            return _sum_to(g, sa), go

        return apply_op(out, (self, ot), backward, "Remainder")

    remainder = __mod__

    def __neg__(self):
        if self._data.dtype == bool_:
            raise RuntimeError("neg: negation, the `-` operator, on a bool tensor is not supported")
        return _unary(self, np.negative(self._data), _neg_grad, "Neg")

    neg = negative = __neg__

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    matmul = __matmul__

    def mm(self, other):
        if self._data.ndim != 2 or _ndim_of(other) != 2:
            raise RuntimeError(f"mm: expected 2-D tensors, got {self._data.ndim}-D and {_ndim_of(other)}-D")
        return matmul(self, other)

    def bmm(self, other):
        return bmm(self, other)

    # in-place arithmetic: autograd-aware
    def _inplace_arith(self, other, code, name):
        self._check_inplace(name)
        if self._tracked(other):
            res = _arith(self, other, code)
            if res._data.dtype != self._data.dtype:
                if res._data.dtype.kind == "f" and self._data.dtype.kind != "f":
                    raise RuntimeError(f"{name}: result type {res._data.dtype} can't be cast to the desired "
                                       f"output type {self._data.dtype}")
                res = res.type(self._data.dtype)
            return self._become(res)
        o = other._data if isinstance(other, Tensor) else other
        out = self._writable()
        if code == _DIV and out.dtype.kind != "f":
            raise RuntimeError(f"{name}: result type Float can't be cast to the desired output type {out.dtype}")
        try:
            _UFUNCS[code](out, o, out=out, casting="same_kind")
        except TypeError:
            raise RuntimeError(f"{name}: result type {np.result_type(out, o)} can't be cast to the desired "
                               f"output type {out.dtype}") from None
        return self

    def __iadd__(self, other):
        return self._inplace_arith(other, _ADD, "add_")

    def __isub__(self, other):
        return self._inplace_arith(other, _SUB, "sub_")

    def __imul__(self, other):
        return self._inplace_arith(other, _MUL, "mul_")

    def __itruediv__(self, other):
        return self._inplace_arith(other, _DIV, "div_")

    def add_(self, other, alpha=1):
        other, alpha = _deprecated_alpha_first(other, alpha, "add_")
        return self._inplace_arith(other if alpha == 1 else other * alpha, _ADD, "add_")

    def sub_(self, other, alpha=1):
        other, alpha = _deprecated_alpha_first(other, alpha, "sub_")
        return self._inplace_arith(other if alpha == 1 else other * alpha, _SUB, "sub_")

    def mul_(self, other):
        return self._inplace_arith(other, _MUL, "mul_")

    def div_(self, other):
        return self._inplace_arith(other, _DIV, "div_")

    def pow_(self, other):
        return self._inplace_arith(other, _POW, "pow_")

    def clamp_(self, min=None, max=None):
        self._check_inplace("clamp_")
        if self._tracked():
            return self._become(self.clamp(min, max))
        np.clip(self._data, min, max, out=self._writable())
        return self

    # comparisons and logic: no gradient
    def _compare(self, other, fn):
        o = other._data if isinstance(other, Tensor) else other
        return _wrap(np.asarray(fn(self._data, o)))

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
    greater, less, greater_equal, less_equal, not_equal = gt, lt, ge, le, ne

    def _logic(self, other, logical, bitwise):
        o = other._data if isinstance(other, Tensor) else other
        a = self._data
        both_bool = a.dtype == bool_ and (isinstance(o, bool) or getattr(o, "dtype", None) == bool_)
        if a.dtype.kind == "f" or np.asarray(o).dtype.kind == "f":
            raise TypeError(f"{bitwise.__name__}: not implemented for floating point tensors")
        return _wrap(np.asarray((logical if both_bool else bitwise)(a, o)))

    def __and__(self, other):
        return self._logic(other, np.logical_and, np.bitwise_and)

    def __or__(self, other):
        return self._logic(other, np.logical_or, np.bitwise_or)

    def __xor__(self, other):
        return self._logic(other, np.logical_xor, np.bitwise_xor)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    bitwise_and, bitwise_or, bitwise_xor = __and__, __or__, __xor__

    def __invert__(self):
        a = self._data
        if a.dtype.kind == "f":
            raise TypeError("bitwise_not: not implemented for floating point tensors")
        return _wrap(np.logical_not(a) if a.dtype == bool_ else np.invert(a))

    bitwise_not = __invert__

    def logical_not(self):
        return _wrap(np.logical_not(self._data))

    def logical_and(self, other):
        return _wrap(np.logical_and(self._data, _data_of(other)))

    def logical_or(self, other):
        return _wrap(np.logical_or(self._data, _data_of(other)))

    def equal(self, other) -> bool:
        return self.shape == other.shape and bool(np.array_equal(self._data, other._data))

    def allclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False) -> bool:
        return bool(np.allclose(self._data, _data_of(other), rtol=rtol, atol=atol, equal_nan=equal_nan))

    def isclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False) -> "Tensor":
        return _wrap(np.isclose(self._data, _data_of(other), rtol=rtol, atol=atol, equal_nan=equal_nan))

    def any(self, dim=None, keepdim=False):
        return _wrap(np.asarray(np.any(self._data, axis=_axes(dim, self._data.ndim), keepdims=keepdim)))

    def all(self, dim=None, keepdim=False):
        return _wrap(np.asarray(np.all(self._data, axis=_axes(dim, self._data.ndim), keepdims=keepdim)))

    def isnan(self):
        return _wrap(np.isnan(self._data))

    def isinf(self):
        return _wrap(np.isinf(self._data))

    def isfinite(self):
        return _wrap(np.isfinite(self._data))

    def nonzero(self, as_tuple: bool = False):
        idx = np.nonzero(self._data)
        if as_tuple:
            return tuple(_wrap(i.astype(int64)) for i in idx)
        return _wrap(np.stack(idx, axis=-1).astype(int64) if idx else np.zeros((0, 0), int64))

    # ------------------------------------------------------------ elementwise
    def exp(self):
        out = np.exp(_float_of(self._data))
        return _unary(self, out, lambda g: (g * out,), "Exp")

    def log(self):
        x = _float_of(self._data)
        return _unary(self, np.log(x), lambda g: (g / x,), "Log")

    def log1p(self):
        x = _float_of(self._data)
        return _unary(self, np.log1p(x), lambda g: (g / (1 + x),), "Log1p")

    def sqrt(self):
        out = np.sqrt(_float_of(self._data))
        return _unary(self, out, lambda g: (g / (2 * out),), "Sqrt")

    def rsqrt(self):
        out = 1 / np.sqrt(_float_of(self._data))
        return _unary(self, out, lambda g: (-0.5 * g * out * out * out,), "Rsqrt")

    def square(self):
        return self * self

    def abs(self):
        x = self._data
        return _unary(self, np.abs(x), lambda g: (g * np.sign(x),), "Abs")

    absolute = abs

    def sign(self):
        return _unary(self, np.sign(self._data), _zero_grad, "Sign")

    def floor(self):
        return _unary(self, np.floor(self._data), _zero_grad, "Floor")

    def ceil(self):
        return _unary(self, np.ceil(self._data), _zero_grad, "Ceil")

    def round(self, decimals: int = 0):
        return _unary(self, np.round(self._data, decimals), _zero_grad, "Round")

    def sin(self):
        x = _float_of(self._data)
        return _unary(self, np.sin(x), lambda g: (g * np.cos(x),), "Sin")

    def cos(self):
        x = _float_of(self._data)
        return _unary(self, np.cos(x), lambda g: (-g * np.sin(x),), "Cos")

    def tanh(self):
        return _activation(self, "tanh")

    def sigmoid(self):
        return _activation(self, "sigmoid")

    def relu(self):
        return _activation(self, "relu")

    def relu_(self):
        self._check_inplace("relu_")
        if self._tracked():
            return self._become(self.relu())
        np.maximum(self._data, 0, out=self._writable())
        return self

    def clamp(self, min=None, max=None):
        if min is None and max is None:
            raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
        lo = min.item() if isinstance(min, Tensor) else min
        hi = max.item() if isinstance(max, Tensor) else max
        x = self._data
        out = np.clip(x, lo, hi)
        # torch passes the gradient where lo <= x <= hi (boundaries included)
        keep = np.ones(x.shape, bool)
        if lo is not None:
            keep &= x >= lo
        if hi is not None:
            keep &= x <= hi
        return _unary(self, out, lambda g: (g * keep,), "Clamp")

    clip = clamp
    clip_ = clamp_

    def masked_fill(self, mask, value) -> "Tensor":
        """Where ``mask`` (bool, broadcastable) is True, take ``value``.

        self (...), mask broadcastable with self -> (broadcast shape)."""
        m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
        if m.dtype != bool_:
            raise TypeError(f"masked_fill: mask must have dtype bool, got {m.dtype} "
                            "(write mask == 0 or mask.bool())")
        if isinstance(value, Tensor):
            if value._data.ndim != 0:
                raise RuntimeError(f"masked_fill: value must be a 0-dimensional tensor, got "
                                   f"{value._data.ndim} dimensions")
            value = value.item()
        x = self._data
        try:
            out = np.where(m, np.asarray(value).astype(x.dtype), x)
        except ValueError:
            raise RuntimeError(f"masked_fill: mask of shape {tuple(m.shape)} does not broadcast "
                               f"to the tensor's shape {tuple(x.shape)}") from None
        shape = x.shape
        return apply_op(out, (self,), lambda g: (_sum_to(np.where(m, 0, g), shape),), "MaskedFill")

    def masked_fill_(self, mask, value) -> "Tensor":
        self._check_inplace("masked_fill_")
        m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
        if m.dtype != bool_:
            raise TypeError(f"masked_fill_: mask must have dtype bool, got {m.dtype} "
                            "(write mask == 0 or mask.bool())")
        if np.broadcast_shapes(m.shape, self._data.shape) != self._data.shape:
            raise RuntimeError(f"masked_fill_: mask of shape {tuple(m.shape)} does not broadcast "
                               f"to the tensor's shape {tuple(self._data.shape)}")
        if self._tracked():
            return self._become(self.masked_fill(mask, value))
        v = value.item() if isinstance(value, Tensor) else value
        out = self._writable()
        np.copyto(out, np.asarray(v).astype(out.dtype), where=m)
        return self

    def masked_select(self, mask) -> "Tensor":
        m = np.broadcast_to(_data_of(mask), self._data.shape)
        return self[_wrap(m)]

    def where(self, condition, other):
        return where(condition, self, other)

    # ------------------------------------------------------------ reductions
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

    def mean(self, dim=None, keepdim: bool = False, dtype=None):
        x = self._data
        d = _as_dtype(dtype)
        if x.dtype.kind not in "fc" and (d is None or d.kind not in "fc"):
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating "
                               f"point or complex dtype. Got: {x.dtype}")
        if d is not None:
            x = x.astype(d)
        axis = _axes(dim, x.ndim, "mean")
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
        if isinstance(dim, bool):  # var(unbiased) positional form
            dim, unbiased = None, dim
        c = 1 if correction is None and unbiased is None else (
            correction if correction is not None else int(bool(unbiased)))
        x = self._data
        axis = _axes(dim, x.ndim, "var")
        n = x.size if axis is None else int(np.prod([x.shape[a] for a in axis]))
        mu = self.mean(dim=axis, keepdim=True)
        d = self - mu
        ss = (d * d).sum(dim=axis, keepdim=keepdim)
        with np.errstate(divide="ignore", invalid="ignore"):
            return ss / float(max(n - c, 0))

    def std(self, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *, correction=None):
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

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
            return _MinMax(apply_op(x.copy(), (self,), _identity_grad, name), _wrap(np.asarray(0, int64)))
        idx = np.expand_dims(np_arg(x, axis=d), d)
        vals = np.take_along_axis(x, idx, axis=d)

        def backward(g):
            grad = np.zeros_like(x)
            np.put_along_axis(grad, idx, g if keepdim else np.expand_dims(g, d), axis=d)
            return (grad,)

        values = apply_op(vals if keepdim else np.squeeze(vals, d), (self,), backward, name)
        indices = _wrap((idx if keepdim else np.squeeze(idx, d)).astype(int64))
        return _MinMax(values, indices)

    def max(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):
            return maximum(self, dim)
        return self._minmax(dim, keepdim, np.argmax, np.max, "Max")

    def min(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):
            return minimum(self, dim)
        return self._minmax(dim, keepdim, np.argmin, np.min, "Min")

    def amax(self, dim=None, keepdim: bool = False):
        return self.max() if dim is None else self.max(dim, keepdim)[0]

    def amin(self, dim=None, keepdim: bool = False):
        return self.min() if dim is None else self.min(dim, keepdim)[0]

    def argmax(self, dim=None, keepdim: bool = False):
        x = self._data
        if dim is None:
            return _wrap(np.asarray(np.argmax(x), dtype=int64))
        d = _norm_dim(dim, x.ndim, "argmax")
        out = np.argmax(x, axis=d) if x.ndim else np.asarray(0)
        return _wrap((np.expand_dims(out, d) if keepdim and x.ndim else out).astype(int64))

    def argmin(self, dim=None, keepdim: bool = False):
        x = self._data
        if dim is None:
            return _wrap(np.asarray(np.argmin(x), dtype=int64))
        d = _norm_dim(dim, x.ndim, "argmin")
        out = np.argmin(x, axis=d) if x.ndim else np.asarray(0)
        return _wrap((np.expand_dims(out, d) if keepdim and x.ndim else out).astype(int64))

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

        return _MinMax(apply_op(vals, (self,), backward, "Topk"), _wrap(idx.astype(int64)))

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        x = self._data
        d = _norm_dim(dim, x.ndim, "sort")
        return self.topk(x.shape[d] if x.ndim else 1, d, largest=descending)

    def argsort(self, dim: int = -1, descending: bool = False):
        return self.sort(dim, descending)[1]

    def cumsum(self, dim: int, dtype=None):
        x = self._data
        d = _norm_dim(dim, x.ndim, "cumsum")
        out = np.cumsum(x, axis=d, dtype=_as_dtype(dtype) or (int64 if x.dtype.kind in "biu" else None))
        return apply_op(out, (self,), lambda g: (np.flip(np.cumsum(np.flip(g, d), axis=d), d),), "Cumsum")

    def softmax(self, dim: int = -1, dtype=None):
        x = self if dtype is None else self.type(dtype)
        return _softmax(x, dim, log=False)

    def log_softmax(self, dim: int = -1, dtype=None):
        x = self if dtype is None else self.type(dtype)
        return _softmax(x, dim, log=True)

    def norm(self, p=2, dim=None, keepdim=False):
        if p == 2 or p == "fro":
            return (self * self).sum(dim=dim, keepdim=keepdim).sqrt()
        if p == float("inf"):
            return self.abs().amax(dim, keepdim)
        return (self.abs() ** p).sum(dim=dim, keepdim=keepdim) ** (1.0 / p)

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
        return self.index_select(d, _wrap(idx))

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
            t = _wrap(out)
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
        v_t = value if isinstance(value, Tensor) else None
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
            raise TypeError(f"gather: index must be an integer tensor, got {idx.dtype}")
        if idx.ndim != x.ndim or any(i > s for k, (i, s) in enumerate(zip(idx.shape, x.shape)) if k != d):
            raise RuntimeError(f"gather: index {tuple(idx.shape)} must have the input's number of dimensions "
                               f"and sizes no larger than {tuple(x.shape)} outside dimension {dim}")
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
        src_t = src if isinstance(src, Tensor) else None
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
        if self._tracked(src if isinstance(src, Tensor) else None):
            return self._become(self.scatter(dim, index, src))
        self._writable()[...] = self.scatter(dim, index, src)._data
        return self

    # numpy-ish conveniences torch also has
    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return ones(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        return full(size, fill_value, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        return zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)

    # in-place random fills (used by nn.init; no graph)
    def uniform_(self, a: float = 0.0, b: float = 1.0, generator=None) -> "Tensor":
        self._check_inplace("uniform_")
        self._writable()[...] = _gen(generator).uniform(a, b, self._data.shape)
        return self

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator=None) -> "Tensor":
        self._check_inplace("normal_")
        self._writable()[...] = _gen(generator).normal(mean, std, self._data.shape)
        return self

    def bernoulli_(self, p: float = 0.5, generator=None) -> "Tensor":
        self._check_inplace("bernoulli_")
        self._writable()[...] = _gen(generator).uniform(0.0, 1.0, self._data.shape) < p
        return self


_tnew = object.__new__
_wrap = Tensor._wrap
_autograd._Tensor = Tensor
_autograd._wrap = _wrap


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


def _rebuild(cls, data, requires_grad, state=None):
    t = _tnew(cls)
    t._data = data
    t.requires_grad = requires_grad
    t.grad = None
    t._node = None
    t._idx = 0
    t._version = None
    if state:
        t.__dict__.update(state)
    return t


def _data_of(x) -> np.ndarray:
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def _ndim_of(x) -> int:
    return x._data.ndim if isinstance(x, Tensor) else np.ndim(x)


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


def _unary(x: Tensor, out: np.ndarray, backward, name: str) -> Tensor:
    """Record a one-input op (the fast path of apply_op)."""
    t = _tnew(Tensor)
    t._data = out
    t.grad = None
    t._idx = 0
    t._version = None
    if _grad_enabled[0] and x.requires_grad:
        t.requires_grad = True
        n = x._node
        t._node = Node((x if n is None else (n if n.n_out == 1 else (n, x._idx)),), backward, name, out.dtype)
    else:
        t.requires_grad = False
        t._node = None
    return t


# ---------------------------------------------------------------- binary arithmetic
# The hot path of every model: one Tensor, one Node and one edges tuple per
# op.  Built-in ops record a Node subclass whose slots hold exactly what the
# gradient needs (add saves nothing, mul saves its operands) and whose
# ``backward`` is a method: no closure and no cells per op, which keeps
# allocation and garbage-collector work low on long recurrent graphs.
_ADD, _SUB, _MUL, _DIV, _POW = range(5)
_UFUNCS = (np.add, np.subtract, np.multiply, np.true_divide, np.power)
_nnew = object.__new__


def _pow_exponent_grad(g, a, b, out):
    """d(a**b)/db = a**b * log(a); 0 where a == 0 and b >= 0 (as torch)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log(a)
        return np.where((a == 0) & (b >= 0), 0, g * out * lg)


def _pow_base_grad(g, a, b):
    """d(a**b)/da = b * a**(b-1); 0 where b == 0 (as torch)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b == 0, 0, g * b * a ** (b - 1))


class _BinaryNode(Node):
    """Tensor (op) Tensor.  a, b: the operands (after type promotion) when
    the gradient needs them, out: the result; sa, sb: operand shapes."""

    __slots__ = ("a", "b", "out", "sa", "sb")
    n_out = 1
    shapes = None

    def _free(self) -> None:
        if self.versions is not None:  # mul/div/pow: operands saved
            self.a = self.b = self.out = None
            self.versions = _FREED

    def saves_array(self, arr: np.ndarray) -> bool:
        return self.versions is not None and type(self) is _PowNode and self.out is arr

    def _finish(self, ga, gb):
        """Sum broadcast gradients back to the operand shapes."""
        if ga is not None:
            ga = _sum_to(ga, self.sa)
        if gb is not None:
            gb = _sum_to(gb, self.sb)
        return ga, gb


class _AddNode(_BinaryNode):
    __slots__ = ()
    op = "Add"

    def backward(self, g):
        if self.sa == self.sb:
            return g, g
        e = self.edges
        return self._finish(g if e[0] is not None else None, g if e[1] is not None else None)


class _SubNode(_BinaryNode):
    __slots__ = ()
    op = "Sub"

    def backward(self, g):
        e = self.edges
        ga, gb = (g if e[0] is not None else None), (-g if e[1] is not None else None)
        return (ga, gb) if self.sa == self.sb else self._finish(ga, gb)


class _MulNode(_BinaryNode):
    __slots__ = ()
    op = "Mul"

    def backward(self, g):
        e = self.edges
        ga = g * self.b if e[0] is not None else None
        gb = g * self.a if e[1] is not None else None
        return (ga, gb) if self.sa == self.sb else self._finish(ga, gb)


class _DivNode(_BinaryNode):
    __slots__ = ()
    op = "Div"

    def backward(self, g):
        e, b = self.edges, self.b
        ga = g / b if e[0] is not None else None
        gb = -g * self.a / (b * b) if e[1] is not None else None
        return (ga, gb) if self.sa == self.sb else self._finish(ga, gb)


class _PowNode(_BinaryNode):
    __slots__ = ()
    op = "Pow"

    def backward(self, g):
        e, a, b = self.edges, self.a, self.b
        return self._finish(_pow_base_grad(g, a, b) if e[0] is not None else None,
                            _pow_exponent_grad(g, a, b, self.out) if e[1] is not None else None)


_BINARY_NODES = (_AddNode, _SubNode, _MulNode, _DivNode, _PowNode)


class _ScalarNode(Node):
    """Tensor (op) Python scalar s, or s (op) Tensor for the R* classes.
    a: the tensor operand when needed, out: the result."""

    __slots__ = ("s", "a", "out")
    n_out = 1
    shapes = None
    saves = False  # whether backward reads a / out
    frees = False  # whether torch saves something (the scalar, as a tensor): a second backward then raises

    def _free(self) -> None:
        self.a = self.out = None
        self.versions = _FREED

    def saves_array(self, arr: np.ndarray) -> bool:
        return self.saves and getattr(self, "out", None) is arr


class _AddScalarNode(_ScalarNode):
    __slots__ = ()
    op = "Add"

    def backward(self, g):
        return (g,)


class _RSubScalarNode(_ScalarNode):
    __slots__ = ()
    op = "Sub"

    def backward(self, g):
        return (-g,)


class _MulScalarNode(_ScalarNode):
    __slots__ = ()
    frees = True
    op = "Mul"

    def backward(self, g):
        return (g * self.s,)


class _DivScalarNode(_ScalarNode):
    __slots__ = ()
    frees = True
    op = "Div"

    def backward(self, g):
        return (g / self.s,)


class _RDivScalarNode(_ScalarNode):  # s / a
    __slots__ = ()
    saves = frees = True
    op = "Div"

    def backward(self, g):
        return (-g * self.out / self.a,)


class _PowScalarNode(_ScalarNode):  # a ** s
    __slots__ = ()
    saves = frees = True
    op = "Pow"

    def backward(self, g):
        s, a = self.s, self.a
        if s == 2:
            return (g * 2 * a,)
        if s == 0:
            return (np.zeros_like(g),)
        return (g * s * a ** (s - 1),)


class _RPowScalarNode(_ScalarNode):  # s ** a
    __slots__ = ()
    saves = frees = True
    op = "Pow"

    def backward(self, g):
        out = self.out
        return (_pow_exponent_grad(g, np.asarray(self.s, out.dtype), self.a, out),)


# (forward node, reversed node) per op code
_SCALAR_NODES = ((_AddScalarNode, _AddScalarNode), (_AddScalarNode, _RSubScalarNode),
                 (_MulScalarNode, _MulScalarNode), (_DivScalarNode, _RDivScalarNode),
                 (_PowScalarNode, _RPowScalarNode))


def _bool_sub_error():
    return RuntimeError("sub: subtraction, the `-` operator, with a bool tensor is not supported "
                        "(use ~ or logical_not() to invert a mask)")


def _make_arith(code: int, rev: bool):
    """The function computing x (op) other (or other (op) x when rev) for one
    op code: code and rev are closure constants, so ``x + y`` costs one
    Python call."""
    node_tt = _BINARY_NODES[code]
    node_scalar = _SCALAR_NODES[code][rev]
    ufunc = _UFUNCS[code]
    saves = code >= _MUL
    saves_scalar = node_scalar.saves  # s / a, a ** s, s ** a read their operand / result in backward
    frees_scalar = node_scalar.frees

    def arith(x: Tensor, other) -> Tensor:
        a = x._data
        if isinstance(other, Tensor):
            b = other._data
            if a.dtype is not b.dtype or a.dtype.kind not in "fc":
                if code == _SUB and (a.dtype == bool_ or b.dtype == bool_):
                    raise _bool_sub_error()
                dt = _promote(a, b)
                if code == _DIV and dt.kind not in "fc":
                    dt = _default_dtype
                if a.dtype != dt:
                    a = a.astype(dt)
                if b.dtype != dt:
                    b = b.astype(dt)
            if rev:
                a, b, x, other = b, a, other, x
            out = ufunc(a, b)
            t = _tnew(Tensor)
            t._data = out
            t.grad = None
            t._idx = 0
            t._version = None
            if _grad_enabled[0] and (x.requires_grad or other.requires_grad):
                n = _nnew(node_tt)
                if x.requires_grad:
                    p = x._node
                    ea = x if p is None else (p if p.n_out == 1 else (p, x._idx))
                else:
                    ea = None
                if other.requires_grad:
                    p = other._node
                    eb = other if p is None else (p if p.n_out == 1 else (p, other._idx))
                else:
                    eb = None
                n.edges = (ea, eb)
                n.dtype = out.dtype
                n.grad = n.mark = n.retained = None
                n.sa = a.shape
                n.sb = b.shape
                if saves:
                    n.a = a
                    n.b = b
                    n.out = out
                    # what torch saves: self if other needs grad, other if self does
                    xv, ov = x._version, other._version
                    if eb is None:
                        n.versions = ((other, 0 if ov is None else ov[0]),)
                    elif ea is None:
                        n.versions = ((x, 0 if xv is None else xv[0]),)
                    else:
                        n.versions = ((x, 0 if xv is None else xv[0]), (other, 0 if ov is None else ov[0]))
                else:
                    n.versions = None
                t.requires_grad = True
                t._node = n
            else:
                t.requires_grad = False
                t._node = None
            return t
        # Python (or NumPy) scalar
        tp = type(other)
        if tp is not float and tp is not int:
            if isinstance(other, (bool, np.bool_)):
                other = bool(other)
            elif isinstance(other, (numbers.Number, np.generic)) and not isinstance(other, complex):
                other = other.item() if isinstance(other, np.generic) else (
                    float(other) if isinstance(other, numbers.Real) and not isinstance(other, numbers.Integral)
                    else int(other))
            else:
                return arith(x, as_tensor(other))
            tp = type(other)
        if a.dtype.kind not in "fc" and (tp is float or code == _DIV or (code == _POW and rev)):
            if code == _SUB and a.dtype == bool_:
                raise _bool_sub_error()
            a = a.astype(_default_dtype)
        elif code == _SUB and a.dtype == bool_:
            raise _bool_sub_error()
        out = ufunc(other, a) if rev else ufunc(a, other)
        if type(out) is not np.ndarray:
            out = np.asarray(out)
        t = _tnew(Tensor)
        t._data = out
        t.grad = None
        t._idx = 0
        t._version = None
        if _grad_enabled[0] and x.requires_grad:
            n = _nnew(node_scalar)
            p = x._node
            n.edges = (x if p is None else (p if p.n_out == 1 else (p, x._idx)),)
            n.dtype = out.dtype
            n.grad = n.mark = n.retained = None
            n.s = other
            if saves_scalar:
                n.a = a
                n.out = out
            n.versions = () if frees_scalar else None  # () : freed after backward
            t.requires_grad = True
            t._node = n
        else:
            t.requires_grad = False
            t._node = None
        return t

    return arith


_ARITH = tuple((_make_arith(c, False), _make_arith(c, True)) for c in range(5))


def _arith(x: Tensor, other, code: int, rev: bool = False) -> Tensor:
    """x (op) other, or other (op) x when rev; other: Tensor or Python scalar."""
    return _ARITH[code][rev](x, other)


Tensor.__add__, Tensor.__radd__ = _ARITH[_ADD]
Tensor.__sub__, Tensor.__rsub__ = _ARITH[_SUB]
Tensor.__mul__, Tensor.__rmul__ = _ARITH[_MUL]
Tensor.__truediv__, Tensor.__rtruediv__ = _ARITH[_DIV]
Tensor.__pow__, Tensor.__rpow__ = _ARITH[_POW]
Tensor.mul = Tensor.multiply = Tensor.__mul__
Tensor.div = Tensor.divide = Tensor.true_divide = Tensor.__truediv__
Tensor.pow = Tensor.__pow__


_TYPE_NAMES = {"torch.FloatTensor": float32, "torch.DoubleTensor": float64, "torch.LongTensor": int64,
               "torch.BoolTensor": bool_, "torch.IntTensor": int32, "torch.HalfTensor": float16,
               "torch.ByteTensor": uint8}
_TYPE_OF = {v: k for k, v in _TYPE_NAMES.items()}


def _to_array(data, dtype) -> np.ndarray:
    """Copy ``data`` into a new array; ``dtype`` None infers torch's way."""
    if isinstance(data, Tensor):
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
                arr = arr.astype(_default_dtype)
            elif arr.dtype.kind in "iu":
                arr = arr.astype(int64)
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr


def _untensor(data):
    """Nested lists/tuples with Tensors inside -> plain values (kept lists)."""
    if isinstance(data, (list, tuple)):
        if any(isinstance(d, (Tensor, list, tuple)) for d in data):
            return [_untensor(d) for d in data]
        return data
    if isinstance(data, Tensor):
        return data._data
    return data


# ------------------------------------------------------------------ kernel-backed ops
# (ctransformer/ops/<family>.py; imported at the end of this module, which they import)
def mm(a: Tensor, b: Tensor) -> Tensor:
    return a.mm(b) if isinstance(a, Tensor) else tensor(a).mm(b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {a.dim()}-D and {b.dim()}-D")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: batch sizes must match, got {a.shape[0]} and {b.shape[0]}")
    return matmul(a, b)


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
        dt = ref.dtype if not (isinstance(scalar, float) and ref.dtype.kind != "f") else _default_dtype
    else:
        dt = np.asarray(xd).dtype if np.asarray(xd).dtype.kind != "f" else _default_dtype
    out = np.where(c, np.asarray(xd).astype(dt, copy=False), np.asarray(yd).astype(dt, copy=False))
    xs, ys = np.shape(xd), np.shape(yd)

    def backward(g):
        return (_sum_to(np.where(c, g, 0), xs) if xt is not None else None,
                _sum_to(np.where(c, 0, g), ys) if yt is not None else None)

    return apply_op(out, (xt, yt), backward, "Where")


def maximum(a: Tensor, b: Tensor) -> Tensor:
    return where(a >= b, a, b)


def minimum(a: Tensor, b: Tensor) -> Tensor:
    return where(a <= b, a, b)


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
    d = _as_dtype(dtype) or _default_dtype
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


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """[start, end) by step; int64 unless an argument is a float (then float32)."""
    _check_device(device)
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if vals[2] == 0:
        raise RuntimeError("arange: step must be nonzero")
    is_float = any(isinstance(v, float) for v in vals)
    d = _as_dtype(dtype) or (_default_dtype if is_float else int64)
    t = _wrap(np.arange(*vals).astype(d))
    return t.requires_grad_(True) if requires_grad else t


def linspace(start, end, steps, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device)
    t = _wrap(np.linspace(start, end, steps).astype(_as_dtype(dtype) or _default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def eye(n, m=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device)
    t = _wrap(np.eye(n, m, dtype=_as_dtype(dtype) or _default_dtype))
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


# torch.FloatTensor(...) / torch.LongTensor(...) constructors
class _TypedTensor:
    """``FloatTensor([1, 2])`` (data) or ``FloatTensor(2, 3)`` (sizes);
    ``isinstance(t, FloatTensor)`` checks the dtype."""

    def __init__(self, dtype, name):
        self.dtype = dtype
        self.__name__ = name

    def __call__(self, *args):
        if not args:
            return zeros(0, dtype=self.dtype)
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            if isinstance(args[0], Size):
                return zeros(*args[0], dtype=self.dtype)
            return tensor(args[0], dtype=self.dtype)
        return zeros(*args, dtype=self.dtype)

    def __instancecheck__(self, obj):
        return isinstance(obj, Tensor) and obj.dtype == self.dtype

    def __repr__(self) -> str:
        return f"<class 'ctransformer.{self.__name__}'>"


FloatTensor = _TypedTensor(float32, "FloatTensor")
DoubleTensor = _TypedTensor(float64, "DoubleTensor")
LongTensor = _TypedTensor(int64, "LongTensor")
BoolTensor = _TypedTensor(bool_, "BoolTensor")
IntTensor = _TypedTensor(int32, "IntTensor")
ByteTensor = _TypedTensor(uint8, "ByteTensor")


# ------------------------------------------------------------------ random factories
def _gen(generator):
    from .random import default_generator
    return generator or default_generator


def randn(*size, dtype=None, generator=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples from the seeded generator."""
    _check_device(device)
    t = _wrap(_gen(generator).normal(0.0, 1.0, _shape_args(size)).astype(_as_dtype(dtype) or _default_dtype))
    return t.requires_grad_(True) if requires_grad else t


def rand(*size, dtype=None, generator=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) samples from the seeded generator."""
    _check_device(device)
    t = _wrap(_gen(generator).uniform(0.0, 1.0, _shape_args(size)).astype(_as_dtype(dtype) or _default_dtype))
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
    return _wrap(_gen(generator).permutation(n).astype(_as_dtype(dtype) or int64))


def randn_like(t: Tensor, dtype=None, device=None) -> Tensor:
    return randn(t.shape, dtype=dtype or t.dtype)


def rand_like(t: Tensor, dtype=None, device=None) -> Tensor:
    return rand(t.shape, dtype=dtype or t.dtype)


def randint_like(t: Tensor, low, high=None, dtype=None) -> Tensor:
    return randint(low, high, tuple(t.shape), dtype=dtype or t.dtype)


def normal(mean: float, std: float, size, generator=None, dtype=None) -> Tensor:
    return _wrap(_gen(generator).normal(mean, std, _shape_args((size,))).astype(_as_dtype(dtype) or _default_dtype))


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
    for i, r in enumerate(rows):
        r = r / r.sum()
        out[i] = g.numpy.choice(len(r), size=num_samples, replace=replacement, p=r)
    return _wrap(out.reshape(p.shape[:-1] + (num_samples,)))


from .ops.activation import activation as _activation  # noqa: E402
from .ops.linear import matmul  # noqa: E402
from .ops.softmax import softmax as _softmax  # noqa: E402

__all__ = [_n for _n, _v in list(globals().items())
           if not _n.startswith("_") and _n not in ("annotations", "np", "numbers", "warnings", "K", "Any", "List",
                                                    "Optional", "Sequence", "Tuple", "Union", "Node",
                                                    "apply_op", "edge_of", "is_grad_enabled", "no_grad",
                                                    "run_backward", "bump_version", "saved_versions",
                                                    "share_version")]
