"""attention kernels, multi-head: mha_forward/mha_backward's bespoke edge cases
(torch's MultiheadAttention layouts, kdim/vdim, fully padded batches, dropout,
accumulation, NaN, bad input) and the packed multi-head attention of the
Transformer layers (mha_packed_*: equal to mha, gradients, padding rows,
sequence-first torch parity, bad input).  sdpa and the positional encoding:
tests/test_kernels_attention.py; mha forward against NumPy, float64 gradients
without dropout, views and empty input: tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from ctransformer import _C
from conftest import check_grads
from test_kernels_attention import make_mask
from tolerances import F32, F64_TIGHT

# ---- multi-head attention -----------------------------------------------------

def mha_weights(rng, E=8, Ek=6, Ev=5, bias=True, dtype=np.float64):
    def r(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(dtype)
    b = (lambda: r(E)) if bias else (lambda: None)
    return dict(q_weight=r(E, E), k_weight=r(E, Ek), v_weight=r(E, Ev), q_bias=b(), k_bias=b(),
                v_bias=b(), out_weight=r(E, E), out_bias=b())


def mha_inputs(rng, B=2, Tq=3, Tk=4, E=8, Ek=6, Ev=5, dtype=np.float64):
    return (rng.standard_normal((B, Tq, E)).astype(dtype),
            rng.standard_normal((B, Tk, Ek)).astype(dtype),
            rng.standard_normal((B, Tk, Ev)).astype(dtype))


W_NAMES = ["q_weight", "k_weight", "v_weight", "q_bias", "k_bias", "v_bias", "out_weight", "out_bias"]


@pytest.mark.parametrize("kind,causal,dropout,bias", [("float", False, 0.3, True)])   # without: the kernel table
def test_mha_gradients_float64_with_dropout(rng, kind, causal, dropout, bias):
    query, key, value = mha_inputs(rng)
    w = mha_weights(rng, bias=bias)
    mask = make_mask(kind, rng, (2, 2, 3, 4))
    opts = dict(num_heads=2, mask=mask, is_causal=causal, dropout_p=dropout, seed=11)
    inputs = dict(query=query, key=key, value=value, **{n: w[n] for n in W_NAMES if w[n] is not None})

    def forward(query, key, value, *ws):
        kw = dict(zip([n for n in W_NAMES if w[n] is not None], ws))
        full = {n: kw.get(n) for n in W_NAMES}
        return K.mha_forward(query, key, value, **full, **opts)[0]

    def grads(dout, query, key, value, *ws):
        kw = dict(zip([n for n in W_NAMES if w[n] is not None], ws))
        full = {n: kw.get(n) for n in W_NAMES}
        _, saved = K.mha_forward(query, key, value, **full, **opts)
        g = K.mha_backward(dout, query, key, value, **full, saved=saved, **opts)._asdict()
        if not bias:
            assert g["q_bias"] is None and g["out_bias"] is None
        return g

    check_grads(forward, grads, inputs, list(inputs))


def torch_mha(torch, E, H, kdim=None, vdim=None, bias=True):
    torch.manual_seed(0)
    return torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True, kdim=kdim, vdim=vdim)


def torch_mha_params(layer):
    """The layer's parameters that exist, under our names (torch side)."""
    p = dict(in_proj_weight=layer.in_proj_weight, in_proj_bias=layer.in_proj_bias,
             q_weight=layer.q_proj_weight, k_weight=layer.k_proj_weight, v_weight=layer.v_proj_weight,
             out_weight=layer.out_proj.weight, out_bias=layer.out_proj.bias)
    return {n: t for n, t in p.items() if t is not None}


def mha_weights_of(params, E, packed=True):
    """Our kernel's weight arguments from torch_mha_params' values (NumPy)."""
    d = params.get
    w = dict(out_weight=d("out_weight"), out_bias=d("out_bias"))
    if packed and d("in_proj_weight") is not None:
        return dict(w, q_weight=None, k_weight=None, v_weight=None, q_bias=None, k_bias=None,
                    v_bias=None, in_proj_weight=d("in_proj_weight"), in_proj_bias=d("in_proj_bias"))
    b = d("in_proj_bias")
    return dict(w, q_weight=d("q_weight"), k_weight=d("k_weight"),
                v_weight=d("v_weight"), q_bias=None if b is None else b[:E],
                k_bias=None if b is None else b[E:2 * E], v_bias=None if b is None else b[2 * E:])


