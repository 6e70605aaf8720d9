"""The autograd engine: graph nodes, reverse-mode traversal (grad mode: _grad_mode.py, re-exported here).

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

As in torch, a backward pass frees what each node saved for its gradient as
soon as the node has run (unless ``retain_graph=True``): a second backward
through such a node raises "Trying to backward through the graph a second
time"; nodes that saved nothing (add, sum, ...) may run again.  Tensors saved
for backward are checked against their version counter (bumped by every
in-place op): a saved tensor modified in place raises torch's "one of the
variables needed for gradient computation has been modified by an inplace
operation" when the node runs.
"""
from __future__ import annotations

import weakref
from typing import Callable, Optional, Sequence

import numpy as np

from ._grad_mode import (_grad_enabled, _GradMode, _inference, enable_grad, inference_mode,  # noqa: F401
                         is_grad_enabled, is_inference_mode_enabled, no_grad, set_grad_enabled)
from ._fp import enter as _fp_enter, leave as _fp_leave
from .kernels.runtime import copy_array as _copy_array

_Tensor = None  # set by ctransformer.tensor (avoids an import per op)
_wrap = None    # ctransformer.tensor._wrap: ndarray -> Tensor, set likewise


_SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they have "
    "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
    "if you need to access saved tensors after calling backward.")
_FREED = ("freed",)  # Node.versions once the node's saved values have been released
_SMALL = (int, float, bool, str, type(None), slice, np.dtype, np.generic)


class FreshGrads(tuple):
    """What a backward returns when every gradient in it is a new array that
    nothing else holds and that appears once (a kernel's fresh outputs): the
    engine may then add another contribution to a node's gradient into it in
    place, instead of allocating the sum (a residual connection's input gets
    two).  ``prev + g`` and ``g + prev`` are the same numbers (IEEE addition
    commutes), so the result does not change."""
    __slots__ = ()


def _sum_into_fresh(fresh: np.ndarray, prev: np.ndarray) -> Optional[np.ndarray]:
    """fresh += prev in place when fresh can hold the sum (same shape and
    dtype, its own writeable memory); None when it cannot."""
    if (type(fresh) is np.ndarray and type(prev) is np.ndarray and fresh.base is None
            and fresh.shape == prev.shape and fresh.dtype == prev.dtype and fresh.flags.writeable):
        np.add(fresh, prev, out=fresh)
        return fresh
    return None


def _holds_arrays(fn) -> bool:
    """Whether a backward closure keeps saved values (arrays, Tensors, kernel
    state) rather than only shapes, dtypes and flags."""
    cells = getattr(fn, "__closure__", None)
    if not cells:
        return False
    for c in cells:
        try:
            v = c.cell_contents
        except ValueError:
            continue
        if isinstance(v, _SMALL) or callable(v):
            continue
        if type(v) is tuple and all(isinstance(e, _SMALL) for e in v):
            continue
        return True
    return False


