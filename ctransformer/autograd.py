"""The autograd engine: graph nodes, reverse-mode traversal, grad mode.

A differentiable op is one call to :func:`apply_op`::

    out = apply_op(out_array, (a, b), lambda g: (g * b_arr, g * a_arr))

``backward`` receives the gradient of the op's output (a NumPy array; a tuple
of arrays for an op with several outputs, zero-filled where an output got no
gradient) and returns one gradient per parent, ``None`` where a parent needs
none.  Gradients must already have the parent's shape (undo broadcasting in
the op).  That is the whole contract: the kernels compute, this file routes.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Optional, Sequence, Tuple, Union

import numpy as np

# Grad mode is process-wide (a plain flag is the cheapest thing every op
# can read; torch keeps it per thread, which the tutorials never rely on).
_grad_enabled = [True]
_Tensor = None  # set by ctransformer.tensor (avoids an import per op)


def is_grad_enabled() -> bool:
    """Whether ops record the graph (False inside ``no_grad()``)."""
    return _grad_enabled[0]


def set_grad_enabled(mode: bool) -> None:
    _grad_enabled[0] = bool(mode)


class _GradMode(contextlib.ContextDecorator):
    def __init__(self, mode: bool) -> None:
        self.mode = mode

    def __enter__(self):
        self.prev = is_grad_enabled()
        set_grad_enabled(self.mode)
        return self

    def __exit__(self, *exc):
        set_grad_enabled(self.prev)
        return False


def no_grad() -> _GradMode:
    """Context manager / decorator: ops inside record no graph."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    return _GradMode(True)


class Node:
    """One recorded op: its parents (Tensors) and its backward function.

    ``shapes``/``dtypes`` are kept only for ops with several outputs, to
    zero-fill the gradient of an output that received none."""

    __slots__ = ("parents", "backward", "n_out", "shapes", "name")

    def __init__(self, parents, backward, n_out=1, shapes=None, name=""):
        self.parents = parents
        self.backward = backward
        self.n_out = n_out
        self.shapes = shapes
        self.name = name


def apply_op(outputs, parents: Sequence, backward: Callable, name: str = ""):
    """Wrap the NumPy result(s) of an op as Tensor(s), recording the graph
    when grad mode is on and a parent requires grad.

    outputs: an array, or a tuple of arrays (then a tuple of Tensors is
    returned).  parents: the Tensor inputs (non-Tensors are ignored: pass
    only Tensors).  backward: see the module docstring."""
    Tensor = _Tensor
    track = False
    if _grad_enabled[0]:
        for p in parents:
            if p is not None and p.requires_grad:
                track = True
                break
    if isinstance(outputs, tuple):
        if not track:
            return tuple(Tensor._wrap(o) for o in outputs)
        node = Node(tuple(parents), backward, len(outputs),
                    [(o.shape, o.dtype) for o in outputs], name)
        outs = []
        for i, o in enumerate(outputs):
            t = Tensor._wrap(o, o.dtype.kind == "f")
            t._node, t._idx = (node, i) if t.requires_grad else (None, 0)
            outs.append(t)
        return tuple(outs)
    if not track:
        return Tensor._wrap(outputs)
    t = Tensor._wrap(outputs, True)
    t._node = Node(tuple(parents), backward, 1, None, name)
    return t


