"""fused kernels: the feed-forward backward (ff_backward: float64 gradients,
zero rows, NaN, torch parity, options, bad input), the bespoke edge cases
of bias + activation and residual add + LayerNorm (NaN, constant rows, bad
input), and dropout + residual add + LayerNorm (the bits of the kernels it
fuses, accumulation, bad input).  Their forward against NumPy, float64 gradients, accumulation, views,
empty input and torch parity: tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import check_grads
from tolerances import F32, F64_TIGHT

ACTS = [("relu", "none"), ("gelu", "none"), ("gelu", "tanh")]


# ---- bias + activation --------------------------------------------------------

def test_bias_act_nan(rng):
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    x[1, 2] = np.nan
    for act in ("relu", "gelu"):
        out = K.bias_act_forward(x, b, act)
        assert np.isnan(out[1, 2]) and np.isfinite(np.delete(out.ravel(), 6)).all()


def test_bias_act_bad_input(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"bias_act_forward: bias.shape\[0\] must be 4 \(inp.shape\[-1\]\), got 5"):
        K.bias_act_forward(x, np.zeros(5))
    with pytest.raises(TypeError, match="bias_act_forward: bias must have dtype float64, got float32"):
        K.bias_act_forward(x, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="bias_act_forward: act must be 'relu', 'gelu' or 'gelu_tanh', got 'tanh'"):
        K.bias_act_forward(x, None, "tanh")
    with pytest.raises(ValueError, match="bias_act_forward: approximate='tanh' needs act='gelu'"):
        K.bias_act_forward(x, None, "relu", "tanh")
    with pytest.raises(ValueError, match=r"bias_act_backward: dout.shape\[1\] must be 4 \(inp.shape\), got 3"):
        K.bias_act_backward(np.ones((3, 3)), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act,approximate", ACTS)
def test_bias_act_dropout_is_bias_act_then_dropout(rng, dtype, act, approximate):
    """The fused forward of the feed-forward's activation and dropout gives
    the bits of bias_act_forward then dropout_forward (offset 0): shapes
    whose rows cross the kernel's 256-element chunks at odd counters, with
    and without bias, p 0 / 0.3 / 1, at 1 and 2 threads."""
    import ctransformer as ct
    before = ct.get_num_threads()
    try:
        for threads in (1, 2):
            ct.set_num_threads(threads)
            for shape in [(7, 513), (3, 5), (64, 512), (0, 4), (2, 3, 300)]:
                h = rng.standard_normal(shape).astype(dtype)
                for bias in (rng.standard_normal(shape[-1]).astype(dtype), None):
                    for p in (0.0, 0.3, 1.0):
                        want = K.dropout_forward(K.bias_act_forward(h, bias, act, approximate), p, 41)
                        got = K.bias_act_dropout_forward(h, bias, p, 41, act, approximate)
                        assert got[1].dtype == np.bool_ and got[0].dtype == dtype
                        np.testing.assert_array_equal(got[0], want[0])
                        np.testing.assert_array_equal(got[1], want[1])
    finally:
        ct.set_num_threads(before)


def test_bias_act_dropout_views_and_vectors(rng):
    """A strided view and a 1-d input give what their contiguous copies give."""
    h = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    view = h.T  # (24, 40), not C-contiguous
    for got, want in zip(K.bias_act_dropout_forward(view, b, 0.4, 9), K.bias_act_dropout_forward(view.copy(), b, 0.4, 9)):
        np.testing.assert_array_equal(got, want)
    row = h[3]
    for got, want in zip(K.bias_act_dropout_forward(row, None, 0.4, 9, "gelu"),
                         K.dropout_forward(K.bias_act_forward(row, None, "gelu"), 0.4, 9)):
        np.testing.assert_array_equal(got, want)


def test_bias_act_dropout_bad_input(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"bias_act_dropout_forward: p must be in \[0, 1\], got 1.5"):
        K.bias_act_dropout_forward(x, None, 1.5, 0)
    with pytest.raises(ValueError, match=r"bias_act_dropout_forward: seed must be 0 <= seed < 2\*\*64, got -1"):
        K.bias_act_dropout_forward(x, None, 0.1, -1)
    with pytest.raises(ValueError, match=r"bias_act_dropout_forward: bias.shape\[0\] must be 4 \(inp.shape\[-1\]\), got 5"):
        K.bias_act_dropout_forward(x, np.zeros(5), 0.1, 0)
    with pytest.raises(ValueError, match="bias_act_dropout_forward: act must be 'relu', 'gelu' or 'gelu_tanh', got 'tanh'"):
        K.bias_act_dropout_forward(x, None, 0.1, 0, "tanh")


# ---- residual add + LayerNorm -------------------------------------------------

def test_add_layernorm_constant_row_and_nan(rng):
    x = np.full((2, 4), 3.0)
    out, mean, rstd = K.add_layernorm_forward(x, np.zeros((2, 4)), eps=1e-5)
    np.testing.assert_allclose(out, 0, atol=0)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(1e-5), rtol=1e-12)
    x = rng.standard_normal((2, 4))
    x[0, 1] = np.nan
    out, _, _ = K.add_layernorm_forward(x, np.zeros((2, 4)))
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()


def test_add_layernorm_bad_input(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"add_layernorm_forward: residual.shape\[1\] must be 4 \(inp.shape\), got 5"):
        K.add_layernorm_forward(x, np.zeros((3, 5)))
    with pytest.raises(ValueError, match="add_layernorm_forward: residual must have 2 dimensions"):
        K.add_layernorm_forward(x, np.zeros(4))
    with pytest.raises(TypeError, match="add_layernorm_forward: residual must have dtype float64, got float32"):
        K.add_layernorm_forward(x, np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"add_layernorm_forward: weight.shape\[0\] must be 4"):
        K.add_layernorm_forward(x, x, np.ones(3))
    with pytest.raises(ValueError, match="add_layernorm_forward: eps must be >= 0"):
        K.add_layernorm_forward(x, x, eps=-1.0)
    out, mean, rstd = K.add_layernorm_forward(x, x)
    with pytest.raises(ValueError, match=r"add_layernorm_backward: mean and rstd must have 3 elements"):
        K.add_layernorm_backward(out, x, x, None, mean[:2], rstd)
    with pytest.raises(ValueError, match="add_layernorm_backward: dinp is updated in place"):
        K.add_layernorm_backward(out, x, x, None, mean, rstd, dinp=np.zeros((4, 3)).T)


# ---- feed-forward backward (row-sparse) ---------------------------------------

def ff_setup(rng, M=6, D=5, F=7, dtype=np.float64, bias=True):
    r = lambda *s: (rng.standard_normal(s) * 0.7).astype(dtype)  # noqa: E731
    return dict(x=r(2, M // 2, D), w1=r(F, D), b1=r(F) if bias else None, w2=r(D, F), b2=r(D) if bias else None)


def ff_forward(x, w1, b1, w2, b2, keep, p, act="relu", approximate="none"):
    """y = drop(act(x w1^T + b1)) w2^T + b2 from the kernels; also h."""
    h = K.linear_forward(x, w1, None)
    a = K.bias_act_forward(h, b1, act, approximate)
    if keep is not None:
        a = a * keep / (1 - p)
    return K.linear_forward(a, w2, b2), h


@pytest.mark.parametrize("act,approximate", ACTS)
@pytest.mark.parametrize("p", [0.0, 0.4])
def test_ff_backward_gradients_float64(rng, act, approximate, p):
    s = ff_setup(rng)
    keep = rng.random((2, 3, 7)) >= p if p > 0 else None

    def forward(x, w1, b1, w2, b2):
        return ff_forward(x, w1, b1, w2, b2, keep, p, act, approximate)[0]

    def grads(dout, x, w1, b1, w2, b2):
        _, h = ff_forward(x, w1, b1, w2, b2, keep, p, act, approximate)
        dx, dw1, db1, dw2, db2 = K.ff_backward(dout, x, h, keep, p, w1, b1, w2, act=act, approximate=approximate)
        return dict(x=dx, w1=dw1, b1=db1, w2=dw2, b2=db2)

    check_grads(forward, grads, s, list(s))


@pytest.mark.parametrize("act,approximate", ACTS)
def test_feed_forward_op_with_dropout_gradients_float64(rng, act, approximate):
    """The feed-forward op while training with dropout (its forward through
    bias_act_dropout_forward, its backward ff_backward with that kernel's
    mask) against central differences, the generator reseeded before each
    forward so that every evaluation drops the same elements."""
    import ctransformer as ct
    from ctransformer.ops.fused import feed_forward
    s = ff_setup(rng)

    def run(arrays, need_grad):
        ct.manual_seed(5)
        ts = {n: None if a is None else ct.tensor(a, requires_grad=need_grad) for n, a in arrays.items()}
        y = feed_forward(ts["x"], ts["w1"], ts["b1"], ts["w2"], ts["b2"], act, approximate, dropout_p=0.4,
                         training=True)
        return y, ts

    def forward(x, w1, b1, w2, b2):
        return run(dict(x=x, w1=w1, b1=b1, w2=w2, b2=b2), False)[0].detach().numpy()

    def grads(dout, x, w1, b1, w2, b2):
        y, ts = run(dict(x=x, w1=w1, b1=b1, w2=w2, b2=b2), True)
        y.backward(ct.tensor(dout))
        return {n: t.grad.numpy() for n, t in ts.items()}

    no_dropout = feed_forward(*[None if a is None else ct.tensor(a) for a in s.values()], act, approximate,
                              dropout_p=0.4, training=False)
    assert not np.allclose(forward(*s.values()), no_dropout.numpy())  # some elements were dropped
    check_grads(forward, grads, s, list(s))


def dense_ff_grads(dout, s, h, keep, p):
    """The same gradients from the separate kernels (no row skipping)."""
    a = K.bias_act_forward(h, s["b1"])
    a_d = a * keep / (1 - p) if keep is not None else a
    da, dw2, db2 = K.linear_backward(dout, a_d, s["w2"], with_bias=s["b2"] is not None)
    if keep is not None:
        da = da * keep / (1 - p)
    dh, db1 = K.bias_act_backward(da, h, s["b1"])
    dx, dw1, _ = K.linear_backward(dh, s["x"], s["w1"], with_bias=False)
    return dx, dw1, db1, dw2, db2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ff_backward_skips_zero_rows_exactly(rng, dtype):
    """Rows of dout that are all zero (padding) add nothing: same result as the
    dense computation, and their dx rows are 0."""
    s = ff_setup(rng, M=32, D=8, F=16, dtype=dtype)
    keep = rng.random((2, 16, 16)) >= 0.3
    _, h = ff_forward(s["x"], s["w1"], s["b1"], s["w2"], s["b2"], keep, 0.3)
    dout = rng.standard_normal((2, 16, 8)).astype(dtype)
    dout[0, 10:] = 0  # padding rows
    dout[1, 3] = 0
    got = K.ff_backward(dout, s["x"], h, keep, 0.3, s["w1"], s["b1"], s["w2"])
    want = dense_ff_grads(dout, s, h, keep, 0.3)
    tol = F32 if dtype == np.float32 else F64_TIGHT
    for g, w, name in zip(got, want, ["dx", "dw1", "db1", "dw2", "db2"]):
        np.testing.assert_allclose(g, w, **tol, err_msg=name)
    assert (got[0][0, 10:] == 0).all() and (got[0][1, 3] == 0).all()


@pytest.mark.parametrize("dead", ["none", "padding", "all"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_ff_backward_writes_every_gradient_element(rng, dead, threads, bias):
    """ff_backward's gradients are fresh arrays it writes, not zeroed first
    (dx computed on the live rows, then spread with its dead rows zeroed): with
    the heap full of NaN from freed arrays of every gradient's size, at 1 and 2
    threads (deterministic mode), with no dead rows (dense), padding rows
    (compacted) and every row dead, each gradient equals the dense kernels'."""
    import ctransformer as ct
    M, D, F = 96, 64, 256
    s = ff_setup(rng, M=M, D=D, F=F, dtype=np.float32, bias=bias)
    keep = rng.random((2, M // 2, F)) >= 0.2
    _, h = ff_forward(s["x"], s["w1"], s["b1"], s["w2"], s["b2"], keep, 0.2)
    dout = rng.standard_normal((2, M // 2, D)).astype(np.float32)
    if dead == "padding":
        dout[0, 30:] = 0
        dout[1, :2] = 0
        dout[1, 40:] = 0
    elif dead == "all":
        dout[:] = 0
    before = ct.get_num_threads()
    ct.use_deterministic_algorithms(True)
    try:
        ct.set_num_threads(threads)
        for shape in ((M, D), (F, D), (F,), (D, F), (D,)):  # dirty the heap
            junk = np.full(shape, np.nan, np.float32)
            del junk
        got = K.ff_backward(dout, s["x"], h, keep, 0.2, s["w1"], s["b1"], s["w2"], with_bias2=bias)
    finally:
        ct.set_num_threads(before)
        ct.use_deterministic_algorithms(False)
    want = dense_ff_grads(dout, s, h, keep, 0.2)
    for g, w, name in zip(got, want, ["dx", "dw1", "db1", "dw2", "db2"]):
        if w is None:
            assert g is None, name
            continue
        assert np.isfinite(g).all(), name
        np.testing.assert_allclose(g, w, **F32, err_msg=name)
    if dead != "none":
        assert (got[0][~dout.any(-1)] == 0).all()


FF_GRADS = ("dx", "dw1", "db1", "dw2", "db2")


@pytest.mark.parametrize("dead", ["none", "padding"])
@pytest.mark.parametrize("given_names", [FF_GRADS, ("dx", "db1"), ("dw2",)], ids=["all", "dx+db1", "dw2"])
def test_ff_backward_accumulates_into_given_arrays(rng, dead, given_names):
    """Gradients passed in are added to (+=) and returned, on the dense path
    (no dead rows) and the compacted one (padding rows: dx of the live rows
    added row by row); the ones not passed start from zeros, so they equal
    the fresh result."""
    M, D, F = 64, 16, 48
    s = ff_setup(rng, M=M, D=D, F=F, dtype=np.float64)
    keep = rng.random((2, M // 2, F)) >= 0.2
    _, h = ff_forward(s["x"], s["w1"], s["b1"], s["w2"], s["b2"], keep, 0.2)
    dout = rng.standard_normal((2, M // 2, D))
    if dead == "padding":
        dout[0, 20:] = 0
        dout[1, 5] = 0
    args = (dout, s["x"], h, keep, 0.2, s["w1"], s["b1"], s["w2"])
    fresh = dict(zip(FF_GRADS, K.ff_backward(*args)))
    given = {name: rng.standard_normal(fresh[name].shape) for name in given_names}
    start = {name: a.copy() for name, a in given.items()}
    got = dict(zip(FF_GRADS, K.ff_backward(*args, **given)))
    for name in FF_GRADS:
        if name in given:
            assert got[name] is given[name], name
            np.testing.assert_allclose(got[name], start[name] + fresh[name], **F64_TIGHT, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], fresh[name], **F64_TIGHT, err_msg=name)


def test_ff_backward_given_array_checked(rng):
    """A given gradient of the wrong shape or not C-contiguous is refused, naming it."""
    s = ff_setup(rng, M=8, D=4, F=6, dtype=np.float64)
    _, h = ff_forward(s["x"], s["w1"], s["b1"], s["w2"], s["b2"], None, 0.0)
    dout = np.ones_like(s["x"])
    args = (dout, s["x"], h, None, 0.0, s["w1"], s["b1"], s["w2"])
    with pytest.raises(ValueError, match="ff_backward: dw1"):
        K.ff_backward(*args, dw1=np.zeros((4, 6)))
    with pytest.raises(ValueError, match="ff_backward: dw2"):
        K.ff_backward(*args, dw2=np.zeros((6, 4)).T)


@pytest.mark.parametrize("act,approximate", [("relu", "none"), ("gelu", "none")])
def test_ff_backward_rows_on_the_pool_match_the_dense_kernels(rng, act, approximate):
    """Big enough for the pool (csrc/fused.c: the recompute and activation
    rows split over the threads, db1 summed on the caller in row order): at
    2 threads (deterministic mode, so the split is by size alone) the same
    result as the separate kernels, with padding rows and dropout; db1 has
    the same bits as at 1 thread."""
    import ctransformer as ct
    s = ff_setup(rng, M=1024, D=32, F=256, dtype=np.float32)
    keep = rng.random((2, 512, 256)) >= 0.2
    _, h = ff_forward(s["x"], s["w1"], s["b1"], s["w2"], s["b2"], keep, 0.2, act, approximate)
    dout = rng.standard_normal((2, 512, 32)).astype(np.float32)
    dout[1, 400:] = 0  # padding rows: the compacted path
    before, runs = ct.get_num_threads(), []
    ct.use_deterministic_algorithms(True)
    try:
        for threads in (1, 2):
            ct.set_num_threads(threads)
            runs.append(K.ff_backward(dout, s["x"], h, keep, 0.2, s["w1"], s["b1"], s["w2"], act=act,
                                      approximate=approximate))
    finally:
        ct.set_num_threads(before)
        ct.use_deterministic_algorithms(False)
    a = K.bias_act_forward(h, s["b1"], act, approximate) * keep / 0.8
    da, dw2, db2 = K.linear_backward(dout, a, s["w2"])
    dh, db1 = K.bias_act_backward(da * keep / 0.8, h, s["b1"], act, approximate)
    dx, dw1, _ = K.linear_backward(dh, s["x"], s["w1"], with_bias=False)
    for got in runs:
        for g, w, name in zip(got, (dx, dw1, db1, dw2, db2), ["dx", "dw1", "db1", "dw2", "db2"]):
            np.testing.assert_allclose(g, w, **F32, err_msg=name)
    np.testing.assert_array_equal(runs[0][4], runs[1][4])  # db2: a column sum, no GEMM


def test_ff_backward_compaction_copies_on_the_pool(rng):
    """Rows wide enough (D 256) that the compaction's copies (gathering the
    live rows of dout and x, scattering dx back) run in blocks on the pool:
    at 1, 2 and 3 threads every gradient is the float64 dense one to the
    rounding of its float32 sums (bounds from the sums of |terms|), and the
    padding rows' dx stays 0."""
    import ctransformer as ct
    s = ff_setup(rng, M=1024, D=256, F=64, dtype=np.float32)
    _, h = ff_forward(s["x"], s["w1"], s["b1"], s["w2"], s["b2"], None, 0.0)
    dout = rng.standard_normal((2, 512, 256)).astype(np.float32)
    dout[0, 300:] = 0  # padding rows: the compacted path
    dout[1, 7] = 0
    f64 = {k: v.astype(np.float64).reshape(-1, v.shape[-1]) if v.ndim == 3 else v.astype(np.float64)
           for k, v in s.items()}
    g, x = dout.reshape(-1, 256).astype(np.float64), f64["x"]
    live = (h.reshape(-1, 64).astype(np.float64) + f64["b1"]) > 0
    a = np.maximum(h.reshape(-1, 64).astype(np.float64) + f64["b1"], 0)
    dh = (g @ f64["w2"]) * live
    abs_dh = (np.abs(g) @ np.abs(f64["w2"])) * live
    eps, M, D, F = np.finfo(np.float32).eps, 1024, 256, 64
    want = [(dh @ f64["w1"], (D + F) * eps * (abs_dh @ np.abs(f64["w1"]))),
            (dh.T @ x, (M + D) * eps * (abs_dh.T @ np.abs(x))),
            (dh.sum(0), (M + D) * eps * abs_dh.sum(0)),
            (g.T @ a, (M + F) * eps * (np.abs(g).T @ a)),
            (g.sum(0), M * eps * np.abs(g).sum(0))]
    before = ct.get_num_threads()
    ct.use_deterministic_algorithms(True)
    try:
        for threads in (1, 2, 3):
            ct.set_num_threads(threads)
            got = K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], s["b1"], s["w2"])
            for name, gi, (w, bound) in zip(["dx", "dw1", "db1", "dw2", "db2"], got, want):
                err = np.abs(gi.reshape(w.shape) - w)
                assert (err <= bound).all(), f"{name} at {threads} threads: exceeds its bound by {np.max(err - bound):.3g}"
            assert (got[0][0, 300:] == 0).all() and (got[0][1, 7] == 0).all()
    finally:
        ct.set_num_threads(before)
        ct.use_deterministic_algorithms(False)


def test_ff_backward_nan_in_a_zero_gradient_row_still_propagates(rng):
    """0 * NaN is NaN in the dense products: a dead row with a NaN input (or
    non-finite weights) is not skipped, the result is the dense one."""
    s = ff_setup(rng, M=32, D=4, F=6)
    x = s["x"].copy()
    x[0, 5, 1] = np.nan
    h = K.linear_forward(x, s["w1"], None)
    dout = rng.standard_normal((2, 16, 4))
    dout[0, 2:] = 0
    dx, dw1, _, dw2, _ = K.ff_backward(dout, x, h, None, 0.0, s["w1"], s["b1"], s["w2"])
    assert np.isnan(dw1).any() and np.isnan(dw2).any()
    w2 = s["w2"].copy()
    w2[:, 0] = np.inf
    h = K.linear_forward(s["x"], s["w1"], None)
    got = K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], s["b1"], w2)
    want = dense_ff_grads(dout, dict(s, w2=w2), h, None, 0.0)
    assert np.isnan(got[0]).any()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **F64_TIGHT)  # NaN where the dense result has NaN


def test_ff_backward_torch_parity(rng, torch_ref):
    s = ff_setup(rng, M=8, D=6, F=10, dtype=np.float32)
    dout = rng.standard_normal((2, 4, 6)).astype(np.float32)
    dout[1, 2:] = 0
    names = ("x", "w1", "b1", "w2", "b2")

    def torch_side(torch):
        tx, tw1, tb1, tw2, tb2 = ts = [torch.tensor(s[n], requires_grad=True) for n in names]
        y = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(tx, tw1, tb1)), tw2, tb2)
        y.backward(torch.tensor(dout))
        return dict(grads=[t.grad for t in ts])

    ref = torch_ref(torch_side, inputs=dict(dout=dout, **s))
    h = K.linear_forward(s["x"], s["w1"], None)
    got = K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], s["b1"], s["w2"])
    assert len(got) == len(ref["grads"]) == 5
    for g, t in zip(got, ref["grads"]):
        np.testing.assert_allclose(g, t, **F32)


