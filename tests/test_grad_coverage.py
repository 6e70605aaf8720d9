"""No silently missing gradient: every public differentiable op and module,
with every float input requiring grad (float64), gives each input a
gradient, and that gradient equals float64 central differences.

The public surface is enumerated (``ctransformer`` functions, Tensor
methods, ``nn.functional``, ``nn`` modules) and each name must either have
a case here or be listed as not differentiable, with the reason: a new op
without a case fails ``test_every_public_op_is_covered``.
"""
import inspect

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
import ctransformer.nn.functional as F
from ctransformer.autograd import gradcheck

_rng = np.random.default_rng(2024)


def R(*shape, pos=False, lo=None):
    """A float64 array: normal values, or positive ones (log, sqrt, ...)."""
    a = _rng.standard_normal(shape)
    if pos:
        a = np.abs(a) + 0.5
    return a


IDX = np.array([[0, 2], [1, 0], [2, 1]])
MASK = np.array([[True, False, True, False], [False, False, True, True], [True, True, False, False]])
ROWS = np.array([2, 0, 2])

# the binary cross-entropies' weight (4,), (3, 1) and pos_weight (4,): constants
BCE_WEIGHTS = [ct.tensor(R(4)), ct.tensor(R(3, 1)), ct.tensor(R(4, pos=True))]

