"""An encoder-decoder Transformer for translation (the tutorials' model,
built from nn.Transformer's layers, batch first)."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from ..autograd import no_grad
from ..masks import causal_mask, key_padding_mask
from ..nn.attention import PositionalEncoding
from ..nn.module import Module
from ..nn.modules import Embedding, LayerNorm, Linear
from ..nn.transformer import TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer
from ..tensor import Tensor
from ._storage import gather_parameters
from .cache import (DecoderCache, SelfCache, StepProgram, cached_program, cross_kv, decoder_layer_step, embed_step,
                    norm_step, output_step, step_program)


def _ids(x, fn: str, arg: str) -> Tensor:
    t = x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))
    if t.dtype.kind not in "iu":
        raise TypeError(f"{fn}: {arg} must hold integer token ids, got dtype {t.dtype}")
    if t.ndim != 2:
        raise ValueError(f"{fn}: {arg} must be 2-D (batch, seq), got {t.ndim}-D of shape {tuple(t.shape)}")
    return t


class TranslationTransformer(Module):
    """Source ids -> target logits.

    Embeddings (padding_idx = pad_id) scaled by sqrt(d_model), plus the
    sinusoidal positional encoding (then dropout); an nn.Transformer-style
    encoder and decoder (batch_first=True, each with a final LayerNorm); a
    ``generator`` Linear to the target vocabulary (its weight is the target
    embedding's with ``tie_embeddings=True``).

    Padding is found from ``pad_id``: source pads are hidden from encoder
    self-attention and cross-attention.  The decoder is causal and needs no
    target padding mask: with right-padded targets a pad key is visible only
    to later (pad) queries, whose outputs the loss ignores; so the full
    decoder and the cached decode_step agree even when a pad id is generated.

    forward(src_ids (B, S), tgt_in_ids (B, T)) -> logits (B, T, tgt_vocab).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 512, nhead: int = 8,
                 num_encoder_layers: int = 6, num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, pad_id: int = 0, tie_embeddings: bool = False, norm_first: bool = False,
                 activation: str = "relu", max_len: int = 5000) -> None:
        super().__init__()
        self.d_model, self.nhead, self.pad_id = d_model, nhead, pad_id
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.src_embed = Embedding(src_vocab, d_model, padding_idx=pad_id)
        self.tgt_embed = Embedding(tgt_vocab, d_model, padding_idx=pad_id)
        self.pos_encoder = PositionalEncoding(d_model, dropout, max_len, batch_first=True)
        enc = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, batch_first=True,
                                      norm_first=norm_first)
        dec = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, batch_first=True,
                                      norm_first=norm_first)
        self.encoder = TransformerEncoder(enc, num_encoder_layers, LayerNorm(d_model))
        self.decoder = TransformerDecoder(dec, num_decoder_layers, LayerNorm(d_model))
        self.generator = Linear(d_model, tgt_vocab)
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.weight
        gather_parameters(self)  # one block: the decoding step streams the weights (models/_storage.py)

    def _embed(self, embed: Embedding, ids: Tensor) -> Tensor:
        return self.pos_encoder(embed(ids) * math.sqrt(self.d_model))

    def encode(self, src_ids) -> Tuple[Tensor, Tensor]:
        """src_ids (B, S) -> (memory (B, S, d_model), src_pad (B, S) bool, True = padding)."""
        src = _ids(src_ids, "TranslationTransformer.encode", "src_ids")
        pad = key_padding_mask(src, self.pad_id)
        return self.encoder(self._embed(self.src_embed, src), src_key_padding_mask=pad), pad

    def decode(self, tgt_in_ids, memory: Tensor, src_pad: Tensor) -> Tensor:
        """Teacher-forced decoder over the whole prefix: tgt_in_ids (B, T) -> logits (B, T, V)."""
        tgt = _ids(tgt_in_ids, "TranslationTransformer.decode", "tgt_in_ids")
        T = tgt.shape[1]
        out = self.decoder(self._embed(self.tgt_embed, tgt), memory, tgt_mask=causal_mask(T),
                           memory_key_padding_mask=src_pad)
        return self.generator(out)

    def forward(self, src_ids, tgt_in_ids) -> Tensor:
        src = _ids(src_ids, "TranslationTransformer", "src_ids")
        tgt = _ids(tgt_in_ids, "TranslationTransformer", "tgt_in_ids")
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"TranslationTransformer: tgt_in_ids.shape[0] (batch) must be {src.shape[0]} "
                             f"(src_ids.shape[0]), got {tgt.shape[0]}")
        memory, src_pad = self.encode(src)
        return self.decode(tgt, memory, src_pad)

    def cross_attention_weights(self, src_ids, tgt_in_ids) -> list:
        """Cross-attention weights of every decoder layer, averaged over heads:
        a list of (B, T, S) arrays, one per layer (for plots; no graph)."""
        weights = []
        with no_grad():
            memory, src_pad = self.encode(src_ids)
            tgt = _ids(tgt_in_ids, "TranslationTransformer.cross_attention_weights", "tgt_in_ids")
            x = self._embed(self.tgt_embed, tgt)
            causal = causal_mask(tgt.shape[1])
            for layer in self.decoder.layers:
                query = x
                if layer.norm_first:
                    query = x + layer._sa_block(layer.norm1(x), causal, None)
                    query = layer.norm2(query)
                else:
                    query = layer.norm1(x + layer._sa_block(x, causal, None))
                _, w = layer.multihead_attn(query, memory, memory, key_padding_mask=src_pad, need_weights=True,
                                            average_attn_weights=True)
                weights.append(w.numpy())
                x = layer(x, memory, tgt_mask=causal, memory_key_padding_mask=src_pad)
        return weights

    # ---------------------------------------------------------- incremental decoding
    def init_cache(self, memory: Tensor, src_pad: Tensor, max_len: int) -> DecoderCache:
        """A cache for up to ``max_len`` target tokens; the memory's keys and
        values are projected here, once per source."""
        B = memory.shape[0]
        H = self.nhead
        dt = memory.dtype
        with no_grad():
            mem = memory._data
            selfs = [SelfCache(B, H, max_len, self.d_model // H, dt) for _ in self.decoder.layers]
            mem_kv = [cross_kv(layer.multihead_attn, mem) for layer in self.decoder.layers]
        pad = src_pad._data if isinstance(src_pad, Tensor) else src_pad
        return DecoderCache(selfs, mem_kv, None if pad is None else np.ascontiguousarray(pad, dtype=bool))

    def _step_scale_pe(self) -> tuple:
        """(embedding scale, positional table) of a decoding step."""
        return math.sqrt(self.d_model), self.pos_encoder.pe._data

    def _step_program(self, cache: DecoderCache) -> Optional[StepProgram]:
        """The cache's one-call decoding step (built at its first use), or None
        when some part of the model needs the module-by-module step."""
        return cached_program(cache, lambda: step_program(self.tgt_embed, *self._step_scale_pe(), self.decoder.layers,
                                                          self.decoder.norm, self.generator, cache))

    def decode_step(self, tokens, cache: DecoderCache) -> Tensor:
        """Feed one target token per row: tokens (B,) ids at position
        ``cache.t`` -> logits (B, tgt_vocab) of the next token.  Eval
        semantics (no dropout), no graph."""
        tok = tokens if isinstance(tokens, Tensor) else Tensor._wrap(np.asarray(tokens))
        if tok.ndim != 1 or tok.shape[0] != cache.rows:
            raise ValueError(f"TranslationTransformer.decode_step: tokens must have shape ({cache.rows},) "
                             f"(the cache's rows), got {tuple(tok.shape)}")
        t = cache.t
        if t >= cache.max_len:
            raise IndexError(f"TranslationTransformer.decode_step: the cache holds {cache.max_len} tokens; "
                             f"position {t} is past its end")
        prog = self._step_program(cache)
        with no_grad():
            if prog is not None:
                logits = Tensor._wrap(prog.run(tok._data, t))
            else:
                x = embed_step(self.tgt_embed, tok, *self._step_scale_pe(), t)
                for layer, c, mkv in zip(self.decoder.layers, cache.self_caches, cache.mem_kv):
                    x = decoder_layer_step(layer, x, c, mkv, cache.mem_pad, t)
                if self.decoder.norm is not None:
                    x = norm_step(self.decoder.norm, x)
                logits = output_step(self.generator, x)
        cache.t = t + 1
        return logits
