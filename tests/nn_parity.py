"""Helpers for torch-parity tests of ctransformer.nn.

Torch's side of a check (building the torch module, its forward and
backward) runs in one function handed to ``torch_reference`` below (the
golden fixtures' route, tests/golden.py, stored compactly): live when torch
is installed, otherwise read from tests/golden/<module>.npz.
Our module loads the state_dict torch's module had, runs on the same
inputs, and outputs and the gradients of inputs and every parameter are
compared::

    check_module(lambda torch: torch.nn.LSTM(3, 4), nn.LSTM(3, 4), x)
"""
from collections import OrderedDict

import numpy as np

import ctransformer as ct
import golden
from tolerances import F32, F64  # noqa: F401  (re-exported to the nn tests)

NONE = np.zeros(0)   # stands for "no gradient" in a torch side's answer


def torch_repr(torch_module):
    """check_module(..., extra=torch_repr): also record repr(torch's module)."""
    return dict(repr=repr(torch_module))


# ---- compact fixtures ----------------------------------------------------------
# golden .npz files hold one zip entry (~300 bytes of names and headers) per
# array; a torch side here answers with a few dozen small arrays, so they are
# stored as two: one line of metadata per array, and all their bytes.

def _pack_flat(flat):
    meta, chunks = [], []
    for name, a in flat.items():
        a = np.asarray(a)
        meta.append("\t".join([name, a.dtype.str, ",".join(map(str, a.shape))]))
        chunks.append(a.tobytes(order="C"))
    return dict(meta=meta, data=np.frombuffer(b"".join(chunks), dtype=np.uint8))


def _unpack_flat(packed):
    data = np.asarray(packed["data"], dtype=np.uint8).tobytes()
    flat, at = {}, 0
    for line in packed["meta"]:
        name, dtype, shape = str(line).split("\t")
        shape = tuple(int(d) for d in shape.split(",") if d)
        dtype = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        flat[name] = np.frombuffer(data[at:at + size], dtype=dtype).reshape(shape).copy()
        at += size
    assert at == len(data), "malformed compact fixture"
    return flat


def _fingerprint_inputs(inputs):
    """One array standing for all the inputs (golden fingerprints each input
    in two entries): their values in order, then their shapes."""
    if not inputs:
        return {}
    arrays = [np.asarray(v) for v in inputs.values()]
    parts = [a.ravel().astype(np.float64) for a in arrays]
    parts.append(np.asarray([d for a in arrays for d in (a.ndim,) + a.shape], dtype=np.float64))
    return dict(inputs=np.concatenate(parts))


def torch_reference(torch_side, inputs=None):
    """golden.torch_reference with the answer stored compactly: the same
    nested dict of NumPy arrays (dict order kept) in every mode."""
    def packed_side(torch):
        flat = {}
        golden._flatten(torch_side(torch), "", flat)
        return _pack_flat(flat)

    return golden._unflatten(_unpack_flat(golden.torch_reference(packed_side, _fingerprint_inputs(inputs or {}))))


# ---- named tensors, some of them None --------------------------------------------

def _np(value):
    if hasattr(value, "detach") and not isinstance(value, np.ndarray):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def pack(named):
    """[(name, tensor, array or None), ...] -> dict(names, flat, shapes): the
    values raveled into one array (dtypes promoted as np.concatenate does:
    for tensors of one dtype, such as gradients), shapes as [ndim, *dims] per
    tensor ([-1] for None).  ``unpack`` inverts it."""
    arrays = [None if v is None else _np(v) for _, v in named]
    present = [a.ravel() for a in arrays if a is not None]
    return dict(names=[n for n, _ in named],
                flat=np.concatenate(present) if present else NONE,
                shapes=[int(d) for a in arrays for d in ((-1,) if a is None else (a.ndim,) + a.shape)])


def unpack(packed):
    """OrderedDict name -> array (a copy) or None, of a ``pack`` result."""
    out, shapes, at, pos = OrderedDict(), [int(d) for d in np.ravel(packed["shapes"])], 0, 0
    flat = np.asarray(packed["flat"])
    for name in packed["names"]:
        ndim = shapes[pos]
        if ndim < 0:
            out[str(name)] = None
            pos += 1
            continue
        shape = tuple(shapes[pos + 1:pos + 1 + ndim])
        pos += 1 + ndim
        size = int(np.prod(shape, dtype=np.int64))
        out[str(name)] = flat[at:at + size].reshape(shape).copy()
        at += size
    assert at == flat.size and pos == len(shapes), "malformed packed tensors"
    return out


# ---- torch side (these receive torch objects) -------------------------------

def torch_state(torch_module):
    """A torch module's state_dict as a plain dict of copies (key order is
    kept by ``torch_reference``)."""
    return {k: v.detach().clone() for k, v in torch_module.state_dict().items()}