def torch_mha_run(torch, layer, query, key, value, dout, **kw):
    """Forward and backward of sum(out * dout) through torch's layer: its
    parameters, output (and weights when asked) and the gradients of the
    inputs and parameters (torch side)."""
    made = {}   # one leaf tensor per distinct array, as the tests pass them (self-attention: one)
    tq, tk, tv = (made.setdefault(id(a), torch.tensor(a, requires_grad=True)) for a in (query, key, value))
    params = torch_mha_params(layer)
    res = dict(params={n: t.detach().clone() for n, t in params.items()})
    t_out, t_w = layer(tq, tk, tv, **kw)
    t_out.backward(torch.tensor(dout))
    grads = {n: t.grad for n, t in params.items()}
    seen = set()
    for name, t in (("query", tq), ("key", tk), ("value", tv)):
        if id(t) not in seen:  # a tensor passed twice has one gradient (the sum), under its first name
            seen.add(id(t))
            grads[name] = t.grad
    res.update(out=t_out, grads=grads)
    if t_w is not None:
        res["attn_weights"] = t_w
    return res


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal"])
def test_mha_torch_parity_packed(rng, mask_kind, torch_ref):
    """torch.nn.MultiheadAttention with key_padding_mask + attn_mask (True = NOT allowed)
    against our kernel with the combined mask (True = take part)."""
    B, Tq, Tk, E, H = 2, 4, 5, 8, 2
    query, key, value = mha_inputs(rng, B, Tq, Tk, E, E, E, np.float32)
    kpm = np.zeros((B, Tk), bool)
    kpm[1, 3:] = True  # batch 1: last two keys are padding
    attn, mask, causal = np.zeros(0), None, False
    if mask_kind == "bool":
        attn = rng.random((Tq, Tk)) > 0.7
        attn[:, 0] = False
        mask = ~(attn[None, None] | kpm[:, None, None, :])
    elif mask_kind == "float":
        attn = rng.standard_normal((Tq, Tk)).astype(np.float32)
        mask = (attn[None, None] + np.where(kpm, -np.inf, 0)[:, None, None, :]).astype(np.float32)
    elif mask_kind == "causal":
        causal = True
    dout = rng.standard_normal((B, Tq, E)).astype(np.float32)

    def torch_side(torch):
        layer = torch_mha(torch, E, H)
        kw = {}
        if mask_kind == "bool":
            kw = dict(attn_mask=torch.tensor(attn), key_padding_mask=torch.tensor(kpm))
        elif mask_kind == "float":
            kpm_float = np.where(kpm, -np.inf, 0).astype(np.float32)
            kw = dict(attn_mask=torch.tensor(attn), key_padding_mask=torch.tensor(kpm_float))
        elif mask_kind == "causal":
            kw = dict(attn_mask=torch.ones(Tq, Tk, dtype=torch.bool).triu(1), is_causal=True)
        return torch_mha_run(torch, layer, query, key, value, dout, need_weights=True,
                             average_attn_weights=False, **kw)

    ref = torch_ref(torch_side, inputs=dict(query=query, key=key, value=value, attn=attn, kpm=kpm, dout=dout))
    w = mha_weights_of(ref["params"], E)
    out, saved = K.mha_forward(query, key, value, **w, num_heads=H, mask=mask, is_causal=causal)
    np.testing.assert_allclose(out, ref["out"], **F32)
    np.testing.assert_allclose(saved.probs, ref["attn_weights"], **F32)
    g = K.mha_backward(dout, query, key, value, **w, num_heads=H, saved=saved, mask=mask,
                       is_causal=causal)
    for name in ("query", "key", "value", "in_proj_weight", "in_proj_bias", "out_weight", "out_bias"):
        np.testing.assert_allclose(getattr(g, name), ref["grads"][name], **F32, err_msg=name)
    assert np.shares_memory(g.q_weight, g.in_proj_weight)


def test_mha_torch_parity_kdim_vdim_no_bias(rng, torch_ref):
    B, Tq, Tk, E, H, Ek, Ev = 2, 3, 4, 12, 3, 5, 7
    query, key, value = mha_inputs(rng, B, Tq, Tk, E, Ek, Ev, np.float32)
    dout = rng.standard_normal((B, Tq, E)).astype(np.float32)

    def torch_side(torch):
        layer = torch_mha(torch, E, H, kdim=Ek, vdim=Ev, bias=False)
        return torch_mha_run(torch, layer, query, key, value, dout, need_weights=False)

    ref = torch_ref(torch_side, inputs=dict(query=query, key=key, value=value, dout=dout))
    w = mha_weights_of(ref["params"], E, packed=False)
    out, saved = K.mha_forward(query, key, value, **w, num_heads=H)
    np.testing.assert_allclose(out, ref["out"], **F32)
    g = K.mha_backward(dout, query, key, value, **w, num_heads=H, saved=saved)
    for name in ("query", "key", "value", "q_weight", "k_weight", "v_weight", "out_weight"):
        np.testing.assert_allclose(getattr(g, name), ref["grads"][name], **F32, err_msg=name)
    assert g.q_bias is None and g.out_bias is None and g.in_proj_weight is None