def test_ff_backward_options_empty_and_bad_input(rng):
    s = ff_setup(rng, bias=False)
    h = K.linear_forward(s["x"], s["w1"], None)
    dout = rng.standard_normal(s["x"].shape)
    dx, dw1, db1, dw2, db2 = K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], None, s["w2"], with_bias2=False,
                                           need_dx=False)
    assert dx is None and db1 is None and db2 is None and dw1.shape == (7, 5) and dw2.shape == (5, 7)
    e = np.zeros((0, 5))
    dx, dw1, *_ = K.ff_backward(e, e, np.zeros((0, 7)), None, 0.0, s["w1"], None, s["w2"])
    assert dx.shape == (0, 5) and (dw1 == 0).all()
    with pytest.raises(ValueError, match=r"ff_backward: w1.shape\[0\] must be 7 \(h.shape\[-1\]\), got 5"):
        K.ff_backward(dout, s["x"], h, None, 0.0, s["w2"], None, s["w2"])
    with pytest.raises(ValueError, match=r"ff_backward: dout.shape\[2\] must be 5 \(x.shape\), got 4"):
        K.ff_backward(dout[..., :4], s["x"], h, None, 0.0, s["w1"], None, s["w2"])
    with pytest.raises(ValueError, match=r"ff_backward: p must be in \[0, 1\], got 1.5"):
        K.ff_backward(dout, s["x"], h, None, 1.5, s["w1"], None, s["w2"])
    with pytest.raises(TypeError, match="ff_backward: keep must have dtype bool"):
        K.ff_backward(dout, s["x"], h, np.ones(h.shape), 0.5, s["w1"], None, s["w2"])
    with pytest.raises(TypeError, match="ff_backward: w2 must have dtype float64, got float32"):
        K.ff_backward(dout, s["x"], h, None, 0.0, s["w1"], None, s["w2"].astype(np.float32))


