"""fused kernels (bias + activation, residual add + LayerNorm): NumPy
reference, float64 gradients, torch parity, bad input."""
import math

import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import check_grads
from tolerances import F32, F64_TIGHT

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
    tol = F32 if dtype == np.float32 else F64_TIGHT
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
def test_bias_act_torch_parity(rng, act, approximate, torch_ref):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    x[0, :3] = 0  # relu at exactly 0: torch's gradient is 0 there
    b = np.zeros(9, np.float32)
    b[3:] = rng.standard_normal(6)
    dout = rng.standard_normal((4, 9)).astype(np.float32)

    def torch_side(torch):
        tx, tb = torch.tensor(x, requires_grad=True), torch.tensor(b, requires_grad=True)
        z = tx + tb
        ty = torch.relu(z) if act == "relu" else torch.nn.functional.gelu(z, approximate=approximate)
        ty.backward(torch.tensor(dout))
        return dict(y=ty, dx=tx.grad, db=tb.grad)

    ref = torch_ref(torch_side, inputs=dict(x=x, b=b, dout=dout))
    np.testing.assert_allclose(K.bias_act_forward(x, b, act, approximate), ref["y"], **F32)
    dx, db = K.bias_act_backward(dout, x, b, act, approximate)
    np.testing.assert_allclose(dx, ref["dx"], **F32)
    np.testing.assert_allclose(db, ref["db"], **F32)


def test_bias_act_accumulates_nan_empty(rng):
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    dout = rng.standard_normal((3, 4))
    dx0, db0 = K.bias_act_backward(dout, x, b, "gelu")
    acc_x, acc_b = np.ones((3, 4)), np.ones(4)
    rx, rb = K.bias_act_backward(dout, x, b, "gelu", dinp=acc_x, dbias=acc_b)
    assert rx is acc_x and rb is acc_b
    np.testing.assert_allclose(acc_x, dx0 + 1, **F64_TIGHT)
    np.testing.assert_allclose(acc_b, db0 + 1, **F64_TIGHT)
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
                               ref_act(x.T[::-1], "gelu", "none"), **F64_TIGHT)


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
    tol = F32 if dtype == np.float32 else F64_TIGHT
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


def test_add_layernorm_torch_parity(rng, torch_ref):
    x = rng.standard_normal((4, 5, 16)).astype(np.float32)
    r = rng.standard_normal((4, 5, 16)).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    dout = rng.standard_normal(x.shape).astype(np.float32)

    def torch_side(torch):
        ln = torch.nn.LayerNorm(16)
        with torch.no_grad():
            ln.weight.copy_(torch.tensor(w))
            ln.bias.copy_(torch.tensor(b))
        tx, tr = torch.tensor(x, requires_grad=True), torch.tensor(r, requires_grad=True)
        ty = ln(tx + tr)
        ty.backward(torch.tensor(dout))
        return dict(y=ty, dx=tx.grad, dr=tr.grad, dw=ln.weight.grad, db=ln.bias.grad)

    ref = torch_ref(torch_side, inputs=dict(x=x, r=r, w=w, b=b, dout=dout))
    out, mean, rstd = K.add_layernorm_forward(x, r, w, b)
    np.testing.assert_allclose(out, ref["y"], **F32)
    dx, dw, db = K.add_layernorm_backward(dout, x, r, w, mean, rstd)
    np.testing.assert_allclose(dx, ref["dx"], **F32)
    np.testing.assert_allclose(dx, ref["dr"], **F32)
    np.testing.assert_allclose(dw, ref["dw"], **F32)
    np.testing.assert_allclose(db, ref["db"], **F32)


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


# ---- feed-forward backward (row-sparse) ---------------------------------------