def test_mha_self_attention_sums_to_torch(rng, torch_ref):
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    dout = rng.standard_normal((2, 5, 8)).astype(np.float32)

    def torch_side(torch):
        layer = torch_mha(torch, 8, 4)
        return torch_mha_run(torch, layer, x, x, x, dout, need_weights=False)

    ref = torch_ref(torch_side, inputs=dict(x=x, dout=dout))
    w = mha_weights_of(ref["params"], 8)
    out, saved = K.mha_forward(x, x, x, **w, num_heads=4)
    g = K.mha_backward(dout, x, x, x, **w, num_heads=4, saved=saved)
    np.testing.assert_allclose(out, ref["out"], **F32)
    np.testing.assert_allclose(g.query + g.key + g.value, ref["grads"]["query"], **F32)


def test_mha_fully_padded_batch_has_no_nan(rng):
    query, key, value = mha_inputs(rng)
    w = mha_weights(rng)
    mask = np.ones((2, 1, 1, 4), bool)
    mask[1] = False  # batch 1 has no valid key at all
    out, saved = K.mha_forward(query, key, value, **w, num_heads=2, mask=mask)
    g = K.mha_backward(np.ones(out.shape), query, key, value, **w, num_heads=2, saved=saved, mask=mask)
    assert np.isfinite(out).all() and all(np.isfinite(a).all() for a in g if a is not None)
    np.testing.assert_allclose(out[1], np.broadcast_to(w["out_bias"], (3, 8)), **F64_TIGHT)
    assert (g.key[1] == 0).all() and (g.value[1] == 0).all() and (g.query[1] == 0).all()


def test_mha_dropout_deterministic_by_seed(rng):
    query, key, value = mha_inputs(rng)
    w = mha_weights(rng)
    a = K.mha_forward(query, key, value, **w, num_heads=2, dropout_p=0.5, seed=5)
    b = K.mha_forward(query, key, value, **w, num_heads=2, dropout_p=0.5, seed=5)
    c = K.mha_forward(query, key, value, **w, num_heads=2, dropout_p=0.5, seed=6)
    np.testing.assert_array_equal(a[0], b[0])
    assert (a[0] != c[0]).any()
    # the same dropout mask as sdpa on the projected heads
    _, probs = K.sdpa_forward(a[1].q, a[1].k, a[1].v, dropout_p=0.5, seed=5)
    np.testing.assert_array_equal(a[1].probs, probs)


def test_mha_backward_accumulates_into_given_arrays(rng):
    query, key, value = mha_inputs(rng)
    w = mha_weights(rng)
    out, saved = K.mha_forward(query, key, value, **w, num_heads=2)
    dout = rng.standard_normal(out.shape)
    fresh = K.mha_backward(dout, query, key, value, **w, num_heads=2, saved=saved)
    acc = np.ones_like(w["k_weight"])
    g = _C.mha_backward(dout, query, key, value, *[w[n] for n in W_NAMES], 2, *saved,
                        dk_weight=acc)
    assert g[4] is acc
    np.testing.assert_allclose(acc, fresh.k_weight + 1, **F64_TIGHT)


