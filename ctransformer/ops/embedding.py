"""embedding through the C embedding kernels."""
from __future__ import annotations

from typing import Optional

from .. import kernels as K
from ..autograd import apply_op
from ..tensor import Tensor

__all__ = ["embedding"]


def embedding(input: Tensor, weight: Tensor, padding_idx: Optional[int]) -> Tensor:
    """Rows of ``weight`` (V, D) at integer ids ``input`` (...) -> (..., D);
    ``padding_idx`` (in [0, V) or None) receives no gradient."""
    ids, w = input._data, weight._data
    num = w.shape[0]
    out = K.embedding_forward(ids, w)

    def backward(g):
        return (None, K.embedding_backward(g, ids, num, padding_idx))

    return apply_op(out, (input, weight), backward, "Embedding")
