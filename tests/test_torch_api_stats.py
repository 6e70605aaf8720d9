"""tensor_ops_stats.py and the rest of tensor_ops_more.py against torch 2.13
(live, or its recorded values in tests/golden without torch): order
statistics, cumprod at zeros, counting and binning, std_mean / var_mean, the
fused arithmetic, cdist, linalg norms, the index helpers (take_along_dim,
masked_scatter, index_put), diag / diagonal / trace, movedim, vstack /
hstack, dtype queries; values, gradients and torch's exception classes.
Finite differences of the differentiable ones are in test_grad_coverage.py."""
import numpy as np

import ctransformer as ct
from misuse import assert_torchs_classes
from tolerances import F32

_rng = np.random.default_rng(5)
A = _rng.standard_normal((3, 5)).astype(np.float32)
B = _rng.standard_normal((3, 5)).astype(np.float32)
C = _rng.standard_normal((4, 5)).astype(np.float32)
ZEROED = A * np.array([1, 0, 1, 1, 0], np.float32)  # zeros among the factors
INPUTS = dict(a=A, b=B, c=C, zeroed=ZEROED)


def _grads(lib, fn, *arrays):
    leaves = [lib.tensor(x, requires_grad=True) for x in arrays]
    out = fn(lib, *leaves)
    outs = out if isinstance(out, tuple) else (out,)
    total = sum((o * (i + 1.5)).sum() for i, o in enumerate(outs))
    total.backward()
    return {"out": [o.detach() for o in outs], **{f"d{i}": lib.zeros_like(t) + t.grad for i, t in enumerate(leaves)}}


DIFFERENTIABLE = {
    "median_all": (lambda lib, a: lib.median(a), A),
    "median_dim": (lambda lib, a: a.median(1).values, A),
    "median_even_keepdim": (lambda lib, a: a[:, :4].median(1, keepdim=True)[0], A),
    "kthvalue": (lambda lib, a: lib.kthvalue(a, 2, 0).values, A),
    "cumprod": (lambda lib, a: lib.cumprod(a, 1), A),
    "cumprod_zeros": (lambda lib, a: a.cumprod(1), ZEROED),
    "std_mean": (lambda lib, a: lib.std_mean(a, 1), A),
    "var_mean_all": (lambda lib, a: lib.var_mean(a, correction=0), A),
    "lerp": (lambda lib, a, b: lib.lerp(a, b, lib.tensor(np.linspace(0, 1, 5, dtype=np.float32))), A, B),
    "addcmul_addcdiv": (lambda lib, a, b: lib.addcmul(a, a, b, value=0.5) + lib.addcdiv(b, a, b.abs() + 1), A, B),
    "addmm": (lambda lib, a, c: lib.addmm(a[:, :4], a, c.T, beta=0.5, alpha=2.0), A, C),
    "logaddexp": (lambda lib, a, b: lib.logaddexp(a, b) + lib.logaddexp(a, a), A, B),
    "cdist": (lambda lib, a, c: lib.cdist(a, c) + lib.cdist(a, c, p=1.0), A, C),
    "vector_norm": (lambda lib, a: lib.linalg.vector_norm(a, 3.0, dim=1) + lib.linalg.norm(a), A),
    "take_along_dim": (lambda lib, a: lib.take_along_dim(a, lib.tensor([[4], [0], [2]]), 1), A),
    "masked_scatter": (lambda lib, a, b: a.masked_scatter(lib.tensor([True, False, True, False, True]), b), A, B),
    "index_put": (lambda lib, a, b: lib.index_put(a, (lib.tensor([0, 2, 0]), lib.tensor([1, 3, 1])), b[0, :3],
                                                  accumulate=True), A, B),
    "index_put_rows": (lambda lib, a, b: a.index_put((lib.tensor([2]),), b[1]), A, B),
    "diag_diagonal_trace": (lambda lib, a, b: lib.diag(b[0], -1)[1:, :5] @ a.T + lib.trace(a[:, :3])
                            + a.diagonal(1).sum(), A, B),
    "movedim": (lambda lib, a: lib.movedim(a.reshape(3, 5, 1), (0, 2), (1, 0)) * 2, A),
    "stacks": (lambda lib, a, b: lib.vstack([a[0], b]).sum(0) + lib.hstack([a[1], b[2]])[:5], A, B),
}