def torch_param_grads(torch_module):
    """Parameter names (in order) and their gradients (None when absent), packed."""
    return pack([(n, p.grad) for n, p in torch_module.named_parameters()])


# ---- our side -----------------------------------------------------------------

def load_torch_state(our_module, state):
    """Load a state recorded by ``torch_state`` into our module (torch -> ours,
    as the porting guide says).  Returns the load_state_dict result."""
    return our_module.load_state_dict(OrderedDict((k, ct.from_numpy(np.array(v))) for k, v in state.items()))


def assert_param_grads(our_module, ref_grads, tol=F32):
    """Our parameters (same names, same order) have torch's gradients;
    a parameter torch left without gradient has none or a zero one here."""
    c_params = dict(our_module.named_parameters())
    grads = unpack(ref_grads)
    assert list(c_params) == list(grads)
    for name, cp in c_params.items():
        if grads[name] is None:
            assert cp.grad is None or not np.any(cp.grad.numpy()), name
            continue
        np.testing.assert_allclose(cp.grad.numpy(), grads[name], **tol, err_msg=f"grad of {name}")


def _prepared(arrays, dtype, grad_inputs):
    out, wants = [], []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        is_float = a.dtype.kind == "f"
        if is_float:
            a = a.astype(dtype)
        out.append(a)
        wants.append(bool(is_float and (grad_inputs is None or grad_inputs[i])))
    return out, wants


def check_module(make_torch, our_module, *arrays, dtype=np.float32, grad_inputs=None, seed=0, tol=None,
                 extra=None):
    """Forward torch's module (``make_torch(torch)``) and ours from the same
    weights on ``arrays`` (float arrays become inputs that require grad
    unless grad_inputs says otherwise), backpropagate the same random
    upstream gradient, and compare outputs (values and dtype) and the
    gradients of the inputs and of every parameter.

    ``extra(torch_module)`` may return a dict of more values to record
    (numbers, strings, arrays), e.g. ``torch_repr``.  Returns (our output, torch's reference:
    state, out, input_grads, params[, extra])."""
    arrays, wants = _prepared(arrays, dtype, grad_inputs)
    tol = tol or (F64 if dtype == np.float64 else F32)

    def torch_side(torch):
        tm = make_torch(torch)
        if dtype == np.float64:
            tm.double()
        state = torch_state(tm)
        t_in = [torch.tensor(a.copy(), requires_grad=w) for a, w in zip(arrays, wants)]
        t_out = tm(*t_in)
        g = np.random.default_rng(seed).standard_normal(tuple(t_out.shape)).astype(dtype)
        t_out.backward(torch.tensor(g))
        return dict(state=state, out=t_out,
                    input_grads=[t.grad if t.requires_grad else NONE for t in t_in],
                    params=torch_param_grads(tm), **({} if extra is None else dict(extra=extra(tm))))

    ref = torch_reference(torch_side, {f"arg{i}": a for i, a in enumerate(arrays)})
    if dtype == np.float64:
        our_module.double()
    load_torch_state(our_module, ref["state"])
    c_in = [ct.tensor(a.copy(), requires_grad=w) for a, w in zip(arrays, wants)]
    c_out = our_module(*c_in)
    np.testing.assert_allclose(c_out.detach().numpy(), ref["out"], **tol, err_msg="output")
    assert c_out.dtype == ref["out"].dtype, (c_out.dtype, ref["out"].dtype)
    g = np.random.default_rng(seed).standard_normal(ref["out"].shape).astype(dtype)
    c_out.backward(ct.tensor(g))
    for i, (c, want, t_grad) in enumerate(zip(c_in, wants, ref["input_grads"])):
        if want:
            np.testing.assert_allclose(c.grad.numpy(), t_grad, **tol, err_msg=f"grad of input {i}")
    assert_param_grads(our_module, ref["params"], tol)
    return c_out, ref


def check_state_dict_roundtrip(make_torch, our_module, dtype=np.float32):
    """ours -> torch: our state_dict has torch's keys in torch's order, and
    torch's module (``make_torch(torch)``, converted to ``dtype``) loads it
    and gives back the same tensors."""
    sd = our_module.state_dict()
    arrays = {k: v.numpy().copy() for k, v in sd.items()}

    def torch_side(torch):
        tm = make_torch(torch)
        if dtype == np.float64:
            tm.double()
        tm.load_state_dict({k: torch.from_numpy(a.copy()) for k, a in arrays.items()})
        return dict(state=torch_state(tm))

    ref = torch_reference(torch_side, arrays)
    assert list(sd) == list(ref["state"])
    for k, v in ref["state"].items():
        np.testing.assert_array_equal(v, sd[k].numpy())

