"""Reading the checkpoints ctransformer wrote before it spoke PyTorch's format.

Those files are ``.npz`` archives (whatever the file name): every array is
one member ``a<N>`` and the member ``__ctransformer__`` holds the object's
structure as UTF-8 JSON.  Nothing in them is pickled.  ``load`` still reads
them (``ctransformer.serialization.migrate`` rewrites one in the new format).
"""
from __future__ import annotations

import json
import zipfile
from collections import OrderedDict
from typing import Any, BinaryIO, Dict

import numpy as np

from ..tensor import Tensor
from ._archive import limits

STRUCTURE = "__ctransformer__"
_FORMAT = "ctransformer"
_VERSION = 1


def is_legacy(names) -> bool:
    """Whether a zip's member names are those of a legacy checkpoint."""
    return STRUCTURE + ".npy" in names


class _Decoder:
    def __init__(self, arrays: Dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.tensors: Dict[str, Tensor] = {}

    def decode(self, node: dict, depth: int = 0) -> Any:
        if depth > limits.max_depth:
            raise ValueError(f"the structure is nested more than limits.max_depth = {limits.max_depth} levels deep")
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
        from ..nn.parameter import Parameter

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



def _check_sizes(f: BinaryIO) -> None:
    """Refuse, before decompressing anything, a structure entry larger than
    ``limits.max_structure_bytes`` or a member inflating more than
    ``limits.max_compression_ratio`` times its stored size."""
    start = f.tell()
    with zipfile.ZipFile(f) as zf:
        for info in zf.infolist():
            if info.filename == STRUCTURE + ".npy" and info.file_size > limits.max_structure_bytes:
                raise ValueError(f"the structure entry holds {info.file_size} bytes, more than "
                                 f"limits.max_structure_bytes = {limits.max_structure_bytes}")
            ratio = limits.max_compression_ratio
            if info.compress_type != zipfile.ZIP_STORED and info.file_size > ratio * max(info.compress_size, 1):
                raise ValueError(f"member {info.filename!r} inflates from {info.compress_size} to "
                                 f"{info.file_size} bytes, more than limits.max_compression_ratio = {ratio} times")
    f.seek(start)


def load_legacy(f: BinaryIO) -> Any:
    """Decode a legacy ``.npz`` checkpoint from an open binary file."""
    _check_sizes(f)
    with np.load(f, allow_pickle=False) as archive:
        if STRUCTURE not in archive.files:
            raise ValueError(f"no {STRUCTURE!r} entry (a foreign .npz)")
        structure = json.loads(bytes(archive[STRUCTURE]).decode("utf-8"))
        if not isinstance(structure, dict) or structure.get("format") != _FORMAT:
            raise ValueError("the structure entry is not a ctransformer structure")
        if structure.get("version") != _VERSION:
            raise ValueError(f"unsupported checkpoint version {structure.get('version')!r}")
        arrays = {k: archive[k] for k in archive.files if k != STRUCTURE}
    return _Decoder(arrays).decode(structure["root"])
