"""KV-cache decoding kernels (kv_cache_append, attend_step, cache_reorder, cache_permute):
NumPy reference, agreement with full causal attention, masks, bad input."""
import numpy as np
import pytest

import ctransformer.kernels as K
from tolerances import F32, F64_TIGHT

DTYPES = [np.float32, np.float64]


def tol(dtype):
    return F32 if dtype == np.float32 else F64_TIGHT


def ref_attend(q, ck, cv, lengths, pad=None, scale=None):
    """out (B, H, Dv) of softmax(scale q k^T) v over the visible slots; no key -> 0."""
    B, H, Tmax, Dh = ck.shape
    scale = 1 / np.sqrt(Dh) if scale is None else scale
    lengths = np.broadcast_to(np.asarray(lengths), (B,))
    out = np.zeros((B, H, cv.shape[3]))
    for b in range(B):
        keep = np.arange(Tmax) < lengths[b]
        if pad is not None:
            keep &= ~pad[b]
        if not keep.any():
            continue
        s = scale * np.einsum("hd,htd->ht", q[b].astype(np.float64), ck[b][:, keep].astype(np.float64))
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[b] = np.einsum("ht,htd->hd", p, cv[b][:, keep].astype(np.float64))
    return out


def cache(rng, B=3, H=2, Tmax=6, Dh=4, Dv=5, dtype=np.float64):
    ck = rng.standard_normal((B, H, Tmax, Dh)).astype(dtype)
    cv = rng.standard_normal((B, H, Tmax, Dv)).astype(dtype)
    q = rng.standard_normal((B, H, Dh)).astype(dtype)
    return q, ck, cv


@pytest.mark.parametrize("dtype", DTYPES)
def test_attend_step_matches_reference(rng, dtype):
    q, ck, cv = cache(rng, dtype=dtype)
    for lengths in (6, 1, np.array([6, 3, 1]), np.array([2, 0, 5])):
        out = K.attend_step(q, ck, cv, lengths)
        assert out.dtype == dtype and out.shape == (3, 2, 5)
        np.testing.assert_allclose(out, ref_attend(q, ck, cv, lengths), **tol(dtype))
    np.testing.assert_allclose(K.attend_step(q, ck, cv, 4, scale=0.3),
                               ref_attend(q, ck, cv, 4, scale=0.3), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_attend_step_key_padding(rng, dtype):
    q, ck, cv = cache(rng, dtype=dtype)
    pad = rng.random((3, 6)) < 0.4
    pad[2] = True  # a row with every key hidden -> zeros, not NaN
    lengths = np.array([6, 4, 6])
    out = K.attend_step(q, ck, cv, lengths, pad)
    np.testing.assert_allclose(out, ref_attend(q, ck, cv, lengths, pad), **tol(dtype))
    assert np.all(out[2] == 0)


def test_hidden_slots_never_leak(rng):
    """Padding and slots past the length may hold garbage (inf, NaN): unused."""
    q, ck, cv = cache(rng)
    clean = K.attend_step(q, ck, cv, 3)
    ck[:, :, 3:] = np.nan
    cv[:, :, 3:] = np.inf
    pad = np.zeros((3, 6), bool)
    pad[:, 1] = True
    ck[:, :, 1] = np.nan
    cv[:, :, 1] = np.inf
    out = K.attend_step(q, ck, cv, 3, pad)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref_attend(q, ck, cv, 3, pad), **F64_TIGHT)
    assert not np.allclose(out, clean)


