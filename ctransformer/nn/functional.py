"""nn.functional: torch.nn.functional's API.  This module handles torch's
arguments (types, dtypes, shapes, legacy options); each kernel-backed op is
one autograd node in ``ctransformer.ops.<family>``.

Shapes follow torch: ``linear`` x (..., in) -> (..., out); ``cross_entropy``
input (N, C) or (N, C, d1, ...) or (C,), target (N) / (N, d1, ...) / () of
class ids, or class probabilities shaped like the input.
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence

import numpy as np

from .._fp import quietly as _quietly
from ..autograd import apply_op
from ..ops import crossentropy as _ce
from ..ops.activation import activation as _activation
from ..ops.dropout import dropout as _dropout
from ..ops.embedding import embedding as _embedding
from ..ops.layernorm import layer_norm as _layer_norm
from ..ops.linear import linear as _linear
from ..tensor import Tensor, _sum_to, int64

__all__ = ["relu", "gelu", "tanh", "sigmoid", "softmax", "log_softmax", "linear", "layer_norm", "embedding",
           "dropout", "cross_entropy", "nll_loss", "mse_loss", "pad", "one_hot", "relu_"]

_REDUCTIONS = ("none", "mean", "sum")


def _tensor(x, fn: str, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}: {arg} must be a Tensor, got {type(x).__name__}")
    return x


def _float_tensor(x, fn: str, arg: str = "input", verb: str = "be", error=NotImplementedError) -> Tensor:
    """x, when it is a float32 / float64 Tensor; else ``error``, torch's class
    for the caller: NotImplementedError where its kernel has no integer
    version ("not implemented for 'Long'"), RuntimeError where a product meets
    a float operand.  ``verb``: the message's wording, "be" (``input must be
    float32 or float64``) or "have dtype" (``query must have dtype ...``)."""
    _tensor(x, fn, arg)
    if x._data.dtype not in (np.float32, np.float64):
        raise error(f"{fn}: {arg} must {verb} float32 or float64, got {x._data.dtype}")
    return x


def _reduction(reduction: str, fn: str, size_average=None, reduce=None) -> str:
    if size_average is not None or reduce is not None:  # torch's legacy arguments
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = ("mean" if size_average else "sum") if reduce else "none"
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{fn}: reduction must be one of 'none', 'mean', 'sum', got {reduction!r}")
    return reduction


# ------------------------------------------------------------------ activations
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0), elementwise (``inplace`` is accepted; a new Tensor is returned)."""
    return _activation(_tensor(input, "relu"), "relu")


