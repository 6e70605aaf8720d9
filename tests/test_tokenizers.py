"""Char / word / subword tokenizers: vocabulary order, round trips, <unk>,
empty input, save/load, bad input."""
import json
import sys

import numpy as np
import pytest

from ctransformer.tokenizers import (EOS_ID, PAD_ID, SOS_ID, SPECIALS, UNK_ID, CharTokenizer, SubwordTokenizer,
                                     WordTokenizer, load_tokenizer)

ZH = ["我有三只猫。", "他在公园里吃苹果。", "猫在桌子上。"]
EN = ["i have three cats .", "he eats apples in the park .", "the cat is on the table ."]


def test_specials_are_fixed_ids():
    tok = CharTokenizer()
    assert SPECIALS == ("<pad>", "<sos>", "<eos>", "<unk>")
    assert (PAD_ID, SOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert tok.itos[:4] == list(SPECIALS) and len(tok) == 4
    assert (tok.pad_id, tok.sos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)


def test_vocab_order_is_frequency_then_string():
    tok = WordTokenizer().build_vocab(["b a c a", "c b d a"])
    # a:3, b:2, c:2, d:1 -> a, then b/c by string, then d
    assert tok.itos == list(SPECIALS) + ["a", "b", "c", "d"]
    assert WordTokenizer().build_vocab(["b a c a", "c b d a"], min_freq=2).itos[4:] == ["a", "b", "c"]
    assert WordTokenizer().build_vocab(["b a c a", "c b d a"], max_size=2).itos[4:] == ["a", "b"]
    assert WordTokenizer().build_vocab(["b a c a", "c b d a"], max_size=0).itos == list(SPECIALS)
    # order does not depend on the order of the texts
    assert WordTokenizer().build_vocab(["c b d a", "b a c a"]).itos == tok.itos
    # special strings in the text are not added twice
    assert WordTokenizer().build_vocab(["<unk> x <pad>"]).itos == list(SPECIALS) + ["x"]


def test_char_round_trip_and_specials():
    tok = CharTokenizer().build_vocab(ZH)
    for text in ZH:
        ids = tok.encode(text)
        assert len(ids) == len(text) and min(ids) >= 4
        assert tok.decode(ids) == text
        with_specials = tok.encode(text, add_sos=True, add_eos=True)
        assert with_specials[0] == SOS_ID and with_specials[-1] == EOS_ID and with_specials[1:-1] == ids
        assert tok.decode(with_specials) == text
        assert tok.decode(with_specials, skip_special=False) == "<sos>" + text + "<eos>"
    assert tok.decode(np.array(tok.encode(ZH[0]) + [PAD_ID, PAD_ID])) == ZH[0]


def test_word_round_trip():
    tok = WordTokenizer().build_vocab(EN)
    for text in EN:
        assert tok.decode(tok.encode(text, add_sos=True, add_eos=True)) == text
    assert len(tok) == 4 + len({w for s in EN for w in s.split()})


def test_unknown_and_empty():
    tok = WordTokenizer().build_vocab(EN)
    assert tok.encode("the dog is on the moon") == [tok.stoi["the"], UNK_ID, tok.stoi["is"], tok.stoi["on"],
                                                    tok.stoi["the"], UNK_ID]
    assert tok.decode(tok.encode("the dog")) == "the <unk>"
    assert tok.encode("") == [] and tok.encode("   ") == []
    assert tok.encode("", add_sos=True, add_eos=True) == [SOS_ID, EOS_ID]
    assert tok.decode([]) == ""
    ctok = CharTokenizer().build_vocab(ZH)
    assert ctok.encode("狗") == [UNK_ID] and ctok.encode("") == []
    assert ctok.token_to_id("狗") == UNK_ID and ctok.id_to_token(0) == "<pad>"


def test_decode_stop_at_eos():
    tok = WordTokenizer().build_vocab(EN)
    ids = tok.encode("the cat", add_sos=True, add_eos=True) + tok.encode("park")
    assert tok.decode(ids) == "the cat park"
    assert tok.decode(ids, stop_at_eos=True) == "the cat"


def test_word_tokenizer_options():
    tok = WordTokenizer(lower=True, split_punct=True).build_vocab(["Hello, World. Hello!"])
    assert tok.tokenize("Hello, World.") == ["hello", ",", "world", "."]
    assert tok.decode(tok.encode("HELLO , world !")) == "hello , world !"


@pytest.mark.parametrize("cls,texts", [(CharTokenizer, ZH), (WordTokenizer, EN)])
def test_save_load(tmp_path, cls, texts):
    tok = cls().build_vocab(texts)
    path = tmp_path / "tok.json"
    tok.save(path)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    assert data["type"] == cls.__name__ and data["tokens"] == tok.itos
    for loaded in (cls.load(path), load_tokenizer(path)):
        assert type(loaded) is cls and loaded.itos == tok.itos and len(loaded) == len(tok)
        for text in texts:
            assert loaded.encode(text) == tok.encode(text)


def test_save_load_keeps_word_options(tmp_path):
    tok = WordTokenizer(lower=True, split_punct=True).build_vocab(["A, b."])
    tok.save(tmp_path / "w.json")
    loaded = WordTokenizer.load(tmp_path / "w.json")
    assert loaded.lower and loaded.split_punct and loaded.encode("a , B") == tok.encode("A, b")
    with pytest.raises(ValueError, match="CharTokenizer.load: file must hold a CharTokenizer, got 'WordTokenizer'"):
        CharTokenizer.load(tmp_path / "w.json")


def test_bad_input_messages():
    tok = WordTokenizer().build_vocab(EN)
    with pytest.raises(TypeError, match="WordTokenizer.encode: text must be a str, got list"):
        tok.encode(["a"])
    with pytest.raises(IndexError, match=r"WordTokenizer.decode: ids must be in \[0, \d+\), got 999"):
        tok.decode([4, 999])
    with pytest.raises(IndexError, match=r"got -1"):
        tok.decode([-1])
    with pytest.raises(TypeError, match="WordTokenizer.decode: ids must be integers, got float"):
        tok.decode([1.5])
    with pytest.raises(TypeError, match="texts must be an iterable of strings, got a single str"):
        WordTokenizer().build_vocab("abc")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str, got int"):
        CharTokenizer().build_vocab(["a", 3])
    with pytest.raises(ValueError, match="min_freq must be an int >= 1, got 0"):
        CharTokenizer().build_vocab(["a"], min_freq=0)
    with pytest.raises(ValueError, match="max_size must be a non-negative int or None, got -1"):
        CharTokenizer().build_vocab(["a"], max_size=-1)


def test_subword_without_tokenizers_package_explains_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)      # makes `import tokenizers` fail
    with pytest.raises(ImportError, match="pip install tokenizers"):
        SubwordTokenizer()


def test_subword_bpe_round_trip(tmp_path):
    pytest.importorskip("tokenizers")
    texts = EN * 20 + ["the cats are in the garden .", "three hundred twenty - five books ."] * 5
    tok = SubwordTokenizer().build_vocab(texts, max_size=120)
    assert 4 < len(tok) <= 120
    assert [tok._tok.token_to_id(s) for s in SPECIALS] == [0, 1, 2, 3]
    for text in EN:
        ids = tok.encode(text, add_sos=True, add_eos=True)
        assert ids[0] == SOS_ID and ids[-1] == EOS_ID and min(ids[1:-1]) >= 4
        assert tok.decode(ids) == text
    assert tok.encode("") == []
    assert UNK_ID in tok.encode("the zebra")          # z was never seen
    tok.save(tmp_path / "bpe.json")
    for loaded in (SubwordTokenizer.load(tmp_path / "bpe.json"), load_tokenizer(tmp_path / "bpe.json")):
        assert loaded.encode(EN[1]) == tok.encode(EN[1])
    with pytest.raises(IndexError, match="SubwordTokenizer.decode: ids must be in"):
        tok.decode([len(tok)])
