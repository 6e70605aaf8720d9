"""nn.TransformerEncoderLayer / DecoderLayer / Encoder / Decoder / Transformer
with torch's arguments, defaults, mask meanings and state_dict keys.

Masks follow torch's nn.Transformer polarity: bool **True = NOT allowed**,
float masks are added (``generate_square_subsequent_mask`` gives 0 / -inf).
``*_key_padding_mask`` (N, S) hides padded keys; ``*_mask`` (L, S) or
(N * nhead, L, S).  (``ctransformer.masks`` builds and converts both
polarities.)

Each sub-layer runs on fused kernels, one autograd op each: attention
(projections + attention + output projection), the feed-forward
(linear1 + bias + relu/gelu + dropout + linear2) and, in the post-norm
layout, the sublayer's dropout + residual add + LayerNorm (when the Dropout
and LayerNorm modules are plain ones without hooks: else they are called).
"""
from __future__ import annotations

import copy
from typing import Callable, Optional, Tuple, Union

import numpy as np

from ..ops.fused import add_layer_norm, dropout_add_layer_norm, feed_forward
from ..tensor import Tensor, _as_dtype, _check_device, get_default_dtype
from . import functional as F
from . import init
from .attention import MultiheadAttention, PositionalEncoding  # noqa: F401  (re-exported by nn)
from .module import Module
from .modules import GELU, Dropout, LayerNorm, Linear, ModuleList, ReLU

__all__ = ["TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder",
           "Transformer"]

Activation = Union[str, Callable[[Tensor], Tensor]]


# ---------------------------------------------------------------- helpers

def _get_activation_fn(activation: str) -> Callable[[Tensor], Tensor]:
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def _fused_kind(activation) -> Optional[Tuple[str, str]]:
    """(kind, approximate) of an activation the fused kernel computes, else None."""
    if activation is F.relu or isinstance(activation, ReLU):
        return "relu", "none"
    if activation is F.gelu:
        return "gelu", "none"
    if isinstance(activation, GELU):
        return "gelu", getattr(activation, "approximate", "none")
    return None


def _get_clones(module: Module, N: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(N)])


