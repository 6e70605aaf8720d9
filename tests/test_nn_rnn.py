"""nn.RNN / LSTM / GRU, the cells and packed sequences: torch parity from the
same weights (outputs, final states, every gradient), float64 gradchecks
through the modules, state_dict keys, init, dropout and bad input."""
import math
import warnings

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from ctransformer.autograd import gradcheck
from ctransformer.nn.utils.rnn import (PackedSequence, pack_padded_sequence, pack_sequence,
                                       pad_packed_sequence)
from nn_parity import (F32, assert_param_grads, load_torch_state, torch_param_grads, torch_reference,
                       torch_state)

KINDS = [("RNN", "tanh"), ("RNN", "relu"), ("LSTM", None), ("GRU", None)]
I, H, T, B = 3, 4, 5, 3


def make_torch(torch, kind, act, **kw):
    """Torch's module (inside a torch side)."""
    extra = {} if act is None else {"nonlinearity": act}
    return getattr(torch.nn, kind)(I, H, **extra, **kw)


def make_ours(kind, act, state, **kw):
    """Our module, with the weights torch's had (``torch_state``)."""
    extra = {} if act is None else {"nonlinearity": act}
    ours = getattr(nn, kind)(I, H, **extra, **kw)
    load_torch_state(ours, state)
    return ours


def loss_of(lib, out, states, rng_seed=0):
    """A loss touching every output with distinct weights (same in both libraries)."""
    parts = [out] + list(states)
    total = None
    for k, p in enumerate(parts):
        w = np.random.default_rng(rng_seed + k).standard_normal(tuple(p.shape)).astype(np.float32)
        term = (p * lib.tensor(w)).sum()
        total = term if total is None else total + term
    return total


def assert_close(ours, ref, what=""):
    np.testing.assert_allclose(ours.detach().numpy(), ref, err_msg=what, **F32)


def states_of(kind, hx):
    return hx if kind == "LSTM" else (hx,)


def hx_of(kind, states):
    """The hx argument made of the initial-state tensors (None without)."""
    if not states:
        return None
    return tuple(states) if kind in ("LSTM", "LSTMCell") else states[0]


def arrays_dict(**named):
    """inputs= for torch_reference: lists of arrays become name0, name1, ..."""
    out = {}
    for name, value in named.items():
        if isinstance(value, (list, tuple)):
            out.update({f"{name}{i}": v for i, v in enumerate(value)})
        else:
            out[name] = value
    return out


# ---------------------------------------------------------------------------
# torch parity, padded batches

