"""Dropout."""
from __future__ import annotations

from ...tensor import Tensor
from .. import functional as F
from ..module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    """Training: zero each element with probability ``p``, scale the rest by
    1 / (1 - p) (mask from the dropout kernel, seeded by
    ``ctransformer.manual_seed``).  Eval: identity."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
