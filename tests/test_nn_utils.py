"""nn.utils.clip_grad_norm_ / clip_grad_value_, nn.utils.rnn.pad_sequence and
nn.init: torch parity and statistics."""
import math

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from nn_parity import F32, torch_reference


def grad_arrays(seed=0, scale=1.0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(dtype) for s in [(3, 4), (5,), (2, 3, 2)]]


def our_params(grads):
    """Zero parameters with the given gradients (None: no gradient)."""
    cps = []
    for g in grads:
        cp = nn.Parameter(ct.zeros(*g.shape, dtype=g.dtype))
        cp.grad = ct.tensor(g.copy())
        cps.append(cp)
    return cps


def torch_clip(grads, clip, missing=()):
    """Torch's side: clip(torch, params) on zero parameters holding ``grads``
    (those at ``missing`` without gradient); its result and the gradients."""
    inputs = {f"g{i}": g for i, g in enumerate(grads)}

    def torch_side(torch):
        tps = []
        for i, g in enumerate(grads):
            tp = torch.zeros(g.shape, dtype=getattr(torch, g.dtype.name), requires_grad=True)
            tp.grad = None if i in missing else torch.tensor(g.copy())
            tps.append(tp)
        total = clip(torch, tps)
        return dict(total=np.zeros(0) if total is None else total,
                    grads=[np.zeros(0) if t.grad is None else t.grad for t in tps])

    return torch_reference(torch_side, inputs)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_parity(norm_type, max_norm):
    grads = grad_arrays(scale=2.0)
    ref = torch_clip(grads, lambda torch, ps: torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type))
    cps = our_params(grads)
    c_total = nn.utils.clip_grad_norm_(cps, max_norm, norm_type=norm_type)
    assert isinstance(c_total, ct.Tensor) and c_total.dim() == 0 and c_total.dtype == np.float32
    np.testing.assert_allclose(c_total.item(), ref["total"].item(), **F32)
    for t, c in zip(ref["grads"], cps):
        np.testing.assert_allclose(c.grad.numpy(), t, **F32)


def test_clip_grad_norm_float64_single_tensor_and_missing_grads():
    grads = grad_arrays(dtype=np.float64)
    ref = torch_clip(grads, lambda torch, ps: torch.nn.utils.clip_grad_norm_(ps, 0.1), missing=(1,))
    cps = our_params(grads)
    cps[1].grad = None
    c_total = nn.utils.clip_grad_norm_(iter(cps), 0.1)  # a generator, as model.parameters()
    assert c_total.dtype == np.float64
    np.testing.assert_allclose(c_total.item(), ref["total"].item(), rtol=1e-12)
    for i, (t, c) in enumerate(zip(ref["grads"], cps)):
        if i != 1:
            np.testing.assert_allclose(c.grad.numpy(), t, rtol=1e-12)
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
    grads = grad_arrays(scale=3.0)
    ref = torch_clip(grads, lambda torch, ps: torch.nn.utils.clip_grad_value_(ps, 1.5))
    cps = our_params(grads)
    nn.utils.clip_grad_value_(cps, 1.5)
    for t, c in zip(ref["grads"], cps):
        np.testing.assert_array_equal(c.grad.numpy(), t)


# ------------------------------------------------------------------ pad_sequence
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_parity(batch_first, padding_side):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, 3)).astype(np.float32) for n in (4, 1, 3)]
    g = rng.standard_normal((3, 4, 3) if batch_first else (4, 3, 3)).astype(np.float32)

    def torch_side(torch):
        t_seqs = [torch.tensor(a, requires_grad=True) for a in arrays]
        t_out = torch.nn.utils.rnn.pad_sequence(t_seqs, batch_first=batch_first, padding_value=-1.0,
                                                padding_side=padding_side)
        t_out.backward(torch.tensor(g))
        return dict(out=t_out, grads=[t.grad for t in t_seqs])

    ref = torch_reference(torch_side, dict(a0=arrays[0], a1=arrays[1], a2=arrays[2], g=g))
    c_seqs = [ct.tensor(a, requires_grad=True) for a in arrays]
    c_out = nn.utils.rnn.pad_sequence(c_seqs, batch_first=batch_first, padding_value=-1.0,
                                      padding_side=padding_side)
    np.testing.assert_array_equal(c_out.detach().numpy(), ref["out"])
    c_out.backward(ct.tensor(g))
    for t, c in zip(ref["grads"], c_seqs):
        np.testing.assert_array_equal(c.grad.numpy(), t)


def test_pad_sequence_ids_and_errors():
    out = nn.utils.rnn.pad_sequence([ct.tensor([1, 2, 3]), ct.tensor([4])], batch_first=True)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), [[1, 2, 3], [4, 0, 0]])
    with pytest.raises(RuntimeError, match="every sequence must be"):
        nn.utils.rnn.pad_sequence([ct.zeros(2, 3), ct.zeros(2, 4)])


# ------------------------------------------------------------------ init
def test_calculate_gain_matches_torch():
    cases = [("linear", None), ("sigmoid", None), ("tanh", None), ("relu", None), ("leaky_relu", None),
             ("leaky_relu", 0.2), ("selu", None), ("conv2d", None)]
    ref = torch_reference(lambda torch: dict(gains=[float(torch.nn.init.calculate_gain(nl, param))
                                                    for nl, param in cases]))
    for (nl, param), gain in zip(cases, ref["gains"]):
        assert nn.init.calculate_gain(nl, param) == pytest.approx(float(gain))
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        nn.init.calculate_gain("swish")


def test_fans_match_torch():
    shapes = [(3, 5), (4, 2, 3), (6, 2, 2, 2)]
    ref = torch_reference(lambda torch: dict(fans=[list(torch.nn.init._calculate_fan_in_and_fan_out(torch.zeros(*s)))
                                                   for s in shapes]))
    for shape, fans in zip(shapes, ref["fans"]):
        assert nn.init._calculate_fan_in_and_fan_out(ct.zeros(*shape)) == tuple(int(f) for f in fans)
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
    arr = p.detach().numpy()
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
