"""Property-based tests of every kernel family (hypothesis).

For random shapes (including 0, 1 and primes), random layouts of every input
(C-contiguous, strided, negative-stride, unaligned, read-only, big-endian,
Fortran order) and values with NaN / +-Inf / +-1e30 mixed in, each kernel's
result equals a float64 NumPy reference (within the float32 or float64
tolerance of the computation) or the call raises a clear exception
(TypeError / ValueError / IndexError naming the function) - never a crash,
never a silently different answer.

Comparison with non-finite values: where the reference is finite the result
must be close to it, where it is +-Inf the result must be the same infinity,
where it is NaN the result must be NaN.

Example budget: the ``ci`` profile (default) runs ``CT_HYPOTHESIS_EXAMPLES``
(default 50) examples per test; ``HYPOTHESIS_PROFILE=long`` runs 2,000 per
test, for a local fuzzing session (see CONTRIBUTING.md).
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from hypothesis import HealthCheck, given, settings   # a test dependency (pyproject's [test])
from hypothesis import strategies as st

from ctransformer import kernels as K

settings.register_profile(
    "ci", max_examples=int(os.environ.get("CT_HYPOTHESIS_EXAMPLES", "50")), deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DTYPES = (np.float32, np.float64)
SIZES = (0, 1, 2, 3, 5, 7, 13)
LAYOUTS = ("c", "strided", "reversed", "unaligned", "readonly", "bigendian", "fortran")
SPECIALS = (np.nan, np.inf, -np.inf, 1e30, -1e30)
TOL = {np.float32: (2e-4, 2e-5), np.float64: (1e-10, 1e-12)}


# ------------------------------------------------------------------ strategies
def _values(draw, shape, dtype, specials, scale=1.0, big=1e30):
    """Random values of `shape`; with `specials` some become NaN/+-Inf/+-big."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    x = np.array(rng.standard_normal(shape), dtype=np.float64)   # a 0-d array, not a scalar, for shape ()
    x *= scale
    if specials and x.size:
        count = draw(st.integers(1, max(1, x.size // 3)))
        flat = x.reshape(-1)
        for i in rng.integers(0, x.size, count):
            flat[i] = draw(st.sampled_from(SPECIALS))
            if abs(flat[i]) == 1e30:
                flat[i] = math.copysign(big, flat[i])
    return x.astype(dtype)


def _layout(draw, x: np.ndarray) -> np.ndarray:
    """The same values of x in a random memory layout (equal to x by value)."""
    kind = draw(st.sampled_from(LAYOUTS))
    if kind == "strided" and x.ndim:
        big = np.empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
        big[..., ::2] = x
        return big[..., ::2]
    if kind == "reversed" and x.ndim:
        return np.ascontiguousarray(x[..., ::-1])[..., ::-1]
    if kind == "unaligned":
        buf = bytearray(x.nbytes + 1)
        y = np.frombuffer(buf, x.dtype, count=x.size, offset=1).reshape(x.shape)
        y[...] = x
        return y
    if kind == "readonly":
        y = x.copy()
        y.setflags(write=False)
        return y
    if kind == "bigendian":
        return x.astype(x.dtype.newbyteorder(">"))
    if kind == "fortran" and x.ndim:   # (asfortranarray makes a 0-d array 1-d)
        return np.asfortranarray(x)
    return x


@st.composite
def arrays(draw, shape, dtype, specials=None, scale=1.0, big=1e30):
    """(value as float64 for the reference, the array in a random layout)."""
    if specials is None:
        specials = draw(st.booleans())
    x = _values(draw, shape, dtype, specials, scale, big)
    return x.astype(np.float64), _layout(draw, x)


def shapes(min_dims=1, max_dims=3):
    return st.lists(st.sampled_from(SIZES), min_size=min_dims, max_size=max_dims).map(tuple)


# ------------------------------------------------------------------ comparison
def assert_matches(out, ref, dtype, atol_scale=None, what=""):
    """out equals the float64 reference within the dtype's tolerance, with
    non-finite values matched exactly; atol_scale (array or float) scales
    the absolute tolerance (the size of the terms summed)."""
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    assert out.shape == ref.shape, f"{what}: shape {out.shape} != {ref.shape}"
    with np.errstate(over="ignore", invalid="ignore"):
        ref = ref.astype(dtype).astype(np.float64)   # what the dtype can hold
    rtol, atol = TOL[dtype]
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(out), nan, err_msg=f"{what}: NaN positions")
    inf = np.isinf(ref)
    np.testing.assert_array_equal(out[inf], ref[inf], err_msg=f"{what}: infinities")
    fin = ~nan & ~inf
    scale = 1.0 if atol_scale is None else np.broadcast_to(np.asarray(atol_scale, np.float64), ref.shape)[fin]
    with np.errstate(invalid="ignore"):
        bound = atol * scale + rtol * np.abs(ref[fin])
        bad = ~(np.abs(out[fin] - ref[fin]) <= bound)
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} differ, e.g. {out[fin][bad][:3]} "
                           f"vs {ref[fin][bad][:3]}")


