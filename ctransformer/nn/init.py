"""nn.init: in-place initialisers with torch's names, fan rules and gains.

Each writes into the tensor's storage under no_grad, draws from
``ctransformer``'s seeded generator (or ``generator``) and returns the tensor.
Random streams differ from torch's: same distributions, not same numbers.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from ..random import Generator, default_generator
from ..tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_"]


def calculate_gain(nonlinearity: str, param: Optional[float] = None) -> float:
    """torch's recommended gain: 1 for linear/sigmoid, 5/3 for tanh, sqrt(2)
    for relu, sqrt(2 / (1 + slope^2)) for leaky_relu (slope 0.01 by
    default), 3/4 for selu."""
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> Tuple[int, int]:
    """fan_in = size(1) * receptive field, fan_out = size(0) * receptive field
    (receptive field = product of dims after the first two)."""
    dims = tensor.dim()
    if dims < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    shape = tensor.shape
    receptive = 1
    for s in shape[2:]:
        receptive *= s
    return shape[1] * receptive, shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _fill(tensor: Tensor, values) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"init: tensor must be a Tensor, got {type(tensor).__name__}")
    arr = tensor._data
    if not arr.flags.writeable:
        tensor._data = arr = np.array(arr, order="C", copy=True)
    arr[...] = values
    return tensor


def _gen(generator: Optional[Generator]) -> Generator:
    return default_generator if generator is None else generator


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Optional[Generator] = None) -> Tensor:
    """Fill with U(a, b)."""
    return _fill(tensor, _gen(generator).uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Optional[Generator] = None) -> Tensor:
    """Fill with N(mean, std^2)."""
    return _fill(tensor, _gen(generator).normal(mean, std, tensor.shape))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator: Optional[Generator] = None) -> Tensor:
    """Fill with N(mean, std^2) redrawn until inside [a, b]."""
    g = _gen(generator)
    vals = g.normal(mean, std, tensor.shape)
    bad = (vals < a) | (vals > b)
    while bad.any():
        vals[bad] = g.normal(mean, std, int(bad.sum()))
        bad = (vals < a) | (vals > b)
    return _fill(tensor, vals)


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _fill(tensor, val)


def ones_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 1)


def zeros_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 0)


def eye_(tensor: Tensor) -> Tensor:
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, np.eye(*tensor.shape))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Optional[Generator] = None) -> Tensor:
    """U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Optional[Generator] = None) -> Tensor:
    """N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Optional[Generator] = None) -> Tensor:
    """U(-bound, bound), bound = gain * sqrt(3 / fan)."""
    if 0 in tensor.shape:
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Optional[Generator] = None) -> Tensor:
    """N(0, std^2), std = gain / sqrt(fan)."""
    if 0 in tensor.shape:
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Optional[Generator] = None) -> Tensor:
    """A (semi-)orthogonal matrix from the QR decomposition of a Gaussian one."""
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _gen(generator).normal(0.0, 1.0, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, (gain * q).reshape(tensor.shape))


# torch's deprecated non-underscore aliases
uniform, normal, constant = uniform_, normal_, constant_
xavier_uniform, xavier_normal = xavier_uniform_, xavier_normal_
kaiming_uniform, kaiming_normal = kaiming_uniform_, kaiming_normal_