def _topological_nodes(root_node: Node):
    """Nodes reachable from root_node, parents before children (iterative,
    so 1000-step recurrences do not hit the recursion limit)."""
    order, seen = [], {id(root_node)}
    stack = [(root_node, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        stack.append((node, True))
        for p in node.parents:
            if p is not None and p._node is not None and id(p._node) not in seen:
                seen.add(id(p._node))
                stack.append((p._node, False))
    return order


def _accumulate_leaf(t, g: np.ndarray) -> None:
    from .tensor import Tensor

    if g.dtype != t._data.dtype:
        g = g.astype(t._data.dtype)
    if t.grad is None:
        # Copy: g may alias a buffer that another op's backward also returned.
        t.grad = Tensor._wrap(np.array(g, order="C", copy=True))
    else:
        t.grad._data = t.grad._data + g


def run_backward(root, grad: np.ndarray) -> None:
    """Propagate ``grad`` (d loss / d root) to every leaf that requires grad."""
    if root._node is None:
        if root.requires_grad:
            _accumulate_leaf(root, grad)
        return
    pending = {id(root._node): [None] * root._node.n_out}
    pending[id(root._node)][root._idx] = grad
    for node in reversed(_topological_nodes(root._node)):
        out_grads = pending.pop(id(node), None)
        if out_grads is None:
            continue
        if node.n_out == 1:
            g_out = out_grads[0]
        else:
            g_out = tuple(g if g is not None else np.zeros(s, d)
                          for g, (s, d) in zip(out_grads, node.shapes))
        parent_grads = node.backward(g_out)
        if not isinstance(parent_grads, (tuple, list)):
            parent_grads = (parent_grads,)
        for p, g in zip(node.parents, parent_grads):
            if g is None or p is None or not p.requires_grad:
                continue
            if p._node is None:
                _accumulate_leaf(p, g)
                continue
            slots = pending.get(id(p._node))
            if slots is None:
                slots = pending[id(p._node)] = [None] * p._node.n_out
            prev = slots[p._idx]
            slots[p._idx] = g if prev is None else prev + g
            if p._retain:
                _accumulate_leaf(p, g)


def _vjp_numeric(fn, inputs, i, eps):
    """Numerical Jacobian of fn w.r.t. inputs[i], (n_in, n_out)."""
    x = inputs[i]._data
    flat = x.reshape(-1)
    cols = []
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + eps
        up = _flat_out(fn(*inputs))
        flat[k] = old - eps
        down = _flat_out(fn(*inputs))
        flat[k] = old
        cols.append((up - down) / (2 * eps))
    return np.stack(cols) if cols else np.zeros((0, _flat_out(fn(*inputs)).size))


def _flat_out(out):
    from .tensor import Tensor

    outs = out if isinstance(out, (tuple, list)) else (out,)
    return np.concatenate([np.asarray(o._data if isinstance(o, Tensor) else o, dtype=np.float64).reshape(-1)
                           for o in outs if o is not None])


def gradcheck(fn: Callable, inputs: Union[Sequence, "Tensor"], eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """Compare autograd's gradients of ``fn(*inputs)`` with float64 central
    differences, for every input that requires grad (as torch.autograd.gradcheck).

    Inputs should be float64 Tensors.  Each output element's gradient row is
    checked: analytic J^T e_j for every output j.  Returns True, or raises
    (or returns False when ``raise_exception=False``) naming the input and
    the largest mismatch."""
    from .tensor import Tensor

    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    inputs = tuple(inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor) or not x.requires_grad:
            continue
        if x.dtype != np.float64:
            raise TypeError(f"gradcheck: input {i} must be float64 for a meaningful check, got {x.dtype}")
        numeric = _vjp_numeric(fn, inputs, i, eps)  # (n_in, n_out)
        n_out = numeric.shape[1]
        analytic = np.zeros_like(numeric)
        for j in range(n_out):
            for t in inputs:
                if isinstance(t, Tensor):
                    t.grad = None
            out = fn(*inputs)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            # seed e_j over the concatenated outputs
            offset = 0
            total = None
            for o in outs:
                if o is None:
                    continue
                n = o._data.size
                if offset <= j < offset + n and o.requires_grad:
                    seed = np.zeros(n)
                    seed[j - offset] = 1.0
                    term = (o * Tensor._wrap(seed.reshape(o.shape).astype(o.dtype))).sum()
                    total = term if total is None else total + term
                offset += n
            if total is not None:
                total.backward()
            g = inputs[i].grad
            analytic[:, j] = 0.0 if g is None else g._data.reshape(-1)
        if not np.allclose(analytic, numeric, atol=atol, rtol=rtol):
            err = np.abs(analytic - numeric).max()
            msg = (f"gradcheck: gradient of input {i} (shape {tuple(x.shape)}) does not match "
                   f"central differences; max abs difference {err:.3e} (atol {atol}, rtol {rtol})")
            if raise_exception:
                raise AssertionError(msg)
            return False
    for t in inputs:
        if isinstance(t, Tensor):
            t.grad = None
    return True