class Node:
    """One recorded op (torch's ``grad_fn``).

    edges: one entry per parent (see the module docstring); backward: the
    op's gradient function; op: its name; dtype: the output's dtype (the
    engine casts incoming gradients to it); n_out/shapes: for ops with
    several outputs; grad/deps/mark: scratch state of a backward pass;
    retained: taps on the node's outputs (``retain_grad``, hooks);
    versions: None (nothing saved, nothing to free), or ((Tensor, version),
    ...) saved for backward, checked before it runs; () when the node saves
    values to free after it runs; ``_FREED`` once released.

    Two ways build a Node: ``Node(...)`` (apply_op, ``_unary``: backward is a
    closure, edges by :func:`edge_of`) and, on the hot path, by hand: a
    subclass whose class attributes give backward / op / n_out / shapes and
    whose own slots hold what its gradient needs, made with
    ``object.__new__`` and its slots set in place (a helper call per op costs
    ~10 % of an 8x128 elementwise op).  Those places, all of them:

    * ``ctransformer/tensor/_arith.py`` ``_make_arith``: ``_BinaryNode``
      subclasses (Tensor op Tensor) and ``_ScalarNode`` subclasses (Tensor op
      Python scalar);
    * ``ctransformer/ops/activation.py`` ``activation``: ``_ActivationNode``.

    Each writes out edge_of's rule and sets every slot below (deps included);
    tests/test_fast_nodes.py checks that, for every fast subclass."""

    __slots__ = ("edges", "backward", "op", "dtype", "n_out", "shapes", "grad", "deps", "mark", "retained",
                 "versions")

    def __init__(self, edges, backward, op, dtype, n_out=1, shapes=None, versions=()):
        self.edges = edges
        self.backward = backward
        self.op = op
        self.dtype = dtype
        self.n_out = n_out
        self.shapes = shapes
        self.grad = None
        self.deps = 0
        self.mark = None
        self.retained = None
        self.versions = versions

    def name(self) -> str:
        return f"{self.op or 'Op'}Backward0"

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    def _free(self) -> None:
        """Release what the node saved for backward (after it has run)."""
        if _holds_arrays(self.backward):
            self.backward = None
            self.versions = _FREED
        else:
            self.versions = None  # nothing saved: may run again, as torch's add/sum

    def _fill(self, g: list) -> tuple:
        """The gradients of a multi-output node, zeros where an output got none."""
        return tuple(gi if gi is not None else np.zeros(s, d) for gi, (s, d) in zip(g, self.shapes))

    def saves_array(self, arr: np.ndarray) -> bool:
        """Whether the node's backward keeps ``arr`` (an output modified in
        place must then fail its backward, as torch's version check)."""
        for c in getattr(self.backward, "__closure__", None) or ():
            try:
                if c.cell_contents is arr:
                    return True
            except ValueError:
                pass
        return False

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
                out.append((_accumulator_of(e), 0))
        return tuple(out)


class AccumulateGrad:
    """A leaf's place in ``grad_fn.next_functions`` (torch's node of that
    name, where the gradient is added to ``variable.grad``): ``variable`` is
    the leaf, ``next_functions`` is empty, and a leaf has one such object
    while anything holds it (``is`` compares them, as torch's)."""

    __slots__ = ("variable", "__weakref__")
    next_functions = ()

    def __init__(self, variable) -> None:
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {id(self):#x}>"


# id(leaf) -> its AccumulateGrad while one is alive (the object holds the
# leaf, so the id cannot be reused for another tensor meanwhile)
_accumulators: "weakref.WeakValueDictionary[int, AccumulateGrad]" = weakref.WeakValueDictionary()


def _accumulator_of(leaf) -> AccumulateGrad:
    node = _accumulators.get(id(leaf))
    if node is None:
        node = _accumulators[id(leaf)] = AccumulateGrad(leaf)
    return node


def edge_of(t):
    """Where the gradient of Tensor ``t`` must go (None if it needs none)."""
    if t is None or not t.requires_grad:
        return None
    n = t._node
    if n is None:
        return t
    return n if n.n_out == 1 else (n, t._idx)


def version_of(t) -> int:
    """The current version of Tensor ``t`` (the number of in-place ops applied
    to it, or to a view / detached alias sharing its counter)."""
    v = t._version
    return 0 if v is None else v[0]


def bump_version(t) -> None:
    """Record an in-place modification of ``t``.  A node that saved ``t``'s
    values as its output (exp, sigmoid, ...) is marked so that its backward
    fails as torch's does."""
    v = t._version
    if v is None:
        t._version = [1]
    else:
        v[0] += 1
    n = t._node
    if n is not None and n.versions is not _FREED and n.saves_array(t._data):
        n.versions = (n.versions or ()) + ((None, t._idx, version_of(t) - 1, t),)


def share_version(src, dst) -> None:
    """Make view/alias ``dst`` share ``src``'s version counter (torch's views)."""
    v = src._version
    if v is None:
        v = src._version = [0]
    dst._version = v


def saved_versions(*tensors):
    """((t, version), ...) for the Tensors an op saves (None entries skipped)."""
    return tuple((t, version_of(t)) for t in tensors if t is not None)


def apply_op(outputs, parents: Sequence, backward: Callable, name: str = "", saved: Sequence = ()):
    """Wrap the NumPy result(s) of an op as Tensor(s), recording the graph
    when grad mode is on and a parent requires grad.

    outputs: an array, or a tuple of arrays (then a tuple of Tensors is
    returned; only floating outputs require grad).  parents: the Tensor
    inputs (``None`` entries are allowed and get no gradient).  backward:
    see the module docstring.  saved: input Tensors whose values backward
    uses (checked against in-place modification)."""
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
                    [(o.shape, o.dtype) for o in outputs], saved_versions(*saved) if saved else ())
        outs = []
        for i, o in enumerate(outputs):
            t = wrap(o)
            if o.dtype.kind == "f":
                t._requires_grad = True
                t._node = node
                t._idx = i
            outs.append(t)
        return tuple(outs)
    t = wrap(outputs)
    if track:
        t._requires_grad = True
        t._node = Node(tuple(edge_of(p) for p in parents), backward, name, outputs.dtype, 1, None,
                       saved_versions(*saved) if saved else ())
    return t


