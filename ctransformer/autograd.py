"""The autograd engine: graph nodes, reverse-mode traversal, grad mode.

A differentiable op is one call to :func:`apply_op`::

    out = apply_op(out_array, (a, b), lambda g: (g * b_arr, g * a_arr))

``backward`` receives the gradient of the op's output (a NumPy array; a tuple
of arrays for an op with several outputs, zero-filled where an output got no
gradient) and returns one gradient per parent, ``None`` where a parent needs
none.  Gradients must already have the parent's shape (undo broadcasting in
the op); the engine casts them to the parent's dtype.  ``backward`` must not
modify ``g`` in place (the same array may be handed to several parents).

The graph: each recorded op is a :class:`Node` whose ``edges`` say where each
parent's gradient goes, fixed when the op runs (as torch's edges): ``None``
(no gradient wanted), the parent's Node (its output 0), ``(Node, i)`` (output
i of a multi-output op) or the parent Tensor itself when it is a leaf that
requires grad.  Because edges point at nodes, not at Tensors, an in-place op
that later re-points a Tensor at a new node does not re-route gradients of
ops recorded before it.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Sequence, Union

import numpy as np

if TYPE_CHECKING:
    from .tensor import Tensor

# Grad mode is process-wide (a plain flag is the cheapest thing every op
# can read; torch keeps it per thread, which the tutorials never rely on).
_grad_enabled = [True]
_Tensor = None  # set by ctransformer.tensor (avoids an import per op)
_wrap = None    # ctransformer.tensor._wrap: ndarray -> Tensor, set likewise


def is_grad_enabled() -> bool:
    """Whether ops record the graph (False inside ``no_grad()``)."""
    return _grad_enabled[0]


def set_grad_enabled(mode: bool) -> None:
    _grad_enabled[0] = bool(mode)


class _GradMode(contextlib.ContextDecorator):
    def __init__(self, mode: bool) -> None:
        self.mode = mode

    def __enter__(self):
        self.prev = _grad_enabled[0]
        _grad_enabled[0] = self.mode
        return self

    def __exit__(self, *exc):
        _grad_enabled[0] = self.prev
        return False


def no_grad() -> _GradMode:
    """Context manager / decorator: ops inside record no graph."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    return _GradMode(True)


class Node:
    """One recorded op (torch's ``grad_fn``).

    edges: one entry per parent (see the module docstring); backward: the
    op's gradient function; op: its name; dtype: the output's dtype (the
    engine casts incoming gradients to it); n_out/shapes: for ops with
    several outputs; grad/deps/mark: scratch state of a backward pass;
    retained: Tensors that asked for ``retain_grad()``."""

    __slots__ = ("edges", "backward", "op", "dtype", "n_out", "shapes", "grad", "deps", "mark", "retained")

    def __init__(self, edges, backward, op, dtype, n_out=1, shapes=None):
        self.edges = edges
        self.backward = backward
        self.op = op
        self.dtype = dtype
        self.n_out = n_out
        self.shapes = shapes
        self.grad = None
        self.mark = None
        self.retained = None

    def name(self) -> str:
        return f"{self.op or 'Op'}Backward0"

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    @property
    def next_functions(self):
        out = []
        for e in self.edges:
            if e is None:
                out.append((None, 0))
            elif isinstance(e, Node):
                out.append((e, 0))
            elif type(e) is tuple:
                out.append(e)
            else:
                out.append(("AccumulateGrad", 0))
        return tuple(out)


def edge_of(t):
    """Where the gradient of Tensor ``t`` must go (None if it needs none)."""
    if t is None or not t.requires_grad:
        return None
    n = t._node
    if n is None:
        return t
    return n if n.n_out == 1 else (n, t._idx)


