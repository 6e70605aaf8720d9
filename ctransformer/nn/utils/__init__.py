"""nn.utils: gradient clipping, parameters as one vector, and sequence padding."""
from __future__ import annotations

import math
from typing import Iterable, Union

import numpy as np

from ... import kernels as K
from ...tensor import Tensor
from . import rnn

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters", "rnn"]


def _grad_arrays(parameters) -> list:
    """The gradient arrays of ``parameters`` that have one, made C-contiguous
    and writeable in place (the clipping kernel scales them in place)."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = []
    for p in parameters:
        if p.grad is None:
            continue
        g = p.grad._data
        if not (g.flags.c_contiguous and g.flags.writeable):
            p.grad._data = g = np.array(g, order="C", copy=True)
        grads.append(g)
    return grads


def clip_grad_norm_(parameters: Union[Tensor, Iterable[Tensor]], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Scale all gradients together so that their joint ``norm_type`` norm is
    at most ``max_norm`` (coefficient max_norm / (total + 1e-6), as torch).
    Returns the total norm before clipping, as a 0-d Tensor."""
    grads = _grad_arrays(parameters)
    norm_type = float(norm_type)
    if not grads:
        return Tensor._wrap(np.asarray(0.0, np.float32))
    dtype = grads[0].dtype
    if error_if_nonfinite:
        total = float(K.grad_norm(grads, norm_type))
        if not math.isfinite(total):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped. To disable this error and scale the gradients "
                               "by the non-finite norm anyway, set `error_if_nonfinite=False`")
    total = K.clip_grad_norm(grads, float(max_norm), norm_type)
    return Tensor._wrap(np.asarray(total, dtype))


def clip_grad_value_(parameters: Union[Tensor, Iterable[Tensor]], clip_value: float, foreach=None) -> None:
    """Clamp every gradient element into [-clip_value, clip_value], in place."""
    for g in _grad_arrays(parameters):
        np.clip(g, -clip_value, clip_value, out=g)


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """Every parameter flattened and joined into one vector (differentiable)."""
    from ...tensor import cat
    params = _tensor_list(parameters, "parameters_to_vector")
    return cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-D ``vec`` into the parameters' data (no gradient)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = _tensor_list(parameters, "vector_to_parameters")
    flat = vec._data.reshape(-1)
    need = sum(p.numel() for p in params)
    if flat.size != need:
        raise RuntimeError(f"vector_to_parameters: vec has {flat.size} elements, the parameters {need}")
    start = 0
    for p in params:
        n = p.numel()
        p.data = Tensor._wrap(flat[start:start + n].reshape(tuple(p.shape)).astype(p.dtype))
        start += n


def _tensor_list(parameters, fn: str) -> list:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(f"{fn}: expected Tensors, got {type(p).__name__}")
    return params
