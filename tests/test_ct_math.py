"""Accuracy of csrc/ct_math.h (vectorised exp, tanh, sigmoid, erf) through
the public kernels, against NumPy float64 references, in ulp of the
kernel's dtype, over dense sweeps with +-0, subnormals, huge values, +-inf
and NaN.

Bounds (ulp of the result's dtype; the reference is rounded only at the
comparison, so a correctly rounded result scores <= 0.5):
    exp      float32 <= 1, float64 <= 2   (via log_softmax_backward: -exp(y))
    tanh     float32 <= 2, float64 <= 2
    sigmoid  float32 <= 3, float64 <= 3   (including the far negative tail)
    gelu     float32 <= 3 for x >= 0; for x < 0, 1 + erf(x / sqrt 2) cancels
             (torch's formula too), so the bound is |x| * 2^-24 + 3 ulp
    softmax, log_softmax, cross-entropy rows: <= 4 (float32), <= 8 (float64)
             against the exact maths on the rounded x - max (the rounding of
             x - max itself is the formula's, shared with torch)
NumPy's float64 functions are themselves within ~1 ulp, which the float64
bounds absorb.
"""
import math

import numpy as np
import pytest

from ctransformer.kernels import (activation_forward, cross_entropy_backward, cross_entropy_forward,
                                  log_softmax_backward, log_softmax_forward, softmax_forward)

DTYPES = (np.float32, np.float64)
BOUND = {"exp": {np.float32: 1.0, np.float64: 2.0},
         "tanh": {np.float32: 2.0, np.float64: 2.0},
         "sigmoid": {np.float32: 3.0, np.float64: 3.0}}


def sweep(dtype, n=20001, linear_range=12.0):
    """Both signs of a geometric sweep from the smallest subnormal to the
    largest finite value, a dense linear sweep around 0, and the specials."""
    info = np.finfo(dtype)
    with np.errstate(over="ignore"):
        pos = np.geomspace(float(info.smallest_subnormal), float(info.max), n)
    pos = np.minimum(pos, float(info.max))
    lin = np.linspace(-linear_range, linear_range, n)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, float(info.max), -float(info.max),
                float(info.smallest_subnormal), -float(info.smallest_subnormal), float(info.tiny)]
    return np.concatenate([-pos, pos, lin, specials]).astype(dtype)