def test_mha_bad_input(rng):
    query, key, value = mha_inputs(rng)
    w = mha_weights(rng)
    with pytest.raises(ValueError, match=r"mha_forward: embed_dim \(query.shape\[2\] = 8\) must be divisible by num_heads \(3\)"):
        K.mha_forward(query, key, value, **w, num_heads=3)
    with pytest.raises(ValueError, match="mha_forward: num_heads must be > 0, got 0"):
        K.mha_forward(query, key, value, **w, num_heads=0)
    bad = dict(w, k_weight=rng.standard_normal((8, 5)))
    with pytest.raises(ValueError, match=r"mha_forward: k_weight.shape\[1\] must be 6 \(key.shape\[2\]\), got 5"):
        K.mha_forward(query, key, value, **bad, num_heads=2)
    bad = dict(w, v_bias=np.zeros(7))
    with pytest.raises(ValueError, match=r"mha_forward: v_bias.shape\[0\] must be 8 \(embed_dim\), got 7"):
        K.mha_forward(query, key, value, **bad, num_heads=2)
    with pytest.raises(ValueError, match=r"mha_forward: value.shape\[1\] must be 4 \(key.shape\[1\], the keys\), got 3"):
        K.mha_forward(query, key, value[:, :3], **w, num_heads=2)
    with pytest.raises(TypeError, match="mha_forward: mask must have dtype bool or float64 .the dtype of query., got int32"):
        K.mha_forward(query, key, value, **w, num_heads=2, mask=np.ones((3, 4), np.int32))
    with pytest.raises(ValueError, match=r"mha_forward: mask.shape\[1\] must be 2 \(heads\) or 1"):
        K.mha_forward(query, key, value, **w, num_heads=2, mask=np.ones((2, 4, 3, 4), bool))
    with pytest.raises(TypeError, match="mha_forward: out_weight must have dtype float64, got float32"):
        K.mha_forward(query, key, value, **dict(w, out_weight=w["out_weight"].astype(np.float32)), num_heads=2)
    with pytest.raises(TypeError, match="mha_forward: q_weight is required, got None"):
        K.mha_forward(query, key, value, **dict(w, q_weight=None), num_heads=2)
    packed = dict(w, q_weight=None, k_weight=None, v_weight=None)
    with pytest.raises(ValueError, match=r"mha_forward: in_proj_weight must have shape \(3 \* embed_dim = 24, embed_dim\), got \(16, 8\)"):
        K.mha_forward(query, key, value, **packed, num_heads=2, in_proj_weight=np.zeros((16, 8)))
    with pytest.raises(ValueError, match="mha_forward: give either in_proj_weight or the separate"):
        K.mha_forward(query, key, value, **w, num_heads=2, in_proj_weight=np.zeros((24, 8)))
    out, saved = K.mha_forward(query, key, value, **w, num_heads=2)
    with pytest.raises(ValueError, match=r"mha_backward: probs.shape\[3\] must be 4 \(its shape in mha_forward\), got 3"):
        K.mha_backward(out, query, key, value, **w, num_heads=2, saved=saved._replace(probs=saved.probs[..., :3]))
    with pytest.raises(ValueError, match=r"mha_backward: dout.shape\[2\] must be 8"):
        K.mha_backward(out[..., :4], query, key, value, **w, num_heads=2, saved=saved)


def test_mha_empty_and_nan(rng):
    w = mha_weights(rng)
    query, key, value = mha_inputs(rng, Tk=0)
    out, saved = K.mha_forward(query, key, value, **w, num_heads=2)
    np.testing.assert_allclose(out, np.broadcast_to(w["out_bias"], out.shape), **F64_TIGHT)
    g = K.mha_backward(np.ones(out.shape), query, key, value, **w, num_heads=2, saved=saved)
    assert (g.query == 0).all() and g.key.shape == (2, 0, 6)
    query, key, value = mha_inputs(rng)
    key[0, 1, 0] = np.nan
    out, _ = K.mha_forward(query, key, value, **w, num_heads=2)
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()


# ---- packed multi-head attention (the Transformer layers' path) ---------------

def packed_setup(rng, self_attn, B=2, Tq=3, Tk=4, E=8, bias=True, dtype=np.float64):
    """Inputs of std 0.5; weights of std 0.5 at E = 8, shrinking as 1/sqrt(E)
    (as torch's initialisations do), so every projection and score keeps one
    scale whatever E.  With std 0.5 at E = 64 the float32 gradients reached
    ~70 while some elements, sums of such terms, were ~0.03: two summation
    orders (OpenBLAS's AVX2 and AVX-512 kernels, ours) then differ there by
    ~20 ulps of the terms, 1e-3 relative of the result."""
    r = lambda *s, std=0.5: (rng.standard_normal(s) * std).astype(dtype)  # noqa: E731
    w_std = 0.5 * np.sqrt(8 / E)
    xq = r(B, Tq, E)
    kv = None if self_attn else r(B, Tk, E)
    w = dict(in_proj_weight=r(3 * E, E, std=w_std), in_proj_bias=r(3 * E) if bias else None,
             out_weight=r(E, E, std=w_std), out_bias=r(E) if bias else None)
    return xq, kv, w


def seq_first(a):
    return None if a is None else np.ascontiguousarray(a.transpose(1, 0, 2))


