"""KERNELS: one entry per kernel forward/backward pair, driving the generic
kernel tests of tests/test_kernel_table.py (in the spirit of PyTorch's OpInfo).

An entry says how to call the pair and what it should compute:

* ``forward(**inputs)`` -> the output, or a tuple whose first item is the
  output the gradients are taken of (the rest is what backward needs);
* ``backward(dout, saved, acc, **inputs)`` -> {input name: gradient}; ``saved``
  is forward's whole result, ``acc`` the accumulator keywords to pass on;
* ``reference(**inputs)`` -> float64 NumPy values of forward's first outputs;
* ``cases(rng, dtype)`` -> a list of ``inputs`` dicts (forward's keyword names;
  arrays and plain options), ``empty(rng, dtype)`` the same with zero-size
  dimensions, ``torch_cases`` (default ``cases``) those compared with torch;
* ``differentiable``: the inputs gradcheck differentiates (float arrays);
* ``accumulates``: input name -> backward's keyword that ``+=`` into a given array;
* ``torch(torch, **inputs)`` -> the torch output (a tuple when forward's extra
  outputs are compared too), or None when torch has no counterpart;
* ``f64``: the float64 tolerance against the reference.

The bespoke edge cases of each family (error messages, NaN/Inf, ids out of
range, masks, options) stay in tests/test_kernels_<family>.py.
"""
from __future__ import annotations

import itertools
import math
from typing import List

import numpy as np

import ctransformer.kernels as K
from kernel_info import KernelInfo, normal, off_kinks
from kernel_table_rnn import GATES, rnn_cell_entry, rnn_entry
from tolerances import F64_TIGHT

_erf = np.vectorize(math.erf, otypes=[np.float64])


def ref_activation(x, kind):
    """float64 relu / gelu (erf) / gelu_tanh / tanh / sigmoid."""
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "gelu":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if kind == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "tanh":
        return np.tanh(x)
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def torch_activation(torch, x, kind):
    F = torch.nn.functional
    if kind in ("gelu", "gelu_tanh"):
        return F.gelu(x, approximate="tanh" if kind == "gelu_tanh" else "none")
    return dict(relu=F.relu, tanh=torch.tanh, sigmoid=torch.sigmoid)[kind](x)


# ---- activation ----------------------------------------------------------------

def _activation(kind: str) -> KernelInfo:
    def backward(dout, saved, acc, x):
        return dict(x=K.activation_backward(dout, saved if K.activation_saves_output(kind) else x, kind, **acc))

    def cases(rng, dtype):
        return [dict(x=off_kinks(normal(rng, shape, dtype, 3))) for shape in [(), (7,), (3, 4, 5)]]

    def torch_cases(rng, dtype):
        x = normal(rng, (6, 9), dtype, 3)
        x[0, :3] = [0.0, -0.0, 1e-30]  # torch's gradient at relu's kink is 0
        return [dict(x=x)]

    return KernelInfo(
        f"activation_{kind}", lambda x: K.activation_forward(x, kind), backward,
        lambda x: ref_activation(x, kind), cases, lambda rng, dtype: [dict(x=np.zeros((0, 3), dtype))],
        ("x",), dict(x="dinp"), lambda torch, x: torch_activation(torch, x, kind), torch_cases)


# ---- softmax / log_softmax -----------------------------------------------------

def ref_softmax(x, log=False):
    shifted = x - np.max(x, axis=-1, keepdims=True, initial=-np.inf)
    log_sum = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return shifted - log_sum if log else np.exp(shifted - log_sum)


def _softmax(log: bool) -> KernelInfo:
    name = "log_softmax" if log else "softmax"
    forward, backward = getattr(K, f"{name}_forward"), getattr(K, f"{name}_backward")

    def cases(rng, dtype):
        return [dict(x=normal(rng, shape, dtype, 3)) for shape in [(5,), (3, 7), (2, 3, 4)]]

    def torch_cases(rng, dtype):
        x = normal(rng, (5, 3, 11), dtype, 4)
        x[0, 0, :4] = -np.inf  # a partially masked row, as attention masks make
        return [dict(x=x)]

    def empty(rng, dtype):
        return [dict(x=np.zeros(shape, dtype)) for shape in [(0, 5), (3, 0), (0,)]]

    return KernelInfo(
        name, forward, lambda dout, saved, acc, x: dict(x=backward(dout, saved, **acc)),
        lambda x: ref_softmax(x, log), cases, empty, ("x",), dict(x="dinp"),
        lambda torch, x: getattr(torch.nn.functional, name)(x, dim=-1), torch_cases)


