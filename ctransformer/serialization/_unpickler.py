"""Reading ``data.pkl``: torch's rebuild functions mapped onto ours, and the
weights-only rules of ``torch.load`` (torch >= 2.6).

With ``weights_only=True`` (the default) a checkpoint may name only tensor
rebuilds, storages, dtypes, ``torch.Size`` / ``torch.device``, plain
containers, NumPy arrays and scalars of non-object dtypes, and whatever
the caller allowed with :func:`add_safe_globals` / :func:`safe_globals`;
nothing is imported to find out what a name is.  ``BUILD`` (setting an
object's state) is allowed only on those types.  With
``weights_only=False`` any global is imported, as ``pickle`` does: only for
files you trust.

Names under ``torch.`` resolve to ctransformer's objects of the same path
(``torch.nn.modules.rnn.LSTM`` is ``ctransformer.nn.modules.rnn.LSTM``).
"""
from __future__ import annotations

import importlib
import pickle
import re
from collections import Counter, OrderedDict
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import numpy as np

from ..tensor import Size, Tensor, device

BFLOAT16 = "bfloat16"  # read as float32 (NumPy has no bfloat16): exact, each value widened


class StorageType:
    """What a pickled ``torch.<Type>Storage`` name stands for: its dtype."""

    def __init__(self, name: str, dtype: Any) -> None:
        self.name = name
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"torch.{self.name}"


_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": BFLOAT16, "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
    "ComplexFloatStorage": np.complex64, "ComplexDoubleStorage": np.complex128,
}
STORAGE_TYPES = {name: StorageType(name, dt) for name, dt in _STORAGE_DTYPES.items()}
STORAGE_TYPES["UntypedStorage"] = StorageType("UntypedStorage", np.uint8)

_TORCH_DTYPES = {
    "float32": np.float32, "float": np.float32, "float64": np.float64, "double": np.float64,
    "float16": np.float16, "half": np.float16, "int64": np.int64, "long": np.int64, "int32": np.int32,
    "int": np.int32, "int16": np.int16, "short": np.int16, "int8": np.int8, "uint8": np.uint8,
    "bool": np.bool_, "complex64": np.complex64, "complex128": np.complex128, "bfloat16": np.float32,
}


class Storage:
    """One storage of the archive, as a flat NumPy array."""

    def __init__(self, array: np.ndarray, bfloat16: bool = False) -> None:
        self.array = array
        self.bfloat16 = bfloat16


class LoadContext:
    """What the rebuild functions need: the archive's storages and limits."""

    def __init__(self, read_storage: Callable[[str, Any, int], Storage], limits: Any) -> None:
        self.read_storage = read_storage
        self.limits = limits
        self.storages: Dict[str, Storage] = {}


def _check_ints(values: Any, what: str, limit: int) -> Tuple[int, ...]:
    if not isinstance(values, (tuple, list)) or len(values) > limit:
        raise ValueError(f"tensor {what} must be a tuple of at most {limit} ints, got {values!r:.80}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"tensor {what} must hold non-negative ints, got {values!r:.80}")
        out.append(v)
    return tuple(out)


def _tensor_from_storage(ctx: LoadContext, storage: Any, offset: Any, size: Any, stride: Any) -> np.ndarray:
    """The array a (storage, offset, size, stride) view describes, checked
    against the storage's bounds (a hostile file cannot read outside it or
    inflate a tiny storage into a huge array)."""
    if not isinstance(storage, Storage):
        raise ValueError(f"tensor rebuild got {type(storage).__name__} where a storage belongs")
    size = _check_ints(size, "size", ctx.limits.max_dims)
    stride = _check_ints(stride, "stride", ctx.limits.max_dims)
    if len(size) != len(stride):
        raise ValueError(f"tensor size {size} and stride {stride} differ in length")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"tensor storage offset must be a non-negative int, got {offset!r:.40}")
    flat = storage.array
    numel = 1
    for d in size:
        numel *= d
    if numel:
        last = offset + sum((d - 1) * s for d, s in zip(size, stride))
        if last >= flat.size:
            raise ValueError(f"tensor of size {size}, stride {stride}, offset {offset} reads past its storage "
                             f"of {flat.size} elements")
        nbytes = numel * flat.itemsize
        if nbytes > max(flat.nbytes, ctx.limits.max_expanded_bytes):
            raise ValueError(f"tensor of size {size} would expand a storage of {flat.size} elements to "
                             f"{nbytes} bytes (limit {ctx.limits.max_expanded_bytes})")
    contiguous = stride == _contiguous(size)
    if contiguous and offset == 0 and numel == flat.size:
        arr = flat.reshape(size)
    elif numel == 0:
        arr = np.zeros(size, flat.dtype)
    else:
        view = np.lib.stride_tricks.as_strided(flat[offset:], size, tuple(s * flat.itemsize for s in stride),
                                               writeable=False)
        arr = np.array(view, order="C")
    if storage.bfloat16:
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr


