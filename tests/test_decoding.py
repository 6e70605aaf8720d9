"""ctransformer.decoding: greedy, beam search (batched, per-sequence EOS,
frozen finished beams, mixed source lengths) and LM generation, with and
without the KV cache; beam search against exhaustive search."""
import itertools

import numpy as np
import pytest

import ctransformer as ct
from ctransformer import decoding
from ctransformer.models import DecoderLM, TranslationTransformer

PAD, SOS, EOS = 0, 1, 2


def model(tgt_vocab=9, norm_first=False, seed=0, double=True):
    ct.manual_seed(seed)
    m = TranslationTransformer(11, tgt_vocab, d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                               dim_feedforward=16, dropout=0.1, pad_id=PAD, norm_first=norm_first)
    return m.double() if double else m


SRC = np.array([[3, 4, 5, 6, 7, 8], [4, 9, 10, 0, 0, 0], [5, 3, 0, 0, 0, 0]])


def trim(row):
    """Generated tokens after sos, up to and including the first eos."""
    out = []
    for t in row[1:]:
        out.append(int(t))
        if t == EOS:
            break
    return out


@pytest.mark.parametrize("norm_first", [False, True])
def test_greedy_cached_equals_uncached(norm_first):
    m = model(norm_first=norm_first)
    a = decoding.greedy_decode(m, SRC, 7, SOS, EOS)
    b = decoding.greedy_decode(m, SRC, 7, SOS, EOS, use_cache=False)
    np.testing.assert_array_equal(a._data, b._data)
    assert a.dtype == np.int64 and np.all(a._data[:, 0] == SOS)


def test_greedy_rows_stop_at_their_own_eos():
    for seed in range(20):  # find a model whose rows finish at different steps
        m = model(tgt_vocab=4, seed=seed)
        ys = decoding.greedy_decode(m, SRC, 6, SOS, EOS)._data
        ends = [list(r).index(EOS) if EOS in r else None for r in ys]
        if len({e for e in ends if e is not None}) > 1 or (None in ends and any(ends)):
            break
    else:
        pytest.fail("no seed gave rows of different lengths")
    for r, e in zip(ys, ends):
        if e is not None:
            assert np.all(r[e + 1:] == PAD)
    # the columns stop at the step where the last row finished (1 + 6 when one never does)
    assert ys.shape[1] == (1 + 6 if None in ends else max(ends) + 1)


def test_greedy_is_one_kernel_call_unless_pad_is_outside_the_vocabulary(monkeypatch):
    """Our models' cached greedy loop runs in decode_model_greedy; a pad_id
    that is no row of the embedding cannot be fed back there, so the loop
    over decode_step runs instead, and refuses it when fed (as the uncached
    loop does)."""
    import ctransformer.kernels as K
    calls = []
    kernel = K.decode_model_greedy
    monkeypatch.setattr(K, "decode_model_greedy", lambda *a: calls.append(a[2:4]) or kernel(*a))
    m = model()
    eos = 7  # a token these rows pick, at different steps
    got = decoding.greedy_decode(m, SRC, 7, SOS, eos)._data
    assert calls == [(1, 8)]
    np.testing.assert_array_equal(got, decoding.greedy_decode(m, SRC, 7, SOS, eos, use_cache=False)._data)
    # rows 0 and 2 finish first, so pad 9 (no row of the 9-token embedding) is fed: refused by the step
    with pytest.raises(IndexError, match=r"decode_model_step: ids\[0\] = 9 is out of range; expected 0 <= id < 9"):
        decoding.greedy_decode(m, SRC, 7, SOS, eos, pad_id=9)
    assert len(calls) == 1
    with pytest.raises(IndexError, match="= 9 is out of range"):
        decoding.greedy_decode(m, SRC, 7, SOS, eos, pad_id=9, use_cache=False)


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_refuses_a_pad_id_outside_the_output(use_cache):
    """A finished beam continues with pad_id, so it must be a token of the
    model's output (9 here), whether or not a beam ever finishes."""
    m = model()
    for pad_id in (9, -1):
        with pytest.raises(ValueError, match=rf"beam_search: pad_id must be in \[0, 9\) \(a token of the model's "
                                             rf"output\), got {pad_id}"):
            decoding.beam_search(m, SRC, 2, 5, SOS, 7, pad_id=pad_id, use_cache=use_cache)