# ---- linear, matmul, bmm -------------------------------------------------------

def _linear_backward(dout, saved, acc, inp, weight, bias=None):
    dx, dw, db = K.linear_backward(dout, inp, weight, with_bias=bias is not None, **acc)
    return dict(inp=dx, weight=dw, bias=db)


def _linear_cases(rng, dtype):
    out = []
    for lead, with_bias in itertools.product([(), (5,), (2, 3)], [True, False]):
        case = dict(inp=normal(rng, lead + (7,), dtype), weight=normal(rng, (4, 7), dtype))
        if with_bias:
            case["bias"] = normal(rng, (4,), dtype)
        out.append(case)
    return out


def _linear_empty(rng, dtype):
    return [dict(inp=np.zeros((0, 5), dtype), weight=normal(rng, (4, 5), dtype), bias=normal(rng, (4,), dtype)),
            dict(inp=np.zeros((2, 0), dtype), weight=np.zeros((3, 0), dtype), bias=np.ones(3, dtype))]


LINEAR = KernelInfo(
    "linear", K.linear_forward, _linear_backward,
    lambda inp, weight, bias=None: inp @ weight.T + (0 if bias is None else bias),
    _linear_cases, _linear_empty, ("inp", "weight", "bias"), dict(inp="dinp", weight="dweight", bias="dbias"),
    lambda torch, inp, weight, bias=None: torch.nn.functional.linear(inp, weight, bias), f64=F64_TIGHT)

MATMUL_SHAPES = [((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((4, 5), (2, 5, 3)), ((2, 3, 4, 5), (2, 3, 5, 6)),
                 ((2, 1, 4, 5), (1, 3, 5, 6))]


def _matmul_backward(dout, saved, acc, a, b):
    da, db = K.matmul_backward(dout, a, b)
    return dict(a=da, b=db)


MATMUL = KernelInfo(
    "matmul", K.matmul_forward, _matmul_backward, lambda a, b: a @ b,
    lambda rng, dtype: [dict(a=normal(rng, sa, dtype), b=normal(rng, sb, dtype)) for sa, sb in MATMUL_SHAPES],
    lambda rng, dtype: [dict(a=np.zeros((0, 4, 5), dtype), b=normal(rng, (5, 3), dtype)),
                        dict(a=np.zeros((4, 0), dtype), b=np.zeros((0, 3), dtype))],
    ("a", "b"), torch=lambda torch, a, b: torch.matmul(a, b), f64=F64_TIGHT)


def _bmm_backward(dout, saved, acc, a, b):
    da, db = K.bmm_backward(dout, a, b)
    return dict(a=da, b=db)


BMM = KernelInfo(
    "bmm", K.bmm_forward, _bmm_backward, lambda a, b: a @ b,
    lambda rng, dtype: [dict(a=normal(rng, sa, dtype), b=normal(rng, sb, dtype))
                        for sa, sb in [((3, 4, 5), (3, 5, 2)), ((1, 4, 5), (3, 5, 2)), ((3, 4, 5), (1, 5, 2))]],
    lambda rng, dtype: [dict(a=np.zeros((0, 4, 5), dtype), b=np.zeros((0, 5, 2), dtype)),
                        dict(a=np.zeros((2, 3, 0), dtype), b=np.zeros((2, 0, 4), dtype))],
    ("a", "b"), torch=lambda torch, a, b: torch.matmul(a, b), f64=F64_TIGHT)


# ---- layernorm and residual add + layernorm ------------------------------------

def ref_layernorm(x, weight=None, bias=None, eps=1e-5):
    """float64 (out, mean, rstd): biased variance, eps inside the root, as torch."""
    mean = x.mean(axis=-1)
    var = ((x - mean[..., None]) ** 2).mean(axis=-1)
    rstd = 1 / np.sqrt(var + eps)
    out = (x - mean[..., None]) * rstd[..., None]
    return out * (1 if weight is None else weight) + (0 if bias is None else bias), mean, rstd


def torch_layernorm(torch, x, weight=None, bias=None):
    out, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], weight, bias, 1e-5)
    return out, mean[..., 0], rstd[..., 0]


