"""Recurrent layers: Elman RNN (tanh / relu), LSTM and GRU, with torch's maths
and weight layout.

Modes and gate counts G: ``"rnn_tanh"``, ``"rnn_relu"`` (G = 1), ``"lstm"``
(G = 4, gates i, f, g, o), ``"gru"`` (G = 3, gates r, z, n).  Weights as torch:
``w_ih`` (G*H, I), ``w_hh`` (G*H, H), ``b_ih``, ``b_hh`` (G*H) or None.

* :func:`rnn_forward` / :func:`rnn_backward` - one layer, one direction, a
  whole time-major sequence (the building block, all in C).
* :func:`rnn_cell_forward` / :func:`rnn_cell_backward` - one step (the same C
  kernel with T = 1), for step-by-step decoders.
  (rnn_forward, rnn_backward and the cells are generated from
  csrc/py/kernel_table.py into _bindings.py.)
* :func:`rnn_stack_forward` / :func:`rnn_stack_backward` - multi-layer and
  bidirectional stacks with dropout between layers, as ``torch.nn.RNN`` /
  ``LSTM`` / ``GRU``.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ._args import as_float
from ._bindings import rnn_backward, rnn_cell_backward, rnn_cell_forward, rnn_forward
from .dropout import dropout_backward, dropout_forward

__all__ = ["MODES", "rnn_forward", "rnn_backward", "rnn_cell_forward", "rnn_cell_backward", "rnn_stack_forward",
           "rnn_stack_backward", "RNNStackCache"]

MODES = ("rnn_tanh", "rnn_relu", "lstm", "gru")

# (w_ih, w_hh, b_ih | None, b_hh | None) of one layer and direction.
RNNWeights = Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]
# (dw_ih, dw_hh, db_ih | None, db_hh | None)
RNNWeightGrads = Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]


# ---------------------------------------------------------------------------
# Stacks: several layers, one or two directions, dropout between layers.

@dataclass
class RNNStackCache:
    """What :func:`rnn_stack_forward` keeps for :func:`rnn_stack_backward`."""
    mode: str
    num_layers: int
    num_directions: int
    batch_first: bool
    lengths: Optional[np.ndarray]
    weights: List[RNNWeights]
    h0: Optional[np.ndarray]                 # (L*D, B, H) or None
    c0: Optional[np.ndarray]
    layer_inputs: List[np.ndarray] = field(default_factory=list)   # per layer, (T, B, I_l)
    saved: List[np.ndarray] = field(default_factory=list)          # per layer*D + direction
    masks: List[Optional[np.ndarray]] = field(default_factory=list)  # bool, dropout on layer l's output
    dropout: float = 0.0


def _check_stack_args(fn: str, x: np.ndarray, h0: Optional[np.ndarray], c0: Optional[np.ndarray],
                      weights: Sequence[RNNWeights], mode: str, num_layers: int,
                      num_directions: int, dropout: float, batch_first: bool) -> int:
    """Validate what the C kernels cannot see; returns H."""
    if mode not in MODES:
        raise ValueError(f"{fn}: mode must be one of {MODES}, got {mode!r}")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"{fn}: num_layers must be an int >= 1, got {num_layers!r}")
    if not 0.0 <= as_float(fn, "dropout", dropout) <= 1.0:
        raise ValueError(f"{fn}: dropout must be in [0, 1], got {dropout}")
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{fn}: x must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim != 3:
        raise ValueError(f"{fn}: x must have 3 dimensions ({'B, T' if batch_first else 'T, B'}, I), "
                         f"got {x.ndim}")
    if not isinstance(weights, (list, tuple)):
        raise TypeError(f"{fn}: weights must be a list of (w_ih, w_hh, b_ih, b_hh) tuples, got "
                        f"{type(weights).__name__}")
    if len(weights) != num_layers * num_directions:
        raise ValueError(f"{fn}: weights must have {num_layers * num_directions} entries "
                         f"(num_layers * num_directions), got {len(weights)}")
    for k, w in enumerate(weights):
        if not isinstance(w, (list, tuple)):
            raise TypeError(f"{fn}: weights[{k}] must be a (w_ih, w_hh, b_ih, b_hh) tuple, got {type(w).__name__}")
        if len(w) != 4:
            raise ValueError(f"{fn}: weights[{k}] must be (w_ih, w_hh, b_ih, b_hh), got {len(w)} items")
    w_hh = weights[0][1]
    if not isinstance(w_hh, np.ndarray) or w_hh.ndim != 2:
        return -1  # the kernel reports it
    B = x.shape[0] if batch_first else x.shape[1]
    expected = (num_layers * num_directions, B, w_hh.shape[1])
    for name, state in (("h0", h0), ("c0", c0)):
        if state is not None and tuple(np.shape(state)) != expected:
            raise ValueError(f"{fn}: {name} must have shape {expected} "
                             f"(num_layers * num_directions, batch, hidden), got {tuple(np.shape(state))}")
    if c0 is not None and mode != "lstm":
        raise ValueError(f"{fn}: c0 must be None for mode {mode!r} (only lstm has a cell state), got an array")
    return w_hh.shape[1]




def _stack(arrays: List[np.ndarray]) -> np.ndarray:
    """np.stack, without its ~10 us of Python for the common single layer
    (a step-by-step decoder calls the stack once per token)."""
    return arrays[0][np.newaxis] if len(arrays) == 1 else np.stack(arrays)


def rnn_stack_forward(x: np.ndarray, h0: Optional[np.ndarray], weights: Sequence[RNNWeights],
                      mode: str, num_layers: int = 1, bidirectional: bool = False,
                      c0: Optional[np.ndarray] = None, dropout: float = 0.0,
                      training: bool = False, seed: int = 0, lengths: Optional[np.ndarray] = None,
                      batch_first: bool = False
                      ) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], RNNStackCache]:
    """A multi-layer, optionally bidirectional stack, as ``torch.nn.RNN`` /
    ``LSTM`` / ``GRU`` (on packed sequences when ``lengths`` is given).

    x (T, B, I) (or (B, T, I) when batch_first); h0, c0 (L*D, B, H) or None
    (zeros), index ``layer * D + direction`` as torch; weights: L*D tuples
    (w_ih, w_hh, b_ih, b_hh) in the same order (layer l > 0 has input size
    D*H: the concatenated directions of layer l - 1); lengths (B) or None.
    Dropout with probability ``dropout`` is applied to every layer's output
    except the last when ``training``, by the counter-based dropout kernel:
    layer l's mask is ``dropout_forward(out_l, p, seed, offset)`` with the
    offset counting the elements of the earlier layers' outputs.

    Returns (out (T, B, D*H) (batch_first: (B, T, D*H)), h_n (L*D, B, H),
    c_n (L*D, B, H) or None, cache for :func:`rnn_stack_backward`).
    """
    fn = "rnn_stack_forward"
    D = 2 if bidirectional else 1
    _check_stack_args(fn, x, h0, c0, weights, mode, num_layers, D, dropout, batch_first)
    if lengths is not None:
        lengths = np.asarray(lengths)
    if batch_first:
        x = x.transpose(1, 0, 2)
    cache = RNNStackCache(mode, num_layers, D, batch_first, lengths, list(weights), h0, c0,
                          dropout=as_float("rnn_stack_forward", "dropout", dropout))
    use_dropout = training and dropout > 0 and num_layers > 1
    with _named(fn):
        return _stack_forward(x, h0, weights, mode, num_layers, D, c0, dropout, seed, lengths, batch_first,
                              cache, use_dropout)


def _stack_forward(x, h0, weights, mode, num_layers, D, c0, dropout, seed, lengths, batch_first, cache,
                   use_dropout):
    h_n, c_n = [], []
    layer_in = x
    offset = 0
    for layer in range(num_layers):
        cache.layer_inputs.append(layer_in)
        outs = []
        for d in range(D):
            k = layer * D + d
            out, h, c, saved = rnn_forward(layer_in, None if h0 is None else h0[k], *weights[k], mode,
                                           None if c0 is None else c0[k], lengths, reverse=d == 1)
            outs.append(out)
            h_n.append(h)
            c_n.append(c)
            cache.saved.append(saved)
        layer_out = outs[0] if D == 1 else np.concatenate(outs, axis=2)
        mask = None
        if use_dropout and layer < num_layers - 1:
            layer_out, mask = dropout_forward(layer_out, float(dropout), seed, offset)
            offset += layer_out.size
        cache.masks.append(mask)
        layer_in = layer_out
    out = layer_in
    if batch_first:
        out = np.ascontiguousarray(out.transpose(1, 0, 2))
    return out, _stack(h_n), _stack(c_n) if mode == "lstm" else None, cache


def rnn_stack_backward(dout: Optional[np.ndarray], dh_n: Optional[np.ndarray],
                       dc_n: Optional[np.ndarray], cache: RNNStackCache, need_dx: bool = True
                       ) -> Tuple[Optional[np.ndarray], np.ndarray, Optional[np.ndarray],
                                  List[RNNWeightGrads]]:
    """Gradients of :func:`rnn_stack_forward`.

    dout like its out, dh_n, dc_n (L*D, B, H); any may be None (zero).
    Returns (dx like x or None, dh0 (L*D, B, H), dc0 (L*D, B, H) or None
    (not lstm), [(dw_ih, dw_hh, db_ih, db_hh)] per layer and direction).
    """
    fn = "rnn_stack_backward"
    if not isinstance(cache, RNNStackCache):
        raise TypeError(f"{fn}: cache must be the RNNStackCache returned by rnn_stack_forward, "
                        f"got {type(cache).__name__}")
    L, D, mode = cache.num_layers, cache.num_directions, cache.mode
    T, B = cache.layer_inputs[0].shape[:2]
    H = cache.weights[0][1].shape[1]
    out_shape = (B, T, D * H) if cache.batch_first else (T, B, D * H)
    _check_grad(fn, "dout", dout, out_shape, "the shape of the forward output")
    _check_grad(fn, "dh_n", dh_n, (L * D, B, H), "num_layers * num_directions, batch, hidden")
    if dc_n is not None and mode != "lstm":
        raise ValueError(f"{fn}: dc_n must be None for mode {mode!r} (only lstm has a cell state), got an array")
    _check_grad(fn, "dc_n", dc_n, (L * D, B, H), "num_layers * num_directions, batch, hidden")
    with _named(fn):
        return _stack_backward(dout, dh_n, dc_n, cache, need_dx)


def _check_grad(fn: str, name: str, g: Optional[np.ndarray], shape: tuple, what: str) -> None:
    """A gradient argument of rnn_stack_backward: None or an array of `shape`."""
    if g is None:
        return
    if not isinstance(g, np.ndarray):
        raise TypeError(f"{fn}: {name} must be a numpy.ndarray or None, got {type(g).__name__}")
    if g.shape != tuple(shape):
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)} ({what}), got {g.shape}")


@contextmanager
def _named(fn: str):
    """Errors of the per-layer kernels led by the function the user called
    (``rnn_backward: dc_n ...`` -> ``rnn_stack_backward: rnn_backward: dc_n ...``)."""
    try:
        yield
    except (TypeError, ValueError, IndexError) as exc:
        if str(exc).startswith(fn + ": "):
            raise
        raise type(exc)(f"{fn}: {exc}") from exc


def _stack_backward(dout: Optional[np.ndarray], dh_n: Optional[np.ndarray], dc_n: Optional[np.ndarray],
                    cache: RNNStackCache, need_dx: bool):
    L, D, mode = cache.num_layers, cache.num_directions, cache.mode
    if dout is not None and cache.batch_first:
        dout = dout.transpose(1, 0, 2)
    dh0: List[Optional[np.ndarray]] = [None] * (L * D)
    dc0: List[Optional[np.ndarray]] = [None] * (L * D)
    wgrads: List[Optional[RNNWeightGrads]] = [None] * (L * D)
    d_layer_out = dout
    d_in = None
    for layer in reversed(range(L)):
        mask = cache.masks[layer]
        if d_layer_out is not None and mask is not None:
            d_layer_out = dropout_backward(np.ascontiguousarray(d_layer_out), mask, cache.dropout)
        layer_in = cache.layer_inputs[layer]
        d_in = None
        for d in range(D):
            k = layer * D + d
            w = cache.weights[k]
            H = w[1].shape[1]
            d_out_dir = None if d_layer_out is None else d_layer_out[:, :, d * H:(d + 1) * H]
            w_ih, w_hh, b_ih, b_hh = w
            grads = rnn_backward(d_out_dir, None if dh_n is None else dh_n[k],
                                 None if dc_n is None else dc_n[k], layer_in, w_ih, w_hh, cache.saved[k],
                                 mode, cache.lengths, reverse=d == 1, need_dx=need_dx or layer > 0,
                                 with_bias=b_ih is not None or b_hh is not None)
            dx_dir, dh0[k], dc0[k], dw_ih, dw_hh, db_ih, db_hh = grads
            wgrads[k] = (dw_ih, dw_hh, None if b_ih is None else db_ih, None if b_hh is None else db_hh)
            if dx_dir is not None:
                d_in = dx_dir if d_in is None else d_in + dx_dir
        d_layer_out = d_in
    dx = d_in if need_dx else None
    if dx is not None and cache.batch_first:
        dx = np.ascontiguousarray(dx.transpose(1, 0, 2))
    return dx, _stack(dh0), _stack(dc0) if mode == "lstm" else None, wgrads
