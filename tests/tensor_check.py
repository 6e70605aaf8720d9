"""Helpers for the Tensor tests: run one op written against the shared API
(``op(lib, *tensors)`` with lib = ctransformer or torch) in both libraries
and compare forward values and input gradients; float64 gradchecks."""
import numpy as np
import ctransformer as ct
from ctransformer.autograd import gradcheck
from conftest import F32
from golden import torch_reference


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _to_np(t):
    if hasattr(t, "detach") and not isinstance(t, np.ndarray):
        t = t.detach()
        return t.numpy() if hasattr(t, "numpy") else np.asarray(t)
    return np.asarray(t)


def _run(lib, op, arrays, grad, seed):
    """op in one library: forward, a seeded random weighting of every float
    output that requires grad, backward.  Returns (outputs, input grads)."""
    rng = np.random.default_rng(seed)
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
    loss = None
    for o in outs:
        value = _to_np(o)
        if value.dtype.kind != "f":
            continue
        weight = rng.standard_normal(np.shape(value)).astype(value.dtype)
        if getattr(o, "requires_grad", False):
            term = (o * lib.tensor(weight)).sum()
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    grads = [None if not isinstance(t, lib.Tensor) or getattr(t, "grad", None) is None
             else _to_np(t.grad) for t in ins]
    return [_to_np(o) for o in outs], grads


def run_both(op, *arrays, grad=None, seed=0):
    """Run op in ctransformer and torch (live, or its golden fixture) on the
    same inputs.

    arrays: NumPy arrays (float arrays require grad unless ``grad`` lists
    which positions do).  Returns ((ours_outs, torch_outs), (ours_grads,
    torch_grads)) as NumPy arrays."""
    if grad is None:
        grad = [i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"]
    inputs = {f"arg{i}": a for i, a in enumerate(arrays) if isinstance(a, np.ndarray)}

    def torch_side(torch):
        outs, grads = _run(torch, op, arrays, grad, seed)
        return dict(outs=list(outs), grads=[np.zeros(0) if g is None else g for g in grads],
                    has_grad=[g is not None for g in grads] + [False])

    ref = torch_reference(torch_side, inputs)
    torch_grads = [g if has else None for g, has in zip(ref["grads"], ref["has_grad"])]
    return _run(ct, op, arrays, grad, seed), (list(ref["outs"]), torch_grads)


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
