"""attention kernels: the bespoke edge cases of sdpa (causal alignment, fully
masked rows, huge negative masks, subnormal weights, dropout, NaN, bad input)
and the positional encoding.  sdpa forward against NumPy, float64 gradients
without dropout, accumulation, views, empty input and torch parity for every
mask kind: tests/test_kernel_table.py; multi-head attention (mha_*,
mha_packed_*): tests/test_kernels_attention_mha.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import check_grads, run_isolated
from tolerances import F32, F64_TIGHT


def make_mask(kind, rng, shape, dtype=np.float64):
    """None, bool (True = take part) or additive float mask of `shape`."""
    if kind is None:
        return None
    if kind == "bool":
        m = rng.random(shape) > 0.3
        m[..., 0] = True  # every row keeps a key
        return m
    return (rng.standard_normal(shape) * 2).astype(dtype)


def qkv(rng, B=2, H=2, Tq=3, Tk=4, Dh=4, Dv=3, dtype=np.float64):
    return (rng.standard_normal((B, H, Tq, Dh)).astype(dtype),
            rng.standard_normal((B, H, Tk, Dh)).astype(dtype),
            rng.standard_normal((B, H, Tk, Dv)).astype(dtype))


# ---- sdpa: forward ------------------------------------------------------------

@pytest.mark.parametrize("tq,tk", [(2, 4), (5, 3)])
def test_sdpa_causal_is_top_left_tril(rng, tq, tk):
    q, k, v = qkv(rng, Tq=tq, Tk=tk)
    _, probs = K.sdpa_forward(q, k, v, is_causal=True)
    above = np.triu(np.ones((tq, tk), bool), 1)
    assert (probs[..., above] == 0).all()
    assert (probs[..., ~above] > 0).all()
    np.testing.assert_allclose(probs.sum(-1), 1, rtol=1e-12)


# ---- sdpa: gradients ----------------------------------------------------------

def check_sdpa_grads(q, k, v, **opts):
    """Central differences of sdpa_forward against sdpa_backward (q, k, v), with the same options."""

    def forward(q, k, v):
        return K.sdpa_forward(q, k, v, **opts)

    def grads(dout, q, k, v):
        _, probs = forward(q, k, v)
        dq, dk, dv = K.sdpa_backward(dout, q, k, v, probs, **opts)
        return dict(q=dq, k=dk, v=dv)

    check_grads(forward, grads, dict(q=q, k=k, v=v), ["q", "k", "v"])


@pytest.mark.parametrize("kind,causal,dropout", [("bool", True, 0.4)])   # without dropout: the kernel table
def test_sdpa_gradients_float64_with_dropout(rng, kind, causal, dropout):
    q, k, v = qkv(rng, Tq=3, Tk=5)
    mask = make_mask(kind, rng, (2, 1, 3, 5))
    check_sdpa_grads(q, k, v, mask=mask, is_causal=causal, dropout_p=dropout, seed=7)


def test_sdpa_dead_query_rows_gradcheck(rng):
    """sdpa_backward (the (B, H, T, D) layout, accumulating into its fresh
    gradients) leaves out the trailing query rows whose output gradient is
    zero: central differences of sum(out * live * dout), with dropout, and
    one slice whose rows are all dead.  T 32, Dh 16: the slices of at least
    CT_LIVE_QUERIES_MIN_WORK multiply-adds, where the skip runs."""
    q, k, v = qkv(rng, Tq=32, Tk=32, Dh=16, Dv=16)
    live = np.ones((2, 2, 32, 1))
    live[0, 1, 21:] = 0  # dead trailing rows
    live[1, 0, :] = 0    # a slice with every row dead
    opts = dict(mask=make_mask("bool", rng, (2, 1, 32, 32)), dropout_p=0.3, seed=11)

    def forward(q, k, v):
        return K.sdpa_forward(q, k, v, **opts)[0] * live

    def grads(dout, q, k, v):
        _, probs = K.sdpa_forward(q, k, v, **opts)
        dq, dk, dv = K.sdpa_backward(dout * live, q, k, v, probs, **opts)
        return dict(q=dq, k=dk, v=dv)

    check_grads(forward, grads, dict(q=q, k=k, v=v), ["q", "k", "v"])


# ---- sdpa: torch parity -------------------------------------------------------

def torch_sdpa_grads(torch_ref, q, k, v, dout, mask=None, is_causal=False):
    """torch's scaled_dot_product_attention output and input gradients
    (out, dq, dk, dv) for the loss sum(out * dout), live or from the fixture."""

    def torch_side(torch):
        tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, is_causal=is_causal, attn_mask=None if mask is None else torch.tensor(mask))
        out.backward(torch.tensor(dout))
        return dict(res=(out, tq.grad, tk.grad, tv.grad))

    inputs = dict(q=q, k=k, v=v, dout=dout)
    if mask is not None:
        inputs["mask"] = mask
    res = torch_ref(torch_side, inputs=inputs)["res"]
    assert len(res) == 4
    return res


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_wide_heads_gradients_float64(rng, causal):
    """Heads 24 and 40 wide, keys 9 and 20: the score products go through
    gemm_nt_via_nn (transposed copy, whole tiles and edges); central
    differences in float64."""
    for (tq, tk, dh) in ((5, 9, 24), (3, 20, 40)):
        q, k, v = qkv(rng, B=1, H=2, Tq=tq, Tk=tk, Dh=dh, Dv=dh)
        mask = make_mask("float", rng, (1, 2, tq, tk), np.float64)
        check_sdpa_grads(q, k, v, mask=mask, is_causal=causal)


def test_sdpa_wide_heads_torch_parity(rng, torch_ref):
    """Heads 32 wide over 32 keys (the transposed-copy path): output and input
    gradients against torch's scaled_dot_product_attention, float32."""
    q, k, v = qkv(rng, B=2, H=4, Tq=32, Tk=32, Dh=32, Dv=32, dtype=np.float32)
    mask = make_mask("bool", rng, (2, 1, 32, 32), np.float32)
    dout = rng.standard_normal((2, 4, 32, 32)).astype(np.float32)
    out, probs = K.sdpa_forward(q, k, v, mask=mask)
    grads = K.sdpa_backward(dout, q, k, v, probs, mask=mask)
    ref = torch_sdpa_grads(torch_ref, q, k, v, dout, mask=mask)
    for name, ours, theirs in zip(["out", "dq", "dk", "dv"], (out,) + grads, ref):
        np.testing.assert_allclose(ours, theirs, **F32, err_msg=name)