@pytest.mark.parametrize("kind,act", KINDS)
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_module_torch_parity(kind, act, layers, bidirectional, batch_first, with_state):
    rng = np.random.default_rng(layers * 7 + bidirectional * 3 + batch_first)
    kw = dict(num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    D = 2 if bidirectional else 1
    x = rng.standard_normal((B, T, I) if batch_first else (T, B, I)).astype(np.float32)
    n = (2 if kind == "LSTM" else 1) if with_state else 0
    s0 = [rng.standard_normal((layers * D, B, H)).astype(np.float32) for _ in range(n)]

    def torch_side(torch):
        ref = make_torch(torch, kind, act, **kw)
        state = torch_state(ref)
        x_t = torch.tensor(x, requires_grad=True)
        s_t = [torch.tensor(s, requires_grad=True) for s in s0]
        out, h = ref(x_t, hx_of(kind, s_t))
        loss_of(torch, out, states_of(kind, h)).backward()
        return dict(state=state, out=out, h=list(states_of(kind, h)), dx=x_t.grad, ds=[s.grad for s in s_t],
                    params=torch_param_grads(ref))

    ref = torch_reference(torch_side, arrays_dict(x=x, s=s0))
    ours = make_ours(kind, act, ref["state"], **kw)
    x_c = ct.tensor(x, requires_grad=True)
    s_c = [ct.tensor(s, requires_grad=True) for s in s0]
    out_c, h_c = ours(x_c, hx_of(kind, s_c))
    assert tuple(out_c.shape) == ref["out"].shape
    assert_close(out_c, ref["out"], "output")
    for a, b in zip(states_of(kind, h_c), ref["h"]):
        assert tuple(a.shape) == (layers * D, B, H)
        assert_close(a, b, "final state")
    loss_of(ct, out_c, states_of(kind, h_c)).backward()
    assert_close(x_c.grad, ref["dx"], "grad of input")
    for a, b in zip(s_c, ref["ds"]):
        assert_close(a.grad, b, "grad of initial state")
    assert_param_grads(ours, ref["params"])


@pytest.mark.parametrize("kind,act", KINDS)
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_torch_parity(kind, act, enforce_sorted):
    rng = np.random.default_rng(3)
    lengths = [5, 3, 2] if enforce_sorted else [3, 5, 2]
    kw = dict(num_layers=2, bidirectional=True)
    x = rng.standard_normal((T, B, I)).astype(np.float32)

    def torch_side(torch):
        ref = make_torch(torch, kind, act, **kw)
        state = torch_state(ref)
        x_t = torch.tensor(x, requires_grad=True)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x_t, torch.tensor(lengths), enforce_sorted=enforce_sorted)
        out, h = ref(packed)
        pad, lens = torch.nn.utils.rnn.pad_packed_sequence(out, padding_value=-1.0)
        loss_of(torch, pad, states_of(kind, h)).backward()
        return dict(state=state, batch_sizes=packed.batch_sizes, packed_data=packed.data, pad=pad, lens=lens,
                    h=list(states_of(kind, h)), dx=x_t.grad, params=torch_param_grads(ref))

    ref = torch_reference(torch_side, dict(x=x, lengths=np.array(lengths)))
    ours = make_ours(kind, act, ref["state"], **kw)
    x_c = ct.tensor(x, requires_grad=True)
    packed_c = pack_padded_sequence(x_c, lengths, enforce_sorted=enforce_sorted)
    np.testing.assert_array_equal(packed_c.batch_sizes.numpy(), ref["batch_sizes"])
    assert_close(packed_c.data, ref["packed_data"], "packed data")
    out_c, h_c = ours(packed_c)
    assert isinstance(out_c, PackedSequence)
    pad_c, len_c = pad_packed_sequence(out_c, padding_value=-1.0)
    np.testing.assert_array_equal(len_c.numpy(), ref["lens"])
    assert_close(pad_c, ref["pad"], "padded output")
    for a, b in zip(states_of(kind, h_c), ref["h"]):
        assert_close(a, b, "final state")
    loss_of(ct, pad_c, states_of(kind, h_c)).backward()
    assert_close(x_c.grad, ref["dx"], "grad of input")
    assert_param_grads(ours, ref["params"])


def test_packed_batch_first_and_total_length():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((B, T + 2, I)).astype(np.float32)
    lengths = [4, 4, 1]

    def torch_side(torch):
        ref = make_torch(torch, "GRU", None, batch_first=True)
        out, _ = ref(torch.nn.utils.rnn.pack_padded_sequence(torch.tensor(x), lengths, batch_first=True))
        pad, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T + 2)
        return dict(state=torch_state(ref), pad=pad)

    ref = torch_reference(torch_side, dict(x=x))
    ours = make_ours("GRU", None, ref["state"], batch_first=True)
    out_c, _ = ours(pack_padded_sequence(ct.tensor(x), lengths, batch_first=True))
    pad_c, _ = pad_packed_sequence(out_c, batch_first=True, total_length=T + 2)
    assert tuple(pad_c.shape) == (B, T + 2, H)
    assert_close(pad_c, ref["pad"])


def test_pack_sequence_matches_torch():
    rng = np.random.default_rng(5)
    seqs = [rng.standard_normal((n, I)).astype(np.float32) for n in (4, 2, 1)]

    def torch_side(torch):
        p_t = torch.nn.utils.rnn.pack_sequence([torch.tensor(s) for s in seqs])
        return dict(data=p_t.data, batch_sizes=p_t.batch_sizes)

    ref = torch_reference(torch_side, arrays_dict(seq=seqs))
    p_c = pack_sequence([ct.tensor(s) for s in seqs])
    assert_close(p_c.data, ref["data"])
    np.testing.assert_array_equal(p_c.batch_sizes.numpy(), ref["batch_sizes"])


