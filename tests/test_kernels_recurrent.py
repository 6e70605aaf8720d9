"""recurrent kernels (RNN tanh/relu, LSTM, GRU): the stacks (float64
gradients with dropout, seeded dropout, torch parity over layers, directions,
packed lengths, batch_first), padding, cells against the sequence, long
sequences, the LSTM forget path, NaN, empty input, bad input.  rnn_forward /
rnn_backward and the cells against the NumPy step loop, their float64
gradients, views and torch parity: tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import check_grads
from tolerances import F32

MODES = ["rnn_tanh", "rnn_relu", "lstm", "gru"]
GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}
T, B, I, H = 4, 3, 5, 4
LENGTHS = np.array([2, 4, 1])


def make_inputs(rng, mode, dtype=np.float64, steps=T, batch=B, bias=True, scale=0.5):
    g = GATES[mode]
    d = dict(x=rng.standard_normal((steps, batch, I)), h0=rng.standard_normal((batch, H)),
             c0=rng.standard_normal((batch, H)) if mode == "lstm" else None,
             w_ih=scale * rng.standard_normal((g * H, I)), w_hh=scale * rng.standard_normal((g * H, H)),
             b_ih=scale * rng.standard_normal(g * H) if bias else None,
             b_hh=scale * rng.standard_normal(g * H) if bias else None)
    return {k: (None if v is None else v.astype(dtype)) for k, v in d.items()}


def run(inp, mode, lengths=None, reverse=False):
    return K.rnn_forward(inp["x"], inp["h0"], inp["w_ih"], inp["w_hh"], inp["b_ih"], inp["b_hh"], mode,
                         c0=inp["c0"], lengths=lengths, reverse=reverse)


# ---------------------------------------------------------------------------
# padding

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reverse", [False, True])
def test_padding_is_exactly_zero(rng, mode, reverse):
    """as pad_packed_sequence gives"""
    for dtype in (np.float32, np.float64):
        out = run(make_inputs(rng, mode, dtype), mode, LENGTHS, reverse)[0]
        for b, n in enumerate(LENGTHS):
            assert (out[n:, b] == 0).all()


@pytest.mark.parametrize("mode", MODES)
def test_padding_gets_no_gradient(rng, mode):
    inp = make_inputs(rng, mode)
    _, _, _, saved = run(inp, mode, LENGTHS, True)
    dout = rng.standard_normal((T, B, H))
    dx = K.rnn_backward(dout, None, None, inp["x"], inp["w_ih"], inp["w_hh"], saved, mode, LENGTHS, True)[0]
    dout_real = dout.copy()
    for b, n in enumerate(LENGTHS):
        assert (dx[n:, b] == 0).all()
        dout_real[n:, b] = 0
    # gradients arriving on padded outputs are ignored
    dx_real = K.rnn_backward(dout_real, None, None, inp["x"], inp["w_ih"], inp["w_hh"], saved, mode, LENGTHS,
                             True)[0]
    np.testing.assert_array_equal(dx, dx_real)


def test_backward_optional_outputs(rng):
    inp = make_inputs(rng, "gru", bias=False)
    _, _, _, saved = run(inp, "gru")
    dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh = K.rnn_backward(
        None, None, None, inp["x"], inp["w_ih"], inp["w_hh"], saved, "gru", need_dx=False, with_bias=False)
    assert dx is None and dc0 is None and db_ih is None and db_hh is None
    assert (dh0 == 0).all() and (dw_ih == 0).all() and (dw_hh == 0).all()


# ---------------------------------------------------------------------------
# cells

@pytest.mark.parametrize("mode", MODES)
def test_cell_equals_sequence_steps(rng, mode):
    inp = make_inputs(rng, mode)
    out, h_n, c_n, _ = run(inp, mode)
    h, c = inp["h0"], inp["c0"]
    for t in range(T):
        h, c, _ = K.rnn_cell_forward(inp["x"][t], h, inp["w_ih"], inp["w_hh"], inp["b_ih"], inp["b_hh"],
                                     mode, c)
        np.testing.assert_allclose(h, out[t], rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(h, h_n, rtol=1e-14, atol=1e-14)
    if mode == "lstm":
        np.testing.assert_allclose(c, c_n, rtol=1e-14, atol=1e-14)


# ---------------------------------------------------------------------------
# stacks: float64 gradients with dropout (the mask must match forward)

@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_stack_gradients_float64_with_dropout(rng, mode):
    g, L, D = GATES[mode], 2, 2
    inputs = dict(x=rng.standard_normal((T, B, I)), h0=rng.standard_normal((L * D, B, H)))
    if mode == "lstm":
        inputs["c0"] = rng.standard_normal((L * D, B, H))
    names = []
    for layer in range(L):
        for d in range(D):
            fan_in = I if layer == 0 else D * H
            for name, shape in (("w_ih", (g * H, fan_in)), ("w_hh", (g * H, H)), ("b_ih", (g * H,)),
                                ("b_hh", (g * H,))):
                inputs[f"{name}{layer}{d}"] = 0.5 * rng.standard_normal(shape)
                names.append(f"{name}{layer}{d}")

    def unpack(args):
        a = dict(zip(inputs, args))
        weights = [tuple(a[names[4 * k + j]] for j in range(4)) for k in range(L * D)]
        return a, weights

    def forward(*args):
        a, weights = unpack(args)
        out, h_n, c_n, _ = K.rnn_stack_forward(a["x"], a["h0"], weights, mode, L, True, c0=a.get("c0"),
                                               dropout=0.4, training=True, seed=7, lengths=LENGTHS)
        return np.concatenate([out.ravel(), h_n.ravel()] + ([c_n.ravel()] if c_n is not None else []))

    def grads(dflat, *args):
        a, weights = unpack(args)
        out, h_n, c_n, cache = K.rnn_stack_forward(a["x"], a["h0"], weights, mode, L, True, c0=a.get("c0"),
                                                   dropout=0.4, training=True, seed=7, lengths=LENGTHS)
        n1, n2 = out.size, out.size + h_n.size
        dc_n = dflat[n2:].reshape(h_n.shape) if c_n is not None else None
        dx, dh0, dc0, wg = K.rnn_stack_backward(dflat[:n1].reshape(out.shape), dflat[n1:n2].reshape(h_n.shape),
                                                dc_n, cache)
        res = dict(x=dx, h0=dh0)
        if dc0 is not None:
            res["c0"] = dc0
        for k in range(L * D):
            for j in range(4):
                res[names[4 * k + j]] = wg[k][j]
        return res

    # a subset of weights keeps the test fast; every kind of tensor is covered
    check_grads(forward, grads, inputs, ["x", "h0"] + (["c0"] if mode == "lstm" else [])
                + ["w_ih00", "w_hh01", "b_ih10", "b_hh11", "w_ih11"])


def test_stack_dropout_is_seeded(rng):
    inp = make_inputs(rng, "gru")
    w = [(inp["w_ih"], inp["w_hh"], inp["b_ih"], inp["b_hh"]),
         (0.5 * rng.standard_normal((3 * H, H)), inp["w_hh"], inp["b_ih"], inp["b_hh"])]
    run_seed = lambda seed, training=True: K.rnn_stack_forward(inp["x"], None, w, "gru", 2, dropout=0.5,
                                                                training=training, seed=seed)[0]
    np.testing.assert_array_equal(run_seed(3), run_seed(3))
    assert not np.allclose(run_seed(3), run_seed(4))
    np.testing.assert_array_equal(run_seed(3, False), run_seed(4, False))  # eval: no dropout


# ---------------------------------------------------------------------------
# torch parity

def torch_module(torch, mode, layers=1, bidirectional=False, dropout=0.0, batch_first=False, bias=True):
    nn = torch.nn
    kw = dict(num_layers=layers, bidirectional=bidirectional, dropout=dropout, batch_first=batch_first,
              bias=bias)
    if mode.startswith("rnn"):
        return nn.RNN(I, H, nonlinearity=mode[4:], **kw)
    return (nn.LSTM if mode == "lstm" else nn.GRU)(I, H, **kw)


PARAMS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def module_params(m, layers, D):
    """torch module's parameters, layer by layer and direction by direction, in PARAMS order."""
    out = []
    for layer in range(layers):
        for d in range(D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            out += [getattr(m, n + sfx) for n in PARAMS if getattr(m, n + sfx, None) is not None]
    return out


def flat(torch, tensors):
    """Tensors as one flat float32 tensor (one fixture entry instead of many)."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def weight_shapes(mode, layers, D, bias=True):
    G = GATES[mode]
    return [[(G * H, I if layer == 0 else D * H), (G * H, H)] + [(G * H,) if bias else None] * 2
            for layer in range(layers) for _ in range(D)]


def random_weights(seed, mode, layers, D, bias=True):
    """[(w_ih, w_hh, b_ih, b_hh)] per layer and direction (None for absent biases),
    float32 uniform in +-1/sqrt(H) as torch initialises them, from a seeded NumPy rng."""
    r, k = np.random.default_rng(seed), 1 / np.sqrt(H)
    return [tuple(None if s is None else r.uniform(-k, k, s).astype(np.float32) for s in group)
            for group in weight_shapes(mode, layers, D, bias)]


def unflatten_weights(vector, mode, layers, D, bias=True):
    """The per-layer-and-direction tuples (like random_weights) from the flat vector flat() made."""
    out, at = [], 0
    for group in weight_shapes(mode, layers, D, bias):
        arrays = []
        for shape in group:
            size = 0 if shape is None else int(np.prod(shape))
            arrays.append(None if shape is None else vector[at:at + size].reshape(shape))
            at += size
        out.append(tuple(arrays))
    assert at == vector.size, "flat vector does not match the layer shapes"
    return out


def torch_run(torch, m, x, h0, c0, lengths, dout, dh_n, dc_n, mode, batch_first=False):
    """torch forward (packed when lengths given) and backward of sum(out*dout) + sum(h_n*dh_n) + ...:
    a dict of out, h_n, dx and, when they exist, c_n, dh0, dc0."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    xt = torch.tensor(x, requires_grad=True)
    ht = None if h0 is None else torch.tensor(h0, requires_grad=True)
    ct = None if c0 is None else torch.tensor(c0, requires_grad=True)
    state = (ht, ct) if mode == "lstm" and ht is not None else ht
    inp = xt if lengths is None else pack_padded_sequence(xt, torch.tensor(lengths), batch_first=batch_first,
                                                          enforce_sorted=False)
    out, st = m(inp, state)
    if lengths is not None:
        out, _ = pad_packed_sequence(out, batch_first=batch_first, total_length=x.shape[1 if batch_first else 0])
    h_n, c_n = st if mode == "lstm" else (st, None)
    loss = (out * torch.tensor(dout)).sum() + (h_n * torch.tensor(dh_n)).sum()
    if c_n is not None:
        loss = loss + (c_n * torch.tensor(dc_n)).sum()
    loss.backward()
    res = dict(out=out, h_n=h_n, dx=xt.grad)
    for name, value in (("c_n", c_n), ("dh0", None if ht is None else ht.grad),
                        ("dc0", None if ct is None else ct.grad)):
        if value is not None:
            res[name] = value
    return res


def packed_inputs(*arrays):
    """The fixture's input fingerprint: the arrays (None skipped) as one float64 vector."""
    return dict(data=np.concatenate([np.asarray(a, np.float64).reshape(-1) for a in arrays if a is not None]))


def rnn_reference(torch_ref, weights, module_args, mode, layers, D, x, h0, c0, lengths, dout, dh_n, dc_n,
                  batch_first=False):
    """torch's module (module_args for torch_module) holding ``weights``, run on
    the inputs: its results and its weight gradients (as one flat vector,
    ``unflatten_weights`` splits it), live or from the fixture."""

    def torch_side(torch):
        m = torch_module(torch, *module_args)
        m.train()
        params = module_params(m, layers, D)
        with torch.no_grad():
            for p, w in zip(params, [w for group in weights for w in group if w is not None]):
                p.copy_(torch.tensor(w))
        res = torch_run(torch, m, x, h0, c0, lengths, dout, dh_n, dc_n, mode, batch_first=batch_first)
        res["wgrads"] = flat(torch, [p.grad for p in params])
        return res

    inputs = packed_inputs(x, h0, c0, dout, dh_n, dc_n, lengths, *[w for group in weights for w in group])
    return torch_ref(torch_side, inputs=inputs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (1, True), (2, False), (2, True)])