def _affine_cases(rng, dtype, shapes, x_of):
    out = []
    for shape, (with_w, with_b) in itertools.product(shapes, itertools.product([True, False], repeat=2)):
        case = x_of(shape)
        if with_w:
            case["weight"] = normal(rng, shape[-1:], dtype)
        if with_b:
            case["bias"] = normal(rng, shape[-1:], dtype)
        out.append(case)
    return out


def _layernorm_backward(dout, saved, acc, x, weight=None, bias=None):
    _, mean, rstd = saved
    dx, dw, db = K.layernorm_backward(dout, x, weight, mean, rstd, with_bias=bias is not None, **acc)
    return dict(x=dx, weight=dw, bias=db)


LAYERNORM = KernelInfo(
    "layernorm", K.layernorm_forward, _layernorm_backward, ref_layernorm,
    lambda rng, dtype: _affine_cases(rng, dtype, [(5,), (3, 7), (2, 3, 4)],
                                     lambda shape: dict(x=normal(rng, shape, dtype, 2, 0.5))),
    lambda rng, dtype: [dict(x=np.zeros((0, 5), dtype), weight=np.ones(5, dtype), bias=np.zeros(5, dtype)),
                        dict(x=np.zeros((3, 0), dtype))],
    ("x", "weight", "bias"), dict(x="dinp", weight="dweight", bias="dbias"), torch_layernorm)


def _add_layernorm_backward(dout, saved, acc, inp, residual, weight=None, bias=None):
    _, mean, rstd = saved
    dx, dw, db = K.add_layernorm_backward(dout, inp, residual, weight, mean, rstd, with_bias=bias is not None,
                                          **acc)
    return dict(inp=dx, residual=dx, weight=dw, bias=db)   # d(inp + residual) reaches both


ADD_LAYERNORM = KernelInfo(
    "add_layernorm", K.add_layernorm_forward, _add_layernorm_backward,
    lambda inp, residual, weight=None, bias=None: ref_layernorm(inp + residual, weight, bias),
    lambda rng, dtype: _affine_cases(rng, dtype, [(2, 3, 8), (5,)], lambda shape: dict(
        inp=normal(rng, shape, dtype), residual=normal(rng, shape, dtype, shift=3))),
    lambda rng, dtype: [dict(inp=np.zeros((0, 4), dtype), residual=np.zeros((0, 4), dtype),
                             weight=np.ones(4, dtype), bias=np.zeros(4, dtype))],
    ("inp", "residual", "weight", "bias"), dict(inp="dinp", weight="dweight", bias="dbias"),
    lambda torch, inp, residual, weight=None, bias=None: torch_layernorm(torch, inp + residual, weight, bias),
    f64=F64_TIGHT)


def _dropout_add_layernorm_reference(inp, residual, p, seed, weight=None, bias=None):
    """LayerNorm(inp * keep / (1 - p) + residual) in float64, keep the kernel's
    own dropout mask of (seed, offset 0) (see _dropout_reference)."""
    keep = K.dropout_forward(np.ones(inp.shape), p, seed)[1]
    out, mean, rstd = ref_layernorm(np.where(keep, inp / (1 - p), 0.0) + residual, weight, bias)
    return out, mean, rstd, keep


def _dropout_add_layernorm_backward(dout, saved, acc, inp, residual, p, seed, weight=None, bias=None):
    _, mean, rstd, keep = saved
    di, dr, dw, db = K.dropout_add_layernorm_backward(dout, inp, keep, p, residual, weight, mean, rstd,
                                                      with_bias=bias is not None, **acc)
    return dict(inp=di, residual=dr, weight=dw, bias=db)


