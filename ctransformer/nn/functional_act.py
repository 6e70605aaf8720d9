"""More of ``torch.nn.functional``'s activations and distances: hardtanh,
relu6, hardsigmoid, hardswish, threshold, selu, celu, glu, mish, softsign,
tanhshrink, softmin, prelu, pairwise_distance, and batch_norm.

The piecewise-linear ones record their own backward, so the gradient at a
kink is torch's (hardtanh and relu6 pass none at their bounds, hardswish
has 0 at -3 and 1 at 3); the smooth ones are composed from differentiable Tensor
ops, with ``where`` branches fed clamped inputs (no inf * 0 in backward).
Gradients are checked by float64 finite differences and against torch in
the tests."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .._fp import quietly as _quietly
from ..autograd import apply_op
from ..tensor import Tensor, where
from .functional_more import _check_float, _inplace

__all__ = ["hardtanh", "relu6", "hardsigmoid", "hardswish", "threshold", "selu", "celu", "glu", "mish",
           "softsign", "tanhshrink", "softmin", "prelu", "pairwise_distance", "batch_norm"]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _piecewise(input: Tensor, out: np.ndarray, slope: np.ndarray, name: str) -> Tensor:
    """A pointwise op with derivative ``slope`` (the array of d out / d x)."""
    return apply_op(out.astype(input.dtype, copy=False), (input,), lambda g: (g * slope,), name)


@_quietly
def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """clamp(x, min_val, max_val); the gradient passes strictly inside (as torch)."""
    _check_float(input, "hardtanh")
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    x = input._data
    out = _piecewise(input, np.clip(x, min_val, max_val), ((x > min_val) & (x < max_val)).astype(x.dtype),
                     "Hardtanh")
    return _inplace(input, out, "hardtanh") if inplace else out


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6) (hardtanh(x, 0, 6))."""
    return hardtanh(input, 0.0, 6.0, inplace)


@_quietly
def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6; slope 1/6 strictly inside (-3, 3)."""
    _check_float(input, "hardsigmoid")
    x = input._data
    out = _piecewise(input, np.clip(x + 3, 0, 6) / 6, ((x > -3) & (x < 3)).astype(x.dtype) / 6, "Hardsigmoid")
    return _inplace(input, out, "hardsigmoid") if inplace else out


@_quietly
def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """x relu6(x + 3) / 6; slope 0 up to -3, x / 3 + 1/2 inside, 1 from 3 on (torch 2.13's)."""
    _check_float(input, "hardswish")
    x = input._data
    slope = np.where(x <= -3, 0, np.where(x < 3, x / 3 + 0.5, 1)).astype(x.dtype)
    out = _piecewise(input, x * np.clip(x + 3, 0, 6) / 6, slope, "Hardswish")
    return _inplace(input, out, "hardswish") if inplace else out


@_quietly
def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, else value."""
    _check_float(input, "threshold")
    x = input._data
    keep = x > threshold
    out = _piecewise(input, np.where(keep, x, value), keep.astype(x.dtype), "Threshold")
    return _inplace(input, out, "threshold") if inplace else out


@_quietly
def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """scale * (x where x > 0, else alpha (exp(x) - 1)), torch's alpha and scale."""
    _check_float(input, "selu")
    negative = input.clamp(max=0.0)
    out = where(input > 0, input * _SELU_SCALE, negative.expm1() * (_SELU_ALPHA * _SELU_SCALE))
    return _inplace(input, out, "selu") if inplace else out


@_quietly
def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha (exp(x / alpha) - 1)."""
    _check_float(input, "celu")
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    negative = input.clamp(max=0.0)
    out = where(input > 0, input, (negative / alpha).expm1() * alpha)
    return _inplace(input, out, "celu") if inplace else out


@_quietly
def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b), a and b the two halves of ``input`` along ``dim``."""
    _check_float(input, "glu")
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = dim % input.dim()
    if input.shape[d] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {input.shape[d]}")
    a, b = input.chunk(2, d)
    return a * b.sigmoid()


@_quietly
def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """x tanh(softplus(x))."""
    from .functional_more import softplus
    _check_float(input, "mish")
    out = input * softplus(input).tanh()
    return _inplace(input, out, "mish") if inplace else out


@_quietly
def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    _check_float(input, "softsign")
    return input / (input.abs() + 1)


@_quietly
def tanhshrink(input: Tensor) -> Tensor:
    """x - tanh(x)."""
    _check_float(input, "tanhshrink")
    return input - input.tanh()


def softmin(input: Tensor, dim: Optional[int] = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """softmax(-x) along ``dim``."""
    from .functional import softmax
    return softmax(-(input if dtype is None else input.type(dtype)), dim)


@_quietly
def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """x where x > 0, else weight * x, weight per channel (dim 1; dim 0 of a
    1-D input) or one for all."""
    _check_float(input, "prelu")
    channels = input.shape[1] if input.dim() >= 2 else (input.shape[0] if input.dim() == 1 else 1)
    if weight.numel() not in (1, channels):
        raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                           f"{weight.numel()} and channel size = {channels}.")
    w = weight.reshape(-1)
    if weight.numel() > 1 and input.dim() >= 2:
        w = w.reshape(channels, *([1] * (input.dim() - 2)))
    return where(input > 0, input, input * w)


@_quietly
def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dim (broadcasting)."""
    _check_float(x1, "pairwise_distance", "x1")
    _check_float(x2, "pairwise_distance", "x2")
    return (x1 - x2 + eps).norm(p, dim=-1, keepdim=keepdim)


def batch_norm(input: Tensor, running_mean: Optional[Tensor], running_var: Optional[Tensor],
               weight: Optional[Tensor] = None, bias: Optional[Tensor] = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (dim 1) by its batch statistics (training; the
    running ones are then updated in place: the mean, and the unbiased
    variance) or by the running ones (eval)."""
    _check_float(input, "batch_norm")
    if input.dim() < 2:
        raise ValueError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), got {input.dim()}D")
    axes = (0,) + tuple(range(2, input.dim()))
    shape = (1, input.shape[1]) + (1,) * (input.dim() - 2)
    if training:
        count = input.numel() // input.shape[1]
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{tuple(input.shape)}")
        mean = input.mean(dim=axes, keepdim=True)
        var = input.var(dim=axes, unbiased=False, keepdim=True)
        if running_mean is not None and running_var is not None:
            _update_running(running_mean, running_var, mean, var, count, momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch_norm: running_mean and running_var are needed when not training")
        mean, var = running_mean.reshape(*shape), running_var.reshape(*shape)
    out = (input - mean) / (var + eps).sqrt()
    if weight is not None:
        out = out * weight.reshape(*shape)
    if bias is not None:
        out = out + bias.reshape(*shape)
    return out


def _update_running(running_mean: Tensor, running_var: Tensor, mean: Tensor, var: Tensor, count: int,
                    momentum: float) -> None:
    """running = (1 - momentum) running + momentum * batch (the variance unbiased), in place, no graph."""
    m = mean._data.reshape(-1)
    v = var._data.reshape(-1) * (count / (count - 1))
    rm, rv = running_mean._writable(), running_var._writable()
    rm *= 1 - momentum
    rm += momentum * m.astype(rm.dtype)
    rv *= 1 - momentum
    rv += momentum * v.astype(rv.dtype)


