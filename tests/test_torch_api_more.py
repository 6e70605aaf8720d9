"""More of torch's maths, against torch 2.13 (live, or its recorded values
in tests/golden without torch): the elementwise functions (reciprocal, log2,
..., erf, atan2, fmod), prod, maximum / minimum, the activations leaky_relu, elu,
softplus, logsigmoid and the l1, smooth-l1, Huber and binary cross-entropy
losses.  Values and gradients, on ordinary inputs and at the edges (a zero
factor, equal operands, logits at 0 and far out, probabilities at 0 and 1),
and torch's exception classes for misuse.  Finite differences of every one
are in test_grad_coverage.py."""
import warnings

import numpy as np
import pytest

import ctransformer as ct
from misuse import assert_torchs_classes
from tolerances import F32

_rng = np.random.default_rng(7)
X = _rng.standard_normal((3, 5)).astype(np.float32)
Y = _rng.standard_normal((3, 5)).astype(np.float32)
P = (1 / (1 + np.exp(-X))).astype(np.float32)          # probabilities
T = (_rng.random((3, 5)) > 0.5).astype(np.float32)     # 0 / 1 targets
POS = (np.abs(X) + 0.5).astype(np.float32)
UNIT = (0.9 * np.tanh(X)).astype(np.float32)
INPUTS = dict(x=X, y=Y, p=P, t=T, pos=POS, unit=UNIT)


def _leaf(lib, a):
    return lib.tensor(a, requires_grad=True)


def _value_and_grads(lib, fn, *arrays):
    """fn(*leaves) -> (value, gradients of sum(value * 1.5) w.r.t. the leaves)."""
    leaves = [_leaf(lib, a) for a in arrays]
    out = fn(lib, *leaves)
    (out * 1.5).sum().backward()
    # (zeros_like + grad: torch hands trunc's zero gradient back as a ZeroTensor, which has no NumPy form)
    return {"out": out.detach(), **{f"d{i}": lib.zeros_like(t) + t.grad for i, t in enumerate(leaves)}}


UNARY = ["reciprocal", "log2", "log10", "exp2", "expm1", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
         "acosh", "atanh", "trunc", "frac", "sgn", "erf", "erfc"]
DOMAIN = {"reciprocal": "pos", "log2": "pos", "log10": "pos", "asin": "unit", "acos": "unit", "atanh": "unit",
          "acosh": "pos_plus_one", "tan": "unit"}


def _unary_case(name):
    def case(lib):
        arr = INPUTS.get(DOMAIN.get(name, "x"), POS + 1)
        return _value_and_grads(lib, lambda lib, a: getattr(lib, name)(a) + getattr(a, name)(), arr)
    return case


