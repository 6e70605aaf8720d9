"""Torch parity of every ctransformer.nn layer: same weights via state_dict,
same inputs -> same outputs and gradients of inputs and all parameters
(float32 at F32, float64 tight)."""
import math

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from nn_parity import F32, torch_repr, check_module, check_state_dict_roundtrip, torch_reference

DTYPES = [np.float32, np.float64]


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# ------------------------------------------------------------------ Linear
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 5), (5,)])
def test_linear_parity(dtype, bias, shape):
    def make(torch):
        return torch.nn.Linear(5, 4, bias=bias)
    cm = nn.Linear(5, 4, bias=bias)
    check_module(make, cm, randn(*shape), dtype=dtype)
    check_state_dict_roundtrip(make, cm, dtype)


def test_linear_init_matches_torch_bounds():
    ct.manual_seed(0)
    m = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)  # kaiming_uniform_(a=sqrt(5)) gives exactly 1/sqrt(fan_in)
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    assert w.shape == (300, 400) and b.shape == (300,) and w.dtype == np.float32
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound  # U(-a, a) has std a / sqrt(3)
    assert m.weight.requires_grad and isinstance(m.weight, nn.Parameter)


def test_linear_errors():
    m = nn.Linear(5, 4)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        m(ct.randn(3, 6))
    with pytest.raises(RuntimeError, match="same dtype"):
        m(ct.randn(3, 5).double())
    with pytest.raises(RuntimeError, match="linear: input must be float32 or float64"):
        m(ct.tensor([[1, 2, 3, 4, 5]]))


def test_linear_input_without_grad_still_gives_weight_grads():
    check_module(lambda torch: torch.nn.Linear(3, 2), nn.Linear(3, 2), randn(4, 3), grad_inputs=[False])


# ------------------------------------------------------------------ Embedding
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx", [None, 0, -1])
def test_embedding_parity(dtype, padding_idx):
    cm = nn.Embedding(10, 4, padding_idx=padding_idx)
    ids = np.array([[0, 3, 3, 9], [1, 0, 9, 2]])
    _, ref = check_module(lambda torch: torch.nn.Embedding(10, 4, padding_idx=padding_idx), cm, ids, dtype=dtype,
                          extra=lambda tm: dict(padding_idx=repr(tm.padding_idx)))
    assert repr(cm.padding_idx) == ref["extra"]["padding_idx"]


def test_embedding_init_zeroes_padding_row_and_is_standard_normal():
    ct.manual_seed(1)
    m = nn.Embedding(2000, 16, padding_idx=3)
    w = m.weight.detach().numpy()
    assert np.all(w[3] == 0)
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02
    ref = torch_reference(lambda torch: dict(repr=repr(torch.nn.Embedding(2000, 16, padding_idx=3))))
    assert repr(m) == ref["repr"]


def test_embedding_from_pretrained():
    w = ct.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    m = nn.Embedding.from_pretrained(w)
    assert not m.weight.requires_grad
    np.testing.assert_array_equal(m(ct.tensor([2, 0])).numpy(), [[5, 6], [1, 2]])
    m2 = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=1)
    assert m2.weight.requires_grad and m2.padding_idx == 1
    np.testing.assert_array_equal(m2.weight.detach().numpy()[1], [3, 4])  # the padding row is left as given
    out = m2(ct.tensor([1, 1, 2]))
    out.sum().backward()
    np.testing.assert_array_equal(m2.weight.grad.numpy(), [[0, 0], [0, 0], [1, 1]])


def test_embedding_bad_ids():
    m = nn.Embedding(5, 3)
    with pytest.raises(IndexError):
        m(ct.tensor([0, 5]))
    with pytest.raises(RuntimeError, match="integer"):
        m(ct.tensor([0.0, 1.0]))


# ------------------------------------------------------------------ LayerNorm
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kwargs,shape", [
    (dict(normalized_shape=6), (4, 6)),
    (dict(normalized_shape=6), (2, 3, 6)),
    (dict(normalized_shape=(3, 4)), (2, 3, 4)),
    (dict(normalized_shape=6, elementwise_affine=False), (4, 6)),
    (dict(normalized_shape=6, bias=False), (4, 6)),
    (dict(normalized_shape=6, eps=1e-2), (4, 6)),
])
def test_layernorm_parity(dtype, kwargs, shape):
    def make(torch):
        tm = torch.nn.LayerNorm(**kwargs)
        with torch.no_grad():  # non-trivial affine parameters
            for p in tm.parameters():
                p.copy_(torch.from_numpy(randn(*p.shape, seed=5)).to(p.dtype))
        return tm
    cm = nn.LayerNorm(**kwargs)
    _, ref = check_module(make, cm, randn(*shape) * 3 + 1, dtype=dtype, extra=torch_repr)
    assert repr(cm) == ref["extra"]["repr"]
    check_state_dict_roundtrip(make, cm, dtype)