@pytest.mark.parametrize("kind,act", [("LSTM", None), ("GRU", None), ("RNN", "tanh")])
@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched_input(kind, act, batch_first):
    rng = np.random.default_rng(6)
    kw = dict(num_layers=2, batch_first=batch_first)
    x = rng.standard_normal((T, I)).astype(np.float32)
    h = rng.standard_normal((2, H)).astype(np.float32)
    s0 = [h, h * 0.5] if kind == "LSTM" else [h]

    def torch_side(torch):
        ref = make_torch(torch, kind, act, **kw)
        state = torch_state(ref)
        x_t = torch.tensor(x, requires_grad=True)
        out, h_t = ref(x_t, hx_of(kind, [torch.tensor(s) for s in s0]))
        loss_of(torch, out, states_of(kind, h_t)).backward()
        return dict(state=state, out=out, h=list(states_of(kind, h_t)), dx=x_t.grad)

    ref = torch_reference(torch_side, dict(x=x, h=h))
    ours = make_ours(kind, act, ref["state"], **kw)
    x_c = ct.tensor(x, requires_grad=True)
    out_c, h_c = ours(x_c, hx_of(kind, [ct.tensor(s) for s in s0]))
    assert tuple(out_c.shape) == (T, H)
    assert_close(out_c, ref["out"])
    for a, b in zip(states_of(kind, h_c), ref["h"]):
        assert tuple(a.shape) == (2, H)
        assert_close(a, b)
    loss_of(ct, out_c, states_of(kind, h_c)).backward()
    assert_close(x_c.grad, ref["dx"])


@pytest.mark.parametrize("kind,act", KINDS)
def test_no_bias(kind, act):
    rng = np.random.default_rng(7)
    kw = dict(bias=False, num_layers=2)
    x = rng.standard_normal((T, B, I)).astype(np.float32)

    def torch_side(torch):
        ref = make_torch(torch, kind, act, **kw)
        state = torch_state(ref)
        out, h = ref(torch.tensor(x, requires_grad=True))
        loss_of(torch, out, states_of(kind, h)).backward()
        return dict(state=state, out=out, params=torch_param_grads(ref))

    ref = torch_reference(torch_side, dict(x=x))
    extra = {} if act is None else {"nonlinearity": act}
    ours = getattr(nn, kind)(I, H, **extra, **kw)
    assert list(ours.state_dict()) == list(ref["state"])
    load_torch_state(ours, ref["state"])
    out_c, h_c = ours(ct.tensor(x, requires_grad=True))
    assert_close(out_c, ref["out"])
    loss_of(ct, out_c, states_of(kind, h_c)).backward()
    assert_param_grads(ours, ref["params"])


# ---------------------------------------------------------------------------
# cells

@pytest.mark.parametrize("kind,act", [("RNNCell", "tanh"), ("RNNCell", "relu"), ("LSTMCell", None),
                                      ("GRUCell", None)])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("unbatched", [False, True])
