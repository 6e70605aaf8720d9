"""``ctransformer.autograd.gradcheck``: autograd's gradients against float64
central differences, with torch's contract (arguments, errors, messages).

    gradcheck(fn, inputs)   # True, or raises GradcheckError (a RuntimeError)

Every input that requires grad is perturbed element by element (central
differences with step ``eps``) to build the numerical Jacobian of every
floating output; the analytical Jacobian comes from one backward pass per
output element (``autograd.grad``).  A mismatch raises torch's
"Jacobian mismatch for output j with respect to input i" with both matrices,
followed by where the largest difference is.
"""
from __future__ import annotations

import warnings
from typing import Callable, Sequence, Union

import numpy as np

from . import autograd as _ag

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """Raised by gradcheck when the gradients are wrong (torch's class name)."""


def _outputs(out) -> list:
    """The Tensor outputs of fn (a Tensor, or a tuple/list of them)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, _ag._Tensor)]


def _numerical(fn, inputs, x, eps: float, n_outs: list) -> list:
    """d out_j / d x as (x.numel(), out_j.numel()) arrays, one per output,
    by central differences (x's storage is perturbed in place and restored)."""
    flat = x._data.reshape(-1)
    if not np.shares_memory(flat, x._data):
        raise ValueError("gradcheck: inputs must be contiguous Tensors")
    jac = [np.zeros((flat.size, n)) for n in n_outs]
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + eps
        with _ag.no_grad():
            up = [np.asarray(o._data, np.float64).reshape(-1).copy() for o in _outputs(fn(*inputs))]
        flat[k] = old - eps
        with _ag.no_grad():
            down = [np.asarray(o._data, np.float64).reshape(-1).copy() for o in _outputs(fn(*inputs))]
        flat[k] = old
        for j, (u, d) in enumerate(zip(up, down)):
            jac[j][k] = (u - d) / (2 * eps)
    return jac


def _analytical(fn, inputs, diff: list) -> list:
    """[output j][input i] -> (inputs[i].numel(), out_j.numel()) by one
    backward pass per output element."""
    outs = _outputs(fn(*inputs))
    result = []
    for o in outs:
        per_input = [np.zeros((inputs[i]._data.size, o._data.size)) for i in diff]
        if o.requires_grad and o._data.dtype.kind in "fc":
            for e in range(o._data.size):
                seed = np.zeros(o._data.size, o._data.dtype)
                seed[e] = 1
                grads = _ag.grad(o, [inputs[i] for i in diff], _ag._wrap(seed.reshape(o._data.shape)),
                                 retain_graph=True, allow_unused=True)
                for c, g in enumerate(grads):
                    if g is not None:
                        per_input[c][:, e] = g._data.reshape(-1)
        result.append(per_input)
    return result


def _fmt(a: np.ndarray) -> str:
    t = _ag._wrap(a)
    return repr(t)


def gradcheck(func: Callable, inputs: Union[Sequence, "object"], *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True, nondet_tol: float = 0.0,
              check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
              check_batched_grad: bool = False, check_batched_forward_grad: bool = False,
              check_forward_ad: bool = False, check_backward_ad: bool = True, fast_mode: bool = False,
              masked=None) -> bool:
    """torch.autograd.gradcheck: compare the gradients autograd computes for
    ``func(*inputs)`` with finite differences, for every input that requires
    grad.  Returns True; on a mismatch raises :class:`GradcheckError` (or
    returns False with ``raise_exception=False``).

    Raises ValueError when no input requires grad (nothing would be
    checked); warns, as torch does, when an input requiring grad is not
    float64 (float32 differences with eps=1e-6 are mostly rounding)."""
    Tensor = _ag._Tensor
    if check_batched_grad or check_batched_forward_grad or check_forward_ad:
        raise NotImplementedError("gradcheck: batched and forward-mode checks are not supported")
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    diff = []
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor) and x.requires_grad:
            if x.dtype != np.float64:
                warnings.warn(f"Input #{i} requires gradient and is not a double precision floating point or "
                              "complex. This check will likely fail if all the inputs are not of double precision "
                              "floating point or complex. ", UserWarning, stacklevel=2)
            diff.append(i)
    if not diff:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of them "
                         "have requires_grad=True.")
    if not check_backward_ad:
        return True
    n_outs = [o._data.size for o in _outputs(func(*inputs))]
    analytical = _analytical(func, inputs, diff)
    for c, i in enumerate(diff):
        numerical = _numerical(func, inputs, inputs[i], eps, n_outs)
        for j, num in enumerate(numerical):
            ana = analytical[j][c]
            ok = np.abs(ana - num) <= atol + rtol * np.abs(num)
            if ok.all():
                continue
            diff_abs = np.where(ok, 0, np.abs(ana - num))
            k, e = np.unravel_index(int(np.argmax(diff_abs)), diff_abs.shape)
            msg = (f"Jacobian mismatch for output {j} with respect to input {i},\n"
                   f"numerical:{_fmt(num)}\nanalytical:{_fmt(ana)}\n"
                   f"The largest mismatch is d output[{j}] element {e} / d input[{i}] element {k}: "
                   f"numerical {num[k, e]:.6g}, analytical {ana[k, e]:.6g} (atol {atol}, rtol {rtol}); "
                   f"{int((~ok).sum())} of {ok.size} Jacobian entries differ.\n")
            if raise_exception:
                raise GradcheckError(msg)
            return False
    return True


def gradgradcheck(func: Callable, inputs, grad_outputs=None, **kwargs) -> bool:
    """torch.autograd.gradgradcheck needs double backward (create_graph=True),
    which this engine does not record."""
    raise NotImplementedError("gradgradcheck: second derivatives need create_graph=True (double backward), "
                              "which is not supported")
