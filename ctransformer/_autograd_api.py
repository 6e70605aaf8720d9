"""torch.autograd's functions over the engine (ctransformer.autograd):
``grad`` (gradients returned, not accumulated), ``backward`` (several roots
in one pass) and the legacy ``Variable``."""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import autograd as _ag
from .autograd import _Tap, _accumulate_leaf, add_tap, remove_tap, run_backward

__all__ = ["Variable", "backward", "grad"]


def _grad_array(t, g, what: str, i: int) -> np.ndarray:
    """The seed gradient for output ``t`` (None: ones for a scalar)."""
    data = t._data
    if g is None:
        if data.size != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        return np.ones_like(data)
    arr = g._data if isinstance(g, _ag._Tensor) else np.asarray(g)
    if arr.shape != data.shape:
        raise RuntimeError(f"Mismatch in shape: {what}[{i}] has a shape of {tuple(arr.shape)} and output[{i}] "
                           f"has a shape of {tuple(data.shape)}.")
    if arr.dtype != data.dtype:
        arr = arr.astype(data.dtype)
    return arr


def _roots(outputs, grad_outputs, what: str) -> list:
    outs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    if grad_outputs is None:
        gos = (None,) * len(outs)
    else:
        gos = tuple(grad_outputs) if isinstance(grad_outputs, (tuple, list)) else (grad_outputs,)
    if len(gos) != len(outs):
        raise RuntimeError(f"got {len(outs)} tensors and {len(gos)} gradients")
    roots = []
    for i, (o, go) in enumerate(zip(outs, gos)):
        if not o.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        roots.append((o, _grad_array(o, go, what, i)))
    return roots


def grad(outputs, inputs, grad_outputs=None, retain_graph: Optional[bool] = None, create_graph: bool = False,
         allow_unused: Optional[bool] = None, is_grads_batched: bool = False, materialize_grads: bool = False):
    """torch.autograd.grad: the gradients of ``outputs`` with respect to
    ``inputs`` (a tuple, one per input), returned rather than accumulated
    into any ``.grad``.  ``grad_outputs``: d loss / d output (None for a
    scalar output: ones).  The graph is freed unless ``retain_graph=True``.
    An input the outputs do not depend on raises, unless ``allow_unused=True``
    (then its gradient is None, or zeros with ``materialize_grads=True``)."""
    if create_graph:
        raise NotImplementedError("autograd.grad: create_graph=True (higher-order gradients) is not supported")
    if is_grads_batched:
        raise NotImplementedError("autograd.grad: is_grads_batched=True is not supported")
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, "
                         "but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    single = isinstance(inputs, _ag._Tensor)
    ins = (inputs,) if single else tuple(inputs)
    for i, t in enumerate(ins):
        if not isinstance(t, _ag._Tensor):
            raise TypeError(f"grad: inputs[{i}] must be a Tensor, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    roots = _roots(outputs, grad_outputs, "grad_outputs")
    results = [None] * len(ins)

    def collector(i):
        def cb(g):
            results[i] = g.copy() if results[i] is None else results[i] + g
        return cb

    capture = {}
    taps = []
    for i, t in enumerate(ins):
        if t._node is None:
            capture[id(t)] = collector(i)
        else:
            tap = _Tap(t._idx, 2, collector(i))
            add_tap(t._node, tap)
            taps.append((t._node, tap))
    try:
        run_backward(roots, retain_graph=bool(retain_graph), capture=capture)
    finally:
        for n, tap in taps:
            remove_tap(n, tap)
    out = []
    for i, (t, r) in enumerate(zip(ins, results)):
        if r is None:
            if not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been used in the "
                                   "graph. Set allow_unused=True if this is the desired behavior.")
            out.append(_ag._wrap(np.zeros_like(t._data)) if materialize_grads else None)
        else:
            if r.dtype != t._data.dtype:
                r = r.astype(t._data.dtype)
            out.append(_ag._wrap(r))
    return tuple(out)


def backward(tensors, grad_tensors=None, retain_graph: Optional[bool] = None, create_graph: bool = False,
             inputs=None) -> None:
    """torch.autograd.backward: accumulate the gradients of ``tensors`` (one
    pass, shared subgraphs run once) into the leaves' ``.grad``."""
    if create_graph:
        raise NotImplementedError("backward: create_graph=True (higher-order gradients) is not supported")
    if inputs is not None:
        ins = (inputs,) if isinstance(inputs, _ag._Tensor) else tuple(inputs)
        gs = grad(tensors, ins, grad_tensors, retain_graph=retain_graph, allow_unused=True)
        for t, g in zip(ins, gs):
            if g is not None:
                _accumulate_leaf(t, g._data)
        return
    run_backward(_roots(tensors, grad_tensors, "grad_tensors"), retain_graph=bool(retain_graph))


def Variable(data, requires_grad: bool = False, volatile: bool = False):
    """Pre-0.4 torch's ``Variable(tensor)``: today simply the Tensor (with
    ``requires_grad`` set when asked)."""
    t = data if isinstance(data, _ag._Tensor) else _ag._Tensor(data)
    if requires_grad:
        t.requires_grad_(True)
    return t