def test_nan_in_visible_key_gives_nan(rng):
    q, ck, cv = cache(rng)
    ck[0, 1, 2, 0] = np.nan
    out = K.attend_step(q, ck, cv, 4)
    assert np.isnan(out[0, 1]).all() and np.isfinite(out[0, 0]).all() and np.isfinite(out[1:]).all()
    q[1, 0, 0] = np.nan
    assert np.isnan(K.attend_step(q, ck, cv, 4)[1, 0]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_stepwise_cache_equals_causal_sdpa(rng, dtype):
    """Appending k/v per step and attending to the prefix = causal attention."""
    B, H, T, Dh, Dv = 2, 3, 5, 4, 2
    q = rng.standard_normal((B, H, T, Dh)).astype(dtype)
    k = rng.standard_normal((B, H, T, Dh)).astype(dtype)
    v = rng.standard_normal((B, H, T, Dv)).astype(dtype)
    full, _ = K.sdpa_forward(q, k, v, is_causal=True)
    ck = np.zeros((B, H, T + 2, Dh), dtype)
    cv = np.zeros((B, H, T + 2, Dv), dtype)
    for t in range(T):
        K.kv_cache_append(ck, cv, k[:, :, t], v[:, :, t], t)  # non-contiguous k_t views are copied
        out = K.attend_step(np.ascontiguousarray(q[:, :, t]), ck, cv, t + 1)
        np.testing.assert_allclose(out, full[:, :, t], **tol(dtype))


def test_append_per_row_positions(rng):
    q, ck, cv = cache(rng)
    k_t = rng.standard_normal((3, 2, 4))
    v_t = rng.standard_normal((3, 2, 5))
    before_k, before_v = ck.copy(), cv.copy()
    pos = np.array([0, 5, 2], dtype=np.int32)
    K.kv_cache_append(ck, cv, k_t, v_t, pos)
    for b, p in enumerate(pos):
        np.testing.assert_array_equal(ck[b, :, p], k_t[b])
        np.testing.assert_array_equal(cv[b, :, p], v_t[b])
        other = np.arange(6) != p
        np.testing.assert_array_equal(ck[b][:, other], before_k[b][:, other])
        np.testing.assert_array_equal(cv[b][:, other], before_v[b][:, other])


@pytest.mark.parametrize("dtype", DTYPES)
def test_cache_reorder(rng, dtype):
    _, ck, _ = cache(rng, dtype=dtype)
    rows = np.array([2, 2, 0, 1, 0])
    out = K.cache_reorder(ck, rows)
    assert out.dtype == dtype and out.shape == (5, 2, 6, 4)
    np.testing.assert_array_equal(out, ck[rows])
    part = K.cache_reorder(ck, rows, length=3)
    np.testing.assert_array_equal(part[:, :, :3], ck[rows][:, :, :3])
    assert np.all(part[:, :, 3:] == 0)
    assert K.cache_reorder(ck, np.array([], np.int64)).shape == (0, 2, 6, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [[2, 0, 0, 3], [0, 1, 2, 3], [3, 2, 1, 0], [1, 1, 1, 1], [0, 0, 1, 2],
                                  [1, 2, 3, 0], [1, 0, 3, 2], [1, 2, 0, 0], [3, 3, 0, 1]])
def test_cache_permute_is_cache_reorder_in_place(rng, dtype, rows):
    """Row i gets old row rows[i] over the first `length` slots, rows that
    are both a source and overwritten included; the rest is untouched."""
    rows = np.array(rows)
    for length in (0, 3, 6):
        cache = rng.standard_normal((4, 2, 6, 5)).astype(dtype)
        want = cache.copy()
        want[:, :, :length] = K.cache_reorder(cache, rows, length)[:, :, :length]
        assert K.cache_permute(cache, rows, length) is None
        np.testing.assert_array_equal(cache, want)


def test_cache_permute_every_map_of_four_rows(rng):
    """cache_permute copies each moved row once (chains last row first, a
    cycle through a scratch row): every one of the 4 ** 4 maps of 4 rows,
    chains, cycles (two at once too), duplicates and rows left in place, gives
    cache_reorder's rows."""
    cache0 = rng.standard_normal((4, 3, 5, 2))
    for code in range(4 ** 4):
        rows = np.array([code // 4 ** i % 4 for i in range(4)])
        cache = cache0.copy()
        K.cache_permute(cache, rows, 4)
        np.testing.assert_array_equal(cache[:, :, :4], cache0[rows][:, :, :4], err_msg=str(rows))
        np.testing.assert_array_equal(cache[:, :, 4:], cache0[:, :, 4:])


def test_cache_permute_bad_input(rng):
    cache = np.zeros((3, 2, 6, 4), np.float32)
    with pytest.raises(ValueError, match=r"cache_permute: rows.shape\[0\] must be 3 \(cache.shape\[0\]\), got 2"):
        K.cache_permute(cache, np.array([0, 1]), 2)
    with pytest.raises(IndexError, match=r"cache_permute: rows\[1\] = 3 is out of range; expected 0 <= id < 3"):
        K.cache_permute(cache, np.array([0, 3, 1]), 2)
    with pytest.raises(ValueError, match=r"cache_permute: length must be in \[0, 6\] \(cache.shape\[2\]\), got 7"):
        K.cache_permute(cache, np.array([0, 1, 2]), 7)
    with pytest.raises(ValueError, match=r"cache_permute: cache must have 4 dimensions \(rows, heads, Tmax, head_dim\), got 3"):
        K.cache_permute(cache[0], np.array([0, 1]), 2)
    with pytest.raises(ValueError, match="cache_permute: cache is updated in place, so it must be a C-contiguous"):
        K.cache_permute(cache[:, :, ::2], np.array([0, 1, 2]), 2)
    with pytest.raises(TypeError, match="cache_permute: cache must have dtype float32 or float64, got int64"):
        K.cache_permute(np.zeros((3, 2, 6, 4), np.int64), np.array([0, 1, 2]), 2)
    assert not cache.any()


def test_empty_shapes(rng):
    ck = np.zeros((0, 2, 4, 3))
    cv = np.zeros((0, 2, 4, 3))
    assert K.attend_step(np.zeros((0, 2, 3)), ck, cv, 0).shape == (0, 2, 3)
    K.kv_cache_append(ck, cv, np.zeros((0, 2, 3)), np.zeros((0, 2, 3)), 1)
    ck = np.zeros((2, 2, 0, 3))
    out = K.attend_step(np.ones((2, 2, 3)), ck, np.zeros((2, 2, 0, 5)), 0)
    assert out.shape == (2, 2, 5) and np.all(out == 0)
    ck = np.zeros((2, 1, 3, 0))  # Dh = 0: every score is 0, uniform weights
    cv = rng.standard_normal((2, 1, 3, 2))
    np.testing.assert_allclose(K.attend_step(np.zeros((2, 1, 0)), ck, cv, 3), cv.mean(2), **F64_TIGHT)


def test_bad_input(rng):
    q, ck, cv = cache(rng)
    with pytest.raises(TypeError, match="attend_step: q_t must have dtype float32 or float64, got int64"):
        K.attend_step(q.astype(np.int64), ck, cv, 2)
    with pytest.raises(TypeError, match="attend_step: cache_k must have dtype float64, got float32"):
        K.attend_step(q, ck.astype(np.float32), cv, 2)
    with pytest.raises(ValueError, match=r"attend_step: q_t.shape\[2\] must be 4 \(cache_k.shape\[3\], the head dim\), got 3"):
        K.attend_step(q[:, :, :3], ck, cv, 2)
    with pytest.raises(ValueError, match=r"attend_step: cache_v.shape\[2\] must be 6 \(cache_k.shape\[2\], Tmax\), got 5"):
        K.attend_step(q, ck, cv[:, :, :5], 2)
    with pytest.raises(ValueError, match="attend_step: cache_k must have 4 dimensions, got 3"):
        K.attend_step(q, ck[0], cv, 2)
    with pytest.raises(IndexError, match=r"attend_step: lengths\[1\] must be in \[0, 6\] \(0 to Tmax keys\), got 7"):
        K.attend_step(q, ck, cv, np.array([1, 7, 2]))
    with pytest.raises(IndexError, match=r"attend_step: lengths\[0\] must be in \[0, 6\]"):
        K.attend_step(q, ck, cv, -1)
    with pytest.raises(ValueError, match=r"attend_step: lengths.shape\[0\] must be 3"):
        K.attend_step(q, ck, cv, np.array([1, 2]))
    with pytest.raises(TypeError, match="attend_step: lengths must have dtype an integer dtype, got float64"):
        K.attend_step(q, ck, cv, np.array([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="attend_step: key_padding_mask must have dtype bool, got float64"):
        K.attend_step(q, ck, cv, 2, np.zeros((3, 6)))
    with pytest.raises(ValueError, match=r"attend_step: key_padding_mask.shape\[1\] must be 6 \(cache_k.shape\[2\], Tmax\), got 5"):
        K.attend_step(q, ck, cv, 2, np.zeros((3, 5), bool))
    with pytest.raises(TypeError, match="attend_step: scale must be a float or None, got str"):
        K.attend_step(q, ck, cv, 2, scale="x")
    k_t, v_t = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 2, 5))
    with pytest.raises(IndexError, match=r"kv_cache_append: pos\[0\] must be in \[0, 5\] \(a slot of the cache, < Tmax\), got 6"):
        K.kv_cache_append(ck, cv, k_t, v_t, 6)
    with pytest.raises(ValueError, match="kv_cache_append: cache_k is updated in place, so it must be a C-contiguous"):
        K.kv_cache_append(ck[:, :, ::2], cv, k_t, v_t, 0)
    with pytest.raises(ValueError, match="kv_cache_append: cache_v is updated in place"):
        ro = cv.copy()
        ro.flags.writeable = False
        K.kv_cache_append(ck, ro, k_t, v_t, 0)
    with pytest.raises(ValueError, match=r"kv_cache_append: cache_v.shape\[2\] must be 6 \(cache_k.shape\[2\], Tmax\), got 7"):
        K.kv_cache_append(ck, np.zeros((3, 2, 7, 5)), k_t, v_t, 0)
    with pytest.raises(ValueError, match=r"kv_cache_append: v_t.shape\[2\] must be 5 \(cache_v.shape\[3\], the head dim\), got 4"):
        K.kv_cache_append(ck, cv, k_t, k_t, 0)
    with pytest.raises(ValueError, match="kv_cache_append: cache_k and cache_v must be different arrays"):
        K.kv_cache_append(ck, ck, k_t, k_t, 0)
    with pytest.raises(IndexError, match=r"cache_reorder: rows\[1\] = 3 is out of range; expected 0 <= id < 3"):
        K.cache_reorder(ck, np.array([0, 3]))
    with pytest.raises(ValueError, match=r"cache_reorder: length must be in \[0, 6\] \(cache.shape\[2\]\), got 7"):
        K.cache_reorder(ck, np.array([0]), 7)
    with pytest.raises(TypeError, match="cache_reorder: cache must be a numpy.ndarray, got list"):
        K.cache_reorder([1], np.array([0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3, 9, 17])
def test_decode_linear_matches_linear(rng, dtype, rows):
    """Up to 16 rows go through decode.c's dot products, more through the GEMM: same maths as linear_forward."""
    x = rng.standard_normal((rows, 7)).astype(dtype)
    w = rng.standard_normal((5, 7)).astype(dtype)
    b = rng.standard_normal(5).astype(dtype)
    tol = F32 if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(K.decode_linear(x, w, b), x @ w.T + b, **tol)
    np.testing.assert_allclose(K.decode_linear(x[None], w), (x @ w.T)[None], **tol)
    np.testing.assert_allclose(K.decode_linear(x[:, ::-1], w), x[:, ::-1] @ w.T, **tol)  # a view is copied
    nan = x.copy()
    nan[0, 3] = np.nan
    assert np.isnan(K.decode_linear(nan, w, b)[0]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("depth", [1, 7, 16, 40, 517])
def test_decode_linear_rows_are_dot_products_whatever_the_batch(rng, dtype, depth):
    """Each output of a few rows (M <= 8, or M <= 16 above depth 256) is
    x[m] . w[n] + b[n], computed the same way for every M: a row's bits do not
    depend on its neighbours, nor on whether its block of weight rows was taken
    one at a time (M <= 8) or in groups of 4 against 6 rows of x at once (9 to
    16 rows; N = 37 leaves a tail of one weight row).  Against float64 within
    the dot product's error bound; K covers no whole vector (1, 7), exactly one
    (16 floats, two doubles), whole vectors plus a tail (40, 517): the depth of
    the dot products."""
    N = 37
    x = rng.standard_normal((16, depth)).astype(dtype)
    w = rng.standard_normal((N, depth)).astype(dtype)
    b = rng.standard_normal(N).astype(dtype)
    exact = x.astype(np.float64) @ w.astype(np.float64).T + b
    bound = (depth + 2) * np.finfo(dtype).eps * (np.abs(x).astype(np.float64) @ np.abs(w).T + np.abs(b))
    alone = np.concatenate([K.decode_linear(x[m:m + 1], w, b) for m in range(16)])
    assert (np.abs(alone - exact) <= bound).all()
    for M in range(2, 17 if depth > 256 else 9):
        np.testing.assert_array_equal(K.decode_linear(x[:M], w, b), alone[:M])
    if depth <= 256:  # 9+ rows of a short depth: linear_forward, within the same bound
        assert (np.abs(K.decode_linear(x, w, b) - exact) <= bound).all()
    dots = np.concatenate([K.decode_linear(x[m:m + 1], w) for m in range(3)])  # no bias
    assert (np.abs(dots - (exact[:3] - b)) <= bound[:3]).all()
    np.testing.assert_array_equal(K.decode_linear(x[:3], w), dots)
    nan = x[:4].copy()
    nan[2, depth // 2] = np.nan
    got = K.decode_linear(nan, w, b)
    assert np.isnan(got[2]).all()
    np.testing.assert_array_equal(got[[0, 1, 3]], alone[[0, 1, 3]])  # a NaN stays in its row


def test_decode_linear_empty_and_bad_input(rng):
    w = rng.standard_normal((5, 7))
    assert K.decode_linear(np.zeros((0, 7)), w).shape == (0, 5)
    np.testing.assert_array_equal(K.decode_linear(np.zeros((1, 0)), np.zeros((4, 0)), np.ones(4)), np.ones((1, 4)))
    with pytest.raises(ValueError, match=r"decode_linear: w.shape\[1\] must be 6 \(x.shape\[-1\]\), got 7"):
        K.decode_linear(np.zeros((1, 6)), w)
    with pytest.raises(ValueError, match=r"decode_linear: bias.shape\[0\] must be 5 \(w.shape\[0\]\), got 4"):
        K.decode_linear(np.zeros((1, 7)), w, np.zeros(4))
    with pytest.raises(TypeError, match="decode_linear: w must have dtype float32, got float64"):
        K.decode_linear(np.zeros((1, 7), np.float32), w)
