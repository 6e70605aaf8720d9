"""Cross-entropy loss fused with log-softmax (torch's F.cross_entropy on (N, C) logits)."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .. import _C


def cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, ignore_index: int = -100,
                          label_smoothing: float = 0.0, reduction: str = "mean",
                          weight: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Cross-entropy of ``log_softmax(logits)`` against class ids, as torch.

    logits (N, C) float32/float64, targets (N) any integer dtype with values
    in [0, C) or ``ignore_index``, weight (C) optional class weights of the
    logits' dtype.  ``label_smoothing`` eps in [0, 1] mixes in the uniform
    target: ``loss = (1 - eps) * nll + eps * mean_c(-w_c * log p_c) ``.
    reduction "mean" divides by the summed weight of the non-ignored targets
    (NaN if all are ignored, as torch), "sum" adds, "none" keeps rows
    (ignored rows are 0).

    Returns (loss, lse): loss () for mean/sum or (N) for "none", in the
    logits' dtype; lse (N) float64, each row's log-sum-exp, to be passed to
    :func:`cross_entropy_backward` (kept in double so the recomputed softmax
    is exact even for huge logits).  Raises IndexError naming the position
    and value of an out-of-range target.
    """
    return _C.cross_entropy_forward(logits, targets, ignore_index, label_smoothing, reduction, weight)


def cross_entropy_backward(dloss: np.ndarray, logits: np.ndarray, targets: np.ndarray, lse: np.ndarray,
                           ignore_index: int = -100, label_smoothing: float = 0.0,
                           reduction: str = "mean", weight: Optional[np.ndarray] = None,
                           dlogits: Optional[np.ndarray] = None) -> np.ndarray:
    """Gradient of :func:`cross_entropy_forward` with respect to the logits.

    dloss () for mean/sum or (N) for "none", in the logits' dtype; logits
    (N, C), targets (N), lse (N) float64 from the forward; the remaining
    options must be those of the forward.  Returns dlogits (N, C); a given
    C-contiguous ``dlogits`` is accumulated into (``+=``) and returned.
    Ignored rows get a zero gradient.
    """
    return _C.cross_entropy_backward(dloss, logits, targets, lse, ignore_index, label_smoothing,
                                     reduction, weight, dlogits)
