"""A decoder-only (GPT-style) language model from our Transformer layers."""
from __future__ import annotations

import math

import numpy as np

from ..autograd import no_grad
from ..masks import causal_mask
from ..nn.attention import PositionalEncoding
from ..nn.module import Module
from ..nn.modules import Embedding, LayerNorm, Linear
from ..nn.transformer import TransformerEncoder, TransformerEncoderLayer
from ..tensor import Tensor
from ._storage import gather_parameters
from .cache import (DecoderCache, SelfCache, cached_program, embed_step, encoder_layer_step, norm_step, output_step,
                    step_program)


class DecoderLM(Module):
    """Token ids -> next-token logits.

    Embedding x sqrt(d_model) + sinusoidal positions (then dropout), a stack
    of causal self-attention blocks (TransformerEncoderLayer, batch first,
    pre-norm by default), a final LayerNorm and an ``lm_head`` Linear.

    forward(ids (B, T)) -> logits (B, T, vocab); T <= max_len.
    """

    def __init__(self, vocab: int, d_model: int = 512, nhead: int = 8, num_layers: int = 6,
                 dim_feedforward: int = 2048, max_len: int = 1024, dropout: float = 0.1, norm_first: bool = True,
                 activation: str = "gelu") -> None:
        super().__init__()
        self.vocab, self.d_model, self.nhead, self.max_len = vocab, d_model, nhead, max_len
        self.embed = Embedding(vocab, d_model)
        self.pos_encoder = PositionalEncoding(d_model, dropout, max_len, batch_first=True)
        layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, batch_first=True,
                                        norm_first=norm_first)
        self.blocks = TransformerEncoder(layer, num_layers, LayerNorm(d_model))
        self.lm_head = Linear(d_model, vocab)
        gather_parameters(self)  # one block: the decoding step streams the weights (models/_storage.py)

    def forward(self, ids) -> Tensor:
        x = ids if isinstance(ids, Tensor) else Tensor._wrap(np.asarray(ids))
        if x.ndim != 2 or x.dtype.kind not in "iu":
            raise ValueError(f"DecoderLM: ids must be 2-D (batch, seq) integer token ids, got shape "
                             f"{tuple(x.shape)} and dtype {x.dtype}")
        T = x.shape[1]
        if T > self.max_len:
            raise ValueError(f"DecoderLM: the sequence length ({T}) exceeds max_len ({self.max_len})")
        h = self.pos_encoder(self.embed(x) * math.sqrt(self.d_model))
        return self.lm_head(self.blocks(h, mask=causal_mask(T), is_causal=True))

    def init_cache(self, batch: int, max_len: int) -> DecoderCache:
        """A self-attention cache for ``batch`` rows and up to ``max_len`` tokens."""
        if max_len > self.max_len:
            raise ValueError(f"DecoderLM.init_cache: max_len ({max_len}) exceeds the model's max_len "
                             f"({self.max_len})")
        H = self.nhead
        dt = self.embed.weight.dtype
        return DecoderCache([SelfCache(batch, H, max_len, self.d_model // H, dt) for _ in self.blocks.layers])

    def _step_scale_pe(self) -> tuple:
        """(embedding scale, positional table) of a decoding step."""
        return math.sqrt(self.d_model), self.pos_encoder.pe._data

    def decode_step(self, tokens, cache: DecoderCache) -> Tensor:
        """Feed one token per row at position ``cache.t``: tokens (B,) ->
        logits (B, vocab) of the next token (eval semantics, no graph)."""
        tok = tokens if isinstance(tokens, Tensor) else Tensor._wrap(np.asarray(tokens))
        if tok.ndim != 1 or tok.shape[0] != cache.rows:
            raise ValueError(f"DecoderLM.decode_step: tokens must have shape ({cache.rows},) (the cache's rows), "
                             f"got {tuple(tok.shape)}")
        t = cache.t
        if t >= cache.max_len:
            raise IndexError(f"DecoderLM.decode_step: the cache holds {cache.max_len} tokens; position {t} "
                             "is past its end")
        prog = cached_program(cache, lambda: step_program(self.embed, *self._step_scale_pe(), self.blocks.layers,
                                                          self.blocks.norm, self.lm_head, cache))
        with no_grad():
            if prog is not None:
                logits = Tensor._wrap(prog.run(tok._data, t))
            else:
                x = embed_step(self.embed, tok, *self._step_scale_pe(), t)
                for layer, c in zip(self.blocks.layers, cache.self_caches):
                    x = encoder_layer_step(layer, x, c, t)
                if self.blocks.norm is not None:
                    x = norm_step(self.blocks.norm, x)
                logits = output_step(self.lm_head, x)
        cache.t = t + 1
        return logits
