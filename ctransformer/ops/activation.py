"""relu / tanh / sigmoid / gelu (exact or tanh form) through the C
activation kernel (``kernels.activation_forward`` / ``_backward``)."""
from __future__ import annotations

import numpy as np

from .. import kernels as K
from ..autograd import _FREED, Node, _grad_enabled
from ..tensor import Tensor, _wrap, float16, get_default_dtype

__all__ = ["activation"]

_tnew = _nnew = object.__new__
_act_forward = K.activation_forward
_act_backward = K.activation_backward
_SAVES_OUTPUT = {}  # kind -> whether the kernel's backward reads the output (else the input)


class _ActivationNode(Node):
    """relu/tanh/sigmoid/gelu: ``saved`` is the input or the output, as the
    kernel's backward wants (K.activation_saves_output)."""

    __slots__ = ("saved", "kind")
    n_out = 1
    shapes = None

    @property
    def op(self):
        return self.kind.capitalize()

    def backward(self, g):
        return (_act_backward(g, self.saved, self.kind),)

    def _free(self) -> None:
        self.saved = None
        self.versions = _FREED

    def saves_array(self, arr: np.ndarray) -> bool:
        return self.saved is arr


def activation(x: Tensor, kind: str) -> Tensor:
    """relu / tanh / sigmoid / gelu / gelu_tanh of ``x`` (any shape): one
    node.  Integer (and float16) inputs: relu stays in their dtype (no
    gradient), the others run in the default float dtype, as torch."""
    xd = x._data
    if xd.dtype.kind != "f" or xd.dtype == float16:
        if kind == "relu":
            return _wrap(np.maximum(xd, np.zeros((), xd.dtype)))
        return activation(_wrap(xd.astype(get_default_dtype())), kind)
    out = _act_forward(xd, kind)
    t = _tnew(Tensor)
    t._data = out
    t.grad = None
    t._idx = 0
    t._version = None
    if _grad_enabled[0] and x.requires_grad:
        # a fast path listed at autograd.Node (written out, not a helper: a call per op costs ~10 %)
        n = _nnew(_ActivationNode)
        p = x._node
        n.edges = (x if p is None else (p if p.n_out == 1 else (p, x._idx)),)  # edge_of's rule
        n.dtype = out.dtype
        n.grad = n.mark = n.retained = None
        n.deps = 0
        n.versions = ()  # its saved input / output is freed after backward
        saves = _SAVES_OUTPUT.get(kind)
        if saves is None:
            saves = _SAVES_OUTPUT[kind] = K.activation_saves_output(kind)
        n.saved = out if saves else xd
        n.kind = kind
        t._requires_grad = True
        t._node = n
    else:
        t._requires_grad = False
        t._node = None
    return t
