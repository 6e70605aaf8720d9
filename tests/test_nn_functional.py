"""Torch parity of nn.functional and the loss modules (outputs and gradients
of every differentiable input), plus their error messages."""
import warnings

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
import ctransformer.nn.functional as F
from nn_parity import F32, F64, torch_reference

DTYPES = [np.float32, np.float64]


def tol(dtype):
    return F64 if dtype == np.float64 else F32


def cast(a, dtype):
    a = np.asarray(a)
    return a.astype(dtype) if a.dtype.kind == "f" else a


def _run(lib, op, arrays, grad, seed):
    """op(lib, *tensors) in one library (ctransformer or torch): forward, then
    backward of the sum of every float output that requires grad weighted by
    a seeded random array.  Returns (outputs, input gradients or None)."""
    rng = np.random.default_rng(seed)
    ins = [a if a is None else lib.tensor(a.copy(), requires_grad=i in grad) for i, a in enumerate(arrays)]
    out = op(lib, *ins)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    loss = None
    for o in outs:
        if o.requires_grad:
            w = rng.standard_normal(tuple(o.shape)).astype(o.detach().numpy().dtype)
            term = (o * lib.tensor(w)).sum()
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    return ([o.detach().numpy() for o in outs],
            [None if t is None or t.grad is None else t.grad.numpy() for t in ins])


def run_both(op, *arrays, grad=None, seed=0):
    """op in ours and in torch (live or its golden fixture) on the same arrays
    (None passes through; float arrays require grad unless ``grad`` lists the
    positions that do).  Returns ((ours outs, grads), (torch outs, grads))."""
    arrays = [None if a is None else np.asarray(a) for a in arrays]
    if grad is None:
        grad = [i for i, a in enumerate(arrays) if a is not None and a.dtype.kind == "f"]

    def torch_side(torch):
        outs, grads = _run(torch, op, arrays, grad, seed)
        return dict(outs=outs, grads=[np.zeros(0) if g is None else g for g in grads],
                    has_grad=[g is not None for g in grads])

    ref = torch_reference(torch_side, {f"arg{i}": a for i, a in enumerate(arrays) if a is not None})
    t_grads = [g if has else None for g, has in zip(ref["grads"], ref["has_grad"])]
    return _run(ct, op, arrays, grad, seed), (list(ref["outs"]), t_grads)


def compare(op, *arrays, dtype, grad=None):
    """Outputs equal (values, shape, dtype), then the gradients of every input
    in ``grad`` (default: the float ones, cast to dtype) after backpropagating
    the same random upstream gradient."""
    (c_outs, c_grads), (t_outs, t_grads) = run_both(op, *[None if a is None else cast(a, dtype) for a in arrays],
                                                    grad=grad)
    assert len(c_outs) == len(t_outs)
    for k, (c, t) in enumerate(zip(c_outs, t_outs)):
        np.testing.assert_allclose(c, t, **tol(dtype), err_msg=f"output {k}")
        assert c.shape == t.shape and c.dtype == t.dtype, (k, c.shape, t.shape, c.dtype, t.dtype)
    for i, (c, t) in enumerate(zip(c_grads, t_grads)):
        assert (c is None) == (t is None), f"gradient presence of input {i} (ours {c is not None})"
        if t is not None:
            np.testing.assert_allclose(c, t, **tol(dtype), err_msg=f"grad {i}")


def targets(rng, shape, kw, ignore_first=True):
    """Class targets for logits of ``shape`` (one per position but the class
    axis 1), the first one ignore_index when there are several (if
    ignore_first); a single target is never the ignored class (that
    all-ignored case is separate)."""
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    target = rng.integers(0, 4, tshape)
    if "ignore_index" in kw:
        if target.size > 1:
            if ignore_first:
                target.reshape(-1)[0] = kw["ignore_index"]
        elif target == kw["ignore_index"]:
            target = (target + 1) % 4
    return target


