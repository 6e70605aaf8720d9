"""BLEU (sacreBLEU-compatible) and exact match.

The literal expected scores were computed with sacrebleu 2.6.0 (installed in a
side directory for development only) on tests/fixtures/bleu_sample.json:
    sacrebleu.corpus_bleu(H, [[r[0] for r in R]]).score      single reference
    sacrebleu.corpus_bleu(H, [list(s) for s in zip(*R)])     two references
    sacrebleu.sentence_bleu(H[i], R[i]).score
The hand-derived cases below need no sacrebleu at all.
"""
import json
import math
import os

import pytest

from ctransformer.metrics import (bleu_from_statistics, bleu_statistics, corpus_bleu, exact_match,
                                  sentence_bleu, tokenize_13a)

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "bleu_sample.json")
TIGHT = dict(rel=1e-12, abs=1e-12)


@pytest.fixture(scope="module")
def sample():
    with open(FIXTURE, encoding="utf-8") as f:
        data = json.load(f)
    return data["hypotheses"], data["references"]


def test_tokenize_13a_matches_mteval_rules():
    assert tokenize_13a("The meeting starts at 3.30 pm on March 5, 2024.") == \
        "The meeting starts at 3.30 pm on March 5 , 2024 ."
    assert tokenize_13a('I don\'t like "green" apples &amp; pears.') == 'I don\'t like " green " apples & pears .'
    assert tokenize_13a("twenty-five e-mail 12-3 1,000.5") == "twenty-five e-mail 12 - 3 1,000.5"
    assert tokenize_13a("  (a)  <skipped> b  ") == "( a ) b"
    assert tokenize_13a("") == ""


def test_hand_derived_exp_smoothing_and_brevity_penalty():
    # hyp "the cat ran on the mat" (6 tokens), ref "the cat sat on the mat today" (7 tokens):
    #   1-grams 5/6 (ran misses), 2-grams 3/5 (the cat, on the, the mat),
    #   3-grams 1/4 (on the mat), 4-grams 0/3 -> exp smoothing: 1 / (2 * 3)
    #   geometric mean = (5/6 * 3/5 * 1/4 * 1/6) ** (1/4) = (1/48) ** (1/4)
    #   brevity penalty = exp(1 - 7/6)
    expected = 100 * math.exp(1 - 7 / 6) * (1 / 48) ** 0.25
    assert corpus_bleu(["the cat ran on the mat"], ["the cat sat on the mat today"]) == pytest.approx(expected, **TIGHT)
    assert expected == pytest.approx(32.159351091190125, **TIGHT)      # sacrebleu's value
    # without smoothing a zero 4-gram precision makes BLEU 0
    assert corpus_bleu(["the cat ran on the mat"], ["the cat sat on the mat today"], smooth="none") == 0.0
    # sentence BLEU uses the effective order: "the cat" vs "the cat sat": 1-grams 2/2, 2-grams 1/1,
    # no 3-/4-grams in the hypothesis -> mean over 2 orders = 1, BP = exp(1 - 3/2)
    assert sentence_bleu("the cat", ["the cat sat"]) == pytest.approx(100 * math.exp(-0.5), **TIGHT)


def test_statistics_clip_by_reference_counts():
    correct, total, sys_len, ref_len = bleu_statistics(["the the the the"], [["the cat", "the the"]])
    assert correct == [2, 1, 0, 0] and total == [4, 3, 2, 1]
    assert (sys_len, ref_len) == (4, 2)                 # closest ref length; tie -> shorter
    assert bleu_from_statistics([0, 0, 0, 0], [4, 3, 2, 1], 4, 4) == 0.0


def test_corpus_bleu_single_reference_matches_sacrebleu(sample):
    hyps, refs = sample
    first = [r[0] for r in refs]
    assert corpus_bleu(hyps, first) == pytest.approx(34.40962568994889, **TIGHT)
    assert corpus_bleu(hyps, [[r] for r in first]) == pytest.approx(34.40962568994889, **TIGHT)
    assert corpus_bleu(hyps, first, smooth="add-k") == pytest.approx(36.2513734119776, **TIGHT)
    assert corpus_bleu(hyps, first, tokenize="char") == pytest.approx(60.01224963677812, **TIGHT)
    assert corpus_bleu(hyps, first, tokenize="none") == pytest.approx(29.837017307648715, **TIGHT)
    assert corpus_bleu([h.upper() for h in hyps], first, lowercase=True) == pytest.approx(34.40962568994889, **TIGHT)


def test_corpus_bleu_multi_reference_matches_sacrebleu(sample):
    hyps, refs = sample
    assert corpus_bleu(hyps, refs) == pytest.approx(74.51534058120224, **TIGHT)


SENTENCE_EXPECTED = [  # sacrebleu.sentence_bleu(H[i], R[i]).score, (H[i], [R[i][0]]).score
    (90.36020036098445, 41.11336169005198), (59.4603557501361, 54.10822690539397),
    (44.7419658407185, 35.49481056010054), (100.00000000000004, 39.76353643835252),
    (88.01117367933934, 30.28976401809639), (70.71067811865478, 11.044795567078939),
    (60.427507947135354, 53.7284965911771), (70.71067811865478, 49.99999999999999),
]


@pytest.mark.parametrize("i", range(len(SENTENCE_EXPECTED)))
def test_sentence_bleu_matches_sacrebleu(sample, i):
    hyps, refs = sample
    both, single = SENTENCE_EXPECTED[i]
    assert sentence_bleu(hyps[i], refs[i]) == pytest.approx(both, **TIGHT)
    assert sentence_bleu(hyps[i], refs[i][0]) == pytest.approx(single, **TIGHT)


def test_bleu_edge_cases():
    assert corpus_bleu([], []) == 0.0
    assert corpus_bleu([""], ["a b c"]) == 0.0
    assert corpus_bleu(["a b c d"], ["a b c d"]) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="corpus_bleu: references must have one entry per hypothesis"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="tokenize must be one of"):
        corpus_bleu(["a"], ["a"], tokenize="intl")
    with pytest.raises(ValueError, match="smooth must be one of"):
        corpus_bleu(["a"], ["a"], smooth="lin")
    with pytest.raises(TypeError, match="got a str"):
        corpus_bleu("a b", "a b")


def test_agrees_with_installed_sacrebleu(sample):
    sacrebleu = pytest.importorskip("sacrebleu")
    hyps, refs = sample
    streams = [list(s) for s in zip(*refs)]
    assert corpus_bleu(hyps, refs) == pytest.approx(sacrebleu.corpus_bleu(hyps, streams).score, **TIGHT)
    for h, r in zip(hyps, refs):
        assert sentence_bleu(h, r) == pytest.approx(sacrebleu.sentence_bleu(h, r).score, **TIGHT)


def test_exact_match():
    assert exact_match(["a b", "c", "d"], ["a  b ", "c", "x"]) == pytest.approx(2 / 3)
    assert exact_match(["a b"], ["a  b"], normalize=False) == 0.0
    assert exact_match(["a", "b"], [["x", "a"], ["y"]]) == 0.5
    assert exact_match([], []) == 0.0
    with pytest.raises(ValueError, match="exact_match: references must have one entry per hypothesis"):
        exact_match(["a"], [])
