"""Regression tests of the reliability audit (issue 16) at the one place
arrays enter C: zero-size shapes, byte order, outputs overlapping inputs,
the 32-bit BLAS dimension limit, and LayerNorm on constant rows far from 0.

Each test failed before the fix it guards (a segfault, a silently wrong
result or an unclear error)."""
import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from ctransformer import kernels as K
from conftest import run_isolated
from tolerances import F64



# ------------------------------------------------------------------ zero-size shapes
def test_matmul_zero_batch_does_not_crash():
    """(1, 1, K) @ (0, K, K) killed the interpreter (the batch of 1 was
    broadcast to 1 instead of 0 and the kernel read the empty operand)."""
    proc = run_isolated("""
        import ctransformer as ct
        a = ct.ones(1, 1, 4096, requires_grad=True)
        b = ct.ones(0, 4096, 4096, requires_grad=True)
        y = ct.matmul(a, b)
        y.sum().backward()
        print(tuple(y.shape), tuple(a.grad.shape), tuple(b.grad.shape), float(a.grad.abs().sum()))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "(0, 1, 4096) (1, 1, 4096) (0, 4096, 4096) 0.0"


@pytest.mark.parametrize("sa,sb", [
    ((2, 0, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 0)), ((2, 3, 0), (2, 0, 5)),
    ((0, 3, 4), (1, 4, 5)), ((1, 3, 4), (0, 4, 5)), ((3, 1, 2, 4), (0, 4, 5)),
    ((4,), (0, 4, 5)), ((0, 4), (4,)), ((1, 2, 3), (3, 0)),
])
def test_matmul_zero_size_as_numpy(sa, sb):
    """Empty results and gradients (zeros of the operand's shape), as torch."""
    rng = np.random.default_rng(0)
    an, bn = rng.standard_normal(sa), rng.standard_normal(sb)
    a = ct.tensor(an, requires_grad=True)
    b = ct.tensor(bn, requires_grad=True)
    y = a @ b
    want = np.matmul(an, bn)
    assert tuple(y.shape) == want.shape
    np.testing.assert_allclose(y.detach().numpy(), want, **F64)
    g = rng.standard_normal(want.shape)
    y.backward(ct.tensor(g))
    da, db = _matmul_grads(an, bn, g)
    np.testing.assert_allclose(a.grad.numpy(), da, **F64)
    np.testing.assert_allclose(b.grad.numpy(), db, **F64)


def _sum_to(x: np.ndarray, shape: tuple) -> np.ndarray:
    x = x.sum(axis=tuple(range(x.ndim - len(shape))))
    return x.sum(axis=tuple(i for i, d in enumerate(shape) if d == 1), keepdims=True).reshape(shape)


def _matmul_grads(an, bn, g):
    """float64 NumPy reference gradients of sum(g * (a @ b))."""
    a2 = an[None, :] if an.ndim == 1 else an
    b2 = bn[:, None] if bn.ndim == 1 else bn
    g2 = g.reshape(np.matmul(a2, b2).shape)
    da = _sum_to(np.matmul(g2, np.swapaxes(b2, -1, -2)), a2.shape).reshape(an.shape)
    db = _sum_to(np.matmul(np.swapaxes(a2, -1, -2), g2), b2.shape).reshape(bn.shape)
    return da, db


@pytest.mark.parametrize("ba,bb", [(1, 0), (0, 1), (0, 0)])
def test_bmm_kernel_batch_broadcast_to_zero(ba, bb):
    a = np.ones((ba, 2, 3))
    b = np.ones((bb, 3, 4))
    out = K.bmm_forward(a, b)
    assert out.shape == (0, 2, 4)
    da, db = K.bmm_backward(out, a, b)
    assert da.shape == a.shape and db.shape == b.shape
    assert not da.any() and not db.any()


@pytest.mark.parametrize("lead", [(0,), (2, 0), (0, 3)])
def test_linear_zero_rows_empty_gradients(lead):
    lin = nn.Linear(4, 3)
    x = ct.randn(*lead, 4, requires_grad=True)
    y = lin(x)
    assert tuple(y.shape) == lead + (3,)
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert not lin.weight.grad.numpy().any() and not lin.bias.grad.numpy().any()


# ------------------------------------------------------------------ byte order
def _big(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder(">"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_big_endian_inputs_are_read_by_value(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5)).astype(dtype)
    w = rng.standard_normal((4, 5)).astype(dtype)
    b = rng.standard_normal(4).astype(dtype)
    np.testing.assert_array_equal(K.linear_forward(_big(x), _big(w), _big(b)), K.linear_forward(x, w, b))
    np.testing.assert_array_equal(K.decode_linear(_big(x[:1]), _big(w)), K.decode_linear(x[:1], w))
    np.testing.assert_array_equal(K.softmax_forward(_big(x)), K.softmax_forward(x))


def test_kv_cache_append_into_big_endian_cache_is_refused():
    """It wrote values of 1e37 (native bytes into a swapped array)."""
    ck = _big(np.zeros((1, 2, 4, 3)))
    cv = np.zeros((1, 2, 4, 3))
    k = np.ones((1, 2, 3))
    with pytest.raises(ValueError, match=r"kv_cache_append: cache_k is updated in place, so it must be in "
                                         r"the machine's byte order, got dtype >f8"):
        K.kv_cache_append(ck, cv, k, k, 0)
    assert not ck.any()
    # a big-endian step input is converted, not misread
    ck = np.zeros((1, 2, 4, 3))
    K.kv_cache_append(ck, cv, _big(k * 2.5), _big(k), 1)
    assert (ck[:, :, 1] == 2.5).all() and (cv[:, :, 1] == 1).all()


def test_sgd_step_big_endian_param_refused():
    p = _big(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="sgd_step: param is updated in place, so it must be in the machine's byte order"):
        K.sgd_step(p, np.ones(4, np.float32), None, 0.1)
    assert (p == 1).all()


def test_from_numpy_big_endian_refused_as_torch():
    with pytest.raises(ValueError, match="byte order different from the native byte order"):
        ct.from_numpy(_big(np.ones(3, np.float32)))


def test_tensor_of_big_endian_array_converts_and_trains():
    """ct.tensor copies into the native order (as torch.tensor); Linear and
    an SGD step then give the native results (they refused or produced
    -4.3e8 before)."""
    rng = np.random.default_rng(2)
    xn = rng.standard_normal((3, 4)).astype(np.float32)
    for make in (ct.tensor, ct.as_tensor):
        x = make(_big(xn))
        assert x.dtype == ct.float32 and x.numpy().dtype.isnative
        np.testing.assert_array_equal(x.numpy(), xn)
    ct.manual_seed(0)
    lin = nn.Linear(4, 2)
    w0 = lin.weight.detach().numpy().copy()
    opt = ct.optim.SGD(lin.parameters(), lr=0.5)
    lin(ct.tensor(_big(xn))).sum().backward()
    opt.step()
    want = w0 - 0.5 * np.ones((2, 1), np.float32) * xn.sum(0)
    np.testing.assert_allclose(lin.weight.detach().numpy(), want, rtol=1e-6, atol=1e-6)


def test_data_assigned_a_big_endian_array_is_stored_native():
    p = ct.nn.Parameter(ct.zeros(3))
    p.data = _big(np.arange(3, dtype=np.float32))
    assert p.detach().numpy().dtype.isnative
    p.grad = ct.ones(3)
    ct.optim.SGD([p], lr=1.0).step()
    np.testing.assert_array_equal(p.detach().numpy(), [-1, 0, 1])


def test_tensor_of_object_array_refused():
    with pytest.raises(TypeError, match="can't convert np.ndarray of type object"):
        ct.tensor(np.array([1.0, None], dtype=object))


# ------------------------------------------------------------------ overlap of outputs with inputs
def test_linear_backward_dinp_aliasing_inp_refused():
    x = np.ones((2, 3))
    w = np.ones((4, 3))
    with pytest.raises(ValueError, match="linear_backward: dinp and inp must be separate arrays, got overlapping memory"):
        K.linear_backward(np.ones((2, 4)), x, w, dinp=x)
    assert (x == 1).all()


def test_sdpa_backward_accumulator_aliasing_input_refused():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 3, 4)) for _ in range(3))
    out, probs = K.sdpa_forward(q, k, v)
    dout = rng.standard_normal(out.shape)
    for name, arr in (("dq", q), ("dv", v), ("dk", k)):
        kw = {name: arr}
        before = arr.copy()
        with pytest.raises(ValueError, match=f"sdpa_backward: {name} and .* must be separate arrays"):
            K.sdpa_backward(dout, q, k, v, probs, **kw)
        np.testing.assert_array_equal(arr, before)