def raises_clearly(fn, exc=(TypeError, ValueError, IndexError)):
    with pytest.raises(exc) as info:
        fn()
    assert info.value.args and ":" in str(info.value)
    return info.value


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


# ------------------------------------------------------------------ activation
ACT = {
    "relu": lambda x: np.where(np.isnan(x), x, np.maximum(x, 0)),
    "tanh": np.tanh,
    "sigmoid": lambda x: 0.5 * (1 + np.tanh(0.5 * x)),
    # gelu(-inf) = -inf * 0 = NaN, as torch
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
}


@given(st.data(), shapes(0, 3), st.sampled_from(DTYPES), st.sampled_from(sorted(ACT)))
def test_activation_forward(data, shape, dtype, kind):
    xr, x = data.draw(arrays(shape, dtype))
    with np.errstate(all="ignore"):
        ref = ACT[kind](xr)
    assert_matches(K.activation_forward(x, kind), ref, dtype, what=kind)


# ------------------------------------------------------------------ softmax
@given(st.data(), shapes(1, 3), st.sampled_from(DTYPES), st.booleans())
def test_softmax_forward(data, shape, dtype, log):
    xr, x = data.draw(arrays(shape, dtype, specials=False, scale=5.0))
    with np.errstate(all="ignore"):
        m = xr.max(-1, keepdims=True) if xr.shape[-1] else 0
        e = np.exp(xr - m)
        s = e.sum(-1, keepdims=True)
        ref = (xr - m - np.log(s)) if log else e / s
    out = (K.log_softmax_forward if log else K.softmax_forward)(x)
    assert_matches(out, ref, dtype, what="log_softmax" if log else "softmax")


@given(st.data(), st.sampled_from(DTYPES))
def test_softmax_non_finite_rows(data, dtype):
    """A row with NaN gives NaN; -inf entries get probability 0; a row of
    +inf is NaN (inf - inf), as torch."""
    xr, x = data.draw(arrays((3, 5), dtype, specials=True))
    out = K.softmax_forward(x)
    with np.errstate(all="ignore"):
        m = xr.max(-1, keepdims=True)
        ref = np.exp(xr - m) / np.exp(xr - m).sum(-1, keepdims=True)
    assert_matches(out, ref, dtype, what="softmax with specials")


# ------------------------------------------------------------------ layernorm
@given(st.data(), shapes(1, 3), st.sampled_from(DTYPES), st.booleans())
def test_layernorm_forward(data, shape, dtype, affine):
    xr, x = data.draw(arrays(shape, dtype, specials=False, scale=data.draw(st.sampled_from([1.0, 1e4]))))
    D = shape[-1]
    wr, w = data.draw(arrays((D,), dtype, specials=False))
    br, b = data.draw(arrays((D,), dtype, specials=False))
    out = K.layernorm_forward(x, w if affine else None, b if affine else None)[0]
    mu = xr.mean(-1, keepdims=True) if D else np.zeros(shape[:-1] + (1,))
    var = ((xr - mu) ** 2).mean(-1, keepdims=True) if D else np.zeros(shape[:-1] + (1,))
    xhat = (xr - mu) / np.sqrt(var + 1e-5)
    ref = xhat * wr + br if affine else xhat
    assert_matches(out, ref, dtype, atol_scale=10.0 * (np.abs(wr) + 1), what="layernorm")


@given(st.data(), st.sampled_from(DTYPES), st.sampled_from([1e10, 1e20, 1e30, -1e30]))
def test_layernorm_constant_rows(data, dtype, magnitude):
    D = data.draw(st.sampled_from([1, 2, 7, 13]))
    x = _layout(data.draw, np.full((2, D), magnitude, dtype))
    br, b = data.draw(arrays((D,), dtype, specials=False))
    np.testing.assert_array_equal(K.layernorm_forward(x, None, b)[0], np.broadcast_to(br.astype(dtype), (2, D)))


