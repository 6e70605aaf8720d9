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


# ------------------------------------------------------------------ every kernel, every argument
def _valid_calls():
    """One valid call per public kernel: (function, positional arguments)."""
    F = np.float32
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(F)
    w = rng.standard_normal((5, 4)).astype(F)
    g = np.ones((3, 5), F)
    q = rng.standard_normal((1, 2, 3, 4)).astype(F)
    d = np.ones(4, F)
    x3, b3, d3 = np.ones((2, 3, 4), F), np.ones((2, 4, 5), F), np.ones((2, 3, 5), F)
    seq, w_ih, w_hh = np.ones((2, 2, 3), F), np.ones((8, 3), F), np.ones((8, 2), F)
    rnn = K.rnn_forward(seq, None, w_ih, w_hh, None, None, "lstm")
    stack = K.rnn_stack_forward(seq, None, [(w_ih, w_hh, None, None)], "lstm")
    probs = K.sdpa_forward(q, q, q)[1]
    ln = K.layernorm_forward(x)
    t = np.array([0, 1, 2])
    lse = K.cross_entropy_forward(g, t)[1]
    query, ipw, ipb, opw, opb = np.ones((2, 3, 4), F), np.ones((12, 4), F), np.ones(12, F), np.ones((4, 4), F), d
    cache = np.zeros((1, 2, 4, 4), F)
    step = np.ones((1, 2, 4), F)
    return [
        (K.linear_forward, (x, w, np.ones(5, F))), (K.linear_backward, (g, x, w)), (K.bmm_forward, (x3, b3)),
        (K.bmm_backward, (d3, x3, b3)), (K.matmul_forward, (x3, b3)), (K.matmul_backward, (d3, x3, b3)),
        (K.activation_forward, (x, "gelu")), (K.activation_backward, (x, x, "gelu")), (K.softmax_forward, (x,)),
        (K.softmax_backward, (x, x)), (K.log_softmax_forward, (x,)), (K.log_softmax_backward, (x, x)),
        (K.layernorm_forward, (x, d, d)), (K.layernorm_backward, (x, x, d, ln[1], ln[2])),
        (K.add_layernorm_forward, (x, x, d, d)), (K.bias_act_forward, (x, d, "gelu")),
        (K.bias_act_backward, (x, x, d, "gelu")), (K.dropout_forward, (x, 0.5, 1)),
        (K.dropout_backward, (x, np.ones((3, 4), bool), 0.5)), (K.embedding_forward, (np.array([0, 1]), w)),
        (K.embedding_backward, (np.ones((2, 4), F), np.array([0, 1]), 5)), (K.cross_entropy_forward, (g, t)),
        (K.cross_entropy_backward, (np.array(1.0, F), g, t, lse)), (K.sdpa_forward, (q, q, q)),
        (K.sdpa_backward, (q, q, q, q, probs)), (K.mha_packed_forward, (query, None, ipw, ipb, opw, opb, 2)),
        (K.rnn_forward, (seq, None, w_ih, w_hh, None, None, "lstm")),
        (K.rnn_backward, (rnn[0], None, None, seq, w_ih, w_hh, rnn[3], "lstm")),
        (K.rnn_stack_forward, (seq, None, [(w_ih, w_hh, None, None)], "lstm")),
        (K.rnn_stack_backward, (stack[0], None, None, stack[3])),
        (K.sgd_step, (np.ones(4, F), d, None, 0.1)), (K.adam_step, (np.ones(4, F), d, np.zeros(4, F), np.zeros(4, F), 1)),
        (K.grad_norm, ([x],)), (K.kv_cache_append, (cache, cache.copy(), step, step, 0)),
        (K.attend_step, (step, cache, cache, 1)), (K.cache_reorder, (cache, np.array([0]))),
        (K.decode_linear, (x[:1], w)),
        (K.decode_layer_step, (x[:1], np.zeros((1, 2, 4, 2), F), np.zeros((1, 2, 4, 2), F), 0, ipw, ipb, opw, opb,
                               w, None, w.T.copy(), d, d, d, d, d)),
    ]


@pytest.mark.parametrize("index", range(len(_valid_calls())))
def test_every_argument_of_every_kernel_replaced_by_garbage(index):
    """None, a string, a nested list, an object in place of any argument:
    TypeError / ValueError / IndexError led by the function's name (never
    an AttributeError from inside a wrapper), or, for a None, acceptance
    (optional arguments)."""
    fn, args = _valid_calls()[index]
    fn(*args)
    for i in range(len(args)):
        for garbage in (None, "x", [[1.0]], object()):
            if args[i] is None and garbage is None:
                continue
            call = list(args)
            call[i] = garbage
            try:
                fn(*call)
            except (TypeError, ValueError, IndexError) as exc:
                assert str(exc).startswith(fn.__name__), (i, garbage, exc)
            else:
                assert garbage is None, (fn.__name__, i, garbage)
