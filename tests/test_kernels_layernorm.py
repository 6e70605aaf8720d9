"""layernorm kernels: the bespoke edge cases -- eps inside the root, rows far
from 0 and constant rows, backward's options, NaN, rows of length 0, bad
input.  Forward against NumPy, float64 gradients, accumulation, views, empty
batches and torch parity (out, mean, rstd and every gradient):
tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from kernel_table import ref_layernorm
from tolerances import F32, F64


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
    want = ref_layernorm(x.astype(np.float64), w, b)
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


def test_backward_options(rng):
    x, w, dout = rng.standard_normal((4, 5)), rng.standard_normal(5), rng.standard_normal((4, 5))
    _, mean, rstd = K.layernorm_forward(x, w)
    dx0, dw0, db0 = K.layernorm_backward(dout, x, w, mean, rstd)
    dx, dw, db = K.layernorm_backward(dout, x, w, mean, rstd, need_dinp=False, with_bias=False)
    assert dx is None and db is None
    np.testing.assert_allclose(dw, dw0, **F64)
    np.testing.assert_allclose(db0, dout.sum(axis=0), **F64)


def test_nan_and_rows_of_length_zero(rng):
    x = rng.standard_normal((3, 6)).astype(np.float32)
    x[1, 2] = np.nan
    out, mean, rstd = K.layernorm_forward(x)
    assert np.isnan(out[1]).all() and np.isnan(mean[1]) and np.isfinite(out[[0, 2]]).all()
    dx, _, _ = K.layernorm_backward(np.ones_like(x), x, None, mean, rstd)
    assert np.isnan(dx[1]).all() and np.isfinite(dx[[0, 2]]).all()

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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 7, 8, 33, 64, 1024, 1025])
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_rows_in_groups_have_each_rows_own_bits(rng, dtype, d, affine):
    """The forward sums four rows' moments in one loop and the backward a row's
    two sums in one loop (csrc/layernorm.c, in CT_LANE_SUM's order); rows of up
    to 1024 keep h, weight and bias in double on the stack, longer ones convert
    them in each pass.  Every row of a 7-row call (a group of four and three
    lone rows) has exactly the bits of that row normalised alone, with and
    without a residual, weight or bias, for widths on and off the 8 lanes and on
    both sides of 1024; the backward's rows likewise."""
    n = 7
    x = (rng.standard_normal((n, d)) * 4 + 2).astype(dtype)
    res = rng.standard_normal((n, d)).astype(dtype)
    w, b = rng.standard_normal(d).astype(dtype), rng.standard_normal(d).astype(dtype)
    w = w if affine in ("both", "weight") else None
    b = b if affine in ("both", "bias") else None
    dy = rng.standard_normal((n, d)).astype(dtype)
    whole = K.add_layernorm_forward(x, res, w, b)
    plain = K.layernorm_forward(x, w, b)
    dwhole = K.add_layernorm_backward(dy, x, res, w, whole[1], whole[2])[0]
    for i in range(n):
        one = K.add_layernorm_forward(x[i:i + 1], res[i:i + 1], w, b)
        for got, alone in zip(whole, one):
            np.testing.assert_array_equal(got[i:i + 1], alone)
        for got, alone in zip(plain, K.layernorm_forward(x[i:i + 1], w, b)):
            np.testing.assert_array_equal(got[i:i + 1], alone)
        dalone = K.add_layernorm_backward(dy[i:i + 1], x[i:i + 1], res[i:i + 1], w, one[1], one[2])[0]
        np.testing.assert_array_equal(dwhole[i:i + 1], dalone)
    w64 = None if w is None else w.astype(np.float64)
    b64 = None if b is None else b.astype(np.float64)
    ref_out = ref_layernorm((x + res).astype(np.float64), w64, b64)[0]
    np.testing.assert_allclose(whole[0], ref_out, **(F32 if dtype == np.float32 else F64))


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_float32_elementwise_rounding_is_bounded(rng, offset):
    """float32 rows: the row sums (mean, variance, the backward's two means) are
    in double, the elementwise parts in float32 (csrc/layernorm.c: h - mean as
    (h - hi) - lo, then the products and sums, each rounding once).  Against
    float64 maths on the same inputs each output is within 4 ulp of the size
    of its terms: |hhat w| + |b| in the forward, rstd (|dy w| + |mean(g)| +
    |hhat mean(g hhat)|) in the backward.  At offset 1e4 (rows far from 0)
    a float32 mean alone would be off by up to half an ulp of 1e4, ~300x
    this bound for rows of unit spread."""
    x = (offset + rng.standard_normal((64, 128))).astype(np.float32)
    res = rng.standard_normal((64, 128)).astype(np.float32)
    w, b = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    dy = rng.standard_normal((64, 128)).astype(np.float32)
    ulp = 2.0 ** -24
    out, mean, rstd = K.add_layernorm_forward(x, res, w, b)
    h = (x + res).astype(np.float64)  # the float32 sum, as the kernel adds
    want, want_mean, want_rstd = ref_layernorm(h, w.astype(np.float64), b.astype(np.float64))
    hhat = (h - want_mean[:, None]) * want_rstd[:, None]
    bound = 4 * ulp * (np.abs(hhat * w) + np.abs(b))
    err = np.abs(out - want)
    assert (err <= bound).all(), float((err / bound).max())
    # the backward, from the forward's saved float32 mean and rstd (as it runs in training)
    dx, dw, db = K.add_layernorm_backward(dy, x, res, w, mean, rstd)
    mu, rs = mean.astype(np.float64)[:, None], rstd.astype(np.float64)[:, None]
    hhat = (h - mu) * rs
    g = dy.astype(np.float64) * w
    g_mean, gx_mean = g.mean(axis=1, keepdims=True), (g * hhat).mean(axis=1, keepdims=True)
    want_dx = rs * (g - g_mean - hhat * gx_mean)
    bound = 4 * ulp * rs * (np.abs(g) + np.abs(g_mean) + np.abs(hhat * gx_mean))
    err = np.abs(dx - want_dx)
    assert (err <= bound).all(), float((err / bound).max())
    np.testing.assert_allclose(db, dy.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, (dy * hhat).sum(axis=0), rtol=1e-5, atol=1e-5)
