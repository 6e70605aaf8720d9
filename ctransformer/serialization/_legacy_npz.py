"""Reading the checkpoints ctransformer wrote before it spoke PyTorch's format.

Those files are ``.npz`` archives (whatever the file name): every array is
one member ``a<N>`` and the member ``__ctransformer__`` holds the object's
structure as UTF-8 JSON.  Nothing in them is pickled.  ``load`` still reads
them (``ctransformer.serialization.migrate`` rewrites one in the new format).
"""
from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, BinaryIO, Dict

import numpy as np

from ..tensor import Tensor

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

    def decode(self, node: dict) -> Any:
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
            return self.arrays[node["k"]][()]
        if kind == "tensor":
            return self._tensor(node)
        if kind in ("dict", "odict"):
            pairs = [(self.decode(k), self.decode(v)) for k, v in node["items"]]
            return OrderedDict(pairs) if kind == "odict" else dict(pairs)
        if kind == "list":
            return [self.decode(v) for v in node["items"]]
        if kind == "tuple":
            return tuple(self.decode(v) for v in node["items"])
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



def load_legacy(f: BinaryIO) -> Any:
    """Decode a legacy ``.npz`` checkpoint from an open binary file."""
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