# name -> (function of the float64 input Tensors, input arrays[, gradcheck kwargs])
OPS = {
    # ---- elementwise / arithmetic (ct.f and Tensor.f share the case)
    "abs": (lambda x: x.abs(), [R(3, 4)]),
    "absolute": (lambda x: x.absolute(), [R(3, 4)]),
    "neg": (lambda x: ct.neg(x), [R(3, 4)]),
    "negative": (lambda x: x.negative(), [R(3, 4)]),
    "add": (lambda x, y: ct.add(x, y, alpha=2), [R(3, 4), R(4)]),
    "sub": (lambda x, y: ct.sub(x, y), [R(3, 4), R(3, 1)]),
    "subtract": (lambda x, y: x.subtract(y), [R(3, 4), R(4)]),
    "mul": (lambda x, y: ct.mul(x, y), [R(3, 4), R(4)]),
    "multiply": (lambda x, y: x.multiply(y), [R(3, 4), R(3, 4)]),
    "div": (lambda x, y: ct.div(x, y), [R(3, 4), R(4, pos=True)]),
    "divide": (lambda x, y: x.divide(y), [R(3, 4), R(3, 4, pos=True)]),
    "true_divide": (lambda x, y: ct.true_divide(x, y), [R(3, 4), R(4, pos=True)]),
    "pow": (lambda x, y: ct.pow(x, y), [R(3, 4, pos=True), R(4)]),
    "pow_scalar": (lambda x: x ** 3 + 2.0 ** x + x.abs().pow(1.5), [R(3, 4)]),
    "rsub_rdiv": (lambda x: (1.0 - x) + 2.0 / x.abs().add(0.5), [R(3, 4)]),
    "remainder": (lambda x, y: x.remainder(y) + (x % 1.3), [R(3, 4, pos=True) * 3, R(4, pos=True)]),
    "exp": (lambda x: ct.exp(x), [R(3, 4)]),
    "log": (lambda x: ct.log(x), [R(3, 4, pos=True)]),
    "log1p": (lambda x: ct.log1p(x), [R(3, 4, pos=True)]),
    "sqrt": (lambda x: ct.sqrt(x), [R(3, 4, pos=True)]),
    "rsqrt": (lambda x: ct.rsqrt(x), [R(3, 4, pos=True)]),
    "square": (lambda x: ct.square(x), [R(3, 4)]),
    "sin": (lambda x: ct.sin(x), [R(3, 4)]),
    "cos": (lambda x: ct.cos(x), [R(3, 4)]),
    "tanh": (lambda x: ct.tanh(x), [R(3, 4)]),
    "sigmoid": (lambda x: ct.sigmoid(x), [R(3, 4)]),
    "relu": (lambda x: ct.relu(x), [R(3, 4)]),
    "sign": (lambda x: ct.sign(x), [R(3, 4)]),
    "floor": (lambda x: ct.floor(x * 3), [R(3, 4)]),
    "ceil": (lambda x: ct.ceil(x * 3), [R(3, 4)]),
    "round": (lambda x: ct.round(x * 3), [R(3, 4)]),
    "clamp": (lambda x: ct.clamp(x, -0.5, 0.5), [R(3, 4)]),
    "clip": (lambda x: x.clip(min=-0.3), [R(3, 4)]),
    "maximum": (lambda x, y: ct.maximum(x, y), [R(3, 4), R(3, 4)]),
    "minimum": (lambda x, y: ct.minimum(x, y), [R(3, 4), R(3, 4)]),
    "where": (lambda x, y: ct.where(ct.tensor(MASK), x, y), [R(3, 4), R(4)]),
    "masked_fill": (lambda x: ct.masked_fill(x, ct.tensor(MASK), 2.0), [R(3, 4)]),
    "masked_select": (lambda x: ct.masked_select(x, ct.tensor(MASK)), [R(3, 4)]),
    "reciprocal": (lambda x: ct.reciprocal(x) + x.add(3).reciprocal(), [R(3, 4, pos=True)]),
    "log2": (lambda x: ct.log2(x), [R(3, 4, pos=True)]),
    "log10": (lambda x: x.log10(), [R(3, 4, pos=True)]),
    "exp2": (lambda x: ct.exp2(x), [R(3, 4)]),
    "expm1": (lambda x: x.expm1(), [R(3, 4)]),
    "tan": (lambda x: ct.tan(x), [np.tanh(R(3, 4))]),
    "asin": (lambda x: ct.asin(x), [0.9 * np.tanh(R(3, 4))]),
    "acos": (lambda x: x.acos(), [0.9 * np.tanh(R(3, 4))]),
    "atan": (lambda x: ct.atan(x), [R(3, 4)]),
    "sinh": (lambda x: ct.sinh(x), [R(3, 4)]),
    "cosh": (lambda x: x.cosh(), [R(3, 4)]),
    "asinh": (lambda x: ct.asinh(x), [R(3, 4)]),
    "acosh": (lambda x: x.acosh(), [R(3, 4, pos=True) + 1]),
    "atanh": (lambda x: ct.atanh(x), [0.9 * np.tanh(R(3, 4))]),
    "erf": (lambda x: ct.erf(x) + x.erf() * 2, [R(3, 4)]),
    "erfc": (lambda x: ct.erfc(x) + x.erfc() * 2, [R(3, 4)]),
    "atan2": (lambda y, x: ct.atan2(y, x) + y.arctan2(x.abs() + 1), [R(3, 4), R(4)]),
    "trunc": (lambda x: ct.trunc(x * 3) + x.fix(), [R(3, 4)]),
    "frac": (lambda x: ct.frac(x * 3), [R(3, 4) + 0.01]),
    "sgn": (lambda x: ct.sgn(x), [R(3, 4)]),
    "fmod": (lambda x, y: ct.fmod(x, y) + x.fmod(1.3), [R(3, 4) * 3, R(4, pos=True)]),
    "clamp_min": (lambda x: ct.clamp_min(x, 0.1) + x.clamp_min(-0.2), [R(3, 4)]),
    "clamp_max": (lambda x: ct.clamp_max(x, 0.1) + x.clamp_max(BCE_WEIGHTS[0]), [R(3, 4)]),
    "clamp_tensor_bounds": (lambda x, lo, hi: ct.clamp(x, min=lo, max=hi + 1.5) + x.clamp(max=hi), [R(3, 4), R(4), R(3, 1)]),
    "tensor_split": (lambda x: x.tensor_split(3, 1)[0].sum() + ct.tensor_split(x, [1, 2])[2].sum(), [R(3, 4)]),
    "outer": (lambda a, b: ct.outer(a, b) + a.outer(b), [R(3), R(4)]),
    "ger": (lambda a, b: ct.ger(a, b) + a.ger(b), [R(3), R(4)]),
    "dot": (lambda a, b: ct.dot(a, b) + a.dot(b), [R(4), R(4)]),
    "broadcast_to": (lambda x: ct.broadcast_to(x, (2, 3, 4)) + x.broadcast_to((3, 4)), [R(3, 1)]),
    "meshgrid": (lambda a, b: sum(g.sum() for g in ct.meshgrid(a, b, indexing="xy")), [R(3), R(4)]),
    "diff": (lambda x, p: ct.diff(x, 2, dim=1, prepend=p) + x.diff(dim=0).sum(), [R(3, 4), R(3, 2)]),
    "index_add": (lambda x, s: ct.index_add(x, 1, ct.tensor([0, 2, 0]), s, alpha=2.0), [R(3, 4), R(3, 3)]),
    "index_add_": (lambda x, s: x.clone().index_add_(0, ct.tensor([1, 1]), s), [R(3, 4), R(2, 4)]),
    "median": (lambda x: ct.median(x) + x.median(1).values.sum() + x.median(0, keepdim=True)[0].sum(), [R(3, 4)]),
    "kthvalue": (lambda x: ct.kthvalue(x, 2, 1).values + x.kthvalue(3, 0)[0].sum(), [R(3, 4)]),
    "cumprod": (lambda x: ct.cumprod(x, 1) + (x * ct.tensor([[1.0, 0, 1, 1]], dtype=ct.float64)).cumprod(1), [R(3, 4)]),
    "std_mean": (lambda x: sum(t.sum() for t in ct.std_mean(x, 1)), [R(3, 4)]),
    "var_mean": (lambda x: sum(t.sum() for t in ct.var_mean(x, 0, correction=0)), [R(3, 4)]),
    "lerp": (lambda a, b, w: ct.lerp(a, b, w) + a.lerp(b, 0.3), [R(3, 4), R(3, 4), R(4)]),
    "addcmul": (lambda a, b, c: ct.addcmul(a, b, c, value=2.0) + a.addcmul(b, c), [R(3, 4), R(3, 4), R(4)]),
    "addcdiv": (lambda a, b, c: ct.addcdiv(a, b, c, value=0.5) + a.addcdiv(b, c), [R(3, 4), R(3, 4), R(4, pos=True)]),
    "addmm": (lambda a, b, c: ct.addmm(a, b, c, beta=0.5, alpha=2.0) + a.addmm(b, c), [R(3, 2), R(3, 4), R(4, 2)]),
    "logaddexp": (lambda a, b: ct.logaddexp(a, b) + a.logaddexp(b * 2), [R(3, 4), R(3, 4)]),
    "cdist": (lambda a, b: ct.cdist(a, b) + ct.cdist(a, b, p=1.5), [R(3, 4), R(5, 4)]),
    "take_along_dim": (lambda x: ct.take_along_dim(x, ct.tensor([[0], [3], [1]]), 1) + x.take_along_dim(
        ct.tensor([5])).sum(), [R(3, 4)]),
    "masked_scatter": (lambda x, s: ct.masked_scatter(x, ct.tensor(MASK), s), [R(3, 4), R(8)]),
    "masked_scatter_": (lambda x, s: x.clone().masked_scatter_(ct.tensor(MASK), s), [R(3, 4), R(3, 4)]),
    "index_put": (lambda x, v: ct.index_put(x, (ct.tensor([0, 2]), ct.tensor([1, 1])), v, accumulate=True), [R(3, 4), R(2)]),
    "index_put_": (lambda x, v: x.clone().index_put_((ct.tensor([0, 2]),), v), [R(3, 4), R(4)]),
    "diagonal": (lambda x: ct.diagonal(x, 1) + x.diagonal(-1, 1, 0)[:1].sum(), [R(3, 4)]),
    "diag": (lambda x, v: ct.diag(x, 1).sum() + ct.diag(v, -1).sum(1).sum() + x.diag().sum(), [R(3, 4), R(3)]),
    "trace": (lambda x: ct.trace(x) + x.trace(), [R(3, 4)]),
    "movedim": (lambda x: ct.movedim(x, 0, -1) * 2 + x.movedim((0, 1), (2, 0)), [R(2, 3, 4)]),
    "moveaxis": (lambda x: ct.moveaxis(x, 1, 0) + x.moveaxis(-1, 0).transpose(1, 2).transpose(0, 1)[:, :, :1].sum(),
                 [R(2, 3, 2)]),
    "vstack": (lambda a, b: ct.vstack([a, b]), [R(4), R(2, 4)]),
    "hstack": (lambda a, b: ct.hstack([a, b]) + ct.hstack([a[0], b[0]]).sum(), [R(2, 4), R(2, 3)]),
    # ---- reductions
    "prod": (lambda x: ct.prod(x, 1) + x.prod() + x.prod(0, keepdim=True).sum(), [R(3, 4)]),
    # a zero among the factors (row 0), two zeros (row 2): the products of the others, exactly
    "prod_with_zero": (lambda x: (x * ct.tensor([[0.0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 1]], dtype=ct.float64))
                       .prod(1), [R(3, 4)]),
    "sum": (lambda x: ct.sum(x, 1) + x.sum() + x.sum((0, 1), keepdim=True).squeeze(0), [R(3, 4)]),
    "mean": (lambda x: ct.mean(x, 0), [R(3, 4)]),
    "var": (lambda x: ct.var(x, 1), [R(3, 4)]),
    "std": (lambda x: ct.std(x, 0, correction=0), [R(3, 4)]),
    "max": (lambda x: ct.max(x, 1)[0] + x.max(), [R(3, 4)]),
    "min": (lambda x: ct.min(x, 0).values + x.min(), [R(3, 4)]),
    "amax": (lambda x: ct.amax(x, 1), [R(3, 4)]),
    "amin": (lambda x: ct.amin(x, 0), [R(3, 4)]),
    "norm": (lambda x: ct.norm(x) + x.norm(1, dim=1).sum() + x.norm(float("inf")), [R(3, 4)]),
    "cumsum": (lambda x: ct.cumsum(x, 1), [R(3, 4)]),
    "softmax": (lambda x: ct.softmax(x, 1), [R(3, 4)]),
    "log_softmax": (lambda x: ct.log_softmax(x, 0), [R(3, 4)]),
    "sort": (lambda x: ct.sort(x, 1, descending=True)[0], [R(3, 4)]),
    "topk": (lambda x: ct.topk(x, 2, 1)[0], [R(3, 4)]),
    # ---- matrix products
    "matmul": (lambda x, y: ct.matmul(x, y), [R(2, 3, 4), R(4, 2)]),
    "mm": (lambda x, y: ct.mm(x, y), [R(3, 4), R(4, 2)]),
    "bmm": (lambda x, y: ct.bmm(x, y), [R(2, 3, 4), R(2, 4, 2)]),
    "matmul_vec": (lambda x, y: x @ y + (y @ x.t()).sum(), [R(3, 4), R(4)]),
    # ---- shape and indexing
    "reshape": (lambda x: ct.reshape(x.t(), (2, 6)), [R(3, 4)]),
    "reshape_as": (lambda x: x.t().reshape_as(ct.zeros(2, 6)), [R(3, 4)]),  # other: only its shape
    "view": (lambda x: x.view(2, 6), [R(3, 4)]),
    "view_as": (lambda x: x.view_as(ct.zeros(2, 6)), [R(3, 4)]),
    "flatten": (lambda x: ct.flatten(x.permute(1, 0)), [R(3, 4)]),
    "unflatten": (lambda x: ct.unflatten(x, 1, (2, 2)), [R(3, 4)]),
    "transpose": (lambda x: ct.transpose(x, 0, 1), [R(3, 4)]),
    "swapaxes": (lambda x: ct.swapaxes(x, 0, 1), [R(3, 4)]),
    "swapdims": (lambda x: x.swapdims(0, 1), [R(3, 4)]),
    "t": (lambda x: ct.t(x), [R(3, 4)]),
    "permute": (lambda x: ct.permute(x, (1, 0)), [R(3, 4)]),
    "contiguous": (lambda x: x.t().contiguous(), [R(3, 4)]),
    "squeeze": (lambda x: ct.squeeze(x.unsqueeze(0), 0), [R(3, 4)]),
    "unsqueeze": (lambda x: ct.unsqueeze(x, 1), [R(3, 4)]),
    "expand": (lambda x: x.expand(2, 3, 4), [R(3, 1)]),
    "expand_as": (lambda x: x.expand_as(ct.zeros(3, 4)), [R(1, 4)]),
    "repeat": (lambda x: x.repeat(2, 1, 2), [R(3, 4)]),
    "repeat_interleave": (lambda x: ct.repeat_interleave(x, 2, 1), [R(3, 4)]),
    "flip": (lambda x: ct.flip(x, (0, 1)), [R(3, 4)]),
    "tril": (lambda x: ct.tril(x), [R(3, 4)]),
    "triu": (lambda x: ct.triu(x, 1), [R(3, 4)]),
    "chunk": (lambda x: ct.chunk(x, 2, 1), [R(3, 4)]),
    "split": (lambda x: ct.split(x, [1, 3], 1), [R(3, 4)]),
    "unbind": (lambda x: ct.unbind(x, 1), [R(3, 4)]),
    "cat": (lambda x, y: ct.cat([x, y], 1), [R(3, 4), R(3, 2)]),
    "concat": (lambda x, y: ct.concat([x, y]), [R(3, 4), R(1, 4)]),
    "concatenate": (lambda x, y: ct.concatenate([x, y], 0), [R(3, 4), R(2, 4)]),
    "stack": (lambda x, y: ct.stack([x, y], 1), [R(3, 4), R(3, 4)]),
    "gather": (lambda x: ct.gather(x, 1, ct.tensor(IDX)), [R(3, 4)]),
    "index_select": (lambda x: ct.index_select(x, 0, ct.tensor(ROWS)), [R(3, 4)]),
    "scatter": (lambda x, s: x.scatter(1, ct.tensor(IDX), s), [R(3, 4), R(3, 3)]),
    "getitem": (lambda x: x[1:, ::2] + x[ct.tensor(ROWS)][:2, 1:3] + x[ct.tensor(MASK)].sum(), [R(3, 4)]),
    "setitem": (lambda x, v: _setitem(x, v), [R(3, 4), R(2)]),
    "clone": (lambda x: ct.clone(x), [R(3, 4)]),
    "to": (lambda x: x.to(ct.float64) * 1 + x.double() + x.type(ct.float64) + x.type_as(x), [R(3, 4)]),
    "float_cast": (lambda x: x.float().double() + x.to(ct.float32).to(ct.float64), [R(3, 4)],
                   dict(eps=1e-3, atol=1e-3, rtol=1e-3)),
    "half_cast": (lambda x: x.half().double(), [R(3, 4)], dict(eps=1e-1, atol=5e-2, rtol=5e-2)),
    # ---- in-place ops on a non-leaf (torch's semantics: gradients reach the inputs)
    "add_": (lambda x, y: x.clone().add_(y, alpha=2), [R(3, 4), R(4)]),
    "sub_": (lambda x, y: x.clone().sub_(y), [R(3, 4), R(3, 4)]),
    "mul_": (lambda x, y: x.clone().mul_(y), [R(3, 4), R(4)]),
    "div_": (lambda x, y: x.clone().div_(y), [R(3, 4), R(4, pos=True)]),
    "pow_": (lambda x, y: x.clone().pow_(y), [R(3, 4, pos=True), R(4)]),
    "iops": (lambda x, y: _iops(x, y), [R(3, 4), R(3, 4, pos=True)]),
    "clamp_": (lambda x: x.clone().clamp_(-0.5, 0.5), [R(3, 4)]),
    "clip_": (lambda x: x.clone().clip_(max=0.2), [R(3, 4)]),
    "relu_": (lambda x: x.clone().relu_(), [R(3, 4)]),
    "masked_fill_": (lambda x: x.clone().masked_fill_(ct.tensor(MASK), -1.0), [R(3, 4)]),
    "copy_": (lambda x, y: x.clone().copy_(y) + x, [R(3, 4), R(4)]),
    "fill_": (lambda x, v: x.clone().fill_(v) + x, [R(3, 4), R()]),
    "zero_": (lambda x: x.clone().zero_() + x, [R(3, 4)]),
    "tril_": (lambda x: x.clone().tril_(), [R(3, 4)]),
    "triu_": (lambda x: x.clone().triu_(-1), [R(3, 4)]),
    "squeeze_": (lambda x: x.clone().unsqueeze_(0).squeeze_(0), [R(3, 4)]),
    "unsqueeze_": (lambda x: x.clone().unsqueeze_(2), [R(3, 4)]),
    "scatter_": (lambda x, s: x.clone().scatter_(1, ct.tensor(IDX), s), [R(3, 4), R(3, 3)]),
    # ---- nn.functional
    # ---- the names scripts use around their models
    "narrow": (lambda x: x.narrow(1, 1, 2) + ct.narrow(x, 1, 0, 2), [R(3, 4)]),
    "index_fill": (lambda x: x.index_fill(1, ct.tensor([0, 2]), -1.0), [R(3, 4)]),
    "index_fill_": (lambda x: x.clone().index_fill_(0, ct.tensor([1]), 2.0), [R(3, 4)]),
    "scatter_add": (lambda x, s: x.scatter_add(1, ct.tensor(IDX), s), [R(3, 4), R(3, 2)]),
    "scatter_add_": (lambda x, s: x.clone().scatter_add_(1, ct.tensor(IDX), s), [R(3, 4), R(3, 2)]),
    "logsumexp": (lambda x: x.logsumexp(1) + ct.logsumexp(x, (0, 1)), [R(3, 4)]),
    "roll": (lambda x: x.roll(1, 1) + ct.roll(x, (1, -1), (0, 1)), [R(3, 4)]),
    "nan_to_num": (lambda x: ct.nan_to_num(x) * 2, [R(3, 4)]),
    "einsum": (lambda a, b: ct.einsum("ij,jk->ik", a, b) + ct.einsum("ij->j", a).sum(), [R(3, 4), R(4, 2)]),
    "F.silu": (lambda x: F.silu(x), [R(3, 4)]),
    "F.normalize": (lambda x: F.normalize(x, dim=1), [R(3, 4)]),
    "F.cosine_similarity": (lambda a, b: F.cosine_similarity(a, b, dim=1), [R(3, 4), R(3, 4)]),
    "F.kl_div": (lambda x, t: F.kl_div(x, t, reduction="batchmean"), [R(3, 4), R(3, 4, pos=True)]),
    "F.rms_norm": (lambda x, w: F.rms_norm(x, (4,), w, eps=1e-6), [R(3, 4), R(4)]),
    "F.leaky_relu": (lambda x: F.leaky_relu(x) + F.leaky_relu(x, 0.2), [R(3, 4)]),
    "F.elu": (lambda x: F.elu(x) + F.elu(x * 300, alpha=0.5), [R(3, 4)]),
    "F.softplus": (lambda x: F.softplus(x) + F.softplus(x, beta=2.0, threshold=1.0), [R(3, 4)]),
    "F.logsigmoid": (lambda x: F.logsigmoid(x) + F.logsigmoid(x * 100), [R(3, 4)]),
    "F.l1_loss": (lambda x, y: F.l1_loss(x, y) + F.l1_loss(x, y, reduction="sum"), [R(3, 4), R(3, 4)]),
    "F.smooth_l1_loss": (lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), [R(3, 4), R(3, 4)]),
    "F.huber_loss": (lambda x, y: F.huber_loss(x, y, reduction="none", delta=0.7), [R(3, 4), R(3, 4)]),
    # (weight and pos_weight are not differentiable in torch, which refuses them requiring grad)
    "F.binary_cross_entropy": (lambda p, t: F.binary_cross_entropy(p.sigmoid(), t.sigmoid(), BCE_WEIGHTS[0]),
                               [R(3, 4), R(3, 4)]),
    "F.binary_cross_entropy_with_logits": (
        lambda x, t: F.binary_cross_entropy_with_logits(x, t.sigmoid(), BCE_WEIGHTS[1], pos_weight=BCE_WEIGHTS[2],
                                                        reduction="sum"),
        [R(3, 4), R(3, 4)]),
    "F.hardtanh": (lambda x: F.hardtanh(x * 2, -0.5, 1.5), [R(3, 4)]),
    "F.relu6": (lambda x: F.relu6(x * 4), [R(3, 4)]),
    "F.hardsigmoid": (lambda x: F.hardsigmoid(x * 4), [R(3, 4)]),
    "F.hardswish": (lambda x: F.hardswish(x * 4), [R(3, 4)]),
    "F.threshold": (lambda x: F.threshold(x, 0.1, -2.0), [R(3, 4)]),
    "F.selu": (lambda x: F.selu(x), [R(3, 4)]),
    "F.celu": (lambda x: F.celu(x, alpha=0.5), [R(3, 4)]),
    "F.glu": (lambda x: F.glu(x, 1), [R(3, 4)]),
    "F.mish": (lambda x: F.mish(x), [R(3, 4)]),
    "F.softsign": (lambda x: F.softsign(x), [R(3, 4)]),
    "F.tanhshrink": (lambda x: F.tanhshrink(x), [R(3, 4)]),
    "F.softmin": (lambda x: F.softmin(x, 1), [R(3, 4)]),
    "F.prelu": (lambda x, w: F.prelu(x, w), [R(3, 4, 2), R(4)]),
    "F.pairwise_distance": (lambda a, b: F.pairwise_distance(a, b, p=3.0, keepdim=True), [R(3, 4), R(3, 4)]),
    "F.batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [R(5, 3, 2), R(3), R(3)]),
    "F.relu": (lambda x: F.relu(x), [R(3, 4)]),
    "F.relu_": (lambda x: F.relu_(x.clone()), [R(3, 4)]),
    "F.gelu": (lambda x: F.gelu(x) + F.gelu(x, approximate="tanh"), [R(3, 4)]),
    "F.sigmoid": (lambda x: F.sigmoid(x), [R(3, 4)]),
    "F.tanh": (lambda x: F.tanh(x), [R(3, 4)]),
    "F.softmax": (lambda x: F.softmax(x, -1), [R(3, 4)]),
    "F.log_softmax": (lambda x: F.log_softmax(x, 0), [R(3, 4)]),
    "F.linear": (lambda x, w, b: F.linear(x, w, b), [R(2, 3, 4), R(5, 4), R(5)]),
    "F.layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [R(2, 3, 4), R(4), R(4)]),
    # (padding_idx's row gets no gradient, as torch documents: not looked up here)
    "F.embedding": (lambda w: F.embedding(ct.tensor([[0, 2], [2, 1]]), w, padding_idx=3), [R(4, 3)]),
    "F.dropout": (lambda x: _seeded(lambda: F.dropout(x, 0.4)), [R(3, 4)]),
    "F.pad": (lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), [R(3, 4)]),
    "F.pad_modes": (lambda x: F.pad(x, (2, 3), mode="reflect").sum(-1) + F.pad(x, (1, 4, -1, 2), mode="replicate")
                    .sum((-2, -1)).unsqueeze(-1) + F.pad(x, (2, 1), mode="circular").sum(-1), [R(2, 3, 4)]),
    "F.mse_loss": (lambda x, y: F.mse_loss(x, y) + F.mse_loss(x, y, reduction="sum"), [R(3, 4), R(3, 4)]),
    "F.cross_entropy": (lambda x: F.cross_entropy(x, ct.tensor([1, 0, 3]), ignore_index=0, label_smoothing=0.1),
                        [R(3, 4)]),
    "F.cross_entropy_probs": (lambda x, p: F.cross_entropy(x, p.softmax(-1)), [R(3, 4), R(3, 4)]),
    "F.nll_loss": (lambda x: F.nll_loss(x, ct.tensor([1, 0, 3]), reduction="sum"), [R(3, 4)]),
    "F.scaled_dot_product_attention": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), [R(2, 3, 4), R(2, 5, 4),
                                                                                  R(2, 5, 3), R(3, 5)]),
    "F.sdpa_causal_dropout": (
        lambda q, k, v: _seeded(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.3)),
        [R(2, 4, 4), R(2, 4, 4), R(2, 4, 3)]),
    "F.multi_head_attention_forward": (
        lambda q, k, v, iw, ib, ow, ob, am: F.multi_head_attention_forward(
            q, k, v, 4, 2, iw, ib, None, None, False, 0.0, ow, ob, attn_mask=am, average_attn_weights=False),
        [R(3, 2, 4), R(5, 2, 4), R(5, 2, 4), R(12, 4), R(12), R(4, 4), R(4), R(3, 5)]),
}


