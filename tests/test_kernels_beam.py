"""beam_step (csrc/decode_beam.c): one re-ranking of batched beam search.

Against the NumPy steps it replaced in decoding.beam_search, bit for bit:
log_softmax_forward of the logits as float64, a finished beam's one
continuation (pad, at no cost), the (B, k V) candidate scores and the
first k of a stable argsort of -candidates (ties to the lower index, NaN
last).  Then against a pure NumPy log-softmax (float64 tolerance), torch
(values of torch.topk), thread counts, and bad input."""
import numpy as np
import pytest

import ctransformer as ct
import ctransformer.kernels as K
from tolerances import F64


def numpy_beam_step(logits, scores, done, pad_id, log_softmax=None):
    """The reference: (new_scores (B, k), origin (B k), tok (B k)) as
    decoding.beam_search computed them before beam_step."""
    B, k = scores.shape
    R, V = logits.shape
    logp = (log_softmax or K.log_softmax_forward)(logits.astype(np.float64))
    logp[done] = -np.inf
    logp[done, pad_id] = 0.0
    cand = (scores.reshape(R, 1) + logp).reshape(B, k * V)
    best = np.argsort(-cand, axis=1, kind="stable")[:, :k]
    new_scores = np.take_along_axis(cand, best, axis=1)
    origin = (np.arange(B)[:, None] * k + best // V).reshape(R)
    return new_scores, origin, (best % V).reshape(R)


def numpy_log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def assert_same(got, want):
    for g, w, name in zip(got, want, ("new_scores", "origin", "tok")):
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g, w, err_msg=name)


def beams(rng, B, k, V, dtype, ties=False):
    logits = rng.standard_normal((B * k, V)) * 3
    if ties:
        logits = np.round(logits)  # many equal logits, so equal candidates
    scores = np.round(rng.standard_normal((B, k)), 0 if ties else 6) - 2.0
    return logits.astype(dtype), scores, rng.random(B * k) < 0.3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("B, k, V", [(1, 1, 1), (1, 4, 1), (2, 3, 2), (1, 4, 50), (3, 5, 37), (2, 2, 300),
                                     (0, 4, 9)])
@pytest.mark.parametrize("ties", [False, True])
def test_same_bits_as_the_numpy_steps(rng, dtype, B, k, V, ties):
    logits, scores, done = beams(rng, B, k, V, dtype, ties)
    pad_id = V // 2
    got = K.beam_step(logits, scores, done, pad_id)
    assert_same(got, numpy_beam_step(logits, scores, done, pad_id))
    assert got[0].shape == (B, k) and got[1].shape == got[2].shape == (B * k,)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_first_step_and_special_rows(rng, dtype):
    """The first step (one live beam, the others -inf), finished beams, a row
    with a NaN logit (NaN candidates go last), a row of -inf logits (every
    candidate -inf: ranked by index), +inf logits and signed zeros."""
    B, k, V = 6, 4, 7
    logits = rng.standard_normal((B * k, V)).astype(dtype)
    scores = rng.standard_normal((B, k)) - 1
    scores[0, 1:] = -np.inf                 # source 0: the first step
    done = np.zeros(B * k, bool)
    done[[4, 5, 6]] = True                  # source 1: three finished beams, one live
    logits[8, 3] = np.nan                   # source 2: one beam's log-softmax is NaN
    logits[12:16] = -np.inf                 # source 3: every candidate -inf
    logits[16, [1, 4]] = np.inf             # source 4: +inf logits (NaN log-probabilities)
    logits[20:24] = 0.0                     # source 5: signed zeros among equal scores
    logits[21, ::2] = -0.0
    scores[5] = [0.0, -0.0, 0.0, -0.0]
    for pad_id in (0, 6):
        assert_same(K.beam_step(logits, scores, done, pad_id), numpy_beam_step(logits, scores, done, pad_id))
    all_done = np.ones(B * k, bool)  # every beam finished: each keeps its score with pad
    new_scores, origin, tok = K.beam_step(logits, scores, all_done, 2)
    assert_same((new_scores, origin, tok), numpy_beam_step(logits, scores, all_done, 2))
    live = np.isfinite(scores)
    np.testing.assert_array_equal(np.sort(new_scores[live.all(1)], 1), np.sort(scores[live.all(1)], 1))
    assert (tok[np.isfinite(new_scores.reshape(-1))] == 2).all()


