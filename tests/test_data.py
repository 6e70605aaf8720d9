"""ctransformer.data: synthetic translation corpus, antonym pairs, text corpus,
JSONL reader, batching and masks."""
import gzip
import os
import random
import re
import shutil
import warnings

import numpy as np
import pytest

from ctransformer.data import (ANTONYM_CHARS, ANTONYM_PAIRS, ANTONYM_VOCAB, SENTENCE_KINDS, TEXT_MODULES,
                               TranslationJsonl, bucket_batches, create_masks, decode_antonym, en_tokens,
                               load_text_corpus, make_antonym_batch, make_antonym_test_batch,
                               make_translation_corpus, pad_batch, padding_mask, read_translation_jsonl,
                               sample_pair, subsequent_mask, target_mask, zh_tokens)
from ctransformer.data.translation import KIND_WEIGHTS, en_number, zh_number

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
JSONL = os.path.join(FIXTURES, "translation2019zh_sample.jsonl")


# ------------------------------------------------------------------ corpus --
@pytest.fixture(scope="module")
def corpus():
    return make_translation_corpus(n_train=3000, n_valid=300, n_test=300, seed=0)


def test_corpus_sizes_and_types(corpus):
    assert list(corpus) == ["train", "valid", "test"]
    assert [len(corpus[s]) for s in corpus] == [3000, 300, 300]
    for pairs in corpus.values():
        for zh, en in pairs:
            assert isinstance(zh, str) and isinstance(en, str) and zh and en


def test_corpus_is_deterministic(corpus):
    assert make_translation_corpus(n_train=3000, n_valid=300, n_test=300, seed=0) == corpus
    other = make_translation_corpus(n_train=3000, n_valid=300, n_test=300, seed=1)
    assert other["train"] != corpus["train"] and other["test"] != corpus["test"]
    # held-out splits are drawn first: they do not depend on n_train
    small = make_translation_corpus(n_train=10, n_valid=300, n_test=300, seed=0)
    assert small["test"] == corpus["test"] and small["valid"] == corpus["valid"]


def test_splits_are_disjoint_and_sentences_distinct(corpus):
    train = {zh for zh, _ in corpus["train"]}
    valid = {zh for zh, _ in corpus["valid"]}
    test = {zh for zh, _ in corpus["test"]}
    assert len(train) == 3000 and len(valid) == 300 and len(test) == 300
    assert not train & valid and not train & test and not valid & test


def test_translation_is_a_function_of_the_source():
    rng = random.Random(123)
    seen = {}
    for _ in range(20000):
        zh, en = sample_pair(rng)
        assert seen.setdefault(zh, en) == en, f"{zh} -> {seen[zh]!r} and {en!r}"
    assert len(seen) > 12000          # combinatorial: most draws are new sentences


def test_corpus_token_conventions_and_vocabulary(corpus):
    pairs = [p for split in corpus.values() for p in split]
    zh_vocab, en_vocab = set(), set()
    for zh, en in pairs:
        assert len(zh_tokens(zh)) <= 14 and len(en_tokens(en)) <= 14
        assert " " not in zh
        assert en == en.lower() and en == " ".join(en.split())
        assert not re.search(r"\w[.,?]|[.,?]\w", en), en     # punctuation split off
        zh_vocab.update(zh)
        en_vocab.update(en.split())
    assert 100 <= len(en_vocab) <= 320 and 100 <= len(zh_vocab) <= 400


def test_every_sentence_kind_occurs(corpus):
    rng = random.Random(0)
    for kind in SENTENCE_KINDS:
        zh, en = sample_pair(rng, kind)
        assert zh and en
    with pytest.raises(ValueError, match="sample_pair: kind must be one of"):
        sample_pair(rng, "poetry")


@pytest.mark.parametrize("n,zh,counted,en", [
    (1, "一", "一", "one"), (2, "二", "两", "two"), (10, "十", "十", "ten"), (15, "十五", "十五", "fifteen"),
    (20, "二十", "二十", "twenty"), (22, "二十二", "二十二", "twenty - two"), (100, "一百", "一百", "one hundred"),
    (105, "一百零五", "一百零五", "one hundred five"), (110, "一百一十", "一百一十", "one hundred ten"),
    (200, "二百", "两百", "two hundred"), (325, "三百二十五", "三百二十五", "three hundred twenty - five"),
    (999, "九百九十九", "九百九十九", "nine hundred ninety - nine"),
])
def test_numbers(n, zh, counted, en):
    assert zh_number(n) == zh and zh_number(n, counted=True) == counted and " ".join(en_number(n)) == en