CASES = {f"unary_{name}": _unary_case(name) for name in UNARY}
CASES.update({
    "atan2": lambda lib: _value_and_grads(lib, lambda lib, a, b: lib.atan2(a, b), X, Y),
    "fmod": lambda lib: _value_and_grads(lib, lambda lib, a, b: lib.fmod(a * 3, b), X, POS),
    "fmod_scalar": lambda lib: _value_and_grads(lib, lambda lib, a: a.fmod(-1.3), X * 3),
    "prod_dim": lambda lib: _value_and_grads(lib, lambda lib, a: lib.prod(a, 1), X),
    "prod_all": lambda lib: _value_and_grads(lib, lambda lib, a: a.prod().reshape(1), X[:2]),
    "prod_zero": lambda lib: _value_and_grads(
        lib, lambda lib, a: (a * lib.tensor([[0.0, 1, 1], [0, 0, 1]])).prod(1, keepdim=True), X[:2, :3]),
    "maximum_ties": lambda lib: _value_and_grads(lib, lambda lib, a, b: lib.maximum(a, b) + a.minimum(b),
                                                 np.array([1.0, 2.0, 3.0], np.float32),
                                                 np.array([1.0, 1.0, 4.0], np.float32)),
    "leaky_relu": lambda lib: _value_and_grads(
        lib, lambda lib, a: lib.nn.functional.leaky_relu(a, 0.2) + lib.nn.LeakyReLU()(a),
        np.array([-2.0, 0.0, 3.0], np.float32)),
    "elu": lambda lib: _value_and_grads(lib, lambda lib, a: lib.nn.functional.elu(a) + lib.nn.ELU(0.5)(a),
                                        np.array([-100.0, -1.0, 0.0, 2.0, 1000.0], np.float32)),
    "softplus": lambda lib: _value_and_grads(
        lib, lambda lib, a: lib.nn.functional.softplus(a) + lib.nn.Softplus(2.0, 5.0)(a),
        np.array([-100.0, -1.0, 0.0, 2.49, 2.51, 30.0, 1000.0], np.float32)),
    "logsigmoid": lambda lib: _value_and_grads(lib, lambda lib, a: lib.nn.functional.logsigmoid(a),
                                               np.array([-1000.0, -3.0, 0.0, 3.0, 1000.0], np.float32)),
    "l1": lambda lib: _value_and_grads(lib, lambda lib, a, b: lib.nn.functional.l1_loss(a, b).reshape(1), X, Y),
    "l1_module_sum": lambda lib: _value_and_grads(lib, lambda lib, a: lib.nn.L1Loss(reduction="sum")(
        a, lib.tensor(Y)).reshape(1), X),
    "smooth_l1": lambda lib: _value_and_grads(
        lib, lambda lib, a, b: lib.nn.functional.smooth_l1_loss(a, b, reduction="none", beta=0.5), X, Y),
    "smooth_l1_beta0": lambda lib: _value_and_grads(
        lib, lambda lib, a, b: lib.nn.SmoothL1Loss(beta=0.0)(a, b).reshape(1), X, Y),
    "huber": lambda lib: _value_and_grads(
        lib, lambda lib, a, b: lib.nn.HuberLoss(reduction="none", delta=0.7)(a, b), X, Y),
    "bce": lambda lib: _value_and_grads(lib, lambda lib, p, t: lib.nn.functional.binary_cross_entropy(p, t)
                                        .reshape(1), P, T),
    "bce_soft_target_weight": lambda lib: _value_and_grads(
        lib, lambda lib, p, t: lib.nn.BCELoss(weight=lib.tensor(np.abs(Y)), reduction="none")(p, t), P,
        P[::-1].copy()),
    "bce_at_0_and_1": lambda lib: _value_and_grads(
        lib, lambda lib, p: lib.nn.functional.binary_cross_entropy(p, lib.tensor([1.0, 0.0, 0.0, 1.0]),
                                                                     reduction="none"),
        np.array([0.0, 0.0, 1.0, 1.0], np.float32)),
    "bce_logits": lambda lib: _value_and_grads(
        lib, lambda lib, x, t: lib.nn.functional.binary_cross_entropy_with_logits(x, t).reshape(1), X, T),
    "bce_logits_weights": lambda lib: _value_and_grads(
        lib, lambda lib, x, t: lib.nn.functional.binary_cross_entropy_with_logits(
            x, t, weight=lib.tensor(POS[:, :1]), pos_weight=lib.tensor(POS[0]), reduction="none"), X, P),
    "bce_logits_edges": lambda lib: _value_and_grads(
        lib, lambda lib, x: lib.nn.BCEWithLogitsLoss(reduction="none")(x, lib.tensor([1.0, 0.0, 1.0, 0.0, 0.5])),
        np.array([0.0, 0.0, -200.0, 200.0, 1000.0], np.float32)),
})


IDX3 = np.array([0, 2, 0])
CASES.update({  # shape and index helpers, clamp by tensors, F.pad's other modes
    "clamp_tensors": lambda lib: _value_and_grads(
        lib, lambda lib, x, lo, hi: lib.clamp(x, min=lo, max=hi), X, Y[0] - 0.3, Y[1:2].T[:3] * 0 + Y[2]),
    "clamp_crossed_bounds": lambda lib: _value_and_grads(
        lib, lambda lib, x, lo, hi: x.clamp(lo, hi), np.array([1.0, 2.5, 5.0, 2.0], np.float32),
        np.array([2.0, 2.0, 2.0, 3.0], np.float32), np.array([3.0, 3.0, 3.0, 1.0], np.float32)),
    "tensor_split": lambda lib: _value_and_grads(
        lib, lambda lib, x: lib.cat([p * (i + 1) for i, p in enumerate(x.tensor_split(3, 1))], 1), X),
    "tensor_split_indices": lambda lib: _value_and_grads(
        lib, lambda lib, x: lib.cat([p.sum(1, keepdim=True) for p in lib.tensor_split(x, [1, -1, 9], 1)], 1), X),
    "outer_dot": lambda lib: _value_and_grads(lib, lambda lib, a, b: lib.outer(a, b) * lib.dot(a, b), X[0], Y[0]),
    "broadcast_to": lambda lib: _value_and_grads(lib, lambda lib, x: lib.broadcast_to(x, (2, 3, 5)) * 2, X),
    "meshgrid_xy": lambda lib: _value_and_grads(
        lib, lambda lib, a, b: lib.stack(lib.meshgrid(a, b, indexing="xy")) * lib.tensor(np.arange(30.0).reshape(
            2, 3, 5).astype(np.float32)), X[0], X[1, :3]),
    "meshgrid_ij": lambda lib: _value_and_grads(
        lib, lambda lib, a, b: lib.stack(lib.meshgrid(a, b, indexing="ij"))[0] * 3, X[0, :3], X[1]),
    "diff": lambda lib: _value_and_grads(
        lib, lambda lib, x, p: lib.diff(x, 2, dim=1, prepend=p, append=p), X, Y[:, :2]),
    "index_add": lambda lib: _value_and_grads(
        lib, lambda lib, x, s: x.index_add(1, lib.tensor(IDX3), s, alpha=2.0), X, Y[:, :3]),
    "pad_reflect": lambda lib: _value_and_grads(
        lib, lambda lib, x: lib.nn.functional.pad(x.reshape(1, 3, 5), (2, 4), mode="reflect"), X),
    "pad_reflect_2d": lambda lib: _value_and_grads(
        lib, lambda lib, x: lib.nn.functional.pad(x.reshape(1, 1, 3, 5), (1, 2, 2, 1), mode="reflect"), X),
    "pad_replicate_crop": lambda lib: _value_and_grads(
        lib, lambda lib, x: lib.nn.functional.pad(x.reshape(1, 3, 5), (-1, 6), mode="replicate"), X),
    "pad_circular": lambda lib: _value_and_grads(
        lib, lambda lib, x: lib.nn.functional.pad(x.reshape(3, 5), (5, 3), mode="circular"), X),
})


