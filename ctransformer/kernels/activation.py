"""Elementwise activations: relu, gelu (erf form), gelu_tanh, tanh, sigmoid."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import _C

#: Every kind accepted by :func:`activation_forward` / :func:`activation_backward`.
ACTIVATION_KINDS = ("relu", "gelu", "gelu_tanh", "tanh", "sigmoid")


def activation_forward(x: np.ndarray, kind: str) -> np.ndarray:
    """``out = act(x)`` elementwise.

    x (...) float32/float64 -> out (...) of the same shape and dtype.
    kind: "relu"; "gelu" (exact, ``x * Phi(x)`` with erf: torch's default);
    "gelu_tanh" (torch's ``approximate='tanh'``); "tanh"; "sigmoid".
    """
    return _C.activation_forward(x, kind)


def activation_saves_output(kind: str) -> bool:
    """True when :func:`activation_backward` takes the forward *output*
    (tanh, sigmoid), False when it takes the *input* x (relu, gelu, gelu_tanh)."""
    return _C.activation_saves_output(kind)


def activation_backward(dout: np.ndarray, saved: np.ndarray, kind: str,
                        dinp: Optional[np.ndarray] = None) -> np.ndarray:
    """Gradient of :func:`activation_forward`: ``dinp += dout * act'(x)``.

    dout (...), saved (...) of the same shape: the input x when
    ``activation_saves_output(kind)`` is False, else the output.  A given
    C-contiguous ``dinp`` is accumulated into and returned; otherwise a new
    array is.  relu'(0) = 0, as in torch.
    """
    return _C.activation_backward(dout, saved, kind, dinp)