def _torch_dropout_add_layernorm(torch, inp, residual, p, seed, weight=None, bias=None):
    """torch has no such op: layer_norm of torch's own product and sum, with the kernel's mask."""
    keep = torch.tensor(K.dropout_forward(np.ones(tuple(inp.shape)), p, seed)[1])
    return torch_layernorm(torch, torch.where(keep, inp / (1 - p), torch.zeros_like(inp)) + residual, weight, bias)


DROPOUT_ADD_LAYERNORM = KernelInfo(
    "dropout_add_layernorm", K.dropout_add_layernorm_forward, _dropout_add_layernorm_backward,
    _dropout_add_layernorm_reference,
    lambda rng, dtype: _affine_cases(rng, dtype, [(2, 3, 8), (5,)], lambda shape: dict(
        inp=normal(rng, shape, dtype), residual=normal(rng, shape, dtype, shift=3), p=0.3, seed=5)),
    lambda rng, dtype: [dict(inp=np.zeros((0, 4), dtype), residual=np.zeros((0, 4), dtype), p=0.3, seed=5,
                             weight=np.ones(4, dtype), bias=np.zeros(4, dtype))],
    ("inp", "residual", "weight", "bias"),
    dict(inp="dinp", residual="dresidual", weight="dweight", bias="dbias"), _torch_dropout_add_layernorm,
    f64=F64_TIGHT)


# ---- bias + activation ---------------------------------------------------------

FUSED_ACTS = [("relu", "none"), ("gelu", "none"), ("gelu", "tanh")]


def _bias_act_backward(dout, saved, acc, inp, act, approximate, bias=None):
    dx, db = K.bias_act_backward(dout, inp, bias, act, approximate, **acc)
    return dict(inp=dx, bias=db)


def _bias_act_cases(rng, dtype):
    out = []
    for (act, approximate), with_bias in itertools.product(FUSED_ACTS, [True, False]):
        case = dict(inp=off_kinks(normal(rng, (2, 3, 7), dtype)), act=act, approximate=approximate)
        if with_bias:
            case["bias"] = normal(rng, (7,), dtype, 0.05)  # small: inp + bias stays off relu's kink
        out.append(case)
    return out


def _bias_act_torch_cases(rng, dtype):
    out = []
    for act, approximate in FUSED_ACTS:
        inp = normal(rng, (4, 9), dtype)
        inp[0, :3] = 0  # relu at exactly 0 (bias 0 there): torch's gradient is 0
        bias = np.zeros(9, dtype)
        bias[3:] = rng.standard_normal(6)
        out.append(dict(inp=inp, bias=bias, act=act, approximate=approximate))
    return out


def _bias_act_reference(inp, act, approximate, bias=None):
    z = inp + (0 if bias is None else bias)
    return ref_activation(z, "gelu_tanh" if approximate == "tanh" else act)


BIAS_ACT = KernelInfo(
    "bias_act", lambda inp, act, approximate, bias=None: K.bias_act_forward(inp, bias, act, approximate),
    _bias_act_backward, _bias_act_reference, _bias_act_cases,
    lambda rng, dtype: [dict(inp=np.zeros((0, 4), dtype), bias=normal(rng, (4,), dtype), act="gelu",
                             approximate="none")],
    ("inp", "bias"), dict(inp="dinp", bias="dbias"),
    lambda torch, inp, act, approximate, bias=None: torch_activation(
        torch, inp + (0 if bias is None else bias), "gelu_tanh" if approximate == "tanh" else act),
    _bias_act_torch_cases, f64=F64_TIGHT)


# ---- embedding -----------------------------------------------------------------

ID_DTYPES = [np.int64, np.int32, np.int16, np.uint8, np.uint64]


def _embedding_cases(rng, dtype):
    """Every ids shape with every integer dtype of ids; a table of 7 rows of 3."""
    return [dict(ids=rng.integers(0, 7, shape).astype(id_dtype), weight=normal(rng, (7, 3), dtype))
            for shape, id_dtype in itertools.product([(), (5,), (2, 3), (2, 1, 4)], ID_DTYPES)]


def _embedding_torch_cases(rng, dtype):
    ids = rng.integers(0, 8, (4, 6))
    ids[0, :3] = 0  # repeated ids: their gradients add up
    return [dict(ids=ids, weight=normal(rng, (8, 5), dtype))]