@pytest.mark.parametrize("fill", ["bool", -np.inf])
def test_sdpa_fully_masked_rows_are_zero_not_nan(rng, fill, torch_ref):
    q, k, v = qkv(rng, Tq=3, Tk=4, dtype=np.float32)
    if fill == "bool":
        mask = np.ones((2, 2, 3, 4), bool)
        mask[0, 1, 2] = False
        mask[1, :, 0] = False
    else:
        mask = np.zeros((2, 2, 3, 4), np.float32)
        mask[0, 1, 2] = -np.inf
        mask[1, :, 0] = -np.inf
    dout = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    out, probs = K.sdpa_forward(q, k, v, mask=mask)
    dq, dk, dv = K.sdpa_backward(dout, q, k, v, probs, mask=mask)
    for a in (out, probs, dq, dk, dv):
        assert np.isfinite(a).all()
    assert (out[0, 1, 2] == 0).all() and (out[1, :, 0] == 0).all()
    assert (probs[0, 1, 2] == 0).all() and (dq[0, 1, 2] == 0).all() and (dq[1, :, 0] == 0).all()
    ref = torch_sdpa_grads(torch_ref, q, k, v, dout, mask=mask)
    for name, ours, theirs in zip(["out", "dq", "dk", "dv"], (out, dq, dk, dv), ref):
        np.testing.assert_allclose(ours, theirs, **F32, err_msg=name)


