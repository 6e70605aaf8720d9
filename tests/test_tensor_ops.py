"""Differentiable Tensor ops: float64 gradchecks and torch parity (forward,
dtype and gradients) for arithmetic, elementwise functions, reductions,
softmax and matmul."""
import numpy as np
import pytest

import ctransformer as ct
from tensor_check import assert_parity, both_libraries, check_gradients

R = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Every test draws from the same seeded stream whatever ran before it
    (-k, -x), so the inputs its golden fixture was recorded with stay the same."""
    global R
    R = np.random.default_rng(7)


def f32(*shape, lo=None):
    a = R.standard_normal(shape).astype(np.float32)
    if lo is not None:
        a = np.abs(a) + lo
    return a


# ---------------------------------------------------------------- arithmetic
BINARY = {
    "add": lambda T, a, b: a + b,
    "sub": lambda T, a, b: a - b,
    "mul": lambda T, a, b: a * b,
    "div": lambda T, a, b: a / b,
    "add_alpha": lambda T, a, b: a.add(b, alpha=2.5),
    "sub_alpha": lambda T, a, b: T.sub(a, b, alpha=0.5),
    "torch_mul": lambda T, a, b: T.mul(a, b),
    "torch_div": lambda T, a, b: T.div(a, b),
}
SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((5,), ())]


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_binary_parity(name, sa, sb):
    assert_parity(BINARY[name], f32(*sa), f32(*sb, lo=0.5))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
def test_binary_gradcheck_broadcast(name):
    check_gradients(BINARY[name], f32(2, 1, 3), f32(4, 1, lo=0.5))


SCALAR = {
    "add_r": lambda T, a: a + 2.5, "add_l": lambda T, a: 2.5 + a,
    "sub_r": lambda T, a: a - 3, "sub_l": lambda T, a: 3 - a,
    "mul_r": lambda T, a: a * -1.5, "mul_l": lambda T, a: 2 * a,
    "div_r": lambda T, a: a / 4.0, "div_l": lambda T, a: 1.5 / a,
    "pow_r": lambda T, a: a ** 3, "pow_r2": lambda T, a: a ** 2, "pow_frac": lambda T, a: a ** 0.5,
    "pow_neg": lambda T, a: a ** -1.5, "pow_l": lambda T, a: 2.0 ** a, "pow_fn": lambda T, a: T.pow(a, 2),
    "pow_fn_l": lambda T, a: T.pow(10000.0, a), "neg": lambda T, a: -a, "neg_m": lambda T, a: a.neg(),
    "np_scalar": lambda T, a: a * np.float64(1.5) + np.int64(2),
}


@pytest.mark.parametrize("name", list(SCALAR))
def test_scalar_parity_and_gradcheck(name):
    x = f32(3, 4, lo=0.2)
    assert_parity(SCALAR[name], x)
    check_gradients(SCALAR[name], x)


def test_pow_tensor_tensor():
    op = lambda T, a, b: a ** b  # noqa: E731
    assert_parity(op, f32(3, 4, lo=0.2), f32(3, 4))
    assert_parity(op, f32(3, 4, lo=0.2), f32(4))
    check_gradients(op, f32(3, 4, lo=0.2), f32(4))


def test_pow_exponent_gradient_at_zero_base_matches_torch():
    base = np.array([0.0, 0.0, 2.0], np.float32)
    expo = np.array([2.0, 0.0, 3.0], np.float32)
    assert_parity(lambda T, a, b: a ** b, base, expo)


@pytest.mark.parametrize("op", [lambda T, a, b: a + b, lambda T, a, b: a * b, lambda T, a, b: a / b])
@pytest.mark.parametrize("da,db", [("int64", "float32"), ("float32", "float64"), ("int64", "int64"),
                                   ("bool", "float32"), ("int32", "int64")])
def test_binary_dtype_promotion_matches_torch(op, da, db):
    a = (R.integers(1, 5, (2, 3))).astype(da)
    b = (R.integers(1, 5, (3,))).astype(db)
    assert_parity(op, a, b, grad=[i for i, d in enumerate((da, db)) if "float" in d])


@pytest.mark.parametrize("scalar", [2, 2.5, True])
@pytest.mark.parametrize("dtype", ["int64", "float32", "float64", "bool"])
def test_scalar_dtype_promotion_matches_torch(scalar, dtype):
    a = np.array([[1, 0, 3]]).astype(dtype)
    ops = [] if dtype == "bool" and scalar is True else [
        lambda x: x * scalar, lambda x: scalar + x, lambda x: x / scalar]

    def body(lib):
        outs = [op(lib.tensor(a)) for op in ops]
        return dict(outs=outs, dtypes=[str(o.dtype).replace("torch.", "") for o in outs])

    ours, theirs = both_libraries(body, inputs=dict(a=a))
    assert len(ours["outs"]) == len(theirs["outs"]) == len(ops)
    assert list(ours["dtypes"]) == list(theirs["dtypes"])
    for o, t in zip(ours["outs"], theirs["outs"]):
        np.testing.assert_allclose(o, t, rtol=1e-6)


def test_bool_subtraction_is_an_error_as_in_torch():
    m = ct.tensor([True, False])
    for bad in (lambda: m - ct.ones(2), lambda: 1 - m, lambda: m - m):
        with pytest.raises(RuntimeError, match="bool"):
            bad()


def test_zero_dim_tensor_does_not_promote():
    def body(lib):
        x = lib.ones(3) * lib.tensor(2.0, dtype=lib.float64)
        y = lib.arange(3) * lib.tensor(0.5)
        return dict(x=str(x.dtype), y=str(y.dtype))

    for res in both_libraries(body):
        assert str(res["x"]).endswith("float32")
        assert str(res["y"]).endswith("float32")


# ---------------------------------------------------------------- elementwise functions
UNARY = {
    "exp": (lambda T, a: a.exp(), None), "log": (lambda T, a: T.log(a), 0.1),
    "sqrt": (lambda T, a: a.sqrt(), 0.1), "rsqrt": (lambda T, a: T.rsqrt(a), 0.1),
    "abs": (lambda T, a: a.abs(), None), "abs_builtin": (lambda T, a: abs(a), None),
    "sin": (lambda T, a: T.sin(a), None), "cos": (lambda T, a: a.cos(), None),
    "tanh": (lambda T, a: T.tanh(a), None), "tanh_m": (lambda T, a: a.tanh(), None),
    "sigmoid": (lambda T, a: T.sigmoid(a), None), "sigmoid_m": (lambda T, a: a.sigmoid(), None),
    "relu": (lambda T, a: T.relu(a), None), "relu_m": (lambda T, a: a.relu(), None),
    "clamp": (lambda T, a: a.clamp(-0.5, 0.7), None), "clamp_min": (lambda T, a: T.clamp(a, min=0.1), None),
    "clamp_max": (lambda T, a: a.clamp(max=0.2), None), "clip": (lambda T, a: a.clip(-1, 1), None),
    "square": (lambda T, a: T.square(a), None), "log1p": (lambda T, a: a.log1p(), 0.1),
    "norm": (lambda T, a: a.norm(), None), "norm_dim": (lambda T, a: a.norm(dim=1, keepdim=True), None),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_parity_and_gradcheck(name):
    op, lo = UNARY[name]
    x = f32(3, 5, lo=lo)
    if name.startswith("abs") or name.startswith("relu") or name.startswith("clamp") or name == "clip":
        x[np.abs(x) < 0.05] += 0.1  # keep finite differences away from kinks
        x[np.abs(x - 0.1) < 0.05] += 0.1
        x[np.abs(x - 0.2) < 0.05] += 0.1
        x[np.abs(np.abs(x) - 0.5) < 0.05] += 0.1
        x[np.abs(x - 0.7) < 0.05] += 0.1
        x[np.abs(np.abs(x) - 1) < 0.05] += 0.1
    assert_parity(op, x)
    check_gradients(op, x)


@pytest.mark.parametrize("p", [2, "fro", 1, 3, 1.5, 0, float("inf")])
def test_norm_at_zero_vectors_matches_torch(p):
    """A zero row's norm gradient is 0 (torch's), not sqrt's inf times 0 = NaN."""
    x = np.array([[0.0, 0.0, 0.0], [1.5, -2.0, 0.5], [0.0, 3.0, 0.0]], np.float32)
    grad = [] if p == 0 else None  # p = 0 (a count): torch leaves x.grad None, ours is zeros (checked below)
    assert_parity(lambda T, a: a.norm(p=p, dim=1), x, grad=grad)
    assert_parity(lambda T, a: T.norm(a * 0, p=p), x, grad=grad)


