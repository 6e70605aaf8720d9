"""Inverted dropout with a counter-based (reproducible, order-free) mask (the
functions are generated from csrc/py/kernel_table.py into _bindings.py)."""
from ._bindings import dropout_backward, dropout_forward

__all__ = ["dropout_forward", "dropout_backward"]
