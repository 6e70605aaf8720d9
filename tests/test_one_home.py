"""One home per piece of C maths (issue 12, item 1): kernels that share a
piece of maths run the same C, so they agree BIT FOR BIT, and the shared
primitives keep their written contracts (csrc/ct_math.h, softmax.c's
softmax_row, layernorm.c's row functions).

    add_layernorm(x, r)      == layernorm(x + r)          forward and backward
    bias_act(z, b, gelu)     == activation(z + b, gelu)    forward and backward
    attention / decoding weights == softmax_forward rows
    recurrent gates: exp(-inf) = 0 exactly (no clamp), tanh within its ulp bound
"""
import numpy as np
import pytest

from ctransformer import kernels as K
from test_ct_math import assert_ulp

DTYPES = (np.float32, np.float64)


def identical(a, b):
    """Same dtype, shape and bits (the sign of zeros included); NaN where the other is NaN
    (whatever its payload: a NaN made by 0 * inf in a GEMM is not the input's NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    keep = ~np.isnan(a)
    return a[keep].tobytes() == b[keep].tobytes()


# ---- layer norm: nn.LayerNorm and the post-norm residual path --------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [1, 7, 8, 64, 100, 513, 1000])
@pytest.mark.parametrize("affine", [False, True])
def test_add_layernorm_is_layernorm_of_the_sum(dtype, D, affine, rng):
    # rows around 100 +- 3: where the two implementations used to differ (3.8e-6)
    x = (100 + 3 * rng.standard_normal((33, D))).astype(dtype)
    r = rng.standard_normal((33, D)).astype(dtype)
    r[0] = 0  # a residual of zeros: the row is x itself
    w = rng.standard_normal(D).astype(dtype) if affine else None
    b = rng.standard_normal(D).astype(dtype) if affine else None
    fused = K.add_layernorm_forward(x, r, w, b)
    plain = K.layernorm_forward(x + r, w, b)
    for got, want, name in zip(fused, plain, ("out", "mean", "rstd")):
        assert identical(got, want), f"{name} differs by {np.abs(got - want).max()}"
    dout = rng.standard_normal((33, D)).astype(dtype)
    _, mean, rstd = fused
    g_fused = K.add_layernorm_backward(dout, x, r, w, mean, rstd, with_bias=affine)
    g_plain = K.layernorm_backward(dout, x + r, w, mean, rstd, with_bias=affine)
    for got, want in zip(g_fused, g_plain):
        assert (got is None) == (want is None)
        if got is not None:
            assert identical(got, want), f"gradient differs by {np.abs(got - want).max()}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_layernorm_constant_and_far_rows(dtype):
    # the shared two-pass moments: a constant row normalises to exactly 0 at any magnitude
    x = np.full((3, 16), 1e4, dtype=dtype)
    x[1] = 1e30 if dtype == np.float64 else 1e20
    r = np.zeros_like(x)
    out, _, _ = K.add_layernorm_forward(x, r)
    assert identical(out, K.layernorm_forward(x, None, None)[0])
    assert np.all(out == 0)


# ---- GELU: nn.GELU and the fused feed-forward ------------------------------------------

GELUS = [("gelu", "none"), ("gelu_tanh", "tanh")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind, approximate", GELUS)
def test_bias_act_gelu_is_activation_gelu(dtype, kind, approximate, rng):
    z = np.linspace(-10, 10, 200_001).astype(dtype)  # includes 0 and both tails
    z = np.concatenate([z, np.array([-0.0, np.inf, -np.inf, np.nan], dtype=dtype)])
    assert identical(K.bias_act_forward(z, None, "gelu", approximate), K.activation_forward(z, kind))
    dout = rng.standard_normal(z.shape).astype(dtype)
    dinp, _ = K.bias_act_backward(dout, z, None, "gelu", approximate)
    assert identical(dinp, K.activation_backward(dout, z, kind))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind, approximate", GELUS)
def test_bias_act_with_bias_is_activation_of_the_sum(dtype, kind, approximate, rng):
    z = rng.uniform(-10, 10, (64, 257)).astype(dtype)
    bias = rng.standard_normal(257).astype(dtype)
    assert identical(K.bias_act_forward(z, bias, "gelu", approximate), K.activation_forward(z + bias, kind))
    dout = rng.standard_normal(z.shape).astype(dtype)
    dinp, dbias = K.bias_act_backward(dout, z, bias, "gelu", approximate)
    want = K.activation_backward(dout, z + bias, kind)
    assert identical(dinp, want)
    np.testing.assert_allclose(dbias, want.sum(axis=0), rtol=1e-5 if dtype == np.float32 else 1e-12)


# ---- softmax row: softmax, attention weights, decoding step ----------------------------

def scores_through_identity(rng, dtype, B=2, H=3, T=11, Tq=None):
    """Scores q and an identity K (Tk = Dh = T): q k^T = q exactly, so with scale 1
    the attention weights must be softmax_forward(q)."""
    q = (rng.standard_normal((B, H, Tq or T, T)) * 4).astype(dtype)
    k = np.broadcast_to(np.eye(T, dtype=dtype), (B, H, T, T)).copy()
    return q, k


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T, Tq", [(11, None), (1, None), (7, None), (63, None), (64, None), (70, None), (20, 150)])
def test_attention_weights_are_softmax_rows(dtype, rng, T, Tq):
    """The heads' rows go through softmax_rows (short rows: one exp loop over the
    whole block, in blocks of 64 rows); the bits are softmax_row's."""
    q, k = scores_through_identity(rng, dtype, T=T, Tq=Tq)
    keep = np.ones(q.shape, dtype=bool)
    keep[0, 0, min(2, q.shape[2] - 1), :] = False  # a row with every key hidden: zeros
    keep[1, 2, min(5, q.shape[2] - 1), ::2] = False
    q[0, 1, min(3, q.shape[2] - 1), min(4, T - 1)] = np.nan  # a NaN score: the whole row NaN
    _, probs = K.sdpa_forward(q, k, k, mask=keep, scale=1.0)
    assert identical(probs, K.softmax_forward(np.where(keep, q, -np.inf).astype(dtype)))
    assert np.all(probs[0, 0, min(2, q.shape[2] - 1)] == 0) and np.all(np.isnan(probs[0, 1, min(3, q.shape[2] - 1)]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_decoding_step_weights_are_softmax_rows(dtype, rng):
    q, k = scores_through_identity(rng, dtype)
    q_t = q[:, :, 0, :].copy()  # (B, H, Dh): one query per (row, head)
    out = K.attend_step(q_t, k, k, lengths=k.shape[2], scale=1.0)  # v = I: out = the weights
    assert identical(out, K.softmax_forward(q_t))


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_edges_in_softmax_rows(dtype):
    x = np.array([[0, -np.inf, -np.inf], [-np.inf] * 3, [np.nan, 0, 1], [np.inf, 0, 0]], dtype=dtype)
    y = K.softmax_forward(x)
    assert np.array_equal(y[0], [1, 0, 0]) and np.array_equal(y[1], [0, 0, 0])  # exp(-inf) = 0 exactly
    assert np.all(np.isnan(y[2])) and np.all(np.isnan(y[3]))
    ls = K.log_softmax_forward(x[:1])
    assert ls[0, 0] == 0 and np.all(ls[0, 1:] == -np.inf)


# ---- recurrent gates: the same exp / sigmoid / tanh ------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_lstm_gate_at_minus_inf_is_exactly_zero(dtype):
    # every gate pre-activation -inf: i = f = o = sigmoid(-inf) = 0 and g = tanh(-inf) = -1,
    # so c' = f c + i g = 0 exactly (a clamped exp gave i ~ 1e-38 and c' ~ -1e-38)
    x = np.full((1, 2, 1), -np.inf, dtype=dtype)  # (T, B, I)
    w_ih = np.ones((4, 1), dtype=dtype)
    w_hh = np.zeros((4, 1), dtype=dtype)
    out, h_n, c_n, _ = K.rnn_forward(x, None, w_ih, w_hh, None, None, "lstm")
    assert np.all(c_n == 0) and not np.any(np.signbit(c_n) & (c_n != 0))
    assert np.all(h_n == 0) and np.all(out == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rnn_tanh_gate_keeps_the_tanh_contract(dtype):
    # h = tanh(x * 1 + 0): ct_math.h's tanh, <= 1.5 ulp (float32) / 1.0 ulp (float64) measured
    x = np.concatenate([np.linspace(-12, 12, 40_001), np.geomspace(1e-30, 1e-3, 2_000),
                        [0.0, np.inf, -np.inf]]).astype(dtype)
    xs = x.reshape(1, -1, 1)
    out, _, _, _ = K.rnn_forward(xs, None, np.ones((1, 1), dtype), np.zeros((1, 1), dtype), None, None,
                                 "rnn_tanh")
    got = out.ravel()
    assert_ulp(got, np.tanh(x.astype(np.float64)), x, dtype, 2.0, "rnn tanh gate")
    assert got[-2] == 1 and got[-1] == -1
    assert identical(got, K.activation_forward(x, "tanh"))  # the same tanh as nn.Tanh


@pytest.mark.parametrize("dtype", DTYPES)
def test_lstm_gate_sigmoid_is_the_shared_sigmoid(dtype):
    # one step with c0 = 1 and only the forget gate fed (pre-activation a): i = o = 1/2,
    # g = tanh(0) = 0, so c' = f * 1 + i * 0 = sigmoid(a) exactly.  The gates' fast
    # sigmoid (VSIGMOID_FAST) equals nn.Sigmoid's wherever sigmoid(a) >= FLT_MIN and is
    # exactly 0 below (float32; float64 runs the accurate one everywhere).
    # (no +-inf here: the zero weights of the other gates would make inf * 0 = NaN;
    # the infinite limits are test_lstm_gate_at_minus_inf_is_exactly_zero's)
    a = np.concatenate([np.linspace(-120, 30, 30_001), [-0.0]]).astype(dtype)
    B = a.size
    w_ih = np.array([[0], [1], [0], [0]], dtype=dtype)
    _, _, c_n, _ = K.rnn_forward(a.reshape(1, B, 1), None, w_ih, np.zeros((4, 1), dtype), None, None, "lstm",
                                 c0=np.ones((B, 1), dtype))
    got, want = c_n.ravel(), K.activation_forward(a, "sigmoid")
    normal = want >= np.finfo(dtype).tiny
    assert identical(got[normal], want[normal])
    assert np.all(got[~normal] == 0) and got[-1] == 0.5