PLAIN = {  # no gradient: values (and dtypes) only
    "median_nan": lambda lib: lib.median(lib.tensor([[1.0, float("nan"), 3.0], [2.0, 1.0, 0.0]]), 1).values,
    "count_nonzero": lambda lib: lib.count_nonzero(lib.tensor(ZEROED), 1),
    "bincount": lambda lib: lib.bincount(lib.tensor([0, 3, 3, 1]), minlength=6),
    "bincount_weights": lambda lib: lib.bincount(lib.tensor([0, 3, 3]), weights=lib.tensor([0.5, 1.0, 2.0])),
    "histc": lambda lib: lib.histc(lib.tensor(A), bins=4, min=-1, max=1),
    "histc_auto": lambda lib: lib.histc(lib.tensor(A), bins=3),
    "isin": lambda lib: lib.isin(lib.tensor([1, 2, 3, 4]), lib.tensor([2, 4, 9])),
    "bucketize": lambda lib: lib.bucketize(lib.tensor([0.0, 1.0, 2.5, 9.0]), lib.tensor([1.0, 2.0, 3.0])),
    "bucketize_right": lambda lib: lib.bucketize(lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.0]), right=True),
    "searchsorted_rows": lambda lib: lib.searchsorted(lib.tensor([[1.0, 3.0], [2.0, 4.0]]), lib.tensor([[2.0],
                                                                                                           [5.0]])),
    "logaddexp_minus_inf": lambda lib: lib.logaddexp(lib.tensor([float("-inf"), 0.0]), lib.tensor([float("-inf"),
                                                                                                       float("-inf")])),
    "logspace": lambda lib: lib.logspace(0, 3, 4),
    "logspace_base": lambda lib: lib.logspace(-1, 1, 3, base=2.0),
    "int_pow": lambda lib: lib.tensor([2, 3]) ** 2,
    "repr_empty": lambda lib: np.array(repr(lib.zeros(0, 3)).replace("torch.", "")),
    "dtypes": lambda lib: np.array([str(lib.promote_types(lib.int32, lib.float32)).replace("torch.", ""),
                                    str(lib.result_type(lib.tensor([1]), 1.0)).replace("torch.", ""),
                                    str(lib.can_cast(lib.float64, lib.int32)),
                                    str(lib.can_cast(lib.int32, lib.float16))]),
}


def _run(lib) -> dict:
    out = {name: _grads(lib, fn, *arrays) for name, (fn, *arrays) in DIFFERENTIABLE.items()}
    out.update({name: case(lib) for name, case in PLAIN.items()})
    return out


def _compare(ours, theirs, path):
    if isinstance(theirs, dict):
        for key in theirs:
            _compare(ours[key], theirs[key], f"{path}/{key}")
        return
    if isinstance(theirs, list):
        assert len(ours) == len(theirs), path
        for i, (o, t) in enumerate(zip(ours, theirs)):
            _compare(o, t, f"{path}[{i}]")
        return
    got = ours.numpy() if hasattr(ours, "numpy") else np.asarray(ours)
    assert got.shape == theirs.shape, (path, got.shape, theirs.shape)
    if theirs.dtype.kind in "US":
        assert str(got.tolist()) == str(theirs.tolist()), path
        return
    assert got.dtype == theirs.dtype, (path, got.dtype, theirs.dtype)
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(theirs), err_msg=path)
    np.testing.assert_allclose(got, theirs, equal_nan=True, err_msg=path, **F32)


def test_stats_and_helpers_as_torch(torch_ref):
    theirs = torch_ref(_run, inputs=INPUTS)
    ours = _run(ct)
    for name in list(DIFFERENTIABLE) + list(PLAIN):
        _compare(ours[name], theirs[name], name)


MISUSE = {
    "int_negative_power": lambda lib: lib.tensor([2]) ** -1,
    "broadcast_mismatch": lambda lib: lib.ones(2, 3) + lib.ones(4),
    "bincount_negative": lambda lib: lib.bincount(lib.tensor([-1, 2])),
    "bincount_2d": lambda lib: lib.bincount(lib.tensor([[1, 2]])),
    "kthvalue_range": lambda lib: lib.kthvalue(lib.ones(3), 4),
    "take_along_dim_dims": lambda lib: lib.take_along_dim(lib.ones(2, 3), lib.tensor([0]), 1),
    "masked_scatter_short": lambda lib: lib.ones(3).masked_scatter(lib.tensor([True, True, False]), lib.ones(1)),
    "diag_3d": lambda lib: lib.diag(lib.ones(2, 2, 2)),
    "trace_1d": lambda lib: lib.trace(lib.ones(3)),
    "diagonal_same_dims": lambda lib: lib.ones(2, 2).diagonal(0, 1, 1),
    "movedim_lengths": lambda lib: lib.movedim(lib.ones(2, 3), (0, 1), 0),
    "cdist_columns": lambda lib: lib.cdist(lib.ones(2, 3), lib.ones(2, 4)),
    "normal_negative_std": lambda lib: lib.normal(lib.zeros(2), lib.tensor([1.0, -1.0])),
    "bernoulli_range": lambda lib: lib.bernoulli(lib.tensor([1.5])),
}


def test_misuse_raises_torchs_classes(torch_ref):
    assert_torchs_classes(torch_ref, MISUSE, ct)


def test_normal_with_tensor_arguments_broadcasts_and_draws():
    ct.manual_seed(0)
    draws = ct.normal(ct.full((2000,), 3.0), ct.tensor(0.5))
    assert draws.shape == (2000,) and draws.dtype == ct.float32
    assert abs(draws.mean().item() - 3.0) < 0.05 and abs(draws.std().item() - 0.5) < 0.05
    exact = ct.normal(ct.tensor([1.0, 2.0]), 0.0)  # std 0: the means themselves
    np.testing.assert_array_equal(exact.numpy(), [1.0, 2.0])


def test_bernoulli_draws_in_proportion():
    ct.manual_seed(1)
    draws = ct.bernoulli(ct.full((4000,), 0.25))
    assert set(np.unique(draws.numpy())) <= {0.0, 1.0} and abs(draws.mean().item() - 0.25) < 0.03
