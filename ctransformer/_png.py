"""A dependency-free PNG writer for heatmaps (used when matplotlib is absent)."""
from __future__ import annotations

import struct
import zlib

import numpy as np

# A few anchor colours of a perceptually ordered map (dark blue -> yellow).
_ANCHORS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], float)


def _colour(values: np.ndarray) -> np.ndarray:
    v = np.clip(values, 0.0, 1.0) * (len(_ANCHORS) - 1)
    lo = np.floor(v).astype(int).clip(0, len(_ANCHORS) - 2)
    frac = (v - lo)[..., None]
    return (_ANCHORS[lo] * (1 - frac) + _ANCHORS[lo + 1] * frac).astype(np.uint8)


def write_heatmap_png(path: str, matrix: np.ndarray, cell: int = 24) -> None:
    """Write ``matrix`` (rows, cols), scaled to [0, 1], as a PNG of cell x cell squares."""
    m = np.asarray(matrix, dtype=np.float64)
    span = m.max() - m.min() if m.size else 0.0
    scaled = (m - m.min()) / span if span > 0 else np.zeros_like(m)
    rgb = _colour(np.kron(scaled, np.ones((cell, cell))))
    height, width = rgb.shape[:2]
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(png)