def test_norm_gradient_at_zero_vector_is_zero_and_gradchecks_elsewhere():
    """Torch-free: the subgradient 0 at the zero vector, finite differences elsewhere."""
    for p in (2, 3, 1.5, 0):
        x = ct.zeros(2, 3, dtype=ct.float64, requires_grad=True)
        x.norm(p=p, dim=1).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))
    x = f32(3, 4, lo=0.1)
    for p in (2, 3, 1.5):
        check_gradients(lambda T, a: a.norm(p=p, dim=0), x)
    counts = ct.tensor([[0.0, 2.0, -1.0], [0.0, 0.0, 0.0]]).norm(p=0, dim=1)
    np.testing.assert_array_equal(counts.numpy(), np.array([2.0, 0.0], np.float32))


def test_normalize_and_cosine_similarity_at_a_zero_row_match_torch():
    x = np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)
    other = np.array([[1.0, 2.0], [1.0, 1.0]], np.float32)
    assert_parity(lambda T, a: T.nn.functional.normalize(a, dim=1), x, tol=dict(rtol=2e-4, atol=2e-5))
    assert_parity(lambda T, a, b: T.nn.functional.cosine_similarity(a, b), x, other, grad=[0])
    # torch-free: d(x / max(|x|, eps))/dx at x = 0 is 1 / eps on the diagonal
    z = ct.zeros(1, 2, dtype=ct.float64, requires_grad=True)
    ct.nn.functional.normalize(z, dim=1, eps=1e-3).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [[1e3, 1e3]])


