"""Conversion of the scalar arguments of the kernel wrappers, with the
contract's messages (function, argument, expected, actual): no bare
``int()`` / ``float()``, which truncate ``seed=1.5`` or parse ``"0.5"``
silently, and no integer wider than the C argument it becomes."""
from __future__ import annotations

import numbers
import operator
from typing import Optional

#: The range of a C ``unsigned long long`` (seeds, offsets).
U64 = (0, 2 ** 64)


def as_int(fn: str, name: str, value: object, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """``value`` as an int (anything with ``__index__``: int, NumPy
    integers, not floats), in ``[low, high)`` when given.  TypeError /
    ValueError naming ``fn`` and ``name`` otherwise."""
    if isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be an int, got bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}") from None
    if (low is not None and v < low) or (high is not None and v >= high):
        lo = "" if low is None else f"{low} <= "
        hi = "" if high is None else f" < {high if high < 2 ** 32 else '2**' + str(high.bit_length() - 1)}"
        raise ValueError(f"{fn}: {name} must be {lo}{name}{hi}, got {v}")
    return v


def as_float(fn: str, name: str, value: object) -> float:
    """``value`` as a float (a real number: int, float, NumPy scalar; not a
    string or None).  TypeError naming ``fn`` and ``name`` otherwise."""
    if type(value) is float:  # the common case, without the ABC check (~1 % of a small training step)
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a float, got {type(value).__name__}")
    return float(value)
