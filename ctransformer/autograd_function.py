"""``ctransformer.autograd.Function``: an op with a hand-written backward,
recorded on the same graph as every built-in op (torch's contract).

    class Exp(Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad_out):
            (y,) = ctx.saved_tensors
            return grad_out * y

    z = Exp.apply(x)

``forward`` runs with grad mode off and receives the arguments as given;
``backward`` receives one gradient per output (Tensors; zeros for an output
that got none, or None after ``ctx.set_materialize_grads(False)``) and
returns one gradient per forward argument (None for non-Tensor arguments
and inputs that need none).  The new style (``forward(*args)`` plus a
``setup_context(ctx, inputs, output)`` staticmethod) works too.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from . import autograd as _ag
from .autograd import _FREED, _SECOND_BACKWARD, Node, bump_version, edge_of, saved_versions

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` of a custom Function: what forward leaves for backward."""

    def __init__(self) -> None:
        self._saved: Optional[tuple] = ()
        self._non_differentiable: tuple = ()
        self._dirty: tuple = ()
        self.materialize_grads = True
        self.needs_input_grad: Tuple[bool, ...] = ()

    def save_for_backward(self, *tensors) -> None:
        """Keep Tensors (or None) for backward: read them back with
        ``ctx.saved_tensors``.  They are checked for in-place modification
        and released once backward has run."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, _ag._Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument {i} is of type "
                                f"{type(t).__name__}")
        self._saved = tuple(tensors)

    def save_for_forward(self, *tensors) -> None:
        raise NotImplementedError("save_for_forward: forward-mode AD is not supported")

    @property
    def saved_tensors(self) -> tuple:
        if self._saved is None:
            raise RuntimeError(_SECOND_BACKWARD)
        return self._saved

    def mark_non_differentiable(self, *outputs) -> None:
        """Outputs that get no gradient (they do not require grad)."""
        self._non_differentiable = tuple(outputs)

    def mark_dirty(self, *tensors) -> None:
        """Inputs that forward modified in place (and returns)."""
        self._dirty = tuple(tensors)

    def set_materialize_grads(self, value: bool) -> None:
        """False: backward receives None (not zeros) for outputs without a gradient."""
        self.materialize_grads = bool(value)


class BackwardCFunction(FunctionCtx):
    """torch's name for the ctx class of a recorded Function."""


class _FunctionNode(Node):
    """The graph node of one Function.apply: edges go to the Tensor
    arguments; ``arg_pos`` maps each edge to its forward argument."""

    __slots__ = ("ctx", "fn_cls", "arg_pos", "arg_meta", "n_args", "out_meta")

    def name(self) -> str:
        return f"{self.fn_cls.__name__}Backward"

    def _free(self) -> None:
        if self.ctx._saved:
            self.ctx._saved = None
            self.versions = _FREED

    def saves_array(self, arr: np.ndarray) -> bool:
        return any(t is not None and t._data is arr for t in (self.ctx._saved or ()))

    def _fill(self, g):
        return g  # None stays None: backward materializes (or not)

    def backward(self, g):
        ctx = self.ctx
        gs = g if self.n_out != 1 else (g,)
        grads_in = []
        for gi, (shape, dtype, diff) in zip(gs, self.out_meta):
            if gi is None and ctx.materialize_grads:
                gi = np.zeros(shape, dtype)
            grads_in.append(None if gi is None else _ag._wrap(gi))
        res = self.fn_cls.backward(ctx, *grads_in)
        if not isinstance(res, tuple):
            res = (res,)
        name = self.name()
        if len(res) > self.n_args:
            if any(r is not None for r in res[self.n_args:]):
                raise RuntimeError(f"function {name} returned an incorrect number of gradients (expected "
                                   f"{self.n_args}, got {len(res)})")
            res = res[:self.n_args]
        if len(res) != self.n_args:
            raise RuntimeError(f"function {name} returned an incorrect number of gradients (expected "
                               f"{self.n_args}, got {len(res)})")
        out = []
        for pos, e, (shape, dtype) in zip(self.arg_pos, self.edges, self.arg_meta):
            r = res[pos]
            if r is None or e is None:
                out.append(None)
                continue
            arr = r._data if isinstance(r, _ag._Tensor) else np.asarray(r)
            out.append(_fit(arr, pos, shape, dtype, name))
        tensor_pos = set(self.arg_pos)
        for pos, r in enumerate(res):
            if pos not in tensor_pos and r is not None:
                raise RuntimeError(f"function {name} returned a gradient different than None at position "
                                   f"{pos + 1}, but the corresponding forward input was not a Variable")
        return tuple(out)