_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long", "int32": "Int",
               "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def _type_name(arr: np.ndarray) -> str:
    return f"torch.{_TYPE_NAMES.get(arr.dtype.name, arr.dtype.name.capitalize())}Tensor"


def _check_versions(node: Node) -> None:
    """Raise torch's errors for a freed node or a saved tensor modified in place."""
    vs = node.versions
    if vs is _FREED:
        raise RuntimeError(_SECOND_BACKWARD)
    for entry in vs:
        if entry[0] is None:  # an output saved by the node, modified in place
            _, idx, expected, t = entry
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace operation: "
                f"[{_type_name(t._data)} {list(t._data.shape)}], which is output {idx} of {node.op}, is at "
                f"version {version_of(t)}; expected version {expected} instead. Hint: enable anomaly detection "
                "to find the operation that failed to compute its gradient, with "
                "torch.autograd.set_detect_anomaly(True, check_nan=False).")
        t, expected = entry
        if version_of(t) != expected:
            where = "" if t._node is None else f", which is output {t._idx} of {t._node.op},"
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace operation: "
                f"[{_type_name(t._data)} {list(t._data.shape)}]{where} is at version {version_of(t)}; expected "
                f"version {expected} instead. Hint: enable anomaly detection to find the operation that failed "
                "to compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).")


# ---------------------------------------------------------------- hooks and taps
class _Tap:
    """Something that sees (and may replace) the gradient of one output of a
    node during backward: a tensor hook, ``retain_grad`` or ``autograd.grad``
    capturing a non-leaf input.  kind orders them: hooks (0) first, then
    retain_grad (1), then capture (2), as torch runs retains_grad hooks last."""

    __slots__ = ("idx", "kind", "fn", "tensor", "handle_id")

    def __init__(self, idx: int, kind: int, fn=None, tensor=None) -> None:
        self.idx = idx
        self.kind = kind
        self.fn = fn
        self.tensor = tensor
        self.handle_id = None