EMBEDDING = KernelInfo(
    "embedding", K.embedding_forward,
    lambda dout, saved, acc, ids, weight: dict(weight=K.embedding_backward(dout, ids, weight.shape[0], **acc)),
    lambda ids, weight: weight[ids.astype(np.int64)], _embedding_cases,
    lambda rng, dtype: [dict(ids=np.zeros((0, 2), np.int64), weight=normal(rng, (9, 6), dtype)),
                        dict(ids=np.array([1, 2]), weight=np.zeros((3, 0), dtype))],
    ("weight",), dict(weight="dweight"),
    lambda torch, ids, weight: torch.nn.functional.embedding(ids, weight), _embedding_torch_cases, exact=True)


# ---- dropout -------------------------------------------------------------------

def _dropout_reference(x, p, seed, offset):
    """x * mask / (1 - p).  The mask is the kernel's own (its statistics and
    counter property are tested in test_kernels_dropout.py): it depends only on
    (seed, offset, position), so a forward of ones gives it."""
    keep = K.dropout_forward(np.ones(x.shape), p, seed, offset)[1]
    return np.where(keep, x / (1 - p), 0.0), keep


DROPOUT = KernelInfo(
    "dropout", K.dropout_forward,
    lambda dout, saved, acc, x, p, seed, offset: dict(x=K.dropout_backward(dout, saved[1], p, **acc)),
    _dropout_reference,
    lambda rng, dtype: [dict(x=normal(rng, shape, dtype), p=p, seed=seed, offset=offset)
                        for shape, p, seed, offset in [((5, 7), 0.25, 11, 3), ((8, 33), 0.3, 7, 0), ((), 0.0, 1, 0)]],
    lambda rng, dtype: [dict(x=np.zeros((0, 3), dtype), p=0.5, seed=1, offset=0)],
    ("x",), dict(x="dinp"))


# ---- cross-entropy -------------------------------------------------------------

def ref_cross_entropy(logits, targets, ignore_index, label_smoothing, reduction, weight=None):
    """torch's F.cross_entropy in float64 NumPy (finite logits) -> (loss, lse)."""
    x, (n, c) = logits, logits.shape
    lse = np.log(np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1)) + x.max(axis=1)
    logp = x - lse[:, None]
    w = np.ones(c) if weight is None else weight
    keep = targets != ignore_index
    t = np.where(keep, targets, 0).astype(np.int64)
    nll = np.where(keep, -w[t] * logp[np.arange(n), t], 0.0)
    smooth = np.where(keep, -(logp * w).sum(axis=1), 0.0)
    rows = (1 - label_smoothing) * nll + label_smoothing / c * smooth
    loss = dict(none=rows, sum=rows.sum(), mean=rows.sum() / w[t][keep].sum())[reduction]
    return loss, lse


CE_OPTIONS = list(itertools.product([False, True], [0.0, 0.15], ["mean", "sum", "none"], [False, True]))


def _cross_entropy_cases(rng, dtype):
    """Every option combination; ignored rows use the default ignore_index or 7."""
    out = []
    for i, (with_ignore, eps, reduction, with_weight) in enumerate(CE_OPTIONS):
        ignore_index = -100 if i % 2 else 7
        targets = rng.integers(0, 5, 6)
        if with_ignore:
            targets[[1, 4]] = ignore_index
        case = dict(logits=normal(rng, (6, 5), dtype, 2), targets=targets, ignore_index=ignore_index,
                    label_smoothing=eps, reduction=reduction)
        if with_weight:
            case["weight"] = rng.uniform(0.2, 2.0, 5).astype(dtype)
        out.append(case)
    return out


def _cross_entropy_backward(dout, saved, acc, logits, targets, ignore_index, label_smoothing, reduction,
                            weight=None):
    dloss = np.asarray(dout, logits.dtype)
    return dict(logits=K.cross_entropy_backward(dloss, logits, targets, saved[1], ignore_index, label_smoothing,
                                                reduction, weight, **acc))


