"""Torch parity of nn.functional and the loss modules (outputs and gradients
of every differentiable input), plus their error messages."""
import warnings

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
import ctransformer.nn.functional as F
from nn_parity import F32, F64

torch = pytest.importorskip("torch")
TF = torch.nn.functional

DTYPES = [np.float32, np.float64]


def tol(dtype):
    return F64 if dtype == np.float64 else F32


def pair(a, dtype=None, grad=True):
    """The same values as a torch and a ctransformer tensor."""
    a = np.asarray(a)
    if dtype is not None and a.dtype.kind == "f":
        a = a.astype(dtype)
    g = grad and a.dtype.kind == "f"
    return torch.tensor(a.copy(), requires_grad=g), ct.tensor(a.copy(), requires_grad=g)


def compare(t_out, c_out, t_ins, c_ins, dtype, seed=0):
    """Outputs equal, then the gradients of every input after backpropagating
    the same random upstream gradient."""
    np.testing.assert_allclose(c_out.detach().numpy(), t_out.detach().numpy(), **tol(dtype), err_msg="output")
    assert tuple(c_out.shape) == tuple(t_out.shape)
    g = np.random.default_rng(seed).standard_normal(tuple(t_out.shape)).astype(dtype)
    t_out.backward(torch.tensor(g))
    c_out.backward(ct.tensor(g))
    for i, (t, c) in enumerate(zip(t_ins, c_ins)):
        if t.requires_grad:
            assert c.grad is not None, f"no gradient for input {i}"
            np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), **tol(dtype), err_msg=f"grad {i}")


rng = np.random.default_rng(42)


# ------------------------------------------------------------------ cross entropy
CE_CASES = [
    dict(),
    dict(reduction="sum"),
    dict(reduction="none"),
    dict(ignore_index=1),
    dict(ignore_index=1, reduction="none"),
    dict(label_smoothing=0.1),
    dict(label_smoothing=0.2, reduction="sum"),
    dict(weight=True),
    dict(weight=True, ignore_index=2, label_smoothing=0.1),
    dict(weight=True, reduction="none"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", CE_CASES, ids=str)
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5), (2, 4, 3, 2), (4,)])
def test_cross_entropy_parity(dtype, kw, shape):
    kw = dict(kw)
    x = rng.standard_normal(shape) * 2
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    target = rng.integers(0, 4, tshape)
    if "ignore_index" in kw and target.size > 1:
        target.reshape(-1)[0] = kw["ignore_index"]
    tw = cw = None
    if kw.pop("weight", False):
        w = rng.uniform(0.5, 2.0, 4).astype(dtype)
        tw, cw = torch.tensor(w), ct.tensor(w)
    tx, cx = pair(x, dtype)
    tt, ctt = pair(target)
    t_out = torch.nn.CrossEntropyLoss(weight=tw, **kw)(tx, tt)
    c_out = nn.CrossEntropyLoss(weight=cw, **kw)(cx, ctt)
    compare(t_out, c_out, [tx], [cx], dtype)
    assert c_out.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(), dict(reduction="sum"), dict(reduction="none"), dict(label_smoothing=0.1),
                                dict(weight=True)], ids=str)
@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 4)])
def test_cross_entropy_probability_targets(dtype, kw, shape):
    kw = dict(kw)
    x = rng.standard_normal(shape)
    probs = rng.uniform(0, 1, shape)
    probs /= probs.sum(axis=1, keepdims=True)
    tw = cw = None
    if kw.pop("weight", False):
        w = rng.uniform(0.5, 2.0, 3).astype(dtype)
        tw, cw = torch.tensor(w), ct.tensor(w)
    tx, cx = pair(x, dtype)
    tp, cp = pair(probs, dtype)
    compare(TF.cross_entropy(tx, tp, weight=tw, **kw), F.cross_entropy(cx, cp, weight=cw, **kw), [tx, tp], [cx, cp],
            dtype)


def test_cross_entropy_all_ignored_is_nan_like_torch():
    x = ct.randn(3, 4, requires_grad=True)
    t = ct.tensor([-100, -100, -100])
    loss = F.cross_entropy(x, t)
    assert np.isnan(loss.item())
    assert np.isnan(TF.cross_entropy(torch.randn(3, 4), torch.tensor([-100] * 3)).item())