# ------------------------------------------------------------------ cross entropy
CE_CASES = [
    dict(),
    dict(reduction="sum"),
    dict(reduction="none"),
    dict(ignore_index=1),
    dict(ignore_index=1, reduction="none"),
    dict(label_smoothing=0.1),
    dict(label_smoothing=0.2, reduction="sum"),
    dict(weight=True),
    dict(weight=True, ignore_index=2, label_smoothing=0.1),
    dict(weight=True, reduction="none"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", CE_CASES, ids=str)
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5), (2, 4, 3, 2), (4,)])
def test_cross_entropy_parity(dtype, kw, shape, rng):
    kw = dict(kw)
    x = rng.standard_normal(shape) * 2
    target = targets(rng, shape, kw)
    w = rng.uniform(0.5, 2.0, 4) if kw.pop("weight", False) else None
    compare(lambda lib, x, t, w: lib.nn.CrossEntropyLoss(weight=w, **kw)(x, t), x, target, w, dtype=dtype, grad=[0])
    c_out = nn.CrossEntropyLoss(weight=None if w is None else ct.tensor(cast(w, dtype)), **kw)(
        ct.tensor(cast(x, dtype)), ct.tensor(target))
    assert c_out.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(), dict(reduction="sum"), dict(reduction="none"), dict(label_smoothing=0.1),
                                dict(weight=True)], ids=str)
@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 4)])
def test_cross_entropy_probability_targets(dtype, kw, shape, rng):
    kw = dict(kw)
    x = rng.standard_normal(shape)
    probs = rng.uniform(0, 1, shape)
    probs /= probs.sum(axis=1, keepdims=True)
    w = rng.uniform(0.5, 2.0, 3) if kw.pop("weight", False) else None
    compare(lambda lib, x, p, w: lib.nn.functional.cross_entropy(x, p, weight=w, **kw), x, probs, w, dtype=dtype,
            grad=[0, 1])


def test_cross_entropy_all_ignored_is_nan_like_torch():
    x = ct.randn(3, 4, requires_grad=True)
    t = ct.tensor([-100, -100, -100])
    loss = F.cross_entropy(x, t)
    assert np.isnan(loss.item())
    ref = torch_reference(lambda torch: dict(
        loss=torch.nn.functional.cross_entropy(torch.randn(3, 4), torch.tensor([-100] * 3))))
    assert np.isnan(ref["loss"].item())


def test_cross_entropy_errors():
    x = ct.randn(3, 4)
    with pytest.raises(IndexError):
        F.cross_entropy(x, ct.tensor([0, 4, 1]))
    with pytest.raises(ValueError, match=r"target must have shape \(3,\)"):
        F.cross_entropy(x, ct.tensor([0, 1]))
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.cross_entropy(x, ct.tensor([0, 1, 2]), reduction="avg")
    with pytest.raises(NotImplementedError, match="cross_entropy: input must be float32 or float64"):  # torch's classes
        F.cross_entropy(ct.tensor([[1, 2]]), ct.tensor([0]))
    with pytest.raises(RuntimeError, match="label_smoothing"):
        F.cross_entropy(x, ct.tensor([0, 1, 2]), label_smoothing=1.5)


# ------------------------------------------------------------------ nll / mse
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(), dict(reduction="sum"), dict(reduction="none"), dict(ignore_index=0),
                                dict(weight=True), dict(weight=True, ignore_index=2, reduction="sum")], ids=str)
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5), (4,)])
def test_nll_loss_parity(dtype, kw, shape, rng):
    kw = dict(kw)
    x = rng.standard_normal(shape)
    target = targets(rng, shape, kw, ignore_first=False)
    w = rng.uniform(0.5, 2.0, 4) if kw.pop("weight", False) else None
    compare(lambda lib, x, t, w: lib.nn.NLLLoss(weight=w, **kw)(x, t), x, target, w, dtype=dtype, grad=[0])


