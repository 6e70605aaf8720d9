"""Embedding lookup (nn.Embedding) and its gradient."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import _C


def embedding_forward(ids: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``out[...] = weight[ids[...]]``.

    ids (...) of any integer dtype and shape (0-d included), weight (V, D)
    float32/float64 -> out ids.shape + (D,).  An id outside [0, V) raises
    IndexError naming its position and value, before anything is read.
    """
    return _C.embedding_forward(ids, weight)


def embedding_backward(dout: np.ndarray, ids: np.ndarray, num_embeddings: int,
                       padding_idx: Optional[int] = None, dweight: Optional[np.ndarray] = None) -> np.ndarray:
    """Gradient of :func:`embedding_forward` w.r.t. weight (a scatter-add).

    dout ids.shape + (D,), ids (...), num_embeddings V -> dweight (V, D) with
    ``dweight[ids[i]] += dout[i]`` (repeated ids sum).  The row
    ``padding_idx`` (an int in [-V, V), negative counting from V as in
    torch; None for no padding) receives no gradient.  A given C-contiguous
    ``dweight`` is accumulated into and returned.
    """
    return _C.embedding_backward(dout, ids, num_embeddings, padding_idx, dweight)