@pytest.mark.parametrize("chunk", [1, 2, 3, 16])
def test_greedy_in_chunks_of_kernel_calls(monkeypatch, chunk):
    """The kernel loop runs _GREEDY_CHUNK tokens per call (Ctrl-C is seen
    between calls): the same tokens whatever the chunk, rows finishing in
    different chunks included, and the cache's position counts every token."""
    m = model()
    want = decoding.greedy_decode(m, SRC, 7, SOS, 7, use_cache=False)._data
    monkeypatch.setattr(decoding, "_GREEDY_CHUNK", chunk)
    np.testing.assert_array_equal(decoding.greedy_decode(m, SRC, 7, SOS, 7)._data, want)
    stepper = decoding._Stepper(m.eval(), decoding._src(SRC), 7, True)
    ys = np.full((3, 8), SOS, dtype=np.int64)
    last = stepper.greedy(ys, np.zeros(3, bool), -1, PAD)  # no eos: every column
    assert last == 7 and stepper.cache.t == 7


@pytest.mark.parametrize("use_cache", [True, False])
def test_no_source_rows(use_cache):
    """A batch of 0 sources decodes to 0 rows (the uncached loop's shapes: every column)."""
    m = model()
    empty = np.zeros((0, 5), np.int64)
    assert decoding.greedy_decode(m, empty, 6, SOS, EOS, use_cache=use_cache).shape == (0, 7)
    toks, scores = decoding.beam_search(m, empty, 3, 6, SOS, EOS, use_cache=use_cache, return_all=True)
    assert toks.shape[:2] == (0, 3) and scores.shape == (0, 3)


def test_batched_equals_one_by_one_with_mixed_source_lengths():
    m = model()
    batch_g = decoding.greedy_decode(m, SRC, 6, SOS, EOS)._data
    batch_b, batch_s = decoding.beam_search(m, SRC, 3, 6, SOS, EOS)
    for i, row in enumerate(SRC):
        one = row[row != PAD][None]
        assert trim(decoding.greedy_decode(m, one, 6, SOS, EOS)._data[0]) == trim(batch_g[i])
        toks, score = decoding.beam_search(m, one, 3, 6, SOS, EOS)
        assert trim(toks._data[0]) == trim(batch_b._data[i])
        np.testing.assert_allclose(score._data[0], batch_s._data[i], rtol=1e-9)


@pytest.mark.parametrize("norm_first", [False, True])
def test_beam_of_one_is_greedy(norm_first):
    m = model(norm_first=norm_first)
    g = decoding.greedy_decode(m, SRC, 7, SOS, EOS)._data
    b, _ = decoding.beam_search(m, SRC, 1, 7, SOS, EOS)
    n = max(g.shape[1], b._data.shape[1])
    pad = lambda a: np.pad(a, ((0, 0), (0, n - a.shape[1])), constant_values=PAD)  # noqa: E731
    np.testing.assert_array_equal(pad(g), pad(b._data))


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_cached_equals_uncached(alpha):
    m = model()
    a, sa = decoding.beam_search(m, SRC, 4, 6, SOS, EOS, length_penalty=alpha, return_all=True)
    b, sb = decoding.beam_search(m, SRC, 4, 6, SOS, EOS, length_penalty=alpha, return_all=True, use_cache=False)
    np.testing.assert_array_equal(a._data, b._data)
    np.testing.assert_allclose(sa._data, sb._data, rtol=1e-9)
    assert a.shape[:2] == (3, 4)
    assert np.all(np.diff(sa._data, axis=1) <= 0)  # best first