def test_cross_entropy_errors():
    x = ct.randn(3, 4)
    with pytest.raises(IndexError):
        F.cross_entropy(x, ct.tensor([0, 4, 1]))
    with pytest.raises(ValueError, match=r"target must have shape \(3,\)"):
        F.cross_entropy(x, ct.tensor([0, 1]))
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.cross_entropy(x, ct.tensor([0, 1, 2]), reduction="avg")
    with pytest.raises(TypeError, match="cross_entropy: input must be float32 or float64"):
        F.cross_entropy(ct.tensor([[1, 2]]), ct.tensor([0]))
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, ct.tensor([0, 1, 2]), label_smoothing=1.5)


# ------------------------------------------------------------------ nll / mse
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(), dict(reduction="sum"), dict(reduction="none"), dict(ignore_index=0),
                                dict(weight=True), dict(weight=True, ignore_index=2, reduction="sum")], ids=str)
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5), (4,)])
def test_nll_loss_parity(dtype, kw, shape):
    kw = dict(kw)
    x = rng.standard_normal(shape)
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    target = rng.integers(0, 4, tshape)
    tw = cw = None
    if kw.pop("weight", False):
        w = rng.uniform(0.5, 2.0, 4).astype(dtype)
        tw, cw = torch.tensor(w), ct.tensor(w)
    tx, cx = pair(x, dtype)
    tt, ctt = pair(target)
    compare(torch.nn.NLLLoss(weight=tw, **kw)(tx, tt), nn.NLLLoss(weight=cw, **kw)(cx, ctt), [tx], [cx], dtype)


def test_nll_after_log_softmax_equals_cross_entropy():
    x = ct.randn(5, 7)
    t = ct.tensor([0, 6, 3, 3, 1])
    np.testing.assert_allclose(F.nll_loss(F.log_softmax(x, dim=1), t).item(), F.cross_entropy(x, t).item(),
                               rtol=1e-6)
    with pytest.raises(IndexError, match="out of bounds"):
        F.nll_loss(x, ct.tensor([0, 7, 0, 0, 0]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_parity(dtype, reduction):
    tx, cx = pair(rng.standard_normal((4, 3)), dtype)
    ty, cy = pair(rng.standard_normal((4, 3)), dtype)
    compare(torch.nn.MSELoss(reduction=reduction)(tx, ty), nn.MSELoss(reduction=reduction)(cx, cy),
            [tx, ty], [cx, cy], dtype)


def test_mse_loss_broadcast_warns_like_torch():
    tx, cx = pair(rng.standard_normal((4, 3)))
    ty, cy = pair(rng.standard_normal((3,)))
    with pytest.warns(UserWarning, match="different to the input size"):
        c = F.mse_loss(cx, cy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = TF.mse_loss(tx, ty)
    compare(t, c, [tx, ty], [cx, cy], np.float32)


def test_loss_module_reprs_and_weight_buffer():
    w = ct.tensor([1.0, 2.0])
    m = nn.CrossEntropyLoss(weight=w)
    assert repr(m) == "CrossEntropyLoss()" and repr(nn.MSELoss()) == "MSELoss()"
    assert list(m.state_dict()) == list(torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0])).state_dict())


# ------------------------------------------------------------------ functional ops
@pytest.mark.parametrize("dtype", DTYPES)
def test_functional_activations(dtype):
    x = rng.standard_normal((3, 5)) * 2
    for tf, cf in [(TF.relu, F.relu), (torch.tanh, F.tanh), (torch.sigmoid, F.sigmoid),
                   (lambda v: TF.gelu(v, approximate="tanh"), lambda v: F.gelu(v, approximate="tanh")),
                   (TF.gelu, F.gelu),
                   (lambda v: TF.softmax(v, dim=0), lambda v: F.softmax(v, dim=0)),
                   (lambda v: TF.log_softmax(v, dim=1), lambda v: F.log_softmax(v, dim=1))]:
        tx, cx = pair(x, dtype)
        compare(tf(tx), cf(cx), [tx], [cx], dtype)


