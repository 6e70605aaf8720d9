"""Generic tests of every kernel forward/backward pair in tests/kernel_table.py:
forward against the float64 NumPy reference (float32 and float64), float64
central-difference gradients, backward accumulating (+=) into the caller's
arrays, non-contiguous / negative-stride views, zero-size inputs, and torch
(live, or tests/golden/test_kernel_table.npz without torch).

Each family's bespoke edge cases stay in tests/test_kernels_<family>.py."""
import warnings

import numpy as np
import pytest

from conftest import check_grads
from golden import packed, unpack
from kernel_table import KERNELS
from tolerances import F32, F64, F64_TIGHT

DTYPES = [np.float32, np.float64]
WITH_TORCH = [info for info in KERNELS if info.torch is not None]
# optional weights and biases: given as None, they get no gradient (None)
PARAMETERS = {"weight", "bias", "b_ih", "b_hh", "q_bias", "k_bias", "v_bias", "out_bias", "in_proj_bias"}
WITH_ACCUMULATORS = [info for info in KERNELS if info.accumulates]   # not matmul, bmm, mha, the recurrent ones


def as_tuple(result):
    return tuple(result) if isinstance(result, tuple) else (result,)


def outputs(result):
    """forward's result as a flat list of arrays: nested tuples (saved values) opened, None left out."""
    if isinstance(result, (tuple, list)):
        return [a for part in result for a in outputs(part)]
    return [] if result is None else [result]


def upcast(inputs):
    """The float arrays of inputs in float64 (ids, masks and options unchanged)."""
    return {n: a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
            for n, a in inputs.items()}


def strided(a):
    """The same values as a non-contiguous array with negative strides."""
    if not isinstance(a, np.ndarray) or a.ndim == 0:
        return a
    base = np.zeros(a.shape + (2,), a.dtype)
    base[..., 1] = np.flip(a)
    view = np.flip(base[..., 1])
    assert a.size <= 1 or not view.flags.c_contiguous
    return view


EXACT = dict(rtol=0, atol=0)


def tolerance(info, dtype):
    """Of forward's outputs against the reference."""
    if info.exact:
        return EXACT
    return F32 if dtype == np.float32 else info.f64


def assert_same(got, want, tol, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if got.dtype.kind == "b":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, **tol, err_msg=what)


def run_backward(info, inputs, saved, dout, acc=None):
    return info.backward(dout, saved, acc or {}, **inputs)


def random_dout(rng, saved, dtype):
    return np.asarray(rng.standard_normal(outputs(saved)[0].shape)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("info", KERNELS, ids=repr)
def test_forward_matches_numpy(rng, info, dtype):
    for i, inputs in enumerate(info.cases(rng, dtype)):
        got = outputs(info.forward(**inputs))
        want = as_tuple(info.reference(**upcast(inputs)))
        for j, (g, w) in enumerate(zip(got, want)):
            if g.dtype.kind == "f":
                expected = np.float64 if j in info.float64_outputs else dtype
                assert g.dtype == expected, f"case {i}, output {j}: dtype {g.dtype}"
            assert_same(g, np.asarray(w), tolerance(info, dtype), f"case {i}, output {j}")


@pytest.mark.parametrize("info", KERNELS, ids=repr)
def test_gradients_float64(rng, info):
    for inputs in info.cases(rng, np.float64):
        names = list(inputs)
        wrt = [n for n in info.differentiable if inputs.get(n) is not None]

        def forward(*values):
            return outputs(info.forward(**dict(zip(names, values))))[0]

        def grads(dout, *values):
            kw = dict(zip(names, values))
            return run_backward(info, kw, info.forward(**kw), np.asarray(dout))

        check_grads(forward, grads, inputs, wrt)
        absent = [n for n in info.differentiable if n in PARAMETERS and inputs.get(n) is None]
        got = run_backward(info, inputs, info.forward(**inputs), random_dout(rng, info.forward(**inputs), np.float64))
        assert all(got.get(n) is None for n in absent), f"a gradient for an absent parameter of {absent}"


@pytest.mark.parametrize("info", WITH_ACCUMULATORS, ids=repr)
def test_backward_accumulates(rng, info):
    for i, inputs in enumerate(info.cases(rng, np.float64)):
        saved = info.forward(**inputs)
        dout = random_dout(rng, saved, np.float64)
        fresh = run_backward(info, inputs, saved, dout)
        given = {kw: np.full(fresh[name].shape, 0.5) for name, kw in info.accumulates.items()
                 if fresh.get(name) is not None}
        got = run_backward(info, inputs, saved, dout, given)
        for name, kw in info.accumulates.items():
            if kw in given:
                assert got[name] is given[kw], f"case {i}: {kw} is not the array returned"
                np.testing.assert_allclose(given[kw], fresh[name] + 0.5, **F64_TIGHT, err_msg=f"case {i}: {kw}")


def _views(value):
    """strided() through nested tuples (and named tuples) of saved values."""
    if isinstance(value, tuple):
        parts = [_views(a) for a in value]
        return type(value)(*parts) if hasattr(value, "_fields") else tuple(parts)
    return strided(value)


@pytest.mark.parametrize("info", KERNELS, ids=repr)
def test_views_give_the_same_results(rng, info):
    for i, inputs in enumerate(info.cases(rng, np.float64)):
        saved = info.forward(**inputs)
        dout = random_dout(rng, saved, np.float64)
        grads = run_backward(info, inputs, saved, dout)
        viewed = {n: strided(a) for n, a in inputs.items()}
        # the outputs the reference defines (a saved scratch buffer may hold anything in its padding)
        compared = len(as_tuple(info.reference(**inputs)))
        for j, (g, w) in enumerate(zip(outputs(info.forward(**viewed))[:compared], outputs(saved))):
            assert_same(g, w, EXACT if info.exact else F64_TIGHT, f"case {i}, output {j}")
        got = run_backward(info, viewed, _views(saved), strided(dout))
        for name, g in grads.items():
            if g is not None:
                assert_same(got[name], g, F64_TIGHT, f"case {i}, gradient of {name}")


@pytest.mark.parametrize("info", KERNELS, ids=repr)
def test_empty_inputs(rng, info):
    for i, inputs in enumerate(info.empty(rng, np.float32)):
        saved = info.forward(**inputs)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)   # NumPy's mean of nothing
            want = as_tuple(info.reference(**upcast(inputs)))
        for j, (g, w) in enumerate(zip(outputs(saved), want)):
            assert g.shape == np.shape(w), f"case {i}, output {j}: {g.shape} != {np.shape(w)}"
        grads = run_backward(info, inputs, saved, np.zeros(outputs(saved)[0].shape, np.float32))
        for name in info.differentiable:
            if inputs.get(name) is not None:
                assert grads[name].shape == inputs[name].shape, f"case {i}: gradient of {name}"
                np.testing.assert_array_equal(grads[name], 0, err_msg=f"case {i}: gradient of {name}")