PRONOUNS = {"我": "i", "他": "he", "她": "she", "我们": "we", "他们": "they"}
PAST = {"吃": "ate", "喝": "drank", "买": "bought", "卖": "sold", "写": "wrote", "画": "drew", "看": "watched"}


def test_grammar_phenomena_examples():
    """Spot checks of agreement, tense, plurals, locations, questions, dates."""
    pairs = dict(p for split in make_translation_corpus(8000, 0, 0, seed=3).values() for p in split)
    by_zh = {zh: en for zh, en in pairs.items()}
    found = {"past": 0, "future": 0, "progressive": 0, "question": 0, "plural": 0, "date": 0, "place": 0}
    for zh, en in by_zh.items():
        words = en.split()
        if re.match(r"^他(现在)?正在", zh) and "吗" not in zh:
            assert words[:2] == ["he", "is"] and words[2].endswith("ing")
            found["progressive"] += 1
        if re.match(r"^(我们|他们|你们)(明天)?会", zh) and "吗" not in zh:
            assert words[1] == "will"
            found["future"] += 1
        if zh.endswith("吗？"):
            assert words[-1] == "?" and words[0] in {"do", "does", "did", "will", "am", "is", "are", "was", "were"}
            found["question"] += 1
        if re.match(r"^三(只|个|本|匹)", zh) and "吗" not in zh:
            noun = words[2] if words[1] in ("big", "small", "black", "white", "new", "old", "red") else words[1]
            assert words[0] == "three" and noun.endswith(("s", "children", "men")), en
            found["plural"] += 1
        if re.search(r"\d{4}年\d+月\d+日", zh):
            month, day, comma, year = re.search(r"([a-z]+) (\d+) (,) (\d{4})", en).groups()
            assert f"{year}年" in zh and f"月{day}日" in zh
            found["date"] += 1
        if "在公园里" in zh and "正在" not in zh:
            assert "in the park" in en
            found["place"] += 1
        past = re.match(r"^(我们|他们|我|他|她)昨天(?:在\w+?)?([吃喝买卖写画看])了", zh)
        if past and "吗" not in zh:
            subject, verb = past.groups()
            assert words[:2] == [PRONOUNS[subject], PAST[verb]], en
            assert words[-2:] == ["yesterday", "."]
            found["past"] += 1
    assert all(found.values()), found
    assert by_zh.get("三百二十五", "three hundred twenty - five") == "three hundred twenty - five"


def test_corpus_kind_weights():
    numbers = make_translation_corpus(n_train=200, n_valid=20, n_test=20, seed=0, weights={"number": 1})
    for zh, en in numbers["train"] + numbers["test"]:
        assert re.fullmatch(r"[一二三四五六七八九十百零]+", zh) and en.split()[-1] != "."
    default = make_translation_corpus(n_train=200, n_valid=20, n_test=20, seed=0,
                                      weights=dict(KIND_WEIGHTS))
    assert default == make_translation_corpus(n_train=200, n_valid=20, n_test=20, seed=0)
    with pytest.raises(ValueError, match="weights keys must be in"):
        make_translation_corpus(weights={"poetry": 1})
    with pytest.raises(ValueError, match="weights must be non-negative with a positive sum"):
        make_translation_corpus(weights={"number": 0})


def test_corpus_bad_arguments():
    with pytest.raises(ValueError, match="make_translation_corpus: n_train must be a non-negative int, got -1"):
        make_translation_corpus(n_train=-1)
    with pytest.raises(ValueError, match="could not draw"):
        make_translation_corpus(n_train=5, n_valid=0, n_test=0, max_len=1)