def _contiguous(size: Tuple[int, ...]) -> Tuple[int, ...]:
    out, step = [], 1
    for d in reversed(size):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


def make_rebuilders(ctx: LoadContext) -> Dict[str, Any]:
    """torch's rebuild functions, as ctransformer implementations bound to ``ctx``."""
    from ..nn.parameter import Parameter

    def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                           metadata=None):
        t = Tensor._wrap(_tensor_from_storage(ctx, storage, storage_offset, size, stride))
        if requires_grad:
            if t._data.dtype.kind not in "fc":
                raise ValueError("a tensor of a non-float dtype cannot require grad")
            t.requires_grad_(True)
        return t

    def _rebuild_tensor(storage, storage_offset, size, stride):
        return _rebuild_tensor_v2(storage, storage_offset, size, stride)

    def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype,
                           metadata=None):
        return _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad)

    def _rebuild_parameter(data, requires_grad, backward_hooks):
        if not isinstance(data, Tensor):
            raise ValueError(f"a Parameter rebuild got {type(data).__name__}, not a tensor")
        return Parameter(data.detach(), requires_grad=bool(requires_grad))

    def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
        return _rebuild_parameter(data, requires_grad, backward_hooks)

    def _rebuild_from_type_v2(func, new_type, args, state):
        ret = func(*args)
        if new_type is Parameter and not isinstance(ret, Parameter):
            ret = Parameter(ret.detach(), requires_grad=ret.requires_grad)
        return ret

    return {
        "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
        "torch._utils._rebuild_tensor": _rebuild_tensor,
        "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
        "torch._utils._rebuild_parameter": _rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    }


# ---- NumPy arrays and scalars, without object dtypes ----------------------
def _safe_dtype(obj: Any, align: bool = False, copy: bool = False) -> np.dtype:
    dt = np.dtype(obj, align=align, copy=copy) if isinstance(obj, str) else None
    if dt is None:
        raise ValueError(f"numpy dtype from {type(obj).__name__} refused")
    if dt.hasobject:
        raise ValueError(f"numpy dtype {dt} holds Python objects: refused")
    return dt


def _safe_reconstruct(cls: Any, shape: Any, typecode: Any) -> np.ndarray:
    if cls is not np.ndarray:
        raise ValueError(f"numpy array rebuild of {cls!r:.60} refused (only numpy.ndarray)")
    return np.ndarray.__new__(np.ndarray, (0,), np.uint8)


def _safe_scalar(dtype: Any, data: Any = None) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(data, (bytes, bytearray)):
        raise ValueError("numpy scalar rebuild refused (object dtype or no raw bytes)")
    if len(data) != dtype.itemsize:
        raise ValueError("numpy scalar of the wrong byte length")
    return np.frombuffer(bytes(data), dtype=dtype)[0]


def _empty_bytearray(*args: Any) -> bytearray:
    """``builtins.bytearray`` from bytes (as protocol 2 pickles one), never from a size."""
    if len(args) > 2 or (args and not isinstance(args[0], (bytes, str))):
        raise ValueError("builtins.bytearray is admitted only from bytes or a string")
    return bytearray(*args)


def _codecs_encode(obj: Any, encoding: str = "utf-8") -> bytes:
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8"):
        raise ValueError("_codecs.encode is admitted only for strings to bytes")
    return obj.encode(encoding)


def _empty_bytes(*args: Any) -> bytes:
    """``builtins.bytes`` as protocol 2 uses it: ``bytes()`` for b"" (a size
    argument, which could allocate anything, is refused)."""
    if args:
        raise ValueError("builtins.bytes is admitted only without arguments (b'')")
    return b""


