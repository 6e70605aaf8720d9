"""RNN / LSTM / GRU through the C recurrent kernels: a whole stack (layers,
directions, dropout between layers, per-sequence lengths) or one cell step,
ONE autograd op each."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import kernels as K
from ..autograd import apply_op
from ..random import default_generator
from ..tensor import Tensor

__all__ = ["rnn_stack", "rnn_cell"]

NAMES = {"rnn_tanh": "RNN", "rnn_relu": "RNN", "lstm": "LSTM", "gru": "GRU"}


def _contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _array(t: Optional[Tensor]) -> Optional[np.ndarray]:
    return None if t is None else _contiguous(t._data)


def rnn_stack(x: Tensor, h0: Optional[Tensor], c0: Optional[Tensor], flat: Sequence[Tensor], mode: str,
              num_layers: int, bidirectional: bool, bias: bool, dropout: float, training: bool,
              lengths: Optional[np.ndarray], batch_first: bool) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """The recurrent stack as one op: x (T, B, I) or (B, T, I) when
    batch_first, h0 / c0 (layers * directions, B, H) or None (zeros),
    ``flat``: the weights in torch's order (w_ih, w_hh[, b_ih, b_hh]) per
    layer and direction -> (output, h_n, c_n or None when not lstm).
    Dropout ``dropout`` between layers when ``training``."""
    per = 4 if bias else 2
    arrays = [w._data for w in flat]
    weights = [tuple(arrays[i:i + per]) if bias else (arrays[i], arrays[i + 1], None, None)
               for i in range(0, len(arrays), per)]
    training_dropout = training and dropout > 0 and num_layers > 1
    seed = default_generator.next_seed() if training_dropout else 0
    out, h_n, c_n, cache = K.rnn_stack_forward(
        _contiguous(x._data), _array(h0), weights, mode, num_layers, bidirectional, _array(c0), dropout,
        training_dropout, seed, lengths, batch_first)
    lstm = mode == "lstm"
    need_x = x.requires_grad

    def backward(grads):
        dout, dh_n = grads[0], grads[1]
        dc_n = grads[2] if lstm else None
        dx, dh0, dc0, wgrads = K.rnn_stack_backward(dout, dh_n, dc_n, cache, need_dx=need_x)
        flat_grads: List[np.ndarray] = []
        for g in wgrads:
            flat_grads += list(g if bias else g[:2])
        return (dx, dh0 if h0 is not None else None, dc0 if c0 is not None else None, *flat_grads)

    outputs = (out, h_n, c_n) if lstm else (out, h_n)
    res = apply_op(outputs, (x, h0, c0, *flat), backward, NAMES[mode], saved=(x, h0, c0, *flat))
    return (res[0], res[1], res[2] if lstm else None)


def _cell_grads(dh_new, dc_new, x, h, c, w_ih, w_hh, b_ih, b_hh, saved, mode: str, need_x: bool):
    """The one call of ``kernels.rnn_cell_backward``: (dx, dh, dc, dw_ih,
    dw_hh, db_ih, db_hh)."""
    return K.rnn_cell_backward(dh_new, dc_new, x, h, c, w_ih, w_hh, b_ih, b_hh, saved, mode, need_x)


def rnn_cell(x: Tensor, h: Optional[Tensor], c: Optional[Tensor], w_ih: Tensor, w_hh: Tensor,
             b_ih: Optional[Tensor], b_hh: Optional[Tensor], mode: str) -> Tuple[Tensor, Optional[Tensor]]:
    """One step as one op: x (B, I), h, c (B, H) or None (zeros; c for lstm
    only) -> (h' (B, H), c' (B, H) or None when not lstm)."""
    lstm = mode == "lstm"
    xd, hd, cd = _array(x), _array(h), _array(c)
    wd = (w_ih._data, w_hh._data, _array(b_ih), _array(b_hh))
    h_new, c_new, saved = K.rnn_cell_forward(xd, hd, *wd, mode, cd)
    need_x = x.requires_grad

    def backward(grads):
        dh_new = grads[0] if lstm else grads
        dc_new = grads[1] if lstm else None
        dx, dh, dc, dw_ih, dw_hh, db_ih, db_hh = _cell_grads(dh_new, dc_new, xd, hd, cd, *wd, saved, mode, need_x)
        return (dx, dh if h is not None else None, dc if c is not None else None, dw_ih, dw_hh, db_ih, db_hh)

    parents = (x, h, c, w_ih, w_hh, b_ih, b_hh)
    if lstm:
        return apply_op((h_new, c_new), parents, backward, "LSTMCell", saved=parents)
    return apply_op(h_new, parents, backward, NAMES[mode] + "Cell", saved=parents), None