@pytest.mark.parametrize("self_attn", [True, False])
@pytest.mark.parametrize("layout_seq_first", [False, True])
@pytest.mark.parametrize("dropout,causal", [(0.0, False), (0.3, True)])
def test_mha_packed_equals_mha(rng, self_attn, layout_seq_first, dropout, causal):
    """Same outputs, weights (and dropout mask) and gradients as mha_forward /
    mha_backward, in either token layout; self-attention returns the summed
    input gradient, cross-attention the summed key/value gradient."""
    xq, kv, w = packed_setup(rng, self_attn)
    Tk = xq.shape[1] if self_attn else kv.shape[1]
    mask = rng.random((2, 1, 3, Tk)) > 0.3
    opts = dict(mask=mask, is_causal=causal, dropout_p=dropout, seed=7)
    key = xq if self_attn else kv
    out, saved = K.mha_forward(xq, key, key, None, None, None, None, None, None, w["out_weight"], w["out_bias"], 2,
                               in_proj_weight=w["in_proj_weight"], in_proj_bias=w["in_proj_bias"], **opts)
    dout = rng.standard_normal(out.shape)
    g = K.mha_backward(dout, xq, key, key, None, None, None, None, None, None, w["out_weight"], w["out_bias"], 2,
                       saved, in_proj_weight=w["in_proj_weight"], in_proj_bias=w["in_proj_bias"], **opts)
    lay = seq_first if layout_seq_first else (lambda a: a)
    args = (lay(xq), lay(kv), w["in_proj_weight"], w["in_proj_bias"], w["out_weight"], w["out_bias"], 2)
    out2, s2 = K.mha_packed_forward(*args, seq_first=layout_seq_first, **opts)
    g2 = K.mha_packed_backward(lay(dout), *args, s2, seq_first=layout_seq_first, **opts)
    np.testing.assert_allclose(out2, lay(out), **F64_TIGHT)
    # packed saves the weights before dropout; the kernel's dropout mask is dropout_forward's
    np.testing.assert_allclose(K.dropout_forward(s2.probs, dropout, 7)[0] if dropout else s2.probs, saved.probs,
                               **F64_TIGHT)
    assert s2.proj_q.shape[-1] == (24 if self_attn else 8) and (s2.proj_kv is None) == self_attn
    if self_attn:
        np.testing.assert_allclose(g2.query, lay(g.query + g.key + g.value), **F64_TIGHT)
        assert g2.kv is None
    else:
        np.testing.assert_allclose(g2.query, lay(g.query), **F64_TIGHT)
        np.testing.assert_allclose(g2.kv, lay(g.key + g.value), **F64_TIGHT)
    for name in ("in_proj_weight", "in_proj_bias", "out_weight", "out_bias"):
        np.testing.assert_allclose(getattr(g2, name), getattr(g, name), **F64_TIGHT, err_msg=name)


@pytest.mark.parametrize("self_attn,bias", [(True, True), (False, True), (False, False)])
def test_mha_packed_gradients_float64(rng, self_attn, bias):
    xq, kv, w = packed_setup(rng, self_attn, bias=bias)
    Tk = 3 if self_attn else 4
    mask = np.ones((2, 1, 1, Tk), bool)
    mask[1, ..., -1] = False  # a padded key
    opts = dict(mask=mask, dropout_p=0.2, seed=3, seq_first=True)
    inputs = dict(query=seq_first(xq), **({} if self_attn else dict(kv=seq_first(kv))),
                  **{n: a for n, a in w.items() if a is not None})
    names = list(inputs)

    def split(vals):
        d = dict(zip(names, vals))
        return (d["query"], d.get("kv"), d["in_proj_weight"], d.get("in_proj_bias"), d["out_weight"],
                d.get("out_bias"), 2)

    def forward(*vals):
        return K.mha_packed_forward(*split(vals), **opts)[0]

    def grads(dout, *vals):
        args = split(vals)
        _, saved = K.mha_packed_forward(*args, **opts)
        g = K.mha_packed_backward(dout, *args, saved, **opts)._asdict()
        if not bias:
            assert g["in_proj_bias"] is None and g["out_bias"] is None
        return g

    check_grads(forward, grads, inputs, names)


def test_mha_packed_padding_rows_skipped_exactly(rng):
    """With key padding and zero output gradients on padded query rows, whole
    token rows of the projections' gradients are zero and are skipped: the
    result still equals mha_backward (dense)."""
    B, T, E = 4, 8, 16
    xq, _, w = packed_setup(rng, True, B=B, Tq=T, E=E, dtype=np.float32)
    lengths = [8, 5, 3, 6]
    pad = np.arange(T)[None, :] >= np.array(lengths)[:, None]
    mask = ~pad[:, None, None, :]
    out, saved = K.mha_packed_forward(xq, None, *w.values(), 4, mask=mask)
    dout = rng.standard_normal(out.shape).astype(np.float32)
    dout[pad] = 0
    g = K.mha_packed_backward(dout, xq, None, *w.values(), 4, saved, mask=mask)
    o, s = K.mha_forward(xq, xq, xq, None, None, None, None, None, None, w["out_weight"], w["out_bias"], 4,
                         in_proj_weight=w["in_proj_weight"], in_proj_bias=w["in_proj_bias"], mask=mask)
    ref = K.mha_backward(dout, xq, xq, xq, None, None, None, None, None, None, w["out_weight"], w["out_bias"], 4, s,
                         in_proj_weight=w["in_proj_weight"], in_proj_bias=w["in_proj_bias"], mask=mask)
    np.testing.assert_allclose(g.query, ref.query + ref.key + ref.value, **F32)
    assert (g.query[pad] == 0).all()
    for name in ("in_proj_weight", "in_proj_bias", "out_weight", "out_bias"):
        np.testing.assert_allclose(getattr(g, name), getattr(ref, name), **F32, err_msg=name)