# ---- dropout + residual add + LayerNorm ---------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [7, 128, 1025])  # on and off the lanes; 1025: past the stack rows (two-kernel path)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout_add_layernorm_is_dropout_then_add_layernorm(rng, dtype, d, affine, p):
    """Forward: the mask of dropout_forward(inp, p, seed) and the bits of
    add_layernorm_forward of its output and the residual; backward: the bits
    of add_layernorm_backward then dropout_backward, written (fresh) and
    accumulated into given arrays (each its own sum)."""
    x = rng.standard_normal((3, 5, d)).astype(dtype)
    r = rng.standard_normal(x.shape).astype(dtype)
    w = rng.standard_normal(d).astype(dtype) if affine else None
    b = rng.standard_normal(d).astype(dtype) if affine else None
    out, mean, rstd, keep = K.dropout_add_layernorm_forward(x, r, p, 2**63 + 9, w, b)
    dropped, mask = K.dropout_forward(x, p, 2**63 + 9)
    want = K.add_layernorm_forward(dropped, r, w, b)
    np.testing.assert_array_equal(keep, mask)
    for got, ref in zip((out, mean, rstd), want):
        np.testing.assert_array_equal(got, ref)
    g = rng.standard_normal(x.shape).astype(dtype)
    dinp, dres, dw, db = K.dropout_add_layernorm_backward(g, x, keep, p, r, w, mean, rstd, with_bias=affine)
    dh, dw_ref, db_ref = K.add_layernorm_backward(g, dropped, r, w, want[1], want[2], with_bias=affine)
    np.testing.assert_array_equal(dres, dh)
    np.testing.assert_array_equal(dinp, K.dropout_backward(dh, mask, p))
    assert (dw is None) == (not affine) and (db is None) == (not affine)
    if affine:
        np.testing.assert_array_equal(dw, dw_ref)
        np.testing.assert_array_equal(db, db_ref)
    given = [np.full_like(x, 0.5), np.full_like(x, -2.0)] + ([np.full(d, 3.0, dtype)] * 2 if affine else [None] * 2)
    acc = K.dropout_add_layernorm_backward(g, x, keep, p, r, w, mean, rstd, affine,
                                           *[None if a is None else a.copy() for a in given])
    for got, start, fresh in zip(acc, given, (dinp, dres, dw, db)):
        if start is not None:
            np.testing.assert_array_equal(got, start + fresh)
    # one given gradient: the others start from zeros
    only = K.dropout_add_layernorm_backward(g, x, keep, p, r, w, mean, rstd, affine, dresidual=given[1].copy())
    np.testing.assert_array_equal(only[0], dinp)
    np.testing.assert_array_equal(only[1], given[1] + dres)


