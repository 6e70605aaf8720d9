"""``torch.distributed``: importable (nanoGPT's train.py imports it even on
one CPU) and honest: ``is_available()`` / ``is_initialized()`` are False,
and starting a process group raises one clear error saying what to do
instead: export the state_dict (``ctransformer.save``) and train in PyTorch."""
from __future__ import annotations

from typing import Any

_ADVICE = ("distributed training is not available in ctransformer; export the model's state_dict with "
           "ctransformer.save(model.state_dict(), path) and train it with torch.distributed in PyTorch "
           "(torch.load reads the file)")


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def init_process_group(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError(_ADVICE)


def destroy_process_group(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError(_ADVICE)


def get_rank(*args: Any, **kwargs: Any) -> int:
    raise RuntimeError("Default process group has not been initialized, please make sure to call "
                       "init_process_group. " + _ADVICE)


get_world_size = get_rank
barrier = init_process_group
all_reduce = init_process_group