def apply_op(outputs, parents: Sequence, backward: Callable, name: str = ""):
    """Wrap the NumPy result(s) of an op as Tensor(s), recording the graph
    when grad mode is on and a parent requires grad.

    outputs: an array, or a tuple of arrays (then a tuple of Tensors is
    returned; only floating outputs require grad).  parents: the Tensor
    inputs (``None`` entries are allowed and get no gradient).  backward:
    see the module docstring."""
    wrap = _wrap
    track = False
    if _grad_enabled[0]:
        for p in parents:
            if p is not None and p.requires_grad:
                track = True
                break
    if type(outputs) is tuple:
        if not track:
            return tuple(wrap(o) for o in outputs)
        node = Node(tuple(edge_of(p) for p in parents), backward, name, None, len(outputs),
                    [(o.shape, o.dtype) for o in outputs])
        outs = []
        for i, o in enumerate(outputs):
            t = wrap(o)
            if o.dtype.kind == "f":
                t.requires_grad = True
                t._node = node
                t._idx = i
            outs.append(t)
        return tuple(outs)
    t = wrap(outputs)
    if track:
        t.requires_grad = True
        t._node = Node(tuple(edge_of(p) for p in parents), backward, name, outputs.dtype)
    return t


def _accumulate_leaf(t, g: np.ndarray) -> None:
    """t.grad += g (t.grad is created as a fresh copy the first time, then
    accumulated into in place, as torch does)."""
    cur = t.grad
    if cur is not None:
        buf = cur._data
        if buf.dtype is g.dtype and buf.shape == g.shape:
            try:
                np.add(buf, g, out=buf)
                return
            except ValueError:  # a read-only grad set by the user
                pass
    data = t._data
    if g.dtype is not data.dtype and g.dtype != data.dtype:
        g = g.astype(data.dtype)
    if g.shape != data.shape:
        g = np.broadcast_to(g, data.shape)
    if cur is None:
        t.grad = _wrap(np.array(g, order="C", copy=True))  # C-contiguous: optimizers update it in place
    else:
        cur._data = cur._data + g


def _count_dependencies(root: Node) -> list:
    """Mark every node reachable from root and count, in ``node.deps``, the
    edges that point at it (each must deliver its gradient before the node
    runs).  Iterative: a 10 000-step chain does not recurse."""
    mark = object()
    root.mark = mark
    root.deps = 0
    seen = [root]
    stack = [root]
    pop, push, see = stack.pop, stack.append, seen.append
    while stack:
        for e in pop().edges:
            if e is None:
                continue
            if type(e) is tuple:
                e = e[0]
            elif not isinstance(e, Node):
                continue
            if e.mark is mark:
                e.deps += 1
            else:
                e.mark = mark
                e.deps = 1
                push(e)
                see(e)
    return seen


def _deliver_multi(node: Node, idx: int, g: np.ndarray) -> None:
    slots = node.grad
    if slots is None:
        slots = node.grad = [None] * node.n_out
    dt = node.shapes[idx][1]
    if g.dtype is not dt and g.dtype != dt:
        g = g.astype(dt)
    prev = slots[idx]
    slots[idx] = g if prev is None else prev + g


def _retain(node: Node, g) -> None:
    for t in node.retained:
        gi = g if node.n_out == 1 else g[t._idx]
        _accumulate_leaf(t, gi)


