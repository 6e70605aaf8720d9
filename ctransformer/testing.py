"""``ctransformer.testing.assert_close``: torch.testing.assert_close, with
torch's default tolerances per dtype and its failure messages.

    from ctransformer.testing import assert_close
    assert_close(actual, expected)          # rtol/atol from the dtypes
    assert_close(actual, expected, rtol=1e-4, atol=1e-6)

Tensors, NumPy arrays, Python numbers and (nested) sequences / mappings of
them are compared; a failure raises AssertionError naming how many elements
mismatch and the greatest absolute and relative differences with their
index (and, inside a container, which item failed).
"""
from __future__ import annotations

import collections.abc
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from .tensor import Size, Tensor

__all__ = ["assert_close", "assert_allclose"]

# torch.testing's default (rtol, atol) per dtype; other dtypes compare exactly
_DEFAULT_TOLERANCES = {
    np.dtype(np.float16): (1e-3, 1e-5),
    np.dtype(np.float32): (1.3e-6, 1e-5),
    np.dtype(np.float64): (1e-7, 1e-7),
    np.dtype(np.complex64): (1.3e-6, 1e-5),
    np.dtype(np.complex128): (1e-7, 1e-7),
}


class _Mismatch(AssertionError):
    """An AssertionError carrying the path of the failing item."""


def _default_tolerances(*dtypes: np.dtype) -> Tuple[float, float]:
    rtols, atols = zip(*(_DEFAULT_TOLERANCES.get(np.dtype(d), (0.0, 0.0)) for d in dtypes))
    return max(rtols), max(atols)


def _make_mismatch_msg(identifier: str, extra: Optional[str], abs_diff, abs_idx, atol: float, rel_diff, rel_idx,
                       rtol: float) -> str:
    equality = rtol == 0 and atol == 0

    def diff_msg(kind: str, diff, idx, tol) -> str:
        msg = f"{kind.title()} difference: {diff}" if idx is None else \
            f"Greatest {kind} difference: {diff} at index {idx}"
        if not equality:
            msg += f" (up to {tol} allowed)"
        return msg + "\n"

    msg = f"{identifier} are not {'equal' if equality else 'close'}!\n\n"
    if extra:
        msg += f"{extra.strip()}\n"
    msg += diff_msg("absolute", abs_diff, abs_idx, atol)
    msg += diff_msg("relative", rel_diff, rel_idx, rtol)
    return msg.strip()


def _scalar_msg(actual, expected, rtol: float, atol: float) -> str:
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return _make_mismatch_msg("Scalars", f"Expected {expected} but got {actual}.", abs_diff, None, atol,
                              rel_diff, None, rtol)


def _tensor_msg(actual: np.ndarray, expected: np.ndarray, matches: np.ndarray, rtol: float, atol: float) -> str:
    n = matches.size
    bad = n - int(matches.sum())
    extra = f"Mismatched elements: {bad} / {n} ({bad / n:.1%})"
    a, e = actual.reshape(-1), expected.reshape(-1)
    if a.dtype.kind not in "fc":
        a, e = a.astype(np.int64), e.astype(np.int64)
    m = matches.reshape(-1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        abs_diff = np.abs(a - e)
        abs_diff[m] = 0
        rel_diff = abs_diff / np.abs(e)
    rel_diff[m] = 0

    def greatest(d: np.ndarray):
        nan = np.isnan(d) if d.dtype.kind in "fc" else np.zeros(d.shape, bool)
        i = int(np.argmax(nan)) if nan.any() else int(np.argmax(d))
        return d[i].item(), tuple(int(k) for k in np.unravel_index(i, matches.shape))

    (ad, ai), (rd, ri) = greatest(abs_diff), greatest(rel_diff)
    return _make_mismatch_msg("Tensor-likes", extra, ad, ai, atol, rd, ri, rtol)


def _as_array(x) -> Optional[np.ndarray]:
    if isinstance(x, Tensor):
        return x._data
    if isinstance(x, np.ndarray):
        return x
    return None


def _fail(msg: str, user_msg) -> None:
    if user_msg is None:
        raise _Mismatch(msg)
    raise _Mismatch(user_msg(msg) if callable(user_msg) else user_msg)


def _close(a: np.ndarray, e: np.ndarray, rtol: float, atol: float, equal_nan: bool) -> np.ndarray:
    if a.dtype.kind not in "fc" and e.dtype.kind not in "fc":
        return a == e
    with np.errstate(invalid="ignore", over="ignore"):
        return np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)