# live_queries only runs on slices of Tq * Tk * Dh >= CT_LIVE_QUERIES_MIN_WORK (16384) multiply-adds:
# the dead-row tests use T 32, Dh 16 (E 32, 2 heads), so that the skip is what they test
DEAD_T, DEAD_E = 32, 32


@pytest.mark.parametrize("self_attn", [True, False])
def test_mha_packed_dead_query_rows_gradcheck(rng, self_attn):
    """Query rows whose output gradient is zero (padded positions) are left out
    of the attention's backward (csrc/attention.c, live_queries): float64
    central differences of sum(out * live * dout), with dropout and key
    padding, sequence-first, so each batch's trailing rows are dead (batch 2:
    all but one)."""
    B, T = 3, DEAD_T
    xq, kv, w = packed_setup(rng, self_attn, B=B, Tq=T, Tk=T, E=DEAD_E)
    key_live = np.arange(T)[None, :] < np.array([T, T - 5, 9])[:, None]
    query_live = (np.arange(T)[None, :] < np.array([T, 20, 1])[:, None]).T[..., None]  # (T, B, 1)
    opts = dict(mask=key_live[:, None, None, :], dropout_p=0.2, seed=5, seq_first=True)
    inputs = dict(query=seq_first(xq), **({} if self_attn else dict(kv=seq_first(kv))), **w)
    names = list(inputs)

    def split(vals):
        d = dict(zip(names, vals))
        return (d["query"], d.get("kv"), d["in_proj_weight"], d["in_proj_bias"], d["out_weight"], d["out_bias"], 2)

    def forward(*vals):
        return K.mha_packed_forward(*split(vals), **opts)[0] * query_live

    def grads(dout, *vals):
        args = split(vals)
        _, saved = K.mha_packed_forward(*args, **opts)
        return K.mha_packed_backward(dout * query_live, *args, saved, **opts)._asdict()

    # the inputs' and the biases' gradients (dq, dk, dv of every row); the weights' are their sums
    check_grads(forward, grads, inputs, [n for n in ("query", "kv", "in_proj_bias", "out_bias") if n in inputs])


@pytest.mark.parametrize("where", ["key", "query"])
def test_mha_packed_dead_query_rows_still_meet_nan(rng, where):
    """A dead query row (zero output gradient) is only left out when what it
    would meet is finite: with a NaN in one head's key or (the dead row's own)
    query, the dense maths' NaN reaches the dead row's gradient, as torch's
    (dQ = dS K, dK = dS^T Q).  (A NaN value reaches every row anyway, through
    the live rows' dO V^T and the softmax backward's row sums.)"""
    B, T, E = 2, DEAD_T, DEAD_E
    xq, _, w = packed_setup(rng, True, B=B, Tq=T, Tk=T, E=E)
    w["in_proj_bias"] = np.zeros_like(w["in_proj_bias"])
    out, saved = K.mha_packed_forward(xq, None, *w.values(), 2)
    column = {"query": 0, "key": E}[where]              # head 0 of q or k in [q | k | v]
    saved.proj_q[1, T - 1, column] = np.nan             # batch 1, last token
    dout = rng.standard_normal(out.shape)
    dout[1, T - 1] = 0                                   # that token's query row is dead
    g = K.mha_packed_backward(dout, xq, None, *w.values(), 2, saved)
    assert np.isnan(g.in_proj_weight).any()
    if where == "query":  # dK = dS^T Q meets the dead row's NaN query
        assert np.isnan(g.query[1]).any()
    else:
        assert np.isnan(g.query[1, T - 1]).all()  # the dead row's dQ is NaN, not 0
    assert not np.isnan(g.query[0]).any()


PACKED_GRAD_KEYWORDS = dict(query="dquery", kv="dkv", in_proj_weight="din_proj_weight",
                            in_proj_bias="din_proj_bias", out_weight="dout_weight", out_bias="dout_bias")


@pytest.mark.parametrize("self_attn", [True, False])
@pytest.mark.parametrize("given_names", [tuple(PACKED_GRAD_KEYWORDS), ("query", "out_bias"), ("in_proj_weight",)],
                         ids=["all", "query+out_bias", "in_proj_weight"])
