"""linear, matmul and bmm kernels: the bespoke edge cases -- a zero-size
inner dimension (out = bias), NaN, bad input, a huge batch mismatch.  Forward
against NumPy, float64 gradients, accumulation, views, empty input and torch
parity: tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer as ct
import ctransformer.kernels as K
from conftest import run_isolated
from tolerances import F32


def test_linear_empty_and_nan(rng):
    w = rng.standard_normal((4, 5)).astype(np.float32)
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


@pytest.mark.parametrize("m,k,n", [(40, 200, 900), (900, 100, 40)])
def test_linear_bias_is_filled_by_each_block_of_a_split_product(rng, m, k, n):
    """linear_forward writes the bias rows inside each thread's block of a
    split product (GEMM_BIAS, csrc/ct_blas.h): split by columns (n > m) and by
    rows, at 2 threads in deterministic mode (split by size alone), the result
    is x w^T + b as at 1 thread and as a float64 reference."""
    import ctransformer as ct
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    before, runs = ct.get_num_threads(), []
    ct.use_deterministic_algorithms(True)
    try:
        for threads in (1, 2):
            ct.set_num_threads(threads)
            runs.append(K.linear_forward(x, w, b))
    finally:
        ct.set_num_threads(before)
        ct.use_deterministic_algorithms(False)
    for got in runs:
        np.testing.assert_allclose(got, want, **F32)


def _dense_linear_grads(dout, x, w):
    """NumPy float64 reference of linear_backward: (dinp, dweight, dbias)."""
    d, xx, ww = (a.astype(np.float64) for a in (dout, x, w))
    return d @ ww, d.T @ xx, d.sum(axis=0)


@pytest.mark.parametrize("pattern", ["random", "ends", "head", "head_only"])
@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_backward_zero_rows_are_left_out(rng, dtype, given, pattern):
    """Rows of dout that are all zero (ignored targets of a loss) are left out
    of the products (rows_linear_backward, csrc/fused.c): the same gradients
    as the dense products, written into fresh arrays (computed compacted, then
    spread in place) or added to given ones, the dead rows' dinp exactly 0 (or
    the given values).  "ends": the first and last rows dead, and runs of them
    between live ones.  "head": the first 70 rows live (a sequence-first
    batch's positions below the shortest length: used in place), then dead
    and live runs (gathered); "head_only": every live row in the head."""
    M, K_, N = 96, 20, 30
    x = rng.standard_normal((M, K_)).astype(dtype)
    w = rng.standard_normal((N, K_)).astype(dtype)
    dout = rng.standard_normal((M, N)).astype(dtype)
    if pattern == "random":
        dead = rng.permutation(M)[:30]
    elif pattern == "ends":
        dead = np.r_[0:3, 10, 20:27, 50:60, M - 4:M]
    elif pattern == "head":
        dead = np.r_[70:80, 84, 90:M]
    else:
        dead = np.r_[72:M]
    dout[dead] = 0
    want = _dense_linear_grads(dout, x, w)
    tol = F32 if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    if given:
        starts = [rng.standard_normal(a.shape).astype(dtype) for a in (x, w, w[:, 0])]
        got = K.linear_backward(dout, x, w, True, True, *[s.copy() for s in starts])
        want = [wi + s for wi, s in zip(want, starts)]
        np.testing.assert_array_equal(got[0][dead], starts[0][dead])
    else:
        got = K.linear_backward(dout, x, w)
        assert (got[0][dead] == 0).all()
    for g, wi in zip(got, want):
        np.testing.assert_allclose(g, wi, **tol)


def test_linear_backward_all_rows_zero(rng):
    """Every row of dout zero: fresh gradients are zeros, given ones unchanged."""
    x, w = rng.standard_normal((40, 6)), rng.standard_normal((5, 6))
    dout = np.zeros((40, 5))
    for g in K.linear_backward(dout, x, w):
        assert (g == 0).all()
    starts = [rng.standard_normal(s) for s in ((40, 6), (5, 6), (5,))]
    got = K.linear_backward(dout, x, w, True, True, *[s.copy() for s in starts])
    for g, s in zip(got, starts):
        np.testing.assert_array_equal(g, s)


def test_linear_backward_zero_rows_with_nan_inputs_stay_dense(rng):
    """0 * NaN is NaN in the dense products: a zero row of dout whose saved
    input row holds a NaN, or a weight with an inf, is not left out."""
    M, K_, N = 64, 8, 12
    x = rng.standard_normal((M, K_))
    w = rng.standard_normal((N, K_))
    dout = rng.standard_normal((M, N))
    dout[:20] = 0
    x[3, 2] = np.nan
    dinp, dweight, dbias = K.linear_backward(dout, x, w)
    assert np.isnan(dweight[:, 2]).all() and not np.isnan(np.delete(dweight, 2, axis=1)).any()
    assert not np.isnan(dinp).any() and not np.isnan(dbias).any()
    x[3, 2] = 0.5
    w[0, 0] = np.inf
    dinp, dweight, _ = K.linear_backward(dout, x, w)
    assert np.isnan(dinp[:20, 0]).all()  # 0 * inf in the dead rows, as the dense product


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k, n", [(512, 2048), (128, 1000), (64, 3)])
def test_linear_few_rows_are_decode_linears_dot_products(rng, dtype, k, n):
    """1-3 rows, and up to 8 against a weight of 256K elements or more, take
    decode_linear's dot products (csrc/linear.c, CT_LINEAR_FEW_ROWS: the GEMM
    packed the whole weight for them, 4x sgemv's time for one row): the
    same bits as decode_linear, each row's alone or among the others, and
    within float32's tolerance of NumPy in float64 (bias included)."""
    w = rng.standard_normal((n, k)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    big = n * k >= 256 * 1024
    for m in range(1, 9):
        x = rng.standard_normal((m, k)).astype(dtype)
        out = K.linear_forward(x, w, b)
        np.testing.assert_allclose(out, x.astype(np.float64) @ w.T.astype(np.float64) + b, **F32)
        if m < 4 or big:
            np.testing.assert_array_equal(out, K.decode_linear(x, w, b))
            for i in range(m):
                np.testing.assert_array_equal(out[i:i + 1], K.linear_forward(x[i:i + 1], w, b))
            before = ct.get_num_threads()
            try:  # README: the same bits on any thread count
                for threads in (1, 2):
                    ct.set_num_threads(threads)
                    np.testing.assert_array_equal(K.linear_forward(x, w, b), out)
            finally:
                ct.set_num_threads(before)
