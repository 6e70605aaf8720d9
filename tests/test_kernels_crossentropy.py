"""cross-entropy kernels: the bespoke edge cases -- huge and infinite logits
and all-ignored batches against torch, NaN, empty batches, the dtypes of
targets and of lse, bad input.  Forward against NumPy, float64 gradients,
accumulation, views and torch parity for every option combination (ignored
rows, label smoothing, reductions, class weights): tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import run_isolated
from kernel_table import ref_cross_entropy
from tolerances import F32


def reference(x, t):
    """The mean loss with the default options (float64)."""
    return ref_cross_entropy(x, t, -100, 0.0, "mean")[0]


def torch_loss(torch, x, t, ignore_index, eps, reduction, w):
    xt = torch.tensor(x, requires_grad=True)
    wt = None if w is None else torch.tensor(w)
    loss = torch.nn.functional.cross_entropy(xt, torch.tensor(t), weight=wt, ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=eps)
    return xt, loss


@pytest.mark.parametrize("scale", [1e4, 1e30])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_huge_logits_match_torch(rng, scale, eps, torch_ref):
    # rows of huge logits whose top entries differ by O(1): the softmax is not one-hot
    spread = 2.0 if scale < 1e6 else scale  # O(1) spread: a softmax far from one-hot
    x = (scale + rng.standard_normal((4, 6)) * spread).astype(np.float32)
    t = np.array([0, 5, 2, 3])

    def torch_side(torch):
        xt, lt = torch_loss(torch, x, t, -100, eps, "sum", None)
        lt.backward()
        return dict(loss=lt, dx=xt.grad)

    ref = torch_ref(torch_side, inputs=dict(x=x, t=t))
    loss, lse = K.cross_entropy_forward(x, t, label_smoothing=eps, reduction="sum")
    dx = K.cross_entropy_backward(np.array(1.0, np.float32), x, t, lse, label_smoothing=eps, reduction="sum")
    assert np.isfinite(loss) and np.isfinite(dx).all()
    np.testing.assert_allclose(loss, ref["loss"], rtol=2e-4)
    np.testing.assert_allclose(dx, ref["dx"], **F32)


ALL_IGNORED = [(0.0, None), (0.1, None), (0.1, np.ones(4, np.float32))]


def test_all_ignored_matches_torch(rng, torch_ref):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = np.full(3, -100)

    def torch_side(torch):
        out = []
        for eps, w in ALL_IGNORED:
            xt, lt = torch_loss(torch, x, t, -100, eps, "mean", w)
            lt.backward()
            out.append(dict(loss=lt, dx=xt.grad))
        return dict(cases=out)

    ref = torch_ref(torch_side, inputs=dict(x=x, t=t))
    for (eps, w), case in zip(ALL_IGNORED, ref["cases"]):
        loss, lse = K.cross_entropy_forward(x, t, label_smoothing=eps, weight=w)
        assert np.isnan(case["loss"]) and np.isnan(loss)
        dx = K.cross_entropy_backward(np.array(1.0, np.float32), x, t, lse, label_smoothing=eps, weight=w)
        np.testing.assert_array_equal(dx, case["dx"])
        np.testing.assert_array_equal(dx, 0)
        assert K.cross_entropy_forward(x, t, reduction="sum", label_smoothing=eps)[0] == 0


def test_infinite_logits(rng, torch_ref):
    ninf = -np.inf
    # a -inf logit away from the target: finite nll, infinite smoothing term (torch too)
    x = np.array([[ninf, 0.0, 1.0, 2.0], [0.5, ninf, ninf, 1.0]], np.float32)
    t = np.array([2, 3])

    def torch_side(torch):
        out = []
        for eps in [0.0, 0.1]:
            xt, lt = torch_loss(torch, x, t, -100, eps, "none", None)
            lt.sum().backward()
            out.append(dict(loss=lt, dx=xt.grad))
        return dict(cases=out)

    ref = torch_ref(torch_side, inputs=dict(x=x, t=t))
    for eps, case in zip([0.0, 0.1], ref["cases"]):
        loss, lse = K.cross_entropy_forward(x, t, label_smoothing=eps, reduction="none")
        np.testing.assert_allclose(loss, case["loss"], **F32)
        dx = K.cross_entropy_backward(np.ones(2, np.float32), x, t, lse, label_smoothing=eps, reduction="none")
        np.testing.assert_allclose(dx, case["dx"], **F32)
    # an all -inf row: NaN loss when used (as torch), no crash; lse is -inf
    x = np.array([[ninf] * 4, [1.0, 2.0, 3.0, 4.0]])
    loss, lse = K.cross_entropy_forward(x, np.array([0, 1]), reduction="none")
    assert np.isnan(loss[0]) and np.isfinite(loss[1]) and lse[0] == -np.inf
    # ... and ignored: it contributes nothing, and its gradient is 0 (torch gives NaN
    # there, an artefact of its log-softmax backward; the loss does not depend on the row)
    t = np.array([-100, 1])
    loss, lse = K.cross_entropy_forward(x, t)
    np.testing.assert_allclose(loss, reference(x[1:], t[1:]), rtol=1e-12)
    dx = K.cross_entropy_backward(np.array(1.0), x, t, lse)
    np.testing.assert_array_equal(dx[0], 0)
    assert np.isfinite(dx[1]).all()


def test_nan_propagates(rng):
    x = rng.standard_normal((3, 4))
    x[1, 2] = np.nan
    t = np.array([0, 1, 2])
    loss, lse = K.cross_entropy_forward(x, t, reduction="none")
    assert np.isnan(loss[1]) and np.isnan(lse[1]) and np.isfinite(loss[[0, 2]]).all()
    dx = K.cross_entropy_backward(np.ones(3), x, t, lse, reduction="none")
    assert np.isnan(dx[1]).all() and np.isfinite(dx[[0, 2]]).all()
    assert np.isnan(K.cross_entropy_forward(x, t)[0])


def test_empty():
    x = np.zeros((0, 4), np.float32)
    t = np.zeros(0, np.int64)
    assert np.isnan(K.cross_entropy_forward(x, t)[0])
    assert K.cross_entropy_forward(x, t, reduction="sum")[0] == 0
    loss, lse = K.cross_entropy_forward(x, t, reduction="none")
    assert loss.shape == (0,) and lse.shape == (0,)
    assert K.cross_entropy_backward(np.array(1.0, np.float32), x, t, lse).shape == (0, 4)


def test_lse_is_float64_for_float32_logits(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    loss, lse = K.cross_entropy_forward(x, np.arange(6) % 5)
    assert loss.dtype == np.float32 and lse.dtype == np.float64 and lse.shape == (6,)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint64])
def test_any_integer_target_dtype(rng, dtype):
    x = rng.standard_normal((4, 5))
    t = np.array([0, 4, 2, 1], dtype)
    np.testing.assert_allclose(K.cross_entropy_forward(x, t)[0], reference(x, t.astype(np.int64)), rtol=1e-12)


def test_bad_input(rng):
    x = rng.standard_normal((3, 4))
    t = np.array([0, 1, 2])
    f = K.cross_entropy_forward
    with pytest.raises(IndexError, match=r"cross_entropy_forward: targets\[1\] = 4 is out of range; "
                                         r"expected 0 <= id < 4 or the ignore index"):
        f(x, np.array([0, 4, 1]))
    with pytest.raises(IndexError, match=r"targets\[2\] = -1 is out of range"):
        f(x, np.array([0, 1, -1]))
    with pytest.raises(IndexError, match=r"targets\[0\] = -100 is out of range"):
        f(x, np.array([-100, 1, 1]), ignore_index=0)
    with pytest.raises(TypeError, match="cross_entropy_forward: targets must have dtype an integer dtype, got float64"):
        f(x, t.astype(np.float64))
    with pytest.raises(TypeError, match="cross_entropy_forward: logits must have dtype float32 or float64, got int64"):
        f(x.astype(np.int64), t)
    with pytest.raises(ValueError, match="cross_entropy_forward: logits must have 2 dimensions, got 3"):
        f(x[None], t)
    with pytest.raises(ValueError, match=r"cross_entropy_forward: targets.shape\[0\] must be 3 \(logits.shape\[0\]\), got 2"):
        f(x, t[:2])
    with pytest.raises(ValueError, match=r"cross_entropy_forward: weight.shape\[0\] must be 4 \(logits.shape\[1\]\), got 3"):
        f(x, t, weight=np.ones(3))
    with pytest.raises(TypeError, match="cross_entropy_forward: weight must have dtype float64, got float32"):
        f(x, t, weight=np.ones(4, np.float32))
    with pytest.raises(ValueError, match="cross_entropy_forward: reduction must be 'none', 'mean' or 'sum', got 'avg'"):
        f(x, t, reduction="avg")
    with pytest.raises(ValueError, match=r"cross_entropy_forward: label_smoothing must be in \[0, 1\], got 1.5"):
        f(x, t, label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\], got nan"):
        f(x, t, label_smoothing=float("nan"))
    with pytest.raises(TypeError, match="cross_entropy_forward: logits must be a numpy.ndarray, got list"):
        f(x.tolist(), t)
    loss, lse = f(x, t)
    b = K.cross_entropy_backward
    with pytest.raises(TypeError, match="cross_entropy_backward: lse must have dtype float64, got float32"):
        b(np.array(1.0), x, t, lse.astype(np.float32))
    with pytest.raises(ValueError, match=r"cross_entropy_backward: lse.shape\[0\] must be 3"):
        b(np.array(1.0), x, t, lse[:2])
    with pytest.raises(ValueError, match="cross_entropy_backward: dloss must have 0 dimensions, got 1"):
        b(np.ones(3), x, t, lse)
    with pytest.raises(ValueError, match="cross_entropy_backward: dloss must have 1 dimensions, got 0"):
        b(np.array(1.0), x, t, lse, reduction="none")
    with pytest.raises(ValueError, match=r"cross_entropy_backward: dloss.shape\[0\] must be 3"):
        b(np.ones(2), x, t, lse, reduction="none")
    with pytest.raises(TypeError, match="cross_entropy_backward: dloss must have dtype float64, got float32"):
        b(np.array(1.0, np.float32), x, t, lse)
    with pytest.raises(ValueError, match="cross_entropy_backward: dlogits is updated in place"):
        b(np.array(1.0), x, t, lse, dlogits=np.zeros((4, 3)).T)
    with pytest.raises(ValueError, match=r"cross_entropy_backward: dlogits must have shape \(3, 4\), got \(3, 5\)"):
        b(np.array(1.0), x, t, lse, dlogits=np.zeros((3, 5)))
    with pytest.raises(IndexError, match=r"cross_entropy_backward: targets\[2\] = 9 is out of range"):
        b(np.array(1.0), x, np.array([0, 1, 9]), lse)


def test_out_of_range_target_does_not_crash():
    r = run_isolated("""
        import numpy as np, ctransformer.kernels as K
        x = np.zeros((2, 3), np.float32)
        for t in ([0, 2**40], [0, -2**62]):
            try:
                K.cross_entropy_backward(np.array(1.0, np.float32), x, np.array(t), np.zeros(2))
            except IndexError as e:
                print("ok", e)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ok cross_entropy_backward: targets[1]") == 2


def test_fresh_dlogits_are_written_not_added_to(rng):
    """Without a given dlogits the kernel writes a fresh array (not
    zero-filled first): every element, 0 in the ignored rows, the same values
    as accumulating into zeros, even where the allocator hands back memory
    that held NaN."""
    x = rng.standard_normal((64, 300)).astype(np.float32)
    t = rng.integers(0, 300, 64)
    t[::3] = -100
    loss, lse = K.cross_entropy_forward(x, t)
    want = K.cross_entropy_backward(np.array(1, np.float32), x, t, lse, dlogits=np.zeros_like(x))
    for _ in range(3):
        junk = np.full_like(x, np.nan)
        del junk
        got = K.cross_entropy_backward(np.array(1, np.float32), x, t, lse)
        np.testing.assert_array_equal(got, want)
        assert (got[::3] == 0).all()
