"""layernorm kernels: NumPy reference, stability, float64 gradients, torch
parity, accumulation, bad input."""
import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import check_grads
from tolerances import F32, F64


def reference(x, w=None, b=None, eps=1e-5):
    """float64 (out, mean, rstd)."""
    x = x.astype(np.float64)
    mean = x.mean(axis=-1)
    var = ((x - mean[..., None]) ** 2).mean(axis=-1)
    rstd = 1 / np.sqrt(var + eps)
    out = (x - mean[..., None]) * rstd[..., None]
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out, mean, rstd


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 4)])
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
def test_forward_matches_numpy(rng, dtype, shape, affine):
    x = (2 * rng.standard_normal(shape) + 0.5).astype(dtype)
    w = rng.standard_normal(shape[-1]).astype(dtype) if affine[0] else None
    b = rng.standard_normal(shape[-1]).astype(dtype) if affine[1] else None
    got = K.layernorm_forward(x, w, b, eps=1e-5)
    tol = F32 if dtype == np.float32 else F64
    for g, want, name in zip(got, reference(x, w, b), ["out", "mean", "rstd"]):
        assert g.dtype == dtype and g.shape == want.shape, name
        np.testing.assert_allclose(g, want, **tol, err_msg=name)


def test_eps_is_inside_the_root():
    # the tutorials' bug: (x - mean) / (std + eps).  With var = 2.5e-7 and
    # eps = 1e-5 the two differ by a factor of ~5.
    x = np.array([[0.0, 1e-3]])
    out, _, rstd = K.layernorm_forward(x, eps=1e-5)
    np.testing.assert_allclose(rstd, [1 / np.sqrt(2.5e-7 + 1e-5)], **F64)
    np.testing.assert_allclose(out, [[-5e-4 * rstd[0], 5e-4 * rstd[0]]], **F64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stable_for_offset_and_constant_rows(rng, dtype):
    x = (1e4 + rng.standard_normal((4, 64))).astype(dtype)
    x[3] = 1e4  # constant row: variance exactly 0
    w, b = rng.standard_normal(64).astype(dtype), rng.standard_normal(64).astype(dtype)
    out, mean, rstd = K.layernorm_forward(x, w, b)
    want = reference(x, w, b)
    tol = F32 if dtype == np.float32 else F64
    np.testing.assert_allclose(out, want[0], **tol)
    np.testing.assert_allclose(mean, want[1], **tol)
    np.testing.assert_allclose(rstd, want[2], **tol)
    np.testing.assert_array_equal(out[3], b)
    np.testing.assert_allclose(rstd[3], 1 / np.sqrt(1e-5), **tol)
    # the normalised rows still have mean 0 and variance ~1
    xhat, _, _ = K.layernorm_forward(x[:3])
    np.testing.assert_allclose(xhat.mean(axis=-1), 0, atol=1e-5)
    np.testing.assert_allclose(xhat.var(axis=-1), 1, rtol=1e-3)


@pytest.mark.parametrize("affine", [True, False])
def test_gradients_float64(rng, affine):
    inputs = dict(x=rng.standard_normal((2, 3, 6)) * 3 + 1)
    if affine:
        inputs.update(w=rng.standard_normal(6), b=rng.standard_normal(6))

    def forward(x, w=None, b=None):
        return K.layernorm_forward(x, w, b)[0]

    def grads(dout, x, w=None, b=None):
        _, mean, rstd = K.layernorm_forward(x, w, b)
        dx, dw, db = K.layernorm_backward(dout, x, w, mean, rstd, with_bias=affine)
        if not affine:
            assert dw is None and db is None
        return dict(x=dx, w=dw, b=db)

    check_grads(forward, grads, inputs, list(inputs))


def test_backward_accumulates_and_options(rng):
    x, w, dout = rng.standard_normal((4, 5)), rng.standard_normal(5), rng.standard_normal((4, 5))
    _, mean, rstd = K.layernorm_forward(x, w)
    dx0, dw0, db0 = K.layernorm_backward(dout, x, w, mean, rstd)
    acc_x, acc_w, acc_b = np.ones((4, 5)), np.ones(5), np.ones(5)
    rx, rw, rb = K.layernorm_backward(dout, x, w, mean, rstd, dinp=acc_x, dweight=acc_w, dbias=acc_b)
    assert rx is acc_x and rw is acc_w and rb is acc_b
    np.testing.assert_allclose(acc_x, dx0 + 1, **F64)
    np.testing.assert_allclose(acc_w, dw0 + 1, **F64)
    np.testing.assert_allclose(acc_b, db0 + 1, **F64)
    dx, dw, db = K.layernorm_backward(dout, x, w, mean, rstd, need_dinp=False, with_bias=False)
    assert dx is None and db is None
    np.testing.assert_allclose(dw, dw0, **F64)
    np.testing.assert_allclose(db0, dout.sum(axis=0), **F64)


def test_torch_parity(rng, torch_ref):
    x = (3 * rng.standard_normal((4, 5, 16)) + 2).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    dout = rng.standard_normal(x.shape).astype(np.float32)

    def torch_side(torch):
        xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        yt = torch.nn.functional.layer_norm(xt, (16,), wt, bt, eps=1e-5)
        yt.backward(torch.tensor(dout))
        _, tmean, trstd = torch.native_layer_norm(torch.tensor(x), (16,), None, None, 1e-5)
        return dict(y=yt, mean=tmean[..., 0], rstd=trstd[..., 0], dx=xt.grad, dw=wt.grad, db=bt.grad)

    ref = torch_ref(torch_side, inputs=dict(x=x, w=w, b=b, dout=dout))
    out, mean, rstd = K.layernorm_forward(x, w, b, eps=1e-5)
    np.testing.assert_allclose(out, ref["y"], **F32)
    np.testing.assert_allclose(mean, ref["mean"], **F32)
    np.testing.assert_allclose(rstd, ref["rstd"], **F32)
    dx, dw, db = K.layernorm_backward(dout, x, w, mean, rstd)
    np.testing.assert_allclose(dx, ref["dx"], **F32)
    np.testing.assert_allclose(dw, ref["dw"], **F32)
    np.testing.assert_allclose(db, ref["db"], **F32)


def test_nan_views_and_empty(rng):
    x = rng.standard_normal((3, 6)).astype(np.float32)
    x[1, 2] = np.nan
    out, mean, rstd = K.layernorm_forward(x)
    assert np.isnan(out[1]).all() and np.isnan(mean[1]) and np.isfinite(out[[0, 2]]).all()
    dx, _, _ = K.layernorm_backward(np.ones_like(x), x, None, mean, rstd)
    assert np.isnan(dx[1]).all() and np.isfinite(dx[[0, 2]]).all()

    base = rng.standard_normal((8, 10))
    view = base[::-2, ::3]  # (4, 4), non-contiguous, negative stride
    w = rng.standard_normal(8)[::-2]
    out, mean, rstd = K.layernorm_forward(view, w, None)
    for g, want in zip((out, mean, rstd), reference(view, w)):
        np.testing.assert_allclose(g, want, **F64)
    dview = rng.standard_normal((4, 8))[:, ::2]
    want = K.layernorm_backward(dview.copy(), view.copy(), w.copy(), mean, rstd)
    for g, wnt in zip(K.layernorm_backward(dview, view, w, mean, rstd), want):
        np.testing.assert_allclose(g, wnt, **F64)

    out, mean, rstd = K.layernorm_forward(np.zeros((0, 5)), np.ones(5))
    assert out.shape == (0, 5) and mean.shape == (0,) and rstd.shape == (0,)
    dx, dw, db = K.layernorm_backward(np.zeros((0, 5)), np.zeros((0, 5)), np.ones(5), mean, rstd)
    assert dx.shape == (0, 5)
    np.testing.assert_array_equal(dw, 0)
    np.testing.assert_array_equal(db, 0)
    out, mean, rstd = K.layernorm_forward(np.zeros((3, 0)))
    assert out.shape == (3, 0)
    np.testing.assert_array_equal(mean, 0)
    dx, _, db = K.layernorm_backward(np.zeros((3, 0)), np.zeros((3, 0)), None, mean, rstd)
    assert dx.shape == (3, 0) and db.shape == (0,)


def test_bad_input(rng):
    x = rng.standard_normal((3, 4))
    w = np.ones(4)
    _, mean, rstd = K.layernorm_forward(x, w)
    with pytest.raises(TypeError, match="layernorm_forward: x must have dtype float32 or float64, got int64"):
        K.layernorm_forward(np.zeros((2, 2), np.int64))
    with pytest.raises(TypeError, match="layernorm_forward: weight must have dtype float64, got float32"):
        K.layernorm_forward(x, w.astype(np.float32))
    with pytest.raises(ValueError, match=r"layernorm_forward: bias.shape\[0\] must be 4 \(x.shape\[-1\]\), got 3"):
        K.layernorm_forward(x, w, np.ones(3))
    with pytest.raises(ValueError, match="layernorm_forward: weight must have 1 dimensions, got 2"):
        K.layernorm_forward(x, np.ones((1, 4)))
    with pytest.raises(ValueError, match="layernorm_forward: x must have at least 1 dimensions, got 0"):
        K.layernorm_forward(np.array(1.0))
    with pytest.raises(ValueError, match=r"layernorm_forward: eps must be finite and >= 0, got -1.0"):
        K.layernorm_forward(x, eps=-1.0)
    with pytest.raises(ValueError, match=r"layernorm_forward: eps must be finite and >= 0, got nan"):
        K.layernorm_forward(x, eps=float("nan"))
    with pytest.raises(ValueError, match=r"layernorm_backward: mean.shape\[0\] must be 3 \(x.shape\[:-1\]\), got 4"):
        K.layernorm_backward(x, x, w, np.zeros(4), rstd)
    with pytest.raises(ValueError, match="layernorm_backward: rstd must have 1 dimensions, got 2"):
        K.layernorm_backward(x, x, w, mean, rstd[:, None])
    with pytest.raises(TypeError, match="layernorm_backward: mean must have dtype float64, got float32"):
        K.layernorm_backward(x, x, w, mean.astype(np.float32), rstd)
    with pytest.raises(ValueError, match=r"layernorm_backward: dout.shape\[1\] must be 4 \(x's shape\), got 5"):
        K.layernorm_backward(np.ones((3, 5)), x, w, mean, rstd)
    with pytest.raises(ValueError, match="layernorm_backward: dweight must be None when weight is None"):
        K.layernorm_backward(x, x, None, mean, rstd, dweight=np.zeros(4))
    with pytest.raises(ValueError, match=r"layernorm_backward: dbias must have shape \(4,\), got \(5,\)"):
        K.layernorm_backward(x, x, w, mean, rstd, dbias=np.zeros(5))
    with pytest.raises(ValueError, match="layernorm_backward: dinp is updated in place"):
        K.layernorm_backward(x, x, w, mean, rstd, dinp=np.zeros((4, 3)).T)
