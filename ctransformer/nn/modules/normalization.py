"""LayerNorm."""
from __future__ import annotations

from typing import Sequence, Union

from ...tensor import Tensor, _as_dtype, _check_device, empty
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter

__all__ = ["LayerNorm"]


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing
    ``normalized_shape`` dims (biased variance, eps inside the root).
    weight starts at ones, bias at zeros; ``bias=False`` keeps weight only,
    ``elementwise_affine=False`` has no parameters."""

    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device)  # a non-CPU device is refused as torch's CPU build refuses it
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        dt = _as_dtype(dtype)
        if elementwise_affine:
            self.weight = Parameter(empty(self.normalized_shape, dtype=dt))
            if bias:
                self.bias = Parameter(empty(self.normalized_shape, dtype=dt))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")
