"""F.scaled_dot_product_attention and nn.MultiheadAttention: torch parity
(outputs and every gradient from the same weights), masks of every kind,
fully masked rows, dropout, gradchecks, bad input.

torch's side of each parity test is one ``torch_side(torch)`` function: live
when torch is installed, otherwise its golden fixture
(tests/golden/test_transformer_attention.npz, see tests/golden.py)."""
import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
import ctransformer.nn.functional as F
from tolerances import F32, F64
from golden import packed, unpack



def tol(dtype):
    return F32 if dtype == np.float32 else F64


def ours(a, grad=True):
    return ct.tensor(np.array(a), requires_grad=grad and np.asarray(a).dtype.kind == "f")


def theirs(torch, a, grad=True):
    t = torch.tensor(np.array(a))
    return t.requires_grad_() if grad and t.is_floating_point() else t


def initial_weights(module, dtype, seed=0):
    """Seeded values for every state_dict entry, packed flat in state_dict order, loaded
    into both libraries: matrices uniform in +-1/sqrt(fan_in) (torch's Linear init scale),
    biases 0.2 N(0, 1) (non-zero, so their gradients are exercised)."""
    rng = np.random.default_rng(seed)
    parts = []
    for value in module.state_dict().values():
        shape = tuple(value.shape)
        parts.append(rng.uniform(-1, 1, shape) / np.sqrt(shape[1]) if len(shape) > 1 else rng.standard_normal(shape) * 0.2)
    return np.concatenate([x.reshape(-1) for x in parts]).astype(dtype)


def layout(state_dict):
    """A state_dict's keys with their shapes, in order."""
    return [f"{k} {tuple(v.shape)}" for k, v in state_dict.items()]


def load_flat(module, flat, tensor):
    sd = module.state_dict()
    module.load_state_dict({k: tensor(v.copy()) for k, v in zip(sd, unpack(flat, [v.shape for v in sd.values()]))})


def weights_like(out, seed=7):
    """A fixed random cotangent so every output element matters."""
    return np.random.default_rng(seed).standard_normal(tuple(out.shape)).astype(out.dtype)


def backprop(out_ours):
    (out_ours * ct.tensor(weights_like(out_ours))).sum().backward()


def backprop_torch(torch, out_torch):
    w = weights_like(out_torch.detach().numpy())
    (out_torch * torch.tensor(w)).sum().backward()


def assert_close(a, b, dtype, what=""):
    a = a._data if isinstance(a, ct.Tensor) else a
    np.testing.assert_allclose(a, b, err_msg=what, **tol(dtype))


def assert_grads(triples, dtype):
    """(name, our tensor, torch's gradient) triples."""
    for name, a, b in triples:
        assert a.grad is not None, f"no gradient for {name}"
        assert_close(a.grad, b, dtype, f"gradient of {name}")


# ---------------------------------------------------------------- scaled_dot_product_attention

SDPA_CASES = [
    # q shape, k shape, v shape, mask kind / shape
    ((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3), None),
    ((2, 3, 5, 4), (1, 3, 6, 4), (2, 1, 6, 3), ("bool", (5, 6))),
    ((2, 5, 4), (2, 6, 4), (2, 6, 4), ("float", (2, 5, 6))),
    ((2, 2, 3, 5, 4), (2, 2, 3, 6, 4), (2, 2, 3, 6, 2), ("bool", (2, 1, 3, 5, 6))),
    ((5, 4), (6, 4), (6, 3), ("float", (5, 6))),
    ((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3), ("bool", (2, 1, 1, 6))),
]