def test_partial_overlap_of_views_refused_and_disjoint_views_accepted():
    buf = np.zeros(2 * 2 * 3 + 3)
    dinp = buf[:6].reshape(2, 3)
    dout = np.ones((2, 4))
    w = np.ones((4, 3))
    inp = buf[3:9].reshape(2, 3)          # overlaps dinp's second row
    with pytest.raises(ValueError, match="dinp and inp must be separate arrays"):
        K.linear_backward(dout, inp, w, with_bias=False, dinp=dinp, dweight=np.zeros((4, 3)))
    inp = buf[6:12].reshape(2, 3)         # adjacent, no shared byte
    dinp_, _, _ = K.linear_backward(dout, inp, w, with_bias=False, dinp=dinp, dweight=np.zeros((4, 3)))
    np.testing.assert_array_equal(dinp_, np.full((2, 3), 4.0))


def test_two_accumulators_sharing_memory_refused():
    x = np.ones((2, 3))
    w = np.ones((3, 3))
    g = np.zeros((3, 3))
    with pytest.raises(ValueError, match="linear_backward: dinp and dweight must be separate arrays"):
        K.linear_backward(np.ones((2, 3)), x, w, with_bias=False, dinp=g[:2], dweight=g)


def test_input_copied_because_non_contiguous_may_overlap_output():
    """A strided input is copied before the kernel runs, so writing an
    overlapping accumulator cannot change what it reads: accepted."""
    base = np.arange(12.0).reshape(3, 4)
    inp = base[:, ::2]                    # (3, 2), copied by the boundary
    snapshot = inp.copy()
    dinp = np.zeros((3, 2))
    w = np.ones((5, 2))
    dout = np.ones((3, 5))
    d1, dw, _ = K.linear_backward(dout, inp, w, dinp=dinp)
    np.testing.assert_allclose(dw, dout.T @ snapshot, **F64)


