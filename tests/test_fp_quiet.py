"""Floating-point edge values as torch gives them: inf and nan, without
NumPy's RuntimeWarnings (``python -W error`` and pytest's
``filterwarnings = error`` turn those into exceptions), and torch's own
answers where NumPy's differ (sign(nan), softmax of a row of -inf, integer
division by zero, the mean of nothing).  Compared with torch 2.13 live, or
with its recorded values (tests/golden) without torch."""
import warnings

import numpy as np
import pytest

import ctransformer as ct
from tolerances import F32

INF, NAN = float("inf"), float("nan")

VALUES = {  # name: case(lib) -> tensor, computed with every warning an error
    "log_zero": lambda lib: lib.log(lib.tensor([0.0, 1.0])),
    "log_negative": lambda lib: lib.log(lib.tensor([-1.0, 1.0])),
    "log1p_minus_one": lambda lib: lib.log1p(lib.tensor([-1.0, 1.0])),
    "sqrt_negative": lambda lib: lib.sqrt(lib.tensor([-1.0, 4.0])),
    "rsqrt_zero": lambda lib: lib.rsqrt(lib.tensor([0.0, 4.0])),
    "exp_overflow": lambda lib: lib.exp(lib.tensor([1000.0, 1.0])),
    "sin_inf": lambda lib: lib.sin(lib.tensor([INF, 0.5])),
    "cos_inf": lambda lib: lib.cos(lib.tensor([-INF, 0.5])),
    "div_by_zero": lambda lib: lib.tensor([1.0, 0.0, -1.0]) / lib.tensor([0.0, 0.0, 0.0]),
    "scalar_over_zero": lambda lib: 1.0 / lib.tensor([0.0, 2.0]),
    "int_true_div_zero": lambda lib: lib.tensor([1, 0]) / lib.tensor([0, 0]),
    "float_floordiv_zero": lambda lib: lib.tensor([1.0, -1.0]) // lib.tensor([0.0, 0.0]),
    "float_mod_zero": lambda lib: lib.tensor([1.0]) % 0.0,
    "pow_negative_half": lambda lib: lib.tensor([-8.0, 4.0]) ** 0.5,
    "pow_zero_negative": lambda lib: lib.tensor([0.0, 2.0]) ** -1,
    "inf_minus_inf": lambda lib: lib.tensor([INF]) - lib.tensor([INF]),
    "inf_times_zero": lambda lib: lib.tensor([INF]) * 0,
    "mul_overflow": lambda lib: lib.tensor([1e38]) * 1e10,
    "add_overflow": lambda lib: lib.tensor([3e38]) + lib.tensor([3e38]),
    "square_overflow": lambda lib: lib.square(lib.tensor([1e30])),
    "sum_overflow": lambda lib: lib.tensor([3e38, 3e38]).sum(),
    "mean_overflow": lambda lib: lib.tensor([3e38, 3e38]).mean(),
    "mean_empty": lambda lib: lib.tensor([]).mean(),
    "mean_empty_dim": lambda lib: lib.zeros(0, 3).mean(0),
    "norm_overflow": lambda lib: lib.tensor([3e38, 3e38]).norm(),
    "nan_to_long": lambda lib: lib.tensor([NAN, 2.5]).long(),
    "to_half_overflow": lambda lib: lib.tensor([1e10, 1.0]).half().float(),
    "sign_nan_negzero": lambda lib: lib.sign(lib.tensor([NAN, -0.0, -2.0, 3.0])),
    "softmax_all_minus_inf": lambda lib: lib.softmax(lib.tensor([[-INF, -INF], [0.0, 1.0]]), 1),
    "log_softmax_all_minus_inf": lambda lib: lib.log_softmax(lib.tensor([[-INF, -INF], [0.0, 1.0]]), 1),
    "softmax_dim0_minus_inf": lambda lib: lib.softmax(lib.tensor([[-INF, 0.0], [-INF, 1.0]]), 0),
    "softmax_scalar_minus_inf": lambda lib: lib.softmax(lib.tensor(-INF), 0),
    "softmax_one_minus_inf": lambda lib: lib.softmax(lib.tensor([[-INF, 0.0], [INF, 1.0]]), 1),
    "mse_overflow": lambda lib: lib.nn.functional.mse_loss(lib.tensor([1e30]), lib.tensor([-1e30])),
    "nll_no_target": lambda lib: lib.nn.functional.nll_loss(lib.zeros(2, 3), lib.tensor([-100, -100])),
    "cross_entropy_minus_inf": lambda lib: lib.nn.functional.cross_entropy(lib.tensor([[-INF, 0.0]]),
                                                                           lib.tensor([0])),
    "normalize_zero": lambda lib: lib.nn.functional.normalize(lib.zeros(2, 3)),
    "cosine_similarity_zero": lambda lib: lib.nn.functional.cosine_similarity(lib.zeros(2, 3), lib.zeros(2, 3)),
}