class RemovableHandle:
    """What ``register_hook`` returns: ``handle.remove()`` unregisters it."""

    def __init__(self, remove: Callable[[], None]) -> None:
        self._remove = remove

    def remove(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def add_tap(node: Node, tap: _Tap) -> None:
    taps = node.retained
    if taps is None:
        node.retained = [tap]
    else:
        taps.append(tap)
        taps.sort(key=lambda x: x.kind)  # stable: registration order within a kind


def remove_tap(node: Node, tap: _Tap) -> None:
    taps = node.retained
    if taps is not None:
        node.retained = [t for t in taps if t is not tap] or None


# leaf hooks: id(tensor) -> (weakref to it, [fn, ...])
_leaf_hooks: dict = {}


def register_leaf_hook(t, fn) -> RemovableHandle:
    key = id(t)
    entry = _leaf_hooks.get(key)
    if entry is None or entry[0]() is not t:
        entry = _leaf_hooks[key] = (weakref.ref(t, lambda _r, k=key: _leaf_hooks.pop(k, None)), [])
    fns = entry[1]
    fns.append(fn)

    def remove():
        if fn in fns:
            fns.remove(fn)
    return RemovableHandle(remove)


def _hook_result(fn, g: np.ndarray) -> np.ndarray:
    """Call a tensor hook on gradient ``g``; a returned Tensor replaces it."""
    r = fn(_wrap(g))
    if r is None:
        return g
    arr = r._data if isinstance(r, _Tensor) else np.asarray(r)
    if arr.shape != g.shape:
        raise RuntimeError(f"hook '{getattr(fn, '__name__', 'hook')}' has changed the size of value")
    return arr


def _leaf_hooked(t, g: np.ndarray) -> np.ndarray:
    entry = _leaf_hooks.get(id(t))
    if entry is None or entry[0]() is not t:
        return g
    for fn in list(entry[1]):
        g = _hook_result(fn, g)
    return g


def _stealable(g, data: np.ndarray) -> bool:
    """Whether the fresh array g can be a leaf's .grad as it is (no copy)."""
    return (type(g) is np.ndarray and g.base is None and g.flags.c_contiguous and g.flags.writeable
            and g.dtype == data.dtype and g.shape == data.shape)


def _accumulate_leaf(t, g: np.ndarray, fresh: bool = False) -> None:
    """t.grad += g (t.grad is created as a fresh copy the first time, then
    accumulated into in place, as torch does).  fresh: g came in a FreshGrads,
    so nothing else holds it; the first time it becomes t.grad itself when it
    can (C-contiguous, its own memory, t's dtype and shape: torch's
    AccumulateGrad steals such a gradient too), instead of a copy."""
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
    if cur is None and fresh and _stealable(g, data):
        t.grad = _wrap(g)
        return
    if cur is None:  # a copy, C-contiguous (optimizers update it in place); an array's on the thread pool
        t.grad = _wrap(_copy_array(g) if type(g) is np.ndarray else np.array(g, order="C", copy=True))
    else:
        cur._data = cur._data + g


def _count_dependencies(roots) -> list:
    """Mark every node reachable from the root nodes and count, in
    ``node.deps``, the edges that point at it (each must deliver its gradient
    before the node runs).  Iterative: a 10 000-step chain does not recurse."""
    mark = object()
    seen = []
    stack = []
    for r in roots:
        if r.mark is not mark:
            r.mark = mark
            r.deps = 0
            seen.append(r)
            stack.append(r)
    pop, push, see = stack.pop, stack.append, seen.append
    while stack:
        edges = pop().edges
        for e in edges:
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


def _run_taps(node: Node, g):
    """Apply the node's taps (hooks, retain_grad, capture) to the gradient of
    its outputs; returns the (possibly replaced) gradient."""
    multi = node.n_out != 1
    if multi:
        g = list(g)
    for tap in node.retained:
        gi = g[tap.idx] if multi else g
        if gi is None:
            continue
        if tap.kind == 0:
            gi = _hook_result(tap.fn, gi)
        elif tap.kind == 1:
            _accumulate_leaf(tap.tensor, gi)
        else:
            tap.fn(gi)
        if multi:
            g[tap.idx] = gi
        else:
            g = gi
    return tuple(g) if multi else g


def run_backward(roots, retain_graph: bool = False, capture: Optional[dict] = None) -> None:
    """Propagate gradients from ``roots`` ((Tensor, d loss / d Tensor array),
    ...) to every leaf that requires grad, in one pass.

    Two passes: count each node's incoming edges, then run nodes once all
    their gradient has arrived (Kahn's order), so each backward runs once.
    Without ``retain_graph`` every node frees its saved values after running.
    ``capture`` (autograd.grad): {id(leaf): callback(grad)}; leaves are then
    not accumulated into, captured ones hand their gradient to the callback."""
    leaf_hooks = _leaf_hooks
    nodes = []
    for t, g in roots:
        n = t._node
        if n is None:
            if t.requires_grad:
                _deliver_leaf(t, g, capture)
            continue
        nodes.append(n)
    if not nodes:
        return
    seen = _count_dependencies(nodes)
    for t, g in roots:
        n = t._node
        if n is None:
            continue
        if n.n_out == 1:
            n.grad = g if n.grad is None else n.grad + g
        else:
            _deliver_multi(n, t._idx, g)
    prev_mode = _grad_enabled[0]
    _grad_enabled[0] = False
    Node_, tuple_ = Node, tuple
    free = not retain_graph
    ready = []
    for n in nodes:
        if not n.deps and n not in ready:
            ready.append(n)
    pop, push = ready.pop, ready.append
    fp_token = _fp_enter()  # the gradient formulas' inf / nan (1 / x at 0) without NumPy's warnings, as torch
    try:
        while ready:
            node = pop()
            g = node.grad
            node.grad = None
            vs = node.versions
            if vs:  # saved tensors: freed, or modified in place since?
                if vs is _FREED:
                    raise RuntimeError(_SECOND_BACKWARD)
                for e in vs:
                    t = e[0]
                    if t is None:
                        _check_versions(node)
                    tv = t._version
                    if tv is not None and tv[0] != e[1]:
                        _check_versions(node)
            if g is not None and node.n_out != 1:
                g = node._fill(g)
            if g is not None and node.retained is not None:
                g = _run_taps(node, g)
            edges = node.edges
            fresh = False
            if g is not None:
                grads = node.backward(g)
                if type(grads) is not tuple_:
                    fresh = type(grads) is FreshGrads
                    if not fresh:
                        grads = tuple(grads) if isinstance(grads, list) else (grads,)
            else:
                grads = (None,) * len(edges)
            if free and vs is not None:
                node._free()
            for e, pg in zip(edges, grads):
                if e is None:
                    continue
                if isinstance(e, Node_):
                    if pg is not None:
                        dt = e.dtype
                        if pg.dtype is not dt and pg.dtype != dt:
                            pg = pg.astype(dt)
                        prev = e.grad
                        if prev is None:
                            e.grad = pg
                        else:
                            summed = _sum_into_fresh(pg, prev) if fresh else None
                            e.grad = prev + pg if summed is None else summed
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
                    if leaf_hooks or capture is not None:
                        _deliver_leaf(e, pg, capture)
                    else:
                        _accumulate_leaf(e, pg, fresh)
    except BaseException:
        for n in seen:
            n.grad = None
        raise
    finally:
        _fp_leave(fp_token)
        _grad_enabled[0] = prev_mode


def _deliver_leaf(t, g: np.ndarray, capture: Optional[dict]) -> None:
    if _leaf_hooks:
        g = _leaf_hooked(t, g)
    if capture is None:
        _accumulate_leaf(t, g)
        return
    cb = capture.get(id(t))
    if cb is not None:
        cb(g)


from ._autograd_api import Variable, backward, grad  # noqa: E402  (torch.autograd's functions)
from .autograd_function import Function, FunctionCtx, once_differentiable  # noqa: E402
from ._gradcheck import gradcheck, gradgradcheck  # noqa: E402

__all__ = ["Function", "FunctionCtx", "Variable", "backward", "enable_grad", "grad", "gradcheck", "gradgradcheck",
           "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "no_grad", "once_differentiable",
           "set_grad_enabled"]
