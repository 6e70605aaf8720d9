"""Bad-input messages (issue 16): torch's exception classes in the Tensor
layer, the function the user called named in every kernel error, no bare
int()/float() conversion, integers too wide for C refused clearly."""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer import kernels as K


# ------------------------------------------------------------------ Tensor layer (torch's classes and texts)
def test_reshape_negative_size_other_than_minus_one():
    with pytest.raises(RuntimeError, match="invalid shape dimension -2"):
        ct.ones(4).reshape(-2)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        ct.ones(2, 3).view(-1, -1)
    assert ct.ones(2, 3).reshape(-1).shape == (6,)


@pytest.mark.parametrize("factory", [ct.zeros, ct.ones, ct.empty, ct.randn, ct.rand])
def test_factory_sizes_must_be_ints(factory):
    with pytest.raises(TypeError, match=r"argument 'size' \(position 1\) must be tuple of ints, but found element "
                                        r"of type float at pos 0"):
        factory(1.5)
    with pytest.raises(TypeError, match="found element of type str at pos 1"):
        factory(2, "3")
    assert factory(np.int64(2), 3).shape == (2, 3)


def test_factory_negative_size():
    with pytest.raises(RuntimeError, match=r"Trying to create tensor with negative dimension -1: \[2, -1\]"):
        ct.zeros(2, -1)


def test_chunk_zero():
    with pytest.raises(RuntimeError, match="chunk expects `chunks` to be greater than 0, got: 0"):
        ct.ones(4).chunk(0)
    with pytest.raises(TypeError, match="chunk\\(\\): argument 'chunks'"):
        ct.ones(4).chunk(1.5)
    assert [c.shape[0] for c in ct.ones(5).chunk(2)] == [3, 2]


def test_matmul_none_operand():
    with pytest.raises(TypeError, match=r"matmul\(\): argument 'input' \(position 1\) must be Tensor, not NoneType"):
        ct.matmul(None, ct.ones(2, 2))
    with pytest.raises(TypeError, match=r"argument 'other' \(position 2\) must be Tensor, not str"):
        ct.matmul(ct.ones(2, 2), "x")


# ------------------------------------------------------------------ bindings name the function
@pytest.mark.parametrize("call,name", [
    (lambda: K.activation_forward(np.ones(2), 5), "activation_forward"),
    (lambda: K.layernorm_forward(np.ones((2, 2)), eps="x"), "layernorm_forward"),
    (lambda: K.bmm_forward(np.ones((1, 2, 2))), "bmm_forward"),
    (lambda: K.softmax_backward(np.ones(2)), "softmax_backward"),
    (lambda: K.log_softmax_forward(), "log_softmax_forward"),
    (lambda: K.sgd_step(np.ones(2), np.ones(2), None, "fast"), "sgd_step"),
])
def test_binding_argument_errors_name_the_function(call, name):
    with pytest.raises(TypeError, match=rf"^{name}\(\)"):
        call()


# ------------------------------------------------------------------ scalar arguments
def test_seed_float_is_refused_not_truncated():
    q = np.ones((1, 1, 2, 2))
    with pytest.raises(TypeError, match="sdpa_forward: seed must be an int, got float"):
        K.sdpa_forward(q, q, q, dropout_p=0.5, seed=1.5)
    with pytest.raises(ValueError, match=r"sdpa_forward: seed must be 0 <= seed < 2\*\*64, got -1"):
        K.sdpa_forward(q, q, q, dropout_p=0.5, seed=-1)
    with pytest.raises(TypeError, match="sdpa_forward: dropout_p must be a float, got str"):
        K.sdpa_forward(q, q, q, dropout_p="0.5")
    K.sdpa_forward(q, q, q, dropout_p=np.float32(0.5), seed=np.uint64(2 ** 64 - 1))


def test_add_layernorm_eps_inf_refused_like_layernorm():
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match="add_layernorm_forward: eps must be >= 0 and finite, got inf"):
        K.add_layernorm_forward(x, x, eps=float("inf"))
    with pytest.raises(ValueError, match="layernorm_forward: eps must be finite and >= 0, got inf"):
        K.layernorm_forward(x, eps=float("inf"))


def test_integers_too_wide_for_c():
    cache = np.zeros((1, 1, 4, 2))
    step = np.zeros((1, 1, 2))
    with pytest.raises(IndexError, match=r"kv_cache_append: pos\[0\] must be in \[0, 3\] .* got 1180591620717411303424"):
        K.kv_cache_append(cache, cache.copy(), step, step, 2 ** 70)
    with pytest.raises(TypeError, match="cache_reorder: length must be an int, got float"):
        K.cache_reorder(cache, np.array([0]), 1.5)
    with pytest.raises(ValueError, match=r"cache_reorder: length must be in \[0, 4\] \(cache.shape\[2\]\), got 2\*\*70"
                       .replace("2\\*\\*70", str(2 ** 70))):
        K.cache_reorder(cache, np.array([0]), 2 ** 70)
    with pytest.raises(ValueError, match=r"set_num_threads: n must be < 2\*\*31, got"):
        ct.set_num_threads(2 ** 70)


# ------------------------------------------------------------------ rnn_stack_backward validates its gradients
def _stack(mode="lstm", layers=2):
    rng = np.random.default_rng(0)
    T, B, I, H = 3, 2, 4, 5
    G = {"lstm": 4, "gru": 3, "rnn_tanh": 1}[mode]
    weights = [(rng.standard_normal((G * H, I if layer == 0 else H)), rng.standard_normal((G * H, H)),
                None, None) for layer in range(layers)]
    x = rng.standard_normal((T, B, I))
    out, h_n, c_n, cache = K.rnn_stack_forward(x, None, weights, mode, num_layers=layers)
    return out, h_n, cache


def test_rnn_stack_backward_checks_shapes_and_names_itself():
    out, h_n, cache = _stack()
    L, B, H = h_n.shape
    with pytest.raises(ValueError, match=r"rnn_stack_backward: dh_n must have shape \(2, 2, 5\) .* got \(2, 2, 6\)"):
        K.rnn_stack_backward(out, np.zeros((L, B, H + 1)), None, cache)
    with pytest.raises(ValueError, match=r"rnn_stack_backward: dc_n must have shape \(2, 2, 5\) .* got \(3, 2, 5\)"):
        K.rnn_stack_backward(out, None, np.zeros((L + 1, B, H)), cache)
    with pytest.raises(ValueError, match=r"rnn_stack_backward: dout must have shape \(3, 2, 5\)"):
        K.rnn_stack_backward(out[:, :, :2], None, None, cache)
    with pytest.raises(TypeError, match="rnn_stack_backward: dout must be a numpy.ndarray or None, got list"):
        K.rnn_stack_backward([1.0], None, None, cache)
    dx, dh0, dc0, wgrads = K.rnn_stack_backward(out, h_n, None, cache)
    assert dx.shape == (3, 2, 4) and dh0.shape == h_n.shape and dc0.shape == h_n.shape


def test_rnn_stack_inner_errors_lead_with_the_stack_function():
    out, h_n, cache = _stack("gru")
    with pytest.raises(ValueError, match="rnn_stack_backward: dc_n must be None for mode 'gru'"):
        K.rnn_stack_backward(out, None, np.zeros_like(h_n), cache)
    with pytest.raises(TypeError, match=r"^rnn_stack_backward: rnn_backward: dout must have dtype float64"):
        K.rnn_stack_backward(out.astype(np.float32), None, None, cache)
