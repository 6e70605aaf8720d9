"""More of ``torch.nn.functional``: leaky_relu, elu, softplus, logsigmoid
and the l1, smooth-l1, Huber and binary cross-entropy losses.

The activations and the l1-style losses are composed from differentiable
Tensor ops.  Where a composition would give a wrong gradient at one point
(a subgradient of abs or clamp at 0) or a NaN through a branch ``where``
does not take (exp overflowing in the other branch), the branch inputs are
clamped first, or the op is one NumPy forward with its own backward
(the binary cross-entropies).  Gradients are checked by float64 finite
differences and against torch in the tests."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .._fp import quietly as _quietly
from ..autograd import apply_op, is_grad_enabled
from ..tensor import Tensor, _sum_to, where
from .functional import _reduction

__all__ = ["leaky_relu", "elu", "softplus", "logsigmoid", "l1_loss", "smooth_l1_loss", "huber_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits"]


def _check_float(x, fn: str, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' must be Tensor, not {type(x).__name__}")
    if x.dtype.kind != "f":
        raise RuntimeError(f"{fn}: expected a floating point {arg}, got {x.dtype}")
    return x


def _inplace(input: Tensor, out: Tensor, fn: str) -> Tensor:
    input._check_inplace(fn)
    return input._become(out)


# ------------------------------------------------------------------ activations
@_quietly
def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else negative_slope * x (the gradient at 0 is negative_slope, as torch)."""
    _check_float(input, "leaky_relu")
    out = where(input > 0, input, input * negative_slope)
    return _inplace(input, out, "leaky_relu") if inplace else out


@_quietly
def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha * (exp(x) - 1)."""
    _check_float(input, "elu")
    negative = input.clamp(max=0.0)  # exp of the positive side never computed: no inf * 0 in backward
    out = where(input > 0, input, negative.expm1() * alpha)
    return _inplace(input, out, "elu") if inplace else out


@_quietly
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as torch)."""
    _check_float(input, "softplus")
    scaled = input * beta
    smooth = scaled.clamp(max=threshold).exp().log1p() / beta
    return where(scaled > threshold, input, smooth)


@_quietly
def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)) = -log(1 + exp(-x)), without overflow on either side."""
    _check_float(input, "logsigmoid")
    negative, positive = input.clamp(max=0.0), input.clamp(min=0.0)
    # x < 0: x - log(1 + e^x);  x >= 0: -log(1 + e^-x)  (each on the side where exp <= 1)
    return where(input < 0, negative - negative.exp().log1p(), -(-positive).exp().log1p())


# ------------------------------------------------------------------ losses
def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _pair(input, target, fn: str) -> None:
    _check_float(input, fn)
    if not isinstance(target, Tensor):
        raise TypeError(f"{fn}(): argument 'target' must be Tensor, not {type(target).__name__}")
    try:
        np.broadcast_shapes(tuple(input.shape), tuple(target.shape))
    except ValueError:
        raise RuntimeError(f"{fn}: input {tuple(input.shape)} and target {tuple(target.shape)} "
                           f"do not broadcast") from None


@_quietly
def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """|input - target|, reduced (the gradient at 0 is 0, as torch)."""
    _pair(input, target, "l1_loss")
    return _reduce((input - target).abs(), _reduction(reduction, "l1_loss", size_average, reduce))


@_quietly
def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (beta 0: the l1 loss)."""
    _pair(input, target, "smooth_l1_loss")
    if beta < 0:
        raise RuntimeError(f"smooth_l1_loss does not support negative values for beta, got {beta}")
    reduction = _reduction(reduction, "smooth_l1_loss", size_average, reduce)
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