def _compare_arrays(actual, expected, a: np.ndarray, e: np.ndarray, rtol, atol, equal_nan: bool,
                    check_dtype: bool, msg) -> None:
    if a.shape != e.shape:
        _fail(f"The values for attribute 'shape' do not match: {Size(a.shape)!r} != {Size(e.shape)!r}.", msg)
    if check_dtype and a.dtype != e.dtype:
        _fail(f"The values for attribute 'dtype' do not match: ctransformer.{a.dtype.name} != "
              f"ctransformer.{e.dtype.name}.", msg)
    if not check_dtype and a.dtype != e.dtype:
        common = np.result_type(a, e)
        a, e = a.astype(common), e.astype(common)
    if rtol is None:
        rtol, atol = _default_tolerances(a.dtype, e.dtype)
    matches = _close(a, e, rtol, atol, equal_nan)
    if matches.all():
        return
    if a.ndim == 0:
        _fail(_scalar_msg(a.item(), e.item(), rtol, atol), msg)
    _fail(_tensor_msg(a, e, matches, rtol, atol), msg)


def _compare(actual, expected, rtol, atol, equal_nan: bool, check_dtype: bool, allow_subclasses: bool, msg,
             path: tuple) -> None:
    a, e = _as_array(actual), _as_array(expected)
    try:
        if a is not None and e is not None:
            if not allow_subclasses and type(actual) is not type(expected):
                raise TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} and "
                                f"{type(expected)}.")
            _compare_arrays(actual, expected, a, e, rtol, atol, equal_nan, check_dtype, msg)
            return
        num = (int, float, complex, np.number, bool, np.bool_)
        if isinstance(actual, num) and isinstance(expected, num):
            if check_dtype and type(actual) is not type(expected) and not (
                    isinstance(actual, np.number) or isinstance(expected, np.number)):
                _fail(f"The values for attribute 'dtype' do not match: {type(actual)} != {type(expected)}.", msg)
            r, t = (rtol, atol) if rtol is not None else (
                (1e-7, 1e-7) if isinstance(actual, (float, complex)) or isinstance(expected, (float, complex))
                else (0.0, 0.0))
            close = (actual == expected or abs(actual - expected) <= t + r * abs(expected)
                     or (equal_nan and actual != actual and expected != expected))
            if not close:
                _fail(_scalar_msg(actual, expected, r, t), msg)
            return
        if a is None and e is None and isinstance(actual, collections.abc.Mapping) and \
                isinstance(expected, collections.abc.Mapping):
            ka, ke = sorted(actual.keys(), key=str), sorted(expected.keys(), key=str)
            if ka != ke:
                raise _Mismatch(f"The keys of the mappings do not match:\nMissing keys in the actual mapping: "
                                f"{sorted(set(ke) - set(ka), key=str)}\nAdditional keys in the actual mapping: "
                                f"{sorted(set(ka) - set(ke), key=str)}")
            for k in actual:
                _compare(actual[k], expected[k], rtol, atol, equal_nan, check_dtype, allow_subclasses, msg,
                         path + (k,))
            return
        seq = (collections.abc.Sequence,)
        if a is None and e is None and isinstance(actual, seq) and isinstance(expected, seq) and \
                not isinstance(actual, str) and not isinstance(expected, str):
            if len(actual) != len(expected):
                raise _Mismatch(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}")
            for i, (x, y) in enumerate(zip(actual, expected)):
                _compare(x, y, rtol, atol, equal_nan, check_dtype, allow_subclasses, msg, path + (i,))
            return
        raise TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} and "
                        f"{type(expected)}.")
    except _Mismatch as exc:
        if path and not getattr(exc, "located", False):
            exc = _Mismatch(f"{exc}\n\nThe failure occurred for item {''.join(f'[{p!r}]' for p in path)}")
            exc.located = True
            raise exc from None
        raise


def assert_close(actual: Any, expected: Any, *, allow_subclasses: bool = True, rtol: Optional[float] = None,
                 atol: Optional[float] = None, equal_nan: bool = False, check_device: bool = True,
                 check_dtype: bool = True, check_layout: bool = True, check_stride: bool = False,
                 msg: Optional[Union[str, Callable[[str], str]]] = None) -> None:
    """Assert ``actual`` and ``expected`` are close: |actual - expected| <=
    atol + rtol * |expected| elementwise, shapes and (with check_dtype)
    dtypes equal.  Without rtol/atol the defaults of the dtypes apply:
    float16 (1e-3, 1e-5), float32 (1.3e-6, 1e-5), float64 (1e-7, 1e-7),
    integers and bool exact.  Raises AssertionError with torch's message."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    try:
        _compare(actual, expected, rtol, atol, equal_nan, check_dtype, allow_subclasses, msg, ())
    except _Mismatch as exc:
        raise AssertionError(str(exc)) from None


def assert_allclose(actual, expected, rtol: Optional[float] = None, atol: Optional[float] = None,
                    equal_nan: bool = True, msg: str = "") -> None:
    """Deprecated torch.testing.assert_allclose: assert_close without the dtype check."""
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=False, msg=msg or None)
