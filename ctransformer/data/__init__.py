"""ctransformer.data - datasets and batching for the tutorials, NumPy + standard library only.

* :mod:`.translation` - synthetic Chinese->English corpus from a grammar
  (:func:`make_translation_corpus`)
* :mod:`.antonyms` - the Seq2Seq tutorial's 8 character-level word pairs
* :mod:`.text` - English prose from the standard library's docstrings
  (:func:`load_text_corpus`)
* :mod:`.jsonl` - streaming reader for translation2019zh JSON lines
* :mod:`.batching` - padding, length buckets, attention masks (True = may attend)
"""
from .antonyms import (ANTONYM_CHARS, ANTONYM_PAIRS, ANTONYM_TEST_WORDS, ANTONYM_VOCAB, decode_antonym,
                       encode_antonym_pair, make_antonym_batch, make_antonym_test_batch)
from .batching import bucket_batches, create_masks, pad_batch, padding_mask, subsequent_mask, target_mask
from .jsonl import TranslationJsonl, read_translation_jsonl
from .text import TEXT_MODULES, load_text_corpus
from .translation import SENTENCE_KINDS, en_tokens, make_translation_corpus, sample_pair, zh_tokens

__all__ = [name for name in dir() if not name.startswith("_")]