def make_mask(spec, rng, dtype):
    if spec is None:
        return None
    kind, shape = spec
    if kind == "bool":
        m = rng.random(shape) > 0.35
        m[..., 0] = True
        return m
    return (rng.standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", SDPA_CASES)
def test_sdpa_parity(case, dtype, torch_ref):
    rng = np.random.default_rng(0)
    qs, ks, vs, ms = case
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in (qs, ks, vs))
    mask = make_mask(ms, rng, dtype)

    def torch_side(torch):
        b = [theirs(torch, x) for x in (q, k, v)]
        out = torch.nn.functional.scaled_dot_product_attention(*b, attn_mask=None if mask is None else torch.tensor(mask))
        backprop_torch(torch, out)
        return dict(out=out, grads=packed(torch, [t.grad for t in b]))

    ref = torch_ref(torch_side, inputs=dict(q=q, k=k, v=v, **({} if mask is None else dict(mask=mask))))
    a = [ours(x) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*a, attn_mask=None if mask is None else ct.tensor(mask))
    assert tuple(out.shape) == ref["out"].shape
    assert_close(out, ref["out"], dtype)
    backprop(out)
    assert_grads(zip("qkv", a, unpack(ref["grads"], (qs, ks, vs))), dtype)


@pytest.mark.parametrize("scale", [None, 0.7])
def test_sdpa_causal_and_scale(scale, torch_ref):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 2, 5, 4)).astype(np.float32) for _ in range(3))

    def torch_side(torch):
        b = [theirs(torch, x) for x in (q, k, v)]
        out = torch.nn.functional.scaled_dot_product_attention(*b, is_causal=True, scale=scale)
        backprop_torch(torch, out)
        return dict(out=out, grads=packed(torch, [t.grad for t in b]))

    ref = torch_ref(torch_side, inputs=dict(q=q, k=k, v=v))
    a = [ours(x) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*a, is_causal=True, scale=scale)
    assert_close(out, ref["out"], np.float32)
    backprop(out)
    assert_grads(zip("qkv", a, unpack(ref["grads"], [x.shape for x in (q, k, v)])), np.float32)


def test_sdpa_gradcheck_float64():
    rng = np.random.default_rng(2)
    q, k, v = (ours(rng.standard_normal(s)) for s in ((2, 3, 2), (1, 4, 2), (2, 4, 3)))
    mask = ct.tensor(rng.standard_normal((3, 4)))
    assert ct.autograd.gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v))


@pytest.mark.parametrize("kind", ["bool", "-inf"])
def test_sdpa_fully_masked_rows_are_zero_not_nan(kind):
    rng = np.random.default_rng(3)
    q, k, v = (ours(rng.standard_normal((2, 4, 3))) for _ in range(3))
    if kind == "bool":
        m = np.ones((4, 4), bool)
        m[1] = False
    else:
        m = np.zeros((4, 4))
        m[1] = -np.inf
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=ct.tensor(m))
    assert np.isfinite(out._data).all() and np.all(out._data[:, 1] == 0)
    out.sum().backward()
    for t in (q, k, v):
        assert np.isfinite(t.grad._data).all()
    assert np.all(q.grad._data[:, 1] == 0)


def test_sdpa_dropout_is_seeded_and_scaled():
    rng = np.random.default_rng(4)
    q, k, v = (ct.tensor(rng.standard_normal((2, 2, 6, 4))) for _ in range(3))
    ct.manual_seed(5)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    ct.manual_seed(5)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    c = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    clean = F.scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(a._data, b._data)
    assert not np.allclose(a._data, c._data) and not np.allclose(a._data, clean._data)
    # dropout_p=1 drops every weight
    assert np.all(F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)._data == 0)


def test_sdpa_dropout_gradient_uses_the_same_mask():
    rng = np.random.default_rng(6)
    q, k, v = (ours(rng.standard_normal((1, 2, 3, 2))) for _ in range(3))

    def f(q, k, v):
        ct.manual_seed(11)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.4)

    assert ct.autograd.gradcheck(f, (q, k, v))