def _torch_cross_entropy(torch, logits, targets, ignore_index, label_smoothing, reduction, weight=None):
    return torch.nn.functional.cross_entropy(logits, targets, weight=weight, ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=label_smoothing)


CROSS_ENTROPY = KernelInfo(
    "cross_entropy",
    lambda logits, targets, ignore_index, label_smoothing, reduction, weight=None: K.cross_entropy_forward(
        logits, targets, ignore_index, label_smoothing, reduction, weight),
    _cross_entropy_backward, ref_cross_entropy, _cross_entropy_cases,
    lambda rng, dtype: [dict(logits=np.zeros((0, 4), dtype), targets=np.zeros(0, np.int64), ignore_index=-100,
                             label_smoothing=0.0, reduction=r) for r in ("none", "sum")],
    ("logits",), dict(logits="dlogits"), _torch_cross_entropy, f64=F64_TIGHT,
    float64_outputs=(1,))   # lse: the recomputed softmax of huge logits stays exact


# ---- scaled dot-product attention ----------------------------------------------

def ref_sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    """(out, probs) of softmax(scale q k^T + mask) v; fully hidden rows -> 0."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * q @ np.swapaxes(k, -1, -2)
    tq, tk = s.shape[-2:]
    hidden = np.zeros(s.shape, bool)
    if mask is not None and mask.dtype == bool:
        hidden |= ~mask
    elif mask is not None:
        s = s + mask
    if is_causal:
        hidden |= np.triu(np.ones((tq, tk), bool), 1)
    s = np.where(hidden, -np.inf, s)
    top = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    full = top == -np.inf
    e = np.exp(s - np.where(full, 0, top))
    total = e.sum(-1, keepdims=True)
    p = np.where(full, 0, e / np.where(total == 0, 1, total))
    return p @ v, p


# (kind, mask shape for (B, H, Tq, Tk), is_causal): every broadcast the kernel takes
SDPA_MASKS = [(None, None, False), (None, None, True), ("bool", lambda B, H, Tq, Tk: (B, H, Tq, Tk), False),
              ("bool", lambda B, H, Tq, Tk: (Tq, Tk), True), ("bool", lambda B, H, Tq, Tk: (B, 1, 1, Tk), False),
              ("float", lambda B, H, Tq, Tk: (B, 1, Tq, Tk), False), ("float", lambda B, H, Tq, Tk: (Tk,), True)]


def make_mask(kind, rng, shape, dtype):
    """None, bool (True = take part, every row keeps a key) or additive float mask."""
    if kind is None:
        return None
    if kind == "bool":
        keep = rng.random(shape) > 0.3
        keep[..., :1] = True
        return keep
    return normal(rng, shape, dtype, 2)


def _sdpa_cases(rng, dtype, B=2, H=2, Tq=3, Tk=5, Dh=4, Dv=3):
    out = []
    for i, (kind, shape, causal) in enumerate(SDPA_MASKS):
        case = dict(q=normal(rng, (B, H, Tq, Dh), dtype), k=normal(rng, (B, H, Tk, Dh), dtype),
                    v=normal(rng, (B, H, Tk, Dv), dtype), is_causal=causal, scale=0.3 if i == 2 else None)
        if kind is not None:
            case["mask"] = make_mask(kind, rng, shape(B, H, Tq, Tk), dtype)
        out.append(case)
    return out


def _sdpa_torch_cases(rng, dtype):
    out = _sdpa_cases(rng, dtype, H=3, Dh=8, Dv=5)
    for Tq, Tk in [(3, 5), (5, 3)]:   # causal with Tq != Tk: top-left aligned, as torch
        out.append(dict(q=normal(rng, (2, 3, Tq, 8), dtype), k=normal(rng, (2, 3, Tk, 8), dtype),
                        v=normal(rng, (2, 3, Tk, 5), dtype), is_causal=True, scale=None))
    return out


def _sdpa_backward(dout, saved, acc, q, k, v, is_causal, scale, mask=None):
    dq, dk, dv = K.sdpa_backward(dout, q, k, v, saved[1], mask, is_causal, scale, **acc)
    return dict(q=dq, k=dk, v=dv)


def _torch_sdpa(torch, q, k, v, is_causal, scale, mask=None):
    """torch refuses a mask together with is_causal: the causal part joins the mask."""
    if is_causal and mask is not None:
        above = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        mask = mask & ~above if mask.dtype == torch.bool else mask.masked_fill(above, float("-inf"))
        is_causal = False
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                            scale=scale)


SDPA = KernelInfo(
    "sdpa", lambda q, k, v, is_causal, scale, mask=None: K.sdpa_forward(q, k, v, mask, is_causal, scale),
    _sdpa_backward, ref_sdpa, _sdpa_cases,
    lambda rng, dtype: [_sdpa_cases(rng, dtype, B=0)[0], _sdpa_cases(rng, dtype, Tq=0)[0]],
    ("q", "k", "v"), dict(q="dq", k="dk", v="dv"), _torch_sdpa, _sdpa_torch_cases, f64=F64_TIGHT)


# ---- multi-head attention (separate projections) -------------------------------

MHA_WEIGHTS = ["q_weight", "k_weight", "v_weight", "q_bias", "k_bias", "v_bias", "out_weight", "out_bias"]


def ref_mha(query, key, value, q_weight, k_weight, v_weight, out_weight, num_heads, is_causal, mask=None,
            q_bias=None, k_bias=None, v_bias=None, out_bias=None):
    """float64 (out, probs): project, split heads, sdpa, merge, project (torch's maths)."""
    B, Tq, E = query.shape
    Dh = E // num_heads

    def heads(x, w, b):
        y = x @ w.T + (0 if b is None else b)
        return y.reshape(B, x.shape[1], num_heads, Dh).transpose(0, 2, 1, 3)

    ctx, p = ref_sdpa(heads(query, q_weight, q_bias), heads(key, k_weight, k_bias),
                      heads(value, v_weight, v_bias), mask, is_causal)
    ctx = ctx.transpose(0, 2, 1, 3).reshape(B, Tq, E)
    return ctx @ out_weight.T + (0 if out_bias is None else out_bias), p


def _mha_args(inputs):
    """The keyword arguments of mha_forward/backward: absent biases as None."""
    return {n: inputs.get(n) for n in MHA_WEIGHTS}


def _mha_forward(query, key, value, num_heads, is_causal, mask=None, **weights):
    out, saved = K.mha_forward(query, key, value, **_mha_args(weights), num_heads=num_heads, mask=mask,
                               is_causal=is_causal)
    return out, saved.probs, saved


def _mha_backward(dout, saved, acc, query, key, value, num_heads, is_causal, mask=None, **weights):
    grads = K.mha_backward(dout, query, key, value, **_mha_args(weights), num_heads=num_heads, saved=saved[2],
                           mask=mask, is_causal=is_causal)
    return {n: getattr(grads, n) for n in ["query", "key", "value"] + MHA_WEIGHTS}


def _mha_cases(rng, dtype, B=2, Tq=3, Tk=4, E=8, Ek=6, Ev=5):
    out = []
    for kind, causal, bias in [(None, False, True), ("bool", True, True), ("float", False, False),
                               (None, True, False)]:
        shapes = dict(q_weight=(E, E), k_weight=(E, Ek), v_weight=(E, Ev), out_weight=(E, E))
        if bias:
            shapes.update(q_bias=(E,), k_bias=(E,), v_bias=(E,), out_bias=(E,))
        case = dict(query=normal(rng, (B, Tq, E), dtype), key=normal(rng, (B, Tk, Ek), dtype),
                    value=normal(rng, (B, Tk, Ev), dtype), num_heads=2, is_causal=causal,
                    **{n: normal(rng, shape, dtype, 0.5) for n, shape in shapes.items()})
        if kind is not None:
            case["mask"] = make_mask(kind, rng, (B, 2, Tq, Tk) if kind == "bool" else (B, 1, Tq, Tk), dtype)
        out.append(case)
    return out


MHA = KernelInfo(
    "mha", _mha_forward, _mha_backward, ref_mha, _mha_cases,
    lambda rng, dtype: [_mha_cases(rng, dtype, B=0)[0], _mha_cases(rng, dtype, Tq=0)[0]],
    ("query", "key", "value", *MHA_WEIGHTS), f64=F64_TIGHT)


# ---- multi-head attention with torch's packed in_proj_weight -------------------

PACKED_WEIGHTS = ["in_proj_weight", "in_proj_bias", "out_weight", "out_bias"]


def _batch_first(a, seq_first):
    return None if a is None else np.swapaxes(a, 0, 1) if seq_first else a


def ref_mha_packed(query, in_proj_weight, out_weight, num_heads, seq_first, is_causal, kv=None, mask=None,
                   in_proj_bias=None, out_bias=None):
    """ref_mha with the (3E, E) weight split into [wq; wk; wv]; keys and values from kv, or query."""
    q = _batch_first(query, seq_first)
    k = q if kv is None else _batch_first(kv, seq_first)
    wq, wk, wv = np.split(in_proj_weight, 3)
    bq, bk, bv = (None, None, None) if in_proj_bias is None else np.split(in_proj_bias, 3)
    out, probs = ref_mha(q, k, k, wq, wk, wv, out_weight, num_heads, is_causal, mask, bq, bk, bv, out_bias)
    return _batch_first(out, seq_first), probs


def _packed_args(inputs):
    return [inputs.get(n) for n in PACKED_WEIGHTS]


def _mha_packed_forward(query, num_heads, seq_first, is_causal, kv=None, mask=None, **weights):
    out, saved = K.mha_packed_forward(query, kv, *_packed_args(weights), num_heads, seq_first, mask, is_causal)
    return out, saved.probs, saved


def _mha_packed_backward(dout, saved, acc, query, num_heads, seq_first, is_causal, kv=None, mask=None, **weights):
    grads = K.mha_packed_backward(dout, query, kv, *_packed_args(weights), num_heads, saved[2], seq_first, mask,
                                  is_causal, **acc)
    return grads._asdict()


def _mha_packed_cases(rng, dtype, B=2, Tq=3, Tk=4, E=8):
    out = []
    for self_attn, seq_first, causal, kind, bias in [(True, False, False, None, True), (False, True, True, "bool", True),
                                                     (True, True, False, "float", False),
                                                     (False, False, False, None, False)]:
        tk = Tq if self_attn else Tk
        lay = (lambda T: (T, B, E)) if seq_first else (lambda T: (B, T, E))
        case = dict(query=normal(rng, lay(Tq), dtype), num_heads=2, seq_first=seq_first, is_causal=causal,
                    in_proj_weight=normal(rng, (3 * E, E), dtype, 0.5), out_weight=normal(rng, (E, E), dtype, 0.5))
        if not self_attn:
            case["kv"] = normal(rng, lay(tk), dtype)
        if bias:
            case.update(in_proj_bias=normal(rng, (3 * E,), dtype, 0.5), out_bias=normal(rng, (E,), dtype, 0.5))
        if kind is not None:
            case["mask"] = make_mask(kind, rng, (B, 1, Tq, tk), dtype)
        out.append(case)
    return out


MHA_PACKED = KernelInfo(
    "mha_packed", _mha_packed_forward, _mha_packed_backward, ref_mha_packed, _mha_packed_cases,
    lambda rng, dtype: [_mha_packed_cases(rng, dtype, B=0)[0], _mha_packed_cases(rng, dtype, Tk=0)[3]],
    ("query", "kv", *PACKED_WEIGHTS), f64=F64_TIGHT,
    accumulates=dict(query="dquery", kv="dkv", in_proj_weight="din_proj_weight", in_proj_bias="din_proj_bias",
                     out_weight="dout_weight", out_bias="dout_bias"))


KERNELS: List[KernelInfo] = (
    [_activation(kind) for kind in K.ACTIVATION_KINDS]
    + [_softmax(False), _softmax(True), LINEAR, MATMUL, BMM, LAYERNORM, ADD_LAYERNORM, BIAS_ACT, EMBEDDING,
       DROPOUT, DROPOUT_ADD_LAYERNORM, CROSS_ENTROPY, SDPA, MHA, MHA_PACKED]
    + [rnn_entry(mode) for mode in GATES] + [rnn_cell_entry(mode) for mode in GATES])