def exhaustive_best(m, src_row, V, max_len, alpha):
    """Score every hypothesis (ends at the first eos or after max_len tokens)
    by teacher forcing the full decoder; return (tokens, normalised score)."""
    seqs = np.array(list(itertools.product(range(V), repeat=max_len)))
    src = ct.tensor(np.repeat(src_row[None], len(seqs), 0))
    tgt_in = np.concatenate([np.full((len(seqs), 1), SOS), seqs[:, :-1]], axis=1)
    m.eval()
    with ct.no_grad():
        logits = m(src, ct.tensor(tgt_in))._data
    mx = logits.max(-1, keepdims=True)
    logp = logits - mx - np.log(np.exp(logits - mx).sum(-1, keepdims=True))
    best, best_score = None, -np.inf
    seen = set()
    for s, lp in zip(seqs, logp):
        n = list(s).index(EOS) + 1 if EOS in s else max_len
        hyp = tuple(s[:n])
        if hyp in seen:
            continue
        seen.add(hyp)
        score = sum(lp[i, s[i]] for i in range(n)) / ((5 + n) / 6) ** alpha
        if score > best_score:
            best, best_score = list(hyp), score
    return best, best_score


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_beam_with_every_hypothesis_finds_the_exhaustive_best(alpha, seed):
    V, max_len = 4, 3
    m = model(tgt_vocab=V, seed=seed)
    src = SRC[:2]
    toks, scores = decoding.beam_search(m, src, V ** max_len, max_len, SOS, EOS, length_penalty=alpha)
    for i in range(len(src)):
        row = src[i][src[i] != PAD]
        best, best_score = exhaustive_best(m, row, V, max_len, alpha)
        assert trim(toks._data[i]) == best
        np.testing.assert_allclose(scores._data[i], best_score, rtol=1e-9)


def test_small_beam_is_not_worse_than_greedy_and_finished_beams_are_frozen():
    m = model(tgt_vocab=5)
    g = decoding.greedy_decode(m, SRC, 5, SOS, EOS)._data
    toks, scores = decoding.beam_search(m, SRC, 3, 5, SOS, EOS, return_all=True)
    for i in range(3):
        for hyp in toks._data[i]:
            if EOS in hyp:
                e = list(hyp).index(EOS)
                assert np.all(hyp[e + 1:] == PAD)  # frozen after eos
    # the best beam's score is at least greedy's log-probability
    m.eval()
    with ct.no_grad():
        for i in range(3):
            row = SRC[i][SRC[i] != PAD][None]
            gt = trim(g[i])
            logits = m(ct.tensor(row), ct.tensor([[SOS] + gt[:-1]]))._data[0]
            lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            greedy_score = sum(lp[j, t] for j, t in enumerate(gt))
            assert scores._data[i, 0] >= greedy_score - 1e-9


def test_float32_model_and_restored_training_mode():
    m = model(double=False)
    m.train()
    a = decoding.greedy_decode(m, SRC, 5, SOS, EOS)
    b = decoding.greedy_decode(m, SRC, 5, SOS, EOS, use_cache=False)
    np.testing.assert_array_equal(a._data, b._data)
    assert m.training and m.encoder.layers[0].training


def _decoder_and_run(decode):
    """A model with dropout and a call that decodes with it -> tokens (ndarray)."""
    if decode == "generate":
        ct.manual_seed(0)
        lm = DecoderLM(9, d_model=8, nhead=2, num_layers=2, dim_feedforward=16, dropout=0.5).double()
        return lm, lambda: decoding.generate(lm, np.array([[1, 2]]), 4, greedy=True)._data
    m = model()
    if decode == "greedy":
        return m, lambda: decoding.greedy_decode(m, SRC, 5, SOS, EOS)._data
    return m, lambda: decoding.beam_search(m, SRC, 2, 5, SOS, EOS)[0]._data