def relu_(input: Tensor) -> Tensor:
    return relu(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (``approximate="tanh"``: the tanh approximation)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _activation(_float_tensor(input, "gelu"), "gelu" if approximate == "none" else "gelu_tanh")


def tanh(input: Tensor) -> Tensor:
    return _activation(_tensor(input, "tanh"), "tanh")


def sigmoid(input: Tensor) -> Tensor:
    return _activation(_tensor(input, "sigmoid"), "sigmoid")


def _softmax_dim(ndim: int, fn: str) -> int:
    warnings.warn(f"Implicit dimension choice for {fn} has been deprecated. "
                  "Change the call to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: Optional[int] = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along ``dim`` (softmax kernel over the last axis)."""
    _tensor(input, "softmax")
    if dim is None:
        dim = _softmax_dim(input.dim(), "softmax")
    x = input if dtype is None else input.type(dtype)
    return x.softmax(dim)


def log_softmax(input: Tensor, dim: Optional[int] = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """x - logsumexp(x) along ``dim``."""
    _tensor(input, "log_softmax")
    if dim is None:
        dim = _softmax_dim(input.dim(), "log_softmax")
    x = input if dtype is None else input.type(dtype)
    return x.log_softmax(dim)


# ------------------------------------------------------------------ linear
def linear(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``input @ weight.T + bias``: input (..., in), weight (out, in), bias (out) -> (..., out)."""
    _float_tensor(input, "linear", error=RuntimeError)
    _float_tensor(weight, "linear", "weight", error=RuntimeError)
    x, w = input._data, weight._data
    b = None if bias is None else _float_tensor(bias, "linear", "bias", error=RuntimeError)._data
    if x.dtype != w.dtype or (b is not None and b.dtype != w.dtype):
        raise RuntimeError(f"linear: input and weight must have the same dtype, got {x.dtype} and {w.dtype}"
                           + ("" if b is None else f" (bias {b.dtype})"))
    if x.ndim == 0 or x.shape[-1] != w.shape[-1]:
        raise RuntimeError(f"linear: mat1 and mat2 shapes cannot be multiplied "
                           f"({'x'.join(map(str, x.shape[-2:] if x.ndim else ()))} and {w.shape[1]}x{w.shape[0]})")
    return _linear(input, weight, bias)


# ------------------------------------------------------------------ layer norm
def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims: (x - mean) / sqrt(var + eps) * weight + bias
    (biased variance, eps inside the root, as torch)."""
    # torch: no integer kernel (NotImplementedError); with a float weight, a dtype mismatch (RuntimeError)
    _float_tensor(input, "layer_norm", error=NotImplementedError if weight is None else RuntimeError)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    x = input._data
    nd = len(shape)
    if nd == 0 or x.shape[x.ndim - nd:] != shape or x.ndim < nd:
        raise RuntimeError(f"layer_norm: given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size {list(x.shape)}")
    w = None if weight is None else weight._data
    b = None if bias is None else bias._data
    for name, arr in (("weight", w), ("bias", b)):
        if arr is not None and (arr.shape != shape or arr.dtype != x.dtype):
            raise RuntimeError(f"layer_norm: {name} must have shape {list(shape)} and dtype {x.dtype}, "
                               f"got {list(arr.shape)} {arr.dtype}")
    return _layer_norm(input, shape, weight, bias, eps)


# ------------------------------------------------------------------ embedding
def embedding(input: Tensor, weight: Tensor, padding_idx: Optional[int] = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` (V, D) at integer ids ``input`` (...) -> (..., D).
    The ``padding_idx`` row receives no gradient.  ``max_norm``: the rows
    looked up whose ``norm_type``-norm exceeds it are first rescaled in place
    to that norm (as torch: weight is modified).  ``scale_grad_by_freq``:
    each id's gradient is divided by its count in ``input``."""
    _tensor(input, "embedding")
    _float_tensor(weight, "embedding", "weight", error=TypeError)
    if sparse:
        raise NotImplementedError("embedding: sparse gradients are not supported (use sparse=False)")
    ids = input._data
    if ids.dtype.kind not in "iu":
        raise RuntimeError(f"embedding: input must be an integer (Long) tensor of ids, got {ids.dtype}")
    w = weight._data
    if w.ndim != 2:
        raise RuntimeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got {w.ndim}-D")
    num = w.shape[0]
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise ValueError(f"embedding: padding_idx must be within num_embeddings ({num}), got {padding_idx}")
        padding_idx = padding_idx % num
    if max_norm is not None:
        _renorm_rows(weight, ids, float(max_norm), float(norm_type))
    out = _embedding(input, weight, padding_idx)
    if scale_grad_by_freq and out.requires_grad:
        _, inverse, counts = np.unique(ids.reshape(-1), return_inverse=True, return_counts=True)
        per_id = (1.0 / counts[inverse]).reshape(ids.shape + (1,)).astype(out.dtype)
        out = apply_op(out._data, (out,), lambda g: (g * per_id,), "EmbeddingScaleGradByFreq")
    return out


def _renorm_rows(weight: Tensor, ids: np.ndarray, max_norm: float, norm_type: float) -> None:
    """torch's embedding_renorm_: rows ``ids`` of weight with a norm above
    max_norm scaled by max_norm / (norm + 1e-7), in place (a version bump)."""
    rows = np.unique(ids.reshape(-1))
    w = weight._data
    if rows.size and (rows.min() < 0 or rows.max() >= w.shape[0]):
        raise IndexError(f"embedding: ids must be in [0, {w.shape[0]}), got {int(rows.min())}..{int(rows.max())}")
    picked = np.abs(w[rows].astype(np.float64))
    norms = picked.max(axis=1) if norm_type == float("inf") else (picked ** norm_type).sum(axis=1) ** (1 / norm_type)
    over = norms > max_norm
    if over.any():
        data = weight._writable()
        data[rows[over]] *= (max_norm / (norms[over] + 1e-7)).astype(data.dtype)[:, None]


# ------------------------------------------------------------------ dropout
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by
    1 / (1 - p); identity when not training.  The mask comes from the
    dropout kernel's counter-based generator, seeded from
    ``ctransformer.manual_seed``'s generator."""
    _tensor(input, "dropout")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    x = input._data
    if p == 1.0:
        out = apply_op(x * 0, (input,), lambda g: (np.zeros_like(g),), "Dropout")  # NaN stays NaN
    else:
        _float_tensor(input, "dropout", error=RuntimeError)
        out = _dropout(input, p)
    if inplace:  # input itself now holds the result (and its autograd history), as torch
        input._check_inplace("dropout")
        return input._become(out)
    return out


# ------------------------------------------------------------------ losses
_class_dim_last, _class_dim_back, _loss_shape = _ce.class_dim_last, _ce.class_dim_back, _ce.loss_shape


def _check_targets(x: np.ndarray, t: np.ndarray, fn: str) -> None:
    """Class-id targets for input x; torch's classes: ValueError when the batch
    sizes differ, RuntimeError for another dtype or any other shape."""
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"{fn}: target must be an integer (Long) tensor of class ids, got {t.dtype}")
    expected = () if x.ndim == 1 else (x.shape[0],) + tuple(x.shape[2:])
    if t.shape != expected:
        batch_differs = x.ndim > 1 and t.ndim > 0 and t.shape[0] != x.shape[0]
        error = ValueError if batch_differs else RuntimeError
        raise error(f"{fn}: target must have shape {expected} for input of shape {tuple(x.shape)}, "
                    f"got {tuple(t.shape)}")


def _loss_shape(x: np.ndarray) -> tuple:
    """Shape of the per-element loss with reduction='none'."""
    return () if x.ndim == 1 else (x.shape[0],) + tuple(x.shape[2:])


@_quietly
def cross_entropy(input: Tensor, target: Tensor, weight: Optional[Tensor] = None, size_average=None,
                  ignore_index: int = -100, reduce=None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of softmax(input) along dim 1 (the class dim) against
    class ids (fused log-softmax + NLL kernel), or against class
    probabilities when ``target`` is a float tensor shaped like ``input``."""
    fn = "cross_entropy"
    _float_tensor(input, fn)
    _tensor(target, fn, "target")
    reduction = _reduction(reduction, fn, size_average, reduce)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"{fn}: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    x, t = input._data, target._data
    if x.ndim == 0:
        raise ValueError(f"{fn}: input must have a class dimension, got a 0-d tensor")
    w = None if weight is None else _float_tensor(weight, fn, "weight", error=RuntimeError)._data.astype(x.dtype)
    if w is not None and w.shape != (x.shape[0 if x.ndim == 1 else 1],):
        raise ValueError(f"{fn}: weight must have shape ({x.shape[0 if x.ndim == 1 else 1]},), got {tuple(w.shape)}")
    if t.dtype.kind == "f":
        if t.shape != x.shape:
            raise RuntimeError(f"cross_entropy: probability target must have the input's shape {tuple(x.shape)}, "
                               f"got {tuple(t.shape)}")
        return _ce.cross_entropy_probs(input, target, w, reduction, label_smoothing)
    _check_targets(x, t, fn)
    return _ce.cross_entropy(input, target, w, ignore_index, label_smoothing, reduction)


@_quietly
def nll_loss(input: Tensor, target: Tensor, weight: Optional[Tensor] = None, size_average=None,
             ignore_index: int = -100, reduce=None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities ``input`` (N, C) /
    (N, C, d1, ...) / (C,) at class ids ``target``:
    loss_n = -w[t_n] * input[n, t_n]; 'mean' divides by sum of w[t_n]."""
    fn = "nll_loss"
    _float_tensor(input, fn)
    _tensor(target, fn, "target")
    reduction = _reduction(reduction, fn, size_average, reduce)
    x, t = input._data, target._data
    if x.ndim == 0:
        raise ValueError(f"{fn}: input must have a class dimension, got a 0-d tensor")
    _check_targets(x, t, fn)
    x2 = _class_dim_last(x)
    t2 = t.reshape(-1).astype(np.int64)
    n, c = x2.shape
    valid = t2 != ignore_index
    safe = np.where(valid, t2, 0)
    bad = valid & ((t2 < 0) | (t2 >= c))
    if bad.any():
        i = int(np.argmax(bad))
        raise IndexError(f"{fn}: target {int(t2[i])} is out of bounds for {c} classes (at position {i})")
    w = np.ones(c, x.dtype) if weight is None else \
        _float_tensor(weight, fn, "weight", error=RuntimeError)._data.astype(x.dtype)
    wt = np.where(valid, w[safe], 0).astype(x.dtype)
    picked = x2[np.arange(n), safe]
    per = -wt * picked
    if reduction == "none":
        loss = per.reshape(_loss_shape(x))
        denom = None
    elif reduction == "sum":
        loss = np.asarray(per.sum(), x.dtype)
    else:
        denom = wt.sum()
        loss = np.asarray(per.sum() / denom, x.dtype)  # no target: NaN, silently (quietly), as torch

    def backward(g):
        if reduction == "none":
            coef = -wt * g.reshape(-1)
        elif reduction == "sum":
            coef = -wt * g
        else:  # as torch: ignored positions get exactly 0, even when every target is ignored (denom 0)
            coef = np.where(valid, -wt * (g / denom), 0).astype(x.dtype)  # (run_backward: quiet 0 / 0)
        d2 = np.zeros_like(x2)
        d2[np.arange(n), safe] = coef
        return (_class_dim_back(d2, x.shape), None)

    return apply_op(loss, (input, target), backward, "NllLoss")


@_quietly
def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """(input - target)^2, reduced; both operands receive gradients.
    Shapes broadcast (torch warns when they differ)."""
    fn = "mse_loss"
    _float_tensor(input, fn)
    _tensor(target, fn, "target")
    reduction = _reduction(reduction, fn, size_average, reduce)
    x, y = input._data, target._data.astype(input._data.dtype, copy=False)
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        raise RuntimeError(f"{fn}: input {tuple(x.shape)} and target {tuple(y.shape)} do not broadcast") from None
    if x.shape != y.shape:
        warnings.warn(f"Using a target size ({tuple(y.shape)}) that is different to the input size "
                      f"({tuple(x.shape)}). This will likely lead to incorrect results due to broadcasting.",
                      stacklevel=2)
    diff = x - y
    sq = diff * diff
    if reduction == "none":
        loss = sq
    elif reduction == "sum":
        loss = np.asarray(sq.sum(), x.dtype)
    else:
        loss = np.asarray(sq.mean(), x.dtype)
    scale = 2.0 / sq.size if reduction == "mean" and sq.size else 2.0

    def backward(g):
        d = (diff * (g * scale)).astype(x.dtype)
        return (_sum_to(d, x.shape), None if not target.requires_grad else _sum_to(-d, y.shape))

    return apply_op(loss, (input, target), backward, "MseLoss", saved=(input, target))


# ------------------------------------------------------------------ shape helpers
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: Optional[float] = None) -> Tensor:
    """Padding ``pad = (last_left, last_right, prev_left, prev_right, ...)`` with
    ``value`` (mode "constant"), the mirror image without the edge ("reflect"),
    the edge ("replicate") or the other end ("circular"); negative amounts crop,
    as torch.  The other modes pad the last 1-3 dims of a tensor with one or two
    more (batch, channels), as torch."""
    _tensor(input, "pad")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    pad = [int(p) for p in pad]
    x = input._data
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise RuntimeError(f"pad: padding length must be even and at most 2 * input.dim() "
                           f"({2 * x.ndim}), got {len(pad)}")
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode != "constant":
        _check_pad_mode(x, pad, widths, mode, value)
        from ..tensor_ops_more import pad_by_index
        return pad_by_index(input, widths, mode)
    grow = [(max(a, 0), max(b, 0)) for a, b in widths]
    crop = tuple(slice(max(-a, 0), (s + max(a, 0) + max(b, 0)) - max(-b, 0))
                 for (a, b), s in zip(widths, x.shape))
    fill = 0 if value is None else value
    out = np.pad(x, grow, mode="constant", constant_values=fill)[crop]
    if any(sl.stop - sl.start < 0 for sl in crop):
        raise RuntimeError(f"pad: cropping more than the input size {tuple(x.shape)} with pad {pad}")
    inner = tuple(slice(ga, ga + s) for (ga, _), s in zip(grow, x.shape))

    def backward(g):
        full = np.zeros(tuple(s + a + b for s, (a, b) in zip(x.shape, grow)), g.dtype)
        full[crop] = g
        return (np.ascontiguousarray(full[inner]),)

    return apply_op(np.ascontiguousarray(out), (input,), backward, "ConstantPad")


def _check_pad_mode(x: np.ndarray, pad: list, widths: list, mode: str, value) -> None:
    """torch's limits on the non-constant modes, with its exception classes."""
    if value is not None:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    dims = len(pad) // 2
    if not 1 <= dims <= 3 or x.ndim not in (dims + 1, dims + 2):
        raise NotImplementedError(f"Padding size {len(pad)} is not supported for {x.ndim}D input tensor: "
                                  f"mode {mode!r} pads the last 1-3 dims of a tensor with one or two more "
                                  "(batch, channels)")
    for d, (before, after) in enumerate(widths):
        if (before, after) == (0, 0):
            continue
        if mode == "reflect" and (before >= x.shape[d] or after >= x.shape[d]):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({before}, {after}) at dimension {d} of input {list(x.shape)}")
        if mode == "circular" and (before > x.shape[d] or after > x.shape[d]):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if x.shape[d] == 0:
            raise RuntimeError(f"pad: mode {mode!r} cannot pad dimension {d} of size 0")


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """Integer ids (...) -> int64 (..., num_classes) with a 1 at each id."""
    _tensor(tensor, "one_hot", "tensor")
    ids = tensor._data
    if ids.dtype.kind not in "iu":
        raise RuntimeError(f"one_hot: tensor must be an integer (Long) tensor, got {ids.dtype}")
    if num_classes == -1:
        num_classes = int(ids.max()) + 1 if ids.size else 0
    if ids.size and (ids.min() < 0 or ids.max() >= num_classes):
        raise RuntimeError(f"one_hot: class values must be in [0, {num_classes}), "
                           f"got min {int(ids.min())} and max {int(ids.max())}")
    out = np.zeros(ids.shape + (num_classes,), int64)
    np.put_along_axis(out, ids[..., None].astype(np.int64), 1, axis=-1)
    return Tensor._wrap(out)
from .functional_attention import multi_head_attention_forward, scaled_dot_product_attention  # noqa: E402,F401
