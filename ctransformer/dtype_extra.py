"""``torch.bfloat16`` as a name, and ``Module.half`` / ``Module.bfloat16``.

NumPy has no bfloat16, so no tensor here holds one: ``torch.bfloat16``
exists (scripts build dtype tables with it), comparing and printing work,
and making a tensor of it raises one clear error saying to use float32
(bfloat16 checkpoints from PyTorch load widened to float32 exactly)."""
from __future__ import annotations

import numpy as np

_ADVICE = ("bfloat16 tensors are not supported by ctransformer (NumPy has no bfloat16); use float32 "
           "(torch.float32). bfloat16 checkpoints written by PyTorch load as float32, exactly.")


class _BFloat16:
    """The ``torch.bfloat16`` name; using it as a tensor dtype is a TypeError with advice."""

    is_floating_point = True
    is_complex = False
    itemsize = 2

    def __repr__(self) -> str:
        return "torch.bfloat16"

    @property
    def dtype(self):  # np.dtype(obj) consults .dtype: this is where using it fails, clearly
        raise TypeError(_ADVICE)


bfloat16 = _BFloat16()


def _module_half(self):
    """Cast floating-point parameters and buffers to float16 (torch's Module.half)."""
    return self.to(np.float16)


def _module_bfloat16(self):
    raise TypeError(_ADVICE)


def attach() -> None:
    from .nn.module import Module

    Module.half = _module_half
    Module.bfloat16 = _module_bfloat16
