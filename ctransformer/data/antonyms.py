"""The character-level "antonym" toy task of the classic LSTM Seq2Seq
tutorial (its training section): eight word pairs, a 29-symbol character
vocabulary, and its batch layout, rewritten as functions.

Vocabulary (:data:`ANTONYM_CHARS`): ``S`` (start, id 0), ``E`` (end, id 1),
``P`` (padding, id 2), then ``a``-``z`` (ids 3-28).  Every word is padded with
``P`` to ``n_step`` characters (8 in the tutorial).

Batch layout for one pair (source, target), ``n_step = 8``::

    encoder input   source + P...               length n_step
    decoder input   S + target + P...           length n_step + 1
    decoder target  target + E + P...           length n_step + 1

Note on the tutorial: it pads the target *before* appending ``E``
(``target_word + 'E'`` with an already padded ``target_word``), so its ``E``
always lands at position ``n_step`` after the padding, e.g. ``womanPPPE``
rather than ``womanEPPP``.  With the tutorial's ``ignore_index=P`` loss the
model is never taught to stop right after the word.  ``seed_layout=True``
reproduces that layout exactly; the default puts ``E`` right after the word.
(The tutorial's training loop also compares ``outputs[1:]`` with
``target[1:]``, one step off; that is a training-loop matter, not data.)
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

#: The tutorial's eight (source, target) pairs, in its order.
ANTONYM_PAIRS: Tuple[Tuple[str, str], ...] = (
    ("man", "woman"), ("black", "white"), ("king", "queen"), ("girl", "boy"),
    ("up", "down"), ("high", "low"), ("men", "women"), ("you", "me"),
)
#: The tutorial's character vocabulary: index = id.
ANTONYM_CHARS: Tuple[str, ...] = tuple("SEPabcdefghijklmnopqrstuvwxyz")
#: char -> id (the tutorial's ``num_dic``).
ANTONYM_VOCAB: Dict[str, int] = {ch: i for i, ch in enumerate(ANTONYM_CHARS)}
START, END, PAD = "S", "E", "P"
START_ID, END_ID, PAD_ID = ANTONYM_VOCAB[START], ANTONYM_VOCAB[END], ANTONYM_VOCAB[PAD]
#: The tutorial's maximum word length.
N_STEP = 8
#: The words the tutorial translates after training (two are not in the data).
ANTONYM_TEST_WORDS: Tuple[str, ...] = ("man", "mans", "king", "black", "ups")


def _ids(text: str, where: str) -> List[int]:
    try:
        return [ANTONYM_VOCAB[ch] for ch in text]
    except KeyError:
        raise ValueError(f"{where}: characters must be lower-case a-z, got {text!r}") from None


def _check_word(word: str, n_step: int, where: str) -> None:
    if not isinstance(word, str) or not word.isascii() or not word.isalpha() or not word.islower():
        raise ValueError(f"{where}: words must be non-empty lower-case a-z strings, got {word!r}")
    if len(word) > n_step:
        raise ValueError(f"{where}: words must have at most n_step={n_step} characters, got {word!r}")


def encode_antonym_pair(source: str, target: str, n_step: int = N_STEP,
                        seed_layout: bool = False) -> Tuple[List[int], List[int], List[int]]:
    """One pair -> (encoder input (n_step), decoder input (n_step + 1),
    decoder target (n_step + 1)) as lists of ids (see the module docstring)."""
    for word in (source, target):
        _check_word(word, n_step, "encode_antonym_pair")
    enc = source + PAD * (n_step - len(source))
    padded_target = target + PAD * (n_step - len(target))
    dec_in = START + padded_target
    dec_out = padded_target + END if seed_layout else target + END + PAD * (n_step - len(target))
    where = "encode_antonym_pair"
    return _ids(enc, where), _ids(dec_in, where), _ids(dec_out, where)


def make_antonym_batch(pairs: Sequence[Tuple[str, str]] = ANTONYM_PAIRS, n_step: int = N_STEP,
                       time_major: bool = True, seed_layout: bool = False
                       ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tutorial's ``make_batch``: all pairs as one batch of int64 ids.

    Returns (enc_input, dec_input, dec_target) with shapes (n_step, B),
    (n_step + 1, B), (n_step + 1, B) if ``time_major`` (the tutorial's
    ``[seq_len, batch]`` layout, for ``nn.LSTM`` without batch_first), else
    transposed to (B, n_step), (B, n_step + 1), (B, n_step + 1).
    """
    rows = [encode_antonym_pair(s, t, n_step, seed_layout) for s, t in pairs]
    widths = (n_step, n_step + 1, n_step + 1)
    arrays = tuple(np.array([row[k] for row in rows], dtype=np.int64).reshape(len(rows), widths[k])
                   for k in range(3))
    if time_major:
        return tuple(np.ascontiguousarray(a.T) for a in arrays)
    return arrays


def make_antonym_test_batch(word: str, n_step: int = N_STEP, time_major: bool = True
                            ) -> Tuple[np.ndarray, np.ndarray]:
    """The tutorial's ``make_testbatch``: (enc_input, dec_input) for one word,
    the decoder input being ``S`` followed by ``n_step`` pads (only the ``S``
    is used at inference).  Shapes (n_step, 1), (n_step + 1, 1) if
    ``time_major``, else (1, n_step), (1, n_step + 1)."""
    _check_word(word, n_step, "make_antonym_test_batch")
    enc = np.array([_ids(word + PAD * (n_step - len(word)), "make_antonym_test_batch")], dtype=np.int64)
    dec = np.array([[START_ID] + [PAD_ID] * n_step], dtype=np.int64)
    if time_major:
        return np.ascontiguousarray(enc.T), np.ascontiguousarray(dec.T)
    return enc, dec


def decode_antonym(ids: Sequence[int]) -> str:
    """Ids -> word: the characters before the first ``E``, with ``S`` and
    ``P`` removed.  (The tutorial's ``translate`` removes only ``P``; its
    leading ``S`` comes from the all-zero ``outputs[0]``.)"""
    chars = []
    for i in np.asarray(ids).reshape(-1).tolist():
        if not 0 <= i < len(ANTONYM_CHARS):
            raise IndexError(f"decode_antonym: ids must be in [0, {len(ANTONYM_CHARS)}), got {i}")
        if i == END_ID:
            break
        if i not in (START_ID, PAD_ID):
            chars.append(ANTONYM_CHARS[i])
    return "".join(chars)