# ------------------------------------------------------------------ linear / bmm
@given(st.data(), shapes(1, 3), st.sampled_from(SIZES), st.sampled_from(DTYPES), st.booleans())
def test_linear_forward(data, shape, N, dtype, with_bias):
    big = 1e30 if dtype == np.float64 else 1e15   # float32 products of 1e30 overflow in any order
    xr, x = data.draw(arrays(shape, dtype, big=big))
    Kd = shape[-1]
    wr, w = data.draw(arrays((N, Kd), dtype, big=big))
    br, b = data.draw(arrays((N,), dtype, big=big))
    out = K.linear_forward(x, w, b if with_bias else None)
    with np.errstate(all="ignore"):
        ref = xr @ wr.T + (br if with_bias else 0)
        scale = np.abs(xr) @ np.abs(wr).T + (np.abs(br) if with_bias else 0) + 1
    assert_matches(out, ref, dtype, atol_scale=scale, what="linear_forward")
    assert_matches(K.decode_linear(x, w, b if with_bias else None), ref, dtype, atol_scale=scale,
                   what="decode_linear")


@given(st.data(), st.sampled_from(SIZES), st.sampled_from(SIZES), st.sampled_from(SIZES),
       st.sampled_from(SIZES), st.sampled_from(DTYPES))
def test_linear_backward(data, M, Kd, N, _, dtype):
    xr, x = data.draw(arrays((M, Kd), dtype, specials=False))
    wr, w = data.draw(arrays((N, Kd), dtype, specials=False))
    gr, g = data.draw(arrays((M, N), dtype, specials=False))
    dx, dw, db = K.linear_backward(g, x, w)
    assert_matches(dx, gr @ wr, dtype, atol_scale=np.abs(gr) @ np.abs(wr) + 1, what="dinp")
    assert_matches(dw, gr.T @ xr, dtype, atol_scale=np.abs(gr).T @ np.abs(xr) + 1, what="dweight")
    assert_matches(db, gr.sum(0), dtype, atol_scale=np.abs(gr).sum(0) + 1, what="dbias")


@given(st.data(), st.sampled_from([0, 1, 2, 3]), st.sampled_from([0, 1, 2, 3]), st.sampled_from(SIZES),
       st.sampled_from(SIZES), st.sampled_from(SIZES), st.sampled_from(DTYPES))
def test_bmm_forward(data, ba, bb, M, Kd, N, dtype):
    if ba != bb and 1 not in (ba, bb):
        a = np.ones((ba, M, Kd), dtype)
        raises_clearly(lambda: K.bmm_forward(a, np.ones((bb, Kd, N), dtype)))
        return
    ar, a = data.draw(arrays((ba, M, Kd), dtype, specials=False))
    br, b = data.draw(arrays((bb, Kd, N), dtype, specials=False))
    ref = np.matmul(ar, br)
    assert_matches(K.bmm_forward(a, b), ref, dtype, atol_scale=np.matmul(np.abs(ar), np.abs(br)) + 1, what="bmm")


# ------------------------------------------------------------------ embedding
@given(st.data(), shapes(0, 2), st.sampled_from([1, 2, 7]), st.sampled_from([0, 1, 5]), st.sampled_from(DTYPES),
       st.sampled_from([np.int64, np.int32, np.uint8, np.int16]))
def test_embedding(data, shape, V, D, dtype, id_dtype):
    wr, w = data.draw(arrays((V, D), dtype))
    ids = np.asarray(data.draw(st.lists(st.integers(0, V - 1), min_size=math.prod(shape),
                                        max_size=math.prod(shape))), id_dtype).reshape(shape)
    ids_l = _layout(data.draw, ids)
    assert_matches(K.embedding_forward(ids_l, w), wr[ids.astype(np.int64)], dtype, what="embedding_forward")
    gr, g = data.draw(arrays(shape + (D,), dtype, specials=False))
    ref = np.zeros((V, D))
    np.add.at(ref, ids.astype(np.int64).reshape(-1), gr.reshape(ids.size, D))
    assert_matches(K.embedding_backward(g, ids_l, V), ref, dtype, atol_scale=np.abs(ref) + 1,
                   what="embedding_backward")
    bad = ids.astype(np.int64).copy()
    if bad.size:
        bad.reshape(-1)[0] = V
        raises_clearly(lambda: K.embedding_forward(bad, w), IndexError)