def _grad(lib, fn, x):
    t = lib.tensor(x, requires_grad=True)
    fn(lib, t).sum().backward()
    return t.grad


GRADS = {  # name: case(lib) -> the gradient of a leaf
    "log_at_zero": lambda lib: _grad(lib, lambda lib, t: lib.log(t), [0.0, 1.0]),
    "sqrt_at_zero": lambda lib: _grad(lib, lambda lib, t: lib.sqrt(t), [0.0, 4.0]),
    "reciprocal_at_zero": lambda lib: _grad(lib, lambda lib, t: 1 / t, [0.0, 2.0]),
    "pow_half_at_zero": lambda lib: _grad(lib, lambda lib, t: t ** 0.5, [0.0, 4.0]),
    "div_by_zero": lambda lib: _grad(lib, lambda lib, t: t / lib.tensor([0.0, 2.0]), [1.0, 1.0]),
    "softmax_all_minus_inf": lambda lib: _grad(
        lib, lambda lib, t: lib.softmax(t, 1) * lib.tensor([[1.0, 2.0], [3.0, 4.0]]), [[-INF, -INF], [0.0, 1.0]]),
    "log_softmax_all_minus_inf": lambda lib: _grad(lib, lambda lib, t: lib.log_softmax(t, 1),
                                                   [[-INF, -INF], [0.0, 1.0]]),
}


def _run(lib, cases: dict) -> dict:
    lib.manual_seed(0)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning fails the case
        for name, case in cases.items():
            out[name] = case(lib).detach().numpy()
    return out


def _same(ours: np.ndarray, theirs: np.ndarray, name: str) -> None:
    """inf, -inf and nan where torch has them; the finite values to float32's tolerance."""
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(theirs), err_msg=name)
    np.testing.assert_allclose(ours, theirs, equal_nan=True, err_msg=name, **F32)


def test_edge_values_as_torch_without_warnings(torch_ref):
    theirs = torch_ref(lambda torch: _run(torch, VALUES))
    ours = _run(ct, VALUES)
    for name in VALUES:
        assert ours[name].dtype == theirs[name].dtype, name
        _same(ours[name], theirs[name], name)
        zeros = theirs[name] == 0  # and the sign of a zero (sign(-0.) is +0. in torch); a NaN's sign means nothing
        np.testing.assert_array_equal(np.signbit(ours[name][zeros]), np.signbit(theirs[name][zeros]), err_msg=name)


def test_edge_gradients_as_torch_without_warnings(torch_ref):
    theirs = torch_ref(lambda torch: _run(torch, GRADS))
    ours = _run(ct, GRADS)
    for name in GRADS:
        _same(ours[name], theirs[name], name)


INT_ZERO_DIVISION = {
    "floordiv": lambda lib: lib.tensor([5, 3]) // lib.tensor([0, 1]),
    "floordiv_scalar": lambda lib: lib.tensor([5]) // 0,
    "rfloordiv": lambda lib: 5 // lib.tensor([0]),
    "mod": lambda lib: lib.tensor([5]) % lib.tensor([0]),
    "remainder_scalar": lambda lib: lib.tensor([5]).remainder(0),
}


@pytest.mark.parametrize("case", sorted(INT_ZERO_DIVISION))
def test_integer_division_by_zero_raises_like_torch(case):
    """torch: RuntimeError('ZeroDivisionError'); NumPy warned and answered 0."""
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        INT_ZERO_DIVISION[case](ct)


def test_integer_division_by_nonzero_is_floor_division():
    np.testing.assert_array_equal((ct.tensor([7, -7]) // ct.tensor([2, 2])).numpy(), [3, -4])
    np.testing.assert_array_equal((ct.tensor([7, -7]) % 3).numpy(), [1, 2])


@pytest.mark.parametrize("fn", ["var", "std"])
def test_var_std_without_degrees_of_freedom_warn_as_torch(fn):
    with pytest.warns(UserWarning, match=rf"{fn}\(\): degrees of freedom is <= 0"):
        out = getattr(ct.tensor([1.0]), fn)()
    assert np.isnan(out.item())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(ct.tensor([1.0, 3.0]), fn)().item() > 0  # enough elements: no warning


def test_users_numpy_error_settings_are_left_alone():
    """Only our own maths is quiet: the user's NumPy keeps its settings, inside and after our ops."""
    before = np.geterr()
    with np.errstate(divide="raise"):
        assert ct.log(ct.tensor([0.0])).item() == -INF
        with pytest.raises(FloatingPointError):
            np.log(np.zeros(1))
    assert np.geterr() == before
    with pytest.warns(RuntimeWarning):
        np.log(np.zeros(1))


def test_quiet_state_is_restored_when_an_op_raises():
    with pytest.raises(RuntimeError):
        ct.tensor([1, 2]) // ct.tensor([0, 1])
    with pytest.raises(RuntimeError):
        ct.ones(2, requires_grad=True).sum().backward(ct.ones(3))
    with pytest.warns(RuntimeWarning):
        np.log(np.zeros(1))