def test_sdpa_bad_input():
    x = ct.randn(2, 3, 4)
    fn = "scaled_dot_product_attention"
    with pytest.raises(RuntimeError, match=f"{fn}: key must have the dtype of query \\(float32\\), got float64"):
        F.scaled_dot_product_attention(x, x.double(), x)
    with pytest.raises(RuntimeError, match=rf"{fn}: key.shape\[-1\] must be 4 \(query.shape\[-1\], the embedding\), got 3"):
        F.scaled_dot_product_attention(x, ct.randn(2, 3, 3), x)
    with pytest.raises(RuntimeError, match=rf"{fn}: value.shape\[-2\] must be 5 \(key.shape\[-2\], the source length\), got 3"):
        F.scaled_dot_product_attention(x, ct.randn(2, 5, 4), x)
    with pytest.raises(RuntimeError, match=f"{fn}: the leading \\(batch\\) dims of query \\(2,\\), key \\(3,\\)"):
        F.scaled_dot_product_attention(x, ct.randn(3, 3, 4), ct.randn(3, 3, 4))
    with pytest.raises(RuntimeError, match=rf"{fn}: attn_mask of shape \(3, 2\) must broadcast to \(..., L, S\) = \(2, 3, 3\)"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=ct.ones(3, 2, dtype=ct.bool))
    with pytest.raises(RuntimeError, match=f"{fn}: attn_mask must have dtype bool or a float dtype, got int64"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=ct.ones(3, 3, dtype=ct.int64))
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=ct.ones(3, 3, dtype=ct.bool), is_causal=True)
    with pytest.raises(RuntimeError, match=f"{fn}: query must have at least 2 dimensions"):
        F.scaled_dot_product_attention(ct.randn(4), x, x)
    with pytest.raises(RuntimeError, match=f"{fn}: dropout_p must be in \\[0, 1\\], got 1.5"):
        F.scaled_dot_product_attention(x, x, x, dropout_p=1.5)
    with pytest.raises(TypeError, match=f"{fn}: query must be a Tensor, got ndarray"):
        F.scaled_dot_product_attention(np.zeros((3, 4)), x, x)


# ---------------------------------------------------------------- MultiheadAttention

def ours_mha(E=8, H=2, seed=0, **kw):
    """Our MultiheadAttention (our init), with non-zero biases, for the tests that need no torch."""
    ct.manual_seed(seed)
    m = nn.MultiheadAttention(E, H, **kw)
    rng = np.random.default_rng(seed)
    for n, p in m.named_parameters():
        if "bias" in n:
            p.data = ct.tensor(rng.normal(0, 0.1, tuple(p.shape)).astype(np.float32))
    return m


