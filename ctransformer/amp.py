"""``torch.amp`` / ``torch.cuda.amp`` on a CPU-only build: ``GradScaler``
disables itself (as torch's does without CUDA: ``scale`` returns its input,
``step`` calls ``optimizer.step()``), and ``autocast`` is a no-op context
(float32 stays float32: there is no reduced-precision compute here)."""
from __future__ import annotations

import warnings
from typing import Any, Optional


class GradScaler:
    """torch.amp.GradScaler(device="cuda", init_scale=2.**16, ...): disabled here."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        if enabled:
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          UserWarning, stacklevel=2)
        self._enabled = False
        self._init_scale = init_scale

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs: Any) -> Any:
        return outputs

    def unscale_(self, optimizer: Any) -> None:
        return None

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: Optional[float] = None) -> None:
        return None

    def get_scale(self) -> float:
        return 1.0

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        return None


class autocast:
    """torch.autocast(device_type, dtype=None, enabled=True): no reduced
    precision here, so the block runs unchanged (context manager or decorator)."""

    def __init__(self, device_type: str = "cpu", dtype: Any = None, enabled: bool = True,
                 cache_enabled: Optional[bool] = None) -> None:
        self.device_type = device_type
        self.enabled = enabled

    def __enter__(self) -> "autocast":
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __call__(self, fn):
        return fn


class CudaGradScaler(GradScaler):
    """torch.cuda.amp.GradScaler(init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True): torch's older signature, disabled here as well."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
