"""fused kernels (bias + activation, residual add + LayerNorm): NumPy
reference, float64 gradients, torch parity, bad input."""
import math

import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import F32, check_grads

F64 = dict(rtol=1e-12, atol=1e-12)
ACTS = [("relu", "none"), ("gelu", "none"), ("gelu", "tanh")]


def ref_act(z, act, approximate):
    if act == "relu":
        return np.maximum(z, 0)
    if approximate == "tanh":
        return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    erf = np.vectorize(math.erf)
    return 0.5 * z * (1 + erf(z / math.sqrt(2)))


def ref_add_layernorm(x, r, w, b, eps=1e-5):
    h = x + r
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    y = (h - mean) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b), mean[..., 0], 1 / np.sqrt(var[..., 0] + eps)


# ---- bias + activation --------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act,approximate", ACTS)
def test_bias_act_forward_matches_numpy(rng, dtype, act, approximate):
    x = rng.standard_normal((2, 3, 7)).astype(dtype)
    b = rng.standard_normal(7).astype(dtype)
    tol = F32 if dtype == np.float32 else F64
    out = K.bias_act_forward(x, b, act, approximate)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref_act(x.astype(np.float64) + b, act, approximate), **tol)
    np.testing.assert_allclose(K.bias_act_forward(x, None, act, approximate),
                               ref_act(x.astype(np.float64), act, approximate), **tol)


@pytest.mark.parametrize("act,approximate", ACTS)
def test_bias_act_gradients_float64(rng, act, approximate):
    x = rng.standard_normal((3, 6))
    x[np.abs(x) < 1e-3] = 0.5  # keep relu away from its kink
    inputs = dict(x=x, b=rng.standard_normal(6) * 0.1)

    def grads(dout, x, b):
        dx, db = K.bias_act_backward(dout, x, b, act, approximate)
        return dict(x=dx, b=db)

    check_grads(lambda x, b: K.bias_act_forward(x, b, act, approximate), grads, inputs, ["x", "b"])


@pytest.mark.parametrize("act,approximate", ACTS)
def test_bias_act_torch_parity(rng, act, approximate):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((4, 9)).astype(np.float32)
    x[0, :3] = 0  # relu at exactly 0: torch's gradient is 0 there
    b = np.zeros(9, np.float32)
    b[3:] = rng.standard_normal(6)
    dout = rng.standard_normal((4, 9)).astype(np.float32)
    tx, tb = torch.tensor(x, requires_grad=True), torch.tensor(b, requires_grad=True)
    z = tx + tb
    ty = torch.relu(z) if act == "relu" else torch.nn.functional.gelu(z, approximate=approximate)
    ty.backward(torch.tensor(dout))
    np.testing.assert_allclose(K.bias_act_forward(x, b, act, approximate), ty.detach().numpy(), **F32)
    dx, db = K.bias_act_backward(dout, x, b, act, approximate)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **F32)
    np.testing.assert_allclose(db, tb.grad.numpy(), **F32)


def test_bias_act_accumulates_nan_empty(rng):
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    dout = rng.standard_normal((3, 4))
    dx0, db0 = K.bias_act_backward(dout, x, b, "gelu")
    acc_x, acc_b = np.ones((3, 4)), np.ones(4)
    rx, rb = K.bias_act_backward(dout, x, b, "gelu", dinp=acc_x, dbias=acc_b)
    assert rx is acc_x and rb is acc_b
    np.testing.assert_allclose(acc_x, dx0 + 1, **F64)
    np.testing.assert_allclose(acc_b, db0 + 1, **F64)
    x[1, 2] = np.nan
    for act in ("relu", "gelu"):
        out = K.bias_act_forward(x, b, act)
        assert np.isnan(out[1, 2]) and np.isfinite(np.delete(out.ravel(), 6)).all()
    assert K.bias_act_forward(np.zeros((0, 4)), b).shape == (0, 4)
    assert K.bias_act_backward(np.zeros((0, 4)), np.zeros((0, 4)), b)[1].tolist() == [0, 0, 0, 0]


def test_bias_act_bad_input(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"bias_act_forward: bias.shape\[0\] must be 4 \(inp.shape\[-1\]\), got 5"):
        K.bias_act_forward(x, np.zeros(5))
    with pytest.raises(TypeError, match="bias_act_forward: bias must have dtype float64, got float32"):
        K.bias_act_forward(x, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="bias_act_forward: act must be 'relu', 'gelu' or 'gelu_tanh', got 'tanh'"):
        K.bias_act_forward(x, None, "tanh")
    with pytest.raises(ValueError, match="bias_act_forward: approximate='tanh' needs act='gelu'"):
        K.bias_act_forward(x, None, "relu", "tanh")
    with pytest.raises(ValueError, match=r"bias_act_backward: dout.shape\[1\] must be 4 \(inp.shape\), got 3"):
        K.bias_act_backward(np.ones((3, 3)), x)
    np.testing.assert_allclose(K.bias_act_forward(x.T[::-1], None, "gelu"),
                               ref_act(x.T[::-1], "gelu", "none"), **F64)


