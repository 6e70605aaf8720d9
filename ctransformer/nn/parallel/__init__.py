"""``torch.nn.parallel``: ``DistributedDataParallel`` is importable; building
one raises the error ``ctransformer.distributed`` explains."""
from __future__ import annotations

from typing import Any

from ...distributed import _ADVICE


class DistributedDataParallel:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(_ADVICE)


class DataParallel(DistributedDataParallel):
    pass


__all__ = ["DistributedDataParallel", "DataParallel"]
