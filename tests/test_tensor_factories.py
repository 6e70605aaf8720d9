"""Factories, dtypes, conversions, comparisons, devices and random numbers."""
import numpy as np
import pytest

import ctransformer as ct
from tensor_check import assert_parity

R = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Every test draws from the same seeded stream whatever ran before it
    (-k, -x), so the inputs its golden fixture was recorded with stay the same."""
    global R
    R = np.random.default_rng(5)


@pytest.mark.parametrize("data,dtype", [
    (1.5, "float32"), ([1.0, 2.0], "float32"), (3, "int64"), ([[1, 2], [3, 4]], "int64"), (True, "bool"),
    ([True, False], "bool"), ([1, 2.5], "float32"), ([], "float32"), (np.float64(2.0), "float64"),
    (np.array([1, 2], np.int32), "int32"), (np.array([1.0], np.float64), "float64"),
])
def test_tensor_dtype_inference_matches_torch(data, dtype, torch_ref):
    theirs = torch_ref(lambda torch: dict(value=torch.tensor(data), dtype=str(torch.tensor(data).dtype)))
    assert str(ct.tensor(data).dtype) == dtype
    assert theirs["dtype"] == "torch." + dtype
    np.testing.assert_array_equal(ct.tensor(data).numpy(), theirs["value"])


def test_tensor_copies_and_from_numpy_shares():
    a = np.arange(4.0)
    t = ct.tensor(a)
    a[0] = 99
    assert t[0].item() == 0.0
    s = ct.from_numpy(a)
    assert s.dtype == ct.float64
    a[1] = 42
    assert s[1].item() == 42
    s[2] = 7
    assert a[2] == 7
    assert ct.as_tensor(a) .numpy() is a
    with pytest.raises(TypeError, match="from_numpy"):
        ct.from_numpy([1, 2])
    assert ct.tensor([ct.tensor(1.0), ct.tensor(2.0)]).tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="could not convert"):
        ct.tensor("abc")


def test_tensor_requires_grad_and_dtype_args():
    t = ct.tensor([1, 2], dtype=ct.float32, requires_grad=True)
    assert t.requires_grad and t.dtype == ct.float32
    assert ct.tensor([1, 2], dtype=ct.long).dtype == ct.int64
    assert ct.tensor([0.5], dtype=ct.float64).dtype == ct.float64
    assert ct.tensor([1], dtype=float).dtype == ct.float32 and ct.tensor([1.0], dtype=int).dtype == ct.int64


@pytest.mark.parametrize("name,args,kwargs", [
    ("zeros", (2, 3), {}), ("zeros", ((2, 3),), {}), ("zeros", ([4],), {"dtype": "int64"}), ("ones", (3,), {}),
    ("ones", ((2, 2),), {"dtype": "float64"}), ("full", ((2, 2), 1.5), {}), ("full", ((2,), 7), {}),
    ("full", ((1, 2), float("-inf")), {}), ("full", ((2,), True), {}), ("arange", (5,), {}),
    ("arange", (1, 7, 2), {}), ("arange", (0, 1, 0.25), {}), ("arange", (0, 6, 2), {"dtype": "float32"}),
    ("linspace", (0, 1, 5), {}), ("eye", (3,), {}), ("eye", (2, 3), {}), ("empty", (2, 0), {}),
])
def test_factories_match_torch(name, args, kwargs, torch_ref):
    def torch_side(torch):
        t = getattr(torch, name)(*args, **{k: getattr(torch, v) for k, v in kwargs.items()})
        # empty's values are whatever memory held: only its dtype and shape are compared
        return dict(dtype=str(t.dtype), shape=list(t.shape) or np.zeros(0, np.int64),
                    value=np.zeros(0) if name == "empty" else t)

    theirs = torch_ref(torch_side)
    ours = getattr(ct, name)(*args, **{k: getattr(ct, v) for k, v in kwargs.items()})
    assert str(ours.dtype) == str(theirs["dtype"]).replace("torch.", "")
    assert tuple(ours.shape) == tuple(int(n) for n in theirs["shape"])
    if name != "empty":
        np.testing.assert_allclose(ours.numpy(), theirs["value"], rtol=1e-6)


def test_like_factories_and_new_methods():
    x = ct.ones(2, 3, dtype=ct.float64)
    for t in (ct.zeros_like(x), ct.ones_like(x), ct.full_like(x, 2.0), ct.randn_like(x), ct.rand_like(x),
              ct.empty_like(x), x.new_zeros(2, 3), x.new_ones((2, 3)), x.new_full((2, 3), 1.0)):
        assert t.shape == (2, 3) and t.dtype == ct.float64
    assert x.new_tensor([1, 2]).dtype == ct.float64
    assert ct.zeros(2, requires_grad=True).requires_grad


def test_typed_tensor_constructors():
    a = ct.LongTensor([[1, 2, 3]]).t()
    assert a.dtype == ct.int64 and a.shape == (3, 1)
    f = ct.FloatTensor(np.zeros((1, 4, 2)))
    assert f.dtype == ct.float32 and f.shape == (1, 4, 2)
    assert ct.FloatTensor(2, 3).shape == (2, 3) and ct.FloatTensor(2, 3).dtype == ct.float32
    assert isinstance(f, ct.FloatTensor) and not isinstance(f, ct.LongTensor) and isinstance(a, ct.Tensor)
    assert ct.BoolTensor([True]).dtype == ct.bool
    assert ct.Tensor([1, 2]).dtype == ct.float32 and ct.Tensor(2, 3).shape == (2, 3)
    assert ct.Tensor().shape == (0,)
    t = ct.tensor([1.0, 2.0])
    assert ct.Tensor(t).numpy() is t.numpy()


def test_dtypes_and_names():
    assert ct.float is ct.float32 and ct.long == ct.int64 and ct.int == ct.int32 and ct.double == ct.float64
    assert ct.bool == np.bool_ and ct.half == ct.float16
    x = ct.ones(2)
    assert x.dtype == ct.float32 and x.dtype == ct.float and x.is_floating_point()
    assert x.type() == "torch.FloatTensor" and ct.arange(2).type() == "torch.LongTensor"
    assert x.type(ct.LongTensor).dtype == ct.int64 and x.type("torch.DoubleTensor").dtype == ct.float64
    assert ct.get_default_dtype() == ct.float32
    assert ct.is_tensor(x) and not ct.is_tensor(1.0) and ct.numel(ct.zeros(2, 3)) == 6
    assert ct.finfo(ct.float32).max > 1e38


CONVERT = {
    "float": lambda T, a: a.long().float() * 2, "double": lambda T, a: a.double() * 2,
    "half_back": lambda T, a: a.double().float(), "to_dtype": lambda T, a: a.to(T.float64) * a.to(T.float64),
    "to_kw": lambda T, a: a.to(dtype=T.float64).sum(), "type_as": lambda T, a: a.type_as(a.double()) + 1,
    "long": lambda T, a: (a * 3).long(), "int": lambda T, a: a.int(), "bool": lambda T, a: a.bool(),
    "type_as_long": lambda T, a: T.zeros(3).type_as(a.data.long()), "to_tensor": lambda T, a: a.to(T.ones(1).long()),
}


@pytest.mark.parametrize("name", list(CONVERT))
def test_type_conversions_parity(name):
    assert_parity(CONVERT[name], R.standard_normal((2, 3)).astype(np.float32))


def test_conversion_gradient_flows_back_to_source_dtype():
    w = ct.ones(2, requires_grad=True)
    (w.double() * 3).sum().backward()
    assert w.grad.dtype == ct.float32 and w.grad.tolist() == [3.0, 3.0]
    assert not w.long().requires_grad


COMPARE = {
    "eq": lambda T, a, b: a == b, "ne": lambda T, a, b: a != b, "lt": lambda T, a, b: a < b,
    "le": lambda T, a, b: a <= 0.5, "gt": lambda T, a, b: a > b, "ge": lambda T, a, b: 0 >= a,
    "eq_m": lambda T, a, b: a.eq(b), "gt_m": lambda T, a, b: T.gt(a, b), "and": lambda T, a, b: (a > 0) & (b > 0),
    "or": lambda T, a, b: (a > 0) | (b > 0), "xor": lambda T, a, b: (a > 0) ^ (b > 0), "not": lambda T, a, b: ~(a > 0),
    "logical_not": lambda T, a, b: T.logical_not(a > 0), "any": lambda T, a, b: (a > 1).any(),
    "all_dim": lambda T, a, b: (a > -3).all(1), "isnan": lambda T, a, b: T.isnan(a / a),
    "int_and": lambda T, a, b: (a > 0).long() & (b > 0).long(), "mask_eq0": lambda T, a, b: (a > 0).long() == 0,
}


@pytest.mark.parametrize("name", list(COMPARE))
def test_comparisons_and_logic(name):
    a = R.standard_normal((3, 4)).astype(np.float32)
    a[0, 0] = 0.0
    b = a.copy()
    b[1] += 1
    with np.errstate(invalid="ignore"):  # isnan(a / a) divides 0 by 0 on purpose
        assert_parity(COMPARE[name], a, b)


REPRS = {  # values -> torch 2.13's repr (its _tensor_str formatting rules)
    "decimals": ([1.5, 2.0], "tensor([1.5000, 2.0000])"),
    "integral": ([[1.0, 2.0], [3.0, 4.0]], "tensor([[1., 2.],\n        [3., 4.]])"),
    "scalar": (3.25, "tensor(3.2500)"),
    "small": ([1e-5, 1.0], "tensor([1.0000e-05, 1.0000e+00])"),
    "wide_integral": ([1.0, 2000.0], "tensor([1.0000e+00, 2.0000e+03])"),
    "big_integral": ([123456.0, 1.0], "tensor([1.2346e+05, 1.0000e+00])"),
    "integral_width": ([123456.0, 1000.0], "tensor([123456.,   1000.])"),
    "negative": ([-1.5, 2.0], "tensor([-1.5000,  2.0000])"),
    "non_finite": ([float("nan"), 2.0], "tensor([nan, 2.])"),
    "inf": ([float("inf"), 0.5], "tensor([   inf, 0.5000])"),
    "zeros": ([0.0, 0.0], "tensor([0., 0.])"),
}


@pytest.mark.parametrize("name", list(REPRS))
def test_float_tensors_print_as_torch_prints_them(name, torch_ref):
    values, expected = REPRS[name]
    assert repr(ct.tensor(values)) == expected
    assert str(torch_ref(lambda torch: {"r": np.array(repr(torch.tensor(values)))})["r"]) == expected


def test_long_tensors_print_their_edges_only():
    x = ct.arange(5000.0).reshape(50, 100) / 7
    text = repr(x)
    assert "..." in text and text.startswith("tensor([[0.0000e+00, 1.4286e-01, 2.8571e-01,") and len(text) < 1200
    assert repr(ct.tensor([1.0, -2.0], requires_grad=True) * 2) == "tensor([ 2., -4.], grad_fn=<MulBackward0>)"


def test_allclose_equal_item_conversions():
    x = ct.tensor([1.0, 2.0])
    assert ct.allclose(x, x + 1e-9) and x.equal(x.clone()) and not x.equal(x + 1)
    assert ct.tensor(2.5).item() == 2.5 and float(ct.tensor([3.0])) == 3.0 and int(ct.tensor(4)) == 4
    assert [0, 1, 2][ct.tensor(1)] == 1 and f"{ct.tensor(0.5):.2f}" == "0.50"
    # torch's classes: item() refuses with RuntimeError, float() / int() with ValueError
    for empty_or_two in (x, ct.ones(0)):
        with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
            empty_or_two.item()
        for convert in (float, int):
            with pytest.raises(ValueError, match="only one element"):
                convert(empty_or_two)
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x > 0)
    assert bool(ct.tensor([True]))


# ---------------------------------------------------------------- devices
def test_cuda_requests_are_clear_errors():
    """As torch's CPU build: a CUDA device can be named, not used (AssertionError)."""
    assert str(ct.device("cuda")) == "cuda"
    with pytest.raises(AssertionError, match="CPU only"):
        ct.ones(2).cuda()
    with pytest.raises(AssertionError, match="CPU only"):
        ct.ones(2).to("cuda")
    with pytest.raises(AssertionError, match="CPU only"):
        ct.ones(2).to("cuda:0")
    with pytest.raises(AssertionError, match="CPU only"):
        ct.zeros(2, device="cuda")
    with pytest.raises(AssertionError, match="CPU only"):
        ct.tensor([1], device="cuda")
    assert not ct.cuda.is_available()
    dev = ct.device("cuda" if ct.cuda.is_available() else "cpu")
    x = ct.ones(2).to(dev)
    assert x.device == dev and x.device == ct.device("cpu") and str(x.device) == "cpu" and not x.is_cuda
    assert ct.ones(2, device=dev).cpu().to("cpu", non_blocking=True).tolist() == [1.0, 1.0]
    assert ct.zeros(2, device=x.device).shape == (2,)