def test_mha_packed_backward_accumulates_with_padding_rows(rng, self_attn, given_names):
    """Gradients passed in are added to (+=) and returned when dout has padding
    rows (the projections' backward then works on the live rows and adds dx
    row by row, and the attention's dctx starts from zeros); the ones not
    passed start from zeros, so they equal the fresh result."""
    B, T, E = 4, 10, 16
    xq, kv, w = packed_setup(rng, self_attn, B=B, Tq=T, Tk=T, E=E, dtype=np.float64)
    lengths = np.array([10, 6, 3, 8])
    pad = np.arange(T)[None, :] >= lengths[:, None]
    mask = ~pad[:, None, None, :]
    args = (xq, kv, *w.values(), 2)
    out, saved = K.mha_packed_forward(*args, mask=mask)
    dout = rng.standard_normal(out.shape)
    dout[pad] = 0
    fresh = K.mha_packed_backward(dout, *args, saved, mask=mask)._asdict()
    given = {name: rng.standard_normal(fresh[name].shape) for name in given_names if fresh[name] is not None}
    start = {name: a.copy() for name, a in given.items()}
    got = K.mha_packed_backward(dout, *args, saved, mask=mask,
                                **{PACKED_GRAD_KEYWORDS[name]: a for name, a in given.items()})._asdict()
    for name, value in fresh.items():
        if value is None:
            assert got[name] is None, name
        elif name in given:
            assert got[name] is given[name], name
            np.testing.assert_allclose(got[name], start[name] + value, **F64_TIGHT, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], value, **F64_TIGHT, err_msg=name)


def test_mha_packed_backward_given_array_checked(rng):
    """A given gradient of the wrong shape, dtype or not C-contiguous is refused, naming it."""
    xq, kv, w = packed_setup(rng, True, B=2, Tq=3, Tk=3, E=8, dtype=np.float64)
    args = (xq, kv, *w.values(), 2)
    out, saved = K.mha_packed_forward(*args)
    dout = np.ones_like(out)
    with pytest.raises(ValueError, match="mha_packed_backward: din_proj_weight"):
        K.mha_packed_backward(dout, *args, saved, din_proj_weight=np.zeros((8, 8)))
    with pytest.raises(ValueError, match="mha_packed_backward: dout_weight"):
        K.mha_packed_backward(dout, *args, saved, dout_weight=np.zeros((8, 8)).T)
    with pytest.raises(TypeError, match="mha_packed_backward: dquery"):
        K.mha_packed_backward(dout, *args, saved, dquery=np.zeros(xq.shape, np.float32))


