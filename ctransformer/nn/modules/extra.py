"""More of ``torch.nn``'s layers: SiLU, KLDivLoss, RMSNorm, Flatten, Unflatten."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from ...tensor import Tensor, _as_dtype, _check_device, get_default_dtype
from .. import functional_extra as FX
from ..module import Module
from ..parameter import Parameter

__all__ = ["SiLU", "KLDivLoss", "RMSNorm", "Flatten", "Unflatten"]


class SiLU(Module):
    """x * sigmoid(x), elementwise."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return FX.silu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class KLDivLoss(Module):
    """KL divergence loss with ``input`` in log space (F.kl_div)."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            size_average = True if size_average is None else size_average
            reduce = True if reduce is None else reduce
            reduction = ("mean" if size_average else "sum") if reduce else "none"
        self.reduction = reduction
        self.log_target = log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return FX.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class RMSNorm(Module):
    """Root-mean-square layer normalisation over the last dims (torch.nn.RMSNorm)."""

    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: Optional[float] = None,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device)  # a non-CPU device is refused as torch's CPU build refuses it
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape = shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            dt = _as_dtype(dtype) or get_default_dtype()
            self.weight = Parameter(Tensor._wrap(np.ones(shape, dt)))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            self.weight._data[...] = 1.0

    def forward(self, x: Tensor) -> Tensor:
        return FX.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Flatten(Module):
    """input.flatten(start_dim, end_dim) (defaults 1, -1 as torch)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """input.unflatten(dim, unflattened_size)."""

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
