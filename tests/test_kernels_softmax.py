"""softmax and log_softmax kernels (last axis): the bespoke edge cases --
huge inputs, -inf and NaN rows, one-element rows, bad input.  Forward against
NumPy, float64 gradients, accumulation, views, empty input and torch parity
(with a partially masked row): tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from tolerances import F32, F64

FORWARD = dict(softmax=K.softmax_forward, log_softmax=K.log_softmax_forward)
BACKWARD = dict(softmax=K.softmax_backward, log_softmax=K.log_softmax_backward)
NINF = -np.inf


def reference(x, which):
    x = x.astype(np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return np.exp(shifted - log_sum) if which == "softmax" else shifted - log_sum


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stable_for_huge_inputs(dtype):
    x = np.array([[1e30, -1e30, 0.0], [1e30, 1e30, -1e30], [-1e30, -1e30, -1e30]], dtype)
    np.testing.assert_array_equal(K.softmax_forward(x), [[1, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]]
                                  if dtype == np.float64 else
                                  np.array([[1, 0, 0], [0.5, 0.5, 0], [1 / 3] * 3], np.float32))
    np.testing.assert_allclose(K.log_softmax_forward(x),
                               [[0, -2e30, -1e30], [-np.log(2), -np.log(2), -2e30], [-np.log(3)] * 3],
                               rtol=1e-6)
    shifted = np.array([[1e4 + 1, 1e4 + 2, 1e4 + 3]], dtype)
    np.testing.assert_allclose(K.softmax_forward(shifted), reference(np.array([[1.0, 2, 3]]), "softmax"),
                               **(F32 if dtype == np.float32 else F64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weights_and_gradient_terms_below_the_smallest_normal_are_zero(rng, dtype):
    """softmax's contract (csrc/softmax.c): a weight below the smallest
    normal number (FLT_MIN / DBL_MIN), which a later product would pay a
    microcode assist for, is 0; the normal ones are the float64 reference's;
    softmax_backward's terms below it are 0 too."""
    tiny = np.finfo(dtype).tiny
    gap = 95.0 if dtype == np.float32 else 720.0  # e^-gap is subnormal in the dtype
    x = np.zeros((4, 6), dtype)
    x[:, 1] = -gap
    x[:, 2] = -gap + 2          # still subnormal
    x[:, 3] = -85.0 if dtype == np.float32 else -700.0  # normal, just above the smallest
    x[:, 4:] = -rng.random((4, 2))  # the maximum stays x_0 = 0
    y = K.softmax_forward(x)
    ref = reference(x, "softmax")
    assert (ref[:, 1:3] > 0).all() and (ref[:, 1:3] < tiny).all()
    assert (y[:, 1:3] == 0).all() and (y[:, 3] >= tiny).all()
    np.testing.assert_allclose(y, ref, **(F32 if dtype == np.float32 else F64))
    # backward: y_i (g_i - dot) for the normal-but-tiny weight of column 3 times a tiny g - dot
    g = np.zeros((4, 6), dtype)
    g[:, 3] = 1e-3 if dtype == np.float32 else 1e-10
    dot = (g * y).sum(-1, keepdims=True)
    terms = y * (g - dot)
    dx = K.softmax_backward(g, y)
    small = (terms != 0) & (np.abs(terms) < tiny)
    assert small.any()                         # the case is exercised
    assert (dx[small] == 0).all()
    np.testing.assert_array_equal(dx[~small], terms[~small])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_neg_inf_row_gives_zeros_and_zero_gradient(rng, dtype):
    x = rng.standard_normal((3, 4)).astype(dtype)
    x[1] = NINF
    dout = rng.standard_normal((3, 4)).astype(dtype)
    y = K.softmax_forward(x)
    np.testing.assert_array_equal(y[1], 0)
    np.testing.assert_allclose(y[[0, 2]], reference(x[[0, 2]], "softmax"), **F32)
    dx = K.softmax_backward(dout, y)
    np.testing.assert_array_equal(dx[1], 0)
    ly = K.log_softmax_forward(x)
    np.testing.assert_array_equal(ly[1], NINF)
    ldx = K.log_softmax_backward(dout, ly)
    np.testing.assert_array_equal(ldx[1], 0)
    assert np.isfinite(dx).all() and np.isfinite(ldx).all()


def test_partially_masked_row_gradient_is_finite(rng):
    x = np.array([[NINF, 0.5, NINF, -1.0]])
    dout = rng.standard_normal((1, 4))
    y, ly = K.softmax_forward(x), K.log_softmax_forward(x)
    np.testing.assert_array_equal(y[0, [0, 2]], 0)
    np.testing.assert_allclose(y[0, [1, 3]], reference(x[:, [1, 3]], "softmax")[0], **F64)
    np.testing.assert_array_equal(ly[0, [0, 2]], NINF)
    assert np.isfinite(K.softmax_backward(dout, y)).all()
    assert np.isfinite(K.log_softmax_backward(dout, ly)).all()


@pytest.mark.parametrize("which", ["softmax", "log_softmax"])
def test_nan_row_is_nan(which):
    x = np.array([[1.0, np.nan, 2.0], [np.nan, NINF, NINF], [NINF, NINF, np.nan], [0.0, 1.0, 2.0]], np.float32)
    y = FORWARD[which](x)
    assert np.isnan(y[:3]).all()
    np.testing.assert_allclose(y[3], reference(x[3], which), **F32)


@pytest.mark.parametrize("which", ["softmax", "log_softmax"])
def test_one_element_row(which):
    np.testing.assert_allclose(FORWARD[which](np.array([7.0])), [1.0 if which == "softmax" else 0.0])


@pytest.mark.parametrize("which", ["softmax", "log_softmax"])
def test_bad_input(rng, which):
    f, b = f"{which}_forward", f"{which}_backward"
    x = rng.standard_normal((3, 4))
    with pytest.raises(TypeError, match=f"{f}: x must have dtype float32 or float64, got int32"):
        FORWARD[which](np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError, match=f"{f}: x must have at least 1 dimensions, got 0"):
        FORWARD[which](np.array(1.0))
    with pytest.raises(TypeError, match=f"{b}: dout must have dtype float64, got float32"):
        BACKWARD[which](x.astype(np.float32), x)
    with pytest.raises(ValueError, match=rf"{b}: dout.shape\[1\] must be 4 \(y's shape\), got 3"):
        BACKWARD[which](np.ones((3, 3)), x)
    with pytest.raises(ValueError, match=f"{b}: dout must have 2 dimensions, got 3"):
        BACKWARD[which](np.ones((1, 3, 4)), x)
    with pytest.raises(ValueError, match=f"{b}: dinp is updated in place"):
        BACKWARD[which](x, x, dinp=np.zeros((4, 3)).T)