@pytest.mark.parametrize("self_attn", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_mha_packed_backward_writes_every_gradient_element(rng, self_attn, threads):
    """mha_packed_backward's packed q / kv gradients are fresh buffers that the
    slices write once each (beta 0, not zeroed first), its returned gradients
    are fresh arrays it writes (accumulate 0, not zeroed first either), and its
    padding rows are found on the pool: with the heap full of NaN from freed
    arrays of the same sizes, at 1 and 2 threads (deterministic mode: split by size alone), with
    padded rows, every gradient equals mha_backward's (dense)."""
    import ctransformer as ct
    B, T, E = 16, 24, 64
    xq, kv, w = packed_setup(rng, self_attn, B=B, Tq=T, Tk=T, E=E, dtype=np.float32)
    lengths = rng.integers(3, T + 1, B)
    pad = np.arange(T)[None, :] >= lengths[:, None]
    mask = ~pad[:, None, None, :]
    key = xq if self_attn else kv
    args = (xq, kv, *w.values(), 4)
    out, saved = K.mha_packed_forward(*args, mask=mask)
    dout = rng.standard_normal(out.shape).astype(np.float32)
    dout[pad] = 0
    before = ct.get_num_threads()
    ct.use_deterministic_algorithms(True)
    try:
        ct.set_num_threads(threads)
        # dirty the heap with NaN arrays of the sizes of the gradients and the kernel's scratch
        for shape in ((B * T, 3 * E), (B * T, E), (B * T, 2 * E), (3 * E, E), (E, E), (3 * E,), (E,)):
            junk = np.full(shape, np.nan, np.float32)
            del junk
        g = K.mha_packed_backward(dout, *args, saved, mask=mask)
    finally:
        ct.set_num_threads(before)
        ct.use_deterministic_algorithms(False)
    o, s = K.mha_forward(xq, key, key, None, None, None, None, None, None, w["out_weight"], w["out_bias"], 4,
                         in_proj_weight=w["in_proj_weight"], in_proj_bias=w["in_proj_bias"], mask=mask)
    ref = K.mha_backward(dout, xq, key, key, None, None, None, None, None, None, w["out_weight"], w["out_bias"], 4,
                         s, in_proj_weight=w["in_proj_weight"], in_proj_bias=w["in_proj_bias"], mask=mask)
    if self_attn:
        np.testing.assert_allclose(g.query, ref.query + ref.key + ref.value, **F32)
        assert (g.query[pad] == 0).all()
    else:
        np.testing.assert_allclose(g.query, ref.query, **F32)
        np.testing.assert_allclose(g.kv, ref.key + ref.value, **F32)
    for name in ("in_proj_weight", "in_proj_bias", "out_weight", "out_bias"):
        np.testing.assert_allclose(getattr(g, name), getattr(ref, name), **F32, err_msg=name)


def test_mha_packed_torch_parity_sequence_first(rng, torch_ref):
    x = rng.standard_normal((5, 3, 8)).astype(np.float32)  # (T, B, E)
    mem = rng.standard_normal((4, 3, 8)).astype(np.float32)
    dout = rng.standard_normal((5, 3, 8)).astype(np.float32)

    def torch_side(torch):
        layer = torch.nn.MultiheadAttention(8, 2)  # batch_first=False
        return torch_mha_run(torch, layer, x, mem, mem, dout, need_weights=False)

    ref = torch_ref(torch_side, inputs=dict(x=x, mem=mem, dout=dout))
    p = ref["params"]
    w = [p[n] for n in ("in_proj_weight", "in_proj_bias", "out_weight", "out_bias")]
    out, saved = K.mha_packed_forward(x, mem, *w, 2, seq_first=True)
    g = K.mha_packed_backward(dout, x, mem, *w, 2, saved, seq_first=True)
    np.testing.assert_allclose(out, ref["out"], **F32)
    t = ref["grads"]
    for got, theirs in ((g.query, t["query"]), (g.kv, t["key"]), (g.in_proj_weight, t["in_proj_weight"]),
                        (g.out_weight, t["out_weight"]), (g.out_bias, t["out_bias"])):
        np.testing.assert_allclose(got, theirs, **F32)


def test_mha_packed_bad_input(rng):
    xq, kv, w = packed_setup(rng, False)
    wv = list(w.values())
    with pytest.raises(ValueError, match=r"mha_packed_forward: embed_dim \(query.shape\[2\] = 8\) must be divisible by num_heads \(3\)"):
        K.mha_packed_forward(xq, kv, *wv, 3)
    with pytest.raises(ValueError, match=r"mha_packed_forward: in_proj_weight.shape\[0\] must be 24 \(3 \* embed_dim\), got 16"):
        K.mha_packed_forward(xq, kv, w["in_proj_weight"][:16], *wv[1:], 2)
    with pytest.raises(ValueError, match=r"mha_packed_forward: kv.shape\[1\] must be 3 \(query.shape\[1\], the batch\), got 4"):
        K.mha_packed_forward(xq, kv, *wv, 2, seq_first=True)
    with pytest.raises(ValueError, match=r"mha_packed_forward: kv.shape\[2\] must be 8 \(query.shape\[2\], embed_dim\), got 6"):
        K.mha_packed_forward(xq, kv[..., :6], *wv, 2)
    with pytest.raises(TypeError, match="mha_packed_forward: out_weight must have dtype float64, got float32"):
        K.mha_packed_forward(xq, kv, *wv[:2], wv[2].astype(np.float32), wv[3], 2)
    with pytest.raises(ValueError, match=r"mha_packed_forward: mask.shape\[1\] must be 4 \(Tk\) or 1"):
        K.mha_packed_forward(xq, kv, *wv, 2, mask=np.ones((3, 3), bool))
    out, saved = K.mha_packed_forward(xq, kv, *wv, 2)
    with pytest.raises(ValueError, match=r"mha_packed_backward: proj_kv.shape\[2\] must be 16"):
        K.mha_packed_backward(out, xq, kv, *wv, 2, saved._replace(proj_kv=saved.proj_kv[..., :8]))
    with pytest.raises(TypeError, match="mha_packed_forward: kv must be None for self-attention"):
        _C.mha_packed_forward(xq, kv, *wv, 2, True, False)
    # empty batch and NaN
    e = np.zeros((0, 3, 8))
    o, s = K.mha_packed_forward(e, None, *wv, 2)
    assert o.shape == (0, 3, 8) and K.mha_packed_backward(o, e, None, *wv, 2, s).query.shape == (0, 3, 8)
    bad = xq.copy()
    bad[0, 1, 2] = np.nan
    o, _ = K.mha_packed_forward(bad, kv, *wv, 2)
    assert np.isnan(o[0, 1]).all() and np.isfinite(o[0, [0, 2]]).all() and np.isfinite(o[1]).all()