def test_sdpa_fully_masked_float64_gradcheck(rng):
    q, k, v = qkv(rng, Tq=3, Tk=4)
    mask = np.ones((3, 4), bool)
    mask[1] = False

    def forward(q, k, v):
        return K.sdpa_forward(q, k, v, mask=mask)

    def grads(dout, q, k, v):
        dq, dk, dv = K.sdpa_backward(dout, q, k, v, forward(q, k, v)[1], mask=mask)
        return dict(q=dq, k=dk, v=dv)

    check_grads(forward, grads, dict(q=q, k=k, v=v), ["q", "k", "v"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_large_negative_additive_mask_matches_torch(rng, dtype, torch_ref):
    """-1e9 is arithmetic: a row masked with it everywhere is what torch gives
    (uniform weights in float32, where -1e9 swallows the scores)."""
    q, k, v = qkv(rng, Tq=3, Tk=4, dtype=dtype)
    mask = np.zeros((3, 4), dtype)
    mask[1] = -1e9
    mask[2, 1:] = -1e9
    dout = rng.standard_normal((2, 2, 3, 3)).astype(dtype)
    out, probs = K.sdpa_forward(q, k, v, mask=mask)
    grads = K.sdpa_backward(dout, q, k, v, probs, mask=mask)
    ref = torch_sdpa_grads(torch_ref, q, k, v, dout, mask=mask)
    tol = F32 if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for name, ours, theirs in zip(["out", "dq", "dk", "dv"], (out,) + grads, ref):
        np.testing.assert_allclose(ours, theirs, **tol, err_msg=name)
    if dtype == np.float32:
        np.testing.assert_array_equal(probs[..., 1, :], 0.25)


# ---- subnormal weights ----------------------------------------------------------

def sdpa_reference_float64(q, k, v, mask, dout):
    """out, probs, dq, dk, dv of softmax(q k^T / sqrt(Dh) + mask) v in float64."""
    q, k, v, mask, dout = (np.asarray(a, np.float64) for a in (q, k, v, mask, dout))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = dout @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) / np.sqrt(q.shape[-1])
    return p @ v, p, ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ dout


@pytest.mark.parametrize("threads", [1, 2])
def test_sdpa_subnormal_weights_are_zero_and_the_flush_stays_inside(rng, threads):
    """The attention slices flush subnormals (csrc/ct.h): float32 weights
    e^-88 .. e^-103, which round to subnormals, come out exactly 0; the other
    results agree with a float64 reference; and the caller's thread still
    makes subnormals afterwards (its floating-point mode is restored: the
    flush is MXCSR's, set and reset around the slices)."""
    import ctransformer as ct
    B, H, T, D = 8, 4, 16, 16   # big enough for the pool at 2 threads
    q, k, v = qkv(rng, B=B, H=H, Tq=T, Tk=T, Dh=D, Dv=D, dtype=np.float32)
    q *= 0.05
    mask = np.zeros((T, T), np.float32)
    mask[:, 1::2] = -np.linspace(88, 103, T // 2, dtype=np.float32)  # every other key nearly hidden
    dout = rng.standard_normal((B, H, T, D)).astype(np.float32)
    before = ct.get_num_threads()
    ct.set_num_threads(threads)
    try:
        out, probs = K.sdpa_forward(q, k, v, mask=mask)
        grads = K.sdpa_backward(dout, q, k, v, probs, mask=mask)
    finally:
        ct.set_num_threads(before)
    ref = sdpa_reference_float64(q, k, v, mask, dout)
    tiny = np.finfo(np.float32).tiny
    assert (0 < ref[1][..., 1::2]).all() and (ref[1][..., 1::2] < tiny).all()  # they would be subnormal
    assert (probs[..., 1::2] == 0).all()
    for name, ours, theirs in zip(["out", "probs", "dq", "dk", "dv"], (out, probs) + grads, ref):
        np.testing.assert_allclose(ours, theirs, **F32, err_msg=name)
    assert np.float32(tiny) / np.float32(4) > 0  # the caller's mode: subnormals still made


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tq,tk,dh,dv", [
    # heads up to 16 wide: direct loops (small_gemm_nt)
    (11, 11, 16, 5), (5, 19, 8, 5), (13, 3, 16, 5), (40, 40, 16, 5), (7, 9, 1, 5), (64, 64, 16, 5),
    (12, 12, 32, 5),
    # wider: OpenBLAS NN products of a transposed copy (gemm_nt_via_nn) up to Tk * Dh 4096 and 64^3;
    # without AVX-512, keys in whole chunks of 16 up to 32768 multiply-adds: the transposed copy on
    # the direct loops (small_gemm_nt again; widths off the 8 x 8 tiles, rows past the last block of 4)
    (16, 16, 20, 20), (13, 32, 24, 24),
    (32, 32, 32, 32), (9, 13, 17, 17), (24, 40, 33, 33), (64, 64, 64, 64), (65, 64, 64, 64), (8, 65, 64, 64),
    (3, 7, 100, 100)])
