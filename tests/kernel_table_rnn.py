"""KERNELS entries of the recurrent kernels (tests/kernel_table.py describes the
fields): rnn_forward/rnn_backward (one layer, one direction, packed lengths,
reverse) and rnn_cell_forward/rnn_cell_backward, for the four modes, with torch's
nn.RNN/LSTM/GRU (and cells) holding the same weights as the reference.
The stacks (layers, directions, dropout) are tested in test_kernels_recurrent.py."""
from __future__ import annotations

import numpy as np

import ctransformer.kernels as K
from kernel_info import KernelInfo, normal
from tolerances import F64_TIGHT

# ---- recurrent layers (one direction) and cells --------------------------------
# The outputs out, h_n (and c_n) are compared and differentiated as one flat
# array: forward -> (flat, saved), backward splits the flat gradient.

GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}
RNN_T, RNN_B, RNN_I, RNN_H = 4, 3, 5, 4
RNN_WEIGHTS = ["w_ih", "w_hh", "b_ih", "b_hh"]


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def ref_rnn_step(mode, x, h, c, w_ih, w_hh, b_ih, b_hh):
    """One step of one sequence, straight from torch's documentation -> (h', c')."""
    a, p = w_ih @ x + b_ih, w_hh @ h + b_hh
    if mode == "rnn_tanh":
        return np.tanh(a + p), c
    if mode == "rnn_relu":
        return np.maximum(a + p, 0), c
    if mode == "lstm":
        i, f, g, o = np.split(a + p, 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        return _sigmoid(o) * np.tanh(c), c
    (a_r, a_z, a_n), (p_r, p_z, p_n) = np.split(a, 3), np.split(p, 3)
    r, z = _sigmoid(a_r + p_r), _sigmoid(a_z + p_z)
    return (1 - z) * np.tanh(a_n + r * p_n) + z * h, c


def _flat(*arrays):
    return np.concatenate([a.ravel() for a in arrays if a is not None])


def ref_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, mode, lengths=None, reverse=False):
    """NumPy loop over sequences and their real steps -> (out, h_n, c_n | None) in float64
    (also the reference of tests/test_packed_gemm.py)."""
    steps, batch, _ = x.shape
    hidden, gh = w_hh.shape[1], w_hh.shape[0]
    b_ih, b_hh = (np.zeros(gh) if b is None else b for b in (b_ih, b_hh))
    out = np.zeros((steps, batch, hidden))
    h_n, c_n = np.zeros((batch, hidden)), np.zeros((batch, hidden))
    for b in range(batch):
        n = steps if lengths is None else int(lengths[b])
        h = np.zeros(hidden) if h0 is None else h0[b].astype(np.float64)
        c = np.zeros(hidden) if c0 is None else c0[b].astype(np.float64)
        for t in (range(n - 1, -1, -1) if reverse else range(n)):
            h, c = ref_rnn_step(mode, x[t, b], h, c, w_ih, w_hh, b_ih, b_hh)
            out[t, b] = h
        h_n[b], c_n[b] = h, c
    return out, h_n, (c_n if mode == "lstm" else None)


def ref_rnn(mode, x, w_ih, w_hh, h0=None, c0=None, b_ih=None, b_hh=None, lengths=None, reverse=False):
    """The table's reference: flat (out, h_n[, c_n])."""
    return _flat(*ref_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, mode, lengths, reverse))


def _split_flat(dflat, shapes):
    """The flat gradient as arrays of the given shapes (None for None)."""
    parts, at = [], 0
    for shape in shapes:
        size = 0 if shape is None else int(np.prod(shape))
        parts.append(None if shape is None else dflat[at:at + size].reshape(shape))
        at += size
    return parts


def _rnn_inputs(rng, mode, dtype, lead, state=True, bias=True):
    """x of shape lead + (I,), state (B, H), weights scaled 0.5 (gates away from saturation)."""
    g, batch = GATES[mode], lead[-1]
    case = dict(mode=mode, x=normal(rng, lead + (RNN_I,), dtype), w_ih=normal(rng, (g * RNN_H, RNN_I), dtype, 0.5),
                w_hh=normal(rng, (g * RNN_H, RNN_H), dtype, 0.5))
    if state:
        case["h0"] = normal(rng, (batch, RNN_H), dtype)
        if mode == "lstm":
            case["c0"] = normal(rng, (batch, RNN_H), dtype)
    if bias:
        case.update(b_ih=normal(rng, (g * RNN_H,), dtype, 0.5), b_hh=normal(rng, (g * RNN_H,), dtype, 0.5))
    return case