def test_dropout_add_layernorm_bad_input(rng):
    x, r = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    out, mean, rstd, keep = K.dropout_add_layernorm_forward(x, r, 0.2, 1)
    fn = "dropout_add_layernorm_forward"
    with pytest.raises(ValueError, match=rf"{fn}: p must be in \[0, 1\], got 1.5"):
        K.dropout_add_layernorm_forward(x, r, 1.5, 0)
    with pytest.raises(ValueError, match=rf"{fn}: seed must be 0 <= seed < 2\*\*64, got -1"):
        K.dropout_add_layernorm_forward(x, r, 0.1, -1)
    with pytest.raises(ValueError, match=rf"{fn}: residual.shape\[1\] must be 4 \(inp.shape\), got 5"):
        K.dropout_add_layernorm_forward(x, np.zeros((3, 5)), 0.1, 0)
    with pytest.raises(TypeError, match=rf"{fn}: weight must have dtype float64, got float32"):
        K.dropout_add_layernorm_forward(x, r, 0.1, 0, np.ones(4, np.float32))
    with pytest.raises(ValueError, match=rf"{fn}: eps must be >= 0 and finite, got -1.0"):
        K.dropout_add_layernorm_forward(x, r, 0.1, 0, eps=-1.0)
    fn = "dropout_add_layernorm_backward"
    with pytest.raises(ValueError, match=rf"{fn}: p must be in \[0, 1\], got -0.5"):
        K.dropout_add_layernorm_backward(x, x, keep, -0.5, r, None, mean, rstd)
    with pytest.raises(TypeError, match=rf"{fn}: keep must have dtype bool, got float64"):
        K.dropout_add_layernorm_backward(x, x, keep.astype(np.float64), 0.2, r, None, mean, rstd)
    with pytest.raises(ValueError, match=rf"{fn}: keep.shape\[0\] must be 3 \(inp's shape\), got 2"):
        K.dropout_add_layernorm_backward(x, x, keep[:2], 0.2, r, None, mean, rstd)
    with pytest.raises(ValueError, match=rf"{fn}: mean and rstd must have 3 elements \(inp.shape\[:-1\]\), got 2 and 3"):
        K.dropout_add_layernorm_backward(x, x, keep, 0.2, r, None, mean[:2], rstd)
    with pytest.raises(ValueError, match=rf"{fn}: dresidual must have shape \(3, 4\), got \(4, 3\)"):
        K.dropout_add_layernorm_backward(x, x, keep, 0.2, r, None, mean, rstd, dresidual=np.zeros((4, 3)))
