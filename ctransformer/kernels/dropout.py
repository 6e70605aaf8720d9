"""Inverted dropout with a counter-based (reproducible, order-free) mask."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .. import _C


def dropout_forward(x: np.ndarray, p: float, seed: int, offset: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Zero each element with probability p and scale the rest by 1/(1-p).

    x (...) float32/float64 -> (out (...), mask (...) of dtype **bool**,
    True where kept).  Element i (in C order) is kept iff
    ``ct_random_uniform(seed, offset + i) >= p``: a pure function of
    (seed, offset + i), so equal arguments give equal masks and the mask of
    an array equals the masks of its flat parts computed at their offsets.
    p = 0 returns a copy and an all-True mask; p = 1 returns zeros (values
    are multiplied, so NaN stays NaN).  p outside [0, 1] is a ValueError;
    seed and offset are ints in [0, 2**64).
    """
    return _C.dropout_forward(x, p, seed, offset)


def dropout_backward(dout: np.ndarray, mask: np.ndarray, p: float, dinp: Optional[np.ndarray] = None) -> np.ndarray:
    """Gradient of :func:`dropout_forward`: ``dinp += dout * mask / (1 - p)``.

    dout (...), mask (...) bool from the forward -> dinp (...); a given
    C-contiguous ``dinp`` is accumulated into and returned.
    """
    return _C.dropout_backward(dout, mask, p, dinp)