def _setitem(x, v):
    y = x * 1
    y[1, 1:3] = v
    return y


def _iops(x, y):
    h = x * 1
    h += y
    h -= x
    h *= y
    h /= y + 1
    return h


def _inplace_cases() -> dict:
    """name_ -> a case running the in-place form on a non-leaf (tensor_ops_inplace.py): the gradient
    must reach the input through it, as through the out-of-place op."""
    from ctransformer.tensor_ops_inplace import _SHAPE_OPS, _VALUE_OPS
    positive = {"log", "log10", "log1p", "log2", "sqrt", "rsqrt", "reciprocal"}
    unit = {"asin", "acos", "atanh", "arcsin", "arccos", "arctanh", "tan"}
    above_one = {"acosh", "arccosh"}
    with_args = {  # name: (extra inputs, call)
        "clamp_min": ([], lambda x: x.clamp_min_(0.1)), "clamp_max": ([], lambda x: x.clamp_max_(0.1)),
        "remainder": ([], lambda x: x.remainder_(1.3)), "fmod": ([], lambda x: x.fmod_(1.3)),
        "atan2": ([R(4)], lambda x, y: x.atan2_(y)), "arctan2": ([R(4)], lambda x, y: x.arctan2_(y)),
        "lerp": ([R(3, 4)], lambda x, e: x.lerp_(e, 0.3)),
        "addcmul": ([R(3, 4), R(4)], lambda x, a, b: x.addcmul_(a, b, value=2.0)),
        "addcdiv": ([R(3, 4), R(4, pos=True)], lambda x, a, b: x.addcdiv_(a, b)),
        "addmm": ([R(3, 2), R(2, 4)], lambda x, a, b: x.addmm_(a, b)),
        "cumsum": ([], lambda x: x.cumsum_(1)), "cumprod": ([], lambda x: x.cumprod_(1)),
        "multiply": ([R(4)], lambda x, y: x.multiply_(y)), "subtract": ([R(4)], lambda x, y: x.subtract_(y)),
        "divide": ([R(4, pos=True)], lambda x, y: x.divide_(y)),
        "true_divide": ([R(4, pos=True)], lambda x, y: x.true_divide_(y)),
        "transpose": ([], lambda x: x.transpose_(0, 1)), "swapaxes": ([], lambda x: x.swapaxes_(0, 1)),
        "swapdims": ([], lambda x: x.swapdims_(0, 1)),
    }
    cases = {}
    for name in (*_VALUE_OPS, *_SHAPE_OPS):
        base = R(3, 4, pos=True) if name in positive else (0.9 * np.tanh(R(3, 4)) if name in unit else (
            R(3, 4, pos=True) + 1 if name in above_one else R(3, 4)))
        extra, call = with_args.get(name, ([], lambda x, n=name: getattr(x, n + "_")()))
        cases[name + "_"] = (lambda x, *more, call=call: call(x * 1.0, *more), [base, *extra])
    return cases