_NUMPY_GLOBALS: Dict[str, Any] = {}
for _mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _NUMPY_GLOBALS[f"{_mod}._reconstruct"] = _safe_reconstruct
    _NUMPY_GLOBALS[f"{_mod}.scalar"] = _safe_scalar
_NUMPY_GLOBALS["numpy.dtype"] = _safe_dtype
_NUMPY_GLOBALS["numpy.ndarray"] = np.ndarray


def default_allowed(ctx: LoadContext) -> Dict[str, Any]:
    """The globals a weights-only load admits without being asked, by name."""
    allowed: Dict[str, Any] = {
        "collections.OrderedDict": OrderedDict,
        "collections.Counter": Counter,
        "builtins.set": set,
        "builtins.frozenset": frozenset,
        "builtins.complex": complex,
        "builtins.bytearray": _empty_bytearray,
        "builtins.bytes": _empty_bytes,
        "builtins.slice": slice,
        "_codecs.encode": _codecs_encode,
        "torch.Size": Size,
        "torch.device": device,
        "torch.Tensor": Tensor,
    }
    from ..nn.parameter import Parameter

    allowed["torch.nn.parameter.Parameter"] = Parameter
    allowed.update(make_rebuilders(ctx))
    for name, st in STORAGE_TYPES.items():
        allowed[f"torch.{name}"] = st
        allowed[f"torch.storage.{name}"] = st
    allowed["torch.storage.TypedStorage"] = STORAGE_TYPES["UntypedStorage"]
    for name, dt in _TORCH_DTYPES.items():
        allowed[f"torch.{name}"] = np.dtype(dt)
    allowed.update(_NUMPY_GLOBALS)
    return allowed


# ---- user-allowed globals (torch.serialization.add_safe_globals) ----------
_user_safe: Dict[str, Any] = {}


def global_name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"


def _entries(safe: Iterable[Any]) -> Dict[str, Any]:
    out = {}
    for item in safe:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], str):
            out[item[1]] = item[0]
        else:
            out[global_name(item)] = item
    return out


def add_safe_globals(safe_globals: Iterable[Any]) -> None:
    """Admit these classes / functions (or ``(obj, "module.name")`` pairs) in
    weights-only loads, for the rest of the process (torch's API)."""
    _user_safe.update(_entries(safe_globals))


def get_safe_globals() -> list:
    return list(_user_safe.values())


def clear_safe_globals() -> None:
    _user_safe.clear()


class safe_globals:
    """``with safe_globals([MyModel, nn.LSTM]): load(f)``: admit these only
    inside the block (torch.serialization.safe_globals)."""

    def __init__(self, safe_globals: Iterable[Any]) -> None:
        self._entries = _entries(safe_globals)
        self._saved: Optional[Dict[str, Any]] = None

    def __enter__(self) -> None:
        self._saved = dict(_user_safe)
        _user_safe.update(self._entries)

    def __exit__(self, *exc: Any) -> None:
        _user_safe.clear()
        _user_safe.update(self._saved or {})


# ---- resolving names --------------------------------------------------------
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def resolve_torch_alias(module: str, name: str) -> Any:
    """``torch.nn.modules.rnn`` + ``LSTM`` -> ctransformer's object of that
    path (only ctransformer's own modules are imported).  KeyError if absent."""
    if not (_NAME.match(module) and _NAME.match(name)) or not (module == "torch" or module.startswith("torch.")):
        raise KeyError(f"{module}.{name}")
    ours = "ctransformer" + module[len("torch"):]
    try:
        obj: Any = importlib.import_module(ours)
    except ImportError:
        raise KeyError(f"{module}.{name}") from None
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise KeyError(f"{module}.{name}") from None
    return obj


class UnsafeGlobal(pickle.UnpicklingError):
    """A weights-only load met a global that is not allowed."""


class CheckpointUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    """The unpickler behind ``load``: weights-only rules when ``restricted``."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: Any, ctx: LoadContext, restricted: bool) -> None:
        super().__init__(file, encoding="utf-8")
        self.ctx = ctx
        self.restricted = restricted
        self.allowed = default_allowed(ctx)
        self.user_allowed = dict(_user_safe)
        self.user_allowed_ids = {id(v) for v in self.user_allowed.values()}

    # -- globals
    def find_class(self, module: str, name: str) -> Any:
        if module == "__builtin__":
            module = "builtins"
        if module == "copy_reg":
            module = "copyreg"
        full = f"{module}.{name}"
        if full in self.allowed:
            return self.allowed[full]
        if full in self.user_allowed:
            return self.user_allowed[full]
        alias = None
        if module == "torch" or module.startswith("torch."):
            try:
                alias = resolve_torch_alias(module, name)
            except KeyError:
                raise pickle.UnpicklingError(
                    f"the checkpoint names {full}, which ctransformer does not provide") from None
        if self.restricted:
            if alias is not None and id(alias) in self.user_allowed_ids:
                return alias
            raise UnsafeGlobal(self._unsafe_message(full))
        if alias is not None:
            return alias
        return super().find_class(module, name)

    @staticmethod
    def _unsafe_message(full: str) -> str:
        short = full.rsplit(".", 1)[-1]
        return (f"weights-only load refused the global {full}: it is not allowed by default. If you trust "
                f"this checkpoint, allow it with ctransformer.serialization.add_safe_globals([{short}]) or "
                f"`with ctransformer.serialization.safe_globals([{short}]):`, or load with "
                "weights_only=False (which can run arbitrary code)")

    # -- storages
    def persistent_load(self, pid: Any) -> Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], StorageType) and isinstance(pid[2], str) and isinstance(pid[4], int)
                and not isinstance(pid[4], bool) and pid[4] >= 0):
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r:.100}")
        _, stype, key, _location, numel = pid
        storage = self.ctx.storages.get(key)
        if storage is None:
            storage = self.ctx.storages[key] = self.ctx.read_storage(key, stype.dtype, numel)
        return storage

    # -- BUILD only where it is harmless
    def _load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        if isinstance(inst, np.ndarray) and type(inst) is np.ndarray:
            if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[2], np.dtype)
                    and not state[2].hasobject and isinstance(state[4], (bytes, bytearray))):
                raise pickle.UnpicklingError("numpy array state refused (object dtype or no raw bytes)")
            shape = _check_ints(state[1], "numpy shape", self.ctx.limits.max_dims)
            numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if numel * state[2].itemsize != len(state[4]):
                raise pickle.UnpicklingError("numpy array state of the wrong byte length")
            inst.__setstate__(state)
            return
        if isinstance(inst, np.dtype):
            if not (isinstance(state, tuple) and len(state) in (8, 9) and state[2] is None and state[3] is None):
                raise pickle.UnpicklingError("numpy dtype state refused (structured dtypes are not admitted)")
            inst.__setstate__(state)
            return
        if type(inst) is OrderedDict or type(inst) is Tensor:
            if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
                raise pickle.UnpicklingError(f"state of a {type(inst).__name__} must be a dict of attributes")
            inst.__dict__.update(state)
            return
        if self.restricted and id(type(inst)) not in self.user_allowed_ids and \
                global_name(type(inst)) not in self.user_allowed:
            raise UnsafeGlobal(f"weights-only load refused to set the state of a {global_name(type(inst))}")
        _check_not_torch_module_state(inst, state)
        setstate = getattr(inst, "__setstate__", None)
        if setstate is not None:
            setstate(state)
            return
        slotstate = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slotstate = state
        if state:
            inst.__dict__.update(state)
        if slotstate:
            for k, v in slotstate.items():
                setattr(inst, k, v)

    dispatch[pickle.BUILD[0]] = _load_build


def _check_not_torch_module_state(inst: Any, state: Any) -> None:
    """A whole ``nn.Module`` pickled by PyTorch keeps torch's internals
    (``_forward_hooks_with_kwargs``, per-layer flat weights, ...) that
    ctransformer's modules do not: refuse clearly rather than build a
    half-working model."""
    from ..nn.module import Module

    if isinstance(inst, Module) and isinstance(state, dict) and "_forward_hooks_with_kwargs" in state:
        raise pickle.UnpicklingError(
            f"this checkpoint holds a whole {type(inst).__name__} module pickled by PyTorch, whose internals "
            "differ from ctransformer's; in PyTorch, save its state_dict() instead "
            "(torch.save(model.state_dict(), path)) and load that into the ctransformer model")