def run_mha(torch_ref, q, k, v, dtype, self_attn=False, mha_kw=None, **kw):
    """torch's MultiheadAttention(8, 2, **mha_kw) and ours with the same weights
    (initial_weights; the state_dict keys and shapes must be torch's, in torch's order),
    run with the same inputs and kwargs (masks as numpy): compare outputs, weights and
    every gradient.  Returns our module and output."""
    mha_kw = mha_kw or {}
    names = ["query"] if self_attn else ["query", "key", "value"]
    m = nn.MultiheadAttention(8, 2, **mha_kw)
    if dtype == np.float64:
        m = m.double()
    weights = initial_weights(m, dtype)

    def torch_side(torch):
        tm = torch.nn.MultiheadAttention(8, 2, **mha_kw)
        if dtype == np.float64:
            tm = tm.double()
        load_flat(tm, weights, torch.tensor)
        b = [theirs(torch, x) for x in (q, k, v)] if not self_attn else [theirs(torch, q)] * 3
        kt = {n: (torch.tensor(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
        ref, rw = tm(*b, **kt)
        backprop_torch(torch, ref)
        return dict(layout=layout(tm.state_dict()), out=ref, has_weights=rw is not None,
                    weights=np.zeros(0) if rw is None else rw,
                    input_grads=packed(torch, [t.grad for t in b[:len(names)]]),
                    param_grads=packed(torch, [p.grad for _, p in tm.named_parameters()]))

    inputs = dict(q=q) if self_attn else dict(q=q, k=k) if k is v else dict(q=q, k=k, v=v)
    inputs.update({n: x for n, x in kw.items() if isinstance(x, np.ndarray)})
    ref = torch_ref(torch_side, inputs=dict(weights=weights, **inputs))
    assert layout(m.state_dict()) == [str(k) for k in ref["layout"]], "state_dict keys/shapes differ from torch's"
    load_flat(m, weights, ct.tensor)
    a = [ours(x) for x in (q, k, v)] if not self_attn else [ours(q)] * 3
    ko = {n: (ct.tensor(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
    out, w = m(*a, **ko)
    assert_close(out, ref["out"], dtype, "output")
    if not ref["has_weights"]:
        assert w is None
    else:
        assert tuple(w.shape) == ref["weights"].shape
        assert_close(w, ref["weights"], dtype, "attention weights")
    backprop(out)
    assert_grads(zip(names, a, unpack(ref["input_grads"], [x.shape for x in a[:len(names)]])), dtype)
    params = list(m.named_parameters())
    grads = unpack(ref["param_grads"], [p.shape for _, p in params])
    assert_grads([(n, p, g) for (n, p), g in zip(params, grads)], dtype)
    return m, out


def seq(rng, L, N, E, dtype, batch_first):
    x = rng.standard_normal((N, L, E) if batch_first else (L, N, E))
    return x.astype(dtype)


def test_mha_state_dict_keys_match_torch(torch_ref):
    configs = ({}, dict(bias=False), dict(kdim=5, vdim=3), dict(batch_first=True))

    def torch_side(torch):
        return dict(layouts=[layout(torch.nn.MultiheadAttention(8, 2, **kw).state_dict()) for kw in configs])

    ref = torch_ref(torch_side)
    for kw, torch_layout in zip(configs, ref["layouts"]):
        assert layout(nn.MultiheadAttention(8, 2, **kw).state_dict()) == [str(k) for k in torch_layout], kw


def test_mha_init_follows_torch():
    ct.manual_seed(0)
    m = nn.MultiheadAttention(16, 4)
    bound = np.sqrt(6 / (16 + 48))  # xavier_uniform_ on the (3E, E) in_proj_weight
    w = m.in_proj_weight._data
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.all(m.in_proj_bias._data == 0) and np.all(m.out_proj.bias._data == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch_first", [False, True])
def test_mha_self_attention_parity(dtype, batch_first, torch_ref):
    rng = np.random.default_rng(1)
    x = seq(rng, 5, 3, 8, dtype, batch_first)
    run_mha(torch_ref, x, x, x, dtype, self_attn=True, mha_kw=dict(batch_first=batch_first))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_mha_cross_attention_weights(batch_first, need_weights, average, torch_ref):
    rng = np.random.default_rng(2)
    q, kv = seq(rng, 4, 2, 8, np.float32, batch_first), seq(rng, 6, 2, 8, np.float32, batch_first)
    run_mha(torch_ref, q, kv, kv, np.float32, mha_kw=dict(batch_first=batch_first), need_weights=need_weights,
            average_attn_weights=average)


@pytest.mark.parametrize("batch_first", [False, True])
def test_mha_kdim_vdim_parity(batch_first, torch_ref):
    rng = np.random.default_rng(3)
    q = seq(rng, 4, 2, 8, np.float32, batch_first)
    k, v = seq(rng, 6, 2, 5, np.float32, batch_first), seq(rng, 6, 2, 3, np.float32, batch_first)
    m, _ = run_mha(torch_ref, q, k, v, np.float32, mha_kw=dict(kdim=5, vdim=3, batch_first=batch_first))
    assert m.in_proj_weight is None and tuple(m.k_proj_weight.shape) == (8, 5)


def test_mha_without_bias_parity(torch_ref):
    rng = np.random.default_rng(4)
    q, kv = seq(rng, 4, 2, 8, np.float32, False), seq(rng, 5, 2, 8, np.float32, False)
    m, _ = run_mha(torch_ref, q, kv, kv, np.float32, mha_kw=dict(bias=False))
    assert m.in_proj_bias is None and m.out_proj.bias is None


def _masks(rng, N, H, L, S, dtype):
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:] = True
    attn_bool = np.triu(np.ones((L, S), bool), 1 + S - L)  # True = not allowed, every row keeps a key
    attn_float = (rng.standard_normal((L, S)) * 2).astype(dtype)
    attn3 = (rng.standard_normal((N * H, L, S))).astype(dtype)
    attn3_bool = rng.random((N * H, L, S)) > 0.7
    attn3_bool[..., 0] = False
    kpm_float = np.where(kpm, -np.inf, 0.0).astype(dtype) + (rng.standard_normal((N, S)) * 0.5).astype(dtype)
    return dict(kpm=kpm, attn_bool=attn_bool, attn_float=attn_float, attn3=attn3, attn3_bool=attn3_bool,
                kpm_float=kpm_float)


MASK_COMBOS = [
    dict(key_padding_mask="kpm"),
    dict(key_padding_mask="kpm_float"),
    dict(attn_mask="attn_bool"),
    dict(attn_mask="attn_float"),
    dict(attn_mask="attn3"),
    dict(attn_mask="attn3_bool"),
    dict(attn_mask="attn_bool", key_padding_mask="kpm"),
    dict(attn_mask="attn_float", key_padding_mask="kpm"),
    dict(attn_mask="attn3_bool", key_padding_mask="kpm_float"),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("combo", MASK_COMBOS, ids=lambda c: "+".join(c.values()))
@pytest.mark.parametrize("batch_first", [False, True])
def test_mha_masks_parity(combo, batch_first, torch_ref):
    rng = np.random.default_rng(5)
    N, H, L, S = 2, 2, 4, 6
    masks = _masks(rng, N, H, L, S, np.float32)
    q, kv = seq(rng, L, N, 8, np.float32, batch_first), seq(rng, S, N, 8, np.float32, batch_first)
    run_mha(torch_ref, q, kv, kv, np.float32, mha_kw=dict(batch_first=batch_first),
            **{k: masks[v] for k, v in combo.items()})


def test_mha_causal_mask_and_is_causal_hint(torch_ref):
    rng = np.random.default_rng(6)
    x = seq(rng, 5, 2, 8, np.float32, False)
    causal = np.triu(np.ones((5, 5), bool), 1)
    m, _ = run_mha(torch_ref, x, x, x, np.float32, self_attn=True, attn_mask=causal, is_causal=True,
                   need_weights=False)
    # Without a mask torch requires one; we apply the causal mask the hint names.
    out_hint, _ = m(ct.tensor(x), ct.tensor(x), ct.tensor(x), is_causal=True, need_weights=False)
    out_mask, _ = m(ct.tensor(x), ct.tensor(x), ct.tensor(x), attn_mask=ct.tensor(causal), need_weights=False)
    np.testing.assert_allclose(out_hint._data, out_mask._data, **F32)
    gen = nn.Transformer.generate_square_subsequent_mask(5)
    out_float, _ = m(ct.tensor(x), ct.tensor(x), ct.tensor(x), attn_mask=gen, need_weights=False)
    np.testing.assert_allclose(out_float._data, out_mask._data, **F32)


def test_mha_unbatched_parity(torch_ref):
    rng = np.random.default_rng(7)
    q, kv = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((6, 8)).astype(np.float32)
    kpm = np.zeros(6, bool)
    kpm[-1] = True
    run_mha(torch_ref, q, kv, kv, np.float32, key_padding_mask=kpm)


@pytest.mark.parametrize("kind", ["bool", "-inf"])
def test_mha_fully_masked_rows_no_nan(kind):
    rng = np.random.default_rng(8)
    m = ours_mha(batch_first=True)
    q = ours(rng.standard_normal((2, 3, 8)).astype(np.float32))
    kv = ours(rng.standard_normal((2, 4, 8)).astype(np.float32))
    kpm = np.zeros((2, 4), bool)
    kpm[1] = True  # every key of batch row 1 is padding
    mask = ct.tensor(kpm if kind == "bool" else np.where(kpm, -np.inf, 0).astype(np.float32))
    out, w = m(q, kv, kv, key_padding_mask=mask)
    assert np.isfinite(out._data).all() and np.isfinite(w._data).all()
    assert np.all(w._data[1] == 0)
    out.sum().backward()
    for t in [q, kv] + list(m.parameters()):
        assert np.isfinite(t.grad._data).all()
    assert np.all(kv.grad._data[1] == 0)


def test_mha_dropout_train_vs_eval():
    rng = np.random.default_rng(9)
    m = ours_mha(dropout=0.5)
    x = ct.tensor(seq(rng, 5, 2, 8, np.float32, False))
    ct.manual_seed(1)
    a, wa = m(x, x, x)
    ct.manual_seed(1)
    b, _ = m(x, x, x)
    np.testing.assert_array_equal(a._data, b._data)
    m.eval()
    c, wc = m(x, x, x)
    m.dropout = 0.0
    m.train()
    d, _ = m(x, x, x)
    np.testing.assert_array_equal(c._data, d._data)
    assert not np.allclose(a._data, c._data)
    np.testing.assert_allclose(wc._data.sum(-1), 1, rtol=1e-5)


def test_mha_gradcheck_float64_with_masks():
    rng = np.random.default_rng(10)
    m = nn.MultiheadAttention(4, 2, kdim=3, vdim=2, batch_first=True).double()
    for p in m.parameters():
        p.data = ct.tensor(rng.standard_normal(tuple(p.shape)) * 0.5)
    q, k, v = ours(rng.standard_normal((2, 2, 4))), ours(rng.standard_normal((2, 3, 3))), ours(rng.standard_normal((2, 3, 2)))
    kpm = ct.tensor(np.array([[False, False, True], [False, False, False]]))
    am = ct.tensor(rng.standard_normal((2, 3)))
    params = list(m.parameters())

    def f(q, k, v, *ps):
        return m(q, k, v, key_padding_mask=kpm, attn_mask=am, need_weights=False)[0]

    assert ct.autograd.gradcheck(f, (q, k, v, *params))


def test_mha_gradient_through_weights():
    # as torch: the returned weights are differentiable (averaged and per head)
    m = ours_mha().double()
    x = ct.randn(3, 2, 8, dtype=ct.float64, requires_grad=True)
    assert ct.autograd.gradcheck(lambda x: m(x, x, x)[1], (x,))
    assert ct.autograd.gradcheck(lambda x: m(x, x, x, average_attn_weights=False)[1], (x,))


def test_mha_bad_input():
    with pytest.raises(AssertionError, match=r"embed_dim \(10\) must be divisible by num_heads \(3\)"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(NotImplementedError, match="add_bias_kv=True is not supported"):
        nn.MultiheadAttention(8, 2, add_bias_kv=True)
    m = nn.MultiheadAttention(8, 2)
    x = ct.randn(5, 2, 8)
    mem = ct.randn(6, 2, 8)
    fn = "MultiheadAttention"
    with pytest.raises(AssertionError, match=rf"{fn}: key_padding_mask must have shape \(batch, source length S\) = \(2, 6\), got \(6, 2\)"):
        m(x, mem, mem, key_padding_mask=ct.zeros(6, 2, dtype=ct.bool))
    with pytest.raises(RuntimeError, match=rf"{fn}: the 2-D attn_mask must have shape \(target length L, source length S\) = \(5, 6\), got \(6, 5\)"):
        m(x, mem, mem, attn_mask=ct.zeros(6, 5, dtype=ct.bool))
    with pytest.raises(RuntimeError, match=rf"{fn}: the 3-D attn_mask must have shape \(batch \* num_heads, L, S\) = \(4, 5, 6\), got \(2, 5, 6\)"):
        m(x, mem, mem, attn_mask=ct.zeros(2, 5, 6, dtype=ct.bool))
    with pytest.raises(AssertionError, match=f"{fn}: attn_mask must be 2-D \\(L, S\\) or 3-D"):
        m(x, mem, mem, attn_mask=ct.zeros(1, 1, 5, 6, dtype=ct.bool))
    with pytest.raises(AssertionError, match=f"{fn}: key_padding_mask must have dtype bool or a float dtype, got int64"):
        m(x, mem, mem, key_padding_mask=ct.zeros(2, 6, dtype=ct.int64))
    with pytest.raises(RuntimeError, match=f"{fn}: key must have the dtype of query \\(float32\\), got float64"):
        m(x, mem.double(), mem.double())
    with pytest.raises(AssertionError, match=rf"{fn}: query.shape\[-1\] \(the features\) must be embed_dim = 8, got 6"):
        m(ct.randn(5, 2, 6), mem, mem)
    # batch_first=False reads (seq, batch, feature): a batch-first tensor puts the batch on the wrong axis.
    with pytest.raises(RuntimeError, match=rf"{fn}: key.shape\[1\] \(the batch axis, batch_first=False: \(seq, batch, feature\)\) "
                                         rf"must be 2 \(query.shape\[1\]\), got 6; check batch_first"):
        m(x, ct.randn(2, 6, 8), ct.randn(2, 6, 8))
    with pytest.raises(AssertionError, match=rf"{fn}: value.shape\[0\] \(the source length\) must be 6 \(key.shape\[0\]\), got 4"):
        m(x, mem, ct.randn(4, 2, 8))
    with pytest.raises(AssertionError, match=f"{fn}: query must be 3-D \\(L, batch, E\\) or 2-D unbatched"):
        m(ct.randn(1, 5, 2, 8), mem, mem)
    with pytest.raises(RuntimeError, match=f"{fn}: with a packed in_proj_weight, key and value must have embed_dim 8"):
        m(x, ct.randn(6, 2, 4), ct.randn(6, 2, 4))
    with pytest.raises(RuntimeError, match=f"{fn}: query must have dtype float32 or float64, got int64"):
        m(ct.zeros(5, 2, 8, dtype=ct.int64), mem, mem)


# ---------------------------------------------------------------- misuse: torch's exception classes
ATTENTION_MISUSE = {  # case(lib, x (2, 3, 4), m = MultiheadAttention(8, 2), q (5, 3, 8), k (6, 3, 8))
    "sdpa_key_dtype": lambda lib, x, m, q, k: lib.nn.functional.scaled_dot_product_attention(x, x.double(), x),
    "sdpa_key_width": lambda lib, x, m, q, k: lib.nn.functional.scaled_dot_product_attention(x, lib.ones(2, 3, 3), x),
    "sdpa_value_length": lambda lib, x, m, q, k: lib.nn.functional.scaled_dot_product_attention(
        x, lib.ones(2, 5, 4), x),
    "sdpa_batch": lambda lib, x, m, q, k: lib.nn.functional.scaled_dot_product_attention(
        x, lib.ones(3, 3, 4), lib.ones(3, 3, 4)),
    "sdpa_mask_shape": lambda lib, x, m, q, k: lib.nn.functional.scaled_dot_product_attention(
        x, x, x, attn_mask=lib.ones(3, 2, dtype=lib.bool)),
    "sdpa_mask_dtype": lambda lib, x, m, q, k: lib.nn.functional.scaled_dot_product_attention(
        x, x, x, attn_mask=lib.ones(3, 3, dtype=lib.int64)),
    "sdpa_1d_query": lambda lib, x, m, q, k: lib.nn.functional.scaled_dot_product_attention(lib.ones(4), x, x),
    "sdpa_dropout_p": lambda lib, x, m, q, k: lib.nn.functional.scaled_dot_product_attention(x, x, x, dropout_p=1.5),
    "mha_heads_divide": lambda lib, x, m, q, k: lib.nn.MultiheadAttention(10, 3),
    "mha_no_heads": lambda lib, x, m, q, k: lib.nn.MultiheadAttention(8, 0),
    "mha_query_4d": lambda lib, x, m, q, k: m(lib.ones(5, 3, 8, 1), k, k),
    "mha_key_2d": lambda lib, x, m, q, k: m(q, lib.ones(6, 8), lib.ones(6, 8)),
    "mha_value_length": lambda lib, x, m, q, k: m(q, k, lib.ones(7, 3, 8)),
    "mha_query_width": lambda lib, x, m, q, k: m(lib.ones(5, 3, 6), k, k),
    "mha_key_width": lambda lib, x, m, q, k: m(q, lib.ones(6, 3, 6), lib.ones(6, 3, 6)),
    "mha_key_dtype": lambda lib, x, m, q, k: m(q, k.double(), k.double()),
    "mha_mask_2d": lambda lib, x, m, q, k: m(q, k, k, attn_mask=lib.zeros(6, 5)),
    "mha_mask_3d": lambda lib, x, m, q, k: m(q, k, k, attn_mask=lib.zeros(2, 5, 6)),
    "mha_mask_4d": lambda lib, x, m, q, k: m(q, k, k, attn_mask=lib.zeros(1, 1, 5, 6)),
    "mha_mask_dtype": lambda lib, x, m, q, k: m(q, k, k, attn_mask=lib.zeros(5, 6, dtype=lib.int64)),
    "mha_padding_shape": lambda lib, x, m, q, k: m(q, k, k, key_padding_mask=lib.zeros(3, 5, dtype=lib.bool)),
    "mha_padding_dtype": lambda lib, x, m, q, k: m(q, k, k, key_padding_mask=lib.zeros(3, 6, dtype=lib.int64)),
    "mha_unbatched_padding_2d": lambda lib, x, m, q, k: m(lib.ones(5, 8), lib.ones(6, 8), lib.ones(6, 8),
                                                          key_padding_mask=lib.zeros(1, 6, dtype=lib.bool)),
    "transformer_batch": lambda lib, x, m, q, k: lib.nn.Transformer(8, 2, 1, 1, 16)(lib.ones(5, 2, 8),
                                                                                     lib.ones(4, 3, 8)),
    "transformer_width": lambda lib, x, m, q, k: lib.nn.Transformer(8, 2, 1, 1, 16)(lib.ones(5, 2, 8),
                                                                                     lib.ones(4, 2, 6)),
    "encoder_layer_width": lambda lib, x, m, q, k: lib.nn.TransformerEncoderLayer(8, 2, 16)(lib.ones(5, 2, 6)),
    "encoder_layer_4d": lambda lib, x, m, q, k: lib.nn.TransformerEncoderLayer(8, 2, 16)(lib.ones(2, 5, 2, 8)),
}


def _misuse_classes(lib) -> dict:
    """The exception class each ATTENTION_MISUSE case raises ('' when none)."""
    lib.manual_seed(0)
    args = (lib.ones(2, 3, 4), lib.nn.MultiheadAttention(8, 2), lib.ones(5, 3, 8), lib.ones(6, 3, 8))
    return {name: _run_class(lambda: case(lib, *args)) for name, case in ATTENTION_MISUSE.items()}


def _run_class(fn) -> str:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
    return ""


def test_attention_misuse_raises_torchs_exception_classes(torch_ref):
    """Shapes, dtypes and masks that torch refuses are refused with torch's
    class (SDPA: RuntimeError; MultiheadAttention's asserts: AssertionError)."""
    import warnings
    with warnings.catch_warnings():  # torch's nested-tensor notes on the Transformer
        warnings.simplefilter("ignore")
        theirs = torch_ref(lambda torch: {k: np.array(v) for k, v in _misuse_classes(torch).items()})
    ours = _misuse_classes(ct)
    assert ours == {name: str(theirs[name]) for name in ATTENTION_MISUSE}
    assert all(ours.values())  # every case is refused