def ulp_error(got, ref, dtype):
    """|got - ref| in ulp of ref rounded to dtype (0 where both are the
    same inf or both NaN; inf where only one is NaN or inf)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        ref_rounded = ref.astype(dtype)
        spacing = np.spacing(np.abs(ref_rounded)).astype(np.float64)
        spacing = np.maximum(spacing, float(np.finfo(dtype).smallest_subnormal))
        err = np.abs(got - ref) / spacing
    same = (got == ref_rounded.astype(np.float64)) | (np.isnan(got) & np.isnan(ref))
    err = np.where(same, 0.0, err)
    return np.where(np.isnan(err), np.inf, err)


def assert_ulp(got, ref, x, dtype, bound, what):
    got, ref, x = np.ravel(got), np.ravel(ref), np.ravel(x)
    err = ulp_error(got, ref, dtype)
    i = int(np.argmax(err))
    assert err[i] <= bound, (f"{what} {np.dtype(dtype).name}: {err[i]:.3g} ulp > {bound} at x={x[i]!r}: "
                             f"got {got[i]!r}, reference {ref[i]!r}")


def ref_sigmoid(x64):
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x64))
    return np.where(x64 >= 0, 1 / (1 + e), e / (1 + e))


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_through_log_softmax_backward(dtype):
    # rows y = [x, -inf] with dout = [0, 1]: dinp[:, 0] = 0 - exp(x) * 1
    x = sweep(dtype)
    x = x[x != -np.inf]  # an all -inf row gets no gradient by design
    y = np.stack([x, np.full_like(x, -np.inf)], axis=1)
    dout = np.zeros_like(y)
    dout[:, 1] = 1
    got = -log_softmax_backward(dout, y)[:, 0]
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64))
    assert_ulp(got, ref, x, dtype, BOUND["exp"][dtype], "exp")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["tanh", "sigmoid"])
def test_tanh_sigmoid_ulp(dtype, kind):
    x = sweep(dtype)
    got = activation_forward(x, kind)
    ref = np.tanh(x.astype(np.float64)) if kind == "tanh" else ref_sigmoid(x.astype(np.float64))
    assert_ulp(got, ref, x, dtype, BOUND[kind][dtype], kind)


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_values_exact(dtype):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e4, -1e4], dtype=dtype)
    t = activation_forward(x, "tanh")
    assert np.array_equal(t[:4], [0, 0, 1, -1]) and np.signbit(t[1]) and not np.signbit(t[0])
    assert np.isnan(t[4]) and t[5] == 1 and t[6] == -1
    s = activation_forward(x, "sigmoid")
    assert np.array_equal(s[[0, 1, 2, 3, 5, 6]], [0.5, 0.5, 1, 0, 1, 0]) and np.isnan(s[4])
    g = activation_forward(x, "gelu")
    assert np.array_equal(g[[0, 2, 5]], [0, np.inf, 1e4]) and np.isnan(g[4])
    assert g[6] == 0 and np.isnan(g[3])  # -inf * Phi(-inf) = -inf * 0, NaN in torch too


def test_sigmoid_tail_keeps_relative_accuracy():
    # sigmoid(-100) = 3.7e-44 is a float32 subnormal, not 0
    x = np.array([-87.0, -95.0, -100.0, -103.0], dtype=np.float32)
    got = activation_forward(x, "sigmoid")
    assert np.all(got > 0)
    assert_ulp(got, ref_sigmoid(x.astype(np.float64)), x, np.float32, 1.0, "sigmoid tail")


def test_gelu_float32():
    x = sweep(np.float32, linear_range=8.0)
    x = x[np.isfinite(x)]
    got = activation_forward(x, "gelu").astype(np.float64)
    x64 = x.astype(np.float64)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    ref = 0.5 * x64 * (1 + erf(x64 / math.sqrt(2)))
    pos = x >= 0
    assert_ulp(got[pos], ref[pos], x[pos], np.float32, 3.0, "gelu")
    with np.errstate(over="ignore"):  # spacing of float32 max is inf: no bound there, fine
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    excess = np.abs(got - ref) - (np.abs(x64) * 2.0 ** -24 + 3 * ulp)
    assert excess.max() <= 0, f"gelu float32 x < 0: worst at x={x[np.argmax(excess)]!r}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_log_softmax_rows(dtype, rng):
    x = (rng.standard_normal((64, 37)) * 10).astype(dtype)
    x[0, :] = 0
    x[1, 3] = 80  # one dominant logit
    z = (x - x.max(axis=1, keepdims=True)).astype(np.float64)  # rounded as in the kernel
    ref_soft = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    ref_log = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    bound = 4.0 if dtype == np.float32 else 8.0
    subnormal = ref_soft < np.finfo(dtype).tiny  # softmax's contract: these weights are 0 (csrc/softmax.c)
    assert subnormal.any() == (dtype == np.float32)  # the rule is exercised (float32's range is reached)
    assert (softmax_forward(x)[subnormal] == 0).all()
    assert_ulp(softmax_forward(x)[~subnormal], ref_soft[~subnormal], x[~subnormal], dtype, bound, "softmax")
    # |y| small: y = (x - max) - log(sum) where sum ~ 1 loses relative accuracy
    # in log(sum) (the formula's, torch's too); compare where |y| > 0.5
    big = np.abs(ref_log) > 0.5
    assert_ulp(log_softmax_forward(x)[big], ref_log[big], x[big], dtype, bound, "log_softmax")


def test_cross_entropy_rows_float32(rng):
    x = (rng.standard_normal((128, 50)) * 5).astype(np.float32)
    t = rng.integers(0, 50, size=128)
    loss, lse = cross_entropy_forward(x, t, reduction="none")
    x64 = x.astype(np.float64)
    m = x64.max(axis=1)
    ref_lse = m + np.log(np.exp(x64 - m[:, None]).sum(axis=1))
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-7, atol=0)
    assert_ulp(loss, ref_lse - x64[np.arange(128), t], x, np.float32, 4.0, "cross_entropy")


@pytest.mark.parametrize("offset", [0.0, 1e4])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_backward_float32_rows(rng, offset, eps):
    """float32 dlogits of the summed loss against the exact maths, p_c - eps / C off the target
    (p_c = exp(z_c - lse), lse in double).  The kernel takes z - lse as (z - hi) - lo with
    lse = hi + lo in float32 (csrc/crossentropy.c), within 1 ulp of the argument, so p_c is within
    |z - lse| 2^-23 (relative) plus exp's ulp; the coefficient and the subtraction round once each.
    At logits near 1e4 a float32 lse alone (off by up to 5e-4) would miss this by ~1000x."""
    N, C = 64, 200
    x = (offset + rng.standard_normal((N, C)) * 3).astype(np.float32)
    t = rng.integers(0, C, N)
    _, lse = cross_entropy_forward(x, t, label_smoothing=eps, reduction="sum")
    d = cross_entropy_backward(np.array(1.0, np.float32), x, t, lse, label_smoothing=eps, reduction="sum")
    arg = x.astype(np.float64) - lse[:, None]
    p = np.exp(arg)
    ref = p - eps / C
    ref[np.arange(N), t] -= 1 - eps
    ulp = np.spacing(np.float32(1)) / 2  # 2^-24
    bound = (2 * ulp + np.abs(arg) * 2 * ulp) * p + np.spacing(np.abs(ref).astype(np.float32)) \
        + np.spacing(np.float32(eps / C))
    err = np.abs(d.astype(np.float64) - ref)
    off = np.ones_like(d, bool)
    off[np.arange(N), t] = False
    assert (err[off] <= bound[off]).all(), float((err / bound)[off].max())
    # the target's own element is taken in double: p_t - 1 does not lose p_t's digits
    np.testing.assert_allclose(d[~off], ref[~off], rtol=4 * ulp * (1 + np.abs(arg[~off]).max()))


# ----------------------------------------------------------------------------------------------
# VMAX / VMIN (row extrema, compared as integer keys of the float bits)

@pytest.mark.parametrize("dtype", DTYPES)
def test_row_extrema_are_exact_with_signed_zeros_infinities_and_nans(dtype):
    """max |x| of grad_norm(inf) is VMAX / VMIN of csrc/ct_math.h: exact on
    every length (the vector body and the tail), NaN wherever a NaN is,
    whatever its sign and place, +-inf and -0 ordered as numbers."""
    from ctransformer.kernels import grad_norm
    rng = np.random.default_rng(7)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, float(np.finfo(dtype).max),
                         float(np.finfo(dtype).smallest_subnormal), -float(np.finfo(dtype).tiny)], dtype)
    negative_nan = np.copysign(np.array(np.nan, dtype), -1.0)
    for n in list(range(1, 70)) + [255, 256, 257, 1000]:
        for trial in range(4):
            x = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30)).astype(dtype)
            if trial >= 1:  # specials sprinkled over random places
                x[rng.integers(0, n, size=min(n, 3))] = rng.choice(specials, size=min(n, 3))
            if trial == 2:
                x = -np.abs(x)  # an all-negative row: the max is the one nearest 0
            assert grad_norm([x], float("inf")) == float(np.max(np.abs(x))), (n, trial)
            if trial == 3:
                x[rng.integers(0, n)] = negative_nan if n % 2 else np.nan
                assert math.isnan(grad_norm([x], float("inf"))), (n, trial)
                assert np.isnan(softmax_forward(x[None])).all(), (n, trial)
