"""nn.MultiheadAttention (torch's arguments, defaults, mask meanings and
state_dict keys) and the tutorials' nn.PositionalEncoding."""
from __future__ import annotations

from typing import Optional, Tuple


from .. import kernels as K
from ..tensor import Tensor, _as_dtype, _check_device, empty, get_default_dtype
from . import init
from .functional_attention import multi_head_attention
from .module import Module
from .modules import Dropout, Linear
from .parameter import Parameter

__all__ = ["MultiheadAttention", "PositionalEncoding"]


class MultiheadAttention(Module):
    """Multi-head attention, torch.nn.MultiheadAttention's maths and layout.

    Parameters (state_dict keys as torch): ``in_proj_weight`` (3E, E) when
    key/value have embed_dim features, else ``q_proj_weight`` (E, E),
    ``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim); ``in_proj_bias``
    (3E) when bias; ``out_proj.weight`` (E, E), ``out_proj.bias`` (E).

    forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False):
    query (L, N, E) (``batch_first=True``: (N, L, E); unbatched: (L, E)), key
    (S, N, kdim), value (S, N, vdim) -> (out like query, weights (N, L, S)
    averaged over heads, or (N, H, L, S) with ``average_attn_weights=False``,
    or None with ``need_weights=False``).

    Masks, torch's polarity: bool **True = NOT allowed**, float = added to
    the scores.  ``key_padding_mask`` (N, S) hides padded keys;
    ``attn_mask`` (L, S) or (N * num_heads, L, S).  ``is_causal=True``
    without attn_mask applies the causal mask (torch requires the mask too);
    with an attn_mask the mask is used.  Queries with no visible key give
    zeros (torch gives NaN there).  The whole layer is one autograd op over
    the fused C kernels.  The returned weights are for inspection: a
    gradient through them raises.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: Optional[int] = None,
                 vdim: Optional[int] = None, batch_first: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device)  # a non-CPU device is refused as torch's CPU build refuses it
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        if embed_dim % num_heads != 0:
            raise AssertionError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "  # torch's class
                                 f"num_heads ({num_heads})")
        if add_bias_kv:
            raise NotImplementedError("MultiheadAttention: add_bias_kv=True is not supported")
        if add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_zero_attn=True is not supported")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        dt = _as_dtype(dtype)
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, dtype=dt))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, dtype=dt))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, dtype=dt))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=dt))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=dt))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dt)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """torch's: xavier_uniform_ projections, zero biases (out_proj.weight
        keeps Linear's initialisation)."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor] = None,
                need_weights: bool = True, attn_mask: Optional[Tensor] = None,
                average_attn_weights: bool = True, is_causal: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        if isinstance(query, Tensor) and query.ndim and query.shape[-1] != self.embed_dim:
            raise AssertionError(f"MultiheadAttention: query.shape[-1] (the features) must be embed_dim = "
                                 f"{self.embed_dim}, got {query.shape[-1]}")
        return multi_head_attention(
            query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.out_proj.weight,
            self.out_proj.bias, self.dropout, self.training, key_padding_mask, need_weights, attn_mask,
            self.q_proj_weight, self.k_proj_weight, self.v_proj_weight, average_attn_weights, is_causal,
            batch_first=self.batch_first, fn="MultiheadAttention")

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}, "
                f"batch_first={self.batch_first}")


class PositionalEncoding(Module):
    """The sinusoidal positional encoding of "Attention Is All You Need",
    added to the embeddings, then dropout (ctransformer's module; the
    tutorials each define their own).

    PE[pos, 2i] = sin(pos / 10000^(2i / d_model)), PE[pos, 2i+1] = cos(same),
    from the C kernel (the exponent applied once).  The table is the
    non-persistent buffer ``pe`` (max_len, d_model), so it is not in the
    state_dict.  forward(x): x (S, N, d_model), or (N, S, d_model) with
    ``batch_first=True`` -> dropout(x + PE[:S]).
    """

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000, batch_first: bool = False,
                 dtype=None) -> None:
        super().__init__()
        if d_model <= 0 or max_len <= 0:
            raise ValueError(f"PositionalEncoding: d_model and max_len must be > 0, got d_model={d_model}, "
                             f"max_len={max_len}")
        self.d_model = d_model
        self.max_len = max_len
        self.batch_first = batch_first
        self.dropout = Dropout(p=dropout)
        dt = _as_dtype(dtype) or get_default_dtype()
        self.register_buffer("pe", Tensor._wrap(K.positional_encoding(max_len, d_model, dt)), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            layout = "(batch, seq, d_model)" if self.batch_first else "(seq, batch, d_model)"
            raise ValueError(f"PositionalEncoding: x must be 3-D {layout} with d_model = {self.d_model}, "
                             f"got shape {tuple(x.shape)}")
        S = x.shape[1] if self.batch_first else x.shape[0]
        if S > self.max_len:
            raise ValueError(f"PositionalEncoding: the sequence length ({S}) exceeds max_len ({self.max_len})")
        pe = self.pe[:S]
        if pe.dtype != x.dtype:
            pe = pe.to(x.dtype)
        pe = pe.unsqueeze(0) if self.batch_first else pe.unsqueeze(1)
        return self.dropout(x + pe)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, batch_first={self.batch_first}"
