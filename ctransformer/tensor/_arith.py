"""Recording ops on the hot path: :func:`_unary` (a one-input op) and the binary arithmetic
operators (``+ - * / **`` between Tensors or with Python scalars), each a Node subclass whose
slots hold exactly what its gradient needs."""
from __future__ import annotations

import sys
import numbers

import numpy as np

from .._fp import enter as _fp_enter, leave as _fp_leave
from ..autograd import Node, _FREED, _grad_enabled, edge_of
from . import _dtypes
from ._dtypes import bool_
from ._helpers import _ADD, _DIV, _MUL, _POW, _SUB, _UFUNCS, _promote, _sum_to
from ._core import Tensor, _tnew

# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


def _unary(x: Tensor, out: np.ndarray, backward, name: str) -> Tensor:
    """Record a one-input op (the fast path of apply_op)."""
    t = _tnew(Tensor)
    t._data = out
    t.grad = None
    t._idx = 0
    t._version = None
    if _grad_enabled[0] and x.requires_grad:
        t._requires_grad = True
        t._node = Node((edge_of(x),), backward, name, out.dtype)
    else:
        t._requires_grad = False
        t._node = None
    return t


# ---------------------------------------------------------------- binary arithmetic
# (The Node construction below is one of the fast paths listed at autograd.Node: written out,
# not a helper, because a call per op costs ~10 % here; tests/test_fast_nodes.py checks that
# each sets every slot of Node.)
# The hot path of every model: one Tensor, one Node and one edges tuple per
# op.  Built-in ops record a Node subclass whose slots hold exactly what the
# gradient needs (add saves nothing, mul saves its operands) and whose
# ``backward`` is a method: no closure and no cells per op, which keeps
# allocation and garbage-collector work low on long recurrent graphs.
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
    fp_enter, fp_leave = _fp_enter, _fp_leave

    def arith(x: Tensor, other) -> Tensor:
        a = x._data
        if isinstance(other, Tensor):
            b = other._data
            if a.dtype is not b.dtype or a.dtype.kind not in "fc":
                if code == _SUB and (a.dtype == bool_ or b.dtype == bool_):
                    raise _bool_sub_error()
                dt = _promote(a, b)
                if code == _DIV and dt.kind not in "fc":
                    dt = _dtypes._default_dtype
                if a.dtype != dt:
                    a = a.astype(dt)
                if b.dtype != dt:
                    b = b.astype(dt)
            if rev:
                a, b, x, other = b, a, other, x
            token = fp_enter()  # inf / nan without NumPy's RuntimeWarning, as torch (_fp.py)
            try:
                out = ufunc(a, b)
            except ValueError as e:  # integers to negative integer powers: torch's class
                raise RuntimeError(str(e)) from None
            finally:
                fp_leave(token)
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
                n.deps = 0
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
                t._requires_grad = True
                t._node = n
            else:
                t._requires_grad = False
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
                return arith(x, _T.as_tensor(other))
            tp = type(other)
        if a.dtype.kind not in "fc" and (tp is float or code == _DIV or (code == _POW and rev)):
            if code == _SUB and a.dtype == bool_:
                raise _bool_sub_error()
            a = a.astype(_dtypes._default_dtype)
        elif code == _SUB and a.dtype == bool_:
            raise _bool_sub_error()
        token = fp_enter()
        try:
            out = ufunc(other, a) if rev else ufunc(a, other)
        except ValueError as e:
            raise RuntimeError(str(e)) from None
        finally:
            fp_leave(token)
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
            n.deps = 0
            n.s = other
            if saves_scalar:
                n.a = a
                n.out = out
            n.versions = () if frees_scalar else None  # () : freed after backward
            t._requires_grad = True
            t._node = n
        else:
            t._requires_grad = False
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
