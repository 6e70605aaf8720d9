"""Incremental decoding: one new query per row attending over a key/value
cache (forward only; decoding runs without gradients).

A cache is a pair of C-contiguous arrays ``cache_k`` (B, H, Tmax, Dh) and
``cache_v`` (B, H, Tmax, Dv), B being the rows (batch, or batch x beams).

* Self-attention while generating: at step t write the new token's key and
  value into slot t (:func:`kv_cache_append`), then attend to slots 0..t
  (:func:`attend_step` with ``lengths = t + 1``).
* Cross-attention: fill the cache once from the encoder memory and attend to
  the first ``src_len[b]`` slots of each row (or pass a key padding mask).
* Beam search: re-rank each source's beams from their next-token logits
  (:func:`beam_step`: log-softmax, candidate scores and top-k in one
  pass), then gather the cache rows (:func:`cache_reorder`, or
  :func:`cache_permute` in place).
* A whole layer per call (:func:`decode_layer_step`): projections, cache
  append, self- and cross-attention, feed-forward, residuals and layer
  norms of one token, the same bits as the kernels called one by one.
* A whole decoder per call (:func:`decode_model_step`): the embedding, every
  layer (each checked once into a plan by :func:`decode_layer_plan`), the
  final norm and the output Linear of one token, the same bits again.
* Greedy decoding per call (:func:`decode_model_greedy`): decode_model_step
  token after token, each row's argmax fed back, until every row emitted
  eos or the columns run out.

``key_padding_mask`` follows torch's ``key_padding_mask`` polarity:
**True = the slot is padding and is ignored**.  A row with no visible key
gets a zero output (never NaN).

(The functions are generated from csrc/py/kernel_table.py into _bindings.py.)
"""
from typing import Union

import numpy as np

from ._bindings import (attend_step, beam_step, cache_permute, cache_reorder, decode_layer_plan, decode_layer_step,
                        decode_linear, decode_model_greedy, decode_model_step, kv_cache_append)

__all__ = ["kv_cache_append", "attend_step", "cache_reorder", "cache_permute", "beam_step", "decode_linear",
           "decode_layer_step", "decode_layer_plan", "decode_model_step", "decode_model_greedy"]

#: an int, or one int per row
RowInts = Union[int, np.ndarray]