def test_sdpa_score_products_against_float64(rng, dtype, tq, tk, dh, dv):
    """The score products (Q K^T, dO V^T) take three paths (attn_gemm, csrc/attention_gemm.c):
    heads up to 16 wide direct loops (small_gemm_nt); wider ones with K^T
    (V^T) in a 4096-element panel and at most 64^3 multiply-adds OpenBLAS NN
    products of a transposed copy (gemm_nt_via_nn: 8 x 8 / 4 x 4 tiles by
    shuffles, the edges one by one); the rest OpenBLAS as is.  Without
    AVX-512 the NN / TN products (P V, dS K, P^T dO, dS^T Q) up to 32768
    multiply-adds take the direct loops too (small_gemm_xn: (64, 64, 16) and
    the 64-wide heads stay with OpenBLAS, (40, 40, 16) and (32, 32, 32) do
    not), fresh and accumulated (beta 1); so do the wider heads' score
    products whose keys are whole chunks of 16 (small_gemm_nt).  Shapes on both
    sides of each limit (whole and partial vector blocks of keys, rows past
    the last block of 4, widths off the tile size) against a float64
    reference, at 1 and 2 threads, with the same bits on both; then the
    gradients accumulated into given arrays (the products with beta 1)."""
    import ctransformer as ct
    q, k, v = qkv(rng, B=3, H=2, Tq=tq, Tk=tk, Dh=dh, Dv=dv, dtype=dtype)
    mask = make_mask("float", rng, (tq, tk), dtype)
    dout = rng.standard_normal((3, 2, tq, dv)).astype(dtype)
    ref = sdpa_reference_float64(q, k, v, mask, dout)
    tol = F32 if dtype == np.float32 else F64_TIGHT
    before, runs = ct.get_num_threads(), []
    try:
        for threads in (1, 2):
            ct.set_num_threads(threads)
            out, probs = K.sdpa_forward(q, k, v, mask=mask)
            runs.append((out, probs) + K.sdpa_backward(dout, q, k, v, probs, mask=mask))
    finally:
        ct.set_num_threads(before)
    for name, ours, theirs in zip(["out", "probs", "dq", "dk", "dv"], runs[0], ref):
        np.testing.assert_allclose(ours, theirs, **tol, err_msg=name)
    for one, two in zip(*runs):
        np.testing.assert_array_equal(one, two)
    # accumulated into given gradients (the products' beta 1): start + the gradient
    starts = [rng.standard_normal(x.shape).astype(dtype) for x in (q, k, v)]
    summed = K.sdpa_backward(dout, q, k, v, runs[0][1], mask=mask, dq=starts[0].copy(),
                             dk=starts[1].copy(), dv=starts[2].copy())
    for name, ours, start, theirs in zip(["dq", "dk", "dv"], summed, starts, ref[2:]):
        np.testing.assert_allclose(ours, start + theirs, **tol, err_msg=name + " accumulated")


def test_cached_decoding_flushes_the_same_weights_as_sdpa():
    """attend_step (cached decoding) flushes subnormal weights as the training
    path does: a weight e^-95 on a value of 1e30 would add 5.5e-12; both give
    exactly 0, the full forward and the cached step alike."""
    q = np.zeros((1, 1, 1, 4), np.float32)
    k = np.zeros((1, 1, 2, 4), np.float32)
    v = np.zeros((1, 1, 2, 4), np.float32)
    v[..., 1, :] = 1e30
    mask = np.float32([[0, -95]])
    out, probs = K.sdpa_forward(q, k, v, mask=mask)
    assert probs[0, 0, 0, 1] == 0 and (out == 0).all()
    # the same scores through the cache: key 1 gets score -95 from q . k
    q_t = np.zeros((1, 1, 4), np.float32)
    q_t[..., 0] = 1
    cache_k = np.zeros((1, 1, 2, 4), np.float32)
    cache_k[..., 1, 0] = -95
    step = K.attend_step(q_t, cache_k, v, 2, scale=1.0)
    assert (step == 0).all()
    assert np.float32(np.finfo(np.float32).tiny) / np.float32(4) > 0  # the caller's mode is restored


