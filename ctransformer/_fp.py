"""Floating-point exceptions stay quiet, as torch's do.

torch computes ``log(0) = -inf``, ``0 / 0 = nan`` and ``exp(1000) = inf``, and casts
a NaN to an integer, without a word.  NumPy's ufuncs report each of these as a
RuntimeWarning ("divide by zero encountered in log"), which ``python -W error``
or pytest's ``filterwarnings = error`` turns into an exception.  So the tensor
layer runs its NumPy maths with NumPy's floating-point error handling set to
"ignore", per call: the user's own NumPy code keeps its settings.

``quiet`` (a context manager) and ``quietly`` (a decorator) do this.  The hot
paths (the arithmetic operators) set the state inline with ``enter`` / ``leave``.

On NumPy >= 2 the error state is a context variable: setting it costs ~0.15 us a
call, against ~1.5 us for ``np.errstate``.  On NumPy 1.x, ``np.errstate`` is used.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

try:  # NumPy >= 2.0: numpy/_core/_ufunc_config.py keeps the state in this ContextVar
    from numpy._core._ufunc_config import _extobj_contextvar as _state

    with np.errstate(all="ignore"):
        _IGNORE_ALL = _state.get()
    enter = functools.partial(_state.set, _IGNORE_ALL)  # -> token for leave
    leave = _state.reset
except (ImportError, AttributeError):  # NumPy 1.x
    _state = None

    def enter():
        """Ignore floating-point errors until ``leave(token)``; returns the token."""
        cm = np.errstate(all="ignore")
        cm.__enter__()
        return cm

    def leave(token) -> None:
        token.__exit__(None, None, None)


class quiet:
    """``with quiet():`` NumPy's floating-point errors are ignored inside (as torch's)."""

    __slots__ = ("_token",)

    def __enter__(self) -> "quiet":
        self._token = enter()
        return self

    def __exit__(self, *exc) -> None:
        leave(self._token)


def quietly(fn: F) -> F:
    """``fn`` with NumPy's floating-point errors ignored while it runs (see ``quiet``)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        token = enter()
        try:
            return fn(*args, **kwargs)
        finally:
            leave(token)

    return run  # type: ignore[return-value]
