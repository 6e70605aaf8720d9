"""activation kernels (relu, gelu, gelu_tanh, tanh, sigmoid): NumPy reference,
float64 gradients, torch parity, accumulation, bad input."""
import math

import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import check_grads
from tolerances import F32, F64

KINDS = ["relu", "gelu", "gelu_tanh", "tanh", "sigmoid"]
_erf = np.vectorize(math.erf, otypes=[np.float64])


def reference(x, kind):
    """float64 NumPy forward."""
    x = x.astype(np.float64)
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "gelu":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if kind == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "tanh":
        return np.tanh(x)
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def saved_for(x, kind):
    return K.activation_forward(x, kind) if K.activation_saves_output(kind) else x


def away_from_zero(x):
    """Keep samples off relu's kink so central differences are exact."""
    return np.where(np.abs(x) < 0.1, x + np.sign(x + 1e-3) * 0.2, x)


def test_kinds_and_saves_output():
    assert set(K.ACTIVATION_KINDS) == set(KINDS)
    assert [K.activation_saves_output(k) for k in KINDS] == [False, False, False, True, True]
    with pytest.raises(ValueError, match="activation_saves_output: kind must be one of"):
        K.activation_saves_output("swish")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (7,), (3, 4, 5)])
def test_forward_matches_numpy(rng, kind, dtype, shape):
    x = np.asarray(3 * rng.standard_normal(shape), dtype=dtype)
    out = K.activation_forward(x, kind)
    assert out.dtype == dtype and out.shape == x.shape
    tol = F32 if dtype == np.float32 else F64
    np.testing.assert_allclose(out, reference(x, kind), **tol)


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_float64(rng, kind):
    inputs = dict(x=away_from_zero(2 * rng.standard_normal((3, 5))))

    def grads(dout, x):
        return dict(x=K.activation_backward(dout, saved_for(x, kind), kind))

    check_grads(lambda x: K.activation_forward(x, kind), grads, inputs, ["x"])


def test_relu_slope_at_zero_is_zero():
    x = np.array([-1.0, 0.0, -0.0, 2.0])
    np.testing.assert_array_equal(K.activation_backward(np.ones(4), x, "relu"), [0, 0, 0, 1])


@pytest.mark.parametrize("kind", KINDS)
def test_backward_accumulates(rng, kind):
    x = rng.standard_normal((4, 3))
    dout = rng.standard_normal((4, 3))
    fresh = K.activation_backward(dout, saved_for(x, kind), kind)
    acc = np.full((4, 3), 0.5)
    ret = K.activation_backward(dout, saved_for(x, kind), kind, dinp=acc)
    assert ret is acc
    np.testing.assert_allclose(acc, fresh + 0.5, **F64)


@pytest.mark.parametrize("kind", KINDS)
def test_torch_parity(rng, kind, torch_ref):
    x = (3 * rng.standard_normal((6, 9))).astype(np.float32)
    x[0, :3] = [0.0, -0.0, 1e-30]
    dout = rng.standard_normal((6, 9)).astype(np.float32)

    def torch_side(torch):
        F = torch.nn.functional
        fns = dict(relu=F.relu, gelu=F.gelu, gelu_tanh=lambda t: F.gelu(t, approximate="tanh"),
                   tanh=torch.tanh, sigmoid=torch.sigmoid)
        xt = torch.tensor(x, requires_grad=True)
        yt = fns[kind](xt)
        yt.backward(torch.tensor(dout))
        return dict(y=yt, dx=xt.grad)

    ref = torch_ref(torch_side, inputs=dict(x=x, dout=dout))
    out = K.activation_forward(x, kind)
    np.testing.assert_allclose(out, ref["y"], **F32)
    saved = out if K.activation_saves_output(kind) else x
    np.testing.assert_allclose(K.activation_backward(dout, saved, kind), ref["dx"], **F32)


@pytest.mark.parametrize("kind", KINDS)
def test_nan_propagates_and_extremes_are_finite(kind):
    x = np.array([np.nan, -1e4, 1e4, 0.5], np.float32)
    out = K.activation_forward(x, kind)
    assert np.isnan(out[0])
    assert np.isfinite(out[1:]).all()
    np.testing.assert_allclose(out[1:], reference(x[1:], kind).astype(np.float32), **F32)
    dx = K.activation_backward(np.ones(4, np.float32), saved_for(x, kind), kind)
    assert np.isnan(dx[0]) and np.isfinite(dx[1:]).all()


@pytest.mark.parametrize("kind", KINDS)
def test_views_and_empty(rng, kind):
    base = rng.standard_normal((6, 8))
    view = base.T[::-1, ::2]  # non-contiguous, negative stride
    np.testing.assert_allclose(K.activation_forward(view, kind), reference(view, kind), **F64)
    dview = rng.standard_normal((6, 8)).T[::-1, ::2]
    saved = saved_for(view, kind)
    want = K.activation_backward(np.ascontiguousarray(dview), np.ascontiguousarray(saved), kind)
    np.testing.assert_allclose(K.activation_backward(dview, saved[::1], kind), want, **F64)
    empty = np.zeros((0, 3), np.float32)
    assert K.activation_forward(empty, kind).shape == (0, 3)
    assert K.activation_backward(empty, empty, kind).shape == (0, 3)


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
