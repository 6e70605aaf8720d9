"""The in-place variants of tensor_ops_inplace.py (exp_, clamp_min_, t_, ...):
each returns self holding what the out-of-place op gives, writes through
views (as torch: the base tensor sees the change), keeps autograd history
when tracked, and refuses what torch refuses (a leaf that requires grad, a
float result into an integer tensor) with torch's classes; compared with
torch 2.13 (live, or recorded in tests/golden without torch)."""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer.tensor_ops_inplace import _VALUE_OPS
from misuse import assert_torchs_classes
from tolerances import F32

UNARY = [n for n in _VALUE_OPS if n not in {"clamp_min", "clamp_max", "remainder", "fmod", "atan2", "arctan2",
                                             "lerp", "addcmul", "addcdiv", "addmm", "cumsum", "cumprod",
                                             "multiply", "divide", "subtract", "true_divide"}]
DATA = np.array([[0.3, 0.7, 0.2], [0.9, 0.4, 0.6]], np.float32)  # in every unary op's domain but acosh's
ABOVE_ONE = DATA + 1


def _data_for(name: str) -> np.ndarray:
    return ABOVE_ONE if name in ("acosh", "arccosh") else DATA


@pytest.mark.parametrize("name", UNARY)
def test_unary_in_place_equals_out_of_place_and_writes_through_views(name):
    base = ct.tensor(_data_for(name))
    expected = getattr(base.clone(), name)().numpy()
    row = base[1]  # a view
    assert getattr(row, name + "_")() is row
    np.testing.assert_allclose(row.numpy(), expected[1], rtol=1e-6)
    np.testing.assert_allclose(base[1].numpy(), expected[1], rtol=1e-6)  # the base sees it
    np.testing.assert_array_equal(base[0].numpy(), _data_for(name)[0])   # and only there


def test_tracked_in_place_chain_has_the_out_of_place_gradient():
    x = ct.tensor(DATA, requires_grad=True)
    y = x * 1.0
    y.clamp_min_(0.5).mul_(2).cumsum_(1)  # (exp_ then another in-place op is refused, as torch: exp saves its output)
    y.sum().backward()
    x2 = ct.tensor(DATA, requires_grad=True)
    (x2.clamp_min(0.5) * 2).cumsum(1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-6)


def _views(lib) -> dict:
    a = lib.tensor(DATA.copy())
    a[0].sqrt_()
    a[:, 1].clamp_max_(0.5)
    b = lib.tensor(DATA.copy())
    b.t_()
    b.addmm_(lib.ones(3, 4), lib.ones(4, 2), beta=0.5)
    c = lib.tensor([5.0, -5.0, 7.5])
    c.remainder_(3).fmod_(1.5)
    x = lib.tensor(DATA, requires_grad=True)
    y = x * 1.0
    y.sin_().mul_(2).abs_().neg_().add_(1)
    (y * lib.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))).sum().backward()
    z = lib.tensor(DATA, requires_grad=True)
    w = z * 1.0
    w.exp_()
    refused = ""
    try:
        w.mul_(2).sum().backward()  # exp saved its output, which mul_ changed: torch refuses
    except RuntimeError as e:
        refused = type(e).__name__
    return {"a": a, "b": b, "c": c, "y": y.detach(), "dx": x.grad, "refused": np.array(refused)}


def test_in_place_results_as_torch(torch_ref):
    theirs = torch_ref(_views, inputs=dict(data=DATA))
    ours = _views(ct)
    for key, ref in theirs.items():
        if key == "refused":
            assert str(ours[key]) == str(ref) == "RuntimeError"
            continue
        np.testing.assert_allclose(ours[key].numpy(), ref, err_msg=key, **F32)


MISUSE = {
    "leaf_exp_": lambda lib: lib.ones(2, requires_grad=True).exp_(),
    "int_sqrt_": lambda lib: lib.tensor([1, 4]).sqrt_(),
    "int_reciprocal_": lambda lib: lib.tensor([1, 4]).reciprocal_(),
    "int_true_divide_": lambda lib: lib.tensor([1, 4]).true_divide_(2),
    "leaf_t_": lambda lib: lib.ones(2, 3, requires_grad=True).clamp_min_(0.0),
}


def test_in_place_misuse_raises_torchs_classes(torch_ref):
    assert_torchs_classes(torch_ref, MISUSE, ct)