def _seeded(f):
    ct.manual_seed(11)
    return f()


def _module_cases():
    """name -> (module (float64), input arrays, call(module, *inputs))."""
    d = ct.float64
    ct.manual_seed(0)
    tr_kw = dict(dim_feedforward=6, dropout=0.0, dtype=d)
    return {
        "Linear": (nn.Linear(4, 3, dtype=d), [R(2, 4)], None),
        "LayerNorm": (nn.LayerNorm(4, dtype=d), [R(2, 4)], None),
        "Embedding": (nn.Embedding(5, 3, dtype=d), [], lambda m: m(ct.tensor([[0, 4], [2, 2]]))),
        "Dropout": (nn.Dropout(0.3), [R(3, 4)], lambda m, x: _seeded(lambda: m(x))),
        "SiLU": (nn.SiLU(), [R(3, 4)], None),
        "Flatten": (nn.Flatten(), [R(2, 3, 4)], None),
        "Unflatten": (nn.Unflatten(1, (2, 2)), [R(3, 4)], None),
        "RMSNorm": (nn.RMSNorm(4, dtype=d), [R(2, 4)], None),
        "KLDivLoss": (nn.KLDivLoss(reduction="batchmean"), [R(3, 4), R(3, 4, pos=True)], None),
        "Identity": (nn.Identity(), [R(3, 4)], None),
        "ReLU": (nn.ReLU(), [R(3, 4)], None),
        "Hardtanh": (nn.Hardtanh(-0.5, 0.5), [R(3, 4)], None),
        "ReLU6": (nn.ReLU6(), [R(3, 4) * 4], None),
        "Hardsigmoid": (nn.Hardsigmoid(), [R(3, 4) * 4], None),
        "Hardswish": (nn.Hardswish(), [R(3, 4) * 4], None),
        "Threshold": (nn.Threshold(0.2, 1.0), [R(3, 4)], None),
        "SELU": (nn.SELU(), [R(3, 4)], None),
        "CELU": (nn.CELU(2.0), [R(3, 4)], None),
        "GLU": (nn.GLU(), [R(3, 4)], None),
        "Mish": (nn.Mish(), [R(3, 4)], None),
        "Softsign": (nn.Softsign(), [R(3, 4)], None),
        "Tanhshrink": (nn.Tanhshrink(), [R(3, 4)], None),
        "Softmin": (nn.Softmin(dim=0), [R(3, 4)], None),
        "PReLU": (nn.PReLU(3, dtype=d), [R(2, 3, 4)], None),
        "CosineSimilarity": (nn.CosineSimilarity(dim=0), [R(3, 4), R(3, 4)], None),
        "PairwiseDistance": (nn.PairwiseDistance(), [R(3, 4), R(3, 4)], None),
        "BatchNorm1d": (nn.BatchNorm1d(3, dtype=d), [R(4, 3)], None),
        "LeakyReLU": (nn.LeakyReLU(0.1), [R(3, 4)], None),
        "ELU": (nn.ELU(alpha=0.7), [R(3, 4)], None),
        "Softplus": (nn.Softplus(beta=0.5), [R(3, 4)], None),
        "LogSigmoid": (nn.LogSigmoid(), [R(3, 4)], None),
        "L1Loss": (nn.L1Loss(), [R(3, 4), R(3, 4)], None),
        "SmoothL1Loss": (nn.SmoothL1Loss(beta=2.0), [R(3, 4), R(3, 4)], None),
        "HuberLoss": (nn.HuberLoss(delta=0.5), [R(3, 4), R(3, 4)], None),
        "BCELoss": (nn.BCELoss(), [R(3, 4), R(3, 4)], lambda m, p, t: m(p.sigmoid(), t.sigmoid())),
        "BCEWithLogitsLoss": (nn.BCEWithLogitsLoss(), [R(3, 4), R(3, 4)], lambda m, x, t: m(x, t.sigmoid())),
        "GELU": (nn.GELU(), [R(3, 4)], None),
        "Tanh": (nn.Tanh(), [R(3, 4)], None),
        "Sigmoid": (nn.Sigmoid(), [R(3, 4)], None),
        "Softmax": (nn.Softmax(dim=1), [R(3, 4)], None),
        "LogSoftmax": (nn.LogSoftmax(dim=1), [R(3, 4)], None),
        "Sequential": (nn.Sequential(nn.Linear(4, 3, dtype=d), nn.Tanh(), nn.Linear(3, 2, dtype=d)), [R(2, 4)],
                       None),
        "MSELoss": (nn.MSELoss(), [R(3, 4), R(3, 4)], None),
        "CrossEntropyLoss": (nn.CrossEntropyLoss(), [R(3, 4)], lambda m, x: m(x, ct.tensor([0, 3, 1]))),
        "NLLLoss": (nn.NLLLoss(), [R(3, 4)], lambda m, x: m(x, ct.tensor([0, 3, 1]))),
        "PositionalEncoding": (nn.PositionalEncoding(4, dropout=0.0, dtype=d), [R(3, 2, 4)], None),
        "RNN": (nn.RNN(3, 4, num_layers=2, dtype=d), [R(3, 2, 3), R(2, 2, 4)], lambda m, x, h: m(x, h)),
        "GRU": (nn.GRU(3, 4, batch_first=True, bidirectional=True, dtype=d), [R(2, 3, 3), R(2, 2, 4)],
                lambda m, x, h: m(x, h)),
        "LSTM": (nn.LSTM(3, 4, num_layers=2, dtype=d), [R(3, 2, 3), R(2, 2, 4), R(2, 2, 4)],
                 lambda m, x, h, c: m(x, (h, c))),
        "LSTM_packed": (nn.LSTM(3, 4, dtype=d), [R(3, 2, 3)],
                        lambda m, x: m(nn.utils.rnn.pack_padded_sequence(x, ct.tensor([3, 2])))[0].data),
        "RNNCell": (nn.RNNCell(3, 4, dtype=d), [R(2, 3), R(2, 4)], lambda m, x, h: m(x, h)),
        "GRUCell": (nn.GRUCell(3, 4, dtype=d), [R(2, 3), R(2, 4)], lambda m, x, h: m(x, h)),
        "LSTMCell": (nn.LSTMCell(3, 4, dtype=d), [R(2, 3), R(2, 4), R(2, 4)], lambda m, x, h, c: m(x, (h, c))),
        "MultiheadAttention": (nn.MultiheadAttention(4, 2, kdim=3, vdim=2, dtype=d),
                               [R(3, 2, 4), R(5, 2, 3), R(5, 2, 2), R(3, 5)],
                               lambda m, q, k, v, am: m(q, k, v, attn_mask=am)),
        "TransformerEncoderLayer": (nn.TransformerEncoderLayer(4, 2, **tr_kw), [R(3, 2, 4), R(3, 3)],
                                    lambda m, x, am: m(x, src_mask=am)),
        "TransformerDecoderLayer": (nn.TransformerDecoderLayer(4, 2, norm_first=True, **tr_kw),
                                    [R(2, 2, 4), R(3, 2, 4), R(2, 2), R(2, 3)],
                                    lambda m, t, mem, tm, mm: m(t, mem, tgt_mask=tm, memory_mask=mm)),
        "TransformerEncoder": (nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, **tr_kw), 2), [R(3, 2, 4)],
                               None),
        "TransformerDecoder": (nn.TransformerDecoder(nn.TransformerDecoderLayer(4, 2, **tr_kw), 1),
                               [R(2, 2, 4), R(3, 2, 4)], None),
        "Transformer": (nn.Transformer(4, 2, num_encoder_layers=1, num_decoder_layers=1, **tr_kw),
                        [R(3, 2, 4), R(2, 2, 4), R(2, 2)], lambda m, s, t, tm: m(s, t, tgt_mask=tm)),
    }


