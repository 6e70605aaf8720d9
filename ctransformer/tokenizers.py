"""Tokenizers: characters, whitespace words, and (optional) BPE subwords.

Every tokenizer reserves the same special ids::

    <pad> = 0    <sos> = 1    <eos> = 2    <unk> = 3

``build_vocab(texts, min_freq=1, max_size=None)`` counts tokens and orders
the vocabulary deterministically: by frequency (descending), ties by the
token string (ascending, i.e. by code point).  ``max_size`` caps the number
of *regular* tokens (the four specials are not counted).  Unknown tokens
encode to ``<unk>``; the empty string encodes to ``[]``.

``save(path)`` writes JSON (UTF-8); ``Class.load(path)`` or
:func:`load_tokenizer` reads it back.

:class:`SubwordTokenizer` wraps BPE from the optional ``tokenizers`` package
(``pip install tokenizers``); everything else is standard library.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence, Union

PAD, SOS, EOS, UNK = "<pad>", "<sos>", "<eos>", "<unk>"
SPECIALS = (PAD, SOS, EOS, UNK)
PAD_ID, SOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
_FORMAT_VERSION = 1

PathLike = Union[str, "os.PathLike[str]"]


def _check_texts(texts, where: str) -> List[str]:
    if isinstance(texts, str):
        raise TypeError(f"{where}: texts must be an iterable of strings, got a single str")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{where}: texts[{i}] must be a str, got {type(text).__name__}")
    return texts


def _check_vocab_args(min_freq, max_size, where: str) -> None:
    if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
        raise ValueError(f"{where}: min_freq must be an int >= 1, got {min_freq!r}")
    if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 0):
        raise ValueError(f"{where}: max_size must be a non-negative int or None, got {max_size!r}")


def _id_list(ids, where: str) -> List[int]:
    """Any iterable of integers (list, tuple, 1-D NumPy array) -> list of int."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    out = []
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"{where}: ids must be integers, got {type(i).__name__}")
        out.append(i)
    return out