@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize("lengths", [None, LENGTHS])
def test_torch_parity(rng, mode, layers, bidirectional, with_state, lengths, torch_ref):
    D = 2 if bidirectional else 1
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    x = f32(T, B, I)
    h0 = f32(layers * D, B, H) if with_state else None
    c0 = f32(layers * D, B, H) if with_state and mode == "lstm" else None
    dout, dh_n, dc_n = f32(T, B, D * H), f32(layers * D, B, H), f32(layers * D, B, H)
    if mode != "lstm":
        dc_n = None
    weights = random_weights(0, mode, layers, D)
    ref = rnn_reference(torch_ref, weights, (mode, layers, bidirectional), mode, layers, D,
                        x, h0, c0, lengths, dout, dh_n, dc_n)

    out, h_n, c_n, cache = K.rnn_stack_forward(x, h0, weights, mode, layers, bidirectional, c0=c0, lengths=lengths)
    dx, dh0, dc0, wgrads = K.rnn_stack_backward(dout, dh_n, dc_n, cache)

    np.testing.assert_allclose(out, ref["out"], **F32)
    np.testing.assert_allclose(h_n, ref["h_n"], **F32)
    if mode == "lstm":
        np.testing.assert_allclose(c_n, ref["c_n"], **F32)
    np.testing.assert_allclose(dx, ref["dx"], **F32)
    if with_state:
        np.testing.assert_allclose(dh0, ref["dh0"], **F32)
        if mode == "lstm":
            np.testing.assert_allclose(dc0, ref["dc0"], **F32)
    theirs_all = unflatten_weights(ref["wgrads"], mode, layers, D)
    assert len(wgrads) == len(theirs_all) == layers * D
    for ours, theirs in zip(wgrads, theirs_all):
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, **F32)