def _fit(arr: np.ndarray, pos: int, shape: tuple, dtype: np.dtype, name: str) -> np.ndarray:
    """A returned gradient checked against its input's shape (summed over
    broadcast dims when it expands to it, as torch's validate_outputs)."""
    if arr.shape != shape:
        try:
            ok = np.broadcast_shapes(shape, arr.shape) == tuple(arr.shape) and len(arr.shape) >= len(shape)
        except ValueError:
            ok = False
        if not ok:
            raise RuntimeError(f"Function {name} returned an invalid gradient at index {pos} - got "
                               f"{list(arr.shape)} but expected shape compatible with {list(shape)}")
        arr = _ag_sum_to(arr, shape)
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr


def _ag_sum_to(g: np.ndarray, shape: tuple) -> np.ndarray:
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        cls._backward_cls = cls  # torch exposes the ctx class per Function


class Function(metaclass=_FunctionMeta):
    """Base class of custom autograd ops (torch.autograd.Function): subclass
    it with staticmethods ``forward(ctx, *args)`` and ``backward(ctx,
    *grad_outputs)``, call it through ``MyFunction.apply(*args)``."""

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> Any:
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx: Any, *grad_inputs: Any) -> Any:
        raise NotImplementedError("You must implement the jvp function for custom autograd.Function to use it "
                                  "with forward mode AD.")

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is deprecated. Please use new-"
                           "style autograd function with static forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run forward (grad mode off) and record one graph node whose
        backward is ``cls.backward``."""
        Tensor = _ag._Tensor
        if kwargs:
            raise TypeError(f"{cls.__name__}.apply: keyword arguments are not supported (pass them positionally)")
        ctx = BackwardCFunction()
        track = _ag._grad_enabled[0]
        ctx.needs_input_grad = tuple(track and isinstance(a, Tensor) and a.requires_grad for a in args)
        new_style = cls.setup_context is not Function.setup_context
        prev = _ag._grad_enabled[0]
        _ag._grad_enabled[0] = False
        try:
            if new_style:
                outputs = cls.forward(*args)
                cls.setup_context(ctx, args, outputs)
            else:
                outputs = cls.forward(ctx, *args)
        finally:
            _ag._grad_enabled[0] = prev
        if not any(ctx.needs_input_grad):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        arg_pos = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor))
        node = _FunctionNode.__new__(_FunctionNode)
        node.edges = tuple(edge_of(args[i]) for i in arg_pos)
        node.op = cls.__name__
        node.grad = node.mark = node.retained = None
        node.ctx = ctx
        node.fn_cls = cls
        node.arg_pos = arg_pos
        node.n_args = len(args)
        node.arg_meta = tuple((args[i]._data.shape, args[i]._data.dtype) for i in arg_pos)
        inputs_by_id = {id(a): a for a in args if isinstance(a, Tensor)}
        nondiff = {id(t) for t in ctx._non_differentiable}
        dirty = {id(t) for t in ctx._dirty}
        result, meta = [], []
        for o in outs:
            if not isinstance(o, Tensor):
                result.append(o)
                continue
            if id(o) in inputs_by_id and id(o) not in dirty:
                alias = _ag._wrap(o._data)  # an input returned as is: a new Tensor on the same storage
                nondiff.add(id(alias)) if id(o) in nondiff else None
                o = alias
            result.append(o)
            meta.append(o)
        node.n_out = len(meta)
        node.dtype = meta[0]._data.dtype if len(meta) == 1 else None
        node.shapes = [(t._data.shape, t._data.dtype) for t in meta] if len(meta) != 1 else None
        node.out_meta = [(t._data.shape, t._data.dtype, id(t) not in nondiff and t._data.dtype.kind in "fc")
                         for t in meta]
        for i, t in enumerate(meta):
            if id(t) in dirty:
                bump_version(t)
            if node.out_meta[i][2]:
                t._requires_grad = True
                t._node = node
                t._idx = i
            elif id(t) in dirty or t._node is None:
                t._requires_grad = False
        node.versions = saved_versions(*(t for t in (ctx._saved or ()) if t is not None)) or None
        return result[0] if single else tuple(result)


def once_differentiable(fn):
    """torch's decorator for a backward that is not itself differentiable:
    every backward here already runs without recording a graph."""
    return fn