# ------------------------------------------------------------------ cross-entropy
@given(st.data(), st.sampled_from([0, 1, 2, 5]), st.sampled_from([1, 2, 7]), st.sampled_from(DTYPES),
       st.sampled_from(["mean", "sum", "none"]))
def test_cross_entropy_forward(data, N, C, dtype, reduction):
    xr, x = data.draw(arrays((N, C), dtype, specials=False, scale=3.0))
    t = np.asarray(data.draw(st.lists(st.sampled_from(list(range(C)) + [-100]), min_size=N, max_size=N)),
                   np.int64)
    loss, _ = K.cross_entropy_forward(x, _layout(data.draw, t), reduction=reduction)
    m = xr.max(-1, keepdims=True) if N else np.zeros((0, 1))
    lse = (m + np.log(np.exp(xr - m).sum(-1, keepdims=True)))[:, 0]
    keep = t != -100
    nll = np.where(keep, lse - xr[np.arange(N), np.where(keep, t, 0)], 0.0)
    with np.errstate(invalid="ignore"):
        ref = {"none": nll, "sum": nll.sum(), "mean": nll.sum() / keep.sum() if keep.sum() else np.nan}[reduction]
    assert_matches(loss, ref, dtype, atol_scale=10, what="cross_entropy")


# ------------------------------------------------------------------ dropout
@given(st.data(), shapes(0, 3), st.sampled_from(DTYPES), st.sampled_from([0.0, 0.1, 0.5, 1.0]),
       st.integers(0, 2 ** 64 - 1))
def test_dropout(data, shape, dtype, p, seed):
    xr, x = data.draw(arrays(shape, dtype))
    out, mask = K.dropout_forward(x, p, seed)
    assert mask.dtype == np.bool_ and mask.shape == shape
    if p == 0:
        assert mask.all()
    with np.errstate(all="ignore"):
        ref = np.where(mask, xr * (1.0 / (1 - p) if p < 1 else 0.0), xr * 0.0)
    assert_matches(out, ref, dtype, what="dropout")
    again, mask2 = K.dropout_forward(np.ascontiguousarray(x), p, seed)
    np.testing.assert_array_equal(mask, mask2)


# ------------------------------------------------------------------ attention
@given(st.data(), st.sampled_from([0, 1, 2]), st.sampled_from([1, 2]), st.sampled_from([0, 1, 3, 5]),
       st.sampled_from([1, 3, 5]), st.sampled_from([1, 4]), st.sampled_from(DTYPES), st.booleans())
def test_sdpa_forward(data, B, H, Tq, Tk, Dh, dtype, causal):
    qr, q = data.draw(arrays((B, H, Tq, Dh), dtype, specials=False))
    kr, k = data.draw(arrays((B, H, Tk, Dh), dtype, specials=False))
    vr, v = data.draw(arrays((B, H, Tk, Dh), dtype, specials=False))
    out, probs = K.sdpa_forward(q, k, v, is_causal=causal)
    s = qr @ np.swapaxes(kr, -1, -2) / math.sqrt(Dh)
    if causal:
        s = np.where(np.tril(np.ones((Tq, Tk), bool)), s, -np.inf)
    with np.errstate(all="ignore"):
        m = s.max(-1, keepdims=True) if Tk else s
        e = np.exp(s - m)
        p = e / e.sum(-1, keepdims=True)
    assert_matches(probs, p, dtype, what="sdpa probs")
    assert_matches(out, p @ vr, dtype, atol_scale=10, what="sdpa out")


# ------------------------------------------------------------------ decode
@given(st.data(), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2]), st.sampled_from([1, 4, 7]),
       st.sampled_from([1, 3]), st.sampled_from(DTYPES))
