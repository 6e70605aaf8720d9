"""Elementwise activations: relu, gelu (erf form), gelu_tanh, tanh, sigmoid
(the functions are generated from csrc/py/kernel_table.py into _bindings.py)."""
from ._bindings import activation_backward, activation_forward, activation_saves_output

__all__ = ["ACTIVATION_KINDS", "activation_forward", "activation_backward", "activation_saves_output"]

#: Every kind accepted by :func:`activation_forward` / :func:`activation_backward`.
ACTIVATION_KINDS = ("relu", "gelu", "gelu_tanh", "tanh", "sigmoid")
