"""nn.utils.clip_grad_norm_ / clip_grad_value_, nn.utils.rnn.pad_sequence and
nn.init: torch parity and statistics."""
import math

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from nn_parity import F32

torch = pytest.importorskip("torch")


def grads_pair(seed=0, scale=1.0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    shapes = [(3, 4), (5,), (2, 3, 2)]
    tps, cps = [], []
    for s in shapes:
        g = (rng.standard_normal(s) * scale).astype(dtype)
        tp = torch.zeros(s, dtype=getattr(torch, np.dtype(dtype).name), requires_grad=True)
        tp.grad = torch.tensor(g.copy())
        cp = nn.Parameter(ct.zeros(*s, dtype=dtype))
        cp.grad = ct.tensor(g.copy())
        tps.append(tp)
        cps.append(cp)
    return tps, cps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_parity(norm_type, max_norm):
    tps, cps = grads_pair(scale=2.0)
    t_total = torch.nn.utils.clip_grad_norm_(tps, max_norm, norm_type=norm_type)
    c_total = nn.utils.clip_grad_norm_(cps, max_norm, norm_type=norm_type)
    assert isinstance(c_total, ct.Tensor) and c_total.dim() == 0 and c_total.dtype == np.float32
    np.testing.assert_allclose(c_total.item(), t_total.item(), **F32)
    for t, c in zip(tps, cps):
        np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), **F32)


def test_clip_grad_norm_float64_single_tensor_and_missing_grads():
    tps, cps = grads_pair(dtype=np.float64)
    tps[1].grad = None
    cps[1].grad = None
    t_total = torch.nn.utils.clip_grad_norm_(tps, 0.1)
    c_total = nn.utils.clip_grad_norm_(iter(cps), 0.1)  # a generator, as model.parameters()
    assert c_total.dtype == np.float64
    np.testing.assert_allclose(c_total.item(), t_total.item(), rtol=1e-12)
    for t, c in zip(tps, cps):
        if t.grad is not None:
            np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    single = nn.Parameter(ct.zeros(3))
    single.grad = ct.tensor([3.0, 4.0, 0.0])
    assert nn.utils.clip_grad_norm_(single, 1.0).item() == pytest.approx(5.0)
    np.testing.assert_allclose(single.grad.numpy(), [0.6, 0.8, 0.0], rtol=1e-5)
    assert nn.utils.clip_grad_norm_([nn.Parameter(ct.zeros(2))], 1.0).item() == 0.0


def test_clip_grad_norm_transposed_grad_and_nonfinite():
    p = nn.Parameter(ct.zeros(4, 3))
    p.grad = ct.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4).T)  # not C-contiguous
    expected = np.arange(12, dtype=np.float32).reshape(3, 4).T
    total = nn.utils.clip_grad_norm_([p], 1.0)
    np.testing.assert_allclose(total.item(), np.linalg.norm(expected), rtol=1e-6)
    np.testing.assert_allclose(p.grad.numpy(), expected / (np.linalg.norm(expected) + 1e-6), rtol=1e-5)
    p.grad = ct.tensor(np.full((4, 3), np.inf, np.float32))
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


def test_clip_grad_value():
    tps, cps = grads_pair(scale=3.0)
    torch.nn.utils.clip_grad_value_(tps, 1.5)
    nn.utils.clip_grad_value_(cps, 1.5)
    for t, c in zip(tps, cps):
        np.testing.assert_array_equal(c.grad.numpy(), t.grad.numpy())


# ------------------------------------------------------------------ pad_sequence
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_parity(batch_first, padding_side):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, 3)).astype(np.float32) for n in (4, 1, 3)]
    t_seqs = [torch.tensor(a, requires_grad=True) for a in arrays]
    c_seqs = [ct.tensor(a, requires_grad=True) for a in arrays]
    t_out = torch.nn.utils.rnn.pad_sequence(t_seqs, batch_first=batch_first, padding_value=-1.0,
                                            padding_side=padding_side)
    c_out = nn.utils.rnn.pad_sequence(c_seqs, batch_first=batch_first, padding_value=-1.0,
                                      padding_side=padding_side)
    np.testing.assert_array_equal(c_out.detach().numpy(), t_out.detach().numpy())
    g = rng.standard_normal(tuple(t_out.shape)).astype(np.float32)
    t_out.backward(torch.tensor(g))
    c_out.backward(ct.tensor(g))
    for t, c in zip(t_seqs, c_seqs):
        np.testing.assert_array_equal(c.grad.numpy(), t.grad.numpy())


