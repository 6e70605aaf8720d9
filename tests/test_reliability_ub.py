"""Regression tests of the undefined behaviour UBSan found (issue 16): each
drives NaN (or an empty shape) through one site.  In the normal build they
check the values; under `.ci/sanitize` (UBSan, -fno-sanitize-recover) the
old code aborted the interpreter at these calls."""
import numpy as np
import pytest

from ctransformer import kernels as K

NAN_ROW = np.array([[np.nan, 0.5, -np.inf, np.inf, 1e30, -1e30, -100.0, 100.0]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["sigmoid", "tanh", "gelu_tanh"])
def test_exp_of_nan_in_activations(dtype, kind):
    """ct_math.h's exp converted NaN to int (the range reduction)."""
    out = K.activation_forward(NAN_ROW.astype(dtype), kind)
    assert np.isnan(out[0, 0]) and np.isfinite(out[0, 1])
    grad = K.activation_backward(np.ones_like(out), out if kind != "gelu_tanh" else NAN_ROW.astype(dtype), kind)
    assert np.isnan(grad[0, 0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_and_cross_entropy_of_nan(dtype):
    x = NAN_ROW.astype(dtype)
    assert np.isnan(K.softmax_forward(x)).all()
    assert np.isnan(K.log_softmax_forward(x)).all()
    loss, _ = K.cross_entropy_forward(x, np.array([1]))
    assert np.isnan(loss)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_exp_of_nan(dtype):
    """attention.c's exp left-shifted a negative int for NaN scores."""
    q = np.ones((1, 1, 2, 4), dtype)
    q[0, 0, 0, 0] = np.nan
    k = np.ones((1, 1, 3, 4), dtype)
    out, probs = K.sdpa_forward(q, k, k)
    assert np.isnan(out[0, 0, 0]).all() and np.isfinite(out[0, 0, 1]).all()
    np.testing.assert_allclose(probs[0, 0, 1], np.full(3, 1 / 3), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_recurrent_exp_of_nan(dtype, mode):
    """recurrent.c's exp shifted an int past its width for NaN gates."""
    G = {"lstm": 4, "gru": 3, "rnn_tanh": 1}[mode]
    x = np.zeros((2, 2, 3), dtype)
    x[0, 0, 0] = np.nan
    w_ih = np.ones((G * 2, 3), dtype)
    w_hh = np.ones((G * 2, 2), dtype)
    out, h_n, _, _ = K.rnn_forward(x, None, w_ih, w_hh, None, None, mode)
    assert np.isnan(out[:, 0]).all() and np.isfinite(out[:, 1]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_of_0d_ids(dtype):
    """bind_embedding.c passed NULL (the dims of a 0-d array) to memcpy."""
    w = np.arange(6, dtype=dtype).reshape(3, 2)
    np.testing.assert_array_equal(K.embedding_forward(np.array(2), w), w[2])
    np.testing.assert_array_equal(K.embedding_backward(np.ones(2, dtype), np.array(1), 3),
                                  [[0, 0], [1, 1], [0, 0]])
