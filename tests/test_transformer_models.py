"""ctransformer.masks, nn.PositionalEncoding, models.TranslationTransformer and
models.DecoderLM (including the KV-cached decode_step against the full model)."""
import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
import ctransformer.nn.functional as F
from ctransformer import masks
from ctransformer.models import DecoderLM, TranslationTransformer
from tolerances import F32, F64



# ---------------------------------------------------------------- masks

def test_keep_polarity_masks():
    ids = np.array([[5, 6, 0, 0], [7, 0, 8, 0]])
    pm = masks.padding_mask(ids, 0)
    assert pm.shape == (2, 1, 1, 4) and pm.dtype == np.bool_
    np.testing.assert_array_equal(pm._data[:, 0, 0], ids != 0)
    sm = masks.subsequent_mask(3)
    assert sm.shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(sm._data[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    tm = masks.target_mask(ids, 0)
    assert tm.shape == (2, 1, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert tm._data[b, 0, i, j] == (j <= i and ids[b, j] != 0)


def test_blocked_polarity_masks_and_converters():
    ids = ct.tensor([[5, 6, 0], [7, 0, 0]])
    kpm = masks.key_padding_mask(ids, 0)
    np.testing.assert_array_equal(kpm._data, [[0, 0, 1], [0, 1, 1]])
    np.testing.assert_array_equal(masks.to_blocked(masks.padding_mask(ids, 0), squeeze=True)._data, kpm._data)
    cm = masks.causal_mask(4)
    gen = nn.Transformer.generate_square_subsequent_mask(4)._data
    np.testing.assert_array_equal(cm._data, np.isneginf(gen))
    np.testing.assert_array_equal(masks.to_blocked(masks.subsequent_mask(4), squeeze=True)._data, cm._data)
    assert masks.to_blocked(masks.subsequent_mask(4)).shape == (1, 1, 4, 4)
    assert masks.to_blocked(masks.target_mask(ids, 0), squeeze=True).shape == (2, 3, 3)
    np.testing.assert_array_equal(masks.to_keep(cm)._data, masks.subsequent_mask(4)._data[0, 0])
    np.testing.assert_array_equal(masks.to_additive(cm, blocked=True)._data, gen)
    np.testing.assert_array_equal(masks.to_additive(masks.subsequent_mask(4))._data[0, 0], gen)


def test_both_polarities_give_the_same_attention():
    """keep mask -> F.scaled_dot_product_attention == to_blocked -> nn.MultiheadAttention maths."""
    ids = np.array([[5, 6, 7, 0], [7, 8, 0, 0]])
    rng = np.random.default_rng(0)
    q = ct.tensor(rng.standard_normal((2, 1, 4, 4)))
    keep = masks.target_mask(ids, 0)
    out_keep = F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    out_add = F.scaled_dot_product_attention(q, q, q, attn_mask=masks.to_additive(keep, dtype=np.float64))
    np.testing.assert_allclose(out_keep._data, out_add._data, **F64)
    m = nn.MultiheadAttention(4, 1, bias=False, batch_first=True).double()
    eye = ct.tensor(np.eye(4))
    m.in_proj_weight.data = ct.tensor(np.concatenate([np.eye(4)] * 3))
    m.out_proj.weight.data = eye
    x = q[:, 0]
    out_mha, _ = m(x, x, x, attn_mask=masks.causal_mask(4), key_padding_mask=masks.key_padding_mask(ids, 0))
    np.testing.assert_allclose(out_mha._data[0], out_keep._data[0, 0], **F64)
    np.testing.assert_allclose(out_mha._data[1, :2], out_keep._data[1, 0, :2], **F64)


def test_mask_errors():
    with pytest.raises(TypeError, match="padding_mask: ids must have an integer dtype, got float64"):
        masks.padding_mask(np.zeros((2, 3)), 0)
    with pytest.raises(ValueError, match=r"target_mask: ids must be 2-D \(batch, seq\), got 1-D"):
        masks.target_mask(np.zeros(3, int), 0)
    with pytest.raises(TypeError, match="to_blocked: mask must have dtype bool, got float32"):
        masks.to_blocked(nn.Transformer.generate_square_subsequent_mask(3))
    with pytest.raises(ValueError, match="subsequent_mask: the size must be an int >= 0, got -1"):
        masks.subsequent_mask(-1)


# ---------------------------------------------------------------- PositionalEncoding

def reference_pe(max_len, d):
    pe = np.zeros((max_len, d))
    pos = np.arange(max_len)[:, None]
    div = np.power(10000.0, np.arange(0, d, 2) / d)  # the exponent applied once
    pe[:, 0::2] = np.sin(pos / div)
    pe[:, 1::2] = np.cos(pos / div)[:, : d // 2]
    return pe


@pytest.mark.parametrize("batch_first", [False, True])
def test_positional_encoding(batch_first):
    pe = nn.PositionalEncoding(6, dropout=0.0, max_len=20, batch_first=batch_first)
    np.testing.assert_allclose(pe.pe._data, reference_pe(20, 6), rtol=1e-6, atol=1e-7)
    assert "pe" not in pe.state_dict()
    x = ct.randn(*((2, 5, 6) if batch_first else (5, 2, 6)), requires_grad=True)
    out = pe(x)
    ref = x._data + (reference_pe(5, 6)[None] if batch_first else reference_pe(5, 6)[:, None])
    np.testing.assert_allclose(out._data, ref, rtol=1e-6, atol=1e-6)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad._data, np.ones(x.shape))


def test_positional_encoding_dropout_and_errors():
    pe = nn.PositionalEncoding(4, dropout=0.5, max_len=8)
    x = ct.ones(8, 3, 4)
    assert np.any(pe(x)._data == 0)
    pe.eval()
    np.testing.assert_allclose(pe(x)._data, np.broadcast_to(1 + reference_pe(8, 4)[:, None], (8, 3, 4)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"PositionalEncoding: the sequence length \(9\) exceeds max_len \(8\)"):
        pe(ct.ones(9, 1, 4))
    with pytest.raises(ValueError, match=r"PositionalEncoding: x must be 3-D \(seq, batch, d_model\) with d_model = 4"):
        pe(ct.ones(8, 3, 5))
    assert nn.PositionalEncoding(4, max_len=3).double().pe.dtype == np.float64


# ---------------------------------------------------------------- TranslationTransformer

def tiny_translation(norm_first=False, tie=False, seed=0):
    ct.manual_seed(seed)
    return TranslationTransformer(11, 9, d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                                  dim_feedforward=16, dropout=0.1, pad_id=0, tie_embeddings=tie,
                                  norm_first=norm_first)


def test_translation_forward_and_backward():
    m = tiny_translation()
    src = ct.tensor([[3, 4, 5, 2, 0], [4, 6, 2, 0, 0]])
    tgt = ct.tensor([[1, 3, 4, 5], [1, 5, 0, 0]])
    logits = m(src, tgt)
    assert logits.shape == (2, 4, 9)
    loss = F.cross_entropy(logits.reshape(-1, 9), ct.tensor([[3, 4, 5, 2], [5, 2, 0, 0]]).reshape(-1), ignore_index=0)
    loss.backward()
    for n, p in m.named_parameters():
        assert p.grad is not None and np.isfinite(p.grad._data).all(), n
    assert np.all(m.src_embed.weight.grad._data[0] == 0)  # padding row


@pytest.mark.parametrize("norm_first", [False, True])
def test_translation_padding_does_not_change_logits(norm_first):
    m = tiny_translation(norm_first).double().eval()
    src = ct.tensor([[3, 4, 5]])
    tgt = ct.tensor([[1, 3, 4]])
    a = m(src, tgt)._data
    b = m(ct.tensor([[3, 4, 5, 0, 0]]), tgt)._data
    np.testing.assert_allclose(a, b, **F64)
    # right-padded targets: the real positions are unchanged (causal decoder)
    c = m(src, ct.tensor([[1, 3, 4, 0, 0]]))._data
    np.testing.assert_allclose(c[:, :3], a, **F64)


def test_translation_tied_embeddings():
    m = tiny_translation(tie=True)
    assert m.generator.weight is m.tgt_embed.weight
    assert len(list(m.parameters())) == len(list(tiny_translation().parameters())) - 1
    m(ct.tensor([[3, 4]]), ct.tensor([[1, 3]])).sum().backward()
    assert m.tgt_embed.weight.grad is not None


@pytest.mark.parametrize("norm_first", [False, True])
def test_translation_decode_step_matches_full_decoder(norm_first):
    m = tiny_translation(norm_first).double().eval()
    src = ct.tensor([[3, 4, 5, 2, 0], [4, 6, 2, 0, 0]])
    tgt = np.array([[1, 3, 4, 5, 6], [1, 5, 7, 8, 2]])
    memory, pad = m.encode(src)
    full = m.decode(ct.tensor(tgt), memory, pad)._data
    cache = m.init_cache(memory, pad, max_len=6)
    for t in range(tgt.shape[1]):
        step = m.decode_step(ct.tensor(tgt[:, t]), cache)
        np.testing.assert_allclose(step._data, full[:, t], rtol=1e-9, atol=1e-10)
    assert cache.t == 5


def test_translation_decode_step_float32_and_errors():
    m = tiny_translation().eval()
    src = ct.tensor([[3, 4, 5]])
    memory, pad = m.encode(src)
    full = m.decode(ct.tensor([[1, 3]]), memory, pad)._data
    cache = m.init_cache(memory, pad, max_len=2)
    m.decode_step(ct.tensor([1]), cache)
    np.testing.assert_allclose(m.decode_step(ct.tensor([3]), cache)._data, full[:, 1], **F32)
    with pytest.raises(IndexError, match="decode_step: the cache holds 2 tokens; position 2 is past its end"):
        m.decode_step(ct.tensor([3]), cache)
    with pytest.raises(ValueError, match=r"decode_step: tokens must have shape \(1,\) \(the cache's rows\), got \(2,\)"):
        m.decode_step(ct.tensor([3, 4]), m.init_cache(memory, pad, 3))
    with pytest.raises(ValueError, match=r"TranslationTransformer: tgt_in_ids.shape\[0\] \(batch\) must be 1 \(src_ids.shape\[0\]\), got 2"):
        m(src, ct.tensor([[1], [1]]))
    with pytest.raises(TypeError, match="TranslationTransformer: src_ids must hold integer token ids, got dtype float32"):
        m(ct.ones(1, 3), ct.tensor([[1]]))


# ---------------------------------------------------------------- DecoderLM

def tiny_lm(norm_first=True, seed=0):
    ct.manual_seed(seed)
    return DecoderLM(10, d_model=8, nhead=2, num_layers=2, dim_feedforward=16, max_len=16, dropout=0.1,
                     norm_first=norm_first)


@pytest.mark.parametrize("norm_first", [False, True])
def test_lm_is_causal_and_cached_step_matches(norm_first):
    lm = tiny_lm(norm_first).double().eval()
    ids = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 1]])
    full = lm(ct.tensor(ids))._data
    changed = ids.copy()
    changed[:, 3:] = 0
    np.testing.assert_allclose(lm(ct.tensor(changed))._data[:, :3], full[:, :3], **F64)
    cache = lm.init_cache(2, 5)
    for t in range(5):
        np.testing.assert_allclose(lm.decode_step(ct.tensor(ids[:, t]), cache)._data, full[:, t],
                                   rtol=1e-9, atol=1e-10)


def test_lm_trains_and_checks_input():
    lm = tiny_lm()
    ids = ct.tensor([[1, 2, 3, 4]])
    loss = F.cross_entropy(lm(ids)[:, :-1].reshape(-1, 10), ids[:, 1:].reshape(-1))
    loss.backward()
    assert all(p.grad is not None for p in lm.parameters())
    with pytest.raises(ValueError, match=r"DecoderLM: the sequence length \(17\) exceeds max_len \(16\)"):
        lm(ct.zeros(1, 17, dtype=ct.int64))
    with pytest.raises(ValueError, match=r"DecoderLM.init_cache: max_len \(20\) exceeds the model's max_len \(16\)"):
        lm.init_cache(1, 20)


# ---------------------------------------------------------------- parameters in one block

def _block_of(a: np.ndarray) -> np.ndarray:
    while a.base is not None:
        a = a.base
    return a


@pytest.mark.parametrize("make", [lambda: TranslationTransformer(23, 19, 16, 2, 1, 2, 24, pad_id=0,
                                                                 tie_embeddings=True),
                                  lambda: DecoderLM(29, 16, 2, 2, 24, max_len=12)],
                         ids=["translation", "lm"])
def test_model_parameters_share_one_aligned_block(make):
    """Both models keep their parameters as 64-byte aligned, C-contiguous,
    disjoint views of one array (models/_storage.py); gathering keeps every
    value, tied weights stay one Parameter, and load_state_dict writes into
    the block."""
    from ctransformer.models._storage import gather_parameters

    def check_block(model):
        params = list(model.parameters())
        assert len({id(_block_of(p._data)) for p in params}) == 1
        for p in params:
            assert p._data.flags.c_contiguous and p._data.ctypes.data % 64 == 0 and p._data.flags.writeable
        spans = sorted((p._data.ctypes.data, p._data.nbytes) for p in params)
        assert all(a + n <= b for (a, n), (b, _) in zip(spans, spans[1:]))  # no two views overlap
        return _block_of(params[0]._data)

    ct.manual_seed(3)
    model = make()
    check_block(model)  # gathered when built
    for p in model.parameters():  # separate arrays again, with new values
        p._data = np.array(p._data * 3 + 1, copy=True)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    gather_parameters(model)
    block = check_block(model)
    for name, a in model.state_dict().items():
        np.testing.assert_array_equal(a.numpy(), before[name], err_msg=name)
    if isinstance(model, TranslationTransformer):
        assert model.generator.weight is model.tgt_embed.weight
    model.load_state_dict({k: v * 2 for k, v in before.items()})
    assert check_block(model) is block
    for name, a in model.state_dict().items():
        np.testing.assert_array_equal(a.numpy(), before[name] * 2, err_msg=name)


def test_model_in_one_block_trains_as_separate_arrays():
    """A training step (dropout on, Adam) on the block gives the loss and the
    updated weights, bit for bit, of the same model with separate arrays."""
    def step(separate):
        ct.manual_seed(4)
        m = TranslationTransformer(31, 31, 16, 2, 1, 1, 24, dropout=0.1, pad_id=1)
        if separate:
            for p in m.parameters():
                p._data = np.array(p._data, copy=True)
        opt = ct.optim.Adam(m.parameters(), lr=1e-2)
        rng = np.random.default_rng(0)
        src, tgt = ct.tensor(rng.integers(2, 31, (3, 5))), ct.tensor(rng.integers(2, 31, (3, 6)))
        loss = F.cross_entropy(m(src, tgt[:, :-1]).reshape(-1, 31), tgt[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return loss.item(), [p._data.copy() for p in m.parameters()]
    (la, pa), (lb, pb) = step(False), step(True)
    assert la == lb
    for a, b in zip(pa, pb):
        np.testing.assert_array_equal(a, b)