MODULES = _module_cases()
OPS.update({name: case for name, case in _inplace_cases().items() if name not in OPS})

# Public names that are not differentiable ops, with the reason.
NOT_DIFFERENTIABLE = {
    "integer / bool results": "unique count_nonzero bincount histc isin bucketize searchsorted promote_types "
                              "result_type can_cast all any argmax argmin argsort eq ne lt le gt ge greater greater_equal less less_equal "
                              "not_equal equal allclose isclose isfinite isinf isnan logical_and logical_or logical_not "
                              "bitwise_and bitwise_or bitwise_xor bitwise_not nonzero numel is_floating_point "
                              "is_contiguous is_tensor dim ndimension nelement element_size size item tolist numpy "
                              "one_hot multinomial bool byte int long",
    "factories and random draws (no Tensor input)": "arange empty empty_like eye full full_like linspace ones ones_like "
                                                     "zeros zeros_like rand rand_like randint randint_like randn "
                                                     "logspace bernoulli "
                                                     "randn_like randperm normal tensor as_tensor from_numpy "
                                                     "new_empty new_full new_ones new_tensor new_zeros BoolTensor "
                                                     "ByteTensor DoubleTensor FloatTensor IntTensor LongTensor",
    "in-place fills of random values (no gradient in torch either)": "uniform_ normal_ bernoulli_",
    "graph / grad-mode / state utilities": "backward detach detach_ requires_grad_ retain_grad register_hook "
                                           "enable_grad no_grad is_grad_enabled "
                                           "is_inference_mode_enabled manual_seed seed initial_seed get_rng_state "
                                           "set_rng_state set_default_dtype get_default_dtype set_num_threads "
                                           "get_num_threads set_flush_denormal save load cpu cuda pin_memory "
                                           "is_pinned",
    "containers and bases (their members are covered)": "Module ModuleDict ModuleList RNNBase RNNCellBase "
                                                        "ParameterList ParameterDict",
    "typing re-exports of nn.functional": "Optional Sequence apply_op",
    "settings, layout and index queries (no float result)": "compile set_default_device get_default_device "
                                                          "set_printoptions stride data_ptr triu_indices tril_indices "
                                                          "use_deterministic_algorithms "
                                                          "are_deterministic_algorithms_enabled "
                                                          "is_deterministic_algorithms_warn_only_enabled",
}