# ---------------------------------------------------------------- random
@pytest.mark.parametrize("fn", [lambda: ct.randn(3, 4), lambda: ct.rand(2, 2), lambda: ct.randint(0, 10, (5,)),
                                lambda: ct.randperm(6), lambda: ct.randn((2, 3), dtype=ct.float64),
                                lambda: ct.empty(4).uniform_(-1, 1), lambda: ct.zeros(3).normal_(0, 0.02)])
def test_manual_seed_reproducibility(fn):
    ct.manual_seed(123)
    a = fn()
    ct.manual_seed(123)
    b = fn()
    ct.manual_seed(124)
    c = fn()
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())


def test_dropout_seeds_follow_manual_seed_and_rng_state():
    """Dropout's kernel seeds (Generator.next_seed: SplitMix64 of the manual
    seed and a draw count, not the PCG64 stream): the same masks after the
    same manual_seed, other masks after another, unmoved by randn in between
    (a separate stream), and restored by set_rng_state, whose state holds
    the count (a state without it, as saved before the count existed, means 0)."""
    x = ct.ones(4096)

    def masks(n=3):
        return [ct.nn.functional.dropout(x, 0.5).numpy() != 0 for _ in range(n)]

    ct.manual_seed(5)
    first = masks()
    assert not np.array_equal(first[0], first[1])  # each call a new seed
    ct.manual_seed(5)
    ct.randn(100)  # the PCG64 stream moves; the kernel seeds do not
    np.testing.assert_array_equal(np.array(masks()), np.array(first))
    ct.manual_seed(6)
    assert not np.array_equal(masks(1)[0], first[0])
    ct.manual_seed(5)
    masks(1)
    state = ct.get_rng_state()
    assert state["kernel_draws"] == 1
    after = masks(2)
    ct.set_rng_state(state)
    np.testing.assert_array_equal(np.array(masks(2)), np.array(after))
    old = {k: v for k, v in state.items() if k != "kernel_draws"}
    ct.set_rng_state(old)
    np.testing.assert_array_equal(masks(1)[0], first[0])
    seeds = {ct.random.default_generator.next_seed() for _ in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2**63 for s in seeds)


def test_random_distributions_and_dtypes():
    ct.manual_seed(0)
    x = ct.randn(20000)
    assert x.dtype == ct.float32 and abs(x.mean().item()) < 0.03 and abs(x.std().item() - 1) < 0.03
    u = ct.rand(20000)
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.02
    r = ct.randint(3, 7, (1000,))
    assert r.dtype == ct.int64 and r.min().item() == 3 and r.max().item() == 6
    assert ct.randint(5, (3,)).shape == (3,)
    assert sorted(ct.randperm(5).tolist()) == [0, 1, 2, 3, 4]
    assert ct.randn(2, 3, requires_grad=True).requires_grad
    g = ct.Generator(7)
    a = ct.randn(3, generator=g)
    b = ct.randn(3, generator=ct.Generator(7))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    state = ct.get_rng_state()
    s1 = ct.rand(3)
    ct.set_rng_state(state)
    np.testing.assert_array_equal(s1.numpy(), ct.rand(3).numpy())
    assert ct.initial_seed() == 0
    with pytest.raises(TypeError, match="size"):
        ct.randint(0, 3)