def run_backward(root, grad: np.ndarray) -> None:
    """Propagate ``grad`` (d loss / d root) to every leaf that requires grad.

    Two passes: count each node's incoming edges, then run nodes once all
    their gradient has arrived (Kahn's order), so each backward runs once."""
    rn = root._node
    if rn is None:
        if root.requires_grad:
            _accumulate_leaf(root, grad)
        return
    seen = _count_dependencies(rn)
    if rn.n_out == 1:
        rn.grad = grad
    else:
        _deliver_multi(rn, root._idx, grad)
    prev_mode = _grad_enabled[0]
    _grad_enabled[0] = False
    Node_, tuple_ = Node, tuple
    ready = [rn]
    pop, push = ready.pop, ready.append
    try:
        while ready:
            node = pop()
            g = node.grad
            node.grad = None
            if g is not None and node.n_out != 1:
                g = tuple(gi if gi is not None else np.zeros(s, d) for gi, (s, d) in zip(g, node.shapes))
            if g is not None and node.retained is not None:
                _retain(node, g)
            edges = node.edges
            if g is not None:
                grads = node.backward(g)
                if type(grads) is not tuple_:
                    grads = tuple(grads) if isinstance(grads, list) else (grads,)
            else:
                grads = (None,) * len(edges)
            for e, pg in zip(edges, grads):
                if e is None:
                    continue
                if isinstance(e, Node_):
                    if pg is not None:
                        dt = e.dtype
                        if pg.dtype is not dt and pg.dtype != dt:
                            pg = pg.astype(dt)
                        prev = e.grad
                        e.grad = pg if prev is None else prev + pg
                    e.deps -= 1
                    if not e.deps:
                        push(e)
                elif type(e) is tuple_:
                    n = e[0]
                    if pg is not None:
                        _deliver_multi(n, e[1], pg)
                    n.deps -= 1
                    if not n.deps:
                        push(n)
                elif pg is not None:
                    _accumulate_leaf(e, pg)
    except BaseException:
        for n in seen:
            n.grad = None
        raise
    finally:
        _grad_enabled[0] = prev_mode


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         allow_unused: bool = False):
    """torch.autograd.grad: gradients of ``outputs`` w.r.t. ``inputs``
    (returned, not accumulated into ``.grad``)."""
    if create_graph:
        raise NotImplementedError("autograd.grad: create_graph=True (higher-order gradients) is not supported")
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    ins = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    gos = grad_outputs if isinstance(grad_outputs, (tuple, list)) else (grad_outputs,) * len(outs)
    saved = [(t, t.grad) for t in ins]
    retained = []
    try:
        for t in ins:
            t.grad = None
            if t._node is not None:
                if t._node.retained is None:
                    t._node.retained = []
                t._node.retained.append(t)
                retained.append(t)
        for o, go in zip(outs, gos):
            o.backward(go)
        result = tuple(t.grad for t in ins)
    finally:
        for t in retained:
            t._node.retained.remove(t)
            if not t._node.retained:
                t._node.retained = None
        for t, g in saved:
            t.grad = g
    if not allow_unused and any(r is None for r in result):
        raise RuntimeError("autograd.grad: one of the differentiated Tensors appears to not have been "
                           "used in the graph (pass allow_unused=True)")
    return result


def backward(tensors, grad_tensors=None) -> None:
    """torch.autograd.backward."""
    ts = tensors if isinstance(tensors, (tuple, list)) else (tensors,)
    gs = grad_tensors if isinstance(grad_tensors, (tuple, list)) else (grad_tensors,) * len(ts)
    for t, g in zip(ts, gs):
        t.backward(g)


def Variable(data, requires_grad: bool = False, volatile: bool = False):
    """Pre-0.4 torch's ``Variable(tensor)``: today simply the Tensor (with
    ``requires_grad`` set when asked)."""
    t = data if isinstance(data, _Tensor) else _Tensor(data)
    if requires_grad:
        t.requires_grad_(True)
    return t


# ---------------------------------------------------------------- gradcheck
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
    Tensor = _Tensor
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
    Tensor = _Tensor
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    inputs = tuple(inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor) or not x.requires_grad:
            continue
        if x.dtype != np.float64:
            raise TypeError(f"gradcheck: input {i} must be float64 for a meaningful check, got {x.dtype}")
        if not x.is_leaf:
            raise ValueError(f"gradcheck: input {i} must be a leaf Tensor")
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
            for o in outs:
                if o is None:
                    continue
                n = o._data.size
                if offset <= j < offset + n and o.requires_grad:
                    seed = np.zeros(n, o._data.dtype)
                    seed[j - offset] = 1.0
                    o.backward(_wrap(seed.reshape(o._data.shape)))
                offset += n
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