def test_torch_parity_batch_first_no_bias(rng, torch_ref):
    x = rng.standard_normal((B, T, I)).astype(np.float32)
    dout = rng.standard_normal((B, T, 2 * H)).astype(np.float32)
    zeros = np.zeros((4, B, H), np.float32)
    weights = random_weights(1, "lstm", 2, 2, bias=False)
    ref = rnn_reference(torch_ref, weights, ("lstm", 2, True, 0.0, True, False), "lstm", 2, 2,
                        x, None, None, LENGTHS, dout, zeros, zeros, batch_first=True)
    assert weights[0][2] is None
    out, h_n, c_n, cache = K.rnn_stack_forward(x, None, weights, "lstm", 2, True, lengths=list(LENGTHS),
                                               batch_first=True)
    dx, _, _, wgrads = K.rnn_stack_backward(dout, None, None, cache)
    np.testing.assert_allclose(out, ref["out"], **F32)
    np.testing.assert_allclose(h_n, ref["h_n"], **F32)
    np.testing.assert_allclose(dx, ref["dx"], **F32)
    theirs_all = unflatten_weights(ref["wgrads"], "lstm", 2, 2, bias=False)
    assert len(wgrads) == len(theirs_all) == 4
    for ours, theirs in zip(wgrads, theirs_all):
        assert ours[2] is None and ours[3] is None
        np.testing.assert_allclose(ours[0], theirs[0], **F32)
        np.testing.assert_allclose(ours[1], theirs[1], **F32)