@pytest.mark.parametrize("decode", ["greedy", "beam", "generate"])
def test_decoding_restores_each_modules_own_mode(decode):
    """A submodule set apart (in eval inside a model in training) keeps its
    own mode after decoding, which itself runs in eval mode."""
    m, run = _decoder_and_run(decode)
    m.train()
    next(mod for mod in m.modules() if mod is not m and list(mod.children())).eval()
    before = {id(mod): mod.training for mod in m.modules()}
    assert any(before.values()) and not all(before.values())
    first = run()
    assert {id(mod): mod.training for mod in m.modules()} == before
    np.testing.assert_array_equal(run(), first)  # dropout is off while decoding
    m.eval()
    run()
    assert not any(mod.training for mod in m.modules())


def test_decoding_errors():
    m = model()
    with pytest.raises(ValueError, match="greedy_decode: max_len must be an int >= 1, got 0"):
        decoding.greedy_decode(m, SRC, 0, SOS, EOS)
    with pytest.raises(ValueError, match="beam_search: beam_size must be an int >= 1, got 0"):
        decoding.beam_search(m, SRC, 0, 4, SOS, EOS)
    with pytest.raises(ValueError, match=r"decoding: src_ids must be 2-D \(batch, seq\) integer ids"):
        decoding.greedy_decode(m, np.zeros((2, 3)), 4, SOS, EOS)


# ---------------------------------------------------------------- DecoderLM.generate

def lm(seed=0, norm_first=True):
    ct.manual_seed(seed)
    return DecoderLM(12, d_model=8, nhead=2, num_layers=2, dim_feedforward=16, max_len=16, dropout=0.1,
                     norm_first=norm_first).double()


PROMPT = np.array([[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("norm_first", [False, True])
def test_generate_greedy_cached_equals_uncached(norm_first):
    m = lm(norm_first=norm_first)
    a = decoding.generate(m, PROMPT, 6, greedy=True)
    b = decoding.generate(m, PROMPT, 6, greedy=True, use_cache=False)
    np.testing.assert_array_equal(a._data, b._data)
    assert a.shape == (2, 9) and np.all(a._data[:, :3] == PROMPT)
    # greedy continuation = argmax of the full model at each step
    full = m.eval()(a)._data
    np.testing.assert_array_equal(full[:, 2:-1].argmax(-1), a._data[:, 3:])


def test_generate_sampling_is_seeded_and_cache_independent():
    m = lm()
    ct.manual_seed(5)
    a = decoding.generate(m, PROMPT, 6, temperature=0.8, top_k=4)
    ct.manual_seed(5)
    b = decoding.generate(m, PROMPT, 6, temperature=0.8, top_k=4, use_cache=False)
    np.testing.assert_array_equal(a._data, b._data)
    ct.manual_seed(5)
    top1 = decoding.generate(m, PROMPT, 6, top_k=1)
    np.testing.assert_array_equal(top1._data, decoding.generate(m, PROMPT, 6, greedy=True)._data)
    # sampled tokens come from the top_k of the full model's distribution
    logits = m.eval()(a)._data[:, 2:-1]
    ranks = (logits > np.take_along_axis(logits, a._data[:, 3:, None], -1)).sum(-1)
    assert np.all(ranks < 4)


def test_generate_eos_and_errors():
    m = lm()
    out = decoding.generate(m, PROMPT, 8, greedy=True)._data
    eos = int(out[0, 4])  # make the first row's second new token the eos
    got = decoding.generate(m, PROMPT, 8, greedy=True, eos_id=eos)._data
    assert np.all(got[0, 4:] == eos)
    with pytest.raises(ValueError, match=r"generate: prompt length \+ max_new_tokens \(19\) exceeds the model's max_len \(16\)"):
        decoding.generate(m, PROMPT, 16)
    with pytest.raises(ValueError, match="generate: temperature must be > 0, got 0"):
        decoding.generate(m, PROMPT, 2, temperature=0)