def ff_setup(rng, M=6, D=5, F=7, dtype=np.float64, bias=True):
    r = lambda *s: (rng.standard_normal(s) * 0.7).astype(dtype)  # noqa: E731
    return dict(x=r(2, M // 2, D), w1=r(F, D), b1=r(F) if bias else None, w2=r(D, F), b2=r(D) if bias else None)


def ff_forward(x, w1, b1, w2, b2, keep, p, act="relu", approximate="none"):
    """y = drop(act(x w1^T + b1)) w2^T + b2 from the kernels; also h."""
    h = K.linear_forward(x, w1, None)
    a = K.bias_act_forward(h, b1, act, approximate)
    if keep is not None:
        a = a * keep / (1 - p)
    return K.linear_forward(a, w2, b2), h


@pytest.mark.parametrize("act,approximate", ACTS)
@pytest.mark.parametrize("p", [0.0, 0.4])
def test_ff_backward_gradients_float64(rng, act, approximate, p):
    s = ff_setup(rng)
    keep = rng.random((2, 3, 7)) >= p if p > 0 else None

    def forward(x, w1, b1, w2, b2):
        return ff_forward(x, w1, b1, w2, b2, keep, p, act, approximate)[0]

    def grads(dout, x, w1, b1, w2, b2):
        _, h = ff_forward(x, w1, b1, w2, b2, keep, p, act, approximate)
        dx, dw1, db1, dw2, db2 = K.ff_backward(dout, x, h, keep, p, w1, b1, w2, act=act, approximate=approximate)
        return dict(x=dx, w1=dw1, b1=db1, w2=dw2, b2=db2)

    check_grads(forward, grads, s, list(s))


def dense_ff_grads(dout, s, h, keep, p):
    """The same gradients from the separate kernels (no row skipping)."""
    a = K.bias_act_forward(h, s["b1"])
    a_d = a * keep / (1 - p) if keep is not None else a
    da, dw2, db2 = K.linear_backward(dout, a_d, s["w2"], with_bias=s["b2"] is not None)
    if keep is not None:
        da = da * keep / (1 - p)
    dh, db1 = K.bias_act_backward(da, h, s["b1"])
    dx, dw1, _ = K.linear_backward(dh, s["x"], s["w1"], with_bias=False)
    return dx, dw1, db1, dw2, db2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ff_backward_skips_zero_rows_exactly(rng, dtype):
    """Rows of dout that are all zero (padding) add nothing: same result as the
    dense computation, and their dx rows are 0."""
    s = ff_setup(rng, M=32, D=8, F=16, dtype=dtype)
    keep = rng.random((2, 16, 16)) >= 0.3
    _, h = ff_forward(s["x"], s["w1"], s["b1"], s["w2"], s["b2"], keep, 0.3)
    dout = rng.standard_normal((2, 16, 8)).astype(dtype)
    dout[0, 10:] = 0  # padding rows
    dout[1, 3] = 0
    got = K.ff_backward(dout, s["x"], h, keep, 0.3, s["w1"], s["b1"], s["w2"])
    want = dense_ff_grads(dout, s, h, keep, 0.3)
    tol = F32 if dtype == np.float32 else F64_TIGHT
    for g, w, name in zip(got, want, ["dx", "dw1", "db1", "dw2", "db2"]):
        np.testing.assert_allclose(g, w, **tol, err_msg=name)
    assert (got[0][0, 10:] == 0).all() and (got[0][1, 3] == 0).all()


def test_ff_backward_nan_in_a_zero_gradient_row_still_propagates(rng):
    """0 * NaN is NaN in the dense products: a dead row with a NaN input (or
    non-finite weights) is not skipped, the result is the dense one."""
    s = ff_setup(rng, M=32, D=4, F=6)
    x = s["x"].copy()
    x[0, 5, 1] = np.nan
    h = K.linear_forward(x, s["w1"], None)
    dout = rng.standard_normal((2, 16, 4))
    dout[0, 2:] = 0
    dx, dw1, _, dw2, _ = K.ff_backward(dout, x, h, None, 0.0, s["w1"], s["b1"], s["w2"])
    assert np.isnan(dw1).any() and np.isnan(dw2).any()
    w2 = s["w2"].copy()
    w2[:, 0] = np.inf
    h = K.linear_forward(s["x"], s["w1"], None)
    got = K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], s["b1"], w2)
    want = dense_ff_grads(dout, dict(s, w2=w2), h, None, 0.0)
    assert np.isnan(got[0]).any()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **F64_TIGHT)  # NaN where the dense result has NaN


def test_ff_backward_torch_parity(rng, torch_ref):
    s = ff_setup(rng, M=8, D=6, F=10, dtype=np.float32)
    dout = rng.standard_normal((2, 4, 6)).astype(np.float32)
    dout[1, 2:] = 0
    names = ("x", "w1", "b1", "w2", "b2")

    def torch_side(torch):
        tx, tw1, tb1, tw2, tb2 = ts = [torch.tensor(s[n], requires_grad=True) for n in names]
        y = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(tx, tw1, tb1)), tw2, tb2)
        y.backward(torch.tensor(dout))
        return dict(grads=[t.grad for t in ts])

    ref = torch_ref(torch_side, inputs=dict(dout=dout, **s))
    h = K.linear_forward(s["x"], s["w1"], None)
    got = K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], s["b1"], s["w2"])
    assert len(got) == len(ref["grads"]) == 5
    for g, t in zip(got, ref["grads"]):
        np.testing.assert_allclose(g, t, **F32)


def test_ff_backward_options_empty_and_bad_input(rng):
    s = ff_setup(rng, bias=False)
    h = K.linear_forward(s["x"], s["w1"], None)
    dout = rng.standard_normal(s["x"].shape)
    dx, dw1, db1, dw2, db2 = K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], None, s["w2"], with_bias2=False,
                                           need_dx=False)
    assert dx is None and db1 is None and db2 is None and dw1.shape == (7, 5) and dw2.shape == (5, 7)
    e = np.zeros((0, 5))
    dx, dw1, *_ = K.ff_backward(e, e, np.zeros((0, 7)), None, 0.0, s["w1"], None, s["w2"])
    assert dx.shape == (0, 5) and (dw1 == 0).all()
    with pytest.raises(ValueError, match=r"ff_backward: w1.shape\[0\] must be 7 \(h.shape\[-1\]\), got 5"):
        K.ff_backward(dout, s["x"], h, None, 0.0, s["w2"], None, s["w2"])
    with pytest.raises(ValueError, match=r"ff_backward: dout.shape\[2\] must be 5 \(x.shape\), got 4"):
        K.ff_backward(dout[..., :4], s["x"], h, None, 0.0, s["w1"], None, s["w2"])
    with pytest.raises(ValueError, match=r"ff_backward: p must be in \[0, 1\], got 1.5"):
        K.ff_backward(dout, s["x"], h, None, 1.5, s["w1"], None, s["w2"])
    with pytest.raises(TypeError, match="ff_backward: keep must have dtype bool"):
        K.ff_backward(dout, s["x"], h, np.ones(h.shape), 0.5, s["w1"], None, s["w2"])
    with pytest.raises(TypeError, match="ff_backward: w2 must have dtype float64, got float32"):
        K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], None, s["w2"].astype(np.float32))