def test_cell_torch_parity(kind, act, with_state, unbatched):
    rng = np.random.default_rng(8)
    lead = () if unbatched else (B,)
    x = rng.standard_normal(lead + (I,)).astype(np.float32)
    n = (2 if kind == "LSTMCell" else 1) if with_state else 0
    s0 = [rng.standard_normal(lead + (H,)).astype(np.float32) for _ in range(n)]

    def torch_side(torch):
        ref = make_torch(torch, kind, act)
        state = torch_state(ref)
        x_t = torch.tensor(x, requires_grad=True)
        s_t = [torch.tensor(s, requires_grad=True) for s in s0]
        res = ref(x_t, hx_of(kind, s_t))
        res = res if isinstance(res, tuple) else (res,)
        loss_of(torch, res[0], res[1:]).backward()
        return dict(state=state, res=list(res), dx=x_t.grad, ds=[s.grad for s in s_t],
                    params=torch_param_grads(ref))

    ref = torch_reference(torch_side, arrays_dict(x=x, s=s0))
    extra = {} if act is None else {"nonlinearity": act}
    ours = getattr(nn, kind)(I, H, **extra)
    assert list(ours.state_dict()) == list(ref["state"])
    load_torch_state(ours, ref["state"])
    x_c = ct.tensor(x, requires_grad=True)
    s_c = [ct.tensor(s, requires_grad=True) for s in s0]
    res_c = ours(x_c, hx_of(kind, s_c))
    res_c = res_c if isinstance(res_c, tuple) else (res_c,)
    assert len(res_c) == len(ref["res"])
    for a, b in zip(res_c, ref["res"]):
        assert tuple(a.shape) == lead + (H,)
        assert_close(a, b)
    loss_of(ct, res_c[0], res_c[1:]).backward()
    assert_close(x_c.grad, ref["dx"])
    for a, b in zip(s_c, ref["ds"]):
        assert_close(a.grad, b)
    assert_param_grads(ours, ref["params"])


# ---------------------------------------------------------------------------
# float64 gradchecks through the modules (tiny sizes)

def _double(module):
    return module.double()


@pytest.mark.parametrize("kind,act", KINDS)
def test_gradcheck_module_float64(kind, act):
    ct.manual_seed(0)
    extra = {} if act is None else {"nonlinearity": act}
    m = _double(getattr(nn, kind)(2, 2, num_layers=2, bidirectional=True, **extra))
    rng = np.random.default_rng(9)
    x = ct.tensor(rng.standard_normal((3, 1, 2)), dtype=ct.float64, requires_grad=True)
    h0 = ct.tensor(rng.standard_normal((4, 1, 2)), dtype=ct.float64, requires_grad=True)
    c0 = ct.tensor(rng.standard_normal((4, 1, 2)), dtype=ct.float64, requires_grad=True)
    params = list(m.parameters())

    def fn(x, h0, c0, *ws):
        out, hx = m(x, (h0, c0) if kind == "LSTM" else h0)
        return (out,) + tuple(states_of(kind, hx))

    inputs = (x, h0, c0 if kind == "LSTM" else ct.tensor(np.zeros(1))) + tuple(params)
    assert gradcheck(fn, inputs)


def test_gradcheck_packed_and_dropout_float64():
    m = nn.LSTM(2, 2, num_layers=2, dropout=0.3).double()
    m.train()
    rng = np.random.default_rng(10)
    x = ct.tensor(rng.standard_normal((4, 3, 2)), dtype=ct.float64, requires_grad=True)

    def fn(x, *ws):
        ct.manual_seed(123)  # the same dropout masks on every call
        out, (h, c) = m(pack_padded_sequence(x, [4, 2, 1]))
        return pad_packed_sequence(out)[0], h, c

    assert gradcheck(fn, (x,) + tuple(m.parameters()))


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
def test_gradcheck_cells_float64(kind):
    m = getattr(nn, kind)(3, 2).double()
    rng = np.random.default_rng(11)
    x = ct.tensor(rng.standard_normal((2, 3)), dtype=ct.float64, requires_grad=True)
    h = ct.tensor(rng.standard_normal((2, 2)), dtype=ct.float64, requires_grad=True)
    c = ct.tensor(rng.standard_normal((2, 2)), dtype=ct.float64, requires_grad=True)

    def fn(x, h, c, *ws):
        return m(x, (h, c)) if kind == "LSTMCell" else m(x, h)

    assert gradcheck(fn, (x, h, c) + tuple(m.parameters()))


# ---------------------------------------------------------------------------
# parameters, init, dropout