def test_the_values_of_a_plain_numpy_log_softmax(rng):
    """Against a log-softmax written in NumPy (not the kernel's): the scores
    agree to float64 rounding and, without near ties, the picks are the same."""
    logits, scores, done = beams(rng, 3, 4, 200, np.float32)
    got = K.beam_step(logits, scores, done, 5)
    want = numpy_beam_step(logits, scores, done, 5, log_softmax=numpy_log_softmax)
    np.testing.assert_allclose(got[0], want[0], **F64)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])


def test_the_same_bits_on_any_thread_count(rng):
    """Sources are split between the pool's threads, each whole on one."""
    logits, scores, done = beams(rng, 64, 4, 500, np.float32)
    before = ct.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            ct.set_num_threads(threads)
            results.append(K.beam_step(logits, scores, done, 1))
    finally:
        ct.set_num_threads(before)
    for other in results[1:]:
        assert_same(other, results[0])


def test_matches_torch_topk(rng, torch_ref):
    """Each source's k best values are torch's topk of scores + log_softmax."""
    B, k, V = 3, 4, 60
    logits, scores, done = beams(rng, B, k, V, np.float32)
    done[:] = False

    def torch_side(torch):
        logp = torch.log_softmax(torch.tensor(logits).double(), dim=-1)
        cand = (torch.tensor(scores).reshape(B * k, 1) + logp).reshape(B, k * V)
        return dict(values=torch.topk(cand, k, dim=1).values)

    ref = torch_ref(torch_side, inputs=dict(logits=logits, scores=scores))
    new_scores, origin, tok = K.beam_step(logits, scores, done, 0)
    np.testing.assert_allclose(new_scores, ref["values"], **F64)
    # the picks are worth their scores: beam origin's score plus its token's log-probability
    logp = numpy_log_softmax(logits.astype(np.float64))
    np.testing.assert_allclose(new_scores.reshape(-1), scores.reshape(-1)[origin] + logp[origin, tok], **F64)


def test_bad_input(rng):
    logits, scores, done = beams(rng, 2, 3, 5, np.float32)
    with pytest.raises(ValueError, match=r"beam_step: logits.shape\[0\] must be 6 \(scores.shape\[0\] \* "
                                         r"scores.shape\[1\], the beams\), got 5"):
        K.beam_step(logits[:5], scores, done, 0)
    with pytest.raises(ValueError, match=r"beam_step: done.shape\[0\] must be 6 .*, got 4"):
        K.beam_step(logits, scores, done[:4], 0)
    for pad_id in (-1, 5):
        with pytest.raises(ValueError, match=rf"beam_step: pad_id must be in \[0, 5\) \(logits.shape\[1\]\), "
                                             rf"got {pad_id}"):
            K.beam_step(logits, scores, done, pad_id)
    with pytest.raises(ValueError, match=r"beam_step: need k >= 1 beams \(scores.shape\[1\]\) and V >= 1 tokens "
                                         r"\(logits.shape\[1\]\), got k 3, V 0"):
        K.beam_step(logits[:, :0], scores, done, 0)
    with pytest.raises(ValueError, match=r"beam_step: need k >= 1 .*, got k 0, V 5"):
        K.beam_step(logits[:0], scores[:, :0], done[:0], 0)
    with pytest.raises((TypeError, ValueError), match=r"beam_step: scores"):
        K.beam_step(logits, scores.astype(np.float32), done, 0)
    with pytest.raises((TypeError, ValueError), match=r"beam_step: done"):
        K.beam_step(logits, scores, done.astype(np.int64), 0)
    with pytest.raises((TypeError, ValueError), match=r"beam_step: logits"):
        K.beam_step(logits.astype(np.int32), scores, done, 0)