@_quietly
def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta)."""
    _pair(input, target, "huber_loss")
    if delta <= 0:
        raise RuntimeError(f"huber_loss does not support non-positive values for delta, got {delta}")
    d = (input - target).abs()
    return _reduce(where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta), _reduction(reduction, "huber_loss"))


def _same_size(input: Tensor, target: Tensor, fn: str, message: str) -> None:
    _check_float(input, fn)
    if not isinstance(target, Tensor):
        raise TypeError(f"{fn}(): argument 'target' must be Tensor, not {type(target).__name__}")
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(message.format(target=tuple(target.shape), input=tuple(input.shape)))


def _refuse_grad(t: Optional[Tensor], fn: str, arg: str) -> None:
    """torch's rescaling weights are not differentiable, and torch says so."""
    if t is not None and t.requires_grad and is_grad_enabled():
        raise RuntimeError(f"The function '{fn}' is not differentiable with respect to argument '{arg}'. "
                           f"This input cannot have requires_grad True.")


def _weighted(per: Tensor, weight: Optional[Tensor], reduction: str) -> Tensor:
    """The elementwise loss times weight (broadcast), reduced."""
    return _reduce(per if weight is None else per * weight, reduction)


@_quietly
def binary_cross_entropy(input: Tensor, target: Tensor, weight: Optional[Tensor] = None, size_average=None,
                         reduce=None, reduction: str = "mean") -> Tensor:
    """-(t log(x) + (1 - t) log(1 - x)) of probabilities x in [0, 1], each log
    clamped at -100 (as torch: a certain wrong answer costs 100, not inf),
    times weight (broadcast), reduced; d/dx = (x - t) / max(x (1 - x), 1e-12), torch's."""
    fn = "binary_cross_entropy"
    _same_size(input, target, fn, "Using a target size ({target}) that is different to the input size "
               "({input}) is deprecated. Please ensure they have the same size.")
    reduction = _reduction(reduction, fn, size_average, reduce)
    _refuse_grad(weight, fn, "weight")
    x = input._data
    t = target._data.astype(x.dtype, copy=False)
    if ((x < 0) | (x > 1)).any() or np.isnan(x).any():
        raise RuntimeError(f"{fn}: all elements of input should be between 0 and 1")
    log_x, log_1mx = np.maximum(np.log(x), -100), np.maximum(np.log1p(-x), -100)
    per = -(t * log_x + (1 - t) * log_1mx)

    def backward(g):
        dx = g * (x - t) / np.maximum(x * (1 - x), 1e-12)
        dt = g * (log_1mx - log_x) if target.requires_grad else None
        return dx, dt

    per_element = apply_op(per, (input, target), backward, "BinaryCrossEntropy", saved=(input, target))
    return _weighted(per_element, weight, reduction)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(0.5 * z))  # without exp's overflow on either side


@_quietly
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Optional[Tensor] = None,
                                     size_average=None, reduce=None, reduction: str = "mean",
                                     pos_weight: Optional[Tensor] = None) -> Tensor:
    """binary_cross_entropy(sigmoid(x), t) computed from the logits x without
    overflow (torch's form): (1 - t) x + lw softplus(-x), lw = 1 + (pos_weight - 1) t.
    Gradients: d/dx = (1 - t) - lw sigmoid(-x); d/dt = -x + (pos_weight - 1) softplus(-x)."""
    fn = "binary_cross_entropy_with_logits"
    _same_size(input, target, fn, "Target size ({target}) must be the same as input size ({input})")
    reduction = _reduction(reduction, fn, size_average, reduce)
    _refuse_grad(weight, fn, "weight")
    _refuse_grad(pos_weight, fn, "pos_weight")
    x = input._data
    t = target._data.astype(x.dtype, copy=False)
    pw = None if pos_weight is None else pos_weight._data.astype(x.dtype, copy=False)
    softplus_neg = np.logaddexp(0, -x)  # log(1 + e^-x), stable
    lw = 1 if pw is None else 1 + (pw - 1) * t
    per = np.asarray((1 - t) * x + lw * softplus_neg, x.dtype)

    def backward(g):
        dx = _sum_to(g * ((1 - t) - lw * _sigmoid(-x)), x.shape)
        dt = None
        if target.requires_grad:
            dt = _sum_to(g * (-x if pw is None else -x + (pw - 1) * softplus_neg), t.shape)
        return dx, dt

    per_element = apply_op(per, (input, target), backward, "BinaryCrossEntropyWithLogits",
                           saved=(input, target))
    return _weighted(per_element, weight, reduction)
