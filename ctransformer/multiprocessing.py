"""``torch.multiprocessing``: importable; ``spawn`` (used to start
distributed training) raises the error ``ctransformer.distributed``
explains.  For data loading, ``DataLoader`` runs in the main process."""
from __future__ import annotations

from typing import Any

from .distributed import _ADVICE


def spawn(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError(_ADVICE)


def cpu_count() -> int:
    import os
    return os.cpu_count() or 1
