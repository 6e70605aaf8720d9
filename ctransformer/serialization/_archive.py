"""PyTorch's checkpoint container: a zip of uncompressed records.

``torch.save`` (since 1.6) writes, under one top-level folder (``archive``
for file objects, the file's base name for paths)::

    archive/data.pkl                 the pickled object (protocol 2)
    archive/.format_version          b"1"
    archive/.storage_alignment       b"64"
    archive/byteorder                b"little"
    archive/data/<key>               each tensor storage's raw bytes, 64-byte aligned
    archive/version                  b"3\\n"
    archive/.data/serialization_id   a 40-digit id

The reader checks the archive before trusting it: member count, declared
sizes against the file's size and :class:`Limits`, stored (uncompressed)
storages of exactly the size their pickle announces, and CRCs on read.
"""
from __future__ import annotations

import os
import struct
import zipfile
from dataclasses import dataclass
from typing import BinaryIO, Dict, Iterable, Tuple

import numpy as np

ALIGNMENT = 64
PREFIX = "archive"


@dataclass
class Limits:
    """Bounds a checkpoint must respect before ``load`` reads it (a hostile
    file cannot make us allocate beyond them).  Change them on
    ``ctransformer.serialization.limits`` for unusual checkpoints."""

    max_members: int = 1_000_000              # zip entries
    max_pickle_bytes: int = 1 << 30           # data.pkl
    max_total_bytes: int = 1 << 40            # sum of the members' declared sizes
    max_compression_ratio: int = 200          # for deflated members (torch stores them uncompressed)
    max_dims: int = 64                        # tensor dimensions
    max_expanded_bytes: int = 1 << 28         # a stride-0 view may grow a storage to this many bytes
    max_structure_bytes: int = 64 << 20       # a legacy .npz checkpoint's JSON structure entry
    max_depth: int = 200                      # nesting of a legacy checkpoint's structure


limits = Limits()


def _aligned_extra(offset: int, name: str) -> bytes:
    """An extra field padding the local header so the member's data starts on
    a 64-byte boundary (what torch does, so storages can be memory-mapped)."""
    header = 30 + len(name.encode("utf-8"))
    pad = (-(offset + header + 4)) % ALIGNMENT
    return b"FB" + struct.pack("<H", pad) + b"Z" * pad


class ArchiveWriter:
    """Writes the records of one checkpoint to an open binary file."""

    def __init__(self, fileobj: BinaryIO, prefix: str = PREFIX) -> None:
        self._file = fileobj
        self._base = fileobj.tell()
        self._zip = zipfile.ZipFile(fileobj, "w", compression=zipfile.ZIP_STORED, allowZip64=True)
        self._prefix = prefix

    def write_record(self, name: str, data: "bytes | memoryview", align: bool = False) -> None:
        full = f"{self._prefix}/{name}"
        info = zipfile.ZipInfo(full, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_STORED
        info.create_system = 0
        if align:
            info.extra = _aligned_extra(self._file.tell() - self._base, full)
        view = memoryview(data).cast("B")
        with self._zip.open(info, "w", force_zip64=view.nbytes >= (1 << 31)) as out:
            step = 1 << 26
            for start in range(0, view.nbytes, step):
                out.write(view[start:start + step])

    def write_checkpoint(self, pickled: bytes, storages: Iterable[Tuple[str, np.ndarray]],
                         serialization_id: str) -> None:
        self.write_record("data.pkl", pickled)
        self.write_record(".format_version", b"1")
        self.write_record(".storage_alignment", str(ALIGNMENT).encode())
        self.write_record("byteorder", b"little")
        for key, arr in storages:
            self.write_record(f"data/{key}", arr.reshape(-1).view(np.uint8) if arr.size else b"", align=True)
        self.write_record("version", b"3\n")
        self.write_record(".data/serialization_id", serialization_id.encode())

    def close(self) -> None:
        self._zip.close()


class ArchiveReader:
    """The records of one checkpoint (an open ``zipfile.ZipFile``), checked."""

    def __init__(self, zf: zipfile.ZipFile, file_size: int, lim: Limits) -> None:
        self.zf = zf
        self.limits = lim
        infos = zf.infolist()
        if len(infos) > lim.max_members:
            raise ValueError(f"{len(infos)} zip members (limit {lim.max_members})")
        pickles = [i.filename for i in infos if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
        if len(pickles) != 1:
            raise ValueError("no single <folder>/data.pkl record and no __ctransformer__ member: neither a "
                             "PyTorch-format checkpoint nor one an earlier ctransformer wrote")
        self.prefix = pickles[0][: -len("data.pkl")]
        total = 0
        self.members: Dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            if not info.filename.startswith(self.prefix):
                raise ValueError(f"member {info.filename!r} is outside {self.prefix!r}")
            if info.compress_type == zipfile.ZIP_STORED:
                if info.compress_size != info.file_size or info.header_offset + info.file_size > file_size:
                    raise ValueError(f"member {info.filename!r} declares {info.file_size} bytes the file "
                                     "does not hold (truncated or forged)")
            elif info.compress_type == zipfile.ZIP_DEFLATED:
                if info.file_size > lim.max_compression_ratio * max(info.compress_size, 1):
                    raise ValueError(f"member {info.filename!r} would inflate {info.compress_size} bytes to "
                                     f"{info.file_size} (a zip bomb?)")
            else:
                raise ValueError(f"member {info.filename!r} uses unsupported compression {info.compress_type}")
            total += info.file_size
            self.members[info.filename[len(self.prefix):]] = info
        if total > lim.max_total_bytes:
            raise ValueError(f"members declare {total} bytes in all (limit {lim.max_total_bytes})")
        if self.members["data.pkl"].file_size > lim.max_pickle_bytes:
            raise ValueError(f"data.pkl is {self.members['data.pkl'].file_size} bytes "
                             f"(limit {lim.max_pickle_bytes})")
        version = self.members.get("version")
        if version is not None:
            text = self.read_small("version").strip()
            if not text.isdigit() or int(text) > 10:
                raise ValueError(f"unsupported archive version {text[:20]!r}")

    def read_small(self, name: str) -> str:
        with self.zf.open(self.members[name]) as f:
            return f.read(64).decode("ascii", "replace")

    def read_pickle(self) -> bytes:
        with self.zf.open(self.members["data.pkl"]) as f:
            return f.read()

    def read_storage(self, key: str, dtype: np.dtype, numel: int) -> np.ndarray:
        info = self.members.get(f"data/{key}")
        if info is None:
            raise ValueError(f"storage {key!r} is missing from the archive")
        nbytes = numel * dtype.itemsize
        if info.file_size != nbytes:
            raise ValueError(f"storage {key!r} holds {info.file_size} bytes, its tensor needs {nbytes}")
        arr = np.empty(numel, dtype)
        with self.zf.open(info) as f:
            view = memoryview(arr).cast("B") if numel else memoryview(bytearray())
            got = 0
            while got < nbytes:
                n = f.readinto(view[got:])
                if not n:
                    raise ValueError(f"storage {key!r} ends early")
                got += n
            if f.read(1):
                raise ValueError(f"storage {key!r} is longer than declared")
        return arr


def file_size_of(f: BinaryIO) -> int:
    """Bytes in a seekable binary file (position kept)."""
    pos = f.tell()
    end = f.seek(0, os.SEEK_END)
    f.seek(pos)
    return end
