"""torch.utils.data.distributed's path: ``DistributedSampler`` is importable
(the Annotated Transformer imports it at the top); building one raises the
error ``ctransformer.distributed`` explains."""
from __future__ import annotations

from typing import Any

from ...distributed import _ADVICE
from ._impl import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(_ADVICE)
