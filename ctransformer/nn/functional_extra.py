"""More of ``torch.nn.functional``: silu, normalize, cosine_similarity,
kl_div, rms_norm, all composed from differentiable ops (gradients as
torch's, checked by float64 finite differences in the tests)."""
from __future__ import annotations

import warnings
from typing import List, Optional, Sequence, Union

import numpy as np

from .._fp import quietly as _quietly
from ..tensor import Tensor, where

__all__ = ["silu", "normalize", "cosine_similarity", "kl_div", "rms_norm"]


def _check_tensor(x, fn: str, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' must be Tensor, not {type(x).__name__}")
    return x


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x) (the swish activation)."""
    _check_tensor(input, "silu")
    out = input * input.sigmoid()
    if inplace:
        input._check_inplace("silu")
        return input._become(out)
    return out


@_quietly
def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    """input / max(||input||_p along dim, eps)."""
    _check_tensor(input, "normalize")
    if out is not None:
        raise TypeError("normalize(): the out= argument is not supported")
    return input / input.norm(p, dim, keepdim=True).clamp(min=eps).expand_as(input)


@_quietly
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 * x2, dim) / (max(||x1||, eps) * max(||x2||, eps)), broadcasting x1 and x2."""
    _check_tensor(x1, "cosine_similarity", "x1")
    _check_tensor(x2, "cosine_similarity", "x2")
    n1 = x1.norm(2, dim, keepdim=True).clamp(min=eps)  # (norm's gradient is 0 at a zero vector, as torch's)
    n2 = x2.norm(2, dim, keepdim=True).clamp(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


@_quietly
def kl_div(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """Pointwise KL divergence target * (log(target) - input), ``input`` being
    log-probabilities (0 where target is 0).  reduction: "none", "sum",
    "mean" (over elements; torch warns it is not the math definition) or
    "batchmean" (sum / batch size)."""
    _check_tensor(input, "kl_div")
    _check_tensor(target, "kl_div", "target")
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = ("mean" if size_average else "sum") if reduce else "none"
    if reduction not in ("none", "sum", "mean", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      UserWarning, stacklevel=2)
    if log_target:
        pointwise = target.exp() * (target - input)
    else:
        positive = target > 0
        safe = where(positive, target, 1.0)
        pointwise = where(positive, target * safe.log(), 0.0) - target * input
    if reduction == "none":
        return pointwise
    if reduction == "sum":
        return pointwise.sum()
    if reduction == "batchmean":
        return pointwise.sum() / (input.shape[0] if input.dim() else 1)
    return pointwise.mean()


@_quietly
def rms_norm(input: Tensor, normalized_shape: Union[int, Sequence[int]], weight: Optional[Tensor] = None,
             eps: Optional[float] = None) -> Tensor:
    """input / sqrt(mean(input**2 over the last len(normalized_shape) dims) + eps) * weight;
    eps defaults to the dtype's machine epsilon (torch)."""
    _check_tensor(input, "rms_norm")
    shape: List[int] = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    if tuple(input.shape[input.dim() - len(shape):]) != tuple(shape) or len(shape) > input.dim():
        raise RuntimeError(f"Given normalized_shape={shape}, expected input with shape [*, "
                           f"{', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    if eps is None:
        eps = float(np.finfo(input.dtype).eps)
    dims = tuple(range(input.dim() - len(shape), input.dim()))
    ms = input * input
    for d in dims:
        ms = ms.mean(d, keepdim=True)
    out = input * (ms + eps).rsqrt()
    if weight is not None:
        out = out * weight
    return out