def _embedding_options(lib) -> dict:
    """max_norm renormalises the looked-up rows in place (norm_type 2 and 1); scale_grad_by_freq
    divides each id's gradient by its count in the batch."""
    out = {}
    weight = (np.arange(15, dtype=np.float32).reshape(5, 3) / 3 - 1).astype(np.float32)
    ids = [[0, 2, 2], [4, 2, 0]]
    for name, kw in {"max_norm": dict(max_norm=2.0), "max_norm_l1": dict(max_norm=1.5, norm_type=1.0),
                     "freq": dict(scale_grad_by_freq=True, padding_idx=4),
                     "both": dict(max_norm=1.0, scale_grad_by_freq=True)}.items():
        emb = lib.nn.Embedding(5, 3, **kw)
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(weight))
        y = emb(lib.tensor(ids))
        (y * lib.tensor(np.arange(18, dtype=np.float32).reshape(2, 3, 3))).sum().backward()
        out[name] = {"out": y.detach(), "weight": emb.weight.detach().clone(), "grad": emb.weight.grad,
                     "repr": np.array(repr(emb))}
    return out


def test_embedding_max_norm_and_scale_grad_by_freq_as_torch(torch_ref):
    theirs = torch_ref(_embedding_options)
    ours = _embedding_options(ct)
    for name, parts in theirs.items():
        assert str(parts["repr"]) == str(ours[name]["repr"]), name
        for key in ("out", "weight", "grad"):
            np.testing.assert_allclose(ours[name][key].numpy(), parts[key], err_msg=f"{name} {key}", **F32)


def _vectors_and_dropout(lib) -> dict:
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(3, 2), lib.nn.Linear(2, 1))
    with lib.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(lib.tensor(np.full(tuple(p.shape), i + 0.5, np.float32)))
    vec = lib.nn.utils.parameters_to_vector(model.parameters())
    (vec * lib.tensor(np.arange(vec.numel(), dtype=np.float32))).sum().backward()
    lib.nn.utils.vector_to_parameters(lib.tensor(np.arange(vec.numel(), dtype=np.float32)), model.parameters())
    x = lib.ones(3, requires_grad=True) * 2
    dropped = lib.nn.functional.dropout(x, 1.0, inplace=True)
    return {"vec": vec.detach(), "grads": lib.cat([p.grad.reshape(-1) for p in model.parameters()]),
            "params": lib.cat([p.detach().reshape(-1) for p in model.parameters()]),
            "dropped": dropped.detach(), "x_after": x.detach(), "same": np.array(dropped is x)}


def test_parameter_vectors_and_inplace_dropout_as_torch(torch_ref):
    theirs = torch_ref(_vectors_and_dropout)
    ours = _vectors_and_dropout(ct)
    for key, ref in theirs.items():
        got = ours[key] if isinstance(ours[key], np.ndarray) else ours[key].numpy()
        np.testing.assert_array_equal(got, ref, err_msg=key)


def test_unique_as_torch(torch_ref):
    data = np.array([[3, 1, 3], [2, 1, 3]])

    def side(lib):
        values, inverse, counts = lib.unique(lib.tensor(data), return_inverse=True, return_counts=True)
        rows = lib.tensor(data).unique(dim=1)
        return {"values": values, "inverse": inverse, "counts": counts, "rows": rows,
                "plain": lib.unique(lib.tensor([2.5, -1.0, 2.5]))}
    theirs = torch_ref(side)
    ours = side(ct)
    for key, ref in theirs.items():
        np.testing.assert_array_equal(ours[key].numpy(), ref, err_msg=key)
        assert ours[key].dtype == ref.dtype, key


def _run(lib) -> dict:
    lib.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as torch: no warning from any of these
        return {name: case(lib) for name, case in CASES.items()}


