"""Per-layer key/value caches and the one-token step of our Transformer
layers (forward only, eval semantics: no dropout).

The step of a layer mirrors its full forward (post-norm or pre-norm),
reusing the layer's own norms and fused feed-forward on (B, D) rows; only
attention is replaced by the KV-cache kernels: the new token's key/value
are appended to the self-attention cache and its query attends to slots
0..t; cross-attention attends to the encoder memory's keys/values, computed
once per source (:func:`cross_kv`).

A layer the C kernel ``decode_layer_step`` computes (packed self-attention
projections, relu/gelu, plain LayerNorms with one eps, one dtype) runs in
one call per step, the same bits as the kernels called one by one (the
Python path below, kept for every other layer).  Its weights are looked up
once per cache (:func:`_layer_plan`): a cache belongs to one decoding run
of fixed weights, as its cross-attention keys/values already do.  When
every part of a model is one the kernels compute, its whole step is one
``decode_model_step`` call (:class:`StepProgram`, built at the cache's
first step).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from .. import kernels as K
from ..tensor import Tensor

Arr = np.ndarray


def _proj(attn) -> Tuple[Arr, Arr, Arr, Optional[Arr], Optional[Arr], Optional[Arr]]:
    """(wq, wk, wv, bq, bk, bv) of a MultiheadAttention, packed or not."""
    E = attn.embed_dim
    if attn.in_proj_weight is not None:
        w = attn.in_proj_weight._data
        wq, wk, wv = w[:E], w[E:2 * E], w[2 * E:]
    else:
        wq, wk, wv = attn.q_proj_weight._data, attn.k_proj_weight._data, attn.v_proj_weight._data
    if attn.in_proj_bias is not None:
        b = attn.in_proj_bias._data
        return wq, wk, wv, b[:E], b[E:2 * E], b[2 * E:]
    return wq, wk, wv, None, None, None


def _heads(x: Arr, H: int) -> Arr:
    """(B, E) -> (B, H, Dh)."""
    return x.reshape(x.shape[0], H, x.shape[-1] // H)  # (no -1: B may be 0)


def _linear(x: Arr, lin) -> Arr:
    """An nn.Linear on the step's rows (GEMV for one row: see decode_linear)."""
    b = lin.bias
    return K.decode_linear(x, lin.weight._data, None if b is None else b._data)


def embed_step(module, tokens: Tensor, scale: float, pe: Arr, t: int) -> Arr:
    """The step's input rows: embedding(tokens) * scale + pe[t] (B, D); an
    nn.Embedding through its kernel (which checks the ids), any other
    module called."""
    from ..nn.modules import Embedding
    if type(module) is Embedding:
        x = K.embedding_forward(tokens._data, module.weight._data)
    else:
        x = module(tokens)._data
    x = x * scale
    return x + pe[t].astype(x.dtype)


def norm_step(module, x: Arr) -> Arr:
    """A final norm on the step's rows: a LayerNorm over the last dimension
    through its kernel, any other module called."""
    from ..nn.modules import LayerNorm
    if type(module) is LayerNorm and module.normalized_shape == (x.shape[-1],):
        w, b = module.weight, module.bias
        return K.layernorm_forward(x, None if w is None else w._data, None if b is None else b._data,
                                   module.eps)[0]
    return module(Tensor._wrap(x))._data


def output_step(module, x: Arr) -> Tensor:
    """The model's output layer (generator / lm_head) on the step's rows."""
    from ..nn.modules import Linear
    if type(module) is Linear:
        return Tensor._wrap(_linear(x, module))
    return module(Tensor._wrap(x))


def _out_proj(attn, ctx: Arr) -> Arr:
    """ctx (B, H, Dh) -> (B, E) through out_proj."""
    return _linear(ctx.reshape(ctx.shape[0], -1), attn.out_proj)


def feed_forward_step(layer, x: Arr) -> Arr:
    """The layer's feed-forward on the step's rows (eval: no dropout)."""
    from ..nn.transformer import _fused_kind
    kind = _fused_kind(layer.activation)
    if kind is None:
        return layer._ff(Tensor._wrap(x))._data
    b1 = layer.linear1.bias
    h = K.decode_linear(x, layer.linear1.weight._data, None)
    a = K.bias_act_forward(h, None if b1 is None else b1._data, kind[0], kind[1])
    return _linear(a, layer.linear2)