@pytest.mark.parametrize("kind,act", KINDS)
def test_state_dict_keys_and_shapes_match_torch(kind, act):
    extra = {} if act is None else {"nonlinearity": act}
    ours = getattr(nn, kind)(3, 5, num_layers=3, bidirectional=True, **extra)

    def torch_side(torch):
        ref = getattr(torch.nn, kind)(3, 5, num_layers=3, bidirectional=True, **extra)
        sd = ref.state_dict()
        return dict(keys=list(sd), shapes=[list(v.shape) for v in sd.values()],
                    params=[n for n, _ in ref.named_parameters()])

    ref = torch_reference(torch_side)
    sd = ours.state_dict()
    assert list(sd) == list(ref["keys"])
    for k, shape in zip(sd, ref["shapes"]):
        assert tuple(sd[k].shape) == tuple(int(d) for d in shape), k
    assert [n for n, _ in ours.named_parameters()] == list(ref["params"])


def test_init_is_uniform_in_one_over_sqrt_hidden():
    ct.manual_seed(1)
    m = nn.LSTM(30, 64, num_layers=2)
    bound = 1 / math.sqrt(64)
    values = np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    assert np.abs(values).max() <= bound
    assert values.min() < -0.95 * bound and values.max() > 0.95 * bound
    assert abs(values.mean()) < 0.01 * bound * 10 and abs(values.std() - bound / math.sqrt(3)) < 0.02 * bound
    cell = nn.GRUCell(4, 16)
    assert all(np.abs(p.detach().numpy()).max() <= 0.25 for p in cell.parameters())


def test_dropout_between_layers_only_in_training():
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = ct.randn(5, 2, 3)
    m.eval()
    a, b = m(x)[0], m(x)[0]
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    no_drop = nn.GRU(3, 4, num_layers=2)
    no_drop.load_state_dict(m.state_dict())
    np.testing.assert_allclose(no_drop(x)[0].detach().numpy(), a.detach().numpy(), rtol=0, atol=0)
    m.train()
    ct.manual_seed(5)
    c = m(x)[0]
    ct.manual_seed(5)
    d = m(x)[0]
    e = m(x)[0]
    np.testing.assert_array_equal(c.detach().numpy(), d.detach().numpy())       # seeded from the default generator
    assert not np.allclose(c.detach().numpy(), a.detach().numpy())                # dropout changed the result
    assert not np.array_equal(d.detach().numpy(), e.detach().numpy())             # a fresh mask per call


def test_dropout_one_matches_torch():
    """dropout=1 zeroes layer 0's output: deterministic in both libraries."""
    x = np.random.default_rng(12).standard_normal((T, B, I)).astype(np.float32)

    def torch_side(torch):
        ref = make_torch(torch, "LSTM", None, num_layers=2, dropout=1.0)
        return dict(state=torch_state(ref), out=ref(torch.tensor(x))[0])

    ref = torch_reference(torch_side, dict(x=x))
    ours = make_ours("LSTM", None, ref["state"], num_layers=2, dropout=1.0)
    assert_close(ours(ct.tensor(x))[0], ref["out"])


def test_dropout_warning_and_proj_size():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        nn.LSTM(3, 4, dropout=0.5)
    assert any("non-zero dropout expects num_layers greater than 1" in str(x.message) for x in w)
    with pytest.raises(NotImplementedError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=2)


def test_repr_and_module_api():
    m = nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True)
    ref = torch_reference(lambda torch: dict(
        repr=repr(torch.nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True)),
        numel=sum(p.numel() for p in torch.nn.LSTM(3, 4, 2, batch_first=True, bidirectional=True).parameters())))
    assert repr(m) == ref["repr"]
    assert len(m.all_weights) == 4 and len(m.all_weights[0]) == 4
    assert sum(p.numel() for p in m.parameters()) == ref["numel"]


# ---------------------------------------------------------------------------
# bad input (torch's messages)

def test_bad_module_arguments():
    with pytest.raises(ValueError, match=r"dropout should be a number in range \[0, 1\]"):
        nn.LSTM(3, 4, dropout=1.5)
    with pytest.raises(TypeError, match="hidden_size should be of type int, got: float"):
        nn.GRU(3, 4.0)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        nn.GRU(3, 0)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'sigmoid'. Select from 'tanh' or 'relu'."):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(AssertionError, match="CUDA"):
        nn.LSTM(3, 4, device="cuda")


