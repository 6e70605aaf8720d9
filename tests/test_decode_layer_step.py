"""decode_layer_step (a whole Transformer layer for one token in one call):
a float64 NumPy reference of the layer, float32 and float64; the same bits
as the step calling the kernels one by one (models/cache.py's unfused path)
for post-norm and pre-norm layers, padded sources, several rows and beams;
bad input."""
import math

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.kernels as K
from ctransformer import decoding
from ctransformer.models import DecoderLM, TranslationTransformer
from ctransformer.models import cache as C
from tolerances import F32, F64_TIGHT

E, H, F, TMAX, S = 8, 2, 12, 5, 4


def tol(dtype):
    return F32 if dtype == np.float32 else F64_TIGHT


# ---------------------------------------------------------------- NumPy reference

def ref_norm(h, w, b, eps):
    mu = h.mean(-1, keepdims=True)
    y = (h - mu) / np.sqrt(((h - mu) ** 2).mean(-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def ref_attend(q, k, v, pad):
    """q (B, E), k / v (B, L, E) -> (B, E): per head softmax(q k^T / sqrt(Dh)) v; no key -> 0."""
    B, L, _ = k.shape
    Dh = E // H
    out = np.zeros((B, E))
    for b in range(B):
        keep = np.ones(L, bool) if pad is None else ~pad[b]
        if not keep.any():
            continue
        for h in range(H):
            cols = slice(h * Dh, (h + 1) * Dh)
            s = k[b, keep, cols] @ q[b, cols] / math.sqrt(Dh)
            p = np.exp(s - s.max())
            out[b, cols] = (p / p.sum()) @ v[b, keep, cols]
    return out


def ref_act(z, act):
    if act == "relu":
        return np.maximum(z, 0)
    if act == "gelu":
        return 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))


def lin(x, w, b):
    return x @ w.T + (0 if b is None else b)


def ref_layer(x, past_k, past_v, w, mem, act, norm_first, eps):
    """x (B, E), past_k / past_v (B, t, E) the earlier tokens' keys/values
    (heads side by side), mem (k, v, pad) with k / v (B, S, E) or None
    -> (out (B, E), the new token's k, v (B, E))."""
    new = {}

    def self_attn(y):
        q, k, v = np.split(lin(y, w["w_qkv"], w["b_qkv"]), 3, axis=1)
        new["k"], new["v"] = k, v
        ks, vs = np.concatenate([past_k, k[:, None]], 1), np.concatenate([past_v, v[:, None]], 1)
        return lin(ref_attend(q, ks, vs, None), w["w_o"], w["b_o"])

    def cross_attn(y):
        return lin(ref_attend(lin(y, w["w_cq"], w["b_cq"]), *mem), w["w_co"], w["b_co"])

    def ff(y):
        return lin(ref_act(lin(y, w["w1"], w["b1"]), act), w["w2"], w["b2"])

    blocks = [self_attn] + ([cross_attn] if mem is not None else []) + [ff]
    for i, block in enumerate(blocks, 1):
        nw, nb = w[f"norm{i}_weight"], w[f"norm{i}_bias"]
        x = x + block(ref_norm(x, nw, nb, eps)) if norm_first else ref_norm(x + block(x), nw, nb, eps)
    return x, new["k"], new["v"]


def heads(a):
    """(B, L, E) -> (B, H, L, Dh)."""
    return np.ascontiguousarray(a.reshape(a.shape[0], a.shape[1], H, -1).transpose(0, 2, 1, 3))


def weights(rng, dtype, cross, biases=True):
    shapes = dict(w_qkv=(3 * E, E), b_qkv=(3 * E,), w_o=(E, E), b_o=(E,), w1=(F, E), b1=(F,), w2=(E, F), b2=(E,),
                  norm1_weight=(E,), norm1_bias=(E,), norm2_weight=(E,), norm2_bias=(E,))
    if cross:
        shapes.update(w_cq=(E, E), b_cq=(E,), w_co=(E, E), b_co=(E,), norm3_weight=(E,), norm3_bias=(E,))
    w = {k: (0.5 * rng.standard_normal(s)).astype(dtype) for k, s in shapes.items()}
    if not biases:
        w.update({k: None for k in w if k.startswith("b") or k.endswith("bias")})
    return w


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("cross, act, B, biases", [(True, "relu", 3, True), (True, "gelu", 1, False),
                                                    (False, "gelu_tanh", 2, True), (False, "relu", 1, True)])