def test_softmax_without_dim_warns_and_picks_torch_dim():
    for shape in [(4,), (2, 3), (2, 3, 4)]:
        tx, cx = pair(rng.standard_normal(shape))
        with pytest.warns(UserWarning, match="Implicit dimension"):
            c = F.softmax(cx)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = TF.softmax(tx)
        np.testing.assert_allclose(c.detach().numpy(), t.detach().numpy(), **F32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_functional_linear_layer_norm_embedding(dtype):
    tx, cx = pair(rng.standard_normal((2, 3, 4)), dtype)
    tw, cw = pair(rng.standard_normal((5, 4)), dtype)
    tb, cb = pair(rng.standard_normal((5,)), dtype)
    compare(TF.linear(tx, tw, tb), F.linear(cx, cw, cb), [tx, tw, tb], [cx, cw, cb], dtype)

    tx, cx = pair(rng.standard_normal((2, 3, 4)), dtype)
    tw, cw = pair(rng.standard_normal((3, 4)), dtype)
    tb, cb = pair(rng.standard_normal((3, 4)), dtype)
    compare(TF.layer_norm(tx, (3, 4), tw, tb, eps=1e-3), F.layer_norm(cx, (3, 4), cw, cb, eps=1e-3),
            [tx, tw, tb], [cx, cw, cb], dtype)

    ids = rng.integers(0, 6, (3, 4))
    tw, cw = pair(rng.standard_normal((6, 2)), dtype)
    compare(TF.embedding(torch.tensor(ids), tw, padding_idx=2), F.embedding(ct.tensor(ids), cw, padding_idx=2),
            [tw], [cw], dtype)


def test_functional_dropout_not_training_is_identity():
    x = ct.randn(3, 3)
    assert F.dropout(x, 0.5, training=False) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, -0.1)


@pytest.mark.parametrize("pad", [(1, 2), (0, 0, 2, 1), (1, 1, 1, 1, 1, 1), (-1, 2), (2, -1, -1, 0)])
def test_pad_parity(pad):
    tx, cx = pair(rng.standard_normal((2, 3, 4)))
    compare(TF.pad(tx, pad, value=-1.5), F.pad(cx, pad, value=-1.5), [tx], [cx], np.float32)


def test_pad_errors():
    with pytest.raises(ValueError, match="padding length must be even"):
        F.pad(ct.randn(2, 2), (1, 2, 3))
    with pytest.raises(NotImplementedError, match="constant"):
        F.pad(ct.randn(2, 2), (1, 1), mode="reflect")


def test_one_hot_parity():
    ids = rng.integers(0, 5, (3, 4))
    np.testing.assert_array_equal(F.one_hot(ct.tensor(ids)).numpy(), TF.one_hot(torch.tensor(ids)).numpy())
    out = F.one_hot(ct.tensor(ids), num_classes=7)
    assert out.dtype == np.int64 and out.shape == (3, 4, 7)
    np.testing.assert_array_equal(out.numpy(), TF.one_hot(torch.tensor(ids), 7).numpy())
    with pytest.raises(RuntimeError, match="class values must be in"):
        F.one_hot(ct.tensor([0, 3]), num_classes=3)


# ------------------------------------------------------------------ float64 central differences
def test_gradcheck_python_level_ops():
    """Ops whose backward is written in NumPy here (no dedicated kernel)
    agree with central differences."""
    g = np.random.default_rng(7)
    x = ct.tensor(g.standard_normal((4, 3, 2)), dtype=ct.float64, requires_grad=True)
    y = ct.tensor(g.standard_normal((4, 3, 2)), dtype=ct.float64, requires_grad=True)
    w = ct.tensor(g.uniform(0.5, 2, 3), dtype=ct.float64)
    t = ct.tensor(g.integers(0, 3, (4, 2)))
    t._data[0, 0] = -100
    probs = ct.tensor(g.dirichlet(np.ones(3), (4, 2)).transpose(0, 2, 1).copy(), dtype=ct.float64,
                      requires_grad=True)
    checks = [
        (lambda a: F.nll_loss(a, t, weight=w), (x,)),
        (lambda a: F.nll_loss(a, t, reduction="none"), (x,)),
        (lambda a, b: F.mse_loss(a, b), (x, y)),
        (lambda a, b: F.mse_loss(a, b, reduction="none"), (x, y)),
        (lambda a: F.pad(a, (1, -1, 2, 0)), (x,)),
        (lambda a, p: F.cross_entropy(a, p, weight=w, label_smoothing=0.1), (x, probs)),
        (lambda a: F.cross_entropy(a, t, weight=w, label_smoothing=0.2, reduction="none"), (x,)),
        (lambda a, b: nn.utils.rnn.pad_sequence([a[0], b[1, :1]], padding_value=3.0), (x, y)),
    ]
    for fn, inputs in checks:
        assert ct.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-6)