# ---------------------------------------------------------------- antonyms --
def test_antonym_data_matches_the_tutorial():
    assert ANTONYM_PAIRS == (("man", "woman"), ("black", "white"), ("king", "queen"), ("girl", "boy"),
                             ("up", "down"), ("high", "low"), ("men", "women"), ("you", "me"))
    assert "".join(ANTONYM_CHARS) == "SEPabcdefghijklmnopqrstuvwxyz" and len(ANTONYM_VOCAB) == 29
    enc, dec_in, dec_out = make_antonym_batch()
    assert enc.shape == (8, 8) and dec_in.shape == (9, 8) and dec_out.shape == (9, 8)
    assert enc.dtype == np.int64
    decode = lambda ids: "".join(ANTONYM_CHARS[i] for i in ids)   # noqa: E731
    assert decode(enc[:, 0]) == "manPPPPP"
    assert decode(dec_in[:, 0]) == "SwomanPPP"
    assert decode(dec_out[:, 0]) == "womanEPPP"
    # the tutorial's own layout: E after the padding
    _, _, seed_out = make_antonym_batch(seed_layout=True)
    assert decode(seed_out[:, 0]) == "womanPPPE"
    enc_b, dec_in_b, dec_out_b = make_antonym_batch(time_major=False)
    assert np.array_equal(enc_b, enc.T) and np.array_equal(dec_out_b, dec_out.T)
    assert [a.shape for a in make_antonym_batch([])] == [(8, 0), (9, 0), (9, 0)]


def test_antonym_test_batch_and_decode():
    enc, dec = make_antonym_test_batch("mans")
    assert enc.shape == (8, 1) and dec.shape == (9, 1)
    assert "".join(ANTONYM_CHARS[i] for i in enc[:, 0]) == "mansPPPP"
    assert "".join(ANTONYM_CHARS[i] for i in dec[:, 0]) == "SPPPPPPPP"
    assert decode_antonym([0, ANTONYM_VOCAB["w"], ANTONYM_VOCAB["o"], 2, 1, ANTONYM_VOCAB["x"]]) == "wo"
    with pytest.raises(ValueError, match="at most n_step=8 characters, got 'abcdefghi'"):
        make_antonym_test_batch("abcdefghi")
    with pytest.raises(ValueError, match="lower-case a-z"):
        make_antonym_batch([("Man", "woman")])
    with pytest.raises(IndexError, match=r"decode_antonym: ids must be in \[0, 29\), got 29"):
        decode_antonym([29])


# -------------------------------------------------------------------- text --
def test_text_corpus_is_english_and_deterministic():
    text = load_text_corpus(max_chars=20000)
    assert len(text) == 20000
    assert text == load_text_corpus(max_chars=20000)
    assert load_text_corpus(max_chars=0) == ""
    assert all(ch == "\n" or " " <= ch <= "~" for ch in text)
    assert ">>>" not in text and "\n\n\n" not in text
    words = re.findall(r"[a-z]+", text.lower())
    assert sum(w in {"the", "of", "to", "a", "and", "is"} for w in words) > 0.1 * len(words)
    assert text.startswith(__import__(TEXT_MODULES[0]).__doc__.strip()[:20])
    full = load_text_corpus()
    assert len(full) > 200000 and full.startswith(text)
    with pytest.raises(ValueError, match="load_text_corpus: max_chars must be a non-negative int or None, got -5"):
        load_text_corpus(max_chars=-5)


# ------------------------------------------------------------------- jsonl --
GOOD = [("明天又是新的一天。", "Tomorrow is another day."), ("我喜欢猫。", "I like cats."),
        ("公园在哪里？", "Where is the park?"), ("三只猫", "Three cats.")]


def test_jsonl_skip_mode_counts_and_warns():
    reader = read_translation_jsonl(JSONL)
    assert isinstance(reader, TranslationJsonl)
    with pytest.warns(RuntimeWarning, match=r"skipped 4 malformed line\(s\) \(first at line 3\); read 4 pair"):
        pairs = list(reader)
    assert pairs == GOOD
    assert reader.skipped == 4 and reader.skipped_lines == [3, 5, 6, 7] and reader.n_read == 4
    with pytest.warns(RuntimeWarning):        # a second pass starts again from zero
        assert list(reader) == GOOD
    assert reader.skipped == 4


