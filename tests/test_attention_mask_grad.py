"""No silently missing gradient in attention: a float attn_mask / tgt_mask /
memory_mask that requires grad (a learned additive bias) gets d loss /
d scores summed over its broadcast dims, and the attention weights of
need_weights=True are differentiable (averaged and per head) — compared
with torch 2.13 through golden fixtures, and with finite differences."""
import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
import ctransformer.nn.functional as F
from ctransformer.autograd import gradcheck
from ctransformer.nn import _attention_grad

TIGHT = dict(rtol=1e-9, atol=1e-11)  # float64 on both sides


def test_sdpa_learned_bias_gets_its_gradient(rng, torch_ref):
    q, k, v = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((2, 3, 6, 5))
    bias = rng.standard_normal((3, 1, 6))  # per head, broadcast over batch and queries
    g = rng.standard_normal((2, 3, 4, 5))

    def run(lib):
        ts = [lib.tensor(a, requires_grad=True) for a in (q, k, v, bias)]
        out = lib.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=ts[3])
        out.backward(lib.tensor(g))
        return dict(out=out.detach().numpy(), dq=ts[0].grad.numpy(), dk=ts[1].grad.numpy(), dv=ts[2].grad.numpy(),
                    dbias=ts[3].grad.numpy())

    ref = torch_ref(run, inputs=dict(q=q, k=k, v=v, bias=bias, g=g))
    ours = run(ct)
    for name in ref:
        np.testing.assert_allclose(ours[name], ref[name], **TIGHT, err_msg=name)


def test_sdpa_mask_gradient_finite_differences(rng):
    q = ct.tensor(rng.standard_normal((3, 4)), requires_grad=True)  # unbatched
    k = ct.tensor(rng.standard_normal((5, 4)), requires_grad=True)
    v = ct.tensor(rng.standard_normal((5, 2)), requires_grad=True)
    full = ct.tensor(rng.standard_normal((3, 5)), requires_grad=True)
    row = ct.tensor(rng.standard_normal(5), requires_grad=True)
    assert gradcheck(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), (q, k, v, full))
    assert gradcheck(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
                     (q, k, v, row))
    hidden = ct.tensor(np.where(rng.random((3, 5)) < 0.3, -np.inf, rng.standard_normal((3, 5))), requires_grad=True)
    hidden.data[0] = float("-inf")  # a fully hidden row: zeros, no NaN
    assert gradcheck(lambda m: F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), attn_mask=m),
                     (hidden,))

    def dropped(q, m):  # dropout: the same seed gives the same mask on every call
        ct.manual_seed(7)
        return F.scaled_dot_product_attention(q, k.detach(), v.detach(), attn_mask=m, dropout_p=0.4)

    assert gradcheck(dropped, (q, full))


def _mha_state(rng, E, kdim=None, vdim=None):
    st = {}
    if kdim is None:
        st["in_proj_weight"] = rng.standard_normal((3 * E, E)) * 0.4
    else:
        st["q_proj_weight"] = rng.standard_normal((E, E)) * 0.4
        st["k_proj_weight"] = rng.standard_normal((E, kdim)) * 0.4
        st["v_proj_weight"] = rng.standard_normal((E, vdim)) * 0.4
    st["in_proj_bias"] = rng.standard_normal(3 * E) * 0.1
    st["out_proj.weight"] = rng.standard_normal((E, E)) * 0.4
    st["out_proj.bias"] = rng.standard_normal(E) * 0.1
    return st


def _load(lib, module, state):
    module.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
    return module


@pytest.mark.parametrize("case", ["self_2d_mask", "cross_3d_mask", "kdim_vdim", "weights_only_per_head"])
def test_mha_mask_and_weights_gradients_match_torch(rng, torch_ref, case):
    E, H, L, S, B = 6, 2, 4, 5, 2
    kv = dict(kdim=3, vdim=4) if case == "kdim_vdim" else {}
    state = _mha_state(rng, E, kv.get("kdim"), kv.get("vdim"))
    x = rng.standard_normal((L, B, E))
    mem = rng.standard_normal((S, B, E)) if case != "kdim_vdim" else None
    km, vm = (rng.standard_normal((S, B, 3)), rng.standard_normal((S, B, 4))) if case == "kdim_vdim" else (None, None)
    Sx = L if case == "self_2d_mask" else S
    mask = rng.standard_normal((B * H, L, Sx)) if case == "cross_3d_mask" else rng.standard_normal((L, Sx))
    kpm = np.zeros((B, Sx))
    kpm[1, -1] = -np.inf  # a padded key (float, like the float attn_mask)
    g_out, g_w = rng.standard_normal((L, B, E)), rng.standard_normal((B, H, L, Sx))
    average = case != "weights_only_per_head"
    mask_grad = case != "weights_only_per_head"

    def run(lib):
        m = _load(lib, lib.nn.MultiheadAttention(E, H, dtype=lib.float64, **kv), state)
        xt = lib.tensor(x, requires_grad=True)
        if case == "self_2d_mask":
            k = v = xt
        elif case in ("cross_3d_mask", "weights_only_per_head"):
            k = v = lib.tensor(mem, requires_grad=True)
        else:
            k, v = lib.tensor(km, requires_grad=True), lib.tensor(vm, requires_grad=True)
        mt = lib.tensor(mask, requires_grad=mask_grad)
        out, w = m(xt, k, v, attn_mask=mt, key_padding_mask=lib.tensor(kpm), need_weights=True,
                   average_attn_weights=average)
        gw = lib.tensor(g_w.mean(1) if average else g_w)
        loss = (out * lib.tensor(g_out)).sum() + (w * gw).sum()
        loss.backward()
        res = dict(out=out.detach().numpy(), w=w.detach().numpy(), dx=xt.grad.numpy())
        if k is not xt:
            res["dk"] = k.grad.numpy()
        if v is not k:
            res["dv"] = v.grad.numpy()
        if mask_grad:
            res["dmask"] = mt.grad.numpy()
        for name, p in m.named_parameters():
            res["d_" + name.replace(".", "_")] = p.grad.numpy()
        return res

    ref = torch_ref(run, inputs=dict(x=x, mask=mask, g_out=g_out, g_w=g_w, **{k: v for k, v in state.items()}))
    ours = run(ct)
    assert set(ours) == set(ref)
    for name in ref:
        np.testing.assert_allclose(ours[name], ref[name], **TIGHT, err_msg=name)