class SelfCache:
    """Self-attention keys/values of one layer: k, v (B, H, Tmax, Dh); plan:
    the layer's weights for decode_layer_step (None: not looked up yet)."""

    def __init__(self, B: int, H: int, Tmax: int, Dh: int, dtype) -> None:
        self.k = np.zeros((B, H, Tmax, Dh), dtype)
        self.v = np.zeros((B, H, Tmax, Dh), dtype)
        self.plan: Optional[tuple] = None

    def reorder(self, rows: Arr, length: int) -> None:
        """Row i becomes old row rows[i] (first `length` slots; the rows may change in number)."""
        self.k = K.cache_reorder(self.k, rows, length)
        self.v = K.cache_reorder(self.v, rows, length)

    def permute(self, rows: Arr, length: int) -> None:
        """reorder for as many rows as there are, in place: only the rows
        that change are copied (beam search keeps most beams in place)."""
        K.cache_permute(self.k, rows, length)
        K.cache_permute(self.v, rows, length)


def self_attn_step(attn, x: Arr, cache: SelfCache, t: int) -> Arr:
    """x (B, E) the new token at position t -> attention output (B, E)."""
    H, E = attn.num_heads, attn.embed_dim
    if attn.in_proj_weight is not None:  # packed: q, k and v in one pass over the weights
        b = attn.in_proj_bias
        qkv = K.decode_linear(x, attn.in_proj_weight._data, None if b is None else b._data)
        q, k, v = qkv[:, :E], qkv[:, E:2 * E], qkv[:, 2 * E:]
    else:
        wq, wk, wv, bq, bk, bv = _proj(attn)
        q, k, v = (K.decode_linear(x, w, b) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    K.kv_cache_append(cache.k, cache.v, _heads(k, H), _heads(v, H), t)
    return _out_proj(attn, K.attend_step(np.ascontiguousarray(_heads(q, H)), cache.k, cache.v, t + 1))


def cross_kv(attn, memory: Arr) -> Tuple[Arr, Arr]:
    """The encoder memory (B, S, E) projected once: (k, v) (B, H, S, Dh).
    A packed in_proj_weight projects k and v in one product over its rows
    E:3E, as the full forward's cross-attention does (one call, the weight
    read as one run)."""
    B, S, _ = memory.shape
    H = attn.num_heads

    def heads(x):  # (B, S, E') -> (B, H, S, E' / H)
        return np.ascontiguousarray(x.reshape(B, S, H, x.shape[-1] // H).transpose(0, 2, 1, 3))  # (no -1: B may be 0)

    if attn.in_proj_weight is not None:
        E = attn.embed_dim
        b = attn.in_proj_bias
        kv = K.linear_forward(memory, attn.in_proj_weight._data[E:], None if b is None else b._data[E:])
        return heads(kv[..., :E]), heads(kv[..., E:])
    _, wk, wv, _, bk, bv = _proj(attn)
    return heads(K.linear_forward(memory, wk, bk)), heads(K.linear_forward(memory, wv, bv))


def cross_attn_step(attn, x: Arr, mem_k: Arr, mem_v: Arr, mem_pad: Optional[Arr]) -> Arr:
    """x (B, E) attends to the memory (keys hidden where mem_pad (B, S) is True)."""
    wq, _, _, bq, _, _ = _proj(attn)
    q = _heads(K.decode_linear(x, wq, bq), attn.num_heads)
    return _out_proj(attn, K.attend_step(q, mem_k, mem_v, mem_k.shape[2], mem_pad))


def _t(a: Arr) -> Tensor:
    return Tensor._wrap(a)


def _post_norm(layer, x: Arr, sub: Arr, norm) -> Arr:
    return layer._residual_norm(_t(x), _t(sub), norm)._data


_NO_PLAN = ()  # SelfCache.plan of a layer decode_layer_step does not compute


def _act_name(layer) -> Optional[str]:
    from ..nn.transformer import _fused_kind
    kind = _fused_kind(layer.activation)
    if kind is None or kind[1] not in ("none", "tanh"):
        return None
    return "gelu_tanh" if kind[1] == "tanh" else kind[0]


def _data(p) -> Optional[Arr]:
    return None if p is None else p._data


# decode_layer_step's weight arguments, in its positional order (after x, the cache, pos)
_PLAN_WEIGHTS = ("w_qkv", "b_qkv", "w_o", "b_o", "w1", "b1", "w2", "b2", "norm1_weight", "norm1_bias",
                 "norm2_weight", "norm2_bias", "norm3_weight", "norm3_bias", "w_cq", "b_cq", "w_co", "b_co")


def _layer_plan(layer, cross: bool) -> tuple:
    """(weights, (act, norm_first, eps), dtype) of decode_layer_step for
    `layer`, the weights a tuple in _PLAN_WEIGHTS's order (None where the
    layer has none), or _NO_PLAN when the kernel does not compute it.
    Positional: a step passes them on without building keyword arguments
    (the step's Python was 5-8 % of a d512 greedy step)."""
    from ..nn.modules import LayerNorm
    sa = layer.self_attn
    norms = [layer.norm1, layer.norm2] + ([layer.norm3] if cross else [])
    act = _act_name(layer)
    if (sa.in_proj_weight is None or act is None
            or any(type(n) is not LayerNorm or len(n.normalized_shape) != 1 or n.eps != norms[0].eps
                   for n in norms)):
        return _NO_PLAN
    w = dict(w_qkv=sa.in_proj_weight._data, b_qkv=_data(sa.in_proj_bias), w_o=sa.out_proj.weight._data,
             b_o=_data(sa.out_proj.bias), w1=layer.linear1.weight._data, b1=_data(layer.linear1.bias),
             w2=layer.linear2.weight._data, b2=_data(layer.linear2.bias))
    for i, n in enumerate(norms, 1):
        w[f"norm{i}_weight"], w[f"norm{i}_bias"] = _data(n.weight), _data(n.bias)
    if cross:
        ca = layer.multihead_attn
        w["w_cq"], _, _, w["b_cq"], _, _ = _proj(ca)
        w["w_co"], w["b_co"] = ca.out_proj.weight._data, _data(ca.out_proj.bias)
    dtypes = {a.dtype for a in w.values() if a is not None}
    if len(dtypes) != 1:
        return _NO_PLAN
    return tuple(w.get(k) for k in _PLAN_WEIGHTS), (act, bool(layer.norm_first), float(norms[0].eps)), dtypes.pop()


def _fused_step(layer, x: Arr, cache: SelfCache, t: int, mem: Optional[tuple] = None) -> Optional[Arr]:
    """The layer's step in one decode_layer_step call, or None when the
    kernel does not compute this layer (or x has another dtype)."""
    plan = cache.plan
    if plan is None:
        plan = cache.plan = _layer_plan(layer, mem is not None)
    if plan is _NO_PLAN or x.dtype != plan[2]:
        return None
    weights, tail, _ = plan
    if mem is not None:
        (mem_k, mem_v), mem_pad = mem
        return K.decode_layer_step(x, cache.k, cache.v, t, *weights, mem_k, mem_v, mem_pad, *tail)
    return K.decode_layer_step(x, cache.k, cache.v, t, *weights, None, None, None, *tail)


def encoder_layer_step(layer, x: Arr, cache: SelfCache, t: int) -> Arr:
    """One token through a TransformerEncoderLayer used causally (decoder-only LM)."""
    out = _fused_step(layer, x, cache, t)
    if out is not None:
        return out
    return encoder_layer_step_unfused(layer, x, cache, t)


def encoder_layer_step_unfused(layer, x: Arr, cache: SelfCache, t: int) -> Arr:
    """encoder_layer_step with one kernel call per operation (any layer)."""
    if layer.norm_first:
        x = x + self_attn_step(layer.self_attn, layer.norm1(_t(x))._data, cache, t)
        return x + feed_forward_step(layer, layer.norm2(_t(x))._data)
    x = _post_norm(layer, x, self_attn_step(layer.self_attn, x, cache, t), layer.norm1)
    return _post_norm(layer, x, feed_forward_step(layer, x), layer.norm2)


def decoder_layer_step(layer, x: Arr, cache: SelfCache, mem_kv: Tuple[Arr, Arr], mem_pad: Optional[Arr],
                       t: int) -> Arr:
    """One token through a TransformerDecoderLayer."""
    out = _fused_step(layer, x, cache, t, (mem_kv, mem_pad))
    if out is not None:
        return out
    return decoder_layer_step_unfused(layer, x, cache, mem_kv, mem_pad, t)


def decoder_layer_step_unfused(layer, x: Arr, cache: SelfCache, mem_kv: Tuple[Arr, Arr], mem_pad: Optional[Arr],
                               t: int) -> Arr:
    """decoder_layer_step with one kernel call per operation (any layer)."""
    mk, mv = mem_kv
    if layer.norm_first:
        x = x + self_attn_step(layer.self_attn, layer.norm1(_t(x))._data, cache, t)
        x = x + cross_attn_step(layer.multihead_attn, layer.norm2(_t(x))._data, mk, mv, mem_pad)
        return x + feed_forward_step(layer, layer.norm3(_t(x))._data)
    x = _post_norm(layer, x, self_attn_step(layer.self_attn, x, cache, t), layer.norm1)
    x = _post_norm(layer, x, cross_attn_step(layer.multihead_attn, x, mk, mv, mem_pad), layer.norm2)
    return _post_norm(layer, x, feed_forward_step(layer, x), layer.norm3)


class StepProgram:
    """A whole decoding step in one kernel call (decode_model_step): the
    embedding x scale + pe[t], every layer's decode_layer_step, the final
    LayerNorm, the output Linear.  Each layer's weights, cache and memory are
    checked once, into a plan (decode_layer_plan), when the program is built
    for a cache.  Built only when the kernels compute every part
    (nn.Embedding, every layer planned by _layer_plan, a LayerNorm over the
    last dimension or none, nn.Linear, one dtype); any other model takes the
    module-by-module step.  The same kernels in the same order as that step,
    so the same bits.  It spares a d512 step the module lookups, the Python
    between the kernels and the per-layer argument checks, whose objects are
    cold after each weight stream."""

    __slots__ = ("args",)

    def __init__(self, args: tuple) -> None:
        self.args = args  # decode_model_step's arguments after (ids, pos)

    def run(self, ids: Arr, t: int) -> Arr:
        """ids (B,) at position t -> logits (B, V)."""
        return K.decode_model_step(ids, t, *self.args)

    def can_feed_back(self, pad_id: int) -> bool:
        """Whether greedy() applies: every id it may feed back (an argmax over
        the logits, or pad_id) is a row of the embedding."""
        n_ids, n_logits = self.args[0].shape[0], self.args[-3].shape[0]  # emb (V, E), out_w (V_out, E)
        return n_logits <= n_ids and 0 <= pad_id < n_ids

    def greedy(self, ys: Arr, done: Arr, start: int, stop: int, t: int, eos_id: int, pad_id: int) -> int:
        """Columns start .. stop - 1 of ys (B, L) int64 by greedy decoding
        from position t, in one decode_model_greedy call (the loop of
        decoding.greedy_decode, same tokens): each step feeds column n - 1
        and writes each row's argmax, pad_id once the row is done (done (B,)
        bool, updated); stops after the column where every row is done.
        Returns the last column written."""
        return K.decode_model_greedy(ys, done, start, stop, t, eos_id, pad_id, *self.args)


def _layer_plans(layers, cache: "DecoderCache", dtype) -> Optional[tuple]:
    """decode_layer_plan of every layer over its cache (and memory), or None
    when _layer_plan finds a layer the kernel does not compute."""
    plans = []
    cross = cache.mem_kv is not None
    for i, (layer, c) in enumerate(zip(layers, cache.self_caches)):
        if c.plan is None:
            c.plan = _layer_plan(layer, cross)
        if c.plan is _NO_PLAN or c.plan[2] != dtype:
            return None
        weights, tail, _ = c.plan
        mem = (*cache.mem_kv[i], cache.mem_pad) if cross else (None, None, None)
        plans.append(K.decode_layer_plan(c.k, c.v, *weights, *mem, *tail))
    return tuple(plans)


def step_program(embedding, scale: float, pe: Arr, layers, norm, output, cache: "DecoderCache") -> Optional[StepProgram]:
    """The StepProgram of a model's parts for `cache`, or None when some part
    is not one the kernels compute (then the step goes module by module)."""
    from ..nn.modules import Embedding, LayerNorm, Linear
    if type(embedding) is not Embedding or type(output) is not Linear:
        return None
    emb = embedding.weight._data
    E, dtype = emb.shape[1], emb.dtype
    norm_args: tuple = (None, None, 0.0, False)
    if norm is not None:
        if type(norm) is not LayerNorm or norm.normalized_shape != (E,):
            return None
        norm_args = (_data(norm.weight), _data(norm.bias), float(norm.eps), True)
    out_w, out_b = output.weight._data, _data(output.bias)
    if any(a is not None and a.dtype != dtype for a in (*norm_args[:2], out_w, out_b)):
        return None
    plans = _layer_plans(layers, cache, dtype)
    if plans is None:
        return None
    # the rows a step can add, in the model's dtype (as the step's pe[t].astype(dtype))
    pe = pe if pe.dtype == dtype else pe[:cache.max_len].astype(dtype)
    return StepProgram((emb, scale, pe, plans, *norm_args[:3], out_w, out_b, norm_args[3]))


def cached_program(cache: "DecoderCache", build) -> Optional[StepProgram]:
    """cache's StepProgram, built by build() at the first step (None: the
    model's parts need the module-by-module step)."""
    if cache.program is None:
        cache.program = build() or False
    return cache.program or None


class DecoderCache:
    """Everything a model's decode_step carries between steps.

    self_caches: one SelfCache per layer; mem_kv: per layer (k, v) of the
    encoder memory or None (decoder-only); mem_pad (B, S) bool, True = padded
    source position; t: the number of tokens already fed."""

    def __init__(self, self_caches: List[SelfCache], mem_kv: Optional[List[Tuple[Arr, Arr]]] = None,
                 mem_pad: Optional[Arr] = None) -> None:
        self.self_caches = self_caches
        self.mem_kv = mem_kv
        self.mem_pad = mem_pad
        self.t = 0
        self.program: Optional[StepProgram] = None  # set by the model's first step (False: none applies)

    def __getstate__(self) -> dict:
        """For copy.deepcopy and pickle: without the program, whose plans hold
        this cache's arrays (a copy builds its own at its next step)."""
        state = dict(self.__dict__)
        state["program"] = None
        return state

    @property
    def max_len(self) -> int:
        return self.self_caches[0].k.shape[2] if self.self_caches else 0

    @property
    def rows(self) -> int:
        return self.self_caches[0].k.shape[0] if self.self_caches else 0

    def reorder(self, rows: Arr) -> None:
        """Beam search: row i continues from old row rows[i] (self caches only;
        every beam keeps its source, so the memory rows never move)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.shape != (self.rows,):
            raise ValueError(f"DecoderCache.reorder: rows must have shape ({self.rows},) (the cache's rows), "
                             f"got {rows.shape}")
        bad = np.flatnonzero((rows < 0) | (rows >= self.rows))
        if bad.size:
            raise IndexError(f"DecoderCache.reorder: rows[{bad[0]}] must be in [0, {self.rows}), got {rows[bad[0]]}")
        for c in self.self_caches:
            c.permute(rows, self.t)

    def expand(self, rows: Arr) -> None:
        """Gather rows of everything, memory included (batch -> batch x beams)."""
        rows = np.asarray(rows, dtype=np.int64)
        self.program = None  # its plans hold the arrays replaced here: built again at the next step
        for c in self.self_caches:
            c.reorder(rows, self.t)
        if self.mem_kv is not None:
            self.mem_kv = [(K.cache_reorder(k, rows), K.cache_reorder(v, rows)) for k, v in self.mem_kv]
        if self.mem_pad is not None:
            self.mem_pad = np.ascontiguousarray(self.mem_pad[rows])