def _check_layout(x: Tensor, d_model: int, batch_first: bool, fn: str, arg: str,
                  feature_error=AssertionError) -> None:
    """x is (seq, batch, d_model) / (batch, seq, d_model) or unbatched (seq, d_model).
    torch's classes: its attention asserts the layout (AssertionError);
    nn.Transformer checks the features first, with RuntimeError."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}: {arg} must be a Tensor, got {type(x).__name__}")
    if x.ndim not in (2, 3):
        layout = "(batch, seq, d_model)" if batch_first else "(seq, batch, d_model)"
        raise AssertionError(f"{fn}: {arg} must be 3-D {layout} (batch_first={batch_first}) or 2-D unbatched "
                             f"(seq, d_model), got {x.ndim}-D of shape {tuple(x.shape)}")
    if x.shape[-1] != d_model:
        raise feature_error(f"{fn}: {arg}.shape[-1] (the features) must be d_model = {d_model}, got {x.shape[-1]}")


class _FFMixin:
    """The feed-forward block shared by both layer kinds."""

    def _ff(self, x: Tensor) -> Tensor:
        """linear2(dropout(activation(linear1(x)))), fused for relu/gelu."""
        kind = _fused_kind(self.activation)
        if kind is not None:
            return feed_forward(x, self.linear1.weight, self.linear1.bias, self.linear2.weight, self.linear2.bias,
                                kind[0], kind[1], self.dropout.p, self.training)
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _residual_norm(self, x: Tensor, sub: Tensor, norm: LayerNorm, dropout: Optional[Dropout] = None) -> Tensor:
        """Post-norm: norm(x + dropout(sub)) (dropout None: norm(x + sub)).
        One fused op when the modules are plain (see _plain): add_layer_norm,
        or in training dropout_add_layer_norm (the mask dropout(sub) would
        draw); else the modules are called, so that their hooks run."""
        if _plain(norm, LayerNorm) and len(norm.normalized_shape) == 1:
            if dropout is None or (_plain(dropout, Dropout) and not dropout.inplace):
                p = float(dropout.p) if dropout is not None and dropout.training else 0.0
                if 0.0 < p < 1.0:
                    return dropout_add_layer_norm(sub, x, norm.weight, norm.bias, norm.eps, p)
                if p == 0.0:
                    return add_layer_norm(sub, x, norm.weight, norm.bias, norm.eps)
        if dropout is not None:
            sub = dropout(sub)
        return norm(x + sub)

    def _blocks_are_ours(self, *names: str) -> bool:
        """Whether the named ``_*_block`` methods are this library's own (a
        subclass that overrides one, as torch code may, has it called)."""
        base = TransformerDecoderLayer if isinstance(self, TransformerDecoderLayer) else TransformerEncoderLayer
        return all(getattr(type(self), n) is getattr(base, n) for n in names)


def _plain(module: Module, cls: type) -> bool:
    """module is exactly a cls with no forward, pre-forward or backward hooks:
    calling its forward directly (inside a fused op) is then the same as
    calling the module."""
    d = module.__dict__
    return type(module) is cls and not d.get("_forward_hooks") and not d.get("_forward_pre_hooks") \
        and not d.get("_backward_hooks")


def _init_ff(self, d_model: int, nhead: int, dim_feedforward: int, dropout: float, activation: Activation,
             layer_norm_eps: float, batch_first: bool, norm_first: bool, bias: bool, dtype, n_norms: int) -> None:
    if d_model <= 0 or nhead <= 0:
        raise ValueError(f"{type(self).__name__}: d_model ({d_model}) and nhead ({nhead}) must be greater than 0")
    if d_model % nhead != 0:  # torch's MultiheadAttention asserts it
        raise AssertionError(f"{type(self).__name__}: d_model ({d_model}) must be a multiple of nhead ({nhead})")
    self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
    self.dropout = Dropout(dropout)
    self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
    self.norm_first = norm_first
    for i in range(1, n_norms + 1):
        setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
    for i in range(1, n_norms + 1):
        setattr(self, f"dropout{i}", Dropout(dropout))
    if isinstance(activation, str):
        activation = _get_activation_fn(activation)
    self.activation = activation
    self.batch_first = batch_first


# ---------------------------------------------------------------- layers

class TransformerEncoderLayer(_FFMixin, Module):
    """Self-attention + feed-forward block (torch.nn.TransformerEncoderLayer).

    forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False):
    src (S, N, d_model) ((N, S, d_model) with batch_first) -> same shape.
    norm_first=False (post-norm): x = norm1(x + sa(x)); x = norm2(x + ff(x)).
    norm_first=True (pre-norm): x = x + sa(norm1(x)); x = x + ff(norm2(x)).
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Activation = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device)  # a non-CPU device is refused as torch's CPU build refuses it
        dt = _as_dtype(dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dt)
        _init_ff(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                 norm_first, bias, dt, 2)

    def forward(self, src: Tensor, src_mask: Optional[Tensor] = None, src_key_padding_mask: Optional[Tensor] = None,
                is_causal: bool = False) -> Tensor:
        _check_layout(src, self.self_attn.embed_dim, self.batch_first, "TransformerEncoderLayer", "src")
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        elif self._blocks_are_ours("_sa_block", "_ff_block"):  # each dropout inside the residual's fused op
            x = self._residual_norm(x, self._sa(x, src_mask, src_key_padding_mask, is_causal), self.norm1,
                                    self.dropout1)
            x = self._residual_norm(x, self._ff(x), self.norm2, self.dropout2)
        else:
            x = self._residual_norm(x, self._sa_block(x, src_mask, src_key_padding_mask, is_causal), self.norm1)
            x = self._residual_norm(x, self._ff_block(x), self.norm2)
        return x

    def _sa(self, x: Tensor, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        return self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                              is_causal=is_causal)[0]

    def _sa_block(self, x: Tensor, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        return self.dropout1(self._sa(x, attn_mask, key_padding_mask, is_causal))

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self._ff(x))


