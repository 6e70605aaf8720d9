"""Cross-entropy loss fused with log-softmax (torch's F.cross_entropy on (N, C)
logits; the functions are generated from csrc/py/kernel_table.py into
_bindings.py)."""
from ._bindings import cross_entropy_backward, cross_entropy_forward

__all__ = ["cross_entropy_forward", "cross_entropy_backward"]