def test_torch_parity_dropout_one(rng, torch_ref):
    """dropout=1 zeroes layer 0's output deterministically in both libraries."""
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    dout = rng.standard_normal((T, B, H)).astype(np.float32)
    zeros = np.zeros((2, B, H), np.float32)
    weights = random_weights(2, "gru", 2, 1)
    ref = rnn_reference(torch_ref, weights, ("gru", 2, False, 1.0), "gru", 2, 1,
                        x, None, None, None, dout, zeros, None)
    out, h_n, _, cache = K.rnn_stack_forward(x, None, weights, "gru", 2, dropout=1.0, training=True)
    dx, _, _, wgrads = K.rnn_stack_backward(dout, None, None, cache)
    np.testing.assert_allclose(out, ref["out"], **F32)
    np.testing.assert_allclose(h_n, ref["h_n"], **F32)
    np.testing.assert_allclose(dx, ref["dx"], **F32)
    assert (dx == 0).all()
    theirs_all = unflatten_weights(ref["wgrads"], "gru", 2, 1)
    assert len(wgrads) == len(theirs_all) == 2
    for ours, theirs in zip(wgrads, theirs_all):
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, **F32)


# ---------------------------------------------------------------------------
# long sequences, the forget path, special values

@pytest.mark.parametrize("mode", MODES)
def test_long_sequence_gradients_finite(rng, mode):
    inp = make_inputs(rng, mode, dtype=np.float32, steps=1000, batch=2)
    out, h_n, c_n, saved = run(inp, mode)
    grads = K.rnn_backward(np.ones_like(out), np.ones_like(h_n), None if c_n is None else np.ones_like(c_n),
                           inp["x"], inp["w_ih"], inp["w_hh"], saved, mode)
    assert np.isfinite(out).all()
    for g in grads:
        assert g is None or np.isfinite(g).all()


