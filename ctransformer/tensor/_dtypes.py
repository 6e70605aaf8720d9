"""dtypes (torch names for NumPy dtypes), the default float dtype, ``Size``, ``device`` and the
``torch.FloatTensor``-style constructors."""
from __future__ import annotations

import sys
from typing import Optional, Union

import numpy as np


# The package ctransformer.tensor: names defined after this module (Tensor, its factories, the
# kernel-backed ops) are read from it when a function runs, by which time it is complete.
_T = sys.modules[__package__]


# ---------------------------------------------------------------- dtypes
float32 = float_ = np.dtype(np.float32)
float64 = double = np.dtype(np.float64)
float16 = half = np.dtype(np.float16)
int64 = long = np.dtype(np.int64)
int32 = int_ = np.dtype(np.int32)
int16 = short = np.dtype(np.int16)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)

_default_dtype = float32


def set_default_dtype(d) -> None:
    """Dtype of Python floats and float factories (float32 or float64)."""
    global _default_dtype
    d = np.dtype(d)
    if d.kind != "f":
        raise TypeError(f"set_default_dtype: dtype must be a floating point dtype, got {d}")
    _default_dtype = d


def get_default_dtype() -> np.dtype:
    return _default_dtype


def _as_dtype(d) -> Optional[np.dtype]:
    if d is None:
        return None
    if isinstance(d, _TypedTensor):
        return d.dtype
    if isinstance(d, str) and d in _TYPE_NAMES:
        return _TYPE_NAMES[d]
    if d is float:
        return _default_dtype
    if d is int:
        return int64
    if d is bool:
        return bool_
    return np.dtype(d)


finfo = np.finfo
iinfo = np.iinfo


class Size(tuple):
    """torch.Size: a tuple of ints (compares equal to tuples and lists' tuples)."""

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __getitem__(self, i):
        out = tuple.__getitem__(self, i)
        return Size(out) if isinstance(i, slice) else out

    def __add__(self, other):
        return Size(tuple.__add__(self, tuple(other)))

    def __radd__(self, other):
        return Size(tuple(other) + tuple(self))

    def __repr__(self) -> str:
        return f"ctransformer.Size({list(self)})"


# torch's device types (torch.device("gpu") is refused with this list)
_DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                 "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")
_CPU_ONLY = "ctransformer runs on the CPU only (torch.cuda.is_available() is False; use device='cpu')"


class device:
    """``torch.device``: a device type and optional index, as in a CPU-only
    build of torch.  Any of torch's device types can be named (scripts build
    ``device("cuda")`` before they check ``cuda.is_available()``); putting a
    tensor or a module on anything but the CPU is refused as that build
    refuses it (see ``_require_cpu``).  Also a context manager: factories
    called inside use it as their default device."""

    def __init__(self, type: Union[str, "device", int] = "cpu", index: Optional[int] = None) -> None:
        if isinstance(type, device):
            self.type, self.index = type.type, type.index
            return
        if isinstance(type, int) and not isinstance(type, bool):  # an accelerator index
            raise RuntimeError("Cannot access accelerator device when none is available.")
        name = str(type)
        kind, sep, number = name.partition(":")
        if kind not in _DEVICE_TYPES:
            raise RuntimeError(f"Expected one of {', '.join(_DEVICE_TYPES)} device type at start of device "
                               f"string: {name}")
        if sep:
            if index is not None or not number.isdigit():
                raise RuntimeError(f"Invalid device string: {name!r}")
            index = int(number)
        if index is not None and (not isinstance(index, int) or index < 0):
            raise RuntimeError(f"Device index must not be negative, got {index}")
        self.type, self.index = kind, index

    def __eq__(self, other) -> bool:  # (a string is not a device: torch.device("cpu") == "cpu" is False)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __enter__(self) -> "device":
        self._previous = _default_device[0]
        _default_device[0] = self
        return self

    def __exit__(self, *exc) -> None:
        _default_device[0] = self._previous


_cpu = device("cpu")
_default_device = [_cpu]  # torch.set_default_device / `with torch.device(...)`


def _require_cpu(d) -> None:
    """Refuse a non-CPU device as a CPU-only build of torch does: CUDA with
    AssertionError('Torch not compiled with CUDA enabled'), another type
    with RuntimeError."""
    d = d if isinstance(d, device) else device(d)
    if d.type == "cpu":
        return
    if d.type == "cuda":
        raise AssertionError(f"Torch not compiled with CUDA enabled: {_CPU_ONLY}")
    raise RuntimeError(f"PyTorch is not linked with support for {d.type} devices: {_CPU_ONLY}")


def _check_device(d) -> None:
    """A factory's ``device=`` argument (None: the default device)."""
    _require_cpu(_default_device[0] if d is None else d)


_TYPE_NAMES = {"torch.FloatTensor": float32, "torch.DoubleTensor": float64, "torch.LongTensor": int64,
               "torch.BoolTensor": bool_, "torch.IntTensor": int32, "torch.HalfTensor": float16,
               "torch.ByteTensor": uint8}
_TYPE_OF = {v: k for k, v in _TYPE_NAMES.items()}


# torch.FloatTensor(...) / torch.LongTensor(...) constructors
class _TypedTensor:
    """``FloatTensor([1, 2])`` (data) or ``FloatTensor(2, 3)`` (sizes);
    ``isinstance(t, FloatTensor)`` checks the dtype."""

    def __init__(self, dtype, name):
        self.dtype = dtype
        self.__name__ = name

    def __call__(self, *args):
        if not args:
            return _T.zeros(0, dtype=self.dtype)
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            if isinstance(args[0], Size):
                return _T.zeros(*args[0], dtype=self.dtype)
            return _T.tensor(args[0], dtype=self.dtype)
        return _T.zeros(*args, dtype=self.dtype)

    def __instancecheck__(self, obj):
        return isinstance(obj, _T.Tensor) and obj.dtype == self.dtype

    def __repr__(self) -> str:
        return f"<class 'ctransformer.{self.__name__}'>"


FloatTensor = _TypedTensor(float32, "FloatTensor")
DoubleTensor = _TypedTensor(float64, "DoubleTensor")
LongTensor = _TypedTensor(int64, "LongTensor")
BoolTensor = _TypedTensor(bool_, "BoolTensor")
IntTensor = _TypedTensor(int32, "IntTensor")
ByteTensor = _TypedTensor(uint8, "ByteTensor")