def test_decode_cache_and_attend(data, B, H, Tmax, D, dtype):
    ck = np.zeros((B, H, Tmax, D), dtype)
    cv = np.zeros((B, H, Tmax, D), dtype)
    ref_k = np.zeros((B, H, Tmax, D))
    ref_v = np.zeros((B, H, Tmax, D))
    length = data.draw(st.integers(1, Tmax))
    for pos in range(length):
        kr, k = data.draw(arrays((B, H, D), dtype, specials=False))
        vr, v = data.draw(arrays((B, H, D), dtype, specials=False))
        K.kv_cache_append(ck, cv, k, v, pos)
        ref_k[:, :, pos], ref_v[:, :, pos] = kr, vr
    assert_matches(ck, ref_k, dtype, what="cache_k")
    qr, q = data.draw(arrays((B, H, D), dtype, specials=False))
    out = K.attend_step(q, ck, cv, length)
    s = np.einsum("bhd,bhtd->bht", qr, ref_k[:, :, :length]) / math.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    assert_matches(out, np.einsum("bht,bhtd->bhd", p, ref_v[:, :, :length]), dtype, atol_scale=10,
                   what="attend_step")
    # the cache is written in place: a view or a swapped copy is refused, never misread
    view = ck[:, :, ::-1]
    if not view.flags.c_contiguous:
        raises_clearly(lambda: K.kv_cache_append(view, cv, q, q, 0), ValueError)
    raises_clearly(lambda: K.kv_cache_append(ck.astype(ck.dtype.newbyteorder(">")), cv, q, q, 0), ValueError)


@given(st.data(), st.sampled_from([0, 1, 2, 3]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 5, 13]),
       st.sampled_from(DTYPES))
