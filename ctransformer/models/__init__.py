"""Ready-made Transformer models of the tutorials: an encoder-decoder
translation model and a decoder-only language model, both with a KV-cached
``decode_step`` used by :mod:`ctransformer.decoding`."""
from .lm import DecoderLM
from .translation import TranslationTransformer

__all__ = ["TranslationTransformer", "DecoderLM"]