def rnn_entry(mode: str) -> KernelInfo:
    lstm = mode == "lstm"

    def forward(mode, x, w_ih, w_hh, h0=None, c0=None, b_ih=None, b_hh=None, lengths=None, reverse=False):
        out, h_n, c_n, saved = K.rnn_forward(x, h0, w_ih, w_hh, b_ih, b_hh, mode, c0, lengths, reverse)
        return _flat(out, h_n, c_n), saved

    def backward(dflat, saved, acc, mode, x, w_ih, w_hh, h0=None, c0=None, b_ih=None, b_hh=None, lengths=None,
                 reverse=False):
        T, B, _ = x.shape
        dout, dh_n, dc_n = _split_flat(np.asarray(dflat), [(T, B, RNN_H), (B, RNN_H), (B, RNN_H) if lstm else None])
        grads = K.rnn_backward(dout, dh_n, dc_n, x, w_ih, w_hh, saved[1], mode, lengths, reverse,
                               with_bias=b_ih is not None)
        return dict(zip(["x", "h0", "c0"] + RNN_WEIGHTS, grads))

    def cases(rng, dtype):
        out = []
        for lengths, reverse in [(None, False), (None, True), (np.array([2, 4, 1]), False),
                                 (np.array([2, 4, 1]), True)]:
            out.append(dict(_rnn_inputs(rng, mode, dtype, (RNN_T, RNN_B)), lengths=lengths, reverse=reverse))
        out.append(_rnn_inputs(rng, mode, dtype, (RNN_T, RNN_B), state=False, bias=False))
        return [{n: v for n, v in case.items() if v is not None} for case in out]

    def empty(rng, dtype):
        return [_rnn_inputs(rng, mode, dtype, (0, RNN_B)), _rnn_inputs(rng, mode, dtype, (RNN_T, 0))]

    def torch_cases(rng, dtype):
        return [_rnn_inputs(rng, mode, dtype, (RNN_T, RNN_B)), _rnn_inputs(rng, mode, dtype, (RNN_T, RNN_B), bias=False)]

    def torch_forward(torch, mode, x, w_ih, w_hh, h0, c0=None, b_ih=None, b_hh=None):
        nn = torch.nn
        kind = nn.LSTM if lstm else nn.GRU if mode == "gru" else nn.RNN
        kw = dict(nonlinearity=mode[4:]) if mode.startswith("rnn") else {}
        module = kind(RNN_I, RNN_H, bias=b_ih is not None, **kw).to(x.dtype)
        params = dict(weight_ih_l0=w_ih, weight_hh_l0=w_hh)
        if b_ih is not None:
            params.update(bias_ih_l0=b_ih, bias_hh_l0=b_hh)
        state = (h0[None], c0[None]) if lstm else h0[None]
        out, last = torch.func.functional_call(module, params, (x, state))
        h_n, c_n = last if lstm else (last, None)
        return torch.cat([t.reshape(-1) for t in (out, h_n, c_n) if t is not None])

    return KernelInfo(f"rnn_{mode}" if not mode.startswith("rnn") else mode, forward, backward,
                      ref_rnn, cases, empty, ("x", "h0", "c0", *RNN_WEIGHTS), torch=torch_forward,
                      torch_cases=torch_cases, f64=F64_TIGHT)


def rnn_cell_entry(mode: str) -> KernelInfo:
    lstm = mode == "lstm"

    def forward(mode, x, w_ih, w_hh, h0=None, c0=None, b_ih=None, b_hh=None):
        h, c, saved = K.rnn_cell_forward(x, h0, w_ih, w_hh, b_ih, b_hh, mode, c0)
        return _flat(h, c), saved

    def backward(dflat, saved, acc, mode, x, w_ih, w_hh, h0=None, c0=None, b_ih=None, b_hh=None):
        B = x.shape[0]
        dh, dc = _split_flat(np.asarray(dflat), [(B, RNN_H), (B, RNN_H) if lstm else None])
        grads = K.rnn_cell_backward(dh, dc, x, h0, c0, w_ih, w_hh, b_ih, b_hh, saved[1], mode)
        return dict(zip(["x", "h0", "c0"] + RNN_WEIGHTS, grads))

    def reference(mode, x, w_ih, w_hh, h0=None, c0=None, b_ih=None, b_hh=None):
        flat = ref_rnn(mode, x[None], w_ih, w_hh, h0, c0, b_ih, b_hh)
        return flat[x.shape[0] * RNN_H:]   # h_n (and c_n); out[0] is h_n again

    def cases(rng, dtype):
        return [_rnn_inputs(rng, mode, dtype, (RNN_B,)), _rnn_inputs(rng, mode, dtype, (RNN_B,), state=False),
                _rnn_inputs(rng, mode, dtype, (RNN_B,), bias=False)]

    def torch_forward(torch, mode, x, w_ih, w_hh, h0=None, c0=None, b_ih=None, b_hh=None):
        nn = torch.nn
        kind = nn.LSTMCell if lstm else nn.GRUCell if mode == "gru" else nn.RNNCell
        kw = dict(nonlinearity=mode[4:]) if mode.startswith("rnn") else {}
        module = kind(RNN_I, RNN_H, bias=b_ih is not None, **kw).to(x.dtype)
        params = dict(weight_ih=w_ih, weight_hh=w_hh)
        if b_ih is not None:
            params.update(bias_ih=b_ih, bias_hh=b_hh)
        state = None if h0 is None else (h0, c0) if lstm else h0
        new = torch.func.functional_call(module, params, (x, state))
        return torch.cat([t.reshape(-1) for t in (new if lstm else (new,))])

    return KernelInfo(f"rnn_cell_{mode}", forward, backward, reference, cases,
                      lambda rng, dtype: [_rnn_inputs(rng, mode, dtype, (0,))],
                      ("x", "h0", "c0", *RNN_WEIGHTS), torch=torch_forward, f64=F64_TIGHT)