def test_nll_loss_every_target_ignored_like_torch():
    """mean over no target: NaN loss, and exactly zero gradient (not 0/0) as torch."""
    x = np.linspace(-1, 1, 12).reshape(3, 4)

    def torch_side(torch):
        xt = torch.tensor(x, requires_grad=True)
        loss = torch.nn.functional.nll_loss(xt, torch.tensor([1, 1, 1]), ignore_index=1)
        loss.backward()
        return dict(loss=loss, grad=xt.grad)

    ref = torch_reference(torch_side, dict(x=x))
    xc = ct.tensor(x, requires_grad=True)
    loss = F.nll_loss(xc, ct.tensor([1, 1, 1]), ignore_index=1)
    loss.backward()
    assert np.isnan(loss.item()) and np.isnan(ref["loss"].item())
    np.testing.assert_array_equal(xc.grad.numpy(), ref["grad"])
    assert not np.any(xc.grad.numpy())


def test_nll_after_log_softmax_equals_cross_entropy():
    x = ct.randn(5, 7)
    t = ct.tensor([0, 6, 3, 3, 1])
    np.testing.assert_allclose(F.nll_loss(F.log_softmax(x, dim=1), t).item(), F.cross_entropy(x, t).item(),
                               rtol=1e-6)
    with pytest.raises(IndexError, match="out of bounds"):
        F.nll_loss(x, ct.tensor([0, 7, 0, 0, 0]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_parity(dtype, reduction, rng):
    compare(lambda lib, x, y: lib.nn.MSELoss(reduction=reduction)(x, y),
            rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), dtype=dtype)


def test_mse_loss_broadcast_warns_like_torch(rng):
    def op(lib, x, y):
        if lib is ct:
            with pytest.warns(UserWarning, match="different to the input size"):
                return F.mse_loss(x, y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return lib.nn.functional.mse_loss(x, y)

    compare(op, rng.standard_normal((4, 3)), rng.standard_normal((3,)), dtype=np.float32)


def test_loss_module_reprs_and_weight_buffer():
    w = ct.tensor([1.0, 2.0])
    m = nn.CrossEntropyLoss(weight=w)
    assert repr(m) == "CrossEntropyLoss()" and repr(nn.MSELoss()) == "MSELoss()"
    ref = torch_reference(lambda torch: dict(
        keys=list(torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0])).state_dict())))
    assert list(m.state_dict()) == list(ref["keys"])


# ------------------------------------------------------------------ functional ops
@pytest.mark.parametrize("dtype", DTYPES)
def test_functional_activations(dtype, rng):
    x = rng.standard_normal((3, 5)) * 2
    for tf, cf in [(lambda torch, v: torch.nn.functional.relu(v), F.relu), (lambda torch, v: torch.tanh(v), F.tanh),
                   (lambda torch, v: torch.sigmoid(v), F.sigmoid),
                   (lambda torch, v: torch.nn.functional.gelu(v, approximate="tanh"),
                    lambda v: F.gelu(v, approximate="tanh")),
                   (lambda torch, v: torch.nn.functional.gelu(v), F.gelu),
                   (lambda torch, v: torch.nn.functional.softmax(v, dim=0), lambda v: F.softmax(v, dim=0)),
                   (lambda torch, v: torch.nn.functional.log_softmax(v, dim=1), lambda v: F.log_softmax(v, dim=1))]:
        compare(lambda lib, v, tf=tf, cf=cf: cf(v) if lib is ct else tf(lib, v), x, dtype=dtype)


def test_softmax_without_dim_warns_and_picks_torch_dim(rng):
    def op(lib, x):
        if lib is ct:
            with pytest.warns(UserWarning, match="Implicit dimension"):
                return F.softmax(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return lib.nn.functional.softmax(x)

    for shape in [(4,), (2, 3), (2, 3, 4)]:
        (c, _), (t, _) = run_both(op, rng.standard_normal(shape).astype(np.float32), grad=[])
        np.testing.assert_allclose(c[0], t[0], **F32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_functional_linear_layer_norm_embedding(dtype, rng):
    compare(lambda lib, x, w, b: lib.nn.functional.linear(x, w, b),
            rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5,)), dtype=dtype)

    compare(lambda lib, x, w, b: lib.nn.functional.layer_norm(x, (3, 4), w, b, eps=1e-3),
            rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), dtype=dtype)

    ids = rng.integers(0, 6, (3, 4))
    compare(lambda lib, i, w: lib.nn.functional.embedding(i, w, padding_idx=2), ids, rng.standard_normal((6, 2)),
            dtype=dtype)