def test_lstm_forget_gate_one_keeps_cell_state(rng):
    """f = 1 and i = 0 (large biases): c stays c0 and dL/dc0 = dL/dc_n."""
    inp = make_inputs(rng, "lstm", steps=20)
    b = np.zeros(4 * H)
    b[:H], b[H:2 * H] = -60.0, 60.0   # input gate closed, forget gate open
    inp["b_ih"], inp["b_hh"] = b, np.zeros(4 * H)
    inp["w_ih"][:2 * H] *= 0.1
    inp["w_hh"][:2 * H] *= 0.1
    out, h_n, c_n, saved = run(inp, "lstm")
    np.testing.assert_allclose(c_n, inp["c0"], rtol=1e-12, atol=1e-12)
    dc_n = rng.standard_normal((B, H))
    dc0 = K.rnn_backward(None, None, dc_n, inp["x"], inp["w_ih"], inp["w_hh"], saved, "lstm")[2]
    np.testing.assert_allclose(dc0, dc_n, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_nan_propagates(rng, mode):
    inp = make_inputs(rng, mode, dtype=np.float32)
    inp["x"][1, 0, 2] = np.nan
    out, h_n, _, saved = run(inp, mode)
    assert np.isnan(out[1:, 0]).all() and np.isnan(h_n[0]).all()
    assert np.isfinite(out[:, 1:]).all() and np.isfinite(out[0]).all()
    grads = K.rnn_backward(np.ones_like(out), None, None, inp["x"], inp["w_ih"], inp["w_hh"], saved, mode)
    assert np.isnan(grads[3]).any()   # dw_ih sums x
    # relu' is taken as [h' > 0] with NaN passing the gradient (torch's
    # threshold_backward does the same), so dx stays finite for rnn_relu
    assert np.isnan(grads[0][:, 0]).any() == (mode != "rnn_relu")


@pytest.mark.parametrize("mode", MODES)
def test_empty(rng, mode):
    inp = make_inputs(rng, mode, steps=0)
    out, h_n, c_n, saved = run(inp, mode)
    assert out.shape == (0, B, H)
    np.testing.assert_array_equal(h_n, inp["h0"])
    dx, dh0 = K.rnn_backward(out, h_n, c_n, inp["x"], inp["w_ih"], inp["w_hh"], saved, mode)[:2]
    assert dx.shape == (0, B, I)
    np.testing.assert_array_equal(dh0, h_n)   # identity: dh0 = dh_n
    inp = make_inputs(rng, mode, batch=0)
    out, h_n, _, saved = run(inp, mode)
    assert out.shape == (T, 0, H) and h_n.shape == (0, H)


# ---------------------------------------------------------------------------
# bad input

def test_bad_input(rng):
    inp = make_inputs(rng, "lstm")
    x, h0, c0, w_ih, w_hh, b_ih, b_hh = inp.values()
    fwd = K.rnn_forward
    with pytest.raises(ValueError, match=r"rnn_forward: x.shape\[-1\] must be 5 \(w_ih.shape\[1\], the input size\), got 6"):
        fwd(rng.standard_normal((T, B, 6)), h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0)
    with pytest.raises(ValueError, match=r"rnn_forward: h0 must have shape \(3, 4\) \(batch, hidden\), got \(2, 4\)"):
        fwd(x, h0[:2], w_ih, w_hh, b_ih, b_hh, "lstm", c0)
    with pytest.raises(ValueError, match=r"rnn_forward: c0 must have shape \(3, 4\) \(batch, hidden\), got \(1, 3, 4\)"):
        fwd(x, h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0[None])
    with pytest.raises(ValueError, match=r"rnn_forward: c0 must be None for mode 'gru'"):
        g = make_inputs(rng, "gru")
        fwd(x, h0, g["w_ih"], g["w_hh"], None, None, "gru", c0)
    with pytest.raises(ValueError, match=r"rnn_forward: w_hh.shape\[0\] must be 16 \(4 \* w_hh.shape\[1\] for lstm\), got 12"):
        fwd(x, h0, w_ih, w_hh[:12], b_ih, b_hh, "lstm", c0)
    with pytest.raises(ValueError, match=r"rnn_forward: w_ih.shape\[0\] must be 16 \(w_hh.shape\[0\]\), got 4"):
        fwd(x, h0, w_ih[:4], w_hh, b_ih, b_hh, "lstm", c0)
    with pytest.raises(ValueError, match=r"rnn_forward: b_hh.shape\[0\] must be 16"):
        fwd(x, h0, w_ih, w_hh, b_ih, b_hh[:4], "lstm", c0)
    with pytest.raises(ValueError, match=r"rnn_forward: lengths\[1\] must be in \[1, 4\] .*, got 5"):
        fwd(x, h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0, np.array([1, 5, 2]))
    with pytest.raises(ValueError, match=r"rnn_forward: lengths\[2\] must be in \[1, 4\] .*, got 0"):
        fwd(x, h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0, np.array([1, 2, 0]))
    with pytest.raises(ValueError, match=r"rnn_forward: lengths.shape\[0\] must be 3"):
        fwd(x, h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0, np.array([1, 2]))
    with pytest.raises(TypeError, match="rnn_forward: lengths must have dtype an integer dtype, got float64"):
        fwd(x, h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0, np.array([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="rnn_forward: w_hh must have dtype float64, got float32"):
        fwd(x, h0, w_ih, w_hh.astype(np.float32), b_ih, b_hh, "lstm", c0)
    with pytest.raises(TypeError, match="rnn_forward: h0 must have dtype float64, got float32"):
        fwd(x, h0.astype(np.float32), w_ih, w_hh, b_ih, b_hh, "lstm", c0)
    with pytest.raises(TypeError, match="rnn_forward: x must have dtype float32 or float64, got int64"):
        fwd(x.astype(np.int64), h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0)
    with pytest.raises(ValueError, match="rnn_forward: x must have 3 dimensions, got 2"):
        fwd(x[0], h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0)
    with pytest.raises(ValueError, match="rnn_forward: mode must be 'rnn_tanh', 'rnn_relu', 'lstm' or 'gru', got 'LSTM'"):
        fwd(x, h0, w_ih, w_hh, b_ih, b_hh, "LSTM", c0)
    with pytest.raises(TypeError, match="rnn_forward: mode must be a str, got int"):
        fwd(x, h0, w_ih, w_hh, b_ih, b_hh, 2, c0)
    with pytest.raises(TypeError, match="rnn_forward: x must be a numpy.ndarray, got list"):
        fwd(x.tolist(), h0, w_ih, w_hh, b_ih, b_hh, "lstm", c0)


def test_bad_input_backward_and_cells(rng):
    inp = make_inputs(rng, "gru")
    x, h0, _, w_ih, w_hh, b_ih, b_hh = inp.values()
    out, h_n, _, saved = K.rnn_forward(x, h0, w_ih, w_hh, b_ih, b_hh, "gru")
    bwd = K.rnn_backward
    with pytest.raises(ValueError, match=r"rnn_backward: saved.shape\[0\] must be \d+ \(the size rnn_forward returns"):
        bwd(out, None, None, x, w_ih, w_hh, saved[:-1], "gru")
    with pytest.raises(ValueError, match=r"rnn_backward: dout.shape\[2\] must be 4 \(w_hh.shape\[1\]\), got 3"):
        bwd(out[..., :3], None, None, x, w_ih, w_hh, saved, "gru")
    with pytest.raises(ValueError, match=r"rnn_backward: dh_n must have shape \(3, 4\)"):
        bwd(out, h_n[None], None, x, w_ih, w_hh, saved, "gru")
    with pytest.raises(ValueError, match="rnn_backward: dc_n must be None for mode 'gru'"):
        bwd(out, None, h_n, x, w_ih, w_hh, saved, "gru")
    with pytest.raises(TypeError, match="rnn_backward: saved must have dtype float64, got float32"):
        bwd(out, None, None, x, w_ih, w_hh, saved.astype(np.float32), "gru")
    with pytest.raises(ValueError, match=r"rnn_cell_forward: h must have shape \(3, 4\) \(batch, hidden\), got \(3, 5\)"):
        K.rnn_cell_forward(x[0], np.zeros((B, 5)), w_ih, w_hh, b_ih, b_hh, "gru")
    with pytest.raises(ValueError, match="rnn_cell_forward: x must have 2 dimensions, got 3"):
        K.rnn_cell_forward(x, h0, w_ih, w_hh, b_ih, b_hh, "gru")
    _, _, csaved = K.rnn_cell_forward(x[0], h0, w_ih, w_hh, b_ih, b_hh, "gru")
    with pytest.raises(ValueError, match=r"rnn_cell_backward: dh_new must have shape \(3, 4\)"):
        K.rnn_cell_backward(h0[:1], None, x[0], h0, None, w_ih, w_hh, b_ih, b_hh, csaved, "gru")


def test_bad_input_stack(rng):
    inp = make_inputs(rng, "lstm")
    w = [(inp["w_ih"], inp["w_hh"], inp["b_ih"], inp["b_hh"])]
    fn = K.rnn_stack_forward
    with pytest.raises(ValueError, match=r"rnn_stack_forward: h0 must have shape \(1, 3, 4\) "
                                         r"\(num_layers \* num_directions, batch, hidden\), got \(2, 3, 4\)"):
        fn(inp["x"], np.zeros((2, B, H)), w, "lstm")
    with pytest.raises(ValueError, match=r"rnn_stack_forward: c0 must have shape \(1, 3, 4\)"):
        fn(inp["x"], None, w, "lstm", c0=np.zeros((B, H)))
    with pytest.raises(ValueError, match="rnn_stack_forward: weights must have 2 entries"):
        fn(inp["x"], None, w, "lstm", bidirectional=True)
    with pytest.raises(ValueError, match="rnn_stack_forward: dropout must be in"):
        fn(inp["x"], None, w, "lstm", dropout=1.5)
    with pytest.raises(ValueError, match="rnn_stack_forward: mode must be one of"):
        fn(inp["x"], None, w, "elman")
    with pytest.raises(ValueError, match=r"rnn_forward: x.shape\[-1\] must be 5"):
        fn(inp["x"][..., :4], None, w, "lstm")
