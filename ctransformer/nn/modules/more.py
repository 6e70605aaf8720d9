"""More of ``torch.nn``'s layers: the activations LeakyReLU, ELU, Softplus,
LogSigmoid, Hardtanh, ReLU6, Hardsigmoid, Hardswish, Threshold, SELU, CELU,
GLU, Mish, Softsign, Tanhshrink, Softmin, PReLU; the losses L1Loss,
SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss; CosineSimilarity,
PairwiseDistance and BatchNorm1d (their maths: nn/functional_more.py,
nn/functional_act.py, nn/functional_extra.py)."""
from __future__ import annotations

from typing import Optional

from ...tensor import Tensor, _as_dtype, _check_device, full, int64, ones, tensor, zeros
from .. import functional_act as FA
from .. import functional_extra as FX
from .. import functional_more as FM
from ..module import Module
from ..parameter import Parameter
from .loss import _Loss, _WeightedLoss

__all__ = ["LeakyReLU", "ELU", "Softplus", "LogSigmoid", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
           "BCEWithLogitsLoss", "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "Threshold", "SELU", "CELU", "GLU",
           "Mish", "Softsign", "Tanhshrink", "Softmin", "PReLU", "CosineSimilarity", "PairwiseDistance",
           "BatchNorm1d"]


class LeakyReLU(Module):
    """x where x > 0, else negative_slope * x."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return FM.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """x where x > 0, else alpha * (exp(x) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return FM.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """log(1 + exp(beta x)) / beta (x itself past the threshold)."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input: Tensor) -> Tensor:
        return FM.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class LogSigmoid(Module):
    """log(sigmoid(x)), elementwise."""

    def forward(self, input: Tensor) -> Tensor:
        return FM.logsigmoid(input)


class L1Loss(_Loss):
    """Mean (or summed) absolute error."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return FM.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Squared error below beta, absolute error above (F.smooth_l1_loss)."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return FM.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Squared error below delta, delta times the absolute error above (F.huber_loss)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return FM.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities (F.binary_cross_entropy)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return FM.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits, sigmoid included (F.binary_cross_entropy_with_logits)."""

    def __init__(self, weight: Optional[Tensor] = None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight: Optional[Tensor] = None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return FM.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                   pos_weight=self.pos_weight)


class _Inplace(Module):
    """An activation with torch's ``inplace`` flag."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardtanh(Module):
    """clamp(x, min_val, max_val)."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if not max_val > min_val:  # (torch's module asserts; F.hardtanh raises ValueError)
            raise AssertionError(f"max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input: Tensor) -> Tensor:
        return FA.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    """min(max(x, 0), 6)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardsigmoid(_Inplace):
    """relu6(x + 3) / 6."""

    def forward(self, input: Tensor) -> Tensor:
        return FA.hardsigmoid(input, self.inplace)


class Hardswish(_Inplace):
    """x relu6(x + 3) / 6."""

    def forward(self, input: Tensor) -> Tensor:
        return FA.hardswish(input, self.inplace)


class Threshold(Module):
    """x where x > threshold, else value."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input: Tensor) -> Tensor:
        return FA.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class SELU(_Inplace):
    """Scaled ELU with torch's constants."""

    def forward(self, input: Tensor) -> Tensor:
        return FA.selu(input, self.inplace)


class CELU(Module):
    """x where x > 0, else alpha (exp(x / alpha) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input: Tensor) -> Tensor:
        return FA.celu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class GLU(Module):
    """a * sigmoid(b), the halves of the input along ``dim``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return FA.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Mish(_Inplace):
    """x tanh(softplus(x))."""

    def forward(self, input: Tensor) -> Tensor:
        return FA.mish(input, self.inplace)


class Softsign(Module):
    """x / (1 + |x|)."""

    def forward(self, input: Tensor) -> Tensor:
        return FA.softsign(input)


class Tanhshrink(Module):
    """x - tanh(x)."""

    def forward(self, input: Tensor) -> Tensor:
        return FA.tanhshrink(input)


class Softmin(Module):
    """softmax(-x) along ``dim``."""

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return FA.softmin(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class PReLU(Module):
    """x where x > 0, else a * x, ``a`` learnt (one, or one per channel), starting at ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device)
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(full((num_parameters,), init, dtype=_as_dtype(dtype)))

    def forward(self, input: Tensor) -> Tensor:
        return FA.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class CosineSimilarity(Module):
    """F.cosine_similarity along ``dim``."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return FX.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """||x1 - x2 + eps||_p over the last dim."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return FA.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class BatchNorm1d(Module):
    """Batch normalisation of (N, C) or (N, C, L) input per channel C:
    training normalises by the batch's statistics and updates the running
    ones (``momentum``; None: the cumulative average), eval uses the running
    ones.  weight starts at ones, bias at zeros; torch's buffer names."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dt = _as_dtype(dtype)
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dt))
            self.bias = Parameter(zeros(num_features, dtype=dt))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dt))
            self.register_buffer("running_var", ones(num_features, dtype=dt))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def forward(self, input: Tensor) -> Tensor:
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")
        if input.shape[1] != self.num_features:
            raise RuntimeError(f"BatchNorm1d: input has {input.shape[1]} channels (dim 1), expected "
                               f"num_features = {self.num_features}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked.item()) if self.momentum is None else self.momentum
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return FA.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                             self.weight, self.bias, use_batch, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")
