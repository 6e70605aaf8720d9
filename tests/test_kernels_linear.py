"""linear and matmul kernels: NumPy reference, float64 gradients, torch
parity, bad input."""
import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import check_grads, run_isolated
from tolerances import F32


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lead", [(), (5,), (2, 3)])
def test_linear_forward_matches_numpy(rng, dtype, lead):
    x = rng.standard_normal(lead + (7,)).astype(dtype)
    w = rng.standard_normal((4, 7)).astype(dtype)
    b = rng.standard_normal(4).astype(dtype)
    tol = F32 if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(K.linear_forward(x, w, b), x @ w.T + b, **tol)
    np.testing.assert_allclose(K.linear_forward(x, w), x @ w.T, **tol)


def test_linear_gradients_float64(rng):
    inputs = dict(x=rng.standard_normal((2, 3, 5)), w=rng.standard_normal((4, 5)),
                  b=rng.standard_normal(4))

    def grads(dout, x, w, b):
        dx, dw, db = K.linear_backward(dout, x, w)
        return dict(x=dx, w=dw, b=db)

    check_grads(K.linear_forward, grads, inputs, ["x", "w", "b"])


def test_linear_backward_accumulates(rng):
    x, w = rng.standard_normal((3, 5)), rng.standard_normal((4, 5))
    dout = rng.standard_normal((3, 4))
    dx0, dw0, db0 = K.linear_backward(dout, x, w)
    acc_x, acc_w, acc_b = np.ones((3, 5)), np.ones((4, 5)), np.ones(4)
    rx, rw, rb = K.linear_backward(dout, x, w, dinp=acc_x, dweight=acc_w, dbias=acc_b)
    assert rx is acc_x and rw is acc_w and rb is acc_b
    np.testing.assert_allclose(acc_x, dx0 + 1)
    np.testing.assert_allclose(acc_w, dw0 + 1)
    np.testing.assert_allclose(acc_b, db0 + 1)


def test_linear_empty_and_nan(rng):
    w = rng.standard_normal((4, 5)).astype(np.float32)
    assert K.linear_forward(np.zeros((0, 5), np.float32), w).shape == (0, 4)
    out = K.linear_forward(np.zeros((2, 0), np.float32), np.zeros((3, 0), np.float32), np.ones(3, np.float32))
    np.testing.assert_array_equal(out, np.ones((2, 3)))
    x = np.full((2, 5), np.nan, np.float32)
    assert np.isnan(K.linear_forward(x, w)).all()


def test_linear_bad_input(rng):
    x, w = rng.standard_normal((3, 5)), rng.standard_normal((4, 5))
    with pytest.raises(ValueError, match=r"linear_forward: weight.shape\[1\] must be 5"):
        K.linear_forward(x, rng.standard_normal((4, 6)))
    with pytest.raises(TypeError, match="linear_forward: weight must have dtype float64, got float32"):
        K.linear_forward(x, w.astype(np.float32))
    with pytest.raises(TypeError, match="linear_forward: inp must have dtype float32 or float64"):
        K.linear_forward(x.astype(np.int32), w)
    with pytest.raises(ValueError, match=r"linear_forward: bias.shape\[0\] must be 4"):
        K.linear_forward(x, w, np.zeros(3))
    with pytest.raises(TypeError, match="linear_forward: inp must be a numpy.ndarray"):
        K.linear_forward([[1.0]], w)
    with pytest.raises(ValueError, match="linear_backward: dweight is updated in place"):
        K.linear_backward(np.ones((3, 4)), x, w, dweight=np.zeros((5, 4)).T)
    with pytest.raises(ValueError, match=r"linear_backward: dout.shape\[-1\] must be 4"):
        K.linear_backward(np.ones((3, 3)), x, w)


def test_linear_reads_views_correctly(rng):
    x = rng.standard_normal((5, 8))
    w = rng.standard_normal((4, 5))
    view = x.T[::-1]  # non-contiguous, negative stride
    np.testing.assert_allclose(K.linear_forward(view, w), view @ w.T, rtol=1e-12)


@pytest.mark.parametrize("ashape,bshape", [((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((4, 5), (2, 5, 3)),
                                           ((2, 3, 4, 5), (2, 3, 5, 6)), ((2, 1, 4, 5), (1, 3, 5, 6))])
def test_matmul_forward_backward(rng, ashape, bshape):
    a, b = rng.standard_normal(ashape), rng.standard_normal(bshape)
    np.testing.assert_allclose(K.matmul_forward(a, b), a @ b, rtol=1e-12)

    def grads(dout, a, b):
        da, db = K.matmul_backward(dout, a, b)
        assert da.shape == a.shape and db.shape == b.shape
        return dict(a=da, b=db)

    check_grads(K.matmul_forward, grads, dict(a=a, b=b), ["a", "b"])


def test_linear_torch_parity(rng, torch_ref):
    x = rng.standard_normal((6, 10)).astype(np.float32)
    dout = rng.standard_normal((6, 7)).astype(np.float32)

    def torch_side(torch):
        lin = torch.nn.Linear(10, 7)
        xt = torch.tensor(x, requires_grad=True)
        out = lin(xt)
        out.backward(torch.tensor(dout))
        return dict(w=lin.weight, b=lin.bias, out=out, dx=xt.grad, dw=lin.weight.grad, db=lin.bias.grad)

    ref = torch_ref(torch_side, inputs=dict(x=x, dout=dout))
    np.testing.assert_allclose(K.linear_forward(x, ref["w"], ref["b"]), ref["out"], **F32)
    dx, dw, db = K.linear_backward(dout, x, ref["w"])
    np.testing.assert_allclose(dx, ref["dx"], **F32)
    np.testing.assert_allclose(dw, ref["dw"], **F32)
    np.testing.assert_allclose(db, ref["db"], **F32)


def test_huge_dimension_mismatch_does_not_crash():
    r = run_isolated("""
        import numpy as np, ctransformer.kernels as K
        try:
            K.bmm_forward(np.zeros((2, 3, 4)), np.zeros((3, 4, 5)))
        except ValueError as e:
            print("ok", e)
    """)
    assert r.returncode == 0, r.stderr
    assert "ok bmm_forward: batch sizes" in r.stdout