# ---- residual add + LayerNorm -------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine", [True, False])
def test_add_layernorm_forward_matches_numpy(rng, dtype, affine):
    x = rng.standard_normal((2, 3, 8)).astype(dtype)
    r = rng.standard_normal((2, 3, 8)).astype(dtype) + 3
    w = rng.standard_normal(8).astype(dtype) if affine else None
    b = rng.standard_normal(8).astype(dtype) if affine else None
    out, mean, rstd = K.add_layernorm_forward(x, r, w, b)
    up = lambda a: None if a is None else a.astype(np.float64)  # noqa: E731
    ref = ref_add_layernorm(up(x), up(r), up(w), up(b))
    tol = F32 if dtype == np.float32 else F64
    for ours, theirs in zip((out, mean, rstd), ref):
        assert ours.dtype == dtype
        np.testing.assert_allclose(ours, theirs, **tol)
    assert mean.shape == (2, 3)


@pytest.mark.parametrize("affine", [True, False])
def test_add_layernorm_gradients_float64(rng, affine):
    inputs = dict(x=rng.standard_normal((2, 3, 5)), r=rng.standard_normal((2, 3, 5)))
    if affine:
        inputs.update(w=rng.standard_normal(5), b=rng.standard_normal(5))

    def forward(x, r, w=None, b=None):
        return K.add_layernorm_forward(x, r, w, b)[0]

    def grads(dout, x, r, w=None, b=None):
        _, mean, rstd = K.add_layernorm_forward(x, r, w, b)
        dx, dw, db = K.add_layernorm_backward(dout, x, r, w, mean, rstd, with_bias=affine)
        return dict(x=dx, r=dx, w=dw, b=db)

    check_grads(forward, grads, inputs, list(inputs))


def test_add_layernorm_torch_parity(rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((4, 5, 16)).astype(np.float32)
    r = rng.standard_normal((4, 5, 16)).astype(np.float32)
    ln = torch.nn.LayerNorm(16)
    with torch.no_grad():
        ln.weight.copy_(torch.tensor(rng.standard_normal(16).astype(np.float32)))
        ln.bias.copy_(torch.tensor(rng.standard_normal(16).astype(np.float32)))
    tx, tr = torch.tensor(x, requires_grad=True), torch.tensor(r, requires_grad=True)
    ty = ln(tx + tr)
    dout = rng.standard_normal(ty.shape).astype(np.float32)
    ty.backward(torch.tensor(dout))
    w, b = ln.weight.detach().numpy(), ln.bias.detach().numpy()
    out, mean, rstd = K.add_layernorm_forward(x, r, w, b)
    np.testing.assert_allclose(out, ty.detach().numpy(), **F32)
    dx, dw, db = K.add_layernorm_backward(dout, x, r, w, mean, rstd)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **F32)
    np.testing.assert_allclose(dx, tr.grad.numpy(), **F32)
    np.testing.assert_allclose(dw, ln.weight.grad.numpy(), **F32)
    np.testing.assert_allclose(db, ln.bias.grad.numpy(), **F32)


def test_add_layernorm_constant_row_nan_empty(rng):
    x = np.full((2, 4), 3.0)
    out, mean, rstd = K.add_layernorm_forward(x, np.zeros((2, 4)), eps=1e-5)
    np.testing.assert_allclose(out, 0, atol=0)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(1e-5), rtol=1e-12)
    x = rng.standard_normal((2, 4))
    x[0, 1] = np.nan
    out, _, _ = K.add_layernorm_forward(x, np.zeros((2, 4)))
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()
    out, mean, rstd = K.add_layernorm_forward(np.zeros((0, 4)), np.zeros((0, 4)))
    assert out.shape == (0, 4) and mean.shape == (0,)


def test_add_layernorm_bad_input(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"add_layernorm_forward: residual.shape\[1\] must be 4 \(inp.shape\), got 5"):
        K.add_layernorm_forward(x, np.zeros((3, 5)))
    with pytest.raises(ValueError, match="add_layernorm_forward: residual must have 2 dimensions"):
        K.add_layernorm_forward(x, np.zeros(4))
    with pytest.raises(TypeError, match="add_layernorm_forward: residual must have dtype float64, got float32"):
        K.add_layernorm_forward(x, np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"add_layernorm_forward: weight.shape\[0\] must be 4"):
        K.add_layernorm_forward(x, x, np.ones(3))
    with pytest.raises(ValueError, match="add_layernorm_forward: eps must be >= 0"):
        K.add_layernorm_forward(x, x, eps=-1.0)
    out, mean, rstd = K.add_layernorm_forward(x, x)
    with pytest.raises(ValueError, match=r"add_layernorm_backward: mean and rstd must have 3 elements"):
        K.add_layernorm_backward(out, x, x, None, mean[:2], rstd)
    with pytest.raises(ValueError, match="add_layernorm_backward: dinp is updated in place"):
        K.add_layernorm_backward(out, x, x, None, mean, rstd, dinp=np.zeros((4, 3)).T)