class TransformerDecoderLayer(_FFMixin, Module):
    """Self-attention + cross-attention + feed-forward block
    (torch.nn.TransformerDecoderLayer).

    forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=False, memory_is_causal=False): tgt (T, N, d_model),
    memory (S, N, d_model) (batch first with batch_first) -> like tgt.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Activation = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device)  # a non-CPU device is refused as torch's CPU build refuses it
        dt = _as_dtype(dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias,
                                            dtype=dt)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first,
                                                 bias=bias, dtype=dt)
        _init_ff(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                 norm_first, bias, dt, 3)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self._ff(x))

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Optional[Tensor] = None,
                memory_mask: Optional[Tensor] = None, tgt_key_padding_mask: Optional[Tensor] = None,
                memory_key_padding_mask: Optional[Tensor] = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        d = self.self_attn.embed_dim
        _check_layout(tgt, d, self.batch_first, "TransformerDecoderLayer", "tgt")
        _check_layout(memory, d, self.batch_first, "TransformerDecoderLayer", "memory")
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        elif self._blocks_are_ours("_sa_block", "_mha_block", "_ff_block"):  # dropouts inside the fused ops
            x = self._residual_norm(x, self._sa(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal), self.norm1,
                                    self.dropout1)
            x = self._residual_norm(x, self._mha(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal),
                                    self.norm2, self.dropout2)
            x = self._residual_norm(x, self._ff(x), self.norm3, self.dropout3)
        else:
            x = self._residual_norm(x, self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal), self.norm1)
            x = self._residual_norm(x, self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                                       memory_is_causal), self.norm2)
            x = self._residual_norm(x, self._ff_block(x), self.norm3)
        return x

    def _sa(self, x: Tensor, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        return self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal,
                              need_weights=False)[0]

    def _sa_block(self, x: Tensor, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        return self.dropout1(self._sa(x, attn_mask, key_padding_mask, is_causal))

    def _mha(self, x: Tensor, mem: Tensor, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        return self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                   is_causal=is_causal, need_weights=False)[0]

    def _mha_block(self, x: Tensor, mem: Tensor, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        return self.dropout2(self._mha(x, mem, attn_mask, key_padding_mask, is_causal))


# ---------------------------------------------------------------- stacks

class TransformerEncoder(Module):
    """A stack of ``num_layers`` deep copies of ``encoder_layer`` (state_dict
    keys ``layers.<i>.…``), then ``norm`` if given.

    forward(src, mask=None, src_key_padding_mask=None, is_causal=None)."""

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Optional[Module] = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor  # accepted; the maths is the same without it
        self.mask_check = mask_check

    def forward(self, src: Tensor, mask: Optional[Tensor] = None, src_key_padding_mask: Optional[Tensor] = None,
                is_causal: Optional[bool] = None) -> Tensor:
        output = src
        for mod in self.layers:
            output = mod(output, src_mask=mask, is_causal=bool(is_causal), src_key_padding_mask=src_key_padding_mask)
        if self.norm is not None:
            output = self.norm(output)
        return output


class TransformerDecoder(Module):
    """A stack of ``num_layers`` deep copies of ``decoder_layer``, then
    ``norm`` if given.

    forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=None, memory_is_causal=False)."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Optional[Module] = None) -> None:
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Optional[Tensor] = None,
                memory_mask: Optional[Tensor] = None, tgt_key_padding_mask: Optional[Tensor] = None,
                memory_key_padding_mask: Optional[Tensor] = None, tgt_is_causal: Optional[bool] = None,
                memory_is_causal: bool = False) -> Tensor:
        output = tgt
        for mod in self.layers:
            output = mod(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """The encoder-decoder Transformer (torch.nn.Transformer): ``encoder``
    (TransformerEncoder + final LayerNorm) and ``decoder`` (TransformerDecoder
    + final LayerNorm); every parameter with more than one dimension is
    re-initialised with xavier_uniform_ (as torch).

    forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
    memory_is_causal=False): src (S, N, E), tgt (T, N, E) ((N, S, E), (N, T, E)
    with batch_first) -> (T, N, E).  Masks: bool True = NOT allowed, float
    added; ``tgt_mask`` is usually ``generate_square_subsequent_mask(T)``.
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Activation = "relu", custom_encoder: Optional[Module] = None,
                 custom_decoder: Optional[Module] = None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device)  # a non-CPU device is refused as torch's CPU build refuses it
        dt = _as_dtype(dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, dtype=dt)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dt))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, dtype=dt)
            self.decoder = TransformerDecoder(layer, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dt))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Optional[Tensor] = None, tgt_mask: Optional[Tensor] = None,
                memory_mask: Optional[Tensor] = None, src_key_padding_mask: Optional[Tensor] = None,
                tgt_key_padding_mask: Optional[Tensor] = None, memory_key_padding_mask: Optional[Tensor] = None,
                src_is_causal: Optional[bool] = None, tgt_is_causal: Optional[bool] = None,
                memory_is_causal: bool = False) -> Tensor:
        for name, t in (("src", src), ("tgt", tgt)):
            _check_layout(t, self.d_model, self.batch_first, "Transformer", name, RuntimeError)
        if src.ndim != tgt.ndim:
            raise AssertionError(f"Transformer: src and tgt must both be batched (3-D) or unbatched (2-D), got "
                                 f"{src.ndim}-D and {tgt.ndim}-D")
        if src.ndim == 3:
            bax = 0 if self.batch_first else 1
            if src.shape[bax] != tgt.shape[bax]:
                raise RuntimeError(f"Transformer: the batch number of src and tgt must be equal: src.shape[{bax}] = "
                                   f"{src.shape[bax]}, tgt.shape[{bax}] = {tgt.shape[bax]} "
                                   f"(batch_first={self.batch_first})")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """(sz, sz) float mask: 0 on and below the diagonal, -inf above
        (position i may attend to positions <= i)."""
        _check_device(device)
        dt = _as_dtype(dtype) or get_default_dtype()
        return Tensor._wrap(np.triu(np.full((sz, sz), -np.inf, dtype=dt), 1))
