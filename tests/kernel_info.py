"""KernelInfo: what tests/kernel_table.py says about one kernel forward/backward
pair (its fields are described there), and the sample helpers its entries share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from tolerances import F64

Inputs = Dict[str, Any]
Cases = Callable[[np.random.Generator, type], List[Inputs]]


@dataclass(frozen=True)
class KernelInfo:
    name: str                                                   # the test id
    forward: Callable[..., Any]                                 # forward(**inputs) -> out or (out, saved...)
    backward: Callable[..., Dict[str, Optional[np.ndarray]]]    # backward(dout, saved, acc, **inputs)
    reference: Callable[..., Any]                               # float64 NumPy forward
    cases: Cases                                                # (rng, dtype) -> [inputs]
    empty: Cases                                                # the same with zero-size dimensions
    differentiable: Tuple[str, ...]                             # inputs with a gradient
    accumulates: Dict[str, str] = field(default_factory=dict)   # input -> backward's += keyword
    torch: Optional[Callable[..., Any]] = None                  # torch(torch, **tensors) -> out
    torch_cases: Optional[Cases] = None                         # default: cases
    f64: dict = field(default_factory=lambda: F64)              # float64 tolerance to the reference
    exact: bool = False                                         # outputs are copies: compared exactly
    float64_outputs: Tuple[int, ...] = ()                       # outputs in float64 whatever the input dtype

    def __repr__(self) -> str:
        return self.name


def normal(rng, shape, dtype, scale=1.0, shift=0.0):
    return np.asarray(scale * rng.standard_normal(shape) + shift).astype(dtype)


def off_kinks(x):
    """Samples moved off |x| < 0.1 (relu's kink), so central differences are exact."""
    return np.where(np.abs(x) < 0.1, x + np.sign(x + 1e-3) * 0.2, x).astype(x.dtype)
