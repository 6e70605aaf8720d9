"""decode_model_step (a whole decoder for one token in one call) and
decode_layer_plan (a layer's arguments checked once): the same bits as the
kernels called one by one (embedding, decode_layer_step per layer, layer
norm, decode_linear), float32 and float64, with and without cross-attention,
final norm and biases; the plans keep their arrays alive; bad input.
The models' use of it is tested in test_decode_layer_step.py."""
import gc

import numpy as np
import pytest

import ctransformer.kernels as K
from test_decode_layer_step import E, H, S, TMAX, heads, weights

V, V_OUT, LAYERS = 11, 13, 3


def model_parts(rng, dtype, B, cross, final_norm=True, biases=True):
    """Weights of a decoder of LAYERS layers and its caches (filled: a decode already under way)."""
    layers = [weights(rng, dtype, cross, biases) for _ in range(LAYERS)]
    caches = [tuple(rng.standard_normal((B, H, TMAX, E // H)).astype(dtype) for _ in range(2)) for _ in range(LAYERS)]
    mem = None
    if cross:
        pad = np.zeros((B, S), bool)
        pad[-1, 1:] = True  # a padded source
        mem = [(heads(rng.standard_normal((B, S, E))).astype(dtype), heads(rng.standard_normal((B, S, E))).astype(dtype),
                pad) for _ in range(LAYERS)]
    top = dict(emb=rng.standard_normal((V, E)).astype(dtype), pe=rng.standard_normal((TMAX + 2, E)).astype(dtype),
               norm=(rng.standard_normal(E).astype(dtype), rng.standard_normal(E).astype(dtype) if biases else None,
                     1e-5) if final_norm else None,
               out_w=rng.standard_normal((V_OUT, E)).astype(dtype),
               out_b=rng.standard_normal(V_OUT).astype(dtype) if biases else None)
    return layers, caches, mem, top


def one_by_one(ids, pos, layers, caches, mem, top, norm_first, act):
    """The step as the kernels called one by one (StepProgram's contract)."""
    x = K.embedding_forward(ids, top["emb"]) * 1.7
    x = x + top["pe"][pos]
    for i, w in enumerate(layers):
        extra = dict(zip(("mem_k", "mem_v", "mem_pad"), mem[i])) if mem else {}
        x = K.decode_layer_step(x, *caches[i], pos, **w, **extra, act=act, norm_first=norm_first)
    if top["norm"] is not None:
        x = K.layernorm_forward(x, *top["norm"])[0]
    return K.decode_linear(x, top["out_w"], top["out_b"])


def plans_of(layers, caches, mem, norm_first, act):
    return tuple(K.decode_layer_plan(*caches[i], **w, **(dict(zip(("mem_k", "mem_v", "mem_pad"), mem[i])) if mem else {}),
                                     act=act, norm_first=norm_first) for i, w in enumerate(layers))


def model_step(ids, pos, plans, top):
    norm = top["norm"] or (None, None, 0.0)
    return K.decode_model_step(ids, pos, top["emb"], 1.7, top["pe"], plans, *norm, top["out_w"], top["out_b"],
                               top["norm"] is not None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cross, norm_first, act, B, final_norm, biases", [
    (True, False, "relu", 3, True, True), (True, True, "gelu", 1, False, False),
    (False, True, "gelu_tanh", 2, True, True), (False, False, "relu", 1, True, False)])
def test_model_step_is_the_kernels_one_by_one(rng, dtype, cross, norm_first, act, B, final_norm, biases):
    layers, caches, mem, top = model_parts(rng, dtype, B, cross, final_norm, biases)
    copies = [(k.copy(), v.copy()) for k, v in caches]
    plans = plans_of(layers, caches, mem, norm_first, act)
    ids = rng.integers(0, V, B)
    for pos in (2, 3):  # two steps: each writes slot pos of every cache, which the next reads
        got = model_step(ids, pos, plans, top)
        want = one_by_one(ids, pos, layers, copies, mem, top, norm_first, act)
        assert got.dtype == dtype and got.shape == (B, V_OUT)
        np.testing.assert_array_equal(got, want)
        for (k, v), (k2, v2) in zip(caches, copies):  # the plans wrote into the caller's caches
            np.testing.assert_array_equal(k, k2)
            np.testing.assert_array_equal(v, v2)
        ids = got.argmax(1)


def test_no_layers_is_embedding_norm_and_output(rng):
    _, _, _, top = model_parts(rng, np.float64, 2, False)
    ids = np.array([1, 7])
    got = model_step(ids, 4, (), top)
    np.testing.assert_array_equal(got, one_by_one(ids, 4, [], [], None, top, False, "relu"))


def test_no_rows(rng):
    layers, caches, _, top = model_parts(rng, np.float32, 0, False)
    out = model_step(np.zeros(0, np.int64), 1, plans_of(layers, caches, None, True, "gelu"), top)
    assert out.shape == (0, V_OUT) and out.dtype == np.float32


def test_plans_keep_their_arrays(rng):
    """The caller may drop every array after making the plans (the model's
    parameters replaced, the cache object gone): the plans still hold them."""
    layers, caches, mem, top = model_parts(rng, np.float32, 2, True)
    copies = [(k.copy(), v.copy()) for k, v in caches]
    layers_copy = [{k: None if a is None else a.copy() for k, a in w.items()} for w in layers]
    mem_copy = [tuple(a.copy() for a in m) for m in mem]
    plans = plans_of(layers, caches, mem, False, "relu")
    del layers, caches, mem
    gc.collect()
    ids = np.array([3, 5])
    np.testing.assert_array_equal(model_step(ids, 1, plans, top),
                                  one_by_one(ids, 1, layers_copy, copies, mem_copy, top, False, "relu"))


def test_a_non_contiguous_weight_is_copied_once_into_the_plan(rng):
    layers, caches, _, top = model_parts(rng, np.float64, 1, False)
    wide = np.zeros((3 * E, 2 * E))
    wide[:, ::2] = layers[0]["w_qkv"]
    copies = [(k.copy(), v.copy()) for k, v in caches]
    plans = plans_of([dict(layers[0], w_qkv=wide[:, ::2])] + layers[1:], caches, None, False, "relu")
    ids = np.array([4])
    np.testing.assert_array_equal(model_step(ids, 0, plans, top), one_by_one(ids, 0, layers, copies, None, top, False,
                                                                             "relu"))


@pytest.fixture
def small(rng):
    layers, caches, _, top = model_parts(rng, np.float64, 2, False)
    return layers, caches, top, plans_of(layers, caches, None, False, "relu")


def test_bad_model_step_input(small):
    layers, caches, top, plans = small
    before = [(k.copy(), v.copy()) for k, v in caches]
    ids = np.array([1, 2])
    with pytest.raises(TypeError, match="decode_model_step: plans must be a tuple of decode_layer_plan objects, got list"):
        model_step(ids, 0, list(plans), top)
    with pytest.raises(TypeError, match="decode_model_step: plans\\[1\\] must be a decode_layer_plan object, got int"):
        model_step(ids, 0, (plans[0], 3), top)
    with pytest.raises(TypeError, match="decode_model_step: plans\\[0\\] must have emb's dtype float32, got float64"):
        model_step(ids, 0, plans, {**top, **{k: top[k].astype(np.float32) for k in ("emb", "pe", "out_w", "out_b")},
                                   "norm": tuple(a.astype(np.float32) for a in top["norm"][:2]) + (1e-5,)})
    with pytest.raises(ValueError, match=r"decode_model_step: plans\[0\] must be for 3 rows \(ids.shape\[0\]\) of 8 "
                                         r"features \(emb.shape\[1\]\), got 2 rows of 8"):
        model_step(np.array([1, 2, 3]), 0, plans, top)
    with pytest.raises(IndexError, match=r"decode_model_step: pos must be in \[0, 5\) \(a slot of plans\[0\]'s cache\), "
                                         "got 5"):
        model_step(ids, TMAX, plans, top)
    with pytest.raises(IndexError, match=r"decode_model_step: pos must be in \[0, 7\) \(a row of pe\), got -1"):
        model_step(ids, -1, plans, top)
    with pytest.raises(IndexError, match=r"decode_model_step: ids\[1\] = 11 is out of range; expected 0 <= id < 11"):
        model_step(np.array([0, V]), 0, plans, top)
    with pytest.raises(ValueError, match=r"decode_model_step: plans\[0\] and plans\[2\] must have different caches"):
        model_step(ids, 0, (plans[0], plans[1], plans[0]), top)
    with pytest.raises(ValueError, match=r"decode_model_step: out_w.shape\[1\] must be 8 \(emb.shape\[1\]\), got 5"):
        model_step(ids, 0, plans, dict(top, out_w=np.zeros((V_OUT, 5))))
    with pytest.raises(ValueError, match=r"decode_model_step: eps must be >= 0 and finite, got -1.0"):
        model_step(ids, 0, plans, dict(top, norm=(top["norm"][0], top["norm"][1], -1.0)))
    for (k, v), (k0, v0) in zip(caches, before):  # refused before any cache was written
        np.testing.assert_array_equal(k, k0)
        np.testing.assert_array_equal(v, v0)


def test_bad_plan_input(small):
    """decode_layer_plan checks what decode_layer_step checks, the rows and
    features taken from cache_k."""
    layers, caches, _, _ = small
    w = layers[0]
    ck, cv = caches[0]
    plan = K.decode_layer_plan
    with pytest.raises(ValueError, match=r"decode_layer_plan: w_qkv.shape\[0\] must be 24 \(3 \* cache_k.shape\[1\] \* "
                                         r"cache_k.shape\[3\]\), got 8"):
        plan(ck, cv, **dict(w, w_qkv=w["w_o"]))
    with pytest.raises(TypeError, match="decode_layer_plan: w_o must have dtype float64, got float32"):
        plan(ck, cv, **dict(w, w_o=w["w_o"].astype(np.float32)))
    with pytest.raises(ValueError, match="decode_layer_plan: cache_k and cache_v must be different arrays"):
        plan(ck, ck, **w)
    with pytest.raises(ValueError, match=r"decode_layer_plan: cache_v.shape\[2\] must be 5 \(cache_k.shape\), got 4"):
        plan(ck, cv[:, :, :4].copy(), **w)
    with pytest.raises(ValueError, match="decode_layer_plan: cache_v is updated in place"):
        plan(ck, cv[:, :, ::-1], **w)
    with pytest.raises(ValueError, match="decode_layer_plan: w_cq, w_co, mem_k and mem_v must all be given"):
        plan(ck, cv, **w, w_cq=w["w_o"])
    with pytest.raises(ValueError, match="decode_layer_plan: act must be 'relu', 'gelu' or 'gelu_tanh', got 'tanh'"):
        plan(ck, cv, **w, act="tanh")


def test_a_deep_copied_cache_decodes_on_its_own_arrays():
    """copy.deepcopy of a DecoderCache mid-decode (to branch a decode): the
    copy and the original continue independently, each as an uninterrupted run."""
    import copy

    import ctransformer as ct
    from ctransformer.models import TranslationTransformer
    from ctransformer.models.cache import StepProgram
    ct.manual_seed(0)
    m = TranslationTransformer(13, 11, d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2,
                               dim_feedforward=16, dropout=0.1, pad_id=0).eval()
    src = ct.tensor(np.array([[3, 4, 5], [6, 7, 0]]))
    tokens = [np.array([1, 1]), np.array([4, 5]), np.array([6, 2]), np.array([3, 3])]

    def run(cache, toks):
        return [m.decode_step(ct.tensor(t), cache)._data for t in toks]

    whole = run(m.init_cache(*m.encode(src), 4), tokens)
    cache = m.init_cache(*m.encode(src), 4)
    run(cache, tokens[:2])
    assert isinstance(cache.program, StepProgram)
    branch = copy.deepcopy(cache)
    assert branch.program is None and branch.self_caches[0].k is not cache.self_caches[0].k
    other = run(branch, [np.array([9, 9])])  # the branch takes another token ...
    np.testing.assert_array_equal(run(cache, tokens[2:3])[0], whole[2])  # ... the original is untouched
    assert not np.array_equal(other[0], whole[2])


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_matches_torch_full_decoder(torch_ref, norm_first):
    """The one-call cached step (float32), step by step, against torch's
    encoder-decoder run over the whole prefix with the same weights (torch's
    nn.TransformerEncoder / Decoder, batch first, causal mask, source padding)."""
    import ctransformer as ct
    from ctransformer.models import TranslationTransformer
    from ctransformer.models.cache import StepProgram
    from tolerances import F32
    ct.manual_seed(3)
    m = TranslationTransformer(13, 11, d_model=16, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                               dim_feedforward=32, dropout=0.1, pad_id=0, norm_first=norm_first).eval()
    src = np.array([[3, 4, 5, 6, 7], [4, 9, 10, 0, 0]])
    tokens = np.array([[1, 3, 4, 5], [1, 6, 7, 2]])
    memory, pad = m.encode(ct.tensor(src))
    cache = m.init_cache(memory, pad, tokens.shape[1])
    got = np.stack([m.decode_step(ct.tensor(tokens[:, t]), cache)._data for t in range(tokens.shape[1])], 1)
    assert isinstance(cache.program, StepProgram)
    state = {k: v._data.copy() for k, v in m.state_dict().items() if not k.startswith("pos_encoder")}
    pe = m.pos_encoder.pe._data.reshape(-1, 16)[:8].astype(np.float32)

    def torch_side(torch):
        nn = torch.nn
        layer = dict(d_model=16, nhead=4, dim_feedforward=32, dropout=0.1, batch_first=True, norm_first=norm_first)
        parts = nn.ModuleDict(dict(
            src_embed=nn.Embedding(13, 16), tgt_embed=nn.Embedding(11, 16),
            encoder=nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), 2, nn.LayerNorm(16),
                                          enable_nested_tensor=False),
            decoder=nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), 2, nn.LayerNorm(16)),
            generator=nn.Linear(16, 11)))
        parts.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
        parts.eval()
        pos = torch.tensor(pe)
        with torch.no_grad():
            s, t = torch.tensor(src), torch.tensor(tokens)
            src_pad = s == 0
            mem = parts["encoder"](parts["src_embed"](s) * 4.0 + pos[:5], src_key_padding_mask=src_pad)
            causal = nn.Transformer.generate_square_subsequent_mask(4)
            out = parts["decoder"](parts["tgt_embed"](t) * 4.0 + pos[:4], mem, tgt_mask=causal,
                                   memory_key_padding_mask=src_pad)
            return dict(logits=parts["generator"](out))

    ref = torch_ref(torch_side, inputs=dict(src=src, tokens=tokens, pe=pe, **state))
    np.testing.assert_allclose(got, ref["logits"], **F32)
