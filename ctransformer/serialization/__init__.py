"""save / load in PyTorch's own checkpoint format.

``ctransformer.save(obj, f)`` writes what ``torch.save`` writes (a zip of
``archive/data.pkl`` plus one raw record per tensor storage, see
``_archive.py``), so ``torch.load(path, weights_only=True)`` reads our state
dicts, and ``ctransformer.load`` reads files ``torch.save`` wrote: state
dicts, optimizer state dicts, nested containers.

Loading is safe by default exactly as in torch >= 2.6: ``weights_only=True``
admits only tensors, plain containers and numbers (plus NumPy arrays and
scalars of non-object dtypes) unless the caller allows more with
:func:`add_safe_globals` / :func:`safe_globals`; ``weights_only=False``
unpickles anything (trusted files only).  Whole modules (``save(model)``)
work under those rules for ctransformer's ``nn`` classes and user
subclasses: list them in ``safe_globals``, as PyTorch requires.

Guarantees kept from the earlier format:
  * a path is written atomically: a temporary file next to it, flushed and
    fsync'ed, then ``os.replace``-d; the temporary file is removed on any
    error or interrupt, and ones left by killed processes are swept on the
    next save to the same path (ctransformer/_atomic.py, which
    plotting.save_figure uses too);
  * a truncated, corrupted, foreign or oversized file (see :data:`limits`)
    raises :class:`CheckpointError` (a ValueError and a RuntimeError)
    naming the path; no file handle stays open on any path through here;
  * checkpoints written by earlier ctransformer versions (``.npz`` with a
    ``__ctransformer__`` member) still load; :func:`migrate` rewrites one
    in the new format.
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import zipfile
from typing import Any, BinaryIO, Iterator, Optional, Tuple, Union

import numpy as np

from .._atomic import write_atomically
from . import _legacy_npz
from ._archive import ArchiveReader, ArchiveWriter, Limits, file_size_of, limits
from ._pickler import TorchPickler
from ._unpickler import (BFLOAT16, CheckpointUnpickler, LoadContext, Storage, UnsafeGlobal, add_safe_globals,
                         clear_safe_globals, get_safe_globals, safe_globals)

__all__ = ["save", "load", "migrate", "add_safe_globals", "safe_globals", "get_safe_globals",
           "clear_safe_globals", "CheckpointError", "Limits", "limits", "DEFAULT_PROTOCOL"]

DEFAULT_PROTOCOL = 2
PathLike = Union[str, "os.PathLike[str]"]


class CheckpointError(ValueError, RuntimeError):
    """A file that is not an intact checkpoint (truncated, corrupted, foreign
    or beyond :data:`limits`).  A ValueError (ctransformer's promise) and a
    RuntimeError (what torch.load raises for a damaged archive)."""


# ---------------------------------------------------------------- saving
def _pickle(obj: Any) -> Tuple[bytes, list]:
    buf = io.BytesIO()
    pickler = TorchPickler(buf)
    try:
        pickler.dump(obj)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        where = _locate_unpicklable(obj, "obj")
        raise pickle.PicklingError(f"save: cannot store {where}: {exc}") from exc
    return buf.getvalue(), pickler.storages


def _locate_unpicklable(obj: Any, where: str, depth: int = 0) -> str:
    """The path (``obj['bad'][1]``) of the first value that will not pickle."""
    if depth < 50:
        items: Optional[Iterator[Tuple[str, Any]]] = None
        if isinstance(obj, dict):
            items = ((f"{where}[{k!r}]", v) for k, v in obj.items())
        elif isinstance(obj, (list, tuple)):
            items = ((f"{where}[{i}]", v) for i, v in enumerate(obj))
        if items is not None:
            for sub, value in items:
                try:
                    TorchPickler(io.BytesIO()).dump(value)
                except Exception:  # noqa: BLE001  (whatever pickle raised for this value)
                    return _locate_unpicklable(value, sub, depth + 1)
    return f"an object of type {type(obj).__name__} at {where}"


def _serialization_id(pickled: bytes, storages: list) -> str:
    """The 40-digit record torch writes, here derived from the content so
    that saving the same object twice gives the same bytes."""
    digest = hashlib.sha256(pickled)
    for key, arr in storages:
        digest.update(f"{key}:{arr.dtype.str}:{arr.size}".encode())
        digest.update(memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else b"")
    return str(int.from_bytes(digest.digest()[:16], "big")).zfill(40)[-40:]


def _write(fileobj: BinaryIO, pickled: bytes, storages: list) -> None:
    writer = ArchiveWriter(fileobj)
    try:
        writer.write_checkpoint(pickled, storages, _serialization_id(pickled, storages))
    finally:
        writer.close()


def save(obj: Any, f: Union[PathLike, BinaryIO], pickle_module: Any = None, pickle_protocol: int = DEFAULT_PROTOCOL,
         _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False) -> None:
    """Write ``obj`` to ``f`` (a path, written atomically, or a writable
    binary file object) in PyTorch's checkpoint format (torch.save).
    Anything picklable can be saved; tensors are stored as raw little-endian
    records.  ``pickle_module`` / ``pickle_protocol`` are accepted for
    torch's signature; the format is always protocol 2 as torch writes it."""
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("save: only the standard pickle module is supported")
    if not _use_new_zipfile_serialization:
        raise ValueError("save: the legacy (pre-1.6) torch format is not written; use the zip format")
    pickled, storages = _pickle(obj)
    if hasattr(f, "write"):
        _write(f, pickled, storages)  # type: ignore[arg-type]
        return
    write_atomically(f, lambda out: _write(out, pickled, storages))


# ---------------------------------------------------------------- loading
_DAMAGE = (ValueError, KeyError, IndexError, TypeError, EOFError, zipfile.BadZipFile, UnicodeDecodeError,
           zipfile.LargeZipFile, NotImplementedError, OverflowError, MemoryError, AttributeError,
           pickle.UnpicklingError, OSError)


_CUDA_MAP_ERROR = ("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. "
                   "If you are running on a CPU-only machine, please use torch.load with "
                   "map_location=torch.device('cpu') to map your storages to the CPU.")


def _refuse_device_map(map_location: Any) -> None:
    """A map_location that sends storages to a device other than the CPU (a dict: any of its targets):
    torch's CPU build's RuntimeError."""
    from ..tensor import device
    targets = list(map_location.values()) if isinstance(map_location, dict) else [map_location]
    for target in targets:
        if target is None or callable(target) and not isinstance(target, device):
            continue
        kind = device(target).type if isinstance(target, (str, device)) else "cpu"
        if kind == "cuda":
            raise RuntimeError(_CUDA_MAP_ERROR)
        if kind != "cpu":
            raise RuntimeError(f"load: map_location {str(target)!r}: ctransformer runs on the CPU only "
                               "(use map_location='cpu')")


def load(f: Union[PathLike, BinaryIO], map_location: Any = None, pickle_module: Any = None, *,
         weights_only: Optional[bool] = None, mmap: Optional[bool] = None, **pickle_load_args: Any) -> Any:
    """Read a checkpoint written by :func:`save`, by ``torch.save`` (zip
    format), or by earlier ctransformer versions (torch.load's signature).

    ``weights_only`` defaults to True (torch >= 2.6): only tensors, plain
    containers and allowed globals are unpickled.  ``map_location``: None,
    "cpu", a callable or a dict are accepted (everything lives on the CPU);
    mapping onto CUDA (or another device) is refused as torch's CPU build
    refuses it (RuntimeError).  Raises FileNotFoundError for a
    missing path, ``pickle.UnpicklingError`` for a global a weights-only load
    refuses, and :class:`CheckpointError` naming the file for anything that
    is not an intact checkpoint."""
    restricted = True if weights_only is None else bool(weights_only)
    _refuse_device_map(map_location)
    if hasattr(f, "read"):
        name = repr(getattr(f, "name", "<file object>"))
        return _load_open(f, name, restricted)  # type: ignore[arg-type]
    path = os.fspath(f)
    name = repr(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"load: no such file: {name}")
    with open(path, "rb") as fh:
        return _load_open(fh, name, restricted)


def _load_open(fh: BinaryIO, name: str, restricted: bool) -> Any:
    start = fh.tell()
    try:
        size = file_size_of(fh) - start
        with zipfile.ZipFile(fh) as zf:
            names = set(zf.namelist())
            if _legacy_npz.is_legacy(names):
                legacy = True
            else:
                legacy = False
                return _load_archive(ArchiveReader(zf, size, limits), restricted)
        if legacy:
            fh.seek(start)
            return _legacy_npz.load_legacy(fh)
    except UnsafeGlobal as exc:
        raise UnsafeGlobal(f"load: {name}: {exc}") from None
    except pickle.UnpicklingError as exc:
        if restricted and "does not provide" not in str(exc) and "pickled by PyTorch" not in str(exc):
            raise _bad(name, exc) from exc
        raise type(exc)(f"load: {name}: {exc}") from exc
    except _DAMAGE as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        raise _bad(name, exc) from exc
    except Exception as exc:  # noqa: BLE001  (zlib.error, struct.error, ... from a damaged archive)
        raise _bad(name, exc) from exc
    raise AssertionError("unreachable")


def _bad(name: str, exc: BaseException) -> CheckpointError:
    return CheckpointError(f"load: {name} is not a valid ctransformer checkpoint "
                           f"(truncated, corrupted, or written by something else): {type(exc).__name__}: {exc}")


def _load_archive(reader: ArchiveReader, restricted: bool) -> Any:
    def read_storage(key: str, dtype: Any, numel: int) -> Storage:
        if dtype == BFLOAT16:
            return Storage(reader.read_storage(key, np.dtype(np.uint16), numel), bfloat16=True)
        return Storage(reader.read_storage(key, np.dtype(dtype), numel))

    ctx = LoadContext(read_storage, reader.limits)
    data = reader.read_pickle()
    unpickler = CheckpointUnpickler(io.BytesIO(data), ctx, restricted)
    return unpickler.load()


def migrate(path: PathLike) -> bool:
    """Rewrite a checkpoint of the earlier ``.npz`` format in PyTorch's
    format, in place (atomically).  Returns True if it was rewritten, False
    if it already was in the new format."""
    p = os.fspath(path)
    with open(p, "rb") as fh:
        try:
            with zipfile.ZipFile(fh) as zf:
                legacy = _legacy_npz.is_legacy(set(zf.namelist()))
        except zipfile.BadZipFile as exc:
            raise _bad(repr(p), exc) from exc
    if not legacy:
        return False
    save(load(p), p)
    return True
