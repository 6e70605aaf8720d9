"""One block of memory for a model's parameters.

gather_parameters(module) moves the data of every floating-point parameter
into one array per dtype, each parameter a C-contiguous view starting on a
64-byte boundary, in the order of ``module.parameters()``; values, shapes,
dtypes and the Parameter objects are unchanged (only ``p._data`` is
rebound, as ``load_state_dict(assign=True)`` does).  llm.c keeps its
parameters the same way.

Why: a cached decoding step reads every decoder weight once per token, and
NumPy backs an array of 4 MB or more with huge pages (madvise) but not the
1-3 MB weights of a d512 layer.  Greedy decoding of a d512 3+3-layer model
took 0.971 / 0.957 of its time with separate arrays (1 / 2 threads, both
models in one process, alternating); a demo-size and a d512 training step
were unchanged (0.98-1.01).  A parameter whose data is replaced later
(load_state_dict(assign=True), .to(), p.data = ...) simply leaves the
block.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

_ALIGN_BYTES = 64


def gather_parameters(module) -> None:
    """Rebind each float parameter of ``module`` to a view of one shared
    array per dtype (see the module docstring)."""
    groups: Dict[np.dtype, List] = {}
    for p in module.parameters():  # each Parameter once, tied ones included
        data = p._data
        if data.dtype.kind == "f" and data.size > 0:
            groups.setdefault(data.dtype, []).append(p)
    for dtype, params in groups.items():
        step = _ALIGN_BYTES // dtype.itemsize
        spans = [-(-p._data.size // step) * step for p in params]  # sizes rounded up to whole 64-byte lines
        block = np.empty(sum(spans) + step, dtype)
        start = (-block.ctypes.data // dtype.itemsize) % step  # the first view on a 64-byte boundary
        for p, span in zip(params, spans):
            view = block[start:start + p._data.size].reshape(p._data.shape)
            view[...] = p._data
            view.flags.writeable = p._data.flags.writeable
            p._data = view
            start += span
