"""Writing ``data.pkl`` the way ``torch.save`` does.

Tensors become ``torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, requires_grad, OrderedDict())`` and Parameters
``torch._utils._rebuild_parameter(tensor, requires_grad, OrderedDict())``;
each storage is a persistent id ``('storage', torch.FloatStorage, key,
'cpu', numel)`` whose bytes live in the zip member ``data/<key>``.  These
are the names ``torch.load(weights_only=True)`` admits, so PyTorch reads
our state dicts unchanged.  Everything else (dicts, lists, numbers, whole
modules) is ordinary pickle protocol 2, as torch writes it.

The pure-Python pickler is used because torch's global names must be
written without torch being importable here.
"""
from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import Any, Dict, List, Tuple

import numpy as np

from ..tensor import Tensor

# numpy dtype -> the storage class torch names in its pickles
STORAGE_OF_DTYPE: Dict[np.dtype, str] = {
    np.dtype(np.float32): "FloatStorage",
    np.dtype(np.float64): "DoubleStorage",
    np.dtype(np.float16): "HalfStorage",
    np.dtype(np.int64): "LongStorage",
    np.dtype(np.int32): "IntStorage",
    np.dtype(np.int16): "ShortStorage",
    np.dtype(np.int8): "CharStorage",
    np.dtype(np.uint8): "ByteStorage",
    np.dtype(np.bool_): "BoolStorage",
    np.dtype(np.complex64): "ComplexFloatStorage",
    np.dtype(np.complex128): "ComplexDoubleStorage",
}


class TorchGlobal:
    """A reference to a global by name, written as pickle's GLOBAL opcode
    (used for torch's names, which cannot be imported here)."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name

    def __call__(self, *args: Any) -> Any:  # pickle insists that a reduce function be callable
        raise TypeError(f"{self.module}.{self.name} is only a name written into a checkpoint")


_REBUILD_TENSOR = TorchGlobal("torch._utils", "_rebuild_tensor_v2")
_REBUILD_PARAMETER = TorchGlobal("torch._utils", "_rebuild_parameter")
_ORDERED_DICT = TorchGlobal("collections", "OrderedDict")


class TorchPickler(pickle._Pickler):  # type: ignore[name-defined,misc]
    """Pickles ``obj`` as torch.save would, collecting tensor storages in
    ``self.storages`` (key -> contiguous little-endian array)."""

    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=2)
        self.storages: List[Tuple[str, np.ndarray]] = []
        self._storage_keys: Dict[int, str] = {}
        self._keep: List[Any] = []  # objects whose id() we memoised stay alive

    def _save_torch_global(self, obj: TorchGlobal) -> None:
        key = (obj.module, obj.name)
        if key in self._globals_written:
            self.write(self.get(self._globals_written[key]))
            return
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
        idx = len(self.memo)
        self.memo[id(obj)] = (idx, obj)  # the memo keeps obj alive, so its id is not reused
        self._globals_written[key] = idx
        self.write(self.put(idx))

    dispatch[TorchGlobal] = _save_torch_global

    def dump(self, obj: Any) -> None:
        self._globals_written: Dict[Tuple[str, str], int] = {}
        super().dump(obj)

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Tensor):
            return self._reduce_tensor(obj)
        return NotImplemented

    def _storage_key(self, arr: np.ndarray) -> str:
        key = self._storage_keys.get(id(arr))
        if key is None:
            key = str(len(self.storages))
            self._storage_keys[id(arr)] = key
            self._keep.append(arr)
            self.storages.append((key, arr))
        return key

    def _reduce_tensor(self, t: Tensor) -> Any:
        from ..nn.parameter import Parameter

        arr = t._data
        dtype = arr.dtype.newbyteorder("=") if arr.dtype.byteorder not in "=|" else arr.dtype
        storage_name = STORAGE_OF_DTYPE.get(np.dtype(dtype))
        if storage_name is None:
            raise TypeError(f"save: tensors of dtype {arr.dtype} cannot be stored")
        flat = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<"))
        key = self._storage_key(flat)
        pid = ("storage", TorchGlobal("torch", storage_name), key, "cpu", int(flat.size))
        stride = _contiguous_strides(arr.shape)
        tensor_args = (_Persistent(pid), 0, tuple(int(d) for d in arr.shape), stride,
                       bool(t.requires_grad) if not isinstance(t, Parameter) else False, OrderedDict())
        if isinstance(t, Parameter):
            inner = _Reduced(_REBUILD_TENSOR, tensor_args)
            return (_REBUILD_PARAMETER, (inner, bool(t.requires_grad), OrderedDict()))
        return (_REBUILD_TENSOR, tensor_args)

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _Persistent):
            return obj.pid
        return None


class _Persistent:
    """Marks a storage's persistent id inside a tensor's rebuild arguments."""

    __slots__ = ("pid",)

    def __init__(self, pid: tuple) -> None:
        self.pid = pid


class _Reduced:
    """A nested ``callable(*args)`` (the tensor inside a Parameter)."""

    __slots__ = ("func", "args")

    def __init__(self, func: TorchGlobal, args: tuple) -> None:
        self.func = func
        self.args = args

    def __reduce__(self) -> Any:
        return (self.func, self.args)


def _contiguous_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    strides = []
    step = 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))
