"""Helpers for the Tensor tests: run one op written against the shared API
(``op(lib, *tensors)`` with lib = ctransformer or torch) in both libraries
and compare forward values and input gradients; float64 gradchecks."""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer.autograd import gradcheck
from conftest import F32


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _to_np(t):
    if hasattr(t, "detach") and not isinstance(t, np.ndarray):
        t = t.detach()
        return t.numpy() if hasattr(t, "numpy") else np.asarray(t)
    return np.asarray(t)


def run_both(op, *arrays, grad=None, seed=0):
    """Run op in ctransformer and torch on the same inputs.

    arrays: NumPy arrays (float arrays require grad unless ``grad`` lists
    which positions do).  Returns ((ours_outs, torch_outs), (ours_grads,
    torch_grads)) as NumPy arrays."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    if grad is None:
        grad = [i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"]
    results = {}
    seeds = None
    for name, lib in (("ours", ct), ("torch", torch)):
        ins = []
        for i, a in enumerate(arrays):
            if isinstance(a, np.ndarray):
                t = lib.tensor(a.copy())
                if i in grad:
                    t.requires_grad_(True)
            else:
                t = a
            ins.append(t)
        outs = _outputs(op(lib, *ins))
        if seeds is None:
            seeds = [rng.standard_normal(np.shape(_to_np(o))).astype(_to_np(o).dtype)
                     if _to_np(o).dtype.kind == "f" else None for o in outs]
        loss = None
        for o, s in zip(outs, seeds):
            if s is not None and getattr(o, "requires_grad", False):
                term = (o * lib.tensor(s)).sum()
                loss = term if loss is None else loss + term
        if loss is not None:
            loss.backward()
        grads = [None if not isinstance(t, type(ins[0])) or getattr(t, "grad", None) is None
                 else _to_np(t.grad) for t in ins] if ins else []
        results[name] = ([_to_np(o) for o in outs], grads)
    return results["ours"], results["torch"]


def assert_parity(op, *arrays, grad=None, seed=0, tol=None, check_dtype=True):
    """Forward values (and dtypes) and input gradients match torch."""
    tol = tol or F32
    (o_out, o_g), (t_out, t_g) = run_both(op, *arrays, grad=grad, seed=seed)
    assert len(o_out) == len(t_out)
    for k, (a, b) in enumerate(zip(o_out, t_out)):
        assert a.shape == b.shape, f"output {k}: shape {a.shape} vs torch {b.shape}"
        if check_dtype:
            assert a.dtype == b.dtype, f"output {k}: dtype {a.dtype} vs torch {b.dtype}"
        np.testing.assert_allclose(a, b, err_msg=f"output {k}", **tol)
    for k, (a, b) in enumerate(zip(o_g, t_g)):
        assert (a is None) == (b is None), f"input {k}: gradient presence differs (ours {a is not None})"
        if a is not None:
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, err_msg=f"gradient of input {k}", **tol)


def check_gradients(op, *arrays, grad=None, **kw):
    """float64 central-difference check of op(ct, *tensors) w.r.t. the float inputs."""
    if grad is None:
        grad = [i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"]
    ins = []
    for i, a in enumerate(arrays):
        if isinstance(a, np.ndarray):
            a = a.astype(np.float64) if a.dtype.kind == "f" else a
            t = ct.tensor(a)
            if i in grad:
                t.requires_grad_(True)
        else:
            t = a
        ins.append(t)
    assert gradcheck(lambda *ts: op(ct, *ts), ins, **kw)