# ---- sdpa: dropout ------------------------------------------------------------

def test_sdpa_dropout_deterministic_by_seed(rng):
    q, k, v = qkv(rng, B=2, H=2, Tq=8, Tk=16)
    out1, p1 = K.sdpa_forward(q, k, v, dropout_p=0.25, seed=3)
    out2, p2 = K.sdpa_forward(q, k, v, dropout_p=0.25, seed=3)
    _, p3 = K.sdpa_forward(q, k, v, dropout_p=0.25, seed=4)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(out1, out2)
    assert (p1 != p3).any()
    _, p_clean = K.sdpa_forward(q, k, v)
    dropped = p1 == 0
    assert 0.15 < dropped.mean() < 0.35
    np.testing.assert_allclose(p1[~dropped], p_clean[~dropped] / 0.75, **F64_TIGHT)
    np.testing.assert_allclose(out1, p1 @ v, **F64_TIGHT)


def test_sdpa_dropout_all_and_none(rng):
    q, k, v = qkv(rng)
    out, probs = K.sdpa_forward(q, k, v, dropout_p=1.0)
    assert (out == 0).all() and (probs == 0).all()
    grads = K.sdpa_backward(np.ones(out.shape), q, k, v, probs, dropout_p=1.0)
    assert all((g == 0).all() for g in grads)
    np.testing.assert_array_equal(K.sdpa_forward(q, k, v, dropout_p=0.0, seed=9)[0],
                                  K.sdpa_forward(q, k, v)[0])


# ---- sdpa: edge cases and bad input -------------------------------------------

def test_sdpa_nan_and_empty(rng):
    q, k, v = qkv(rng, dtype=np.float32)
    q[0, 0, 1, 2] = np.nan
    out, probs = K.sdpa_forward(q, k, v)
    assert np.isnan(out[0, 0, 1]).all() and np.isfinite(out[1]).all()
    # no keys: zero output; no queries / batch / head dim: empty or plain results
    out, probs = K.sdpa_forward(*qkv(rng, Tk=0))
    assert out.shape == (2, 2, 3, 3) and (out == 0).all() and probs.shape == (2, 2, 3, 0)
    dq, dk, dv = K.sdpa_backward(np.ones(out.shape), *qkv(rng, Tk=0), probs)
    assert (dq == 0).all() and dk.shape == (2, 2, 0, 4)
    q, k, v = qkv(rng, Dh=0)
    out, probs = K.sdpa_forward(q, k, v)
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(2, keepdims=True), out.shape), **F64_TIGHT)