def test_layernorm_shape_error():
    with pytest.raises(RuntimeError, match="normalized_shape"):
        nn.LayerNorm(5)(ct.randn(2, 4))


# ------------------------------------------------------------------ activations
ACTS = [
    (lambda torch: torch.nn.ReLU(), lambda: nn.ReLU()),
    (lambda torch: torch.nn.GELU(), lambda: nn.GELU()),
    (lambda torch: torch.nn.GELU(approximate="tanh"), lambda: nn.GELU(approximate="tanh")),
    (lambda torch: torch.nn.Tanh(), lambda: nn.Tanh()),
    (lambda torch: torch.nn.Sigmoid(), lambda: nn.Sigmoid()),
    (lambda torch: torch.nn.Softmax(dim=-1), lambda: nn.Softmax(dim=-1)),
    (lambda torch: torch.nn.Softmax(dim=1), lambda: nn.Softmax(dim=1)),
    (lambda torch: torch.nn.Softmax(dim=0), lambda: nn.Softmax(dim=0)),
    (lambda torch: torch.nn.LogSoftmax(dim=-1), lambda: nn.LogSoftmax(dim=-1)),
    (lambda torch: torch.nn.LogSoftmax(dim=1), lambda: nn.LogSoftmax(dim=1)),
    (lambda torch: torch.nn.Identity(), lambda: nn.Identity()),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make", ACTS, ids=lambda m: repr(m[1]()))
def test_activation_parity(dtype, make):
    cm = make[1]()
    _, ref = check_module(make[0], cm, randn(3, 4, 5) * 2, dtype=dtype, extra=torch_repr)
    assert repr(cm) == ref["extra"]["repr"]


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")


# ------------------------------------------------------------------ Dropout
def test_dropout_eval_is_identity_and_train_masks():
    d = nn.Dropout(0.3)
    x = ct.randn(200, 50, requires_grad=True)
    d.eval()
    assert d(x) is x
    d.train()
    ct.manual_seed(0)
    y = d(x)
    kept = y.detach().numpy() != 0
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(y.detach().numpy()[kept], x.detach().numpy()[kept] / 0.7, rtol=1e-6)
    g = np.random.default_rng(0).standard_normal(y.shape).astype(np.float32)
    y.backward(ct.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, g / 0.7, 0), rtol=1e-6)
    ct.manual_seed(0)
    np.testing.assert_array_equal(d(x).detach().numpy(), y.detach().numpy())  # reproducible after manual_seed
    assert not np.array_equal(d(x).detach().numpy(), y.detach().numpy())  # fresh mask per call


def test_dropout_edge_probabilities():
    x = ct.randn(4, 4, requires_grad=True)
    assert nn.Dropout(0.0)(x) is x
    y = nn.Dropout(1.0)(x)
    assert np.all(y.detach().numpy() == 0)
    y.sum().backward()
    assert np.all(x.grad.numpy() == 0)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)
    assert repr(nn.Dropout(0.2)) == torch_reference(lambda torch: dict(repr=repr(torch.nn.Dropout(0.2))))["repr"]


# ------------------------------------------------------------------ composite
@pytest.mark.parametrize("dtype", DTYPES)
def test_sequential_mlp_parity(dtype):
    def build(m):
        return m.Sequential(m.Linear(6, 8), m.GELU(), m.LayerNorm(8), m.Dropout(0.1), m.Linear(8, 3),
                            m.LogSoftmax(dim=-1))
    cm = build(nn).eval()
    _, ref = check_module(lambda torch: build(torch.nn).eval(), cm, randn(5, 6), dtype=dtype, extra=torch_repr)
    assert repr(cm) == ref["extra"]["repr"]
    check_state_dict_roundtrip(lambda torch: build(torch.nn), cm, dtype)


def test_weights_back_to_torch_after_training_step():
    """ours -> torch: the state_dict we produce loads into torch and gives the same outputs."""
    ct.manual_seed(0)  # our initial weights are inputs of torch's side: deterministic
    cm = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    opt = ct.optim.SGD(cm.parameters(), lr=0.5)
    x = randn(3, 4).astype(np.float32)
    cm(ct.tensor(x)).sum().backward()
    opt.step()
    trained = {k: v.numpy().copy() for k, v in cm.state_dict().items()}

    def torch_side(torch):
        tm = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
        tm.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in trained.items()})
        return dict(out=tm(torch.tensor(x)))

    ref = torch_reference(torch_side, dict(x=x, **trained))
    np.testing.assert_allclose(cm(ct.tensor(x)).detach().numpy(), ref["out"], **F32)
