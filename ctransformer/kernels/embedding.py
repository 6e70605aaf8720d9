"""Embedding lookup (nn.Embedding) and its gradient (the functions are
generated from csrc/py/kernel_table.py into _bindings.py)."""
from ._bindings import embedding_backward, embedding_forward

__all__ = ["embedding_forward", "embedding_backward"]
