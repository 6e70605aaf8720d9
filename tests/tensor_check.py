"""Helpers for the Tensor tests: run one op written against the shared API
(``op(lib, *tensors)`` with lib = ctransformer or torch) in both libraries
and compare forward values and input gradients; float64 gradchecks."""
import numpy as np
import ctransformer as ct
from ctransformer.autograd import gradcheck
from tolerances import F32
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
        # flat keys (no list markers): out<k> for every output, grad<i> for the inputs that got one
        res = {f"out{k}": o for k, o in enumerate(outs)}
        res.update({f"grad{i}": g for i, g in enumerate(grads) if g is not None})
        return res

    ref = torch_reference(torch_side, inputs)
    n_out = sum(1 for key in ref if key.startswith("out"))
    torch_outs = [ref[f"out{k}"] for k in range(n_out)]
    torch_grads = [ref.get(f"grad{i}") for i in range(len(arrays))]
    return _run(ct, op, arrays, grad, seed), (torch_outs, torch_grads)


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


def both_libraries(body, inputs=None):
    """body(lib) -> dict of values (tensors, numbers, strings, nested dicts),
    run with ctransformer and with torch (live, or its golden fixture).

    For tests written as ``for lib in (ct, torch): ...``: whatever the torch
    run must agree with goes into the dict.  Returns (ours, theirs), both
    with every tensor or number as a NumPy array (golden's conversion)."""
    import golden
    flat = {}
    golden._flatten(body(ct), "", flat)
    return golden._unflatten(flat), torch_reference(body, inputs)


def assert_same(ours, theirs, tol=None, path=""):
    """ours and theirs (both_libraries' results) hold the same keys, shapes,
    dtypes and values: floats within tol (F32 by default), the rest exactly."""
    tol = tol or F32
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(theirs), f"{path}: keys {sorted(ours)} vs {sorted(theirs)}"
        for k in theirs:
            assert_same(ours[k], theirs[k], tol, f"{path}/{k}")
        return
    if isinstance(theirs, (list, tuple)):
        assert isinstance(ours, (list, tuple)) and len(ours) == len(theirs), f"{path}: length differs"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, tol, f"{path}/{i}")
        return
    a, b = np.asarray(ours), np.asarray(theirs)
    assert a.shape == b.shape, f"{path}: shape {a.shape} vs torch {b.shape}"
    assert a.dtype == b.dtype, f"{path}: dtype {a.dtype} vs torch {b.dtype}"
    if a.dtype.kind in "fc":
        np.testing.assert_allclose(a, b, err_msg=path, **tol)
    else:
        np.testing.assert_array_equal(a, b, err_msg=path)