def fingerprinted(arrays, dout):
    """All the arrays torch reads as one flat float64 array: the fixture checks
    that the inputs are those recorded with two entries instead of two per array."""
    return np.concatenate([np.ravel(a).astype(np.float64) for a in list(arrays.values()) + [dout]])


def _torch_side(info, inputs, dout):
    """torch's outputs and the gradients of the differentiable inputs, packed
    into one flat array (a fixture entry each would cost ~280 bytes)."""
    def torch_side(torch):
        tensors = {n: torch.tensor(a, requires_grad=n in info.differentiable) if isinstance(a, np.ndarray) else a
                   for n, a in inputs.items()}
        outputs = as_tuple(info.torch(torch, **tensors))
        outputs[0].backward(torch.tensor(dout))
        grads = [tensors[n].grad for n in info.differentiable if n in tensors]
        return dict(outputs=len(outputs), flat=packed(torch, list(outputs) + grads))
    return torch_side


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("info", WITH_TORCH, ids=repr)
def test_torch_parity(rng, info, dtype, torch_ref):
    tol = F32 if dtype == np.float32 else F64
    for i, inputs in enumerate((info.torch_cases or info.cases)(rng, dtype)):
        saved = info.forward(**inputs)
        dout = random_dout(rng, saved, dtype)
        arrays = {n: a for n, a in inputs.items() if isinstance(a, np.ndarray)}
        # a kernel's own masks (dropout's, from its seed) are what the torch side is given too:
        # in the fingerprint, a change of the random generator asks for the fixture to be redone
        masks = {f"mask {k}": o for k, o in enumerate(outputs(saved)) if isinstance(o, np.ndarray) and o.dtype == np.bool_}
        ref = torch_ref(_torch_side(info, inputs, dout), inputs=dict(all=fingerprinted({**arrays, **masks}, dout)))
        ours = outputs(saved)[:int(ref["outputs"])]
        grads = run_backward(info, inputs, saved, dout)
        names = [n for n in info.differentiable if n in arrays]
        ours += [grads[n] for n in names]
        n_out = int(ref["outputs"])
        for k, (g, w) in enumerate(zip(ours, unpack(ref["flat"], [g.shape for g in ours]))):
            label = f"output {k}" if k < n_out else f"gradient of {names[k - n_out]}"
            exact = info.exact and k < n_out
            assert_same(g, w.astype(g.dtype), EXACT if exact else tol, f"case {i}, {label}")