def test_matches_numpy_reference(rng, dtype, norm_first, cross, act, B, biases):
    w = weights(rng, dtype, cross, biases)
    ck = rng.standard_normal((B, H, TMAX, E // H)).astype(dtype)
    cv = rng.standard_normal((B, H, TMAX, E // H)).astype(dtype)
    x = rng.standard_normal((B, E)).astype(dtype)
    pos = 3
    mem, kw = None, {}
    if cross:
        mk, mv = (rng.standard_normal((B, S, E)) for _ in range(2))
        pad = np.zeros((B, S), bool)
        pad[0, 2:] = True  # a padded source
        mem = (mk, mv, pad)
        kw = dict(mem_k=heads(mk).astype(dtype), mem_v=heads(mv).astype(dtype), mem_pad=pad)
    past = (ck.transpose(0, 2, 1, 3).reshape(B, TMAX, E)[:, :pos], cv.transpose(0, 2, 1, 3).reshape(B, TMAX, E)[:, :pos])
    want, k_new, v_new = ref_layer(x.astype(np.float64), *past, w, mem, act, norm_first, 1e-5)
    out = K.decode_layer_step(x, ck, cv, pos, **w, **kw, act=act, norm_first=norm_first)
    assert out.dtype == dtype and out.shape == (B, E)
    np.testing.assert_allclose(out, want, **tol(dtype))
    np.testing.assert_allclose(ck[:, :, pos], heads(k_new[:, None])[:, :, 0], **tol(dtype))  # slot pos written
    np.testing.assert_allclose(cv[:, :, pos], heads(v_new[:, None])[:, :, 0], **tol(dtype))


def test_every_source_position_padded_gives_zero_attention(rng):
    """A row whose memory is all padding: cross-attention contributes its out_proj bias only."""
    w = weights(rng, np.float64, True)
    ck, cv = np.zeros((1, H, TMAX, E // H)), np.zeros((1, H, TMAX, E // H))
    x = rng.standard_normal((1, E))
    mk, mv = rng.standard_normal((1, S, E)), rng.standard_normal((1, S, E))
    pad = np.ones((1, S), bool)
    out = K.decode_layer_step(x, ck, cv, 0, **w, mem_k=heads(mk), mem_v=heads(mv), mem_pad=pad)
    want = ref_layer(x, np.zeros((1, 0, E)), np.zeros((1, 0, E)), w, (mk, mv, pad), "relu", False, 1e-5)[0]
    np.testing.assert_allclose(out, want, **F64_TIGHT)
    assert np.isfinite(out).all()


def test_bad_input(rng):
    w = weights(rng, np.float64, False)
    ck, cv = np.zeros((2, H, TMAX, E // H)), np.zeros((2, H, TMAX, E // H))
    x = np.zeros((2, E))
    step = K.decode_layer_step
    with pytest.raises(TypeError, match="decode_layer_step: x must have dtype float32 or float64, got int64"):
        step(x.astype(np.int64), ck, cv, 0, **w)
    with pytest.raises(TypeError, match="decode_layer_step: w_o must have dtype float64, got float32"):
        step(x, ck, cv, 0, **dict(w, w_o=w["w_o"].astype(np.float32)))
    with pytest.raises(IndexError, match=r"decode_layer_step: pos must be in \[0, 5\) \(a slot of the cache, < Tmax\), got 5"):
        step(x, ck, cv, 5, **w)
    with pytest.raises(ValueError, match=r"decode_layer_step: cache_k.shape\[0\] must be 2 \(x.shape\[0\], the rows\), got 1"):
        step(x, ck[:1].copy(), cv[:1].copy(), 0, **w)
    with pytest.raises(ValueError, match=r"decode_layer_step: cache_k.shape\[1\] \* cache_k.shape\[3\] \(heads x head dim\) "
                                         r"must be x.shape\[1\] = 8, got 2 x 3"):
        step(x, ck[..., :3].copy(), cv[..., :3].copy(), 0, **w)
    with pytest.raises(ValueError, match=r"decode_layer_step: w_qkv.shape\[0\] must be 24 \(3 \* x.shape\[1\]\), got 8"):
        step(x, ck, cv, 0, **dict(w, w_qkv=w["w_o"]))
    with pytest.raises(ValueError, match=r"decode_layer_step: w2.shape\[1\] must be 12 \(w1.shape\[0\]\), got 8"):
        step(x, ck, cv, 0, **dict(w, w2=w["w_o"]))
    with pytest.raises(ValueError, match=r"decode_layer_step: norm2_bias.shape\[0\] must be 8 \(x.shape\[1\]\), got 12"):
        step(x, ck, cv, 0, **dict(w, norm2_bias=w["b1"]))
    with pytest.raises(ValueError, match="decode_layer_step: w_cq, w_co, mem_k and mem_v must all be given "
                                         r"\(cross-attention\) or all be None, got w_cq"):
        step(x, ck, cv, 0, **w, w_cq=w["w_o"])
    mk = np.zeros((2, H, S, E // H))
    with pytest.raises(ValueError, match=r"decode_layer_step: mem_pad.shape\[1\] must be 4 \(mem_k.shape\[2\], the source "
                                         r"length\), got 3"):
        step(x, ck, cv, 0, **w, w_cq=w["w_o"], w_co=w["w_o"], mem_k=mk, mem_v=mk, mem_pad=np.zeros((2, 3), bool))
    with pytest.raises(ValueError, match="decode_layer_step: act must be 'relu', 'gelu' or 'gelu_tanh', got 'tanh'"):
        step(x, ck, cv, 0, **w, act="tanh")
    with pytest.raises(ValueError, match="decode_layer_step: eps must be >= 0 and finite, got -1.0"):
        step(x, ck, cv, 0, **w, eps=-1.0)
    with pytest.raises(ValueError, match="decode_layer_step: cache_k and cache_v must be different arrays"):
        step(x, ck, ck, 0, **w)
    with pytest.raises(ValueError, match="decode_layer_step: cache_v is updated in place"):
        step(x, ck, cv[:, :, ::-1], 0, **w)


# ---------------------------------------------------------------- fused == unfused in the models

@pytest.fixture
def unfused(monkeypatch):
    """Every layer through the one-kernel-per-operation path."""
    monkeypatch.setattr(C, "_layer_plan", lambda layer, cross: C._NO_PLAN)


def translation(norm_first, activation="relu", double=False, seed=0):
    ct.manual_seed(seed)
    m = TranslationTransformer(13, 11, d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                               dim_feedforward=16, dropout=0.1, pad_id=0, norm_first=norm_first,
                               activation=activation).eval()
    return m.double() if double else m


SRC = np.array([[3, 4, 5, 6, 7], [4, 9, 10, 0, 0], [5, 0, 0, 0, 0]])  # padded sources


def step_logits(m, tokens):
    memory, pad = m.encode(ct.tensor(SRC))
    cache = m.init_cache(memory, pad, tokens.shape[1])
    return np.stack([m.decode_step(ct.tensor(tokens[:, t]), cache)._data for t in range(tokens.shape[1])], 1)


@pytest.mark.parametrize("norm_first, activation, double", [(False, "relu", False), (True, "gelu", False),
                                                             (False, "gelu", True), (True, "relu", True)])
def test_fused_translation_step_is_bitwise_the_unfused_one(monkeypatch, norm_first, activation, double):
    m = translation(norm_first, activation, double)
    assert all(C._layer_plan(layer, True) is not C._NO_PLAN for layer in m.decoder.layers)  # the kernel runs
    tokens = np.array([[1, 3, 4, 5], [1, 6, 7, 0], [1, 2, 9, 8]])
    fused = step_logits(m, tokens)
    full = m.decode(ct.tensor(tokens), *m.encode(ct.tensor(SRC)))._data
    np.testing.assert_allclose(fused, full, **(tol(np.float64 if double else np.float32)))
    monkeypatch.setattr(C, "_layer_plan", lambda layer, cross: C._NO_PLAN)
    np.testing.assert_array_equal(fused, step_logits(m, tokens))


def test_layers_the_kernel_does_not_compute_take_the_unfused_path():
    m = translation(False)
    m.decoder.layers[0].activation = ct.nn.Tanh()  # not relu/gelu
    m.decoder.layers[1].norm2.eps = 1e-3  # norms with different eps
    tokens = np.array([[1, 3], [1, 6], [1, 2]])
    memory, pad = m.encode(ct.tensor(SRC))
    cache = m.init_cache(memory, pad, 2)
    got = np.stack([m.decode_step(ct.tensor(tokens[:, t]), cache)._data for t in range(2)], 1)
    assert all(c.plan is C._NO_PLAN for c in cache.self_caches)
    np.testing.assert_allclose(got, m.decode(ct.tensor(tokens), memory, pad)._data, **F32)


@pytest.mark.parametrize("norm_first", [False, True])
def test_beams_and_greedy_are_the_unfused_ones(monkeypatch, norm_first):
    m = translation(norm_first, double=True)
    greedy = decoding.greedy_decode(m, SRC, 6, 1, 2)._data
    beams = [a._data for a in decoding.beam_search(m, SRC, 3, 6, 1, 2, length_penalty=0.6, return_all=True)]
    monkeypatch.setattr(C, "_layer_plan", lambda layer, cross: C._NO_PLAN)
    np.testing.assert_array_equal(greedy, decoding.greedy_decode(m, SRC, 6, 1, 2)._data)
    for a, b in zip(beams, decoding.beam_search(m, SRC, 3, 6, 1, 2, length_penalty=0.6, return_all=True)):
        np.testing.assert_array_equal(a, b._data)


@pytest.mark.parametrize("norm_first", [False, True])
def test_fused_lm_step_is_bitwise_the_unfused_one(monkeypatch, norm_first):
    ct.manual_seed(0)
    lm = DecoderLM(10, d_model=8, nhead=2, num_layers=2, dim_feedforward=16, max_len=16, dropout=0.1,
                   norm_first=norm_first).eval()
    ids = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 1]])

    def steps():
        cache = lm.init_cache(2, 5)
        return np.stack([lm.decode_step(ct.tensor(ids[:, t]), cache)._data for t in range(5)], 1)

    assert all(C._layer_plan(layer, False) is not C._NO_PLAN for layer in lm.blocks.layers)
    fused = steps()
    np.testing.assert_allclose(fused, lm(ct.tensor(ids))._data, **F32)
    monkeypatch.setattr(C, "_layer_plan", lambda layer, cross: C._NO_PLAN)
    np.testing.assert_array_equal(fused, steps())


# ---------------------------------------------------------------- the whole step as one program

def program_steps(m, tokens, program=True):
    """Logits of every step (B, T, V) and the cache; program=False: module by module."""
    memory, pad = m.encode(ct.tensor(SRC))
    cache = m.init_cache(memory, pad, tokens.shape[1])
    if not program:
        cache.program = False
    return np.stack([m.decode_step(ct.tensor(tokens[:, t]), cache)._data for t in range(tokens.shape[1])], 1), cache


TOKENS = np.array([[1, 3, 4, 5], [1, 6, 7, 0], [1, 2, 9, 8]])


@pytest.mark.parametrize("norm_first, activation, double", [(False, "relu", False), (True, "gelu", True)])
def test_the_step_program_is_bitwise_the_module_by_module_step(norm_first, activation, double):
    m = translation(norm_first, activation, double)
    got, cache = program_steps(m, TOKENS)
    assert isinstance(cache.program, C.StepProgram)  # the program ran
    want, other = program_steps(m, TOKENS, program=False)
    assert other.program is False and all(c.plan[2] == got.dtype for c in other.self_caches)  # fused layers there too
    np.testing.assert_array_equal(got, want)
    full = m.decode(ct.tensor(TOKENS), *m.encode(ct.tensor(SRC)))._data
    np.testing.assert_allclose(got, full, **tol(got.dtype))


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_lm_step_program_is_bitwise_the_module_by_module_step(norm_first):
    ct.manual_seed(1)
    lm = DecoderLM(10, d_model=8, nhead=2, num_layers=2, dim_feedforward=16, max_len=16, dropout=0.1,
                   norm_first=norm_first).eval()
    ids = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 1]])

    def steps(program):
        cache = lm.init_cache(2, 5)
        if not program:
            cache.program = False
        return np.stack([lm.decode_step(ct.tensor(ids[:, t]), cache)._data for t in range(5)], 1), cache

    got, cache = steps(True)
    assert isinstance(cache.program, C.StepProgram)
    np.testing.assert_array_equal(got, steps(False)[0])
    np.testing.assert_allclose(got, lm(ct.tensor(ids))._data, **F32)


def _generator_in_a_sequential(m):
    m.generator = ct.nn.Sequential(m.generator)


def _decoder_norm_removed(m):
    m.decoder.norm = None


def _tanh_layer(m):
    m.decoder.layers[1].activation = ct.nn.Tanh()


@pytest.mark.parametrize("change, program", [(_generator_in_a_sequential, False), (_decoder_norm_removed, True),
                                             (_tanh_layer, False)])
def test_parts_the_program_does_not_compute_take_the_module_step(change, program):
    """A part the kernels do not compute (another module, a layer without a
    plan): no program, the module-by-module step, right logits."""
    m = translation(False)
    change(m)
    got, cache = program_steps(m, TOKENS)
    assert isinstance(cache.program, C.StepProgram) is program
    full = m.decode(ct.tensor(TOKENS), *m.encode(ct.tensor(SRC)))._data
    np.testing.assert_allclose(got, full, **F32)


def test_a_program_keeps_up_with_beam_search_expanding_the_cache(monkeypatch):
    """beam_search's expand swaps the cache's arrays; the program reads them per step."""
    import ctransformer.models.translation as T
    m = translation(True, double=True)

    def beams():
        return [a._data for a in decoding.beam_search(m, SRC, 3, 6, 1, 2, length_penalty=0.6, return_all=True)]

    with_program = beams()
    monkeypatch.setattr(T, "cached_program", lambda cache, build: None)
    for a, b in zip(with_program, beams()):
        np.testing.assert_array_equal(a, b)


def test_cache_reorder_in_place_copies_the_moved_rows(rng):
    """DecoderCache.reorder (beam search): row i becomes old row rows[i] in the
    first t slots, as cache_reorder does; bad rows are refused."""
    caches = [C.SelfCache(4, H, TMAX, E // H, np.float64) for _ in range(2)]
    for c in caches:
        c.k[:], c.v[:] = rng.standard_normal(c.k.shape), rng.standard_normal(c.v.shape)
    cache = C.DecoderCache(caches)
    cache.t = 3
    rows = np.array([2, 2, 0, 3])
    want = [(K.cache_reorder(c.k, rows, 3)[:, :, :3], K.cache_reorder(c.v, rows, 3)[:, :, :3]) for c in caches]
    cache.reorder(rows)
    for c, (k, v) in zip(caches, want):
        np.testing.assert_array_equal(c.k[:, :, :3], k)
        np.testing.assert_array_equal(c.v[:, :, :3], v)
    with pytest.raises(IndexError, match=r"DecoderCache.reorder: rows\[1\] must be in \[0, 4\), got 4"):
        cache.reorder(np.array([0, 4, 1, 2]))
    with pytest.raises(ValueError, match=r"DecoderCache.reorder: rows must have shape \(4,\) \(the cache's rows\), got \(3,\)"):
        cache.reorder(np.array([0, 1, 2]))


@pytest.mark.parametrize("double", [False, True])
def test_a_beam_steps_to_the_bits_it_has_alone(double):
    """decode_linear computes each row alone (every projection of a step is
    one), so a row of a step over several beams is bitwise the step of that
    row by itself: beam search scores a hypothesis as greedy decoding would."""
    m = translation(False, "relu", double)
    memory, pad = m.encode(ct.tensor(SRC[:1]))
    tokens = np.array([[1, 3, 4], [1, 6, 7], [1, 2, 9], [1, 8, 8]])  # four beams of one source
    beams = m.init_cache(memory, pad, 3)
    beams.expand(np.zeros(len(tokens), dtype=np.int64))
    together = np.stack([m.decode_step(ct.tensor(tokens[:, t]), beams)._data for t in range(3)], 1)
    for row, toks in enumerate(tokens):
        alone = m.init_cache(memory, pad, 3)
        one = np.stack([m.decode_step(ct.tensor(toks[t:t + 1]), alone)._data for t in range(3)], 1)
        np.testing.assert_array_equal(together[row:row + 1], one)