def test_relu_at_zero_and_clamp_at_boundary_match_torch():
    x = np.array([-1.0, 0.0, 0.5, 1.0], np.float32)
    assert_parity(lambda T, a: a.relu(), x)
    assert_parity(lambda T, a: a.clamp(0.0, 0.5), x)


@pytest.mark.parametrize("fn", ["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "rsqrt"])
def test_float_functions_of_int_tensors_give_float32(fn, torch_ref):
    a = np.array([1, 4, 9])

    def torch_side(torch):
        out = getattr(torch, fn)(torch.tensor(a))
        return dict(out=out, dtype=str(out.dtype))

    theirs = torch_ref(torch_side, inputs=dict(a=a))
    ours = getattr(ct, fn)(ct.tensor(a))
    assert ours.dtype == ct.float32 and theirs["dtype"] == "torch.float32"
    np.testing.assert_allclose(ours.numpy(), theirs["out"], rtol=1e-6)


def test_sqrt_of_python_int_tensor_as_in_attention_tutorial():
    scores = ct.ones(2, 3) / ct.sqrt(ct.tensor(16))
    assert scores.dtype == ct.float32
    np.testing.assert_allclose(scores.numpy(), 0.25)


# ---------------------------------------------------------------- reductions
REDUCE = {
    "sum": lambda T, a: a.sum(), "sum_d": lambda T, a: a.sum(1), "sum_dk": lambda T, a: a.sum(dim=-1, keepdim=True),
    "sum_tuple": lambda T, a: a.sum(dim=(0, 2)), "mean": lambda T, a: a.mean(),
    "mean_d": lambda T, a: T.mean(a, dim=1), "mean_dk": lambda T, a: a.mean(-1, keepdim=True),
    "mean_tuple": lambda T, a: a.mean((1, 2)),
    "var": lambda T, a: a.var(), "var_d": lambda T, a: a.var(1), "var_biased": lambda T, a: a.var(-1, unbiased=False),
    "var_keep": lambda T, a: a.var(dim=-1, keepdim=True), "var_corr0": lambda T, a: a.var(dim=0, correction=0),
    "var_corr2": lambda T, a: a.var(dim=2, correction=2),
    "std": lambda T, a: a.std(), "std_d": lambda T, a: T.std(a, -1), "std_keep": lambda T, a: a.std(-1, keepdim=True),
    "std_biased": lambda T, a: a.std(dim=1, unbiased=False, keepdim=True),
    "max_all": lambda T, a: a.max(), "min_all": lambda T, a: T.min(a),
    "max_d": lambda T, a: a.max(1), "max_dk": lambda T, a: a.max(dim=-1, keepdim=True),
    "min_d": lambda T, a: T.min(a, 0), "max_values": lambda T, a: a.max(2).values,
    "max_indices_1": lambda T, a: a.max(1)[1], "amax": lambda T, a: a.amax(1),
    "argmax": lambda T, a: a.argmax(), "argmax_d": lambda T, a: a.argmax(1),
    "argmax_dk": lambda T, a: T.argmax(a, dim=-1, keepdim=True), "argmin_d": lambda T, a: a.argmin(0),
    "topk": lambda T, a: a.topk(2), "topk_d": lambda T, a: a.topk(3, dim=1),
    "topk_small": lambda T, a: T.topk(a, 2, dim=0, largest=False), "topk_data": lambda T, a: a.data.topk(1),
    "cumsum": lambda T, a: a.cumsum(1), "logsumexp_like": lambda T, a: a.exp().sum(-1).log(),
}


@pytest.mark.parametrize("name", list(REDUCE))
def test_reduction_parity_and_gradcheck(name):
    x = f32(3, 4, 5)
    assert_parity(REDUCE[name], x)
    if name != "topk_data":  # .data is outside the graph: no gradient to check
        check_gradients(REDUCE[name], x[:2, :3, :3])


def test_max_of_two_tensors():
    op = lambda T, a, b: T.max(a, b)  # noqa: E731
    assert_parity(op, f32(3, 4), f32(3, 4))
    assert_parity(lambda T, a, b: T.maximum(a, b) + T.minimum(a, b) * 2, f32(3, 4), f32(4))
    check_gradients(op, f32(3, 4), f32(3, 4))


def test_max_all_ties_split_gradient_as_torch():
    x = np.array([[1.0, 3.0], [3.0, 2.0]], np.float32)
    assert_parity(lambda T, a: a.max(), x)


def test_sum_of_ints_and_bools_is_int64():
    assert ct.tensor([True, True, False]).sum().item() == 2
    assert ct.tensor([True, True]).sum().dtype == ct.int64
    assert ct.tensor([1, 2], dtype=ct.int32).sum().dtype == ct.int64
    with pytest.raises(RuntimeError, match="mean"):
        ct.tensor([1, 2]).mean()
    assert ct.tensor([1, 2]).mean(dtype=ct.float32).item() == 1.5


# ---------------------------------------------------------------- softmax
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_every_dim(dim, log):
    op = (lambda T, a: a.log_softmax(dim)) if log else (lambda T, a: T.softmax(a, dim=dim))
    assert_parity(op, f32(2, 3, 4))
    check_gradients(op, f32(2, 3, 4))


def test_softmax_1d_and_masked_rows():
    assert_parity(lambda T, a: a.softmax(0), f32(5))
    x = f32(2, 4)
    mask = np.array([[True, False, False, True], [False, False, False, False]])
    for fill in (-1e9, float("-inf")):
        assert_parity(lambda T, a, m: a.masked_fill(m, fill).softmax(-1), x, mask)


# ---------------------------------------------------------------- matmul
MATMUL = [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
          ((2, 3, 4), (4, 5)), ((4,), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((2, 3, 4), (4,))]


@pytest.mark.parametrize("sa,sb", MATMUL)
def test_matmul_parity_and_gradcheck(sa, sb):
    for op in (lambda T, a, b: a @ b, lambda T, a, b: T.matmul(a, b)):
        assert_parity(op, f32(*sa), f32(*sb))
    check_gradients(lambda T, a, b: a @ b, f32(*sa), f32(*sb))


def test_matmul_one_side_requires_grad_and_mm_bmm():
    assert_parity(lambda T, a, b: a.matmul(b), f32(3, 4), f32(4, 2), grad=[1])
    assert_parity(lambda T, a, b: T.mm(a, b), f32(3, 4), f32(4, 2))
    assert_parity(lambda T, a, b: T.bmm(a, b), f32(2, 3, 4), f32(2, 4, 2))
    assert_parity(lambda T, a, b: a @ b.t(), f32(3, 4), f32(2, 4))
    assert_parity(lambda T, a, b: a @ b.transpose(-2, -1), f32(2, 3, 4), f32(2, 5, 4))


def test_matmul_errors():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        ct.ones(2, 3) @ ct.ones(4, 5)
    with pytest.raises(RuntimeError, match="1D"):
        ct.tensor(2.0) @ ct.ones(2)
    with pytest.raises(RuntimeError, match="dtype"):
        ct.ones(2, 2) @ ct.ones(2, 2, dtype=ct.float64)
    with pytest.raises(RuntimeError, match="broadcast"):
        ct.ones(2, 2, 3) @ ct.ones(3, 3, 2)
    with pytest.raises(RuntimeError, match="bmm"):
        ct.bmm(ct.ones(2, 3), ct.ones(3, 2))


def test_int_matmul_has_no_grad():
    out = ct.tensor([[1, 2]]) @ ct.tensor([[3], [4]])
    assert out.dtype == ct.int64 and out.item() == 11


# ---------------------------------------------------------------- module-level functions
MODULE_FNS = [
    ("exp", ()), ("log", ()), ("log1p", ()), ("sqrt", ()), ("rsqrt", ()), ("square", ()), ("abs", ()),
    ("sin", ()), ("cos", ()), ("tanh", ()), ("sigmoid", ()), ("relu", ()), ("neg", ()), ("clamp", (0.2, 1.0)),
    ("clip", (0.3, 0.9)), ("sum", ()), ("sum", (1,)), ("mean", (0,)), ("var", (1,)), ("std", ()), ("norm", ()),
    ("max", ()), ("min", (1,)), ("amax", (1,)), ("amin", (0,)), ("cumsum", (1,)), ("topk", (2,)),
    ("sort", (1,)), ("softmax", (0,)), ("log_softmax", (1,)), ("transpose", (0, 1)), ("t", ()),
    ("permute", ((1, 0),)), ("reshape", ((4, 3),)), ("flatten", ()), ("unsqueeze", (1,)), ("squeeze", ()),
    ("chunk", (2, 1)), ("split", (2,)), ("unbind", (1,)), ("flip", ([0],)), ("repeat_interleave", (2, 0)),
    ("tril", ()), ("triu", (1,)), ("index_select", (1, "idx")), ("gather", (1, "gidx")), ("clone", ()),
]


@pytest.mark.parametrize("name,args", MODULE_FNS, ids=[f"{n}{i}" for i, (n, _) in enumerate(MODULE_FNS)])
def test_module_level_functions(name, args):
    x = f32(3, 4, lo=0.1)
    x += np.arange(12, dtype=np.float32).reshape(3, 4) * 0.01  # distinct values (max/sort/topk)

    def op(T, a):
        real = [T.tensor([2, 0, 2]) if v == "idx" else T.tensor([[0, 3], [1, 1], [2, 0]]) if v == "gidx" else v
                for v in args]
        return getattr(T, name)(a, *real)

    assert_parity(op, x)
    check_gradients(op, x)


def test_module_level_binary_functions():
    a, b = f32(3, 4, lo=0.2), f32(4, lo=0.2)
    for op in (lambda T, x, y: T.add(x, y), lambda T, x, y: T.add(x, y, alpha=3), lambda T, x, y: T.sub(x, y),
               lambda T, x, y: T.mul(x, y), lambda T, x, y: T.div(x, y), lambda T, x, y: T.pow(x, y),
               lambda T, x, y: T.maximum(x, y), lambda T, x, y: T.minimum(x, y), lambda T, x, y: T.where(x > y, x, y),
               lambda T, x, y: T.matmul(x, y), lambda T, x, y: T.mul(2.0, y), lambda T, x, y: T.div(1.0, y)):
        assert_parity(op, a, b)
        check_gradients(op, a, b)