# ------------------------------------------------------------------ 32-bit BLAS dimension limit
def _huge(*shape):
    """An array of the given shape that takes no memory (a broadcast view):
    the check must come before any copy."""
    return np.broadcast_to(np.float32(1), shape)


def test_dimension_at_2_31_refused_before_any_copy():
    """K = 2**31 reached the 32-bit OpenBLAS ("parameter number 5 had an
    illegal value") and returned 0.5 where the answer is 4.5."""
    n = 2 ** 31
    for fn in (K.linear_forward, K.decode_linear):
        with pytest.raises(ValueError, match=r"shape\[-1\] must be at most 2147483647 \(2\*\*31 - 1, the limit "
                                             r"of the 32-bit BLAS\), got 2147483648"):
            fn(_huge(1, n), _huge(2, n))
    with pytest.raises(ValueError, match=r"linear_forward: inp must have at most 2147483647 .* rows"):
        K.linear_forward(_huge(2 ** 16, 2 ** 15 + 1, 1), _huge(3, 1))



# ------------------------------------------------------------------ LayerNorm on constant rows
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("magnitude", [1e5, 1e10, 1e20, 1e30, -1e30, 3e38])
def test_layernorm_constant_rows_give_the_bias(dtype, magnitude):
    """torch (float64, Welford) returns exactly the bias on a constant row;
    the plain mean sum / D rounded at 1e30 and gave bias + weight."""
    x = np.full((3, 7), magnitude, dtype)
    w = np.full(7, 2, dtype)
    b = np.arange(7, dtype=dtype)
    out = K.layernorm_forward(x, w, b)[0]
    np.testing.assert_array_equal(out, np.broadcast_to(b, out.shape))
    out2 = K.add_layernorm_forward(x, np.zeros_like(x), w, b)[0]
    np.testing.assert_array_equal(out2, np.broadcast_to(b, out2.shape))
    y = nn.LayerNorm(7, dtype=ct.float64 if dtype == np.float64 else None)(ct.tensor(x))
    np.testing.assert_array_equal(y.detach().numpy(), np.zeros_like(x))
