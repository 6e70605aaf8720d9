"""The activations of nn/functional_act.py, pairwise distances and
BatchNorm1d against torch 2.13 (live, or its recorded values in tests/golden
without torch): values and gradients, at the kinks too (hardtanh's bounds,
hardswish at -3 and 3, threshold at its threshold), BatchNorm1d's training and
eval outputs, running statistics and state_dict, and torch's exception
classes for misuse.  Finite differences of each are in test_grad_coverage.py."""
import warnings

import numpy as np

import ctransformer as ct
from misuse import assert_torchs_classes
from tolerances import F32

_rng = np.random.default_rng(11)
X = (_rng.standard_normal((4, 6)) * 3).astype(np.float32)
KINKS = np.array([-6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 7.0], np.float32)


def _grads(lib, fn, *arrays):
    leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = fn(lib, *leaves)
    (out * lib.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(tuple(out.shape)).astype(np.float32))).sum().backward()
    return {"out": out.detach(), **{f"d{i}": lib.zeros_like(t) + t.grad for i, t in enumerate(leaves)}}


def _f(name, *args, **kw):
    return lambda lib, x: getattr(lib.nn.functional, name)(x, *args, **kw)


CASES = {
    "hardtanh": (_f("hardtanh", -1.0, 3.0), KINKS),
    "relu6": (_f("relu6"), KINKS),
    "hardsigmoid": (_f("hardsigmoid"), KINKS),
    "hardswish": (_f("hardswish"), KINKS),
    "threshold": (_f("threshold", 0.5, -9.0), KINKS),
    "selu": (_f("selu"), KINKS),
    "celu": (_f("celu", alpha=2.0), KINKS),
    "mish": (_f("mish"), KINKS),
    "softsign": (_f("softsign"), KINKS),
    "tanhshrink": (_f("tanhshrink"), KINKS),
    "glu": (_f("glu", 1), X),
    "softmin": (_f("softmin", 0), X),
    "modules": (lambda lib, x: lib.nn.Hardtanh(-2.0, 2.0)(x) + lib.nn.ReLU6()(x) + lib.nn.Hardswish()(x)
                + lib.nn.Hardsigmoid()(x) + lib.nn.SELU()(x) + lib.nn.CELU()(x) + lib.nn.Mish()(x)
                + lib.nn.Softsign()(x) + lib.nn.Tanhshrink()(x) + lib.nn.Threshold(0.1, 20.0)(x), X),
}


def _prelu(lib):
    x = lib.tensor(X.reshape(2, 3, 4), requires_grad=True)
    m = lib.nn.PReLU(3)
    with lib.no_grad():
        m.weight.copy_(lib.tensor([0.1, -0.2, 0.3]))
    out = m(x)
    (out * lib.tensor(np.arange(24.0).reshape(2, 3, 4).astype(np.float32))).sum().backward()
    shared = lib.nn.functional.prelu(lib.tensor(X), lib.tensor([0.25]))
    return {"out": out.detach(), "dx": x.grad, "dw": m.weight.grad, "shared": shared}


def _distances(lib):
    a, b = lib.tensor(X, requires_grad=True), lib.tensor(X[::-1].copy(), requires_grad=True)
    d = lib.nn.PairwiseDistance(p=1.5, keepdim=True)(a, b) + lib.nn.CosineSimilarity(dim=1)(a, b).unsqueeze(1)
    d.sum().backward()
    return {"out": d.detach(), "da": a.grad, "db": b.grad,
            "plain": lib.nn.functional.pairwise_distance(a, b).detach()}


def _batchnorm(lib):
    out = {}
    for name, kw, shape in [("default", {}, (8, 3)), ("seq", dict(momentum=0.3), (4, 3, 5)),
                            ("cumulative", dict(momentum=None), (8, 3)), ("no_affine", dict(affine=False), (6, 3)),
                            ("no_stats", dict(track_running_stats=False), (6, 3, 2))]:
        lib.manual_seed(0)
        bn = lib.nn.BatchNorm1d(3, **kw)
        if bn.weight is not None:
            with lib.no_grad():
                bn.weight.copy_(lib.tensor([1.0, 2.0, -0.5]))
                bn.bias.copy_(lib.tensor([0.0, 0.5, 1.0]))
        data = _rng_for(name).standard_normal((3,) + shape).astype(np.float32) * 2 + 1
        x = lib.tensor(data[0], requires_grad=True)
        y = bn(x)
        (y * lib.tensor(data[1])).sum().backward()
        bn(lib.tensor(data[2]))  # a second training batch
        bn.eval()
        out[name] = {"train": y.detach(), "dx": x.grad, "eval": bn(lib.tensor(data[2])).detach(),
                     "state": {k: v for k, v in bn.state_dict().items()}}
        if bn.weight is not None:
            out[name]["dw"], out[name]["db"] = bn.weight.grad, bn.bias.grad
    return out


def _rng_for(name: str):
    return np.random.default_rng(sum(map(ord, name)))


def _run(lib) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = {name: _grads(lib, fn, arr) for name, (fn, arr) in CASES.items()}
        out["prelu"] = _prelu(lib)
        out["distances"] = _distances(lib)
        out["batchnorm"] = _batchnorm(lib)
    return out


def _compare(ours, theirs, path=""):
    if isinstance(theirs, dict):
        assert set(ours) == set(theirs), (path, sorted(ours), sorted(theirs))
        for key in theirs:
            _compare(ours[key], theirs[key], f"{path}/{key}")
        return
    got = ours.numpy() if hasattr(ours, "numpy") else np.asarray(ours)
    assert got.dtype == theirs.dtype and got.shape == theirs.shape, path
    np.testing.assert_allclose(got, theirs, err_msg=path, **F32)


def test_activations_and_batchnorm_as_torch(torch_ref):
    theirs = torch_ref(_run, inputs=dict(x=X, kinks=KINKS))
    _compare(_run(ct), theirs)


MISUSE = {
    "glu_odd": lambda lib: lib.nn.functional.glu(lib.ones(2, 3)),
    "glu_scalar": lambda lib: lib.nn.functional.glu(lib.tensor(1.0)),
    "hardtanh_bounds": lambda lib: lib.nn.Hardtanh(2.0, 1.0),
    "prelu_channels": lambda lib: lib.nn.PReLU(3)(lib.ones(2, 4)),
    "batchnorm_one_value": lambda lib: lib.nn.BatchNorm1d(3)(lib.ones(1, 3)),
    "batchnorm_4d": lambda lib: lib.nn.BatchNorm1d(3)(lib.ones(2, 3, 4, 5)),
    "batchnorm_channels": lambda lib: lib.nn.BatchNorm1d(3)(lib.ones(2, 4)),
}


def test_misuse_raises_torchs_classes(torch_ref):
    assert_torchs_classes(torch_ref, MISUSE, ct)


def test_batchnorm_loads_its_own_state_and_keeps_int_counter():
    bn = ct.nn.BatchNorm1d(2)
    bn(ct.randn(4, 2))
    copy = ct.nn.BatchNorm1d(2)
    copy.load_state_dict(bn.state_dict())
    assert copy.num_batches_tracked.dtype == ct.int64 and copy.num_batches_tracked.item() == 1
    np.testing.assert_array_equal(copy.running_mean.numpy(), bn.running_mean.numpy())
