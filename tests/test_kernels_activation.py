"""activation kernels (relu, gelu, gelu_tanh, tanh, sigmoid): the bespoke
edge cases -- which kinds save their output, relu's slope at 0, NaN and
extremes, bad input.  Forward against NumPy, float64 gradients, accumulation,
views, empty input and torch parity: tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from kernel_table import ref_activation
from tolerances import F32

KINDS = ["relu", "gelu", "gelu_tanh", "tanh", "sigmoid"]


def saved_for(x, kind):
    return K.activation_forward(x, kind) if K.activation_saves_output(kind) else x


def test_kinds_and_saves_output():
    assert set(K.ACTIVATION_KINDS) == set(KINDS)
    assert [K.activation_saves_output(k) for k in KINDS] == [False, False, False, True, True]
    with pytest.raises(ValueError, match="activation_saves_output: kind must be one of"):
        K.activation_saves_output("swish")


def test_relu_slope_at_zero_is_zero():
    x = np.array([-1.0, 0.0, -0.0, 2.0])
    np.testing.assert_array_equal(K.activation_backward(np.ones(4), x, "relu"), [0, 0, 0, 1])


@pytest.mark.parametrize("kind", KINDS)
def test_nan_propagates_and_extremes_are_finite(kind):
    x = np.array([np.nan, -1e4, 1e4, 0.5], np.float32)
    out = K.activation_forward(x, kind)
    assert np.isnan(out[0])
    assert np.isfinite(out[1:]).all()
    np.testing.assert_allclose(out[1:], ref_activation(x[1:].astype(np.float64), kind).astype(np.float32), **F32)
    dx = K.activation_backward(np.ones(4, np.float32), saved_for(x, kind), kind)
    assert np.isnan(dx[0]) and np.isfinite(dx[1:]).all()


def test_bad_input(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match="activation_forward: kind must be one of 'relu', .*, got 'swish'"):
        K.activation_forward(x, "swish")
    with pytest.raises(TypeError, match="activation_forward: x must have dtype float32 or float64, got int64"):
        K.activation_forward(np.arange(4), "relu")
    with pytest.raises(TypeError, match="activation_forward: x must be a numpy.ndarray, got list"):
        K.activation_forward([1.0], "relu")
    with pytest.raises(TypeError, match="activation_backward: dout must have dtype float64, got float32"):
        K.activation_backward(x.astype(np.float32), x, "tanh")
    with pytest.raises(ValueError, match=r"activation_backward: dout.shape\[1\] must be 4 \(saved's shape\), got 5"):
        K.activation_backward(np.ones((3, 5)), x, "relu")
    with pytest.raises(ValueError, match="activation_backward: dout must have 2 dimensions, got 1"):
        K.activation_backward(np.ones(12), x, "relu")
    with pytest.raises(ValueError, match=r"activation_backward: dinp must have shape \(3, 4\), got \(4, 3\)"):
        K.activation_backward(x, x, "relu", dinp=np.zeros((4, 3)))
    with pytest.raises(ValueError, match="activation_backward: dinp is updated in place"):
        K.activation_backward(x, x, "relu", dinp=np.zeros((4, 3)).T)
    with pytest.raises(TypeError, match="activation_backward: dinp must have dtype float64, got float32"):
        K.activation_backward(x, x, "relu", dinp=np.zeros((3, 4), np.float32))