def test_decoder_layer_tgt_and_memory_masks_get_gradients(rng, torch_ref):
    E, H, T, S, B = 6, 2, 3, 4, 2
    ct.manual_seed(0)
    layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=8, dropout=0.0, dtype=ct.float64)
    state = {k: v.detach().numpy().copy() for k, v in layer.state_dict().items()}
    tgt, memory = rng.standard_normal((T, B, E)), rng.standard_normal((S, B, E))
    tm, mm = rng.standard_normal((T, T)), rng.standard_normal((T, S))
    g = rng.standard_normal((T, B, E))

    def run(lib):
        lay = lib.nn.TransformerDecoderLayer(E, H, dim_feedforward=8, dropout=0.0, dtype=lib.float64)
        _load(lib, lay, state)
        ts = [lib.tensor(a, requires_grad=True) for a in (tgt, memory, tm, mm)]
        out = lay(ts[0], ts[1], tgt_mask=ts[2], memory_mask=ts[3])
        out.backward(lib.tensor(g))
        return dict(out=out.detach().numpy(), dtgt=ts[0].grad.numpy(), dmem=ts[1].grad.numpy(),
                    dtgt_mask=ts[2].grad.numpy(), dmemory_mask=ts[3].grad.numpy())

    ref = torch_ref(run, inputs=dict(tgt=tgt, memory=memory, tm=tm, mm=mm, g=g))
    ours = run(ct)
    for name in ref:
        np.testing.assert_allclose(ours[name], ref[name], **TIGHT, err_msg=name)


def test_encoder_layer_src_mask_and_transformer_masks_gradcheck(rng):
    E, H = 4, 2
    enc = nn.TransformerEncoderLayer(E, H, dim_feedforward=6, dropout=0.0, dtype=ct.float64)
    src = ct.tensor(rng.standard_normal((3, 2, E)), requires_grad=True)
    sm = ct.tensor(rng.standard_normal((3, 3)), requires_grad=True)
    assert gradcheck(lambda s, m: enc(s, src_mask=m), (src, sm))
    model = nn.Transformer(E, H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=6, dropout=0.0,
                           dtype=ct.float64)
    tgt = ct.tensor(rng.standard_normal((2, 2, E)))
    masks = [ct.tensor(rng.standard_normal(s), requires_grad=True) for s in ((3, 3), (2, 2), (2, 3))]
    assert gradcheck(lambda a, b, c: model(src.detach(), tgt, src_mask=a, tgt_mask=b, memory_mask=c), masks)


def test_mha_weights_with_dropout_gradcheck(rng):
    m = nn.MultiheadAttention(4, 2, dropout=0.3, dtype=ct.float64)
    x = ct.tensor(rng.standard_normal((3, 2, 4)), requires_grad=True)
    am = ct.tensor(rng.standard_normal((3, 3)), requires_grad=True)

    def f(x, am):
        ct.manual_seed(5)
        out, w = m(x, x, x, attn_mask=am, average_attn_weights=False)
        return out, w

    assert gradcheck(f, (x, am))
    ct.manual_seed(5)
    _, w1 = m(x, x, x, average_attn_weights=False)
    out, w2 = _attention_grad.mha_composite(
        x.detach().transpose(0, 1), x.detach().transpose(0, 1), x.detach().transpose(0, 1), 2,
        (m.in_proj_weight[:4].detach(), m.in_proj_weight[4:8].detach(), m.in_proj_weight[8:].detach()),
        (m.in_proj_bias[:4].detach(), m.in_proj_bias[4:8].detach(), m.in_proj_bias[8:].detach()),
        m.out_proj.weight.detach(), m.out_proj.bias.detach(), None, [], False,
        _attention_grad.dropout_factors((2, 2, 3, 3), np.float64, 0.3, _seed_of(m, x)), False)
    np.testing.assert_allclose(w2.numpy(), w1.detach().numpy(), rtol=1e-12, atol=1e-14)


def _seed_of(m, x):
    """The dropout seed the next MHA call draws after manual_seed(5)."""
    ct.manual_seed(5)
    return ct.random.default_generator.next_seed()


def test_fused_path_is_kept_when_no_mask_gradient_and_weights_unused(rng, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the composite re-run must not be used here")

    import ctransformer.ops.attention as ops_attention
    monkeypatch.setattr(ops_attention, "mha_composite_grads", refuse)
    monkeypatch.setattr(ops_attention, "sdpa_mask_grad", refuse)
    m = nn.MultiheadAttention(8, 2)
    x = ct.randn(4, 2, 8, requires_grad=True)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    out, w = m(x, x, x, attn_mask=mask)  # need_weights=True, weights not used in the loss
    out.sum().backward()
    assert x.grad is not None and m.in_proj_weight.grad is not None
    q = ct.randn(2, 3, 5, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, attn_mask=ct.randn(3, 3)).sum().backward()
    assert q.grad is not None
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    layer(x, src_mask=mask).sum().backward()
    with pytest.raises(AssertionError, match="composite"):
        m(x, x, x, attn_mask=mask.clone().requires_grad_())[0].sum().backward()
