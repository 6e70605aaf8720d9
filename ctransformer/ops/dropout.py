"""dropout through the C dropout kernels (counter-based generator)."""
from __future__ import annotations

from .. import kernels as K
from ..autograd import apply_op
from ..random import default_generator
from ..tensor import Tensor

__all__ = ["dropout"]


def dropout(input: Tensor, p: float) -> Tensor:
    """Zero each element of float ``input`` with probability 0 < p < 1 and
    scale the rest by 1 / (1 - p).  The mask is seeded from
    ``ctransformer.manual_seed``'s generator."""
    out, mask = K.dropout_forward(input._data, p, default_generator.next_seed())
    return apply_op(out, (input,), lambda g: (K.dropout_backward(g, mask, p),), "Dropout")
