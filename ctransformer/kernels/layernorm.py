"""Layer normalisation over the last axis (the functions are generated from
csrc/py/kernel_table.py into _bindings.py)."""
from ._bindings import layernorm_backward, layernorm_forward

__all__ = ["layernorm_forward", "layernorm_backward"]