def test_more_maths_as_torch(torch_ref):
    theirs = torch_ref(_run, inputs=INPUTS)
    ours = _run(ct)
    for name in CASES:
        for key, ref in theirs[name].items():
            got = ours[name][key].numpy()
            assert got.dtype == ref.dtype, (name, key)
            np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref), err_msg=f"{name} {key}")
            np.testing.assert_allclose(got, ref, equal_nan=True, err_msg=f"{name} {key}", **F32)


def test_integer_input_computes_in_float_as_torch(torch_ref):
    def side(lib):
        return {name: getattr(lib, name)(lib.tensor([1, 2, 4])) for name in ("reciprocal", "log2", "exp2", "atan")}
    theirs = torch_ref(side)
    for name, ref in theirs.items():
        got = getattr(ct, name)(ct.tensor([1, 2, 4])).numpy()
        assert got.dtype == ref.dtype == np.float32
        np.testing.assert_allclose(got, ref, **F32)
    assert ct.tensor([2, 3]).prod().dtype == ct.int64  # integers multiply in int64


MISUSE = {
    "bce_out_of_range": lambda lib: lib.nn.functional.binary_cross_entropy(lib.tensor([1.5]), lib.tensor([1.0])),
    "bce_shape": lambda lib: lib.nn.BCELoss()(lib.tensor([0.5, 0.5]), lib.tensor([[1.0, 0.0]])),
    "bce_logits_shape": lambda lib: lib.nn.BCEWithLogitsLoss()(lib.zeros(2, 3), lib.zeros(3)),
    "smooth_l1_negative_beta": lambda lib: lib.nn.functional.smooth_l1_loss(lib.zeros(2), lib.ones(2), beta=-1.0),
    "huber_zero_delta": lambda lib: lib.nn.functional.huber_loss(lib.zeros(2), lib.ones(2), delta=0.0),
    "l1_no_broadcast": lambda lib: lib.nn.functional.l1_loss(lib.zeros(2, 3), lib.zeros(4)),
    "fmod_int_zero": lambda lib: lib.fmod(lib.tensor([3]), 0),
    "pad_reflect_too_far": lambda lib: lib.nn.functional.pad(lib.zeros(1, 1, 4), (4, 0), mode="reflect"),
    "pad_circular_twice": lambda lib: lib.nn.functional.pad(lib.zeros(1, 1, 4), (5, 0), mode="circular"),
    "pad_reflect_1d": lambda lib: lib.nn.functional.pad(lib.zeros(4), (1, 1), mode="reflect"),
    "pad_mode_unknown": lambda lib: lib.nn.functional.pad(lib.zeros(1, 1, 4), (1, 1), mode="wrap"),
    "pad_reflect_value": lambda lib: lib.nn.functional.pad(lib.zeros(1, 1, 4), (1, 1), mode="reflect", value=1.0),
    "dot_2d": lambda lib: lib.dot(lib.ones(2, 2), lib.ones(2, 2)),
    "dot_dtypes": lambda lib: lib.dot(lib.ones(2), lib.ones(2, dtype=lib.float64)),
    "outer_2d": lambda lib: lib.outer(lib.ones(2, 2), lib.ones(2)),
    "meshgrid_indexing": lambda lib: lib.meshgrid(lib.ones(2), indexing="yx"),
    "index_add_range": lambda lib: lib.zeros(3).index_add(0, lib.tensor([3]), lib.ones(1)),
    "tensor_split_zero": lambda lib: lib.ones(3).tensor_split(0),
    "dropout_inplace_leaf": lambda lib: lib.nn.functional.dropout(lib.ones(2, requires_grad=True), 0.5, inplace=True),
    "vector_to_parameters_size": lambda lib: lib.nn.utils.vector_to_parameters(lib.ones(3),
                                                                               lib.nn.Linear(2, 2).parameters()),
    "bce_weight_requires_grad": lambda lib: lib.nn.functional.binary_cross_entropy(
        lib.tensor([0.5]), lib.tensor([1.0]), weight=lib.ones(1, requires_grad=True)),
    "bce_logits_pos_weight_requires_grad": lambda lib: lib.nn.functional.binary_cross_entropy_with_logits(
        lib.tensor([0.5]), lib.tensor([1.0]), pos_weight=lib.ones(1, requires_grad=True)),
}


def test_more_misuse_raises_torchs_exception_classes(torch_ref):
    assert_torchs_classes(torch_ref, MISUSE, ct)


@pytest.mark.parametrize("name", ["leaky_relu", "elu"])
def test_inplace_activations_write_into_their_input(name):
    x = ct.tensor([-1.0, 2.0])
    out = getattr(ct.nn.functional, name)(x, inplace=True)
    assert out is x and x[0].item() < 0 and x[1].item() == 2.0
