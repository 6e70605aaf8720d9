"""Softmax and log-softmax over the last axis (the functions are generated
from csrc/py/kernel_table.py into _bindings.py)."""
from ._bindings import log_softmax_backward, log_softmax_forward, softmax_backward, softmax_forward

__all__ = ["softmax_forward", "softmax_backward", "log_softmax_forward", "log_softmax_backward"]