def test_jsonl_is_lazy():
    reader = TranslationJsonl(JSONL)
    it = iter(reader)
    assert next(it) == GOOD[0]
    assert reader.n_read == 1 and reader.skipped == 0     # nothing beyond line 1 read yet
    it.close()


def test_jsonl_raise_mode_names_file_and_line():
    reader = TranslationJsonl(JSONL, on_error="raise")
    it = iter(reader)
    assert next(it) == GOOD[0] and next(it) == GOOD[1]
    with pytest.raises(ValueError, match=re.escape(JSONL) + r": line 3: not valid JSON"):
        next(it)


def test_jsonl_missing_key_and_custom_keys(tmp_path):
    path = tmp_path / "keys.jsonl"
    path.write_text('{"en": "a", "zh": "b"}\n{"en": "c"}\n', encoding="utf-8")
    reader = TranslationJsonl(path, on_error="raise", src_key="zh", tgt_key="en")
    with pytest.raises(ValueError, match=r"keys.jsonl: line 2: missing key 'zh'"):
        list(reader)
    assert reader.n_read == 1


def test_jsonl_other_malformations(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"english": "a", "chinese": "b"}\n'
                     b'{"english": "x", "chinese": "\xff\xfe"}\n'
                     b'{"english": "c", "chinese": ["d"]}\n')
    with pytest.raises(ValueError, match=r"line 2: not valid UTF-8"):
        list(TranslationJsonl(path, on_error="raise"))
    listed = tmp_path / "listed.jsonl"
    listed.write_text('{"english": "c", "chinese": ["d"]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"listed.jsonl: line 1: 'chinese' must be a string, got list"):
        list(TranslationJsonl(listed, on_error="raise"))
    with pytest.warns(RuntimeWarning, match="skipped 2"):
        assert list(TranslationJsonl(path)) == [("b", "a")]         # BOM on line 1 is accepted
    with pytest.raises(ValueError, match="on_error must be 'skip' or 'raise', got 'ignore'"):
        TranslationJsonl(path, on_error="ignore")


def test_jsonl_gzip_and_clean_file_gives_no_warning(tmp_path):
    gz = tmp_path / "sample.jsonl.gz"
    with open(JSONL, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with pytest.warns(RuntimeWarning):
        assert list(TranslationJsonl(gz)) == GOOD
    clean = tmp_path / "clean.jsonl"
    clean.write_text('{"english": "a", "chinese": "b"}\n\n', encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(TranslationJsonl(clean)) == [("b", "a")]


# ---------------------------------------------------------------- batching --
def test_pad_batch():
    out = pad_batch([[5, 6, 7], [8], []], pad_id=0)
    assert out.dtype == np.int64 and out.shape == (3, 3)
    assert out.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert pad_batch([np.array([1, 2], np.int32)], pad_id=9, length=4).tolist() == [[1, 2, 9, 9]]
    assert pad_batch([]).shape == (0, 0)
    with pytest.raises(ValueError, match="pad_batch: sequences must have at most length=2 ids, got 3"):
        pad_batch([[1, 2, 3]], length=2)
    with pytest.raises(TypeError, match=r"pad_batch: seqs\[0\] must hold integers, got dtype float64"):
        pad_batch([[1.5]])


def test_pad_batch_one_shot_path_matches_row_by_row():
    """pad_batch converts all ids at once; the result and the errors are those
    of padding row by row (rows of any shape, the offending row named)."""
    rng = np.random.default_rng(3)
    seqs = [rng.integers(0, 300, rng.integers(0, 14)).tolist() for _ in range(64)]
    expected = np.zeros((64, max(len(s) for s in seqs)), np.int64) + 7
    for i, s in enumerate(seqs):
        expected[i, :len(s)] = s
    np.testing.assert_array_equal(pad_batch(seqs, pad_id=7), expected)
    np.testing.assert_array_equal(pad_batch([np.asarray(s, np.int32) for s in seqs], pad_id=7), expected)
    assert pad_batch([np.array([[1, 2], [3, 4]]), [5]], pad_id=0).tolist() == [[1, 2, 3, 4], [5, 0, 0, 0]]
    for bad, row, dtype in (([[1, 2], [True]], 1, "bool"), ([[3], np.array([True, False])], 1, "bool"),
                            ([[1], [2], [0.5, 1]], 2, "float64")):
        with pytest.raises(TypeError, match=rf"pad_batch: seqs\[{row}\] must hold integers, got dtype {dtype}"):
            pad_batch(bad)


def test_bucket_batches_cover_every_index_once_and_group_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 50, size=1003)
    for shuffle in (False, True):
        batches = bucket_batches(lengths, batch_size=32, shuffle=shuffle, seed=1, bucket_size=320)
        assert all(b.dtype == np.int64 for b in batches)
        assert sorted(np.concatenate(batches).tolist()) == list(range(1003))
        assert sum(b.size < 32 for b in batches) <= (4 if shuffle else 1)
        spread = np.mean([np.ptp(lengths[b]) for b in batches])
        assert spread < 10         # random batches of 32 would spread ~45
    plain = bucket_batches(lengths, 32, shuffle=False)
    assert np.all(np.diff(lengths[np.concatenate(plain)]) >= 0)
    same = bucket_batches(lengths, 32, shuffle=True, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(same, bucket_batches(lengths, 32, shuffle=True, seed=5)))
    assert not all(np.array_equal(a, b) for a, b in zip(same, bucket_batches(lengths, 32, shuffle=True, seed=6)))
    assert all(b.size == 32 for b in bucket_batches(lengths, 32, drop_last=True))
    assert bucket_batches([], 4) == []
    with pytest.raises(ValueError, match="bucket_batches: batch_size must be a positive int, got 0"):
        bucket_batches(lengths, 0)


def test_masks_shapes_and_polarity():
    ids = np.array([[5, 6, 0], [7, 0, 0]])
    pm = padding_mask(ids, pad_id=0)
    assert pm.dtype == bool and pm.shape == (2, 1, 1, 3)
    assert pm[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]   # True = may attend
    sm = subsequent_mask(3)
    assert sm.dtype == bool and sm.shape == (1, 1, 3, 3)
    assert sm[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    tm = target_mask(ids, pad_id=0)
    assert tm.shape == (2, 1, 3, 3)
    assert tm[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert tm[1, 0].tolist() == [[True, False, False], [True, False, False], [True, False, False]]
    src_mask, tgt_mask = create_masks(ids, ids)
    assert np.array_equal(src_mask, pm) and np.array_equal(tgt_mask, tm)
    assert subsequent_mask(0).shape == (1, 1, 0, 0)
    assert padding_mask(np.array([[1, 2, 1]]), pad_id=1)[0, 0, 0].tolist() == [False, True, False]


def test_masks_against_torch_polarity(torch_ref):
    ids = np.array([[3, 4, 0, 0]])
    mask = target_mask(ids)

    def torch_side(torch):
        blocked = torch.nn.Transformer.generate_square_subsequent_mask(4).isinf()
        q = torch.randn(1, 1, 4, 2, dtype=torch.float64)
        out = torch.nn.functional.scaled_dot_product_attention(
            q, q, torch.eye(4, dtype=torch.float64)[None, None], attn_mask=torch.from_numpy(mask))
        return dict(blocked=blocked, out=out)

    ref = torch_ref(torch_side, inputs=dict(mask=mask))
    # torch's generate_square_subsequent_mask is -inf where attention is blocked: the opposite of ours
    assert np.array_equal(~subsequent_mask(4)[0, 0], ref["blocked"])
    # F.scaled_dot_product_attention takes True = attend: masked keys get zero weight
    out = ref["out"]
    assert out.shape == (1, 1, 4, 4)
    assert np.allclose(out[0, 0, :, 2:], 0.0) and np.allclose(out[0, 0, 0], [1, 0, 0, 0])


def test_mask_bad_input():
    with pytest.raises(ValueError, match=r"padding_mask: ids must be 2-D \(B, S\), got shape \(3,\)"):
        padding_mask(np.array([1, 2, 3]))
    with pytest.raises(TypeError, match="target_mask: ids must be an integer array, got dtype float64"):
        target_mask(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="subsequent_mask: size must be a non-negative int, got -1"):
        subsequent_mask(-1)