class _VocabTokenizer:
    """Shared machinery: a token list (index = id) with the 4 specials first."""

    def __init__(self, tokens: Optional[Sequence[str]] = None):
        self.itos: List[str] = list(SPECIALS)
        self.stoi: Dict[str, int] = {tok: i for i, tok in enumerate(self.itos)}
        if tokens is not None:
            self._set_tokens(tokens)

    # -- to be defined by subclasses --------------------------------------
    def tokenize(self, text: str) -> List[str]:
        raise NotImplementedError

    def detokenize(self, tokens: List[str]) -> str:
        raise NotImplementedError

    def _config(self) -> dict:
        return {}

    # -- vocabulary ---------------------------------------------------------
    def _set_tokens(self, tokens: Sequence[str]) -> None:
        tokens = list(tokens)
        if tuple(tokens[:4]) != SPECIALS:
            tokens = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        if len(set(tokens)) != len(tokens):
            raise ValueError(f"{type(self).__name__}: tokens must be distinct")
        self.itos = tokens
        self.stoi = {tok: i for i, tok in enumerate(tokens)}

    def build_vocab(self, texts: Iterable[str], min_freq: int = 1, max_size: Optional[int] = None):
        """Count the tokens of ``texts`` and set the vocabulary: specials,
        then tokens seen at least ``min_freq`` times, most frequent first, ties
        by string; at most ``max_size`` regular tokens.  Returns self."""
        where = f"{type(self).__name__}.build_vocab"
        texts = _check_texts(texts, where)
        _check_vocab_args(min_freq, max_size, where)
        counts = Counter(tok for text in texts for tok in self.tokenize(text))
        for special in SPECIALS:
            counts.pop(special, None)
        ranked = sorted((tok for tok, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[:max_size]
        self._set_tokens(list(SPECIALS) + ranked)
        return self

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    pad_id, sos_id, eos_id, unk_id = PAD_ID, SOS_ID, EOS_ID, UNK_ID

    def token_to_id(self, token: str) -> int:
        return self.stoi.get(token, UNK_ID)

    def id_to_token(self, i: int) -> str:
        if not 0 <= i < len(self.itos):
            raise IndexError(f"{type(self).__name__}.id_to_token: id must be in [0, {len(self.itos)}), got {i}")
        return self.itos[i]

    # -- encode / decode ----------------------------------------------------
    def encode(self, text: str, add_sos: bool = False, add_eos: bool = False) -> List[int]:
        """text -> ids; unknown tokens -> <unk> (3); "" -> [] (plus the
        requested <sos>/<eos>)."""
        if not isinstance(text, str):
            raise TypeError(f"{type(self).__name__}.encode: text must be a str, got {type(text).__name__}")
        ids = [self.stoi.get(tok, UNK_ID) for tok in self.tokenize(text)]
        return ([SOS_ID] if add_sos else []) + ids + ([EOS_ID] if add_eos else [])

    def decode(self, ids: Iterable[int], skip_special: bool = True, stop_at_eos: bool = False) -> str:
        """ids -> text.  ``skip_special`` drops <pad>, <sos> and <eos> (an
        <unk> stays visible as "<unk>", it stands for real text);
        ``stop_at_eos`` ignores everything from the first <eos> on (for
        greedy-decoded outputs).  Ids outside the vocabulary raise IndexError."""
        where = f"{type(self).__name__}.decode"
        tokens = []
        for i in _id_list(ids, where):
            if not 0 <= i < len(self.itos):
                raise IndexError(f"{where}: ids must be in [0, {len(self.itos)}), got {i}")
            if stop_at_eos and i == EOS_ID:
                break
            if skip_special and i in (PAD_ID, SOS_ID, EOS_ID):
                continue
            tokens.append(self.itos[i])
        return self.detokenize(tokens)

    # -- persistence ----------------------------------------------------------
    def save(self, path: PathLike) -> None:
        """Write the vocabulary and options as JSON."""
        data = {"type": type(self).__name__, "version": _FORMAT_VERSION, "config": self._config(),
                "tokens": self.itos}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=0)

    @classmethod
    def load(cls, path: PathLike):
        """Read a tokenizer written by :meth:`save` (must be of this class)."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("type") != cls.__name__:
            raise ValueError(f"{cls.__name__}.load: file must hold a {cls.__name__}, got {data.get('type')!r}")
        return cls._from_json(data)

    @classmethod
    def _from_json(cls, data: dict):
        return cls(tokens=data["tokens"], **data.get("config", {}))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={len(self)})"


class CharTokenizer(_VocabTokenizer):
    """One token per character (Chinese text, character-level models).
    ``decode(encode(text)) == text`` whenever every character is in the
    vocabulary."""

    def tokenize(self, text: str) -> List[str]:
        return list(text)

    def detokenize(self, tokens: List[str]) -> str:
        return "".join(tokens)


_WORD_PUNCT = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class WordTokenizer(_VocabTokenizer):
    """Whitespace-separated words (the English side of the synthetic corpus).

    ``lower=True`` lower-cases before splitting; ``split_punct=True`` also
    splits punctuation off words (``"hi, there."`` -> hi , there .).
    ``decode`` joins tokens with single spaces, so round trips are exact for
    text already in that normalised form.
    """

    def __init__(self, tokens: Optional[Sequence[str]] = None, lower: bool = False, split_punct: bool = False):
        self.lower, self.split_punct = bool(lower), bool(split_punct)
        super().__init__(tokens)

    def tokenize(self, text: str) -> List[str]:
        if self.lower:
            text = text.lower()
        return _WORD_PUNCT.findall(text) if self.split_punct else text.split()

    def detokenize(self, tokens: List[str]) -> str:
        return " ".join(tokens)

    def _config(self) -> dict:
        return {"lower": self.lower, "split_punct": self.split_punct}


def _require_tokenizers():
    try:
        import tokenizers  # noqa: F401  (the optional Hugging Face package, not this module)
    except ImportError as err:
        raise ImportError("SubwordTokenizer needs the optional 'tokenizers' package: "
                          "pip install tokenizers") from err
    return tokenizers


class SubwordTokenizer:
    """Byte-pair-encoding subwords from the optional ``tokenizers`` package.

    Same interface and special ids as the other tokenizers.  Pre-tokenisation
    is Metaspace (spaces become "▁" and are restored by ``decode``), so
    ``decode(encode(text)) == text`` for text with single spaces and no
    unknown characters.  ``build_vocab`` trains the merges;
    ``max_size`` caps the total vocabulary (specials included, default 8000).
    """

    def __init__(self, tokenizer=None):
        self._hf = _require_tokenizers()
        self._tok = tokenizer

    pad_id, sos_id, eos_id, unk_id = PAD_ID, SOS_ID, EOS_ID, UNK_ID

    def build_vocab(self, texts: Iterable[str], min_freq: int = 1, max_size: Optional[int] = None):
        """Train BPE on ``texts``: merges of pairs seen at least ``min_freq``
        times, up to ``max_size`` tokens in all.  Returns self."""
        texts = _check_texts(texts, "SubwordTokenizer.build_vocab")
        _check_vocab_args(min_freq, max_size, "SubwordTokenizer.build_vocab")
        hf = self._hf
        tok = hf.Tokenizer(hf.models.BPE(unk_token=UNK))
        tok.pre_tokenizer = hf.pre_tokenizers.Metaspace()
        tok.decoder = hf.decoders.Metaspace()
        trainer = hf.trainers.BpeTrainer(vocab_size=8000 if max_size is None else max_size,
                                         min_frequency=min_freq, special_tokens=list(SPECIALS),
                                         show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer)
        self._tok = tok
        return self

    def _ready(self, where: str):
        if self._tok is None:
            raise RuntimeError(f"SubwordTokenizer.{where}: call build_vocab (or load) first")
        return self._tok

    def __len__(self) -> int:
        return 0 if self._tok is None else self._tok.get_vocab_size()

    def encode(self, text: str, add_sos: bool = False, add_eos: bool = False) -> List[int]:
        if not isinstance(text, str):
            raise TypeError(f"SubwordTokenizer.encode: text must be a str, got {type(text).__name__}")
        ids = self._ready("encode").encode(text).ids if text else []
        return ([SOS_ID] if add_sos else []) + ids + ([EOS_ID] if add_eos else [])

    def decode(self, ids: Iterable[int], skip_special: bool = True, stop_at_eos: bool = False) -> str:
        tok = self._ready("decode")
        ids = _id_list(ids, "SubwordTokenizer.decode")
        size = tok.get_vocab_size()
        for i in ids:
            if not 0 <= i < size:
                raise IndexError(f"SubwordTokenizer.decode: ids must be in [0, {size}), got {i}")
        if stop_at_eos and EOS_ID in ids:
            ids = ids[:ids.index(EOS_ID)]
        if skip_special:
            ids = [i for i in ids if i not in (PAD_ID, SOS_ID, EOS_ID)]
        return tok.decode(ids, skip_special_tokens=False)

    def save(self, path: PathLike) -> None:
        data = {"type": "SubwordTokenizer", "version": _FORMAT_VERSION,
                "hf_tokenizer": self._ready("save").to_str()}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)

    @classmethod
    def load(cls, path: PathLike) -> "SubwordTokenizer":
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("type") != "SubwordTokenizer":
            raise ValueError(f"SubwordTokenizer.load: file must hold a SubwordTokenizer, got {data.get('type')!r}")
        return cls._from_json(data)

    @classmethod
    def _from_json(cls, data: dict) -> "SubwordTokenizer":
        hf = _require_tokenizers()
        return cls(hf.Tokenizer.from_str(data["hf_tokenizer"]))

    def __repr__(self) -> str:
        return f"SubwordTokenizer(vocab_size={len(self)})"


_CLASSES = {"CharTokenizer": CharTokenizer, "WordTokenizer": WordTokenizer, "SubwordTokenizer": SubwordTokenizer}


def load_tokenizer(path: PathLike):
    """Read any tokenizer written by ``save``, whatever its class."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    kind = data.get("type")
    if kind not in _CLASSES:
        raise ValueError(f"load_tokenizer: type must be one of {sorted(_CLASSES)}, got {kind!r}")
    return _CLASSES[kind]._from_json(data)