# names whose case is under another key
ALIASES = {"float": "float_cast", "double": "to", "half": "half_cast", "type": "to", "type_as": "to",
           "__setitem__": "setitem", "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
           "arccosh": "acosh", "arctanh": "atanh", "arctan2": "atan2", "fix": "trunc"}


def _float_outputs(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    flat = []
    for o in outs:
        if isinstance(o, (tuple, list)):
            flat.extend(_float_outputs(o))
        elif isinstance(o, ct.Tensor) and o.dtype.kind == "f":
            flat.append(o)
    return flat


def _check(fn, tensors, **kw):
    """Every input gets a gradient, equal to central differences."""
    out = _float_outputs(fn(*tensors))
    seeds = [ct.tensor(_rng.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in out if o.requires_grad]
    assert seeds, "no output requires grad"
    ct.autograd.backward([o for o in out if o.requires_grad], seeds)
    missing = [i for i, t in enumerate(tensors) if t.grad is None]
    assert not missing, f"inputs {missing} got no gradient"
    for t in tensors:
        t.grad = None
    assert gradcheck(lambda *xs: tuple(_float_outputs(fn(*xs))), tensors, **kw)


@pytest.mark.parametrize("name", list(OPS))
def test_op_gradients(name):
    fn, arrays, *kw = OPS[name]
    tensors = [ct.tensor(np.array(a, dtype=np.float64), requires_grad=True) for a in arrays]
    _check(fn, tensors, **(kw[0] if kw else {}))


@pytest.mark.parametrize("name", list(MODULES))
def test_module_gradients(name):
    module, arrays, call = MODULES[name]
    inputs = [ct.tensor(np.array(a, dtype=np.float64), requires_grad=True) for a in arrays]
    params = list(module.parameters())
    n = len(inputs)

    def fn(*xs):
        args = xs[:n]
        return call(module, *args) if call is not None else module(*args)

    _check(fn, inputs + params)


def _public_names():
    fns = {n for n in dir(ct) if not n.startswith("_") and callable(getattr(ct, n))
           and not inspect.isclass(getattr(ct, n)) and not inspect.ismodule(getattr(ct, n))}
    fns |= {n for n in ("BoolTensor", "ByteTensor", "DoubleTensor", "FloatTensor", "IntTensor", "LongTensor")
            if hasattr(ct, n)}
    methods = {n for n in dir(ct.Tensor) if not n.startswith("_") and callable(getattr(ct.Tensor, n))}
    functional = {"F." + n for n in dir(F) if not n.startswith("_") and callable(getattr(F, n))
                  and not inspect.isclass(getattr(F, n))}
    modules = {n for n in dir(nn) if inspect.isclass(getattr(nn, n)) and issubclass(getattr(nn, n), nn.Module)}
    return fns | methods | functional | modules


def test_every_public_op_is_covered():
    skipped = {n for names in NOT_DIFFERENTIABLE.values() for n in names.split()}
    covered = set(OPS) | set(MODULES) | set(ALIASES)
    uncovered = sorted(n for n in _public_names()
                       if n not in covered and n.removeprefix("F.") not in skipped and n not in skipped)
    assert not uncovered, f"public ops without a gradient case: {uncovered}"
    stale = sorted(n for n in skipped if n not in {x.removeprefix("F.") for x in _public_names()})
    assert not stale, f"NOT_DIFFERENTIABLE lists names that are not public: {stale}"
