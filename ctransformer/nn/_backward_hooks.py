"""``Module.register_full_backward_hook``: ``hook(module, grad_input,
grad_output)`` runs once the gradients with respect to the module's
positional Tensor inputs are computed; a tuple it returns replaces
grad_input.  Built from two identity autograd Functions around the
module's forward (torch's BackwardHook does the same): one on the outputs
records grad_output, one on the inputs calls the hooks."""
from __future__ import annotations

import warnings
from typing import Any, Callable, List

from ..autograd import _grad_enabled
from ..autograd_function import Function
from ..tensor import Tensor


class _State:
    def __init__(self, module, hooks: List[Callable], n_inputs: int) -> None:
        self.module = module
        self.hooks = hooks
        self.n_inputs = n_inputs
        self.grad_output = None
        self.inputs_tracked = False

    def call(self, grad_input: tuple) -> tuple:
        for hook in self.hooks:
            res = hook(self.module, grad_input, self.grad_output)
            if res is not None:
                res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
                if len(res) != len(grad_input):
                    raise RuntimeError(f"Backward hook returned an invalid number of grad_input, got {len(res)}, "
                                       f"but expected {len(grad_input)}")
                grad_input = res
        return grad_input


class _InputHook(Function):
    @staticmethod
    def forward(ctx, state: _State, *tensors):
        ctx.state = state
        ctx.set_materialize_grads(False)
        return tensors if len(tensors) != 1 else tensors[0]

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + tuple(ctx.state.call(grads))


class _OutputHook(Function):
    @staticmethod
    def forward(ctx, state: _State, *tensors):
        ctx.state = state
        ctx.set_materialize_grads(False)
        return tensors if len(tensors) != 1 else tensors[0]

    @staticmethod
    def backward(ctx, *grads):
        state = ctx.state
        state.grad_output = grads
        if not state.inputs_tracked:  # no input needs a gradient: the hook runs now, grad_input all None
            warnings.warn("Full backward hook is firing when gradients are computed with respect to module "
                          "outputs since no inputs require gradients. See https://docs.pytorch.org/docs/main/"
                          "generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook for more "
                          "details.", UserWarning, stacklevel=2)
            state.call((None,) * state.n_inputs)
        return (None,) + grads


def call_with_backward_hooks(module, hooks: List[Callable], args: tuple, forward: Callable[[tuple], Any]):
    """Run ``forward(args)`` with the full backward hooks attached."""
    pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    state = _State(module, list(hooks), len(pos))
    args = list(args)
    if _grad_enabled[0] and any(args[i].requires_grad for i in pos):
        state.inputs_tracked = True
        wrapped = _InputHook.apply(state, *(args[i] for i in pos))
        wrapped = wrapped if isinstance(wrapped, tuple) else (wrapped,)
        for i, t in zip(pos, wrapped):
            args[i] = t
    out = forward(tuple(args))
    single = isinstance(out, Tensor)
    outs = (out,) if single else out
    if not isinstance(outs, tuple):
        return out
    tpos = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]
    if not tpos or not _grad_enabled[0]:
        return out
    wrapped = _OutputHook.apply(state, *(outs[i] for i in tpos))
    wrapped = wrapped if isinstance(wrapped, tuple) else (wrapped,)
    outs = list(outs)
    for i, t in zip(tpos, wrapped):
        outs[i] = t
    return outs[0] if single else tuple(outs)
