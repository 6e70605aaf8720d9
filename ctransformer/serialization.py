"""save / load without pickle.

A checkpoint is an ``.npz`` archive (whatever the file name): every array
(Tensor, Parameter or NumPy array) is one member ``a<N>``, and the member
``__ctransformer__`` holds the object's structure as UTF-8 JSON, e.g.::

    {"format": "ctransformer", "version": 1,
     "root": {"t": "dict", "items": [[{"t": "str", "v": "weight"}, {"t": "tensor", "k": "a0"}]]}}

Supported values: dict / OrderedDict (any supported keys), list, tuple,
Tensor, Parameter, NumPy arrays and scalars, int, float (inf/nan too), bool,
str, None.  A Tensor stored twice is saved once and loaded as one object.
Files are written atomically: a temporary file in the same directory,
flushed and fsync'ed, then ``os.replace``-d over the target.  A save that
was killed (SIGKILL, power loss) leaves its temporary file behind; the next
save to the same path removes the ones whose writing process is gone.
Loading uses ``allow_pickle=False``; a truncated or foreign file raises
ValueError naming the path, and the file is closed on every path.  Limits
against crafted files: the structure entry at most ``MAX_STRUCTURE_BYTES``
and ``MAX_DEPTH`` levels deep, and no archive member may inflate more than
``MAX_INFLATION`` times its stored size.
"""
from __future__ import annotations

import glob
import json
import os
import tempfile
import time
import zipfile
from collections import OrderedDict
from typing import Any, BinaryIO, Dict, Union

import numpy as np

from .tensor import Tensor

__all__ = ["save", "load"]

_STRUCTURE = "__ctransformer__"
_FORMAT = "ctransformer"
_VERSION = 1

PathLike = Union[str, "os.PathLike[str]"]

#: Largest structure entry (the JSON tree) :func:`load` reads, in bytes.
MAX_STRUCTURE_BYTES = 64 * 1024 * 1024
#: Deepest nesting of containers :func:`load` decodes.
MAX_DEPTH = 200
#: Largest ratio of an archive member's inflated to stored size (our own
#: saves store uncompressed: ratio 1; ``np.savez_compressed`` reaches ~10-100
#: on regular data).
MAX_INFLATION = 1000