def test_sdpa_bad_input(rng):
    q, k, v = qkv(rng)
    with pytest.raises(ValueError, match=r"sdpa_forward: k.shape\[3\] must be 4 \(q.shape\[3\], the head dim\), got 5"):
        K.sdpa_forward(q, rng.standard_normal((2, 2, 4, 5)), v)
    with pytest.raises(ValueError, match=r"sdpa_forward: v.shape\[2\] must be 4 \(k.shape\[2\], the keys\), got 3"):
        K.sdpa_forward(q, k, rng.standard_normal((2, 2, 3, 3)))
    with pytest.raises(ValueError, match=r"sdpa_forward: k.shape\[1\] must be 2 \(q.shape\[1\], the heads\)"):
        K.sdpa_forward(q, k[:, :1], v)
    with pytest.raises(ValueError, match="sdpa_forward: q must have 4 dimensions, got 3"):
        K.sdpa_forward(q[0], k, v)
    with pytest.raises(TypeError, match="sdpa_forward: k must have dtype float64, got float32"):
        K.sdpa_forward(q, k.astype(np.float32), v)
    with pytest.raises(ValueError, match=r"sdpa_forward: mask.shape\[0\] must be 3 \(Tq\) or 1 .*got 2"):
        K.sdpa_forward(q, k, v, mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match=r"sdpa_forward: mask.shape\[3\] must be 4 \(Tk\) or 1 .*got 5"):
        K.sdpa_forward(q, k, v, mask=np.ones((2, 2, 3, 5), bool))
    with pytest.raises(ValueError, match="sdpa_forward: mask must have 1 to 4 dimensions, got 5"):
        K.sdpa_forward(q, k, v, mask=np.ones((1, 2, 2, 3, 4), bool))
    with pytest.raises(TypeError, match="sdpa_forward: mask must have dtype bool or float64 .the dtype of q., got int64"):
        K.sdpa_forward(q, k, v, mask=np.ones((3, 4), np.int64))
    with pytest.raises(TypeError, match="sdpa_forward: mask must have dtype bool or float64 .the dtype of q., got float32"):
        K.sdpa_forward(q, k, v, mask=np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match="sdpa_forward: mask must be a numpy.ndarray or None, got list"):
        K.sdpa_forward(q, k, v, mask=[[True]])
    with pytest.raises(ValueError, match=r"sdpa_forward: dropout_p must be in \[0, 1\], got 1.5"):
        K.sdpa_forward(q, k, v, dropout_p=1.5)
    with pytest.raises(ValueError, match=r"sdpa_forward: dropout_p must be in \[0, 1\], got nan"):
        K.sdpa_forward(q, k, v, dropout_p=float("nan"))
    out, probs = K.sdpa_forward(q, k, v)
    with pytest.raises(ValueError, match=r"sdpa_backward: probs.shape\[3\] must be 4 \(k.shape\[2\]\), got 3"):
        K.sdpa_backward(out, q, k, v, probs[..., :3])
    with pytest.raises(ValueError, match=r"sdpa_backward: dout.shape\[3\] must be 3 \(v.shape\[3\]\), got 4"):
        K.sdpa_backward(np.ones((2, 2, 3, 4)), q, k, v, probs)
    with pytest.raises(ValueError, match="sdpa_backward: dq is updated in place"):
        K.sdpa_backward(out, q, k, v, probs, dq=np.zeros((2, 2, 4, 3)).transpose(0, 1, 3, 2))


# ---- positional encoding ------------------------------------------------------

@pytest.mark.parametrize("d_model", [1, 6, 7])
def test_positional_encoding_formula(d_model):
    pe = K.positional_encoding(20, d_model, np.float64)
    pos = np.arange(20)[:, None].astype(np.float64)
    ref = np.zeros((20, d_model))
    for c in range(d_model):
        angle = pos[:, 0] / 10000 ** ((c - c % 2) / d_model)
        ref[:, c] = np.sin(angle) if c % 2 == 0 else np.cos(angle)
    np.testing.assert_allclose(pe, ref, rtol=1e-13, atol=1e-15)
    pe32 = K.positional_encoding(20, d_model)
    assert pe32.dtype == np.float32
    np.testing.assert_array_equal(pe32, pe.astype(np.float32))


def test_positional_encoding_matches_torch_tutorial_formula(torch_ref):
    import math
    d_model, max_len = 16, 50

    def torch_side(torch):
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        return dict(pe=pe)

    ref = torch_ref(torch_side)
    np.testing.assert_allclose(K.positional_encoding(max_len, d_model, np.float64), ref["pe"],
                               rtol=1e-12, atol=1e-12)


def test_positional_encoding_bad_input():
    assert K.positional_encoding(0, 4).shape == (0, 4)
    assert K.positional_encoding(3, 0).shape == (3, 0)
    with pytest.raises(ValueError, match="positional_encoding: max_len must be >= 0, got -1"):
        K.positional_encoding(-1, 4)
    with pytest.raises(TypeError, match="positional_encoding: dtype must be float32 or float64, got int64"):
        K.positional_encoding(3, 4, np.int64)


def test_huge_mask_shape_mismatch_does_not_crash():
    r = run_isolated("""
        import numpy as np, ctransformer.kernels as K
        q = np.zeros((1, 1, 2, 3)); k = np.zeros((1, 1, 4, 3))
        try:
            K.sdpa_forward(q, k, k, mask=np.zeros((1, 1, 1, 1 << 20), bool))
        except ValueError as e:
            print("ok", e)
    """)
    assert r.returncode == 0, r.stderr
    assert "ok sdpa_forward: mask.shape[3] must be 4" in r.stdout