def test_bad_input_shapes_name_expected():
    m = nn.LSTM(I, H, num_layers=2)
    g = nn.GRU(I, H, num_layers=2)
    x = ct.randn(T, B, I)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 7"):
        m(ct.randn(T, B, 7))
    with pytest.raises(ValueError, match="LSTM: Expected input to be 2D or 3D, got 4D instead"):
        m(ct.randn(2, T, B, I))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(2, 3, 4\), got \[1, 3, 4\]"):
        m(x, (ct.zeros(1, B, H), ct.zeros(2, B, H)))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[1\] size \(2, 3, 4\), got \[2, 4, 4\]"):
        m(x, (ct.zeros(2, B, H), ct.zeros(2, 4, H)))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(2, 3, 4\), got \[2, 3, 5\]"):
        g(x, ct.zeros(2, B, 5))
    with pytest.raises(RuntimeError, match="For batched 3-D input, hx should also be 3-D but got 2-D tensor"):
        g(x, ct.zeros(B, H))
    with pytest.raises(RuntimeError, match="For unbatched 2-D input, hx should also be 2-D but got 3-D tensor"):
        g(ct.randn(T, I), ct.zeros(2, 1, H))
    with pytest.raises(RuntimeError, match=r"hx and cx should also be 3-D but got \(2-D, 2-D\) tensors"):
        m(x, (ct.zeros(B, H), ct.zeros(B, H)))
    with pytest.raises(ValueError, match=r"RNN input dtype \(float64\) does not match weight dtype \(float32\)"):
        m(x.double())
    with pytest.raises(TypeError, match="LSTM: hx must be a tuple"):
        m(x, ct.zeros(2, B, H))


def test_bad_cell_input():
    c = nn.LSTMCell(I, H)
    r = nn.GRUCell(I, H)
    with pytest.raises(RuntimeError, match="input has inconsistent input_size: got 7 expected 3"):
        c(ct.randn(B, 7))
    with pytest.raises(ValueError, match="LSTMCell: Expected input to be 1D or 2D, got 3D instead"):
        c(ct.randn(B, B, I))
    with pytest.raises(RuntimeError, match="Input batch size 3 doesn't match hidden0 batch size 4"):
        c(ct.randn(B, I), (ct.zeros(4, H), ct.zeros(B, H)))
    with pytest.raises(RuntimeError, match="hidden0 has inconsistent hidden_size: got 5, expected 4"):
        r(ct.randn(B, I), ct.zeros(B, 5))


def test_bad_packing():
    x = ct.randn(T, B, I)
    with pytest.raises(RuntimeError, match="`lengths` array must be sorted in decreasing order when "
                                           "`enforce_sorted` is True"):
        pack_padded_sequence(x, [3, 5, 2])
    with pytest.raises(ValueError, match=r"pack_padded_sequence: lengths\[0\] must be at most the sequence "
                                         r"length 5 of input \(dimension 0\), got 6"):
        pack_padded_sequence(x, [6, 3, 2])
    with pytest.raises(RuntimeError, match="Length of all samples has to be greater than 0"):
        pack_padded_sequence(x, [3, 2, 0])
    with pytest.raises(RuntimeError, match=r"Expected `len\(lengths\)` to be equal to batch_size, but got 2 "
                                           r"\(batch_size=3\)"):
        pack_padded_sequence(x, [3, 2])
    packed = pack_padded_sequence(x, [5, 3, 2])
    with pytest.raises(ValueError, match="Expected total_length to be at least the length of the longest "
                                         "sequence in input, but got total_length=3 and max sequence length "
                                         "being 5"):
        pad_packed_sequence(packed, total_length=3)
    m = nn.GRU(I, H)
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 3, 4\), got \[1, 4, 4\]"):
        m(packed, ct.zeros(1, 4, H))


def test_nan_input_propagates():
    m = nn.LSTM(I, H)
    x = ct.randn(T, B, I)
    x.data[2, 1, 0] = float("nan")
    out, (h, c) = m(x)
    o = out.detach().numpy()
    assert np.isnan(o[2:, 1]).all() and np.isfinite(o[:2]).all() and np.isfinite(o[:, [0, 2]]).all()