class _Encoder:
    """Walks an object, collecting arrays and building its JSON tree."""

    def __init__(self) -> None:
        self.arrays: Dict[str, np.ndarray] = {}
        self.tensor_keys: Dict[int, str] = {}

    def _add_array(self, arr: np.ndarray) -> str:
        key = f"a{len(self.arrays)}"
        if arr.dtype.kind not in "biufc":
            raise TypeError(f"save: arrays of dtype {arr.dtype} cannot be stored without pickle")
        self.arrays[key] = np.ascontiguousarray(arr) if arr.ndim else arr
        return key

    def encode(self, obj: Any, where: str) -> dict:
        if obj is None:
            return {"t": "none"}
        if isinstance(obj, bool):
            return {"t": "bool", "v": obj}
        if isinstance(obj, Tensor):
            return self._tensor(obj)
        if isinstance(obj, np.ndarray):
            return {"t": "ndarray", "k": self._add_array(obj)}
        if isinstance(obj, np.generic):
            return {"t": "npscalar", "k": self._add_array(np.asarray(obj))}
        if isinstance(obj, int):
            return {"t": "int", "v": str(int(obj))}
        if isinstance(obj, float):
            return {"t": "float", "v": repr(float(obj))}
        if isinstance(obj, str):
            return {"t": "str", "v": obj}
        if isinstance(obj, dict):
            kind = "odict" if isinstance(obj, OrderedDict) else "dict"
            return {"t": kind, "items": [[self.encode(k, f"{where} key {k!r}"), self.encode(v, f"{where}[{k!r}]")]
                                         for k, v in obj.items()]}
        if isinstance(obj, (list, tuple)):
            kind = "list" if isinstance(obj, list) else "tuple"
            return {"t": kind, "items": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        raise TypeError(f"save: cannot store an object of type {type(obj).__name__} at {where} (supported: "
                        "dict, list, tuple, Tensor, NumPy array, int, float, bool, str, None)")

    def _tensor(self, t: Tensor) -> dict:
        from .nn.parameter import Parameter

        key = self.tensor_keys.get(id(t))
        if key is None:
            key = self.tensor_keys[id(t)] = self._add_array(t._data)
        return {"t": "tensor", "k": key, "param": isinstance(t, Parameter), "rg": bool(t.requires_grad)}


class _Decoder:
    def __init__(self, arrays: Dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.tensors: Dict[str, Tensor] = {}

    def decode(self, node: dict, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError(f"the structure is nested more than {MAX_DEPTH} levels deep")
        if not isinstance(node, dict):
            raise ValueError(f"a structure node must be a JSON object, got {type(node).__name__}")
        kind = node["t"]
        if kind == "none":
            return None
        if kind in ("bool", "str"):
            return node["v"]
        if kind == "int":
            return int(node["v"])
        if kind == "float":
            return float(node["v"])
        if kind == "ndarray":
            return self.arrays[node["k"]]
        if kind == "npscalar":
            arr = self.arrays[node["k"]]
            if arr.ndim != 0:
                raise ValueError(f"an npscalar node refers to a {arr.ndim}-D array of shape {arr.shape}")
            return arr[()]
        if kind == "tensor":
            return self._tensor(node)
        if kind in ("dict", "odict"):
            pairs = [(self.decode(k, depth + 1), self.decode(v, depth + 1)) for k, v in node["items"]]
            return OrderedDict(pairs) if kind == "odict" else dict(pairs)
        if kind == "list":
            return [self.decode(v, depth + 1) for v in node["items"]]
        if kind == "tuple":
            return tuple(self.decode(v, depth + 1) for v in node["items"])
        raise ValueError(f"unknown node type {kind!r}")

    def _tensor(self, node: dict) -> Tensor:
        from .nn.parameter import Parameter

        key = node["k"]
        if key not in self.tensors:
            arr = self.arrays[key]
            if node.get("param"):
                t = Parameter(Tensor._wrap(arr), requires_grad=bool(node.get("rg")))
            else:
                t = Tensor._wrap(arr)
                if node.get("rg") and arr.dtype.kind == "f":
                    t.requires_grad_(True)
            self.tensors[key] = t
        return self.tensors[key]


def _write_npz(fileobj: BinaryIO, arrays: Dict[str, np.ndarray]) -> None:
    np.savez(fileobj, **arrays)


def save(obj: Any, f: Union[PathLike, BinaryIO], *args: Any, **kwargs: Any) -> None:
    """Write ``obj`` (nested dicts / lists / tuples of Tensors, arrays,
    numbers, strings, bools, None) to ``f``, a path (written atomically) or
    a writable binary file object."""
    enc = _Encoder()
    root = enc.encode(obj, "obj")
    structure = json.dumps({"format": _FORMAT, "version": _VERSION, "root": root}, allow_nan=True)
    arrays = dict(enc.arrays)
    arrays[_STRUCTURE] = np.frombuffer(structure.encode("utf-8"), dtype=np.uint8)
    if hasattr(f, "write"):
        _write_npz(f, arrays)
        return
    path = os.fspath(f)
    directory = os.path.dirname(os.path.abspath(path))
    _sweep_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(_temp_prefix(path)) + f"{os.getpid()}.", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            _write_npz(out, arrays)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)


def _temp_prefix(path: str) -> str:
    """Temporary files of a save to `path` are `.<name>.pid<PID>.<random>.tmp`."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), "." + os.path.basename(path) + ".pid")


def _sweep_temporaries(path: str, stale_after: float = 3600.0) -> None:
    """Remove the temporary files earlier saves to `path` left behind when
    killed: those of processes that no longer exist (a live process may be
    saving right now), and any older than `stale_after` seconds (the pid
    may have been reused).  Best effort: errors are ignored."""
    prefix = _temp_prefix(path)
    now = time.time()
    for tmp in glob.glob(glob.escape(prefix) + "*.tmp"):
        pid_text = tmp[len(prefix):].split(".", 1)[0]
        try:
            pid = int(pid_text)
            alive = pid != os.getpid() and _process_exists(pid)
            if alive and now - os.path.getmtime(tmp) < stale_after:
                continue
            if pid == os.getpid() and now - os.path.getmtime(tmp) < stale_after:
                continue   # another thread of this process may be saving
            os.unlink(tmp)
        except (ValueError, OSError):
            continue


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_archive_limits(fh: BinaryIO) -> None:
    """Refuse archives whose members would inflate beyond the limits (the
    sizes come from the zip directory, before anything is decompressed)."""
    start = fh.tell()
    with zipfile.ZipFile(fh) as zf:
        for info in zf.infolist():
            if info.filename == _STRUCTURE + ".npy" and info.file_size > MAX_STRUCTURE_BYTES:
                raise ValueError(f"the structure entry is {info.file_size} bytes, more than the limit "
                                 f"MAX_STRUCTURE_BYTES = {MAX_STRUCTURE_BYTES}")
            if info.file_size > MAX_INFLATION * max(info.compress_size, 1) + (1 << 20):
                raise ValueError(f"member {info.filename!r} inflates from {info.compress_size} to "
                                 f"{info.file_size} bytes, more than MAX_INFLATION = {MAX_INFLATION} times")
    fh.seek(start)


def _fsync_dir(directory: str) -> None:
    """Make the rename durable (best effort; not all systems allow it)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def load(f: Union[PathLike, BinaryIO], map_location: Any = None, weights_only: Any = None,
         **kwargs: Any) -> Any:
    """Read an object written by :func:`save`.  ``map_location`` and
    ``weights_only`` are accepted for torch compatibility (everything lives
    on the CPU, and nothing is unpickled).  Raises FileNotFoundError for a
    missing path and ValueError naming the file for anything that is not
    an intact ctransformer checkpoint."""
    name = repr(os.fspath(f)) if not hasattr(f, "read") else repr(getattr(f, "name", "<file object>"))
    if not hasattr(f, "read") and not os.path.exists(os.fspath(f)):
        raise FileNotFoundError(f"load: no such file: {name}")
    try:
        # our own handle, closed on every path (np.load left it open when the
        # archive turned out truncated)
        with (open(os.fspath(f), "rb") if not hasattr(f, "read") else _Borrowed(f)) as fh:
            return _load_from(fh)
    except (ValueError, KeyError, TypeError, OSError, EOFError, zipfile.BadZipFile, UnicodeDecodeError,
            json.JSONDecodeError, zipfile.LargeZipFile, NotImplementedError, RecursionError) as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        raise ValueError(f"load: {name} is not a valid ctransformer checkpoint "
                         f"(truncated, corrupted, or written by something else): {exc}") from exc
    except Exception as exc:  # noqa: BLE001  (zlib.error, struct.error, ... from a damaged archive)
        raise ValueError(f"load: {name} is not a valid ctransformer checkpoint "
                         f"(truncated, corrupted, or written by something else): {type(exc).__name__}: {exc}") \
            from exc


class _Borrowed:
    """A caller's file object in a ``with`` that does not close it."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh

    def __enter__(self) -> BinaryIO:
        return self.fh

    def __exit__(self, *exc: Any) -> None:
        return None


def _load_from(fh: BinaryIO) -> Any:
    """The object in an open checkpoint (errors are raised as they come)."""
    start = fh.tell() if fh.seekable() else 0
    if fh.seekable():
        if fh.read(4) == b"PK\x03\x04":
            fh.seek(start)
            _check_archive_limits(fh)
        fh.seek(start)
    with np.load(fh, allow_pickle=False) as archive:
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not a checkpoint archive")
        if _STRUCTURE not in archive.files:
            raise ValueError(f"no {_STRUCTURE!r} entry (a foreign .npz, or a torch/pickle file)")
        structure = json.loads(bytes(archive[_STRUCTURE]).decode("utf-8"))
        if not isinstance(structure, dict) or structure.get("format") != _FORMAT:
            raise ValueError("the structure entry is not a ctransformer structure")
        if structure.get("version") != _VERSION:
            raise ValueError(f"unsupported checkpoint version {structure.get('version')!r}")
        arrays = {k: archive[k] for k in archive.files if k != _STRUCTURE}
    return _Decoder(arrays).decode(structure["root"])