def test_pad_sequence_ids_and_errors():
    out = nn.utils.rnn.pad_sequence([ct.tensor([1, 2, 3]), ct.tensor([4])], batch_first=True)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), [[1, 2, 3], [4, 0, 0]])
    with pytest.raises(RuntimeError, match="every sequence must be"):
        nn.utils.rnn.pad_sequence([ct.zeros(2, 3), ct.zeros(2, 4)])


# ------------------------------------------------------------------ init
def test_calculate_gain_matches_torch():
    for nl, param in [("linear", None), ("sigmoid", None), ("tanh", None), ("relu", None), ("leaky_relu", None),
                      ("leaky_relu", 0.2), ("selu", None), ("conv2d", None)]:
        assert nn.init.calculate_gain(nl, param) == pytest.approx(torch.nn.init.calculate_gain(nl, param))
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        nn.init.calculate_gain("swish")


def test_fans_match_torch():
    for shape in [(3, 5), (4, 2, 3), (6, 2, 2, 2)]:
        assert nn.init._calculate_fan_in_and_fan_out(ct.zeros(*shape)) == \
            torch.nn.init._calculate_fan_in_and_fan_out(torch.zeros(*shape))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init.xavier_uniform_(ct.zeros(5))


@pytest.mark.parametrize("name,kwargs,bound_or_std", [
    ("xavier_uniform_", dict(gain=2.0), ("bound", lambda fi, fo: 2.0 * math.sqrt(6.0 / (fi + fo)))),
    ("xavier_normal_", dict(), ("std", lambda fi, fo: math.sqrt(2.0 / (fi + fo)))),
    ("kaiming_uniform_", dict(nonlinearity="relu"), ("bound", lambda fi, fo: math.sqrt(2.0) * math.sqrt(3.0 / fi))),
    ("kaiming_uniform_", dict(a=math.sqrt(5)), ("bound", lambda fi, fo: 1 / math.sqrt(fi))),
    ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu"), ("std", lambda fi, fo: math.sqrt(2.0 / fo))),
])
def test_init_distributions(name, kwargs, bound_or_std):
    ct.manual_seed(0)
    t = ct.zeros(300, 200)
    out = getattr(nn.init, name)(t, **kwargs)
    assert out is t
    vals = t.numpy()
    kind, fn = bound_or_std
    expected = fn(200, 300)
    if kind == "bound":
        assert np.abs(vals).max() <= expected and np.abs(vals).max() > 0.99 * expected
        assert vals.std() == pytest.approx(expected / math.sqrt(3), rel=0.02)
    else:
        assert vals.std() == pytest.approx(expected, rel=0.02) and abs(vals.mean()) < 0.02 * expected


def test_simple_inits_in_place_without_graph():
    p = nn.Parameter(ct.zeros(3, 4))
    arr = p.numpy()
    assert nn.init.ones_(p) is p and np.all(arr == 1) and p.is_leaf and p.requires_grad
    nn.init.constant_(p, 0.25)
    assert np.all(arr == 0.25)
    nn.init.zeros_(p)
    assert np.all(arr == 0)
    ct.manual_seed(3)
    nn.init.uniform_(p, -2, 3)
    assert arr.min() >= -2 and arr.max() <= 3 and arr.std() > 0
    nn.init.normal_(p, mean=5.0, std=0.01)
    assert abs(arr.mean() - 5.0) < 0.05
    nn.init.trunc_normal_(p, std=10.0, a=-1.0, b=1.0)
    assert np.all(np.abs(arr) <= 1.0)
    q = nn.init.orthogonal_(ct.zeros(4, 6))
    np.testing.assert_allclose(q.numpy() @ q.numpy().T, np.eye(4), atol=1e-5)
    ct.manual_seed(7)
    a = nn.init.normal_(ct.zeros(5)).numpy().copy()
    ct.manual_seed(7)
    np.testing.assert_array_equal(nn.init.normal_(ct.zeros(5)).numpy(), a)
