"""Grad mode: whether ops record the graph (torch's no_grad, enable_grad,
set_grad_enabled, inference_mode).  ``_grad_enabled`` is the one flag every op
reads; ctransformer.autograd re-exports all of it."""
from __future__ import annotations

import contextlib
import functools

# Grad mode is process-wide (a plain flag is the cheapest thing every op
# can read; torch keeps it per thread, which the tutorials never rely on).
_grad_enabled = [True]
_inference = [False]


def is_grad_enabled() -> bool:
    """Whether ops record the graph (False inside ``no_grad()``)."""
    return _grad_enabled[0]


class set_grad_enabled(contextlib.ContextDecorator):
    """torch.set_grad_enabled(mode): called, it sets grad mode at once; as a
    context manager (``with set_grad_enabled(phase == "train"):``) it restores
    the mode found before on exit; as a decorator, each call of the function
    runs in ``mode`` (decorating changes nothing)."""

    def __init__(self, mode: bool) -> None:
        self.prev = _grad_enabled[0]
        self.mode = bool(mode)
        _grad_enabled[0] = self.mode

    def __enter__(self):
        _grad_enabled[0] = self.mode
        return self

    def __exit__(self, *exc):
        _grad_enabled[0] = self.prev
        return False

    def __call__(self, func):
        _grad_enabled[0] = self.prev  # the decorator's own construction set the mode: undo it
        mode = self.mode

        @functools.wraps(func)
        def in_mode(*args, **kwargs):
            with set_grad_enabled(mode):
                return func(*args, **kwargs)
        return in_mode

    def clone(self) -> "set_grad_enabled":
        return self.__class__(self.mode)


class _GradMode(contextlib.ContextDecorator):
    def __init__(self, mode: bool) -> None:
        self.mode = mode

    def __enter__(self):
        self.prev = _grad_enabled[0]
        _grad_enabled[0] = self.mode
        return self

    def __exit__(self, *exc):
        _grad_enabled[0] = self.prev
        return False


def no_grad() -> _GradMode:
    """Context manager / decorator: ops inside record no graph."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    return _GradMode(True)


class inference_mode(contextlib.ContextDecorator):
    """torch.inference_mode(mode=True): a context manager and decorator
    (``@inference_mode`` or ``@inference_mode()``) in which ops record no
    graph, as ``no_grad``; ``inference_mode(False)`` changes nothing."""

    def __new__(cls, mode=True):
        if mode is None or isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)  # used bare as a decorator: @inference_mode

    def __init__(self, mode: bool = True) -> None:
        self.mode = bool(mode)

    def __enter__(self):
        self.prev = (_grad_enabled[0], _inference[0])
        if self.mode:
            _grad_enabled[0] = False
            _inference[0] = True
        return self

    def __exit__(self, *exc):
        _grad_enabled[0], _inference[0] = self.prev
        return False

    def clone(self) -> "inference_mode":
        return self.__class__(self.mode)


def is_inference_mode_enabled() -> bool:
    """torch.is_inference_mode_enabled."""
    return _inference[0]