def test_functional_dropout_not_training_is_identity():
    x = ct.randn(3, 3)
    assert F.dropout(x, 0.5, training=False) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, -0.1)


@pytest.mark.parametrize("pad", [(1, 2), (0, 0, 2, 1), (1, 1, 1, 1, 1, 1), (-1, 2), (2, -1, -1, 0)])
def test_pad_parity(pad, rng):
    compare(lambda lib, x: lib.nn.functional.pad(x, pad, value=-1.5), rng.standard_normal((2, 3, 4)),
            dtype=np.float32)


def test_pad_errors():
    with pytest.raises(RuntimeError, match="padding length must be even"):
        F.pad(ct.randn(2, 2), (1, 2, 3))
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode"):
        F.pad(ct.randn(2, 2), (1, 1), mode="wrap")
    with pytest.raises(NotImplementedError, match="not supported for 1D input"):  # torch: a batch or channel dim
        F.pad(ct.randn(2), (1, 1), mode="reflect")


def test_one_hot_parity(rng):
    ids = rng.integers(0, 5, (3, 4))
    ref = torch_reference(lambda torch: dict(auto=torch.nn.functional.one_hot(torch.tensor(ids)),
                                             seven=torch.nn.functional.one_hot(torch.tensor(ids), 7)),
                          dict(ids=ids))
    np.testing.assert_array_equal(F.one_hot(ct.tensor(ids)).numpy(), ref["auto"])
    out = F.one_hot(ct.tensor(ids), num_classes=7)
    assert out.dtype == np.int64 and out.shape == (3, 4, 7)
    np.testing.assert_array_equal(out.numpy(), ref["seven"])
    with pytest.raises(RuntimeError, match="class values must be in"):
        F.one_hot(ct.tensor([0, 3]), num_classes=3)


# ------------------------------------------------------------------ float64 central differences
def test_gradcheck_python_level_ops():
    """Ops whose backward is written in NumPy here (no dedicated kernel)
    agree with central differences."""
    g = np.random.default_rng(7)
    x = ct.tensor(g.standard_normal((4, 3, 2)), dtype=ct.float64, requires_grad=True)
    y = ct.tensor(g.standard_normal((4, 3, 2)), dtype=ct.float64, requires_grad=True)
    w = ct.tensor(g.uniform(0.5, 2, 3), dtype=ct.float64)
    t = ct.tensor(g.integers(0, 3, (4, 2)))
    t._data[0, 0] = -100
    probs = ct.tensor(g.dirichlet(np.ones(3), (4, 2)).transpose(0, 2, 1).copy(), dtype=ct.float64,
                      requires_grad=True)
    checks = [
        (lambda a: F.nll_loss(a, t, weight=w), (x,)),
        (lambda a: F.nll_loss(a, t, reduction="none"), (x,)),
        (lambda a, b: F.mse_loss(a, b), (x, y)),
        (lambda a, b: F.mse_loss(a, b, reduction="none"), (x, y)),
        (lambda a: F.pad(a, (1, -1, 2, 0)), (x,)),
        (lambda a, p: F.cross_entropy(a, p, weight=w, label_smoothing=0.1), (x, probs)),
        (lambda a: F.cross_entropy(a, t, weight=w, label_smoothing=0.2, reduction="none"), (x,)),
        (lambda a, b: nn.utils.rnn.pad_sequence([a[0], b[1, :1]], padding_value=3.0), (x, y)),
    ]
    for fn, inputs in checks:
        assert ct.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-6)