def test_beam_step(data, B, k, V, dtype):
    """beam_step in any layout of the logits, NaN / +-inf / huge values
    included: the NumPy steps it replaced (log_softmax_forward of the logits
    as float64, finished beams' pad continuation, the candidates, the first
    k of a stable argsort of -candidates), bit for bit."""
    xr, logits = data.draw(arrays((B * k, V), dtype))
    scores = np.array(data.draw(st.lists(st.sampled_from([0.0, -1.5, -3.25, -np.inf, -1e30]),
                                         min_size=B * k, max_size=B * k))).reshape(B, k)
    done = np.array(data.draw(st.lists(st.booleans(), min_size=B * k, max_size=B * k)), bool)
    pad_id = data.draw(st.integers(0, V - 1))
    new_scores, origin, tok = K.beam_step(logits, scores, done, pad_id)
    logp = K.log_softmax_forward(xr)  # (xr: the logits as float64)
    logp[done] = -np.inf
    logp[done, pad_id] = 0.0
    cand = (scores.reshape(B * k, 1) + logp).reshape(B, k * V)
    best = np.argsort(-cand, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(new_scores, np.take_along_axis(cand, best, axis=1))
    np.testing.assert_array_equal(origin, (np.arange(B)[:, None] * k + best // V).reshape(-1))
    np.testing.assert_array_equal(tok, (best % V).reshape(-1))
    raises_clearly(lambda: K.beam_step(logits, scores, done, V), ValueError)


# ------------------------------------------------------------------ fused
@given(st.data(), shapes(1, 3), st.sampled_from(DTYPES), st.sampled_from(["relu", "gelu"]))
def test_bias_act_forward(data, shape, dtype, act):
    xr, x = data.draw(arrays(shape, dtype))
    br, b = data.draw(arrays(shape[-1:], dtype, specials=False))
    with np.errstate(all="ignore"):
        ref = ACT[act](xr + br)
    assert_matches(K.bias_act_forward(x, b, act), ref, dtype, atol_scale=10, what="bias_act")


@given(st.data(), shapes(1, 3), st.sampled_from(DTYPES))
def test_add_layernorm_forward(data, shape, dtype):
    xr, x = data.draw(arrays(shape, dtype, specials=False))
    rr, r = data.draw(arrays(shape, dtype, specials=False))
    wr, w = data.draw(arrays(shape[-1:], dtype, specials=False))
    br, b = data.draw(arrays(shape[-1:], dtype, specials=False))
    out = K.add_layernorm_forward(x, r, w, b)[0]
    h = (xr.astype(dtype) + rr.astype(dtype)).astype(np.float64)   # the sum rounds to the dtype, as torch
    D = shape[-1]
    mu = h.mean(-1, keepdims=True) if D else 0
    var = ((h - mu) ** 2).mean(-1, keepdims=True) if D else 0
    ref = (h - mu) / np.sqrt(var + 1e-5) * wr + br
    assert_matches(out, ref, dtype, atol_scale=10.0 * (np.abs(wr) + 1), what="add_layernorm")


# ------------------------------------------------------------------ recurrent
def _rnn_reference(mode, x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    sig = lambda z: 0.5 * (1 + np.tanh(0.5 * z))  # noqa: E731
    h, c = h0.copy(), c0.copy()
    outs = []
    for xt in x:
        gi = xt @ w_ih.T + b_ih
        gh = h @ w_hh.T + b_hh
        if mode == "rnn_tanh":
            h = np.tanh(gi + gh)
        elif mode == "lstm":
            i, f, g, o = np.split(gi + gh, 4, axis=-1)
            c = sig(f) * c + sig(i) * np.tanh(g)
            h = sig(o) * np.tanh(c)
        else:
            ir, iz, in_ = np.split(gi, 3, axis=-1)
            hr, hz, hn = np.split(gh, 3, axis=-1)
            r, z = sig(ir + hr), sig(iz + hz)
            n = np.tanh(in_ + r * hn)
            h = (1 - z) * n + z * h
        outs.append(h)
    return np.stack(outs) if outs else np.zeros((0,) + h0.shape), h, c


@given(st.data(), st.sampled_from(["rnn_tanh", "lstm", "gru"]), st.sampled_from([0, 1, 3]),
       st.sampled_from([0, 1, 2]), st.sampled_from([1, 3]), st.sampled_from([1, 2, 5]), st.sampled_from(DTYPES))
def test_rnn_forward(data, mode, T, B, I, H, dtype):
    G = {"rnn_tanh": 1, "lstm": 4, "gru": 3}[mode]
    xr, x = data.draw(arrays((T, B, I), dtype, specials=False))
    hr, h0 = data.draw(arrays((B, H), dtype, specials=False))
    cr, c0 = data.draw(arrays((B, H), dtype, specials=False))
    w = [data.draw(arrays(s, dtype, specials=False, scale=0.5)) for s in [(G * H, I), (G * H, H), (G * H,), (G * H,)]]
    out, h_n, c_n, _ = K.rnn_forward(x, h0, *[a for _, a in w], mode, c0 if mode == "lstm" else None)
    ref_out, ref_h, ref_c = _rnn_reference(mode, xr, hr, cr if mode == "lstm" else np.zeros_like(hr),
                                           *[r for r, _ in w])
    assert_matches(out, ref_out, dtype, atol_scale=10, what=f"{mode} out")
    assert_matches(h_n, ref_h, dtype, atol_scale=10, what=f"{mode} h_n")
    if mode == "lstm":
        assert_matches(c_n, ref_c, dtype, atol_scale=10, what="lstm c_n")


# ------------------------------------------------------------------ optim
@given(st.data(), shapes(0, 2), st.sampled_from(DTYPES), st.sampled_from([0.0, 0.9]), st.booleans())
def test_sgd_step(data, shape, dtype, momentum, nesterov):
    pr, _ = data.draw(arrays(shape, dtype))
    gr, g = data.draw(arrays(shape, dtype))
    param = pr.astype(dtype)
    nesterov = nesterov and momentum > 0
    buf = np.zeros(shape, dtype) if momentum else None
    K.sgd_step(param, g, buf, 0.1, momentum=momentum, nesterov=nesterov, weight_decay=0.01, first_step=True)
    with np.errstate(all="ignore"):
        d = gr + 0.01 * pr
        if momentum:
            d = d + momentum * d if nesterov else d
        assert_matches(param, pr - 0.1 * d, dtype, atol_scale=np.abs(pr) + 1, what="sgd param")
    raises_clearly(lambda: K.sgd_step(param.astype(param.dtype.newbyteorder(">")), g, None, 0.1), ValueError)


@given(st.data(), shapes(0, 2), st.sampled_from(DTYPES), st.booleans())
def test_adam_step(data, shape, dtype, decoupled):
    pr, _ = data.draw(arrays(shape, dtype, specials=False))
    gr, g = data.draw(arrays(shape, dtype, specials=False))
    param = pr.astype(dtype)
    m, v = np.zeros(shape, dtype), np.zeros(shape, dtype)
    K.adam_step(param, g, m, v, 1, lr=0.01, weight_decay=0.1, decoupled_weight_decay=decoupled)
    p = pr * (1 - 0.01 * 0.1) if decoupled else pr
    grad = gr if decoupled else gr + 0.1 * pr
    m_ref = 0.1 * grad
    v_ref = 0.001 * grad * grad
    ref = p - 0.01 * (m_ref / 0.1) / (np.sqrt(v_ref / 0.001) + 1e-8)
    assert_matches(param, ref, dtype, atol_scale=10, what="adam param")
    assert_matches(m, m_ref, dtype, what="adam exp_avg")


# ------------------------------------------------------------------ backward passes
ACT_GRAD = {   # derivative from the input x
    "relu": lambda x: (x > 0).astype(np.float64),
    "tanh": lambda x: 1 - np.tanh(x) ** 2,
    "sigmoid": lambda x: ACT["sigmoid"](x) * (1 - ACT["sigmoid"](x)),
    "gelu": lambda x: 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi),
}


@given(st.data(), shapes(0, 3), st.sampled_from(DTYPES), st.sampled_from(sorted(ACT_GRAD)), st.booleans())
def test_activation_backward(data, shape, dtype, kind, accumulate):
    xr, x = data.draw(arrays(shape, dtype, specials=False, scale=3.0))
    gr, g = data.draw(arrays(shape, dtype, specials=False))
    saved = K.activation_forward(x, kind) if K.activation_saves_output(kind) else x
    given_acc = np.full(shape, 0.5, dtype) if accumulate else None
    out = K.activation_backward(g, saved, kind, given_acc)
    ref = gr * ACT_GRAD[kind](xr) + (0.5 if accumulate else 0)
    assert_matches(out, ref, dtype, atol_scale=10, what=f"{kind} backward")
    if accumulate:
        assert out is given_acc


@given(st.data(), shapes(1, 3), st.sampled_from(DTYPES), st.booleans())
def test_softmax_backward(data, shape, dtype, log):
    xr, x = data.draw(arrays(shape, dtype, specials=False, scale=3.0))
    gr, g = data.draw(arrays(shape, dtype, specials=False))
    y = (K.log_softmax_forward if log else K.softmax_forward)(x)
    yr = y.astype(np.float64)
    if log:
        ref = gr - np.exp(yr) * gr.sum(-1, keepdims=True)
        out = K.log_softmax_backward(_layout(data.draw, g), _layout(data.draw, y))
    else:
        ref = yr * (gr - (gr * yr).sum(-1, keepdims=True))
        out = K.softmax_backward(_layout(data.draw, g), _layout(data.draw, y))
    assert_matches(out, ref, dtype, atol_scale=np.abs(gr).sum(-1, keepdims=True) + 1, what="softmax backward")


@given(st.data(), shapes(1, 3), st.sampled_from(DTYPES))
def test_layernorm_backward(data, shape, dtype):
    xr, x = data.draw(arrays(shape, dtype, specials=False))
    wr, w = data.draw(arrays(shape[-1:], dtype, specials=False))
    gr, g = data.draw(arrays(shape, dtype, specials=False))
    _, mean, rstd = K.layernorm_forward(x, w, None)
    dx, dw, db = K.layernorm_backward(g, x, w, mean, rstd)
    D = shape[-1]
    mu = xr.mean(-1, keepdims=True) if D else np.zeros(shape[:-1] + (1,))
    rs = 1 / np.sqrt(((xr - mu) ** 2).mean(-1, keepdims=True) + 1e-5) if D else np.zeros(shape[:-1] + (1,))
    xhat = (xr - mu) * rs
    gw = gr * wr
    ref_dx = rs * (gw - (gw.mean(-1, keepdims=True) if D else 0) - xhat * ((gw * xhat).mean(-1, keepdims=True)
                                                                         if D else 0))
    lead = tuple(range(len(shape) - 1))
    scale = rs * (np.abs(gw).sum(-1, keepdims=True) + 1) * 10
    assert_matches(dx, ref_dx, dtype, atol_scale=scale, what="layernorm dinp")
    assert_matches(dw, (gr * xhat).sum(lead), dtype, atol_scale=np.abs(gr * xhat).sum(lead) + 1, what="dweight")
    assert_matches(db, gr.sum(lead), dtype, atol_scale=np.abs(gr).sum(lead) + 1, what="dbias")


@given(st.data(), shapes(0, 3), st.sampled_from(DTYPES), st.sampled_from([0.0, 0.3, 1.0]))
def test_dropout_backward(data, shape, dtype, p):
    xr, x = data.draw(arrays(shape, dtype, specials=False))
    _, mask = K.dropout_forward(x, p, 5)
    gr, g = data.draw(arrays(shape, dtype))
    with np.errstate(all="ignore"):
        ref = np.where(mask, gr * (1 / (1 - p) if p < 1 else 0.0), gr * 0.0)
    assert_matches(K.dropout_backward(g, _layout(data.draw, mask), p), ref, dtype, what="dropout backward")


@given(st.data(), st.sampled_from([1, 2, 5]), st.sampled_from([1, 2, 7]), st.sampled_from(DTYPES),
       st.sampled_from(["mean", "sum", "none"]))
def test_cross_entropy_backward_and_non_finite_logits(data, N, C, dtype, reduction):
    xr, x = data.draw(arrays((N, C), dtype, scale=3.0))   # NaN/+-Inf/+-1e30 logits sometimes
    t = np.asarray(data.draw(st.lists(st.integers(0, C - 1), min_size=N, max_size=N)), np.int64)
    loss, lse = K.cross_entropy_forward(x, t, reduction=reduction)
    with np.errstate(all="ignore"):
        m = xr.max(-1, keepdims=True)
        ref_lse = (m + np.log(np.exp(xr - m).sum(-1, keepdims=True)))[:, 0]
        nll = ref_lse - xr[np.arange(N), t]
        ref = {"none": nll, "sum": nll.sum(), "mean": nll.mean()}[reduction]
    assert_matches(loss, ref, dtype, atol_scale=10 * (1 + np.abs(xr[np.isfinite(xr)]).max(initial=0)),
                   what="cross_entropy with specials")
    if np.isfinite(xr).all():
        dl = np.ones(N if reduction == "none" else (), dtype)
        d = K.cross_entropy_backward(dl, x, t, lse, reduction=reduction)
        soft = np.exp(xr - ref_lse[:, None])
        onehot = np.eye(C)[t]
        ref_d = (soft - onehot) / (N if reduction == "mean" else 1)
        assert_matches(d, ref_d, dtype, atol_scale=10, what="cross_entropy backward")


@given(st.data(), st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.sampled_from([1, 3]),
       st.sampled_from([1, 4]), st.sampled_from([1, 3]), st.sampled_from(DTYPES))
def test_sdpa_backward(data, B, H, Tq, Tk, Dh, dtype):
    qr, q = data.draw(arrays((B, H, Tq, Dh), dtype, specials=False))
    kr, k = data.draw(arrays((B, H, Tk, Dh), dtype, specials=False))
    vr, v = data.draw(arrays((B, H, Tk, Dh), dtype, specials=False))
    gr, g = data.draw(arrays((B, H, Tq, Dh), dtype, specials=False))
    _, probs = K.sdpa_forward(q, k, v)
    dq, dk, dv = K.sdpa_backward(g, q, k, v, probs)
    sc = 1 / math.sqrt(Dh)
    s = qr @ np.swapaxes(kr, -1, -2) * sc
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = gr @ np.swapaxes(vr, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    assert_matches(dv, np.swapaxes(p, -1, -2) @ gr, dtype, atol_scale=10, what="dv")
    assert_matches(dq, ds @ kr * sc, dtype, atol_scale=30, what="dq")
    assert_matches(dk, np.swapaxes(ds, -1, -2) @ qr * sc, dtype, atol_scale=30, what="dk")


# ------------------------------------------------------------------ every family: aliasing is refused
@given(st.data(), st.sampled_from(DTYPES))
def test_accumulator_aliasing_refused(data, dtype):
    x = np.ones((3, 4), dtype)
    kind = data.draw(st.sampled_from(["softmax", "activation", "dropout", "layernorm", "linear"]))
    if kind == "softmax":
        y = K.softmax_forward(x)
        raises_clearly(lambda: K.softmax_backward(x, y, dinp=y), ValueError)
    elif kind == "activation":
        raises_clearly(lambda: K.activation_backward(x, x, "relu", dinp=x), ValueError)
    elif kind == "dropout":
        out, mask = K.dropout_forward(x, 0.5, 1)
        raises_clearly(lambda: K.dropout_backward(out, mask, 0.5, dinp=out), ValueError)
    elif kind == "layernorm":
        out, mean, rstd = K.layernorm_forward(x)
        raises_clearly(lambda: K.layernorm_backward(out, x, None, mean, rstd, dinp=x), ValueError)
    else:
        raises_clearly(lambda: K.linear_backward(x, x, np.ones((4, 4), dtype), dinp=x[::1]), ValueError)
